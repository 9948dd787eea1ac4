// embedding: rows of a table [vocab, dim] picked by token. A token past the
// table gives a NaN row (a kernel cannot report it; the loss turns NaN).

template <typename T>
__device__ void embedding_forward_t(const T* table, const unsigned int* tokens, T* out, unsigned int n,
                                    unsigned int vocab, unsigned int dim) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * dim) return;
    unsigned int t = tokens[i / dim];
    out[i] = t < vocab ? table[(size_t)t * dim + i % dim] : store<T>(__int_as_float(0x7fc00000));
}
extern "C" __global__ void embedding_forward(const float* table, const unsigned int* tokens, float* out,
                                             unsigned int n, unsigned int vocab, unsigned int dim) {
    PDL_WAIT();
    embedding_forward_t(table, tokens, out, n, vocab, dim);
}
extern "C" __global__ void embedding_forward_bf16(const bf16* table, const unsigned int* tokens, bf16* out,
                                                  unsigned int n, unsigned int vocab, unsigned int dim) {
    PDL_WAIT();
    embedding_forward_t(table, tokens, out, n, vocab, dim);
}

// One thread per element (v, e) of the table's gradient: the sum of gy[j, e]
// over the tokens j in [first, last) equal to v, in the order of j, so every
// run adds the same numbers in the same order. The block reads the tokens
// through shared memory, a tile of blockDim.x (at most 256) at a time; every
// thread takes part in loading, including those past the table.
template <typename T, typename U>
__device__ void embedding_backward_t(const unsigned int* tokens, const T* gy, U* grad, unsigned int first,
                                     unsigned int last, unsigned int vocab, unsigned int dim) {
    __shared__ unsigned int tile[256];
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    bool mine = i < vocab * dim;
    unsigned int v = mine ? i / dim : 0xffffffffu, e = mine ? i % dim : 0u;
    float sum = 0.0f;
    for (unsigned int start = first; start < last; start += blockDim.x) {
        unsigned int k = start + threadIdx.x;
        tile[threadIdx.x] = k < last ? tokens[k] : 0xffffffffu;
        __syncthreads();
        unsigned int count = min(blockDim.x, last - start);
        for (unsigned int j = 0; j < count; ++j) {
            if (tile[j] == v) sum += load(gy[(size_t)(start + j) * dim + e]);
        }
        __syncthreads();
    }
    if (mine) grad[i] = store<U>(sum);
}
extern "C" __global__ void embedding_backward(const unsigned int* tokens, const float* gy, float* grad,
                                              unsigned int n, unsigned int vocab, unsigned int dim) {
    PDL_WAIT();
    embedding_backward_t(tokens, gy, grad, 0, n, vocab, dim);
}
extern "C" __global__ void embedding_backward_bf16(const unsigned int* tokens, const bf16* gy, bf16* grad,
                                                   unsigned int n, unsigned int vocab, unsigned int dim) {
    PDL_WAIT();
    embedding_backward_t(tokens, gy, grad, 0, n, vocab, dim);
}

// The same walk over part blockIdx.y of the tokens, `chunk` of them, its sums
// in fp32 at parts[blockIdx.y]: a small table (a character model's 8,320
// elements) is too few threads to walk 8,192 tokens each.
template <typename T>
__device__ void embedding_backward_parts_t(const unsigned int* tokens, const T* gy, float* parts, unsigned int n,
                                           unsigned int vocab, unsigned int dim, unsigned int chunk) {
    unsigned int first = blockIdx.y * chunk;
    embedding_backward_t(tokens, gy, parts + (size_t)blockIdx.y * vocab * dim, first, min(n, first + chunk), vocab,
                         dim);
}
extern "C" __global__ void embedding_backward_parts(const unsigned int* tokens, const float* gy, float* parts,
                                                    unsigned int n, unsigned int vocab, unsigned int dim,
                                                    unsigned int chunk) {
    PDL_WAIT();
    embedding_backward_parts_t(tokens, gy, parts, n, vocab, dim, chunk);
}
extern "C" __global__ void embedding_backward_parts_bf16(const unsigned int* tokens, const bf16* gy, float* parts,
                                                         unsigned int n, unsigned int vocab, unsigned int dim,
                                                         unsigned int chunk) {
    PDL_WAIT();
    embedding_backward_parts_t(tokens, gy, parts, n, vocab, dim, chunk);
}

// grad = the parts' sums added in the parts' order.
template <typename T>
__device__ void embedding_sum_parts_t(const float* parts, unsigned int count, T* grad, unsigned int total) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    float sum = 0.0f;
    for (unsigned int p = 0; p < count; ++p) sum += parts[(size_t)p * total + i];
    grad[i] = store<T>(sum);
}
extern "C" __global__ void embedding_sum_parts(const float* parts, unsigned int count, float* grad,
                                               unsigned int total) {
    PDL_WAIT();
    embedding_sum_parts_t(parts, count, grad, total);
}
extern "C" __global__ void embedding_sum_parts_bf16(const float* parts, unsigned int count, bf16* grad,
                                                    unsigned int total) {
    PDL_WAIT();
    embedding_sum_parts_t(parts, count, grad, total);
}
