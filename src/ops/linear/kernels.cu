// linear's bias; the products themselves are cuBLAS's.

// y[row, j] = b[j]: the product then accumulates onto it (beta = 1).
template <typename T> __device__ void bias_rows_t(const T* b, T* y, unsigned int n, unsigned int out) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n * out) y[i] = b[i % out];
}
extern "C" __global__ void bias_rows(const float* b, float* y, unsigned int n, unsigned int out) {
    bias_rows_t(b, y, n, out);
}
extern "C" __global__ void bias_rows_bf16(const bf16* b, bf16* y, unsigned int n, unsigned int out) {
    bias_rows_t(b, y, n, out);
}

// gb[j] = sum over rows of gy[row, j] (in fp32); one thread per column.
template <typename T> __device__ void bias_rows_grad_t(const T* gy, T* gb, unsigned int n, unsigned int out) {
    unsigned int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= out) return;
    float sum = 0.0f;
    for (unsigned int row = 0; row < n; ++row) sum += load(gy[(size_t)row * out + j]);
    gb[j] = store<T>(sum);
}
extern "C" __global__ void bias_rows_grad(const float* gy, float* gb, unsigned int n, unsigned int out) {
    bias_rows_grad_t(gy, gb, n, out);
}
extern "C" __global__ void bias_rows_grad_bf16(const bf16* gy, bf16* gb, unsigned int n, unsigned int out) {
    bias_rows_grad_t(gy, gb, n, out);
}
