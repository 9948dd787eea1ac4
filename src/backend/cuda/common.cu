// Kernels the backend itself needs: gradients of a tensor used twice meet here.
// Every source a device is handed is compiled after this one, in one
// translation unit, so the device helpers below serve them all.

// The first statement of every kernel (`extern "C" __global__`; a unit
// test, src/ops/tests.rs, checks every source). On sm_90 and later the
// backend launches our kernels as programmatic dependents of the launch
// before them (`cuLaunchKernelEx`, PROGRAMMATIC_STREAM_SERIALIZATION): the
// driver may start a kernel once the previous one's blocks have all
// exited, before its completion and memory flush, which hides the launch
// gap between two kernels of a replayed step. This waits for the previous
// grid to complete and its writes to be visible, before any thread reads
// or writes memory or returns, so every kernel still sees what the ones
// before it wrote (and, since each waited on its own predecessor, what
// every earlier one wrote). Launched without the attribute, or on an older
// GPU, it does nothing.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define PDL_WAIT() \
    do {          \
    } while (0)
#endif

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

// The rounding, in bits. Ampere on (sm_80+) convert in one instruction,
// which rounds to nearest even as the integer form below does (checked on
// the GPU machine for every float: bench/bn_kernels/bf16_rounding.cu);
// its NaN is the canonical one, so a NaN keeps the host's form (sign and
// payload) by the integer path. The host check (scripts/check-kernels.sh)
// and older GPUs take the integer form.
__device__ __forceinline__ unsigned short bf16_bits(float v) {
    unsigned int u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned short r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(v));
    return r;
#else
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}

// Two values rounded into one word, `lo` in its low half (the first in
// memory): one conversion for both where neither is a NaN.
__device__ __forceinline__ unsigned int bf16_pack2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (lo == lo && hi == hi) {
        unsigned int r;
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
        return r;
    }
#endif
    return (unsigned int)bf16_bits(lo) | ((unsigned int)bf16_bits(hi) << 16);
}

template <typename T> __device__ __forceinline__ T store(float v);
template <> __device__ __forceinline__ float store<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 store<bf16>(float v) {
    bf16 r;
    r.bits = bf16_bits(v);
    return r;
}

template <typename T> __device__ void add_assign_t(T* dst, const T* src, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = store<T>(load(dst[i]) + load(src[i]));
}
extern "C" __global__ void add_assign(float* dst, const float* src, unsigned int n) {
    PDL_WAIT();
    add_assign_t(dst, src, n);
}
extern "C" __global__ void add_assign_bf16(bf16* dst, const bf16* src, unsigned int n) {
    PDL_WAIT();
    add_assign_t(dst, src, n);
}
