// cast: a tensor in another float type and/or layout. fp32 to bf16 rounds to
// nearest even, bf16 to fp32 is exact (see `load` and `store` in the
// backend's source). `mode` 0 keeps the layout; 1 writes NCHW `src` as NHWC;
// 2 writes NHWC `src` as NCHW. One thread per element of `dst`, so the
// writes are coalesced and a transposing read strides (an input image or a
// weight: small next to the convolutions they feed).
template <typename S, typename D>
__device__ void convert_t(const S* src, D* dst, unsigned int n, unsigned int c, unsigned int hw,
                          unsigned int mode) {
    size_t total = (size_t)n * c * hw;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    size_t from = i;
    if (mode == 1) {
        size_t ch = i % c, rest = i / c, p = rest % hw, img = rest / hw;
        from = (img * c + ch) * hw + p;
    } else if (mode == 2) {
        size_t p = i % hw, rest = i / hw, ch = rest % c, img = rest / c;
        from = (img * hw + p) * c + ch;
    }
    dst[i] = store<D>(load(src[from]));
}
extern "C" __global__ void convert_f32_f32(const float* src, float* dst, unsigned int n, unsigned int c,
                                           unsigned int hw, unsigned int mode) {
    PDL_WAIT();
    convert_t(src, dst, n, c, hw, mode);
}
extern "C" __global__ void convert_f32_bf16(const float* src, bf16* dst, unsigned int n, unsigned int c,
                                            unsigned int hw, unsigned int mode) {
    PDL_WAIT();
    convert_t(src, dst, n, c, hw, mode);
}
extern "C" __global__ void convert_bf16_f32(const bf16* src, float* dst, unsigned int n, unsigned int c,
                                            unsigned int hw, unsigned int mode) {
    PDL_WAIT();
    convert_t(src, dst, n, c, hw, mode);
}
extern "C" __global__ void convert_bf16_bf16(const bf16* src, bf16* dst, unsigned int n, unsigned int c,
                                             unsigned int hw, unsigned int mode) {
    PDL_WAIT();
    convert_t(src, dst, n, c, hw, mode);
}

// A step's weights in one launch (weights.rs): segment k of `t` converts
// the fp32 NCHW tensor at `src` + its first value, [n, c, hw], into `dst` +
// its first value, NCHW (`mode` 0) or channels last (1), value for value
// as convert_t. The segments' values run end to end; a block takes
// WEIGHT_RUN consecutive ones, each thread every blockDim.x-th.
#define WEIGHT_SEGMENTS 32
#define SEGMENT_WORDS 7
#define WEIGHT_RUN 2048
struct WeightTable {
    // Per segment: its first source value (low, high word), its first
    // destination value (low, high), c, hw, and where it ends in the
    // launch's run of values.
    unsigned int w[SEGMENT_WORDS * WEIGHT_SEGMENTS];
};
template <typename D>
__device__ void convert_weights_t(const float* src, D* dst, WeightTable t, unsigned int segments, unsigned int mode) {
    // The table in shared memory, where threads looking up different
    // segments do not take turns as they would reading the parameters.
    __shared__ unsigned int table[SEGMENT_WORDS * WEIGHT_SEGMENTS];
    for (unsigned int w = threadIdx.x; w < SEGMENT_WORDS * segments; w += blockDim.x) table[w] = t.w[w];
    __syncthreads();
    unsigned int total = table[SEGMENT_WORDS * (segments - 1) + 6];
    unsigned int first = blockIdx.x * WEIGHT_RUN + threadIdx.x;
    if (first >= total) return;
    // The segment of the thread's first value, by bisection over the ends;
    // its later values are in that one or a later one.
    unsigned int lo = 0, hi = segments - 1;
    while (lo < hi) {
        unsigned int mid = (lo + hi) / 2;
        if (first < table[SEGMENT_WORDS * mid + 6]) hi = mid;
        else lo = mid + 1;
    }
    unsigned int k = lo;
    unsigned int last = min(total, blockIdx.x * WEIGHT_RUN + WEIGHT_RUN);
    for (unsigned int i = first; i < last; i += blockDim.x) {
        while (i >= table[SEGMENT_WORDS * k + 6]) k++;
        const unsigned int* e = table + SEGMENT_WORDS * k;
        unsigned int start = k == 0 ? 0u : e[6 - SEGMENT_WORDS];
        size_t from0 = (size_t)e[0] | ((size_t)e[1] << 32);
        size_t to0 = (size_t)e[2] | ((size_t)e[3] << 32);
        // A weight's values fit 32 bits (weights.rs checks the total).
        unsigned int j = i - start, from = j;
        if (mode == 1) {
            unsigned int c = e[4], hw = e[5];
            unsigned int ch = j % c, rest = j / c, p = rest % hw, img = rest / hw;
            from = (img * c + ch) * hw + p;
        }
        dst[to0 + j] = store<D>(load(src[from0 + from]));
    }
}
extern "C" __global__ void convert_weights_f32(const float* src, float* dst, WeightTable t, unsigned int segments,
                                               unsigned int mode) {
    PDL_WAIT();
    convert_weights_t(src, dst, t, segments, mode);
}
extern "C" __global__ void convert_weights_bf16(const float* src, bf16* dst, WeightTable t, unsigned int segments,
                                                unsigned int mode) {
    PDL_WAIT();
    convert_weights_t(src, dst, t, segments, mode);
}
