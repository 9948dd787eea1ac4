// batch_norm2d over n images of c planes of hw pixels (NCHW), with an
// optional residual added and a relu applied after it (the fused forms).
//
// Per-channel sums are split over many blocks so that a few wide channels
// fill the GPU: channel ch's n*hw values, in image-major order, fall into
// `chunks` runs of `chunk_len` values; block (j, ch) sums run j into
// `partial` with the fixed tree of `block_sum`, and a second kernel adds a
// channel's runs in index order. No atomics: every run gives the same bits.
// The arithmetic follows the CPU kernels' (cpu.rs, which sum in f64); the
// two agree to 1e-4 of the scale.
//
// In a mixed-precision step x, the residual, y and their gradients are bf16
// (the kernels of those tensors are templates over their type `T`, with a
// `_bf16` entry each); the weight, bias and statistics, every sum and every
// partial stay fp32, and so does all arithmetic: a bf16 value is widened
// when read and rounded once when written. A bf16 value is 2 bytes, too few
// for one access to keep the memory busy: the bf16 kernels read and write
// four or eight values at a time where the sizes allow.

// Value k (image k / hw, pixel k % hw) of channel ch walks with a stride of
// `stride` values without a division per value: `Walk` keeps image and
// pixel (a stride below hw, or a multiple of it plus less than hw).
struct Walk {
    unsigned int img, px, step_img, step_px;
};

__device__ __forceinline__ Walk bn_walk(unsigned int k, unsigned int hw, unsigned int stride) {
    Walk w;
    w.img = k / hw;
    w.px = k % hw;
    w.step_img = stride / hw;
    w.step_px = stride % hw;
    return w;
}

__device__ __forceinline__ void bn_advance(Walk& w, unsigned int hw) {
    w.img += w.step_img;
    w.px += w.step_px;
    if (w.px >= hw) {
        w.px -= hw;
        w.img += 1;
    }
}

__device__ __forceinline__ size_t bn_index(const Walk& w, unsigned int ch, unsigned int c, unsigned int hw) {
    return ((size_t)w.img * c + ch) * hw + w.px;
}

// Four consecutive values of a channel, widened, or stored rounded: one
// 16-byte access in fp32, one 8-byte access in bf16. The first is at a
// multiple of 4 elements of a 256-byte aligned buffer, so both are aligned.
__device__ __forceinline__ void bn_load4(const float* p, float* v) {
    float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
}
__device__ __forceinline__ void bn_load4(const bf16* p, float* v) {
    // Little-endian: the first of a word's two values is its low half.
    uint2 q = *reinterpret_cast<const uint2*>(p);
    v[0] = __uint_as_float(q.x << 16);
    v[1] = __uint_as_float(q.x & 0xffff0000u);
    v[2] = __uint_as_float(q.y << 16);
    v[3] = __uint_as_float(q.y & 0xffff0000u);
}
__device__ __forceinline__ void bn_store4(float* p, const float* v) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void bn_store4(bf16* p, const float* v) {
    uint2 q;
    q.x = bf16_pack2(v[0], v[1]);
    q.y = bf16_pack2(v[2], v[3]);
    *reinterpret_cast<uint2*>(p) = q;
}

// What a thread of a reduction loads before it sums any of it. A loop of
// one load and then its sums keeps one load in flight per warp: the NHWC
// reductions ran at 1.2-1.7 TB/s of an H200's 4.8. The sums still add the
// values in order, so the same bits.
//
// NHWC: rows of the thread's channels, 16 bytes each.
#define BN_ROWS_IN_FLIGHT 4
// NCHW: values of the channel's run, in steps of V. A thread's share of a
// run is about 16 values (geometry.rs: RUN_LEN over 256 threads). With
// bn_backward_input's four values a thread, 8 took a ResNet-50 step at
// batch 128 (fp32) from 40.3 to 39.3 ms on an H100; 16, with more
// registers, to 39.5-40.5.
#define BN_VALUES_IN_FLIGHT 8

// V consecutive values of a channel at p, widened: V is 4 (bn_load4) or 1.
template <typename T, int V> __device__ __forceinline__ void bn_run_load(const T* p, float* v) {
    if (V == 4)
        bn_load4(p, v);
    else
        v[0] = load(*p);
}

// How many consecutive values a bf16 reduction reads at a time: four where
// every run starts and ends on a multiple of 4 inside a plane (mod.rs
// rounds a bf16 run's length up to a multiple of 4 where hw is one, to
// make it so), else one. fp32 reads one.
template <typename T> __device__ __forceinline__ unsigned int bn_run_vec(unsigned int hw, unsigned int chunk_len) {
    return sizeof(T) == 2 && hw % 4 == 0 && chunk_len % 4 == 0 ? 4u : 1u;
}

// A thread's part of a run's shifted sums: values k, k + stride, ... below
// k1 of channel ch, V consecutive ones at each, BN_VALUES_IN_FLIGHT / V steps
// loaded before they are added (in order). The walk is counted in 64 bits
// so that a run ending near 2^32 values cannot wrap.
template <typename T, int V>
__device__ __forceinline__ void bn_stats_run(const T* x, unsigned int ch, unsigned int c, unsigned int hw,
                                             unsigned int first, unsigned int k1, unsigned int stride, float shift,
                                             float* s, float* q) {
    constexpr int S = BN_VALUES_IN_FLIGHT / V;
    Walk w = bn_walk(first, hw, stride);
    for (size_t k = first; k < k1; k += (size_t)S * stride) {
        float v[S][V];
#pragma unroll
        for (int u = 0; u < S; u++) {
            if (k + (size_t)u * stride < k1) bn_run_load<T, V>(x + bn_index(w, ch, c, hw), v[u]);
            bn_advance(w, hw);
        }
#pragma unroll
        for (int u = 0; u < S; u++) {
            if (k + (size_t)u * stride >= k1) break;
            for (int e = 0; e < V; e++) {
                float d = v[u][e] - shift;
                *s += d;
                *q += d * d;
            }
        }
    }
}

// Training statistics, first half: block (j, ch) gives run j of channel ch
// its mean and its sum of squared deviations (from the run's first value,
// then corrected: one pass, without the cancellation of raw squares).
template <typename T>
__device__ void bn_stats_partial_t(const T* x, float* partial, unsigned int n, unsigned int c, unsigned int hw,
                                   unsigned int chunk_len) {
    __shared__ float buf[256];
    unsigned int ch = blockIdx.y, j = blockIdx.x, chunks = gridDim.x;
    unsigned int count = n * hw;
    unsigned int k0 = j * chunk_len;
    unsigned int k1 = min(count, k0 + chunk_len);
    unsigned int vec = bn_run_vec<T>(hw, chunk_len), stride = blockDim.x * vec;
    Walk w0 = bn_walk(k0, hw, stride);
    float shift = load(x[bn_index(w0, ch, c, hw)]);
    float s = 0.0f, q = 0.0f;
    if (k0 + threadIdx.x * vec < k1) {
        if (vec == 4)
            bn_stats_run<T, 4>(x, ch, c, hw, k0 + threadIdx.x * vec, k1, stride, shift, &s, &q);
        else
            bn_stats_run<T, 1>(x, ch, c, hw, k0 + threadIdx.x * vec, k1, stride, shift, &s, &q);
    }
    s = block_sum(s, buf);
    q = block_sum(q, buf);
    if (threadIdx.x == 0) {
        float len = (float)(k1 - k0);
        float d = s / len;
        partial[2 * (ch * chunks + j)] = shift + d;
        partial[2 * (ch * chunks + j) + 1] = fmaxf(q - s * d, 0.0f);
    }
}
extern "C" __global__ void bn_stats_partial(const float* x, float* partial, unsigned int n, unsigned int c,
                                            unsigned int hw, unsigned int chunk_len) {
    PDL_WAIT();
    bn_stats_partial_t(x, partial, n, c, hw, chunk_len);
}
extern "C" __global__ void bn_stats_partial_bf16(const bf16* x, float* partial, unsigned int n, unsigned int c,
                                                 unsigned int hw, unsigned int chunk_len) {
    PDL_WAIT();
    bn_stats_partial_t(x, partial, n, c, hw, chunk_len);
}

