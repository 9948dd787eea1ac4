// cast: a tensor in the other float type. fp32 to bf16 rounds to nearest
// even, bf16 to fp32 is exact (see `load` and `store` in the backend's
// source).
template <typename S, typename D> __device__ void cast_t(const S* src, D* dst, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = store<D>(load(src[i]));
}
extern "C" __global__ void cast_f32_bf16(const float* src, bf16* dst, unsigned int n) { cast_t(src, dst, n); }
extern "C" __global__ void cast_bf16_f32(const bf16* src, float* dst, unsigned int n) { cast_t(src, dst, n); }
