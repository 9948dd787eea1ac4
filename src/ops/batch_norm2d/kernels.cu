// batch_norm2d over n images of c planes of hw pixels (NCHW). Per-channel
// sums run one block of 256 threads per channel, each thread striding over
// the channel's values and the block adding the partial sums in a fixed
// tree in shared memory: no atomics, so every run gives the same bits.
// The arithmetic mirrors the CPU kernels' (cpu.rs), which sum in f64. The
// block sums are the backend's `block_sum` (common.cu).

// Element k (image k / hw, pixel k % hw) of channel ch.
__device__ __forceinline__ size_t bn_at(unsigned int k, unsigned int ch, unsigned int c, unsigned int hw) {
    return ((size_t)(k / hw) * c + ch) * hw + k % hw;
}

// Training: block ch computes the batch mean of channel ch, then the biased
// variance from the deviations (two passes, no cancellation), saves the
// mean and 1/sqrt(var + eps), and moves the running statistics towards
// them (the variance unbiased, n/(n-1)). Block 0 counts the batch.
extern "C" __global__ void bn_batch_stats(const float* x, float* mean, float* invstd, float* running_mean,
                                          float* running_var, float* batches, unsigned int n, unsigned int c,
                                          unsigned int hw, float momentum, float eps) {
    __shared__ float partial[256];
    unsigned int ch = blockIdx.x;
    unsigned int count = n * hw;
    float sum = 0.0f;
    for (unsigned int k = threadIdx.x; k < count; k += blockDim.x) sum += x[bn_at(k, ch, c, hw)];
    float mu = block_sum(sum, partial) / (float)count;
    float squares = 0.0f;
    for (unsigned int k = threadIdx.x; k < count; k += blockDim.x) {
        float d = x[bn_at(k, ch, c, hw)] - mu;
        squares += d * d;
    }
    float var = block_sum(squares, partial) / (float)count;
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

// y = (x - mean) * invstd * w + b, one thread per element.
extern "C" __global__ void bn_normalize(const float* x, const float* mean, const float* invstd, const float* weight,
                                        const float* bias, float* y, unsigned int n, unsigned int c,
                                        unsigned int hw) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * c * hw) return;
    unsigned int ch = (i / hw) % c;
    y[i] = (x[i] - mean[ch]) * invstd[ch] * weight[ch] + bias[ch];
}

// Block ch sums, over channel ch, dy * (x - mean) (times invstd once at the
// end: the weight's gradient, sum dy * xhat) and dy (the bias's).
extern "C" __global__ void bn_backward_sums(const float* x, const float* gy, const float* mean, const float* invstd,
                                            float* sum_dy_xhat, float* sum_dy, unsigned int n, unsigned int c,
                                            unsigned int hw) {
    __shared__ float partial[256];
    unsigned int ch = blockIdx.x;
    unsigned int count = n * hw;
    float mu = mean[ch];
    float centred = 0.0f, total = 0.0f;
    for (unsigned int k = threadIdx.x; k < count; k += blockDim.x) {
        size_t at = bn_at(k, ch, c, hw);
        float g = gy[at];
        centred += g * (x[at] - mu);
        total += g;
    }
    centred = block_sum(centred, partial);
    total = block_sum(total, partial);
    if (threadIdx.x == 0) {
        sum_dy_xhat[ch] = centred * invstd[ch];
        sum_dy[ch] = total;
    }
}

// dx = w * invstd * (dy - sum_dy / count - xhat * sum_dy_xhat / count) in
// training, w * invstd * dy in evaluation; one thread per element.
extern "C" __global__ void bn_backward_input(const float* x, const float* gy, const float* mean,
                                             const float* invstd, const float* weight, const float* sum_dy_xhat,
                                             const float* sum_dy, float* gx, unsigned int n, unsigned int c,
                                             unsigned int hw, unsigned int training) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * c * hw) return;
    unsigned int ch = (i / hw) % c;
    float is = invstd[ch];
    float scale = weight[ch] * is;
    if (training) {
        float count = (float)(n * hw);
        float xhat = (x[i] - mean[ch]) * is;
        gx[i] = scale * (gy[i] - sum_dy[ch] / count - xhat * (sum_dy_xhat[ch] / count));
    } else {
        gx[i] = scale * gy[i];
    }
}
