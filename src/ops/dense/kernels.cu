// dense: y = dropout(relu(x · Wᵀ + b)) with the epilogue fused into the
// product, and backward as two products that apply the epilogue's masks to
// the upstream gradient while loading it. Tiled 16 × 16 through shared
// memory: the layers of small models are far below what cuBLAS is tuned for,
// and one kernel per product with its epilogue beats three library calls.

#define DENSE_TILE 16
// K tiles a block loads between two barriers: each thread has that many
// loads of each operand in flight, so a product of depth K waits about
// K / (TILE · DEPTH) memory latencies, not K / TILE (the MNIST CNN's first
// dense layer, K = 320, waited 20).
#define DENSE_DEPTH 8u
#define DENSE_SPAN (DENSE_TILE * DENSE_DEPTH)

// C[M × N] = A[M × K] · B[K × N] over k in [kb, K), for the block's tile of
// rows `mt` (and columns blockIdx.x), each element produced by
// `store(m, n, acc)`. `a(m, k)` and `b(k, n)` load the operands; A_M_CONTIG /
// B_K_CONTIG say which index is contiguous in memory, so each tile loads
// coalesced. Each element's sum runs over k in order, whatever DENSE_DEPTH is.
template <bool A_M_CONTIG, bool B_K_CONTIG, class A, class B, class C>
__device__ __forceinline__ void dense_tile(unsigned int M, unsigned int N, unsigned int mt, unsigned int kb,
                                           unsigned int K, A a, B b, C store) {
    // Rows padded so that both the loads' stores and the products' reads
    // fall in distinct banks.
    __shared__ float as[DENSE_TILE][DENSE_SPAN + DENSE_TILE + 1];
    __shared__ float bs[DENSE_SPAN][DENSE_TILE + 1];
    unsigned int tx = threadIdx.x, ty = threadIdx.y;
    unsigned int m0 = mt * DENSE_TILE, n0 = blockIdx.x * DENSE_TILE;
    float acc = 0.0f;
    for (unsigned int k0 = kb; k0 < K; k0 += DENSE_SPAN) {
        float av[DENSE_DEPTH], bv[DENSE_DEPTH];
#pragma unroll
        for (unsigned int d = 0; d < DENSE_DEPTH; d++) {
            unsigned int kt = k0 + d * DENSE_TILE;
            unsigned int am = A_M_CONTIG ? m0 + tx : m0 + ty, ak = A_M_CONTIG ? kt + ty : kt + tx;
            av[d] = (am < M && ak < K) ? a(am, ak) : 0.0f;
            unsigned int bk = B_K_CONTIG ? kt + tx : kt + ty, bn = B_K_CONTIG ? n0 + ty : n0 + tx;
            bv[d] = (bk < K && bn < N) ? b(bk, bn) : 0.0f;
        }
#pragma unroll
        for (unsigned int d = 0; d < DENSE_DEPTH; d++) {
            unsigned int kt = d * DENSE_TILE;
            if (A_M_CONTIG)
                as[tx][kt + ty] = av[d];
            else
                as[ty][kt + tx] = av[d];
            if (B_K_CONTIG)
                bs[kt + tx][ty] = bv[d];
            else
                bs[kt + ty][tx] = bv[d];
        }
        __syncthreads();
        unsigned int tiles = min(DENSE_DEPTH, (K - k0 + DENSE_TILE - 1) / DENSE_TILE);
        for (unsigned int t = 0; t < tiles; t++) {
            unsigned int kt = t * DENSE_TILE;
#pragma unroll
            for (unsigned int k = 0; k < DENSE_TILE; ++k) acc += as[ty][kt + k] * bs[kt + k][tx];
        }
        __syncthreads();
    }
    unsigned int m = m0 + ty, n = n0 + tx;
    if (m < M && n < N) store(m, n, acc);
}

// The epilogue: flags bit 0 = relu, bit 1 = dropout (keep probability 1 - p,
// kept values scaled by `scale`, seed per step from the cursor when given;
// element idx takes draw first + idx).
struct DenseEpilogue {
    unsigned int flags;
    float p, scale;
    unsigned int first;
    unsigned long long seed;
};

__device__ __forceinline__ unsigned long long dense_seed(DenseEpilogue e, const unsigned int* cursor) {
    return cursor != 0 ? cursor_step_seed(e.seed, cursor) : e.seed;
}

