// max-pool 2x2, stride 2, over `planes` planes of h x w (an odd last row or
// column is dropped). Forward records which of the four inputs won (0..3,
// row-major); backward routes each gradient back to its winner. The _relu
// variants fuse the relu that follows: the output is clamped at 0, and a
// gradient passes only where that output is positive. Every kernel is a
// template over the element type (fp32, or bf16 in a mixed-precision step)
// and compares and sums in fp32; a bf16 output is the winner itself, since
// a widened bf16 value stores back exactly.

template <typename T>
__device__ __forceinline__ void maxpool_window(const T* x, T* y, unsigned char* winner, unsigned int planes,
                                               unsigned int h, unsigned int w, bool relu) {
    unsigned int oh = h / 2, ow = w / 2;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= planes * oh * ow) return;
    unsigned int plane = i / (oh * ow), r = (i / ow) % oh, c = i % ow;
    const T* top = x + (size_t)plane * h * w + (2 * r) * w + 2 * c;
    float v[4] = {load(top[0]), load(top[1]), load(top[w]), load(top[w + 1])};
    // `>` keeps the first maximum, as PyTorch does; a NaN wins so it propagates.
    float best = v[0];
    unsigned char arg = 0;
    for (unsigned char k = 1; k < 4; ++k) {
        if (v[k] > best || isnan(v[k])) {
            best = v[k];
            arg = k;
        }
    }
    y[i] = store<T>(relu ? fmaxf(best, 0.0f) : best);
    winner[i] = arg;
}

extern "C" __global__ void maxpool_forward(const float* x, float* y, unsigned char* winner, unsigned int planes,
                                           unsigned int h, unsigned int w) {
    PDL_WAIT();
    maxpool_window(x, y, winner, planes, h, w, false);
}
extern "C" __global__ void maxpool_forward_bf16(const bf16* x, bf16* y, unsigned char* winner, unsigned int planes,
                                                unsigned int h, unsigned int w) {
    PDL_WAIT();
    maxpool_window(x, y, winner, planes, h, w, false);
}

extern "C" __global__ void maxpool_relu_forward(const float* x, float* y, unsigned char* winner,
                                                unsigned int planes, unsigned int h, unsigned int w) {
    PDL_WAIT();
    maxpool_window(x, y, winner, planes, h, w, true);
}
extern "C" __global__ void maxpool_relu_forward_bf16(const bf16* x, bf16* y, unsigned char* winner,
                                                     unsigned int planes, unsigned int h, unsigned int w) {
    PDL_WAIT();
    maxpool_window(x, y, winner, planes, h, w, true);
}

// One thread per window (the 2x2 block of inputs an output pooled, or the
// clipped block of a dropped odd last row or column), writing all of its
// inputs' gradients, zeros included: every element of gx is written once,
// and each output's gradient, winner and relu are read once, not by four
// threads each dividing its index three times (the MNIST CNN's first pool
// at batch 1000 routes 5.8 million gradients). `relu_of` is the fused
// relu's output, or null when the pool had no relu.
template <typename T>
__device__ void maxpool_backward_t(const T* gy, const T* relu_of, const unsigned char* winner, T* gx,
                                   unsigned int planes, unsigned int h, unsigned int w) {
    unsigned int oh = h / 2, ow = w / 2, rows = (h + 1) / 2, cols = (w + 1) / 2;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= planes * rows * cols) return;
    unsigned int plane = i / (rows * cols), at = i - plane * rows * cols;
    unsigned int r = at / cols, c = at - r * cols;
    float g = 0.0f;
    unsigned int won = 4;  // none: a dropped row or column, or the relu stopped it
    if (r < oh && c < ow) {
        unsigned int o = (plane * oh + r) * ow + c;
        if (relu_of == 0 || load(relu_of[o]) > 0.0f) {
            won = winner[o];
            g = load(gy[o]);
        }
    }
    T* top = gx + (size_t)plane * h * w + (2 * r) * w + 2 * c;
    bool right = 2 * c + 1 < w, below = 2 * r + 1 < h;
    top[0] = store<T>(won == 0 ? g : 0.0f);
    if (right) top[1] = store<T>(won == 1 ? g : 0.0f);
    if (below) {
        top[w] = store<T>(won == 2 ? g : 0.0f);
        if (right) top[w + 1] = store<T>(won == 3 ? g : 0.0f);
    }
}
extern "C" __global__ void maxpool_backward(const float* gy, const float* relu_of, const unsigned char* winner,
                                            float* gx, unsigned int planes, unsigned int h, unsigned int w) {
    PDL_WAIT();
    maxpool_backward_t(gy, relu_of, winner, gx, planes, h, w);
}
extern "C" __global__ void maxpool_backward_bf16(const bf16* gy, const bf16* relu_of, const unsigned char* winner,
                                                 bf16* gx, unsigned int planes, unsigned int h, unsigned int w) {
    PDL_WAIT();
    maxpool_backward_t(gy, relu_of, winner, gx, planes, h, w);
}

