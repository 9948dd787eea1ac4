// conv2d's bias, and (below) our own kernels for small valid convolutions; cuDNN runs the others. `nhwc`: the output
// is channels last (a bf16 step's), filter f of pixel p at (img*p + p)*f + f.

// y[img, f, p] += b[f] over `n` images of `f` planes of `p` pixels.
template <typename T>
__device__ void conv_bias_add_t(const T* b, T* y, unsigned int n, unsigned int f, unsigned int p, unsigned int nhwc) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n * f * p) y[i] = store<T>(load(y[i]) + load(b[nhwc ? i % f : (i / p) % f]));
}
extern "C" __global__ void conv_bias_add(const float* b, float* y, unsigned int n, unsigned int f, unsigned int p,
                                         unsigned int nhwc) {
    PDL_WAIT();
    conv_bias_add_t(b, y, n, f, p, nhwc);
}
extern "C" __global__ void conv_bias_add_bf16(const bf16* b, bf16* y, unsigned int n, unsigned int f, unsigned int p,
                                              unsigned int nhwc) {
    PDL_WAIT();
    conv_bias_add_t(b, y, n, f, p, nhwc);
}

// gb[f] = sum of gy over images and pixels (in fp32); one block of 256 per
// filter.
template <typename T>
__device__ void conv_bias_grad_t(const T* gy, T* gb, unsigned int n, unsigned int f, unsigned int p,
                                 unsigned int nhwc) {
    __shared__ float partial[256];
    unsigned int filter = blockIdx.x;
    float sum = 0.0f;
    for (unsigned int k = threadIdx.x; k < n * p; k += blockDim.x) {
        unsigned int img = k / p, pixel = k % p;
        size_t at = nhwc ? (size_t)k * f + filter : ((size_t)img * f + filter) * p + pixel;
        sum += load(gy[at]);
    }
    // The backend's fixed-order block sum (common.cu).
    float total = block_sum(sum, partial);
    if (threadIdx.x == 0) gb[filter] = store<T>(total);
}
extern "C" __global__ void conv_bias_grad(const float* gy, float* gb, unsigned int n, unsigned int f,
                                          unsigned int p, unsigned int nhwc) {
    PDL_WAIT();
    conv_bias_grad_t(gy, gb, n, f, p, nhwc);
}
extern "C" __global__ void conv_bias_grad_bf16(const bf16* gy, bf16* gb, unsigned int n, unsigned int f,
                                               unsigned int p, unsigned int nhwc) {
    PDL_WAIT();
    conv_bias_grad_t(gy, gb, n, f, p, nhwc);
}

// Direct convolutions for small valid ones (stride 1, no padding, fp32,
// NCHW, at most DIRECT_TAPS taps a filter): the MNIST CNN's, whose five
// passes cuDNN ran in about two thirds of the step. `direct.rs` sizes the
// launches and keeps every block's shared memory within DIRECT_SMEM floats.
// Each output is one thread's sum in a fixed order, so every run gives the
// same bits (no atomics), with or without --deterministic.
#define DIRECT_SMEM 8192
#define DIRECT_TAPS 256
// Warps of a block that adds the weight gradient's group sums.
#define DIRECT_SUMMERS 8

// Loads of a block's shared memory, `put(i, get(i))` for i < n: each
// thread issues STAGE loads before it stores any, so a block waits about
// one memory latency for STAGE values a thread rather than one a value
// (the compiler does not move a global load above a shared store through
// these pointers, so a plain loop waits once per trip).
#define STAGE 8
template <typename V, typename Get, typename Put>
__device__ __forceinline__ void stage(unsigned int n, Get get, Put put) {
    for (unsigned int base = threadIdx.x; base < n; base += STAGE * blockDim.x) {
        V v[STAGE];
#pragma unroll
        for (unsigned int k = 0; k < STAGE; k++) {
            unsigned int i = base + k * blockDim.x;
            if (i < n) v[k] = get(i);
        }
#pragma unroll
        for (unsigned int k = 0; k < STAGE; k++) {
            unsigned int i = base + k * blockDim.x;
            if (i < n) put(i, v[k]);
        }
    }
}

