// relu: y = max(x, 0); backward passes the gradient where y > 0.

extern "C" __global__ void relu_forward(const float* x, float* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

extern "C" __global__ void relu_backward(const float* y, const float* gy, float* gx, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) gx[i] = y[i] > 0.0f ? gy[i] : 0.0f;
}
