// linear's bias; the products themselves are cuBLAS's.

// y[row, j] = b[j]: the product then accumulates onto it (beta = 1).
extern "C" __global__ void bias_rows(const float* b, float* y, unsigned int n, unsigned int out) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n * out) y[i] = b[i % out];
}

// gb[j] = sum over rows of gy[row, j]; one thread per column.
extern "C" __global__ void bias_rows_grad(const float* gy, float* gb, unsigned int n, unsigned int out) {
    unsigned int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= out) return;
    float sum = 0.0f;
    for (unsigned int row = 0; row < n; ++row) sum += gy[(size_t)row * out + j];
    gb[j] = sum;
}