extern "C" __global__ void dense_forward(const float* x, const float* w, const float* bias, float* y,
                                         unsigned int n, unsigned int in, unsigned int out, DenseEpilogue e,
                                         const unsigned int* cursor) {
    PDL_WAIT();
    unsigned long long seed = dense_seed(e, cursor);
    dense_tile<false, true>(
        n, out, blockIdx.y, 0, in, [&](unsigned int i, unsigned int k) { return x[(size_t)i * in + k]; },
        [&](unsigned int k, unsigned int j) { return w[(size_t)j * in + k]; },
        [&](unsigned int i, unsigned int j, float acc) {
            float v = acc + (bias != 0 ? bias[j] : 0.0f);
            if (e.flags & 1) v = fmaxf(v, 0.0f);
            unsigned int idx = i * out + j;
            if (e.flags & 2) v = dropout_keep(seed, (unsigned long long)e.first + idx, e.p) ? v * e.scale : 0.0f;
            y[idx] = v;
        });
}

// The upstream gradient through the epilogue: dropped elements get none, kept
// ones are scaled, and the relu passes it where its output was positive
// (for a kept element, where y > 0).
__device__ __forceinline__ float dense_masked(const float* gy, const float* y, unsigned int idx, DenseEpilogue e,
                                              unsigned long long seed) {
    float g = gy[idx];
    if (e.flags & 2) g = dropout_keep(seed, (unsigned long long)e.first + idx, e.p) ? g * e.scale : 0.0f;
    if ((e.flags & 1) && !(y[idx] > 0.0f)) g = 0.0f;
    return g;
}

// gx[n × in] = masked(gy)[n × out] · W[out × in].
extern "C" __global__ void dense_input_grad(const float* gy, const float* y, const float* w, float* gx,
                                            unsigned int n, unsigned int in, unsigned int out, DenseEpilogue e,
                                            const unsigned int* cursor) {
    PDL_WAIT();
    unsigned long long seed = dense_seed(e, cursor);
    dense_tile<false, false>(
        n, in, blockIdx.y, 0, out, [&](unsigned int i, unsigned int j) { return dense_masked(gy, y, i * out + j, e, seed); },
        [&](unsigned int j, unsigned int k) { return w[(size_t)j * in + k]; },
        [&](unsigned int i, unsigned int k, float acc) { gx[(size_t)i * in + k] = acc; });
}

// gW[out × in] = masked(gy)ᵀ · x, and gb = masked(gy)ᵀ · 1 as one more
// column (when gb is not null), in one kernel. Where `part` is not null the
// batch is split into chunks of `chunk` rows (blockIdx.y = chunk · row tiles
// + row tile), each writing its sums to its slice of `part` for
// dense_weight_grad_sum to add in chunk order: a product of few outputs over
// a long batch (the MNIST CNN's first layer at batch 1000: 84 tiles, 1000
// rows deep) otherwise leaves most of the GPU idle.
extern "C" __global__ void dense_weight_grad(const float* gy, const float* y, const float* x, float* gw, float* gb,
                                             float* part, unsigned int n, unsigned int in, unsigned int out,
                                             unsigned int chunk, DenseEpilogue e, const unsigned int* cursor) {
    PDL_WAIT();
    unsigned long long seed = dense_seed(e, cursor);
    unsigned int cols = gb != 0 ? in + 1 : in;
    unsigned int tiles = (out + DENSE_TILE - 1) / DENSE_TILE;
    unsigned int c = blockIdx.y / tiles, kb = c * chunk, ke = part != 0 ? min(n, kb + chunk) : n;
    float* slice = part != 0 ? part + (size_t)c * out * cols : part;
    dense_tile<true, false>(
        out, cols, blockIdx.y % tiles, kb, ke,
        [&](unsigned int j, unsigned int i) { return dense_masked(gy, y, i * out + j, e, seed); },
        [&](unsigned int i, unsigned int k) { return k < in ? x[(size_t)i * in + k] : 1.0f; },
        [&](unsigned int j, unsigned int k, float acc) {
            if (part != 0)
                slice[(size_t)j * cols + k] = acc;
            else if (k < in)
                gw[(size_t)j * in + k] = acc;
            else
                gb[j] = acc;
        });
}

// The chunks' sums added in chunk order: the same bits on every run.
extern "C" __global__ void dense_weight_grad_sum(const float* part, float* gw, float* gb, unsigned int in,
                                                 unsigned int out, unsigned int chunks) {
    PDL_WAIT();
    unsigned int cols = gb != 0 ? in + 1 : in;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= out * cols) return;
    float sum = part[i];
    for (unsigned int c = 1; c < chunks; c++) sum += part[(size_t)c * out * cols + i];
    unsigned int j = i / cols, k = i % cols;
    if (k < in)
        gw[(size_t)j * in + k] = sum;
    else
        gb[j] = sum;
}
