// conv2d's bias; the convolutions themselves are cuDNN's. `nhwc`: the output
// is channels last (a bf16 step's), filter f of pixel p at (img*p + p)*f + f.

// y[img, f, p] += b[f] over `n` images of `f` planes of `p` pixels.
template <typename T>
__device__ void conv_bias_add_t(const T* b, T* y, unsigned int n, unsigned int f, unsigned int p, unsigned int nhwc) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n * f * p) y[i] = store<T>(load(y[i]) + load(b[nhwc ? i % f : (i / p) % f]));
}
extern "C" __global__ void conv_bias_add(const float* b, float* y, unsigned int n, unsigned int f, unsigned int p,
                                         unsigned int nhwc) {
    conv_bias_add_t(b, y, n, f, p, nhwc);
}
extern "C" __global__ void conv_bias_add_bf16(const bf16* b, bf16* y, unsigned int n, unsigned int f, unsigned int p,
                                              unsigned int nhwc) {
    conv_bias_add_t(b, y, n, f, p, nhwc);
}

// gb[f] = sum of gy over images and pixels (in fp32); one block of 256 per
// filter.
template <typename T>
__device__ void conv_bias_grad_t(const T* gy, T* gb, unsigned int n, unsigned int f, unsigned int p,
                                 unsigned int nhwc) {
    __shared__ float partial[256];
    unsigned int filter = blockIdx.x;
    float sum = 0.0f;
    for (unsigned int k = threadIdx.x; k < n * p; k += blockDim.x) {
        unsigned int img = k / p, pixel = k % p;
        size_t at = nhwc ? (size_t)k * f + filter : ((size_t)img * f + filter) * p + pixel;
        sum += load(gy[at]);
    }
    // The backend's fixed-order block sum (common.cu).
    float total = block_sum(sum, partial);
    if (threadIdx.x == 0) gb[filter] = store<T>(total);
}
extern "C" __global__ void conv_bias_grad(const float* gy, float* gb, unsigned int n, unsigned int f,
                                          unsigned int p, unsigned int nhwc) {
    conv_bias_grad_t(gy, gb, n, f, p, nhwc);
}
extern "C" __global__ void conv_bias_grad_bf16(const bf16* gy, bf16* gb, unsigned int n, unsigned int f,
                                               unsigned int p, unsigned int nhwc) {
    conv_bias_grad_t(gy, gb, n, f, p, nhwc);
}
