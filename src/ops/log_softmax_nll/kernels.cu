// log-softmax fused with the mean negative log-likelihood. One block of 256
// threads: each thread takes rows, the block sums their losses in shared
// memory. A label outside [0, c) makes the loss NaN, which training reports.

extern "C" __global__ void nll_forward(const float* logits, const unsigned int* labels, float* log_probs,
                                       float* loss, unsigned int n, unsigned int c, unsigned int over) {
    __shared__ float partial[256];
    float total = 0.0f;
    for (unsigned int row = threadIdx.x; row < n; row += blockDim.x) {
        const float* x = logits + (size_t)row * c;
        float* out = log_probs + (size_t)row * c;
        float m = __int_as_float(0xff800000);  // -inf
        for (unsigned int k = 0; k < c; ++k) m = fmaxf(m, x[k]);
        float sum = 0.0f;
        for (unsigned int k = 0; k < c; ++k) sum += expf(x[k] - m);
        float lse = m + logf(sum);
        for (unsigned int k = 0; k < c; ++k) out[k] = x[k] - lse;
        unsigned int label = labels[row];
        total -= label < c ? out[label] : __int_as_float(0x7fc00000);  // NaN
    }
    partial[threadIdx.x] = total;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) loss[0] = partial[0] / (float)over;
}

// gx = (softmax(x) - onehot(label)) * gloss / over (over = n unless the batch
// is a data-parallel shard of a larger one).
extern "C" __global__ void nll_backward(const float* log_probs, const unsigned int* labels, const float* gloss,
                                        float* gx, unsigned int n, unsigned int c, unsigned int over) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * c) return;
    float scale = gloss[0] / (float)over;
    float g = expf(log_probs[i]) * scale;
    if (labels[i / c] == i % c) g -= scale;
    gx[i] = g;
}
