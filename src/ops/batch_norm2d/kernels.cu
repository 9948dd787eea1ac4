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

// Value k (image k / hw, pixel k % hw) of channel ch walks with a stride of
// blockDim.x without a division per value: `Walk` keeps image and pixel.
struct Walk {
    unsigned int img, px, step_img, step_px;
};

__device__ __forceinline__ Walk bn_walk(unsigned int k, unsigned int hw) {
    Walk w;
    w.img = k / hw;
    w.px = k % hw;
    w.step_img = blockDim.x / hw;
    w.step_px = blockDim.x % hw;
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

// Training statistics, first half: block (j, ch) gives run j of channel ch
// its mean and its sum of squared deviations (from the run's first value,
// then corrected: one pass, without the cancellation of raw squares).
extern "C" __global__ void bn_stats_partial(const float* x, float* partial, unsigned int n, unsigned int c,
                                            unsigned int hw, unsigned int chunk_len) {
    __shared__ float buf[256];
    unsigned int ch = blockIdx.y, j = blockIdx.x, chunks = gridDim.x;
    unsigned int count = n * hw;
    unsigned int k0 = j * chunk_len;
    unsigned int k1 = min(count, k0 + chunk_len);
    Walk w0 = bn_walk(k0, hw);
    float shift = x[bn_index(w0, ch, c, hw)];
    float s = 0.0f, q = 0.0f;
    if (k0 + threadIdx.x < k1) {
        Walk w = bn_walk(k0 + threadIdx.x, hw);
        for (unsigned int k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
            float d = x[bn_index(w, ch, c, hw)] - shift;
            s += d;
            q += d * d;
            bn_advance(w, hw);
        }
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

// Training statistics, second half: block ch merges its channel's runs in
// run order (Chan's parallel variance: each run's squared deviations plus
// its size times its mean's squared distance from the channel's mean),
// saves the mean and 1/sqrt(var + eps), and moves the running statistics
// towards them (the variance unbiased, n/(n-1)). Block 0 counts the batch.
extern "C" __global__ void bn_stats_finish(const float* partial, float* mean, float* invstd, float* running_mean,
                                           float* running_var, float* batches, unsigned int n, unsigned int hw,
                                           unsigned int chunks, unsigned int chunk_len, float momentum, float eps) {
    __shared__ float buf[256];
    unsigned int ch = blockIdx.x;
    unsigned int count = n * hw;
    const float* p = partial + 2 * ch * chunks;
    float weighted = 0.0f;
    for (unsigned int j = threadIdx.x; j < chunks; j += blockDim.x) {
        float len = (float)(min(count, (j + 1) * chunk_len) - j * chunk_len);
        weighted += len * p[2 * j];
    }
    float mu = block_sum(weighted, buf) / (float)count;
    float m2 = 0.0f;
    for (unsigned int j = threadIdx.x; j < chunks; j += blockDim.x) {
        float len = (float)(min(count, (j + 1) * chunk_len) - j * chunk_len);
        float d = p[2 * j] - mu;
        m2 += p[2 * j + 1] + len * d * d;
    }
    float var = block_sum(m2, buf) / (float)count;
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
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= c) return;
    mean[i] = running_mean[i];
    invstd[i] = 1.0f / sqrtf(running_var[i] + eps);
}

// y = (x - mean) * invstd * w + b, plus residual[i] when there is one, then
// max(., 0) when relu; `vec` consecutive values per thread (4 when hw is a
// multiple of 4: they share a channel, and the buffers are 256-byte aligned).
extern "C" __global__ void bn_apply(const float* x, const float* mean, const float* invstd, const float* weight,
                                    const float* bias, const float* residual, float* y, unsigned int n,
                                    unsigned int c, unsigned int hw, unsigned int relu, unsigned int vec) {
    unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int total = n * c * hw;
    unsigned int i = t * vec;
    if (i >= total) return;
    unsigned int ch = (i / hw) % c;
    float mu = mean[ch], is = invstd[ch], w = weight[ch], b = bias[ch];
    if (vec == 4) {
        float4 v = *reinterpret_cast<const float4*>(x + i);
        float o[4] = {(v.x - mu) * is * w + b, (v.y - mu) * is * w + b, (v.z - mu) * is * w + b,
                      (v.w - mu) * is * w + b};
        if (residual) {
            float4 r = *reinterpret_cast<const float4*>(residual + i);
            o[0] += r.x;
            o[1] += r.y;
            o[2] += r.z;
            o[3] += r.w;
        }
        if (relu)
            for (int e = 0; e < 4; e++) o[e] = fmaxf(o[e], 0.0f);
        *reinterpret_cast<float4*>(y + i) = make_float4(o[0], o[1], o[2], o[3]);
    } else {
        float o = (x[i] - mu) * is * w + b;
        if (residual) o += residual[i];
        if (relu) o = fmaxf(o, 0.0f);
        y[i] = o;
    }
}

// Which values the gradient passes in backward: all (mask 0), those whose
// pre-activation (x - mean) * invstd * w + b is above 0 (mask 1: relu with
// the output not kept), those whose output y is above 0 (mask 2: relu
// after a residual, whose output is at hand), or those whose pre-activation
// plus the residual, y read as the residual, is above 0 (mask 3: relu after
// a residual whose output was dropped; bn_apply's arithmetic, so the same
// mask bit for bit).
__device__ __forceinline__ float bn_masked(float g, float xv, float yv, float mu, float is, float w, float b,
                                           unsigned int mask) {
    if (mask == 1) return (xv - mu) * is * w + b > 0.0f ? g : 0.0f;
    if (mask == 2) return yv > 0.0f ? g : 0.0f;
    if (mask == 3) {
        float o = (xv - mu) * is * w + b;
        o += yv;
        return o > 0.0f ? g : 0.0f;
    }
    return g;
}

// Backward sums, first half: block (j, ch) sums over run j of channel ch
// the passed gradient g and g * (x - mean).
extern "C" __global__ void bn_backward_partial(const float* x, const float* gy, const float* y, const float* mean,
                                               const float* invstd, const float* weight, const float* bias,
                                               float* partial, unsigned int n, unsigned int c, unsigned int hw,
                                               unsigned int chunk_len, unsigned int mask) {
    __shared__ float buf[256];
    unsigned int ch = blockIdx.y, j = blockIdx.x, chunks = gridDim.x;
    unsigned int count = n * hw;
    unsigned int k0 = j * chunk_len;
    unsigned int k1 = min(count, k0 + chunk_len);
    float mu = mean[ch], is = invstd[ch], w = weight[ch], b = bias[ch];
    float centred = 0.0f, total = 0.0f;
    if (k0 + threadIdx.x < k1) {
        Walk wk = bn_walk(k0 + threadIdx.x, hw);
        for (unsigned int k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
            size_t at = bn_index(wk, ch, c, hw);
            float xv = x[at];
            float g = bn_masked(gy[at], xv, mask >= 2 ? y[at] : 0.0f, mu, is, w, b, mask);
            centred += g * (xv - mu);
            total += g;
            bn_advance(wk, hw);
        }
    }
    centred = block_sum(centred, buf);
    total = block_sum(total, buf);
    if (threadIdx.x == 0) {
        partial[2 * (ch * chunks + j)] = centred;
        partial[2 * (ch * chunks + j) + 1] = total;
    }
}

// Backward sums, second half: block ch adds its runs in run order into the
// weight's gradient (sum g * xhat: invstd applied once, at the end) and the
// bias's (sum g).
extern "C" __global__ void bn_backward_finish(const float* partial, const float* invstd, float* sum_dy_xhat,
                                              float* sum_dy, unsigned int chunks) {
    __shared__ float buf[256];
    unsigned int ch = blockIdx.x;
    const float* p = partial + 2 * ch * chunks;
    float centred = 0.0f, total = 0.0f;
    for (unsigned int j = threadIdx.x; j < chunks; j += blockDim.x) {
        centred += p[2 * j];
        total += p[2 * j + 1];
    }
    centred = block_sum(centred, buf);
    total = block_sum(total, buf);
    if (threadIdx.x == 0) {
        sum_dy_xhat[ch] = centred * invstd[ch];
        sum_dy[ch] = total;
    }
}

// dx = w * invstd * (g - sum_dy / count - xhat * sum_dy_xhat / count) in
// training, w * invstd * g in evaluation, with g the passed gradient; the
// residual's gradient, when wanted, is g itself. One thread per value,
// which reads gy[i] before it writes anything at i: gx or gresidual may be
// gy itself (backward writes over a gradient nothing reads after).
extern "C" __global__ void bn_backward_input(const float* x, const float* gy, const float* y, const float* mean,
                                             const float* invstd, const float* weight, const float* bias,
                                             const float* sum_dy_xhat, const float* sum_dy, float* gx,
                                             float* gresidual, unsigned int n, unsigned int c, unsigned int hw,
                                             unsigned int training, unsigned int mask) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * c * hw) return;
    unsigned int ch = (i / hw) % c;
    float mu = mean[ch], is = invstd[ch], w = weight[ch];
    float xv = x[i];
    float g = bn_masked(gy[i], xv, mask >= 2 ? y[i] : 0.0f, mu, is, w, bias[ch], mask);
    if (gresidual) gresidual[i] = g;
    if (!gx) return;
    float scale = w * is;
    if (training) {
        float count = (float)(n * hw);
        float xhat = (xv - mu) * is;
        gx[i] = scale * (g - sum_dy[ch] / count - xhat * (sum_dy_xhat[ch] / count));
    } else {
        gx[i] = scale * g;
    }
}