// a += v · q lane by lane: one input value against a tap of four filters.
__device__ __forceinline__ void fma4(float v, float4 q, float4& a) {
    a.x = fmaf(v, q.x, a.x);
    a.y = fmaf(v, q.y, a.y);
    a.z = fmaf(v, q.z, a.z);
    a.w = fmaf(v, q.w, a.w);
}

// dst[i] = src[i] for i < n, four at a time where both allow.
__device__ __forceinline__ void stage_copy(float* dst, const float* src, unsigned int n) {
    if ((((size_t)src | (size_t)dst) & 15) == 0 && n % 4 == 0) {
        const float4* s4 = reinterpret_cast<const float4*>(src);
        float4* d4 = reinterpret_cast<float4*>(dst);
        stage<float4>(n / 4, [&](unsigned int i) { return s4[i]; }, [&](unsigned int i, float4 v) { d4[i] = v; });
    } else {
        stage<float>(n, [&](unsigned int i) { return src[i]; }, [&](unsigned int i, float v) { dst[i] = v; });
    }
}

// Loads image `img` and the filters f0 .. f0 + fpb (zero past the last)
// into shared memory for a forward block: the image at sm, the filters from
// float4 xlen / 4 on, filter fl's tap t at float4 (fl / 4) * taps + t, lane
// fl % 4; read in w's order, so consecutive threads read consecutive
// weights.
__device__ __forceinline__ void forward_load(float* sm, const float* x, const float* w, unsigned int img,
                                             unsigned int c, unsigned int plane, unsigned int f, unsigned int taps,
                                             unsigned int f0, unsigned int fpb, unsigned int xlen) {
    stage_copy(sm, x + (size_t)img * c * plane, c * plane);
    const float* wb = w + (size_t)f0 * taps;
    unsigned int have = min(fpb, f - f0) * taps;
    stage<float>(
        taps * fpb, [&](unsigned int i) { return i < have ? wb[i] : 0.0f; },
        [&](unsigned int i, float v) { sm[xlen + ((i / taps / 4) * taps + i % taps) * 4 + i / taps % 4] = v; });
}

// y[img, f, oy, ox] = sum over (ci, ky, kx) of x[img, ci, oy+ky, ox+kx] *
// w[f, ci, ky, kx]. Block (filter block blockIdx.x of `fpb`, image
// blockIdx.y): the image and the block's filters in shared memory, the
// filters four to a float4 per tap (zero past the last filter), so each
// thread reads one input value and one float4 a tap for four outputs of
// one pixel.
extern "C" __global__ void conv_direct_forward(const float* x, const float* w, float* y, unsigned int c,
                                               unsigned int h, unsigned int wd, unsigned int f, unsigned int kh,
                                               unsigned int kw, unsigned int fpb) {
    PDL_WAIT();
    __shared__ float4 sm4[DIRECT_SMEM / 4];
    float* sm = reinterpret_cast<float*>(sm4);
    unsigned int img = blockIdx.y, f0 = blockIdx.x * fpb;
    unsigned int plane = h * wd, taps = c * kh * kw, oh = h - kh + 1, ow = wd - kw + 1, p = oh * ow;
    unsigned int xlen = (c * plane + 3) & ~3u, chunks = fpb / 4;
    forward_load(sm, x, w, img, c, plane, f, taps, f0, fpb, xlen);
    __syncthreads();
    const float4* ws = sm4 + xlen / 4;
    for (unsigned int item = threadIdx.x; item < p * chunks; item += blockDim.x) {
        unsigned int px = item % p, j = item / p;
        const float* xp = sm + (px / ow) * wd + px % ow;
        const float4* wj = ws + j * taps;
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (unsigned int ci = 0; ci < c; ci++, xp += plane) {
            for (unsigned int ky = 0; ky < kh; ky++) {
                const float* xr = xp + ky * wd;
                for (unsigned int kx = 0; kx < kw; kx++) {
                    float v = xr[kx];
                    float4 q = *wj++;
                    fma4(v, q, a);
                }
            }
        }
        unsigned int fo = f0 + 4 * j;
        float* yo = y + ((size_t)img * f + fo) * p + px;
        float r[4] = {a.x, a.y, a.z, a.w};
        for (unsigned int e = 0; e < 4 && fo + e < f; e++) yo[e * p] = r[e];
    }
}