// The finishing kernels serve a channel with a block of 256 threads
// (blockDim.y 1), or with a warp where its runs are few (blockDim.x 32,
// blockDim.y channels a block; geometry.rs decides). The channel of this
// thread's group, and the sum of v over the group: the block's in
// block_sum's tree, the warp's in a fixed butterfly.
__device__ __forceinline__ unsigned int bn_finish_channel() { return blockIdx.x * blockDim.y + threadIdx.y; }
__device__ __forceinline__ float bn_finish_sum(float v, float* buf) {
    if (blockDim.y == 1) return block_sum(v, buf);
    for (unsigned int lanes = 16; lanes > 0; lanes /= 2) v += __shfl_xor_sync(0xffffffffu, v, lanes);
    return v;
}

// Training statistics, second half: a channel's group merges its runs in
// run order (Chan's parallel variance: each run's squared deviations plus
// its size times its mean's squared distance from the channel's mean),
// saves the mean and 1/sqrt(var + eps), and moves the running statistics
// towards them (the variance unbiased, n/(n-1)). Channel 0 counts the batch.
extern "C" __global__ void bn_stats_finish(const float* partial, float* mean, float* invstd, float* running_mean,
                                           float* running_var, float* batches, unsigned int n, unsigned int hw,
                                           unsigned int chunks, unsigned int chunk_len, float momentum, float eps,
                                           unsigned int c) {
    PDL_WAIT();
    __shared__ float buf[256];
    unsigned int ch = bn_finish_channel();
    // A whole group (a warp, or the block) leaves together.
    if (ch >= c) return;
    unsigned int count = n * hw;
    const float* p = partial + 2 * (size_t)ch * chunks;
    float weighted = 0.0f;
    for (unsigned int j = threadIdx.x; j < chunks; j += blockDim.x) {
        float len = (float)(min(count, (j + 1) * chunk_len) - j * chunk_len);
        weighted += len * p[2 * j];
    }
    float mu = bn_finish_sum(weighted, buf) / (float)count;
    float m2 = 0.0f;
    for (unsigned int j = threadIdx.x; j < chunks; j += blockDim.x) {
        float len = (float)(min(count, (j + 1) * chunk_len) - j * chunk_len);
        float d = p[2 * j] - mu;
        m2 += p[2 * j + 1] + len * d * d;
    }
    float var = bn_finish_sum(m2, buf) / (float)count;
    if (threadIdx.x == 0) {
        float unbiased = (float)count / (float)(count - 1);
        mean[ch] = mu;
        invstd[ch] = 1.0f / sqrtf(var + eps);
        running_mean[ch] = momentum * mu + (1.0f - momentum) * running_mean[ch];
        running_var[ch] = momentum * (var * unbiased) + (1.0f - momentum) * running_var[ch];
        if (ch == 0) batches[0] += 1.0f;
    }
}

// Evaluation: the running statistics are the ones to normalise with.
extern "C" __global__ void bn_eval_stats(const float* running_mean, const float* running_var, float* mean,
                                         float* invstd, unsigned int c, float eps) {
    PDL_WAIT();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= c) return;
    mean[i] = running_mean[i];
    invstd[i] = 1.0f / sqrtf(running_var[i] + eps);
}

// y = (x - mean) * invstd * w + b, plus residual[i] when there is one, then
// max(., 0) when relu, rounded once to T, for V consecutive values of a
// channel at i (a multiple of 4).
template <typename T, int V>
__device__ __forceinline__ void bn_apply_vec(const T* x, const T* residual, T* y, unsigned int i, float mu, float is,
                                             float w, float b, unsigned int relu) {
    float v[V], o[V];
    for (int h = 0; h < V; h += 4) bn_load4(x + i + h, v + h);
    for (int e = 0; e < V; e++) o[e] = (v[e] - mu) * is * w + b;
    if (residual) {
        float r[V];
        for (int h = 0; h < V; h += 4) bn_load4(residual + i + h, r + h);
        for (int e = 0; e < V; e++) o[e] += r[e];
    }
    if (relu)
        for (int e = 0; e < V; e++) o[e] = fmaxf(o[e], 0.0f);
    for (int h = 0; h < V; h += 4) bn_store4(y + i + h, o + h);
}

// bn_apply_vec for `vec` consecutive values per thread: 4 when hw is a
// multiple of 4 (they share a channel), 8 in bf16 when hw is a multiple of
// 8 (as many bytes as fp32's 4), else 1.
template <typename T>
__device__ void bn_apply_t(const T* x, const float* mean, const float* invstd, const float* weight, const float* bias,
                           const T* residual, T* y, unsigned int n, unsigned int c, unsigned int hw, unsigned int relu,
                           unsigned int vec) {
    unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int total = n * c * hw;
    unsigned int i = t * vec;
    if (i >= total) return;
    unsigned int ch = (i / hw) % c;
    float mu = mean[ch], is = invstd[ch], w = weight[ch], b = bias[ch];
    if (sizeof(T) == 2 && vec == 8) {
        bn_apply_vec<T, 8>(x, residual, y, i, mu, is, w, b, relu);
    } else if (vec == 4) {
        bn_apply_vec<T, 4>(x, residual, y, i, mu, is, w, b, relu);
    } else {
        float o = (load(x[i]) - mu) * is * w + b;
        if (residual) o += load(residual[i]);
        if (relu) o = fmaxf(o, 0.0f);
        y[i] = store<T>(o);
    }
}
extern "C" __global__ void bn_apply(const float* x, const float* mean, const float* invstd, const float* weight,
                                    const float* bias, const float* residual, float* y, unsigned int n,
                                    unsigned int c, unsigned int hw, unsigned int relu, unsigned int vec) {
    PDL_WAIT();
    bn_apply_t(x, mean, invstd, weight, bias, residual, y, n, c, hw, relu, vec);
}
extern "C" __global__ void bn_apply_bf16(const bf16* x, const float* mean, const float* invstd, const float* weight,
                                         const float* bias, const bf16* residual, bf16* y, unsigned int n,
                                         unsigned int c, unsigned int hw, unsigned int relu, unsigned int vec) {
    PDL_WAIT();
    bn_apply_t(x, mean, invstd, weight, bias, residual, y, n, c, hw, relu, vec);
}

