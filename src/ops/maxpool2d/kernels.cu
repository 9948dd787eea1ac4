// max-pool 2x2, stride 2, over `planes` planes of h x w (an odd last row or
// column is dropped). Forward records which of the four inputs won (0..3,
// row-major); backward routes each gradient back to its winner. The _relu
// variants fuse the relu that follows: the output is clamped at 0, and a
// gradient passes only where that output is positive.

__device__ __forceinline__ void maxpool_window(const float* x, float* y, unsigned char* winner, unsigned int planes,
                                               unsigned int h, unsigned int w, bool relu) {
    unsigned int oh = h / 2, ow = w / 2;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= planes * oh * ow) return;
    unsigned int plane = i / (oh * ow), r = (i / ow) % oh, c = i % ow;
    const float* top = x + (size_t)plane * h * w + (2 * r) * w + 2 * c;
    float v[4] = {top[0], top[1], top[w], top[w + 1]};
    // `>` keeps the first maximum, as PyTorch does; a NaN wins so it propagates.
    float best = v[0];
    unsigned char arg = 0;
    for (unsigned char k = 1; k < 4; ++k) {
        if (v[k] > best || isnan(v[k])) {
            best = v[k];
            arg = k;
        }
    }
    y[i] = relu ? fmaxf(best, 0.0f) : best;
    winner[i] = arg;
}

extern "C" __global__ void maxpool_forward(const float* x, float* y, unsigned char* winner, unsigned int planes,
                                           unsigned int h, unsigned int w) {
    maxpool_window(x, y, winner, planes, h, w, false);
}

extern "C" __global__ void maxpool_relu_forward(const float* x, float* y, unsigned char* winner,
                                                unsigned int planes, unsigned int h, unsigned int w) {
    maxpool_window(x, y, winner, planes, h, w, true);
}

// One thread per input element, so every element of gx is written (zeros
// included) and no two threads touch the same one. `relu_of` is the fused
// relu's output, or null when the pool had no relu.
extern "C" __global__ void maxpool_backward(const float* gy, const float* relu_of, const unsigned char* winner,
                                            float* gx, unsigned int planes, unsigned int h, unsigned int w) {
    unsigned int oh = h / 2, ow = w / 2;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= planes * h * w) return;
    unsigned int plane = i / (h * w), r = (i / w) % h, c = i % w;
    unsigned int orow = r / 2, ocol = c / 2;
    float g = 0.0f;
    if (orow < oh && ocol < ow) {
        unsigned int o = (plane * oh + orow) * ow + ocol;
        bool passes = relu_of == 0 || relu_of[o] > 0.0f;
        if (passes && winner[o] == (r % 2) * 2 + (c % 2)) g = gy[o];
    }
    gx[i] = g;
}

// Any square window (kernel k, stride, padding pad), as PyTorch pools: output
// row o covers input rows o*stride - pad .. + k, clipped to the input. The
// winner starts at -inf with the window's first input, so padding never wins;
// it is stored as its index within the k x k window (k*k <= 255, checked by
// the op).
extern "C" __global__ void maxpool_window_forward(const float* x, float* y, unsigned char* winner,
                                                  unsigned int planes, unsigned int h, unsigned int w,
                                                  unsigned int oh, unsigned int ow, unsigned int k,
                                                  unsigned int stride, unsigned int pad) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= planes * oh * ow) return;
    unsigned int plane = i / (oh * ow), r = (i / ow) % oh, c = i % ow;
    int top = (int)(r * stride) - (int)pad, left = (int)(c * stride) - (int)pad;
    int r0 = top > 0 ? top : 0, r1 = top + (int)k < (int)h ? top + (int)k : (int)h;
    int c0 = left > 0 ? left : 0, c1 = left + (int)k < (int)w ? left + (int)k : (int)w;
    const float* p = x + (size_t)plane * h * w;
    float best = __int_as_float(0xff800000);  // -inf
    unsigned int arg = (r0 - top) * k + (c0 - left);
    for (int a = r0; a < r1; ++a) {
        for (int b = c0; b < c1; ++b) {
            float v = p[a * w + b];
            if (v > best || isnan(v)) {
                best = v;
                arg = (a - top) * k + (b - left);
            }
        }
    }
    y[i] = best;
    winner[i] = (unsigned char)arg;
}

// One thread per input element, gathering, in output order, the gradients
// of the outputs whose winner it is: every element of gx is written once and
// no atomics are needed.
extern "C" __global__ void maxpool_window_backward(const float* gy, const unsigned char* winner, float* gx,
                                                   unsigned int planes, unsigned int h, unsigned int w,
                                                   unsigned int oh, unsigned int ow, unsigned int k,
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
    const unsigned char* won = winner + (size_t)plane * oh * ow;
    float sum = 0.0f;
    for (unsigned int r = r0; r < r1; ++r) {
        unsigned int dr = a + pad - r * stride;
        for (unsigned int c = c0; c < c1; ++c) {
            unsigned int dc = b + pad - c * stride;
            if (won[r * ow + c] == dr * k + dc) sum += g[r * ow + c];
        }
    }
    gx[i] = sum;
}
