// dropout: the same counter-based draw as `dropout::keep` on the CPU, so both
// backends drop exactly the same elements for the same seed.

__device__ __forceinline__ bool dropout_keep(unsigned long long seed, unsigned long long i, float p) {
    unsigned long long z = seed ^ (i * 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f) >= p;
}

// out = x * scale where kept, else 0. Linear in x: backward is the same map.
// With a step cursor, the seed is the step's (`cursor_step_seed`), drawn on
// the device so that a replayed graph drops a fresh mask every step. A
// template over the element type (fp32, or bf16 in a mixed-precision step):
// the draw depends on the element's index alone, so both types drop the same
// elements, and the product is fp32's, rounded once.
template <typename T>
__device__ void dropout_apply_t(const T* x, T* out, unsigned int n, float p, float scale, unsigned long long seed,
                                const unsigned int* cursor, unsigned int first) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (cursor != 0) seed = cursor_step_seed(seed, cursor);
    out[i] = store<T>(dropout_keep(seed, (unsigned long long)first + i, p) ? load(x[i]) * scale : 0.0f);
}
extern "C" __global__ void dropout_apply(const float* x, float* out, unsigned int n, float p, float scale,
                                         unsigned long long seed, const unsigned int* cursor, unsigned int first) {
    PDL_WAIT();
    dropout_apply_t(x, out, n, p, scale, seed, cursor, first);
}
extern "C" __global__ void dropout_apply_bf16(const bf16* x, bf16* out, unsigned int n, float p, float scale,
                                              unsigned long long seed, const unsigned int* cursor,
                                              unsigned int first) {
    PDL_WAIT();
    dropout_apply_t(x, out, n, p, scale, seed, cursor, first);
}
