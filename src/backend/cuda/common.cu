// Kernels the backend itself needs: gradients of a tensor used twice meet here.
// Every source a device is handed is compiled after this one, in one
// translation unit, so the device helpers below serve them all.

// The sum of `v` over the block (blockDim.x a power of two, at most the
// length of `partial`), added in a fixed tree in shared memory: no atomics,
// so every run gives the same bits. Every thread gets the total, and
// `partial` is free again when it returns (the last barrier keeps a thread
// from overwriting it before all have read the total).
__device__ __forceinline__ float block_sum(float v, float* partial) {
    partial[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    float total = partial[0];
    __syncthreads();
    return total;
}

extern "C" __global__ void add_assign(float* dst, const float* src, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}
