// Kernels the backend itself needs: gradients of a tensor used twice meet here.
// Every source a device is handed is compiled after this one, in one
// translation unit, so the device helpers below serve them all.

// The sum of `v` over the block (blockDim.x a power of two, at least 32 and
// at most the length of `partial`), added in a fixed tree: no atomics, so
// every run gives the same bits. Every thread gets the total, and
// `partial` is free again when it returns (the last barrier keeps a thread
// from overwriting it before all have read the total).
//
// The halvings across warps go through shared memory, a barrier each; the
// last five run in warp 0 by shuffles, without barriers. Thread i adds
// thread i + stride's value at each, as through shared memory, so the sums
// are the same additions, the same bits.
__device__ __forceinline__ float block_sum(float v, float* partial) {
    partial[threadIdx.x] = v;
    __syncthreads();
    unsigned int stride = blockDim.x / 2;
    for (; stride >= 32; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x < 32) {
        float t = partial[threadIdx.x];
        for (; stride > 0; stride /= 2) t += __shfl_down_sync(0xffffffffu, t, stride);
        if (threadIdx.x == 0) partial[0] = t;
    }
    __syncthreads();
    float total = partial[0];
    __syncthreads();
    return total;
}

// bf16: fp32's top 16 bits. A load widens exactly; a store rounds to nearest
// even (a NaN stays a NaN), as PyTorch and the `half` crate round, so a value
// a kernel stores is the one the host computes for it. Kernels of both types
// are one template over `T`, loading with `load` and storing with `store<T>`;
// they compute in fp32 whatever `T` is.
struct bf16 {
    unsigned short bits;
};

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ float load(bf16 v) { return __uint_as_float(((unsigned int)v.bits) << 16); }

template <typename T> __device__ __forceinline__ T store(float v);
template <> __device__ __forceinline__ float store<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 store<bf16>(float v) {
    unsigned int u = __float_as_uint(v);
    bf16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.bits = (unsigned short)((u >> 16) | 0x40u);
    } else {
        r.bits = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    return r;
}

template <typename T> __device__ void add_assign_t(T* dst, const T* src, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = store<T>(load(dst[i]) + load(src[i]));
}
extern "C" __global__ void add_assign(float* dst, const float* src, unsigned int n) { add_assign_t(dst, src, n); }
extern "C" __global__ void add_assign_bf16(bf16* dst, const bf16* src, unsigned int n) { add_assign_t(dst, src, n); }
