// Kernels the backend itself needs: gradients of a tensor used twice meet here.

extern "C" __global__ void add_assign(float* dst, const float* src, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}
