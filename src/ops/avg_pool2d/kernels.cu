// Average pooling with count_include_pad, as PyTorch: output row o covers
// input rows o*stride - pad .. + k clipped to the input; its divisor is the
// window clipped to input + padding (only a ceil-mode last window is
// clipped). The arithmetic mirrors cpu.rs: a row-major sum, then one divide.

__device__ __forceinline__ unsigned int avgpool_divisor(unsigned int o, unsigned int len, unsigned int k,
                                                         unsigned int stride, unsigned int pad) {
    unsigned int start = o * stride, end = start + k;
    return (end < len + 2 * pad ? end : len + 2 * pad) - start;
}

extern "C" __global__ void avgpool_forward(const float* x, float* y, unsigned int planes, unsigned int h,
                                           unsigned int w, unsigned int oh, unsigned int ow, unsigned int k,
                                           unsigned int stride, unsigned int pad) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= planes * oh * ow) return;
    unsigned int plane = i / (oh * ow), r = (i / ow) % oh, c = i % ow;
    int top = (int)(r * stride) - (int)pad, left = (int)(c * stride) - (int)pad;
    int r0 = top > 0 ? top : 0, r1 = top + (int)k < (int)h ? top + (int)k : (int)h;
    int c0 = left > 0 ? left : 0, c1 = left + (int)k < (int)w ? left + (int)k : (int)w;
    const float* p = x + (size_t)plane * h * w;
    float sum = 0.0f;
    for (int a = r0; a < r1; ++a) {
        for (int b = c0; b < c1; ++b) sum += p[a * w + b];
    }
    y[i] = sum / (float)(avgpool_divisor(r, h, k, stride, pad) * avgpool_divisor(c, w, k, stride, pad));
}

// One thread per input element, gathering in output order.
extern "C" __global__ void avgpool_backward(const float* gy, float* gx, unsigned int planes, unsigned int h,
                                            unsigned int w, unsigned int oh, unsigned int ow, unsigned int k,
                                            unsigned int stride, unsigned int pad) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= planes * h * w) return;
    unsigned int plane = i / (h * w), a = (i / w) % h, b = i % w;
    // Outputs o with o*stride - pad <= a < o*stride - pad + k.
    unsigned int r0 = a + pad + 1 >= k ? (a + pad + 1 - k + stride - 1) / stride : 0;
    unsigned int r1 = (a + pad) / stride + 1 < oh ? (a + pad) / stride + 1 : oh;
    unsigned int c0 = b + pad + 1 >= k ? (b + pad + 1 - k + stride - 1) / stride : 0;
    unsigned int c1 = (b + pad) / stride + 1 < ow ? (b + pad) / stride + 1 : ow;
    const float* g = gy + (size_t)plane * oh * ow;
    float sum = 0.0f;
    for (unsigned int r = r0; r < r1; ++r) {
        for (unsigned int c = c0; c < c1; ++c) {
            sum += g[r * ow + c] /
                   (float)(avgpool_divisor(r, h, k, stride, pad) * avgpool_divisor(c, w, k, stride, pad));
        }
    }
    gx[i] = sum;
}
