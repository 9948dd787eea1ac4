// relu: y = max(x, 0); backward passes the gradient where y > 0.

template <typename T> __device__ void relu_forward_t(const T* x, T* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = store<T>(fmaxf(load(x[i]), 0.0f));
}
extern "C" __global__ void relu_forward(const float* x, float* y, unsigned int n) {
    PDL_WAIT();
    relu_forward_t(x, y, n);
}
extern "C" __global__ void relu_forward_bf16(const bf16* x, bf16* y, unsigned int n) {
    PDL_WAIT();
    relu_forward_t(x, y, n);
}

template <typename T> __device__ void relu_backward_t(const T* y, const T* gy, T* gx, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) gx[i] = load(y[i]) > 0.0f ? gy[i] : store<T>(0.0f);
}
extern "C" __global__ void relu_backward(const float* y, const float* gy, float* gx, unsigned int n) {
    PDL_WAIT();
    relu_backward_t(y, gy, gx, n);
}
extern "C" __global__ void relu_backward_bf16(const bf16* y, const bf16* gy, bf16* gx, unsigned int n) {
    PDL_WAIT();
    relu_backward_t(y, gy, gx, n);
}
