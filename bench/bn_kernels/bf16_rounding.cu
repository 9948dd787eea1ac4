// On the GPU machine: common.cu's bf16 rounding (the hardware's conversion
// on sm_80 on) against the integer form the host uses, for every one of the
// 2^32 floats, and its paired form against two single roundings. Prints the
// mismatches (none expected) and exits 1 if there are any.
//
//   nvcc -O3 -arch=sm_90 -o bf16_rounding bench/bn_kernels/bf16_rounding.cu && ./bf16_rounding
#include <cstdio>
#include <cuda_runtime.h>

#include "../../src/backend/cuda/common.cu"

__device__ unsigned short host_bits(unsigned int u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__global__ void check(unsigned long long* bad, unsigned int* first) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i <= 0xffffffffull;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned int u = (unsigned int)i;
        float v = __uint_as_float(u);
        // A neighbour for the pair: another exponent and payload, NaNs too.
        unsigned int w = u * 2654435761u;
        unsigned int want = host_bits(u) | ((unsigned int)host_bits(w) << 16);
        bool ok = bf16_bits(v) == host_bits(u) && bf16_pack2(v, __uint_as_float(w)) == want;
        if (!ok && atomicAdd(bad, 1ull) == 0) *first = u;
    }
}

int main() {
    unsigned long long* bad;
    unsigned int* first;
    cudaMallocManaged(&bad, 8);
    cudaMallocManaged(&first, 4);
    *bad = 0;
    *first = 0;
    check<<<132 * 16, 256>>>(bad, first);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("bf16 rounding check: %s\n", cudaGetErrorString(e));
        return 1;
    }
    printf("bf16 rounding: %llu of 2^32 floats differ from the host's form (first 0x%08x)\n", *bad, *first);
    return *bad ? 1 : 0;
}