// Any square window (kernel k, stride, padding pad), as PyTorch pools: output
// row o covers input rows o*stride - pad .. + k, clipped to the input. The
// winner starts at -inf with the window's first input, so padding never wins;
// it is stored as its index within the k x k window (k*k <= 255, checked by
// the op).
template <typename T>
__device__ void maxpool_window_forward_t(const T* x, T* y, unsigned char* winner, unsigned int planes,
                                         unsigned int h, unsigned int w, unsigned int oh, unsigned int ow,
                                         unsigned int k, unsigned int stride, unsigned int pad) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= planes * oh * ow) return;
    unsigned int plane = i / (oh * ow), r = (i / ow) % oh, c = i % ow;
    int top = (int)(r * stride) - (int)pad, left = (int)(c * stride) - (int)pad;
    int r0 = top > 0 ? top : 0, r1 = top + (int)k < (int)h ? top + (int)k : (int)h;
    int c0 = left > 0 ? left : 0, c1 = left + (int)k < (int)w ? left + (int)k : (int)w;
    const T* p = x + (size_t)plane * h * w;
    float best = __int_as_float(0xff800000);  // -inf
    unsigned int arg = (r0 - top) * k + (c0 - left);
    for (int a = r0; a < r1; ++a) {
        for (int b = c0; b < c1; ++b) {
            float v = load(p[a * w + b]);
            if (v > best || isnan(v)) {
                best = v;
                arg = (a - top) * k + (b - left);
            }
        }
    }
    y[i] = store<T>(best);
    winner[i] = (unsigned char)arg;
}
extern "C" __global__ void maxpool_window_forward(const float* x, float* y, unsigned char* winner,
                                                  unsigned int planes, unsigned int h, unsigned int w,
                                                  unsigned int oh, unsigned int ow, unsigned int k,
                                                  unsigned int stride, unsigned int pad) {
    PDL_WAIT();
    maxpool_window_forward_t(x, y, winner, planes, h, w, oh, ow, k, stride, pad);
}
extern "C" __global__ void maxpool_window_forward_bf16(const bf16* x, bf16* y, unsigned char* winner,
                                                       unsigned int planes, unsigned int h, unsigned int w,
                                                       unsigned int oh, unsigned int ow, unsigned int k,
                                                       unsigned int stride, unsigned int pad) {
    PDL_WAIT();
    maxpool_window_forward_t(x, y, winner, planes, h, w, oh, ow, k, stride, pad);
}

// One thread per input element, gathering, in output order, the gradients
// of the outputs whose winner it is: every element of gx is written once and
// no atomics are needed. The sum is fp32's, rounded once to `T`.
template <typename T>
__device__ void maxpool_window_backward_t(const T* gy, const unsigned char* winner, T* gx, unsigned int planes,
                                          unsigned int h, unsigned int w, unsigned int oh, unsigned int ow,
                                          unsigned int k, unsigned int stride, unsigned int pad) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= planes * h * w) return;
    unsigned int plane = i / (h * w), a = (i / w) % h, b = i % w;
    // Outputs o with o*stride - pad <= a < o*stride - pad + k.
    unsigned int r0 = a + pad + 1 >= k ? (a + pad + 1 - k + stride - 1) / stride : 0;
    unsigned int r1 = (a + pad) / stride + 1 < oh ? (a + pad) / stride + 1 : oh;
    unsigned int c0 = b + pad + 1 >= k ? (b + pad + 1 - k + stride - 1) / stride : 0;
    unsigned int c1 = (b + pad) / stride + 1 < ow ? (b + pad) / stride + 1 : ow;
    const T* g = gy + (size_t)plane * oh * ow;
    const unsigned char* won = winner + (size_t)plane * oh * ow;
    float sum = 0.0f;
    for (unsigned int r = r0; r < r1; ++r) {
        unsigned int dr = a + pad - r * stride;
        for (unsigned int c = c0; c < c1; ++c) {
            unsigned int dc = b + pad - c * stride;
            if (won[r * ow + c] == dr * k + dc) sum += load(g[r * ow + c]);
        }
    }
    gx[i] = store<T>(sum);
}
extern "C" __global__ void maxpool_window_backward(const float* gy, const unsigned char* winner, float* gx,
                                                   unsigned int planes, unsigned int h, unsigned int w,
                                                   unsigned int oh, unsigned int ow, unsigned int k,
                                                   unsigned int stride, unsigned int pad) {
    PDL_WAIT();
    maxpool_window_backward_t(gy, winner, gx, planes, h, w, oh, ow, k, stride, pad);
}
extern "C" __global__ void maxpool_window_backward_bf16(const bf16* gy, const unsigned char* winner, bf16* gx,
                                                        unsigned int planes, unsigned int h, unsigned int w,
                                                        unsigned int oh, unsigned int ow, unsigned int k,
                                                        unsigned int stride, unsigned int pad) {
    PDL_WAIT();
    maxpool_window_backward_t(gy, winner, gx, planes, h, w, oh, ow, k, stride, pad);
}