// conv_direct_forward for filters KW wide, a thread computing DIRECT_RUN
// adjacent outputs of a row for four filters: for each row of taps
// (ci, ky) it reads the DIRECT_RUN + KW - 1 inputs under them into
// registers once, and each tap's float4 of weights once for DIRECT_RUN
// pixels (the per-pixel kernel reads a scalar and a float4 for every four
// multiply-adds). Each output sums its taps in the per-pixel kernel's
// order: the same bits. A run past the row's end computes outputs it does
// not store, reading inputs beyond the row that stay in the block's shared
// memory (the filters follow the image).
#define DIRECT_RUN 4
template <unsigned int KW>
__device__ void conv_direct_forward_rows(const float* x, const float* w, float* y, unsigned int c, unsigned int h,
                                         unsigned int wd, unsigned int f, unsigned int kh, unsigned int fpb) {
    __shared__ float4 sm4[DIRECT_SMEM / 4];
    float* sm = reinterpret_cast<float*>(sm4);
    unsigned int img = blockIdx.y, f0 = blockIdx.x * fpb;
    unsigned int plane = h * wd, taps = c * kh * KW, oh = h - kh + 1, ow = wd - KW + 1, p = oh * ow;
    unsigned int xlen = (c * plane + 3) & ~3u, chunks = fpb / 4, runs = (ow + DIRECT_RUN - 1) / DIRECT_RUN;
    forward_load(sm, x, w, img, c, plane, f, taps, f0, fpb, xlen);
    __syncthreads();
    const float4* ws = sm4 + xlen / 4;
    for (unsigned int item = threadIdx.x; item < oh * runs * chunks; item += blockDim.x) {
        unsigned int at = item % (oh * runs), j = item / (oh * runs);
        unsigned int oy = at / runs, ox = (at % runs) * DIRECT_RUN;
        const float* xp = sm + oy * wd + ox;
        const float4* wj = ws + j * taps;
        float4 a[DIRECT_RUN];
#pragma unroll
        for (unsigned int r = 0; r < DIRECT_RUN; r++) a[r] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (unsigned int ci = 0; ci < c; ci++, xp += plane) {
            for (unsigned int ky = 0; ky < kh; ky++) {
                const float* xr = xp + ky * wd;
                float v[DIRECT_RUN + KW - 1];
#pragma unroll
                for (unsigned int i = 0; i < DIRECT_RUN + KW - 1; i++) v[i] = xr[i];
#pragma unroll
                for (unsigned int kx = 0; kx < KW; kx++) {
                    float4 q = *wj++;
#pragma unroll
                    for (unsigned int r = 0; r < DIRECT_RUN; r++) fma4(v[r + kx], q, a[r]);
                }
            }
        }
        unsigned int fo = f0 + 4 * j;
        float* yo = y + ((size_t)img * f + fo) * p + oy * ow + ox;
#pragma unroll
        for (unsigned int r = 0; r < DIRECT_RUN; r++) {
            if (ox + r >= ow) break;
            float o[4] = {a[r].x, a[r].y, a[r].z, a[r].w};
            for (unsigned int e = 0; e < 4 && fo + e < f; e++) yo[e * p + r] = o[e];
        }
    }
}
extern "C" __global__ void conv_direct_forward_rows3(const float* x, const float* w, float* y, unsigned int c,
                                                     unsigned int h, unsigned int wd, unsigned int f,
                                                     unsigned int kh, unsigned int fpb) {
    PDL_WAIT();
    conv_direct_forward_rows<3>(x, w, y, c, h, wd, f, kh, fpb);
}
extern "C" __global__ void conv_direct_forward_rows5(const float* x, const float* w, float* y, unsigned int c,
                                                     unsigned int h, unsigned int wd, unsigned int f,
                                                     unsigned int kh, unsigned int fpb) {
    PDL_WAIT();
    conv_direct_forward_rows<5>(x, w, y, c, h, wd, f, kh, fpb);
}

