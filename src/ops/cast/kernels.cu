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
    convert_t(src, dst, n, c, hw, mode);
}
extern "C" __global__ void convert_f32_bf16(const float* src, bf16* dst, unsigned int n, unsigned int c,
                                            unsigned int hw, unsigned int mode) {
    convert_t(src, dst, n, c, hw, mode);
}
extern "C" __global__ void convert_bf16_f32(const bf16* src, float* dst, unsigned int n, unsigned int c,
                                            unsigned int hw, unsigned int mode) {
    convert_t(src, dst, n, c, hw, mode);
}
extern "C" __global__ void convert_bf16_bf16(const bf16* src, bf16* dst, unsigned int n, unsigned int c,
                                             unsigned int hw, unsigned int mode) {
    convert_t(src, dst, n, c, hw, mode);
}
