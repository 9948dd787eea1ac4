// lstm_layer: an LSTM layer over a sequence, gates in PyTorch's order
// (i, f, g, o). Per step: the recurrent product, split along K into parts
// written in fp32 (lstm_layer_product), then the pointwise step, one thread
// per (row, unit), which adds the parts up where it reads the product.
// Null pointers are zero. Everything computes in fp32.

#define REC_BM 64
#define REC_BN 32
#define REC_BK 32

// P[z][r][n] = sum over k in part z (k from z·chunk, below K) of A[r·K + k]·B(k, n),
// B(k, n) = Bm[k·sbk + n·sbn]. Blocks of 256 threads: x over column tiles of
// REC_BN, y over (part, row tile of REC_BM). A thread owns one column and
// eight rows; a warp shares its rows (broadcast reads of As).
template <typename T>
__device__ void lstm_layer_product_t(const T* A, const T* Bm, float* P, unsigned int rows, unsigned int cols,
                                     unsigned int K, unsigned int sbk, unsigned int sbn, unsigned int chunk,
                                     unsigned int row_tiles) {
    __shared__ float As[REC_BK][REC_BM + 1];
    __shared__ float Bs[REC_BK][REC_BN + 1];
    unsigned int tid = threadIdx.x;
    unsigned int col0 = blockIdx.x * REC_BN;
    unsigned int row0 = (blockIdx.y % row_tiles) * REC_BM, z = blockIdx.y / row_tiles;
    unsigned int k_begin = z * chunk, k_end = min(K, k_begin + chunk);
    unsigned int c = tid % REC_BN, g = tid / REC_BN;
    float acc[8];
    for (unsigned int i = 0; i < 8; ++i) acc[i] = 0.0f;
    for (unsigned int k0 = k_begin; k0 < k_end; k0 += REC_BK) {
        for (unsigned int e = tid; e < REC_BM * REC_BK; e += 256) {
            unsigned int r = e / REC_BK, kk = e % REC_BK;
            unsigned int row = row0 + r, k = k0 + kk;
            As[kk][r] = (row < rows && k < k_end) ? load(A[(size_t)row * K + k]) : 0.0f;
        }
        for (unsigned int e = tid; e < REC_BN * REC_BK; e += 256) {
            // Consecutive threads along whichever of k and n is contiguous.
            unsigned int n = sbk == 1 ? e / REC_BK : e % REC_BN;
            unsigned int kk = sbk == 1 ? e % REC_BK : e / REC_BN;
            unsigned int col = col0 + n, k = k0 + kk;
            Bs[kk][n] = (col < cols && k < k_end) ? load(Bm[(size_t)k * sbk + (size_t)col * sbn]) : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (unsigned int kk = 0; kk < REC_BK; ++kk) {
            float b = Bs[kk][c];
#pragma unroll
            for (unsigned int i = 0; i < 8; ++i) acc[i] += As[kk][g * 8 + i] * b;
        }
        __syncthreads();
    }
    unsigned int col = col0 + c;
    if (col >= cols) return;
    for (unsigned int i = 0; i < 8; ++i) {
        unsigned int row = row0 + g * 8 + i;
        if (row < rows) P[((size_t)z * rows + row) * cols + col] = acc[i];
    }
}
extern "C" __global__ void lstm_layer_product(const float* A, const float* Bm, float* P, unsigned int rows,
                                              unsigned int cols, unsigned int K, unsigned int sbk, unsigned int sbn,
                                              unsigned int chunk, unsigned int row_tiles) {
    PDL_WAIT();
    lstm_layer_product_t(A, Bm, P, rows, cols, K, sbk, sbn, chunk, row_tiles);
}
extern "C" __global__ void lstm_layer_product_bf16(const bf16* A, const bf16* Bm, float* P, unsigned int rows,
                                                   unsigned int cols, unsigned int K, unsigned int sbk,
                                                   unsigned int sbn, unsigned int chunk, unsigned int row_tiles) {
    PDL_WAIT();
    lstm_layer_product_t(A, Bm, P, rows, cols, K, sbk, sbn, chunk, row_tiles);
}

// The sum of `parts` fp32 partial sums of an [n] array at `at`.
__device__ __forceinline__ float lstm_layer_parts(const float* P, unsigned int parts, size_t n, size_t at) {
    float sum = 0.0f;
    for (unsigned int z = 0; z < parts; ++z) sum += P[z * n + at];
    return sum;
}

// One step forward: gates = x + the recurrent product's parts (none: zero).
// The cells are fp32 whatever T is: a cell sums into itself every step, and
// bf16's 8 bits of mantissa would round that sum away over a sequence.
template <typename T>
__device__ void lstm_layer_step_forward_t(const T* x, const float* from_h, unsigned int parts, const float* c_prev,
                                          T* acts, T* h, float* c, unsigned int batch, unsigned int hidden) {
    unsigned int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= batch * hidden) return;
    unsigned int b = k / hidden, j = k % hidden;
    size_t row = (size_t)b * 4 * hidden, n = (size_t)batch * 4 * hidden;
    float pre[4];
    for (unsigned int q = 0; q < 4; ++q) {
        size_t at = row + q * hidden + j;
        pre[q] = load(x[at]) + lstm_layer_parts(from_h, parts, n, at);
    }
    float i = 1.0f / (1.0f + expf(-pre[0])), f = 1.0f / (1.0f + expf(-pre[1]));
    float g = tanhf(pre[2]), o = 1.0f / (1.0f + expf(-pre[3]));
    float cell = f * (c_prev ? c_prev[k] : 0.0f) + i * g;
    c[k] = cell;
    h[k] = store<T>(o * tanhf(cell));
    acts[row + j] = store<T>(i);
    acts[row + hidden + j] = store<T>(f);
    acts[row + 2 * hidden + j] = store<T>(g);
    acts[row + 3 * hidden + j] = store<T>(o);
}
extern "C" __global__ void lstm_layer_step_forward(const float* x, const float* from_h, unsigned int parts,
                                                   const float* c_prev, float* acts, float* h, float* c,
                                                   unsigned int batch, unsigned int hidden) {
    PDL_WAIT();
    lstm_layer_step_forward_t(x, from_h, parts, c_prev, acts, h, c, batch, hidden);
}
extern "C" __global__ void lstm_layer_step_forward_bf16(const bf16* x, const float* from_h, unsigned int parts,
                                                        const float* c_prev, bf16* acts, bf16* h, float* c,
                                                        unsigned int batch, unsigned int hidden) {
    PDL_WAIT();
    lstm_layer_step_forward_t(x, from_h, parts, c_prev, acts, h, c, batch, hidden);
}