// Loads image `img`'s gradient planes, with kh-1 rows and kw-1 columns of
// zeros around each, and the channels c0 .. c0 + cpb of the filters (zero
// past the last), into shared memory for an input-gradient block: the
// planes at sm, channel cl's tap (fo, ky, kx) from float4 glen / 4 on.
__device__ __forceinline__ void input_grad_load(float* sm, const float* gy, const float* w, unsigned int img,
                                                unsigned int c, unsigned int f, unsigned int kh, unsigned int kw,
                                                unsigned int oh, unsigned int ow, unsigned int c0, unsigned int cpb,
                                                unsigned int glen) {
    unsigned int p = oh * ow, pw = ow + 2 * (kw - 1), padded = (oh + 2 * (kh - 1)) * pw, kk = kh * kw;
    unsigned int per = f * kk;
    const float* gi = gy + (size_t)img * f * p;
    stage<float>(
        f * padded,
        [&](unsigned int i) {
            unsigned int fo = i / padded, r = i % padded;
            int yy = (int)(r / pw) - (int)(kh - 1), xx = (int)(r % pw) - (int)(kw - 1);
            bool inside = yy >= 0 && yy < (int)oh && xx >= 0 && xx < (int)ow;
            return inside ? gi[(size_t)fo * p + yy * ow + xx] : 0.0f;
        },
        [&](unsigned int i, float v) { sm[i] = v; });
    // Channel cl's tap (fo, ky, kx) at float4 (cl / 4) * per + fo * kk + ky * kw + kx, lane cl % 4;
    // read in w's order (i = (fo, cl, t)).
    stage<float>(
        per * cpb,
        [&](unsigned int i) {
            unsigned int t = i % kk, rest = i / kk, cl = rest % cpb, fo = rest / cpb;
            return c0 + cl < c ? w[((size_t)fo * c + c0 + cl) * kk + t] : 0.0f;
        },
        [&](unsigned int i, float v) {
            unsigned int t = i % kk, rest = i / kk, cl = rest % cpb, fo = rest / cpb;
            sm[glen + ((cl / 4) * per + fo * kk + t) * 4 + cl % 4] = v;
        });
}

// gx[img, ci, iy, ix] = sum over (fo, ky, kx) of gy[img, fo, iy-ky, ix-kx] *
// w[fo, ci, ky, kx], over the taps that land inside gy; added to gx where
// `accumulate` (a second use of the input). Block (channel block
// blockIdx.x of `cpb`, image blockIdx.y): the image's gradient planes in
// shared memory with kh-1 rows and kw-1 columns of zeros around each, so
// no tap tests a bound, and the block's channels' filters four to a
// float4 per (fo, ky, kx).
extern "C" __global__ void conv_direct_input_grad(const float* gy, const float* w, float* gx, unsigned int c,
                                                  unsigned int h, unsigned int wd, unsigned int f, unsigned int kh,
                                                  unsigned int kw, unsigned int cpb, unsigned int accumulate) {
    PDL_WAIT();
    __shared__ float4 sm4[DIRECT_SMEM / 4];
    float* sm = reinterpret_cast<float*>(sm4);
    unsigned int img = blockIdx.y, c0 = blockIdx.x * cpb;
    unsigned int plane = h * wd, oh = h - kh + 1, ow = wd - kw + 1;
    unsigned int pw = wd + kw - 1, padded = (h + kh - 1) * pw;
    unsigned int glen = (f * padded + 3) & ~3u, chunks = cpb / 4, per = f * kh * kw;
    input_grad_load(sm, gy, w, img, c, f, kh, kw, oh, ow, c0, cpb, glen);
    __syncthreads();
    const float4* ws = sm4 + glen / 4;
    for (unsigned int item = threadIdx.x; item < plane * chunks; item += blockDim.x) {
        unsigned int px = item % plane, j = item / plane;
        // Tap (ky, kx) reads padded row iy + kh-1-ky, column ix + kw-1-kx.
        const float* gp = sm + (px / wd + kh - 1) * pw + px % wd + kw - 1;
        const float4* wj = ws + j * per;
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (unsigned int fo = 0; fo < f; fo++, gp += padded) {
            for (unsigned int ky = 0; ky < kh; ky++) {
                const float* gr = gp - ky * pw;
                for (unsigned int kx = 0; kx < kw; kx++) {
                    float v = gr[-(int)kx];
                    float4 q = *wj++;
                    fma4(v, q, a);
                }
            }
        }
        unsigned int co = c0 + 4 * j;
        float* go = gx + ((size_t)img * c + co) * plane + px;
        float r[4] = {a.x, a.y, a.z, a.w};
        for (unsigned int e = 0; e < 4 && co + e < c; e++) go[e * plane] = accumulate ? go[e * plane] + r[e] : r[e];
    }
}


