// conv2d's bias; the convolutions themselves are cuDNN's.

// y[img, f, p] += b[f] over `n` images of `f` planes of `p` pixels.
extern "C" __global__ void conv_bias_add(const float* b, float* y, unsigned int n, unsigned int f, unsigned int p) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n * f * p) y[i] += b[(i / p) % f];
}

// gb[f] = sum of gy over images and pixels; one block of 256 per filter.
extern "C" __global__ void conv_bias_grad(const float* gy, float* gb, unsigned int n, unsigned int f,
                                          unsigned int p) {
    __shared__ float partial[256];
    unsigned int filter = blockIdx.x;
    float sum = 0.0f;
    for (unsigned int k = threadIdx.x; k < n * p; k += blockDim.x) {
        unsigned int img = k / p, pixel = k % p;
        sum += gy[((size_t)img * f + filter) * p + pixel];
    }
    // The backend's fixed-order block sum (common.cu).
    float total = block_sum(sum, partial);
    if (threadIdx.x == 0) gb[filter] = total;
}