// Whether the relu passed a pre-activation of o, judged on o as bn_apply
// stores it (rounded to T), so that a mask recomputed from x agrees with one
// read from y bit for bit in bf16 too (in fp32 the rounding is nothing).
template <typename T> __device__ __forceinline__ bool bn_passes(float o);
template <> __device__ __forceinline__ bool bn_passes<float>(float o) { return o > 0.0f; }
// In bf16 without the rounding: o rounds (store<bf16>) above 0 exactly when
// its bits, as a signed integer, are at least 0x8001 (less rounds to +0)
// and at most +inf's (a NaN stays a NaN, above nothing); every one of the
// 2^32 floats checked against load(store<bf16>(o)) > 0 on the host.
template <> __device__ __forceinline__ bool bn_passes<bf16>(float o) {
    int u = __float_as_int(o);
    return u >= 0x8001 && u <= 0x7f800000;
}

// Which values the gradient passes in backward: all (mask 0), those whose
// pre-activation (x - mean) * invstd * w + b is above 0 (mask 1: relu with
// the output not kept), those whose output y is above 0 (mask 2: relu
// after a residual, whose output is at hand), or those whose pre-activation
// plus the residual, y read as the residual, is above 0 (mask 3: relu after
// a residual whose output was dropped; bn_apply's arithmetic, so the same
// mask bit for bit).
template <typename T>
__device__ __forceinline__ float bn_masked(float g, float xv, float yv, float mu, float is, float w, float b,
                                           unsigned int mask) {
    if (mask == 1) return bn_passes<T>((xv - mu) * is * w + b) ? g : 0.0f;
    if (mask == 2) return yv > 0.0f ? g : 0.0f;
    if (mask == 3) {
        float o = (xv - mu) * is * w + b;
        o += yv;
        return bn_passes<T>(o) ? g : 0.0f;
    }
    return g;
}

// A thread's part of a run's backward sums, walked as bn_stats_run walks
// (its values in flight, added in order); `consts` holds the channel's
// mean, invstd, weight and bias.
template <typename T, int V>
__device__ __forceinline__ void bn_backward_run(const T* x, const T* gy, const T* y, unsigned int ch, unsigned int c,
                                                unsigned int hw, unsigned int first, unsigned int k1,
                                                unsigned int stride, const float* consts, unsigned int mask,
                                                float* centred, float* total) {
    constexpr int S = BN_VALUES_IN_FLIGHT / V;
    Walk wk = bn_walk(first, hw, stride);
    for (size_t at0 = first; at0 < k1; at0 += (size_t)S * stride) {
        float xv[S][V], g[S][V], yv[S][V];
#pragma unroll
        for (int u = 0; u < S; u++) {
            for (int e = 0; e < V; e++) yv[u][e] = 0.0f;
            if (at0 + (size_t)u * stride < k1) {
                size_t at = bn_index(wk, ch, c, hw);
                bn_run_load<T, V>(x + at, xv[u]);
                bn_run_load<T, V>(gy + at, g[u]);
                if (mask >= 2) bn_run_load<T, V>(y + at, yv[u]);
            }
            bn_advance(wk, hw);
        }
#pragma unroll
        for (int u = 0; u < S; u++) {
            if (at0 + (size_t)u * stride >= k1) break;
            for (int e = 0; e < V; e++) {
                float ge = bn_masked<T>(g[u][e], xv[u][e], yv[u][e], consts[0], consts[1], consts[2], consts[3], mask);
                *centred += ge * (xv[u][e] - consts[0]);
                *total += ge;
            }
        }
    }
}

// Backward sums, first half: block (j, ch) sums over run j of channel ch
// the passed gradient g and g * (x - mean).
template <typename T>
__device__ void bn_backward_partial_t(const T* x, const T* gy, const T* y, const float* mean, const float* invstd,
                                      const float* weight, const float* bias, float* partial, unsigned int n,
                                      unsigned int c, unsigned int hw, unsigned int chunk_len, unsigned int mask) {
    __shared__ float buf[256];
    unsigned int ch = blockIdx.y, j = blockIdx.x, chunks = gridDim.x;
    unsigned int count = n * hw;
    unsigned int k0 = j * chunk_len;
    unsigned int k1 = min(count, k0 + chunk_len);
    unsigned int vec = bn_run_vec<T>(hw, chunk_len), stride = blockDim.x * vec;
    float mu = mean[ch], is = invstd[ch], w = weight[ch], b = bias[ch];
    float centred = 0.0f, total = 0.0f;
    if (k0 + threadIdx.x * vec < k1) {
        float constants[4] = {mu, is, w, b};
        if (vec == 4)
            bn_backward_run<T, 4>(x, gy, y, ch, c, hw, k0 + threadIdx.x * vec, k1, stride, constants, mask, &centred,
                                  &total);
        else
            bn_backward_run<T, 1>(x, gy, y, ch, c, hw, k0 + threadIdx.x * vec, k1, stride, constants, mask, &centred,
                                  &total);
    }
    centred = block_sum(centred, buf);
    total = block_sum(total, buf);
    if (threadIdx.x == 0) {
        partial[2 * (ch * chunks + j)] = centred;
        partial[2 * (ch * chunks + j) + 1] = total;
    }
}
extern "C" __global__ void bn_backward_partial(const float* x, const float* gy, const float* y, const float* mean,
                                               const float* invstd, const float* weight, const float* bias,
                                               float* partial, unsigned int n, unsigned int c, unsigned int hw,
                                               unsigned int chunk_len, unsigned int mask) {
    PDL_WAIT();
    bn_backward_partial_t(x, gy, y, mean, invstd, weight, bias, partial, n, c, hw, chunk_len, mask);
}
extern "C" __global__ void bn_backward_partial_bf16(const bf16* x, const bf16* gy, const bf16* y, const float* mean,
                                                    const float* invstd, const float* weight, const float* bias,
                                                    float* partial, unsigned int n, unsigned int c, unsigned int hw,
                                                    unsigned int chunk_len, unsigned int mask) {
    PDL_WAIT();
    bn_backward_partial_t(x, gy, y, mean, invstd, weight, bias, partial, n, c, hw, chunk_len, mask);
}

// Backward sums, second half: a channel's group (as bn_stats_finish's)
// adds its runs in run order into the weight's gradient (sum g * xhat:
// invstd applied once, at the end) and the bias's (sum g).
extern "C" __global__ void bn_backward_finish(const float* partial, const float* invstd, float* sum_dy_xhat,
                                              float* sum_dy, unsigned int chunks, unsigned int c) {
    PDL_WAIT();
    __shared__ float buf[256];
    unsigned int ch = bn_finish_channel();
    if (ch >= c) return;
    const float* p = partial + 2 * (size_t)ch * chunks;
    float centred = 0.0f, total = 0.0f;
    for (unsigned int j = threadIdx.x; j < chunks; j += blockDim.x) {
        centred += p[2 * j];
        total += p[2 * j + 1];
    }
    centred = bn_finish_sum(centred, buf);
    total = bn_finish_sum(total, buf);
    if (threadIdx.x == 0) {
        sum_dy_xhat[ch] = centred * invstd[ch];
        sum_dy[ch] = total;
    }
}

