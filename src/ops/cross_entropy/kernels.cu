// cross_entropy: log-softmax, negative log-likelihood with optional label
// smoothing, and the mean over the batch, for any number of classes.
// Forward is two kernels: one block per row reduces the row's max, its sum of
// exponentials and (with smoothing) its sum of log-probabilities in shared
// memory and writes the row's log-sum-exp and loss; then one block sums the
// row losses in a fixed order. No atomics: a run repeats bit for bit.
// A label outside [0, c) makes its row's loss, and so the mean, NaN, which
// training reports. Logits and their gradient may be bf16 (a mixed-precision
// step's last matrix product makes them); everything is computed in fp32.

// Tree reductions over the block (blockDim.x a power of two, at most 256);
// every thread gets the result. The last barrier keeps a thread from
// overwriting `part` for the next reduction before all have read part[0].
// Sums are the backend's `block_sum` (common.cu); the maximum is here.
__device__ __forceinline__ float ce_block_max(float v, float* part) {
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + stride]);
        __syncthreads();
    }
    float r = part[0];
    __syncthreads();
    return r;
}

// Per row: lse = max + log(sum exp(x - max)); loss = -(x[label] - lse), or
// with smoothing e, (1 - e) * that + e * mean_k(-(x[k] - lse)). Blocks stride
// over the rows; `smoothing` is the same for every thread, so the barriers
// inside its branch are reached by the whole block.
template <typename T>
__device__ void ce_rows_t(const T* logits, const unsigned int* labels, float* lse_out, float* row_loss,
                          const float* weights, unsigned int n, unsigned int c, float smoothing) {
    __shared__ float part[256];
    for (unsigned int row = blockIdx.x; row < n; row += gridDim.x) {
        const T* x = logits + (size_t)row * c;
        float m = __int_as_float(0xff800000);  // -inf
        for (unsigned int k = threadIdx.x; k < c; k += blockDim.x) m = fmaxf(m, load(x[k]));
        m = ce_block_max(m, part);
        float sum = 0.0f;
        for (unsigned int k = threadIdx.x; k < c; k += blockDim.x) sum += expf(load(x[k]) - m);
        sum = block_sum(sum, part);
        float lse = m + logf(sum);
        float log_probs = 0.0f;
        if (smoothing > 0.0f) {
            for (unsigned int k = threadIdx.x; k < c; k += blockDim.x) log_probs += load(x[k]) - lse;
            log_probs = block_sum(log_probs, part);
        }
        if (threadIdx.x == 0) {
            unsigned int label = labels[row];
            float nll = label < c ? -(load(x[label]) - lse) : __int_as_float(0x7fc00000);  // NaN
            if (smoothing > 0.0f) nll = (1.0f - smoothing) * nll + smoothing * (-log_probs / (float)c);
            if (weights) nll *= weights[row];
            lse_out[row] = lse;
            row_loss[row] = nll;
        }
    }
}
extern "C" __global__ void ce_rows(const float* logits, const unsigned int* labels, float* lse_out,
                                   float* row_loss, const float* weights, unsigned int n, unsigned int c,
                                   float smoothing) {
    PDL_WAIT();
    ce_rows_t(logits, labels, lse_out, row_loss, weights, n, c, smoothing);
}
extern "C" __global__ void ce_rows_bf16(const bf16* logits, const unsigned int* labels, float* lse_out,
                                        float* row_loss, const float* weights, unsigned int n, unsigned int c,
                                        float smoothing) {
    PDL_WAIT();
    ce_rows_t(logits, labels, lse_out, row_loss, weights, n, c, smoothing);
}

// loss = sum(row_loss) / over, summed in double in a fixed order by one
// block (over = n unless the batch is a data-parallel shard of a larger one).
extern "C" __global__ void ce_mean(const float* row_loss, float* loss, unsigned int n, unsigned int over) {
    PDL_WAIT();
    __shared__ double part[256];
    double total = 0.0;
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) total += (double)row_loss[i];
    part[threadIdx.x] = total;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) loss[0] = (float)(part[0] / (double)over);
}

// gx = (softmax(x) - (1 - e) * onehot(label) - e / c) * gloss / over, with
// softmax(x) = exp(x - lse) from the forward's log-sum-exp, times the row's
// weight where there are weights (null: none, nothing multiplied).
template <typename T>
__device__ void ce_backward_t(const T* logits, const float* lse, const unsigned int* labels, const float* gloss,
                              T* gx, const float* weights, unsigned int n, unsigned int c, unsigned int over,
                              float smoothing) {
    size_t total = (size_t)n * c;
    float scale = gloss[0] / (float)over;
    float uniform = scale * (smoothing / (float)c);
    float hit = smoothing == 0.0f ? scale : scale * (1.0f - smoothing);
    size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        size_t row = i / c;
        unsigned int k = (unsigned int)(i - row * c);
        float g = expf(load(logits[i]) - lse[row]) * scale;
        if (smoothing != 0.0f) g -= uniform;
        if (labels[row] == k) g -= hit;
        if (weights) g *= weights[row];
        gx[i] = store<T>(g);
    }
}
extern "C" __global__ void ce_backward(const float* logits, const float* lse, const unsigned int* labels,
                                       const float* gloss, float* gx, const float* weights, unsigned int n,
                                       unsigned int c, unsigned int over, float smoothing) {
    PDL_WAIT();
    ce_backward_t(logits, lse, labels, gloss, gx, weights, n, c, over, smoothing);
}
extern "C" __global__ void ce_backward_bf16(const bf16* logits, const float* lse, const unsigned int* labels,
                                            const float* gloss, bf16* gx, const float* weights, unsigned int n,
                                            unsigned int c, unsigned int over, float smoothing) {
    PDL_WAIT();
    ce_backward_t(logits, lse, labels, gloss, gx, weights, n, c, over, smoothing);
}
