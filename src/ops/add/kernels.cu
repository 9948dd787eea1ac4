// add: y = a + b elementwise; backward copies dy into each input's own
// gradient buffer (see mod.rs for why never dy itself).

extern "C" __global__ void add_forward(const float* a, const float* b, float* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i] + b[i];
}

extern "C" __global__ void add_grad_copy(const float* gy, float* gx, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) gx[i] = gy[i];
}