// dx = w * invstd * (g - sum_dy / count - xhat * sum_dy_xhat / count) in
// training, w * invstd * g in evaluation, with g the passed gradient. The
// caller divides the sums by the count once per channel (`dy_mean`,
// `dy_xhat_mean`), not twice per value: the same quotients, and with the
// relu test on bits (bn_passes) NHWC's pass over 64 channels at batch 128
// took 24.3 µs against 26.0 (bench/bn_kernels.sh, an H100).
__device__ __forceinline__ float bn_input_grad(float g, float xv, float mu, float is, float scale, float dy_mean,
                                               float dy_xhat_mean, unsigned int training) {
    if (!training) return scale * g;
    float xhat = (xv - mu) * is;
    return scale * (g - dy_mean - xhat * dy_xhat_mean);
}

// The input's gradient (bn_input_grad) and the residual's, when wanted,
// which is g itself, for V consecutive values of a channel at i (a multiple
// of 4). Every gy value is read before anything is written: gx or
// gresidual may be gy itself (backward writes over a gradient nothing reads
// after).
template <typename T, int V>
__device__ __forceinline__ void bn_input_grad_vec(const T* x, const T* gy, const T* y, T* gx, T* gresidual,
                                                  unsigned int i, float mu, float is, float w, float b, float scale,
                                                  float dy_mean, float dy_xhat_mean, unsigned int training,
                                                  unsigned int mask) {
    float xv[V], g[V], yv[V];
    for (int h = 0; h < V; h += 4) {
        bn_load4(x + i + h, xv + h);
        bn_load4(gy + i + h, g + h);
    }
    if (mask >= 2)
        for (int h = 0; h < V; h += 4) bn_load4(y + i + h, yv + h);
    else
        for (int e = 0; e < V; e++) yv[e] = 0.0f;
    for (int e = 0; e < V; e++) g[e] = bn_masked<T>(g[e], xv[e], yv[e], mu, is, w, b, mask);
    if (gresidual)
        for (int h = 0; h < V; h += 4) bn_store4(gresidual + i + h, g + h);
    if (!gx) return;
    float o[V];
    for (int e = 0; e < V; e++) o[e] = bn_input_grad(g[e], xv[e], mu, is, scale, dy_mean, dy_xhat_mean, training);
    for (int h = 0; h < V; h += 4) bn_store4(gx + i + h, o + h);
}

// bn_input_grad_vec for `vec` consecutive values per thread (4, or in bf16
// 8, as bn_apply takes them), or for one value, with the same care for gy.
template <typename T>
__device__ void bn_backward_input_t(const T* x, const T* gy, const T* y, const float* mean, const float* invstd,
                                    const float* weight, const float* bias, const float* sum_dy_xhat,
                                    const float* sum_dy, T* gx, T* gresidual, unsigned int n, unsigned int c,
                                    unsigned int hw, unsigned int training, unsigned int mask, unsigned int vec) {
    unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int i = t * vec;
    if (i >= n * c * hw) return;
    unsigned int ch = (i / hw) % c;
    float mu = mean[ch], is = invstd[ch], w = weight[ch], b = bias[ch];
    float scale = w * is, count = (float)(n * hw);
    float dy_mean = sum_dy[ch] / count, dy_xhat_mean = sum_dy_xhat[ch] / count;
    if (vec == 8) {
        bn_input_grad_vec<T, 8>(x, gy, y, gx, gresidual, i, mu, is, w, b, scale, dy_mean, dy_xhat_mean, training,
                                mask);
    } else if (vec == 4) {
        bn_input_grad_vec<T, 4>(x, gy, y, gx, gresidual, i, mu, is, w, b, scale, dy_mean, dy_xhat_mean, training,
                                mask);
    } else {
        float xv = load(x[i]);
        float g = bn_masked<T>(load(gy[i]), xv, mask >= 2 ? load(y[i]) : 0.0f, mu, is, w, b, mask);
        if (gresidual) gresidual[i] = store<T>(g);
        if (!gx) return;
        gx[i] = store<T>(bn_input_grad(g, xv, mu, is, scale, dy_mean, dy_xhat_mean, training));
    }
}
extern "C" __global__ void bn_backward_input(const float* x, const float* gy, const float* y, const float* mean,
                                             const float* invstd, const float* weight, const float* bias,
                                             const float* sum_dy_xhat, const float* sum_dy, float* gx,
                                             float* gresidual, unsigned int n, unsigned int c, unsigned int hw,
                                             unsigned int training, unsigned int mask) {
    PDL_WAIT();
    // Four values per thread where they share a plane, as in bn_apply (one
    // 16-byte access each); geometry.rs (apply_vec) sizes the grid by the
    // same rule.
    unsigned int vec = hw % 4 == 0 ? 4u : 1u;
    bn_backward_input_t(x, gy, y, mean, invstd, weight, bias, sum_dy_xhat, sum_dy, gx, gresidual, n, c, hw, training,
                        mask, vec);
}
extern "C" __global__ void bn_backward_input_bf16(const bf16* x, const bf16* gy, const bf16* y, const float* mean,
                                                  const float* invstd, const float* weight, const float* bias,
                                                  const float* sum_dy_xhat, const float* sum_dy, bf16* gx,
                                                  bf16* gresidual, unsigned int n, unsigned int c, unsigned int hw,
                                                  unsigned int training, unsigned int mask) {
    PDL_WAIT();
    // Several values per thread where they share a plane, as in bn_apply.
    // The launch (mod.rs) sizes its grid by the same rule; `vec` is no
    // argument of its own because a launch takes at most 16.
    unsigned int vec = hw % 8 == 0 ? 8u : hw % 4 == 0 ? 4u : 1u;
    bn_backward_input_t(x, gy, y, mean, invstd, weight, bias, sum_dy_xhat, sum_dy, gx, gresidual, n, c, hw, training,
                        mask, vec);
}

// ---- Channels last (NHWC) ----
//
// Element (img, ch, px) of an NHWC tensor is at (img * hw + px) * c + ch:
// row r = img * hw + px holds one pixel's c channels, and channel ch's
// values in (img, px) order, the order the NCHW sums run in, are
// x[r * c + ch] for r = 0, 1, ... The NHWC sums therefore write the very
// partials the NCHW ones do, per channel and run of `chunk_len` rows, each
// run's by the same arithmetic (its shifted sums, a fixed tree), and
// bn_stats_finish and bn_backward_finish merge them unchanged.
//
// Every NHWC kernel runs blocks of blockDim.x × blockDim.y threads (256, a
// power of two each way) over a tile of blockDim.x * vec channels: thread
// (tx, ty) takes `vec` consecutive channels, tx * vec on, of tile
// blockIdx.y (one access of up to 16 bytes), on rows ty, ty + blockDim.y,
// ... of block column blockIdx.x's rows: a warp reads whole rows of the
// tile, consecutive bytes. `vec` divides c, so a thread's channels are of
// one row and its accesses aligned. A thread reads its channels' constants
// once, not once per value.

