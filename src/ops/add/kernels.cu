// add: y = a + b elementwise; backward copies dy into each input's own
// gradient buffer (see mod.rs for why never dy itself). Templates over the
// element type (fp32, or bf16 in a mixed-precision step): the sum is fp32's,
// rounded once; the copy moves elements as they are.

template <typename T> __device__ void add_forward_t(const T* a, const T* b, T* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = store<T>(load(a[i]) + load(b[i]));
}
extern "C" __global__ void add_forward(const float* a, const float* b, float* y, unsigned int n) {
    PDL_WAIT();
    add_forward_t(a, b, y, n);
}
extern "C" __global__ void add_forward_bf16(const bf16* a, const bf16* b, bf16* y, unsigned int n) {
    PDL_WAIT();
    add_forward_t(a, b, y, n);
}

template <typename T> __device__ void add_grad_copy_t(const T* gy, T* gx, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) gx[i] = gy[i];
}
extern "C" __global__ void add_grad_copy(const float* gy, float* gx, unsigned int n) {
    PDL_WAIT();
    add_grad_copy_t(gy, gx, n);
}
extern "C" __global__ void add_grad_copy_bf16(const bf16* gy, bf16* gx, unsigned int n) {
    PDL_WAIT();
    add_grad_copy_t(gy, gx, n);
}
