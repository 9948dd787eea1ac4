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
    global_avg_pool_forward_t(x, y, planes, area);
}
extern "C" __global__ void global_avg_pool_forward_bf16(const bf16* x, bf16* y, unsigned int planes,
                                                        unsigned int area) {
    global_avg_pool_forward_t(x, y, planes, area);
}

template <typename T>
__device__ void global_avg_pool_backward_t(const T* gy, T* gx, unsigned int planes, unsigned int area) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < planes * area) gx[i] = store<T>(load(gy[i / area]) / (float)area);
}
extern "C" __global__ void global_avg_pool_backward(const float* gy, float* gx, unsigned int planes,
                                                    unsigned int area) {
    global_avg_pool_backward_t(gy, gx, planes, area);
}
extern "C" __global__ void global_avg_pool_backward_bf16(const bf16* gy, bf16* gx, unsigned int planes,
                                                         unsigned int area) {
    global_avg_pool_backward_t(gy, gx, planes, area);
}