// conv_direct_input_grad for filters KW wide, a thread computing DIRECT_RUN
// adjacent inputs of a row for four channels, as conv_direct_forward_rows
// does outputs: the gradients under a row of taps (fo, ky) read once into
// registers, each tap's float4 of weights once for DIRECT_RUN pixels. Each
// input sums its taps in the per-pixel kernel's order: the same bits.
template <unsigned int KW>
__device__ void conv_direct_input_grad_rows(const float* gy, const float* w, float* gx, unsigned int c,
                                            unsigned int h, unsigned int wd, unsigned int f, unsigned int kh,
                                            unsigned int cpb, unsigned int accumulate) {
    __shared__ float4 sm4[DIRECT_SMEM / 4];
    float* sm = reinterpret_cast<float*>(sm4);
    unsigned int img = blockIdx.y, c0 = blockIdx.x * cpb;
    unsigned int plane = h * wd, oh = h - kh + 1, ow = wd - KW + 1;
    unsigned int pw = wd + KW - 1, padded = (h + kh - 1) * pw, per = f * kh * KW;
    unsigned int glen = (f * padded + 3) & ~3u, chunks = cpb / 4, runs = (wd + DIRECT_RUN - 1) / DIRECT_RUN;
    input_grad_load(sm, gy, w, img, c, f, kh, KW, oh, ow, c0, cpb, glen);
    __syncthreads();
    const float4* ws = sm4 + glen / 4;
    for (unsigned int item = threadIdx.x; item < h * runs * chunks; item += blockDim.x) {
        unsigned int at = item % (h * runs), j = item / (h * runs);
        unsigned int iy = at / runs, ix = (at % runs) * DIRECT_RUN;
        // Tap (ky, kx) of input ix + r reads padded row iy + kh-1-ky,
        // column ix + r + KW-1-kx.
        const float* gp = sm + (iy + kh - 1) * pw + ix;
        const float4* wj = ws + j * per;
        float4 a[DIRECT_RUN];
#pragma unroll
        for (unsigned int r = 0; r < DIRECT_RUN; r++) a[r] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (unsigned int fo = 0; fo < f; fo++, gp += padded) {
            for (unsigned int ky = 0; ky < kh; ky++) {
                const float* gr = gp - ky * pw;
                float v[DIRECT_RUN + KW - 1];
#pragma unroll
                for (unsigned int i = 0; i < DIRECT_RUN + KW - 1; i++) v[i] = gr[i];
#pragma unroll
                for (unsigned int kx = 0; kx < KW; kx++) {
                    float4 q = *wj++;
#pragma unroll
                    for (unsigned int r = 0; r < DIRECT_RUN; r++) fma4(v[r + KW - 1 - kx], q, a[r]);
                }
            }
        }
        unsigned int co = c0 + 4 * j;
        float* go = gx + ((size_t)img * c + co) * plane + iy * wd + ix;
#pragma unroll
        for (unsigned int r = 0; r < DIRECT_RUN; r++) {
            if (ix + r >= wd) break;
            float o[4] = {a[r].x, a[r].y, a[r].z, a[r].w};
            for (unsigned int e = 0; e < 4 && co + e < c; e++)
                go[e * plane + r] = accumulate ? go[e * plane + r] + o[e] : o[e];
        }
    }
}
extern "C" __global__ void conv_direct_input_grad_rows3(const float* gy, const float* w, float* gx, unsigned int c,
                                                        unsigned int h, unsigned int wd, unsigned int f,
                                                        unsigned int kh, unsigned int cpb, unsigned int accumulate) {
    PDL_WAIT();
    conv_direct_input_grad_rows<3>(gy, w, gx, c, h, wd, f, kh, cpb, accumulate);
}
extern "C" __global__ void conv_direct_input_grad_rows5(const float* gy, const float* w, float* gx, unsigned int c,
                                                        unsigned int h, unsigned int wd, unsigned int f,
                                                        unsigned int kh, unsigned int cpb, unsigned int accumulate) {
    PDL_WAIT();
    conv_direct_input_grad_rows<5>(gy, w, gx, c, h, wd, f, kh, cpb, accumulate);
}

