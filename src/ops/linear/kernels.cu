// linear's bias; the products themselves are cuBLAS's.

// y[row, j] = b[j]: the product then accumulates onto it (beta = 1).
template <typename T> __device__ void bias_rows_t(const T* b, T* y, unsigned int n, unsigned int out) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n * out) y[i] = b[i % out];
}
extern "C" __global__ void bias_rows(const float* b, float* y, unsigned int n, unsigned int out) {
    PDL_WAIT();
    bias_rows_t(b, y, n, out);
}
extern "C" __global__ void bias_rows_bf16(const bf16* b, bf16* y, unsigned int n, unsigned int out) {
    PDL_WAIT();
    bias_rows_t(b, y, n, out);
}

// gb[j] = sum over rows of gy[row, j] (in fp32). Blocks of 32 × 32 threads
// over 32 columns: 32 lanes of rows each sum every 32nd row (a warp reads
// 128 contiguous bytes of a row), then the lanes' sums are added in a fixed
// order, so the result does not vary from run to run. One thread per
// column walked all 8,192 rows of a language model's logits alone (246 µs).
template <typename T> __device__ void bias_rows_grad_t(const T* gy, T* gb, unsigned int n, unsigned int out) {
    __shared__ float lanes[32][33];
    unsigned int j = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (j < out) {
        for (unsigned int row = threadIdx.y; row < n; row += 32) sum += load(gy[(size_t)row * out + j]);
    }
    lanes[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || j >= out) return;
    float total = 0.0f;
    for (unsigned int lane = 0; lane < 32; ++lane) total += lanes[lane][threadIdx.x];
    gb[j] = store<T>(total);
}
extern "C" __global__ void bias_rows_grad(const float* gy, float* gb, unsigned int n, unsigned int out) {
    PDL_WAIT();
    bias_rows_grad_t(gy, gb, n, out);
}
extern "C" __global__ void bias_rows_grad_bf16(const bf16* gy, bf16* gb, unsigned int n, unsigned int out) {
    PDL_WAIT();
    bias_rows_grad_t(gy, gb, n, out);
}