// One step backward. The gradient reaching h is the output's at this step
// (dh) plus what the next step sent back (the parts of carry_h); the
// cell's likewise (dc, carry_in). The cell's gradient for the previous step
// goes to carry_out, which may be carry_in (each thread reads its element
// before writing it). The cells and their gradients are fp32, as forward's.
template <typename T>
__device__ void lstm_layer_step_backward_t(const T* acts, const float* c, const float* c_prev, const T* dh,
                                           const float* dc, const float* carry_h, unsigned int parts,
                                           const float* carry_in, float* carry_out, T* dgates, unsigned int batch,
                                           unsigned int hidden) {
    unsigned int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= batch * hidden) return;
    unsigned int b = k / hidden, j = k % hidden;
    size_t row = (size_t)b * 4 * hidden;
    float i = load(acts[row + j]), f = load(acts[row + hidden + j]);
    float g = load(acts[row + 2 * hidden + j]), o = load(acts[row + 3 * hidden + j]);
    float tc = tanhf(c[k]);
    float dhv = (dh ? load(dh[k]) : 0.0f) + lstm_layer_parts(carry_h, parts, (size_t)batch * hidden, k);
    float dcell = (dc ? dc[k] : 0.0f) + (carry_in ? carry_in[k] : 0.0f) + dhv * o * (1.0f - tc * tc);
    float cp = c_prev ? c_prev[k] : 0.0f;
    dgates[row + j] = store<T>(dcell * g * i * (1.0f - i));
    dgates[row + hidden + j] = store<T>(dcell * cp * f * (1.0f - f));
    dgates[row + 2 * hidden + j] = store<T>(dcell * i * (1.0f - g * g));
    dgates[row + 3 * hidden + j] = store<T>(dhv * tc * o * (1.0f - o));
    carry_out[k] = dcell * f;
}
extern "C" __global__ void lstm_layer_step_backward(const float* acts, const float* c, const float* c_prev,
                                                    const float* dh, const float* dc, const float* carry_h,
                                                    unsigned int parts, const float* carry_in, float* carry_out,
                                                    float* dgates, unsigned int batch, unsigned int hidden) {
    PDL_WAIT();
    lstm_layer_step_backward_t(acts, c, c_prev, dh, dc, carry_h, parts, carry_in, carry_out, dgates, batch, hidden);
}
extern "C" __global__ void lstm_layer_step_backward_bf16(const bf16* acts, const float* c, const float* c_prev,
                                                         const bf16* dh, const float* dc, const float* carry_h,
                                                         unsigned int parts, const float* carry_in, float* carry_out,
                                                         bf16* dgates, unsigned int batch, unsigned int hidden) {
    PDL_WAIT();
    lstm_layer_step_backward_t(acts, c, c_prev, dh, dc, carry_h, parts, carry_in, carry_out, dgates, batch, hidden);
}

// out = the sum of `parts` fp32 partial sums of an [n] array (h0's gradient).
template <typename T>
__device__ void lstm_layer_sum_parts_t(const float* P, unsigned int parts, T* out, unsigned int n) {
    unsigned int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) out[k] = store<T>(lstm_layer_parts(P, parts, n, k));
}
extern "C" __global__ void lstm_layer_sum_parts(const float* P, unsigned int parts, float* out, unsigned int n) {
    PDL_WAIT();
    lstm_layer_sum_parts_t(P, parts, out, n);
}
extern "C" __global__ void lstm_layer_sum_parts_bf16(const float* P, unsigned int parts, bf16* out, unsigned int n) {
    PDL_WAIT();
    lstm_layer_sum_parts_t(P, parts, out, n);
}
