// global average pool: y[p] = (sum of plane p, row-major) / area, one thread
// per plane. The planes it serves are small (a network's last feature map,
// 4x4 to 8x8), so a serial sum is short and matches the CPU's order. Both
// kernels are templates over the element type (fp32, or bf16 in a
// mixed-precision step): the sum and the divide are fp32's, rounded once.

template <typename T>
__device__ void global_avg_pool_forward_t(const T* x, T* y, unsigned int planes, unsigned int area) {
    unsigned int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= planes) return;
    const T* v = x + (size_t)p * area;
    float sum = 0.0f;
    for (unsigned int i = 0; i < area; ++i) sum += load(v[i]);
    y[p] = store<T>(sum / (float)area);
}
extern "C" __global__ void global_avg_pool_forward(const float* x, float* y, unsigned int planes,
                                                   unsigned int area) {
    PDL_WAIT();
    global_avg_pool_forward_t(x, y, planes, area);
}
extern "C" __global__ void global_avg_pool_forward_bf16(const bf16* x, bf16* y, unsigned int planes,
                                                        unsigned int area) {
    PDL_WAIT();
    global_avg_pool_forward_t(x, y, planes, area);
}

template <typename T>
__device__ void global_avg_pool_backward_t(const T* gy, T* gx, unsigned int planes, unsigned int area) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < planes * area) gx[i] = store<T>(load(gy[i / area]) / (float)area);
}
extern "C" __global__ void global_avg_pool_backward(const float* gy, float* gx, unsigned int planes,
                                                    unsigned int area) {
    PDL_WAIT();
    global_avg_pool_backward_t(gy, gx, planes, area);
}
extern "C" __global__ void global_avg_pool_backward_bf16(const bf16* gy, bf16* gx, unsigned int planes,
                                                         unsigned int area) {
    PDL_WAIT();
    global_avg_pool_backward_t(gy, gx, planes, area);
}

// The same pool of a channels-last input: element (n, c, p) at
// x[(n*area + p)*channels + c]. One thread per (n, c), as above, summing its
// `area` values in p's order (the NCHW kernel's order, so both layouts give
// the same bits); neighbouring threads read neighbouring channels, so each
// step of the loop is one coalesced read of a pixel's channels. ResNet's
// head (N x 512 channels) gives N*512 threads: enough to fill the GPU.
template <typename T>
__device__ void global_avg_pool_nhwc_forward_t(const T* x, T* y, unsigned int images, unsigned int channels,
                                               unsigned int area) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= images * channels) return;
    unsigned int n = i / channels, c = i - n * channels;
    const T* v = x + (size_t)n * area * channels + c;
    float sum = 0.0f;
#pragma unroll 4
    for (unsigned int p = 0; p < area; ++p) sum += load(v[(size_t)p * channels]);
    y[i] = store<T>(sum / (float)area);
}
extern "C" __global__ void global_avg_pool_nhwc_forward(const float* x, float* y, unsigned int images,
                                                        unsigned int channels, unsigned int area) {
    PDL_WAIT();
    global_avg_pool_nhwc_forward_t(x, y, images, channels, area);
}
extern "C" __global__ void global_avg_pool_nhwc_forward_bf16(const bf16* x, bf16* y, unsigned int images,
                                                             unsigned int channels, unsigned int area) {
    PDL_WAIT();
    global_avg_pool_nhwc_forward_t(x, y, images, channels, area);
}

// gx[(n*area + p)*channels + c] = gy[n*channels + c] / area: one thread per
// element of gx, written in memory order.
template <typename T>
__device__ void global_avg_pool_nhwc_backward_t(const T* gy, T* gx, unsigned int images, unsigned int channels,
                                                unsigned int area) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int per_image = area * channels;
    if (i >= images * per_image) return;
    unsigned int n = i / per_image, c = i % channels;
    gx[i] = store<T>(load(gy[n * channels + c]) / (float)area);
}
extern "C" __global__ void global_avg_pool_nhwc_backward(const float* gy, float* gx, unsigned int images,
                                                         unsigned int channels, unsigned int area) {
    PDL_WAIT();
    global_avg_pool_nhwc_backward_t(gy, gx, images, channels, area);
}
extern "C" __global__ void global_avg_pool_nhwc_backward_bf16(const bf16* gy, bf16* gx, unsigned int images,
                                                              unsigned int channels, unsigned int area) {
    PDL_WAIT();
    global_avg_pool_nhwc_backward_t(gy, gx, images, channels, area);
}
