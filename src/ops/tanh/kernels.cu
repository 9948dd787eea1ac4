// tanh: y = tanh x; backward multiplies the gradient by 1 - y^2.

template <typename T> __device__ void tanh_forward_t(const T* x, T* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = store<T>(tanhf(load(x[i])));
}
extern "C" __global__ void tanh_forward(const float* x, float* y, unsigned int n) {
    PDL_WAIT();
    tanh_forward_t(x, y, n);
}
extern "C" __global__ void tanh_forward_bf16(const bf16* x, bf16* y, unsigned int n) {
    PDL_WAIT();
    tanh_forward_t(x, y, n);
}

template <typename T> __device__ void tanh_backward_t(const T* y, const T* gy, T* gx, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = load(y[i]);
        gx[i] = store<T>(load(gy[i]) * (1.0f - v * v));
    }
}
extern "C" __global__ void tanh_backward(const float* y, const float* gy, float* gx, unsigned int n) {
    PDL_WAIT();
    tanh_backward_t(y, gy, gx, n);
}
extern "C" __global__ void tanh_backward_bf16(const bf16* y, const bf16* gy, bf16* gx, unsigned int n) {
    PDL_WAIT();
    tanh_backward_t(y, gy, gx, n);
}