// Loads image `img` and its gradient planes of the block's filters f0 ..
// f0 + fpb (zero past the last) into shared memory for a weight-gradient
// block: the image at sm, the gradient from float4 xlen / 4 on, filter fl's
// at pixel px in float4 px * fpb / 4 + fl / 4, lane fl % 4.
__device__ __forceinline__ void weight_grad_load(float* sm, const float* x, const float* gy, unsigned int img,
                                                 unsigned int c, unsigned int plane, unsigned int f, unsigned int p,
                                                 unsigned int f0, unsigned int fpb, unsigned int xlen) {
    unsigned int chunks = fpb / 4;
    stage_copy(sm, x + (size_t)img * c * plane, c * plane);
    const float* gi = gy + ((size_t)img * f + f0) * p;
    unsigned int have = min(fpb, f - f0) * p;
    stage<float>(
        p * fpb, [&](unsigned int i) { return i < have ? gi[i] : 0.0f; },
        [&](unsigned int i, float v) { sm[xlen + ((i % p) * chunks + i / p / 4) * 4 + i / p % 4] = v; });
}

// Every image of the block's group (`ipg` from blockIdx.y * ipg) in turn,
// staged by weight_grad_load, then `body(image, gradient)` run by the
// threads that hold a slice (`mine`); all threads reach the barriers.
template <typename Body>
__device__ __forceinline__ void weight_grad_images(float4* sm4, const float* x, const float* gy, unsigned int n,
                                                   unsigned int c, unsigned int plane, unsigned int f,
                                                   unsigned int p, unsigned int f0, unsigned int fpb,
                                                   unsigned int ipg, bool mine, Body body) {
    float* sm = reinterpret_cast<float*>(sm4);
    unsigned int xlen = (c * plane + 3) & ~3u, group = blockIdx.y;
    unsigned int last = min(n, (group + 1) * ipg);
    for (unsigned int img = group * ipg; img < last; img++) {
        __syncthreads();
        weight_grad_load(sm, x, gy, img, c, plane, f, p, f0, fpb, xlen);
        __syncthreads();
        if (mine) body(sm, sm4 + xlen / 4);
    }
}

