// Average pooling with count_include_pad, as PyTorch: output row o covers
// input rows o*stride - pad .. + k clipped to the input; its divisor is the
// window clipped to input + padding (only a ceil-mode last window is
// clipped). The arithmetic mirrors cpu.rs: a row-major sum, then one divide.
// Both kernels are templates over the element type (fp32, or bf16 in a
// mixed-precision step): sums and divides are fp32's, rounded once to `T`.

__device__ __forceinline__ unsigned int avgpool_divisor(unsigned int o, unsigned int len, unsigned int k,
                                                         unsigned int stride, unsigned int pad) {
    unsigned int start = o * stride, end = start + k;
    return (end < len + 2 * pad ? end : len + 2 * pad) - start;
}

template <typename T>
__device__ void avgpool_forward_t(const T* x, T* y, unsigned int planes, unsigned int h, unsigned int w,
                                  unsigned int oh, unsigned int ow, unsigned int k, unsigned int stride,
                                  unsigned int pad) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= planes * oh * ow) return;
    unsigned int plane = i / (oh * ow), r = (i / ow) % oh, c = i % ow;
    int top = (int)(r * stride) - (int)pad, left = (int)(c * stride) - (int)pad;
    int r0 = top > 0 ? top : 0, r1 = top + (int)k < (int)h ? top + (int)k : (int)h;
    int c0 = left > 0 ? left : 0, c1 = left + (int)k < (int)w ? left + (int)k : (int)w;
    const T* p = x + (size_t)plane * h * w;
    float sum = 0.0f;
    for (int a = r0; a < r1; ++a) {
        for (int b = c0; b < c1; ++b) sum += load(p[a * w + b]);
    }
    y[i] = store<T>(sum / (float)(avgpool_divisor(r, h, k, stride, pad) * avgpool_divisor(c, w, k, stride, pad)));
}
extern "C" __global__ void avgpool_forward(const float* x, float* y, unsigned int planes, unsigned int h,
                                           unsigned int w, unsigned int oh, unsigned int ow, unsigned int k,
                                           unsigned int stride, unsigned int pad) {
    PDL_WAIT();
    avgpool_forward_t(x, y, planes, h, w, oh, ow, k, stride, pad);
}
extern "C" __global__ void avgpool_forward_bf16(const bf16* x, bf16* y, unsigned int planes, unsigned int h,
                                                unsigned int w, unsigned int oh, unsigned int ow, unsigned int k,
                                                unsigned int stride, unsigned int pad) {
    PDL_WAIT();
    avgpool_forward_t(x, y, planes, h, w, oh, ow, k, stride, pad);
}

// One thread per input element, gathering in output order.
template <typename T>
__device__ void avgpool_backward_t(const T* gy, T* gx, unsigned int planes, unsigned int h, unsigned int w,
                                   unsigned int oh, unsigned int ow, unsigned int k, unsigned int stride,
                                   unsigned int pad) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= planes * h * w) return;
    unsigned int plane = i / (h * w), a = (i / w) % h, b = i % w;
    // Outputs o with o*stride - pad <= a < o*stride - pad + k.
    unsigned int r0 = a + pad + 1 >= k ? (a + pad + 1 - k + stride - 1) / stride : 0;
    unsigned int r1 = (a + pad) / stride + 1 < oh ? (a + pad) / stride + 1 : oh;
    unsigned int c0 = b + pad + 1 >= k ? (b + pad + 1 - k + stride - 1) / stride : 0;
    unsigned int c1 = (b + pad) / stride + 1 < ow ? (b + pad) / stride + 1 : ow;
    const T* g = gy + (size_t)plane * oh * ow;
    float sum = 0.0f;
    for (unsigned int r = r0; r < r1; ++r) {
        for (unsigned int c = c0; c < c1; ++c) {
            sum += load(g[r * ow + c]) /
                   (float)(avgpool_divisor(r, h, k, stride, pad) * avgpool_divisor(c, w, k, stride, pad));
        }
    }
    gx[i] = store<T>(sum);
}
extern "C" __global__ void avgpool_backward(const float* gy, float* gx, unsigned int planes, unsigned int h,
                                            unsigned int w, unsigned int oh, unsigned int ow, unsigned int k,
                                            unsigned int stride, unsigned int pad) {
    PDL_WAIT();
    avgpool_backward_t(gy, gx, planes, h, w, oh, ow, k, stride, pad);
}
extern "C" __global__ void avgpool_backward_bf16(const bf16* gy, bf16* gx, unsigned int planes, unsigned int h,
                                                 unsigned int w, unsigned int oh, unsigned int ow, unsigned int k,
                                                 unsigned int stride, unsigned int pad) {
    PDL_WAIT();
    avgpool_backward_t(gy, gx, planes, h, w, oh, ow, k, stride, pad);
}
