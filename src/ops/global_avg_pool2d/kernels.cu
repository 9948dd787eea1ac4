// global average pool: y[p] = (sum of plane p, row-major) / area, one thread
// per plane. The planes it serves are small (a network's last feature map,
// 4x4 to 8x8), so a serial sum is short and matches the CPU's order.

extern "C" __global__ void global_avg_pool_forward(const float* x, float* y, unsigned int planes,
                                                   unsigned int area) {
    unsigned int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= planes) return;
    const float* v = x + (size_t)p * area;
    float sum = 0.0f;
    for (unsigned int i = 0; i < area; ++i) sum += v[i];
    y[p] = sum / (float)area;
}

extern "C" __global__ void global_avg_pool_backward(const float* gy, float* gx, unsigned int planes,
                                                    unsigned int area) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < planes * area) gx[i] = gy[i / area] / (float)area;
}