// V consecutive values at p, widened; or stored, rounded once.
template <int V> __device__ __forceinline__ void bn_loadv(const float* p, float* v) {
    if (V == 1) {
        v[0] = p[0];
    } else if (V == 2) {
        float2 q = *reinterpret_cast<const float2*>(p);
        v[0] = q.x;
        v[1] = q.y;
    } else {
        for (int h = 0; h < V; h += 4) bn_load4(p + h, v + h);
    }
}
template <int V> __device__ __forceinline__ void bn_loadv(const bf16* p, float* v) {
    if (V == 1) {
        v[0] = load(p[0]);
    } else if (V == 2) {
        unsigned int q = *reinterpret_cast<const unsigned int*>(p);
        v[0] = __uint_as_float(q << 16);
        v[1] = __uint_as_float(q & 0xffff0000u);
    } else if (V == 4) {
        bn_load4(p, v);
    } else {
        // Eight values in one 16-byte access, their bits carried in a float4.
        for (int h = 0; h < V; h += 8) {
            float4 q = *reinterpret_cast<const float4*>(p + h);
            unsigned int u[4] = {__float_as_uint(q.x), __float_as_uint(q.y), __float_as_uint(q.z),
                                 __float_as_uint(q.w)};
            for (int k = 0; k < 4; k++) {
                v[h + 2 * k] = __uint_as_float(u[k] << 16);
                v[h + 2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
            }
        }
    }
}
template <int V> __device__ __forceinline__ void bn_storev(float* p, const float* v) {
    if (V == 1) {
        p[0] = v[0];
    } else if (V == 2) {
        float2 q;
        q.x = v[0];
        q.y = v[1];
        *reinterpret_cast<float2*>(p) = q;
    } else {
        for (int h = 0; h < V; h += 4) bn_store4(p + h, v + h);
    }
}
template <int V> __device__ __forceinline__ void bn_storev(bf16* p, const float* v) {
    if (V == 1) {
        p[0] = store<bf16>(v[0]);
    } else if (V == 2) {
        *reinterpret_cast<unsigned int*>(p) = bf16_pack2(v[0], v[1]);
    } else if (V == 4) {
        bn_store4(p, v);
    } else {
        for (int h = 0; h < V; h += 8) {
            float4 q;
            q.x = __uint_as_float(bf16_pack2(v[h], v[h + 1]));
            q.y = __uint_as_float(bf16_pack2(v[h + 2], v[h + 3]));
            q.z = __uint_as_float(bf16_pack2(v[h + 4], v[h + 5]));
            q.w = __uint_as_float(bf16_pack2(v[h + 6], v[h + 7]));
            *reinterpret_cast<float4*>(p + h) = q;
        }
    }
}

// Rows a thread of an NHWC elementwise pass loads before it stores either:
// two, as more registers would cost blocks per SM.
#define BN_PAIR 2

// An NHWC block's threads (geometry.rs: NHWC_THREADS), and the blocks per
// SM each NHWC kernel's registers are held to (its __launch_bounds__): the
// rows in flight above must not cost the occupancy they are for.
#define BN_NHWC_THREADS 256

// A thread's 16 bytes of one row (V values that fill them: 4 fp32 or 8
// bf16), as raw bits: what a row in flight holds, 4 registers whatever T.
__device__ __forceinline__ uint4 bn_load16(const void* p) { return *reinterpret_cast<const uint4*>(p); }

// Those 16 bytes widened, as bn_loadv widens them.
__device__ __forceinline__ void bn_widen16(const float*, uint4 q, float* v) {
    v[0] = __uint_as_float(q.x);
    v[1] = __uint_as_float(q.y);
    v[2] = __uint_as_float(q.z);
    v[3] = __uint_as_float(q.w);
}
__device__ __forceinline__ void bn_widen16(const bf16*, uint4 q, float* v) {
    unsigned int u[4] = {q.x, q.y, q.z, q.w};
    for (int k = 0; k < 4; k++) {
        v[2 * k] = __uint_as_float(u[k] << 16);
        v[2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
    }
}

// The V per-channel values of a thread's channels, ch on.
template <int V> __device__ __forceinline__ void bn_channels(const float* p, unsigned int ch, float* v) {
    for (int e = 0; e < V; e++) v[e] = p[ch + e];
}

// The first of this thread's channels (c or more: none of them).
__device__ __forceinline__ unsigned int bn_nhwc_channel(unsigned int vec) {
    return (blockIdx.y * blockDim.x + threadIdx.x) * vec;
}

// Rows [first, end) of block column blockIdx.x: `len` each, the last
// fewer (without overflowing near 2^32).
__device__ __forceinline__ void bn_nhwc_rows(unsigned int rows, unsigned int len, unsigned int* first,
                                             unsigned int* end) {
    unsigned int r0 = blockIdx.x * len;
    *first = r0;
    *end = r0 < rows ? r0 + min(len, rows - r0) : r0;
}

// Sums each of a thread's V values of s and of q over the block's rows of
// threads (threadIdx.y) in a fixed order; row 0 gets the totals. First
// within each warp, by shuffles across its rows (a warp holds 32 /
// blockDim.x rows where blockDim.x is below 32; lanes of the same channels
// are blockDim.x apart), then the warps' totals in warp order through
// `red` (two sums of at most 8 groups over a tile of at most 64 values: a
// tile spans 128 bytes or less), read by row 0 alone: one barrier, where a
// tree through shared memory took a barrier per halving. Every thread of
// the block calls it, once: `red` is not free again after it.
template <int V> __device__ __forceinline__ void bn_sum_rows(float* s, float* q, float* red) {
    unsigned int along = blockDim.x;
    unsigned int per_warp = along < 32 ? 32 / along : 1;
    for (unsigned int lanes = along; lanes < 32; lanes *= 2)
        for (int e = 0; e < V; e++) {
            s[e] += __shfl_xor_sync(0xffffffffu, s[e], lanes);
            q[e] += __shfl_xor_sync(0xffffffffu, q[e], lanes);
        }
    unsigned int tile = along * V, groups = blockDim.y / per_warp;
    float* mine = red + 2 * (threadIdx.x * V);
    if (threadIdx.y % per_warp == 0) {
        float* at = mine + 2 * (threadIdx.y / per_warp) * tile;
        for (int e = 0; e < V; e++) {
            at[2 * e] = s[e];
            at[2 * e + 1] = q[e];
        }
    }
    __syncthreads();
    if (threadIdx.y == 0)
        for (unsigned int k = 1; k < groups; k++) {
            const float* at = mine + 2 * k * tile;
            for (int e = 0; e < V; e++) {
                s[e] += at[2 * e];
                q[e] += at[2 * e + 1];
            }
        }
}

// The reduction space of an NHWC sum: bn_sum_rows needs 1024 floats.
#define BN_NHWC_RED (256 * 8)

// bn_stats_partial in NHWC: block (j, tile) gives run j (rows j *
// chunk_len on) of each of its channels the run's mean and its sum of
// squared deviations, shifted by the run's first value as in NCHW.
template <typename T, int V>
__device__ void bn_stats_partial_nhwc_v(const T* x, float* partial, unsigned int rows, unsigned int c,
                                        unsigned int chunk_len, float* red) {
    unsigned int j = blockIdx.x, chunks = gridDim.x;
    unsigned int ch = bn_nhwc_channel(V);
    bool mine = ch < c;
    unsigned int k0, k1;
    bn_nhwc_rows(rows, chunk_len, &k0, &k1);
    float shift[V], s[V], q[V];
    for (int e = 0; e < V; e++) {
        shift[e] = 0.0f;
        s[e] = 0.0f;
        q[e] = 0.0f;
    }
    if (mine && k0 < k1) {
        bn_loadv<V>(x + (size_t)k0 * c + ch, shift);
        if (V * sizeof(T) == 16) {
            unsigned int step = blockDim.y;
            for (unsigned int r = k0 + threadIdx.y; r < k1; r += BN_ROWS_IN_FLIGHT * step) {
                uint4 raw[BN_ROWS_IN_FLIGHT];
#pragma unroll
                for (int u = 0; u < BN_ROWS_IN_FLIGHT; u++)
                    if (r + u * step < k1) raw[u] = bn_load16(x + (size_t)(r + u * step) * c + ch);
#pragma unroll
                for (int u = 0; u < BN_ROWS_IN_FLIGHT; u++) {
                    if (r + u * step >= k1) break;
                    float v[V];
                    bn_widen16(x, raw[u], v);
                    for (int e = 0; e < V; e++) {
                        float d = v[e] - shift[e];
                        s[e] += d;
                        q[e] += d * d;
                    }
                }
            }
        } else {
            for (unsigned int r = k0 + threadIdx.y; r < k1; r += blockDim.y) {
                float v[V];
                bn_loadv<V>(x + (size_t)r * c + ch, v);
                for (int e = 0; e < V; e++) {
                    float d = v[e] - shift[e];
                    s[e] += d;
                    q[e] += d * d;
                }
            }
        }
    }
    bn_sum_rows<V>(s, q, red);
    if (mine && threadIdx.y == 0 && k0 < k1) {
        float len = (float)(k1 - k0);
        for (int e = 0; e < V; e++) {
            float d = s[e] / len;
            size_t at = 2 * ((size_t)(ch + e) * chunks + j);
            partial[at] = shift[e] + d;
            partial[at + 1] = fmaxf(q[e] - s[e] * d, 0.0f);
        }
    }
}
template <typename T>
__device__ void bn_stats_partial_nhwc_t(const T* x, float* partial, unsigned int rows, unsigned int c,
                                        unsigned int chunk_len, unsigned int vec) {
    __shared__ float red[BN_NHWC_RED];
    if (sizeof(T) == 2 && vec == 8)
        bn_stats_partial_nhwc_v<T, 8>(x, partial, rows, c, chunk_len, red);
    else if (vec == 4)
        bn_stats_partial_nhwc_v<T, 4>(x, partial, rows, c, chunk_len, red);
    else if (vec == 2)
        bn_stats_partial_nhwc_v<T, 2>(x, partial, rows, c, chunk_len, red);
    else
        bn_stats_partial_nhwc_v<T, 1>(x, partial, rows, c, chunk_len, red);
}
extern "C" __global__ void __launch_bounds__(BN_NHWC_THREADS, 4)
bn_stats_partial_nhwc(const float* x, float* partial, unsigned int rows, unsigned int c, unsigned int chunk_len,
                      unsigned int vec) {
    PDL_WAIT();
    bn_stats_partial_nhwc_t(x, partial, rows, c, chunk_len, vec);
}
extern "C" __global__ void __launch_bounds__(BN_NHWC_THREADS, 4)
bn_stats_partial_nhwc_bf16(const bf16* x, float* partial, unsigned int rows, unsigned int c, unsigned int chunk_len,
                           unsigned int vec) {
    PDL_WAIT();
    bn_stats_partial_nhwc_t(x, partial, rows, c, chunk_len, vec);
}

// bn_apply in NHWC: bn_apply's arithmetic, value for value, on the block
// column's share of the rows (split evenly over gridDim.x).
template <typename T, int V>
__device__ void bn_apply_nhwc_v(const T* x, const float* mean, const float* invstd, const float* weight,
                                const float* bias, const T* residual, T* y, unsigned int rows, unsigned int c,
                                unsigned int relu) {
    unsigned int ch = bn_nhwc_channel(V);
    if (ch >= c) return;
    unsigned int r0, r1;
    bn_nhwc_rows(rows, (rows + gridDim.x - 1) / gridDim.x, &r0, &r1);
    float mu[V], is[V], w[V], b[V];
    bn_channels<V>(mean, ch, mu);
    bn_channels<V>(invstd, ch, is);
    bn_channels<V>(weight, ch, w);
    bn_channels<V>(bias, ch, b);
    if (V * sizeof(T) == 16) {
        // Two rows' loads before either row's store (y may be x: each row
        // is read before it is written).
        unsigned int step = blockDim.y;
        for (unsigned int r = r0 + threadIdx.y; r < r1; r += BN_PAIR * step) {
            uint4 rx[BN_PAIR], rr[BN_PAIR];
#pragma unroll
            for (int u = 0; u < BN_PAIR; u++) {
                size_t at = (size_t)(r + u * step) * c + ch;
                if (r + u * step < r1) {
                    rx[u] = bn_load16(x + at);
                    if (residual) rr[u] = bn_load16(residual + at);
                }
            }
#pragma unroll
            for (int u = 0; u < BN_PAIR; u++) {
                if (r + u * step >= r1) break;
                size_t at = (size_t)(r + u * step) * c + ch;
                float v[V], o[V];
                bn_widen16(x, rx[u], v);
                for (int e = 0; e < V; e++) o[e] = (v[e] - mu[e]) * is[e] * w[e] + b[e];
                if (residual) {
                    float rv[V];
                    bn_widen16(residual, rr[u], rv);
                    for (int e = 0; e < V; e++) o[e] += rv[e];
                }
                if (relu)
                    for (int e = 0; e < V; e++) o[e] = fmaxf(o[e], 0.0f);
                bn_storev<V>(y + at, o);
            }
        }
    } else {
        for (unsigned int r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
            size_t at = (size_t)r * c + ch;
            float v[V], o[V];
            bn_loadv<V>(x + at, v);
            for (int e = 0; e < V; e++) o[e] = (v[e] - mu[e]) * is[e] * w[e] + b[e];
            if (residual) {
                float rv[V];
                bn_loadv<V>(residual + at, rv);
                for (int e = 0; e < V; e++) o[e] += rv[e];
            }
            if (relu)
                for (int e = 0; e < V; e++) o[e] = fmaxf(o[e], 0.0f);
            bn_storev<V>(y + at, o);
        }
    }
}
template <typename T>
__device__ void bn_apply_nhwc_t(const T* x, const float* mean, const float* invstd, const float* weight,
                                const float* bias, const T* residual, T* y, unsigned int rows, unsigned int c,
                                unsigned int relu, unsigned int vec) {
    if (sizeof(T) == 2 && vec == 8)
        bn_apply_nhwc_v<T, 8>(x, mean, invstd, weight, bias, residual, y, rows, c, relu);
    else if (vec == 4)
        bn_apply_nhwc_v<T, 4>(x, mean, invstd, weight, bias, residual, y, rows, c, relu);
    else if (vec == 2)
        bn_apply_nhwc_v<T, 2>(x, mean, invstd, weight, bias, residual, y, rows, c, relu);
    else
        bn_apply_nhwc_v<T, 1>(x, mean, invstd, weight, bias, residual, y, rows, c, relu);
}
extern "C" __global__ void __launch_bounds__(BN_NHWC_THREADS, 3)
bn_apply_nhwc(const float* x, const float* mean, const float* invstd, const float* weight, const float* bias,
              const float* residual, float* y, unsigned int rows, unsigned int c, unsigned int relu,
              unsigned int vec) {
    PDL_WAIT();
    bn_apply_nhwc_t(x, mean, invstd, weight, bias, residual, y, rows, c, relu, vec);
}
extern "C" __global__ void __launch_bounds__(BN_NHWC_THREADS, 3)
bn_apply_nhwc_bf16(const bf16* x, const float* mean, const float* invstd, const float* weight, const float* bias,
                   const bf16* residual, bf16* y, unsigned int rows, unsigned int c, unsigned int relu,
                   unsigned int vec) {
    PDL_WAIT();
    bn_apply_nhwc_t(x, mean, invstd, weight, bias, residual, y, rows, c, relu, vec);
}

// A thread's V values of x at `at` and of the gradient passed back
// through the fused relu (`mask`, as bn_masked), both NHWC.
template <typename T, int V>
__device__ __forceinline__ void bn_masked_row(const T* x, const T* gy, const T* y, size_t at, const float* mu,
                                              const float* is, const float* w, const float* b, unsigned int mask,
                                              float* xv, float* g) {
    float yv[V];
    bn_loadv<V>(x + at, xv);
    bn_loadv<V>(gy + at, g);
    if (mask >= 2)
        bn_loadv<V>(y + at, yv);
    else
        for (int e = 0; e < V; e++) yv[e] = 0.0f;
    for (int e = 0; e < V; e++) g[e] = bn_masked<T>(g[e], xv[e], yv[e], mu[e], is[e], w[e], b[e], mask);
}

// bn_backward_partial in NHWC: block (j, tile) sums over run j of each of
// its channels the passed gradient g and g * (x - mean).
template <typename T, int V>
__device__ void bn_backward_partial_nhwc_v(const T* x, const T* gy, const T* y, const float* mean,
                                           const float* invstd, const float* weight, const float* bias,
                                           float* partial, unsigned int rows, unsigned int c,
                                           unsigned int chunk_len, unsigned int mask, float* red) {
    unsigned int j = blockIdx.x, chunks = gridDim.x;
    unsigned int ch = bn_nhwc_channel(V);
    bool mine = ch < c;
    unsigned int k0, k1;
    bn_nhwc_rows(rows, chunk_len, &k0, &k1);
    float centred[V], total[V];
    for (int e = 0; e < V; e++) {
        centred[e] = 0.0f;
        total[e] = 0.0f;
    }
    if (mine) {
        float mu[V], is[V], w[V], b[V];
        bn_channels<V>(mean, ch, mu);
        bn_channels<V>(invstd, ch, is);
        bn_channels<V>(weight, ch, w);
        bn_channels<V>(bias, ch, b);
        if (V * sizeof(T) == 16) {
            // bn_masked_row's loads for BN_ROWS_IN_FLIGHT rows, then its
            // arithmetic row by row.
            unsigned int step = blockDim.y;
            for (unsigned int r = k0 + threadIdx.y; r < k1; r += BN_ROWS_IN_FLIGHT * step) {
                uint4 rx[BN_ROWS_IN_FLIGHT], rg[BN_ROWS_IN_FLIGHT], ry[BN_ROWS_IN_FLIGHT];
#pragma unroll
                for (int u = 0; u < BN_ROWS_IN_FLIGHT; u++) {
                    size_t at = (size_t)(r + u * step) * c + ch;
                    if (r + u * step < k1) {
                        rx[u] = bn_load16(x + at);
                        rg[u] = bn_load16(gy + at);
                        if (mask >= 2) ry[u] = bn_load16(y + at);
                    }
                }
#pragma unroll
                for (int u = 0; u < BN_ROWS_IN_FLIGHT; u++) {
                    if (r + u * step >= k1) break;
                    float xv[V], g[V], yv[V];
                    bn_widen16(x, rx[u], xv);
                    bn_widen16(gy, rg[u], g);
                    if (mask >= 2)
                        bn_widen16(y, ry[u], yv);
                    else
                        for (int e = 0; e < V; e++) yv[e] = 0.0f;
                    for (int e = 0; e < V; e++) g[e] = bn_masked<T>(g[e], xv[e], yv[e], mu[e], is[e], w[e], b[e], mask);
                    for (int e = 0; e < V; e++) {
                        centred[e] += g[e] * (xv[e] - mu[e]);
                        total[e] += g[e];
                    }
                }
            }
        } else {
            for (unsigned int r = k0 + threadIdx.y; r < k1; r += blockDim.y) {
                float xv[V], g[V];
                bn_masked_row<T, V>(x, gy, y, (size_t)r * c + ch, mu, is, w, b, mask, xv, g);
                for (int e = 0; e < V; e++) {
                    centred[e] += g[e] * (xv[e] - mu[e]);
                    total[e] += g[e];
                }
            }
        }
    }
    bn_sum_rows<V>(centred, total, red);
    if (mine && threadIdx.y == 0) {
        for (int e = 0; e < V; e++) {
            size_t at = 2 * ((size_t)(ch + e) * chunks + j);
            partial[at] = centred[e];
            partial[at + 1] = total[e];
        }
    }
}
template <typename T>
__device__ void bn_backward_partial_nhwc_t(const T* x, const T* gy, const T* y, const float* mean,
                                           const float* invstd, const float* weight, const float* bias,
                                           float* partial, unsigned int rows, unsigned int c,
                                           unsigned int chunk_len, unsigned int mask, unsigned int vec) {
    __shared__ float red[BN_NHWC_RED];
    if (sizeof(T) == 2 && vec == 8)
        bn_backward_partial_nhwc_v<T, 8>(x, gy, y, mean, invstd, weight, bias, partial, rows, c, chunk_len, mask,
                                         red);
    else if (vec == 4)
        bn_backward_partial_nhwc_v<T, 4>(x, gy, y, mean, invstd, weight, bias, partial, rows, c, chunk_len, mask,
                                         red);
    else if (vec == 2)
        bn_backward_partial_nhwc_v<T, 2>(x, gy, y, mean, invstd, weight, bias, partial, rows, c, chunk_len, mask,
                                         red);
    else
        bn_backward_partial_nhwc_v<T, 1>(x, gy, y, mean, invstd, weight, bias, partial, rows, c, chunk_len, mask,
                                         red);
}
extern "C" __global__ void __launch_bounds__(BN_NHWC_THREADS, 2)
bn_backward_partial_nhwc(const float* x, const float* gy, const float* y, const float* mean, const float* invstd,
                         const float* weight, const float* bias, float* partial, unsigned int rows, unsigned int c,
                         unsigned int chunk_len, unsigned int mask, unsigned int vec) {
    PDL_WAIT();
    bn_backward_partial_nhwc_t(x, gy, y, mean, invstd, weight, bias, partial, rows, c, chunk_len, mask, vec);
}
extern "C" __global__ void __launch_bounds__(BN_NHWC_THREADS, 2)
bn_backward_partial_nhwc_bf16(const bf16* x, const bf16* gy, const bf16* y, const float* mean, const float* invstd,
                              const float* weight, const float* bias, float* partial, unsigned int rows,
                              unsigned int c, unsigned int chunk_len, unsigned int mask, unsigned int vec) {
    PDL_WAIT();
    bn_backward_partial_nhwc_t(x, gy, y, mean, invstd, weight, bias, partial, rows, c, chunk_len, mask, vec);
}

// bn_backward_input in NHWC: the input's gradient and the residual's, as
// bn_input_grad_vec computes them, every gy value of a thread's row read
// before anything is written (gx or gresidual may be gy itself).
template <typename T, int V>
__device__ void bn_backward_input_nhwc_v(const T* x, const T* gy, const T* y, const float* mean, const float* invstd,
                                         const float* weight, const float* bias, const float* sum_dy_xhat,
                                         const float* sum_dy, T* gx, T* gresidual, unsigned int rows, unsigned int c,
                                         unsigned int training, unsigned int mask) {
    unsigned int ch = bn_nhwc_channel(V);
    if (ch >= c) return;
    unsigned int r0, r1;
    bn_nhwc_rows(rows, (rows + gridDim.x - 1) / gridDim.x, &r0, &r1);
    float mu[V], is[V], w[V], b[V], sdy[V], sdx[V];
    bn_channels<V>(mean, ch, mu);
    bn_channels<V>(invstd, ch, is);
    bn_channels<V>(weight, ch, w);
    bn_channels<V>(bias, ch, b);
    bn_channels<V>(sum_dy, ch, sdy);
    bn_channels<V>(sum_dy_xhat, ch, sdx);
    float count = (float)rows;
    // bn_input_grad's means, taken once.
    for (int e = 0; e < V; e++) {
        sdy[e] /= count;
        sdx[e] /= count;
    }
    if (V * sizeof(T) == 16) {
        // bn_masked_row's loads for two rows before either row's stores.
        unsigned int step = blockDim.y;
        for (unsigned int r = r0 + threadIdx.y; r < r1; r += BN_PAIR * step) {
            uint4 rx[BN_PAIR], rg[BN_PAIR], ry[BN_PAIR];
#pragma unroll
            for (int u = 0; u < BN_PAIR; u++) {
                size_t at = (size_t)(r + u * step) * c + ch;
                if (r + u * step < r1) {
                    rx[u] = bn_load16(x + at);
                    rg[u] = bn_load16(gy + at);
                    if (mask >= 2) ry[u] = bn_load16(y + at);
                }
            }
#pragma unroll
            for (int u = 0; u < BN_PAIR; u++) {
                if (r + u * step >= r1) break;
                size_t at = (size_t)(r + u * step) * c + ch;
                float xv[V], g[V], yv[V];
                bn_widen16(x, rx[u], xv);
                bn_widen16(gy, rg[u], g);
                if (mask >= 2)
                    bn_widen16(y, ry[u], yv);
                else
                    for (int e = 0; e < V; e++) yv[e] = 0.0f;
                for (int e = 0; e < V; e++) g[e] = bn_masked<T>(g[e], xv[e], yv[e], mu[e], is[e], w[e], b[e], mask);
                if (gresidual) bn_storev<V>(gresidual + at, g);
                if (!gx) continue;
                float o[V];
                for (int e = 0; e < V; e++)
                    o[e] = bn_input_grad(g[e], xv[e], mu[e], is[e], w[e] * is[e], sdy[e], sdx[e], training);
                bn_storev<V>(gx + at, o);
            }
        }
    } else {
        for (unsigned int r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
            size_t at = (size_t)r * c + ch;
            float xv[V], g[V];
            bn_masked_row<T, V>(x, gy, y, at, mu, is, w, b, mask, xv, g);
            if (gresidual) bn_storev<V>(gresidual + at, g);
            if (!gx) continue;
            float o[V];
            for (int e = 0; e < V; e++)
                o[e] = bn_input_grad(g[e], xv[e], mu[e], is[e], w[e] * is[e], sdy[e], sdx[e], training);
            bn_storev<V>(gx + at, o);
        }
    }
}
template <typename T>
__device__ void bn_backward_input_nhwc_t(const T* x, const T* gy, const T* y, const float* mean, const float* invstd,
                                         const float* weight, const float* bias, const float* sum_dy_xhat,
                                         const float* sum_dy, T* gx, T* gresidual, unsigned int rows, unsigned int c,
                                         unsigned int training, unsigned int mask, unsigned int vec) {
    if (sizeof(T) == 2 && vec == 8)
        bn_backward_input_nhwc_v<T, 8>(x, gy, y, mean, invstd, weight, bias, sum_dy_xhat, sum_dy, gx, gresidual,
                                       rows, c, training, mask);
    else if (vec == 4)
        bn_backward_input_nhwc_v<T, 4>(x, gy, y, mean, invstd, weight, bias, sum_dy_xhat, sum_dy, gx, gresidual,
                                       rows, c, training, mask);
    else if (vec == 2)
        bn_backward_input_nhwc_v<T, 2>(x, gy, y, mean, invstd, weight, bias, sum_dy_xhat, sum_dy, gx, gresidual,
                                       rows, c, training, mask);
    else
        bn_backward_input_nhwc_v<T, 1>(x, gy, y, mean, invstd, weight, bias, sum_dy_xhat, sum_dy, gx, gresidual,
                                       rows, c, training, mask);
}
extern "C" __global__ void __launch_bounds__(BN_NHWC_THREADS, 2)
bn_backward_input_nhwc(const float* x, const float* gy, const float* y, const float* mean, const float* invstd,
                       const float* weight, const float* bias, const float* sum_dy_xhat, const float* sum_dy,
                       float* gx, float* gresidual, unsigned int rows, unsigned int c, unsigned int training,
                       unsigned int mask, unsigned int vec) {
    PDL_WAIT();
    bn_backward_input_nhwc_t(x, gy, y, mean, invstd, weight, bias, sum_dy_xhat, sum_dy, gx, gresidual, rows, c,
                             training, mask, vec);
}
extern "C" __global__ void __launch_bounds__(BN_NHWC_THREADS, 2)
bn_backward_input_nhwc_bf16(const bf16* x, const bf16* gy, const bf16* y, const float* mean, const float* invstd,
                            const float* weight, const float* bias, const float* sum_dy_xhat, const float* sum_dy,
                            bf16* gx, bf16* gresidual, unsigned int rows, unsigned int c, unsigned int training,
                            unsigned int mask, unsigned int vec) {
    PDL_WAIT();
    bn_backward_input_nhwc_t(x, gy, y, mean, invstd, weight, bias, sum_dy_xhat, sum_dy, gx, gresidual, rows, c,
                             training, mask, vec);
}