// The slices' sums of a thread's W float4s (item, slice s: thread s ·
// items + item), added in slice order through shared memory by slice 0's
// threads; sum k's four filters (fo on, those below f) go to out[k], out[k
// + stride], ...
template <unsigned int W>
__device__ __forceinline__ void weight_grad_store(float4* sm4, const float4* a, bool mine, unsigned int items,
                                                  unsigned int slices, unsigned int item, unsigned int s, float* out,
                                                  unsigned int stride, unsigned int fo, unsigned int f) {
    __syncthreads();
    if (mine) {
#pragma unroll
        for (unsigned int k = 0; k < W; k++) sm4[threadIdx.x * W + k] = a[k];
    }
    __syncthreads();
    if (s != 0) return;
    for (unsigned int k = 0; k < W; k++) {
        float4 sum = sm4[item * W + k];
        for (unsigned int sl = 1; sl < slices; sl++) {
            float4 q = sm4[(sl * items + item) * W + k];
            sum.x += q.x;
            sum.y += q.y;
            sum.z += q.z;
            sum.w += q.w;
        }
        float r[4] = {sum.x, sum.y, sum.z, sum.w};
        for (unsigned int e = 0; e < 4 && fo + e < f; e++) out[(size_t)e * stride + k] = r[e];
    }
}

