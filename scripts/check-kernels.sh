#!/usr/bin/env bash
# Compiles every CUDA source the way a GPU gets it (the backend's common.cu
# first, then each op's kernels.cu, in one translation unit) as host C++,
# with the CUDA keywords and intrinsics the sources use declared below: a
# type or syntax error in a kernel shows here, on a machine without a GPU or
# NVRTC, rather than when a GPU first opens. It checks the C++, not the
# arithmetic: the GPU tests do that.
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=${CXX:-g++}
if ! command -v "$cxx" >/dev/null; then
    echo "SKIPPED kernel syntax check: no $cxx" >&2
    exit 0
fi
ops=$(sed -n '/^registry! {/,/^}/s/^ *\([a-z_0-9]*\):.*\bkernels;$/\1/p' src/ops/mod.rs)
if [ -z "$ops" ]; then
    echo "no op with kernels found in src/ops/mod.rs's registry: this script no longer reads it" >&2
    exit 1
fi
prelude=$(
    cat <<'CPP'
#include <cmath>
#include <algorithm>
#include <cstddef>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__
#define __launch_bounds__(...)
#define extern_C
struct uint3_ { unsigned int x, y, z; };
extern uint3_ blockIdx, blockDim, threadIdx, gridDim;
inline void __syncthreads() {}
float __uint_as_float(unsigned int);
unsigned int __float_as_uint(float);
float __int_as_float(int);
int __float_as_int(float);
float __fmul_rn(float, float);
float __fadd_rn(float, float);
float __fsub_rn(float, float);
float __fdiv_rn(float, float);
float __fmaf_rn(float, float, float);
float __fsqrt_rn(float);
double __dmul_rn(double, double);
double __ddiv_rn(double, double);
double __dadd_rn(double, double);
float atomicAdd(float*, float);
float __shfl_down_sync(unsigned int, float, unsigned int);
float __shfl_xor_sync(unsigned int, float, unsigned int);
unsigned int atomicAdd(unsigned int*, unsigned int);
float rsqrtf(float);
using std::isnan;
using std::max;
using std::min;
struct float4 { float x, y, z, w; };
float4 make_float4(float, float, float, float);
struct float2 { float x, y; };
struct uint2 { unsigned int x, y; };
struct uint4 { unsigned int x, y, z, w; };
CPP
)
{
    echo "$prelude"
    cat src/backend/cuda/common.cu
    # In the order a GPU compiles them, `ops::KERNELS`: the registry's lines
    # (src/ops/mod.rs) whose roles end with `kernels`.
    for op in $ops; do
        f=src/ops/$op/kernels.cu
        echo "#line 1 \"$f\""
        cat "$f"
    done
} | "$cxx" -std=c++17 -fsyntax-only -Wall -Wno-unused-function -Wno-unused-variable -Wno-unknown-pragmas -x c++ - && echo "kernel sources compile as C++"
