// onehot_linear: W [rows, vocab] times onehot(tokens[n]) plus a bias, as a
// gather of W's columns. A token past W gives a NaN row (a kernel cannot
// report it; the loss turns NaN).

template <typename T>
__device__ void onehot_linear_forward_t(const T* w, const T* bias, const unsigned int* tokens, T* out,
                                        unsigned int n, unsigned int rows, unsigned int vocab) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * rows) return;
    unsigned int t = tokens[i / rows], r = i % rows;
    out[i] = t < vocab ? store<T>(load(w[(size_t)r * vocab + t]) + load(bias[r])) : store<T>(__int_as_float(0x7fc00000));
}
extern "C" __global__ void onehot_linear_forward(const float* w, const float* bias, const unsigned int* tokens,
                                                 float* out, unsigned int n, unsigned int rows, unsigned int vocab) {
    PDL_WAIT();
    onehot_linear_forward_t(w, bias, tokens, out, n, rows, vocab);
}
extern "C" __global__ void onehot_linear_forward_bf16(const bf16* w, const bf16* bias, const unsigned int* tokens,
                                                      bf16* out, unsigned int n, unsigned int rows, unsigned int vocab) {
    PDL_WAIT();
    onehot_linear_forward_t(w, bias, tokens, out, n, rows, vocab);
}

// One thread per element (r, v) of W's gradient: the sum of gy[j, r] over
// the tokens j equal to v, in the order of j (the CPU's order: the same
// sums), the tokens read through shared memory a tile at a time, as
// embedding_backward does.
template <typename T>
__device__ void onehot_linear_weight_grad_t(const unsigned int* tokens, const T* gy, T* gw, unsigned int n,
                                            unsigned int rows, unsigned int vocab) {
    __shared__ unsigned int tile[256];
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    bool mine = i < rows * vocab;
    unsigned int r = mine ? i / vocab : 0u, v = mine ? i % vocab : 0xffffffffu;
    float sum = 0.0f;
    for (unsigned int start = 0; start < n; start += blockDim.x) {
        unsigned int k = start + threadIdx.x;
        tile[threadIdx.x] = k < n ? tokens[k] : 0xffffffffu;
        __syncthreads();
        unsigned int count = min(blockDim.x, n - start);
        for (unsigned int j = 0; j < count; ++j) {
            if (tile[j] == v) sum += load(gy[(size_t)(start + j) * rows + r]);
        }
        __syncthreads();
    }
    if (mine) gw[i] = store<T>(sum);
}
extern "C" __global__ void onehot_linear_weight_grad(const unsigned int* tokens, const float* gy, float* gw,
                                                     unsigned int n, unsigned int rows, unsigned int vocab) {
    PDL_WAIT();
    onehot_linear_weight_grad_t(tokens, gy, gw, n, rows, vocab);
}
extern "C" __global__ void onehot_linear_weight_grad_bf16(const unsigned int* tokens, const bf16* gy, bf16* gw,
                                                          unsigned int n, unsigned int rows, unsigned int vocab) {
    PDL_WAIT();
    onehot_linear_weight_grad_t(tokens, gy, gw, n, rows, vocab);
}

// One thread per bias element: the sum of its column of gy, in row order.
template <typename T>
__device__ void onehot_linear_bias_grad_t(const T* gy, T* gb, unsigned int n, unsigned int rows) {
    unsigned int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float sum = 0.0f;
    for (unsigned int j = 0; j < n; ++j) sum += load(gy[(size_t)j * rows + r]);
    gb[r] = store<T>(sum);
}
extern "C" __global__ void onehot_linear_bias_grad(const float* gy, float* gb, unsigned int n, unsigned int rows) {
    PDL_WAIT();
    onehot_linear_bias_grad_t(gy, gb, n, rows);
}
extern "C" __global__ void onehot_linear_bias_grad_bf16(const bf16* gy, bf16* gb, unsigned int n, unsigned int rows) {
    PDL_WAIT();
    onehot_linear_bias_grad_t(gy, gb, n, rows);
}