// partial[group, fo, t] = sum over the group's images (`ipg` from
// blockIdx.y * ipg) and over the output pixels of gy[img, fo, oy, ox] *
// x[img, ci, oy+ky, ox+kx], tap t = (ci * kh + ky) * kw + kx, for the
// filters of block blockIdx.x (`fpb` of them). Thread (item, slice): item
// = tap t of four filters (chunk j), slice s = the rows s, s + slices, ...
// of every image; the slices' sums are then added in order. The image and
// its gradient (four filters to a float4 per pixel) in shared memory.
extern "C" __global__ void conv_direct_weight_grad(const float* x, const float* gy, float* partial, unsigned int n,
                                                   unsigned int c, unsigned int h, unsigned int wd, unsigned int f,
                                                   unsigned int kh, unsigned int kw, unsigned int fpb,
                                                   unsigned int ipg, unsigned int slices) {
    PDL_WAIT();
    __shared__ float4 sm4[DIRECT_SMEM / 4];
    unsigned int f0 = blockIdx.x * fpb;
    unsigned int plane = h * wd, taps = c * kh * kw, oh = h - kh + 1, ow = wd - kw + 1;
    unsigned int chunks = fpb / 4, items = taps * chunks;
    unsigned int item = threadIdx.x % items, s = threadIdx.x / items;
    unsigned int t = item % taps, j = item / taps;
    bool mine = s < slices;
    unsigned int xoff = (t / (kh * kw)) * plane + (t / kw % kh) * wd + t % kw;
    float4 a[1] = {make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
    weight_grad_images(sm4, x, gy, n, c, plane, f, oh * ow, f0, fpb, ipg, mine,
                       [&](const float* sm, const float4* gs) {
                           for (unsigned int oy = s; oy < oh; oy += slices) {
                               const float* xr = sm + xoff + oy * wd;
                               const float4* gr = gs + oy * ow * chunks + j;
                               for (unsigned int ox = 0; ox < ow; ox++) fma4(xr[ox], gr[ox * chunks], a[0]);
                           }
                       });
    weight_grad_store<1>(sm4, a, mine, items, slices, item, s,
                         partial + ((size_t)blockIdx.y * f + f0 + 4 * j) * taps + t, taps, f0 + 4 * j, f);
}

// conv_direct_weight_grad for filters KW wide, a thread summing a whole row
// of taps: item = (row ci * kh + ky, chunk j). Walking an output row, it
// keeps the KW inputs the row's taps read in registers, so one float4 of
// gradients read from shared memory serves 4 · KW multiply-adds, not 4
// (the per-tap kernel waits on shared memory: a scalar and a float4 read
// for every four). Each tap's sum runs in the per-tap kernel's order.
template <unsigned int KW>
__device__ void conv_direct_weight_grad_rows(const float* x, const float* gy, float* partial, unsigned int n,
                                             unsigned int c, unsigned int h, unsigned int wd, unsigned int f,
                                             unsigned int kh, unsigned int fpb, unsigned int ipg,
                                             unsigned int slices) {
    __shared__ float4 sm4[DIRECT_SMEM / 4];
    unsigned int f0 = blockIdx.x * fpb;
    unsigned int plane = h * wd, rows = c * kh, oh = h - kh + 1, ow = wd - KW + 1;
    unsigned int chunks = fpb / 4, items = rows * chunks;
    unsigned int item = threadIdx.x % items, s = threadIdx.x / items;
    unsigned int row = item % rows, j = item / rows;
    bool mine = s < slices;
    unsigned int xoff = (row / kh) * plane + (row % kh) * wd;
    float4 a[KW];
#pragma unroll
    for (unsigned int k = 0; k < KW; k++) a[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    weight_grad_images(sm4, x, gy, n, c, plane, f, oh * ow, f0, fpb, ipg, mine,
                       [&](const float* sm, const float4* gs) {
                           for (unsigned int oy = s; oy < oh; oy += slices) {
                               const float* xr = sm + xoff + oy * wd;
                               const float4* gr = gs + oy * ow * chunks + j;
                               float v[KW];
#pragma unroll
                               for (unsigned int k = 0; k + 1 < KW; k++) v[k + 1] = xr[k];
                               for (unsigned int ox = 0; ox < ow; ox++) {
#pragma unroll
                                   for (unsigned int k = 0; k + 1 < KW; k++) v[k] = v[k + 1];
                                   v[KW - 1] = xr[ox + KW - 1];
                                   float4 q = gr[ox * chunks];
#pragma unroll
                                   for (unsigned int k = 0; k < KW; k++) fma4(v[k], q, a[k]);
                               }
                           }
                       });
    // KW float4s a thread in shared memory: direct.rs keeps THREADS · KW ·
    // 4 within DIRECT_SMEM.
    weight_grad_store<KW>(sm4, a, mine, items, slices, item, s,
                          partial + ((size_t)blockIdx.y * f + f0 + 4 * j) * (rows * KW) + row * KW, rows * KW,
                          f0 + 4 * j, f);
}
extern "C" __global__ void conv_direct_weight_grad_rows3(const float* x, const float* gy, float* partial,
                                                         unsigned int n, unsigned int c, unsigned int h,
                                                         unsigned int wd, unsigned int f, unsigned int kh,
                                                         unsigned int fpb, unsigned int ipg, unsigned int slices) {
    PDL_WAIT();
    conv_direct_weight_grad_rows<3>(x, gy, partial, n, c, h, wd, f, kh, fpb, ipg, slices);
}
extern "C" __global__ void conv_direct_weight_grad_rows5(const float* x, const float* gy, float* partial,
                                                         unsigned int n, unsigned int c, unsigned int h,
                                                         unsigned int wd, unsigned int f, unsigned int kh,
                                                         unsigned int fpb, unsigned int ipg, unsigned int slices) {
    PDL_WAIT();
    conv_direct_weight_grad_rows<5>(x, gy, partial, n, c, h, wd, f, kh, fpb, ipg, slices);
}

// gw[i] = the groups' partial sums of weight i. A block takes 32 weights,
// a lane each, and its 8 warps a run of groups each (warp w the groups
// w·groups/8 up to (w+1)·groups/8, in order, so every warp reads 32
// adjacent floats at once); warp 0 then adds the 8 runs' sums in warp
// order. One thread walking every group waited on its loads one after
// another: the MNIST CNN's first convolution (800 weights, 250 groups at
// batch 1000) kept 4 blocks busy for 19 µs.
extern "C" __global__ void conv_direct_weight_grad_sum(const float* partial, float* gw, unsigned int len,
                                                       unsigned int groups) {
    PDL_WAIT();
    __shared__ float sums[DIRECT_SUMMERS][32];
    unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    unsigned int i = blockIdx.x * 32 + lane;
    unsigned int first = warp * groups / DIRECT_SUMMERS, last = (warp + 1) * groups / DIRECT_SUMMERS;
    float sum = 0.0f;
    if (i < len)
        for (unsigned int g = first; g < last; g++) sum += partial[(size_t)g * len + i];
    sums[warp][lane] = sum;
    __syncthreads();
    if (warp != 0 || i >= len) return;
    float total = sums[0][lane];
    for (unsigned int w = 1; w < DIRECT_SUMMERS; w++) total += sums[w][lane];
    gw[i] = total;
}
