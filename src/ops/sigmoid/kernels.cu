// sigmoid: y = 1 / (1 + e^-x); backward multiplies the gradient by y (1 - y).

template <typename T> __device__ void sigmoid_forward_t(const T* x, T* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = store<T>(1.0f / (1.0f + expf(-load(x[i]))));
}
extern "C" __global__ void sigmoid_forward(const float* x, float* y, unsigned int n) {
    PDL_WAIT();
    sigmoid_forward_t(x, y, n);
}
extern "C" __global__ void sigmoid_forward_bf16(const bf16* x, bf16* y, unsigned int n) {
    PDL_WAIT();
    sigmoid_forward_t(x, y, n);
}

template <typename T> __device__ void sigmoid_backward_t(const T* y, const T* gy, T* gx, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = load(y[i]);
        gx[i] = store<T>(load(gy[i]) * v * (1.0f - v));
    }
}
extern "C" __global__ void sigmoid_backward(const float* y, const float* gy, float* gx, unsigned int n) {
    PDL_WAIT();
    sigmoid_backward_t(y, gy, gx, n);
}
extern "C" __global__ void sigmoid_backward_bf16(const bf16* y, const bf16* gy, bf16* gx, unsigned int n) {
    PDL_WAIT();
    sigmoid_backward_t(y, gy, gx, n);
}
