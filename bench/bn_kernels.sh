#!/usr/bin/env bash
# The channels-last batch-norm kernels timed alone, per ResNet shape, on the
# GPU machine (it has nvcc; no cargo needed): bench/bn_kernels/harness.cu
# built once per variant, each run, their outputs compared with the first's.
#
#   bench/bn_kernels.sh OUT [NAME:KERNELS.cu:NVCC-FLAGS ...]
#
# A variant is a kernels.cu and the -D flags that set the harness's launch
# sizes (MIN_RUN, STATS_BLOCKS, BSUMS_BLOCKS, ROWS_PER_THREAD, APPLY_BLOCKS,
# INPUT_BLOCKS, FINISH_WARP_RUNS: the defaults are geometry.rs's); the first
# is the one the others are compared with. Without variants, the tree's
# kernels.cu alone. An older kernels.cu, to compare with (before its
# finishing kernels took the channel count):
#
#   git show cb5f8d2:src/ops/batch_norm2d/kernels.cu > .gpu/bn_old.cu
#   bench/bn_kernels.sh "$OUT" "base:.gpu/bn_old.cu:-DFINISH_NO_C -DFINISH_WARP_RUNS=0" \
#       "tree:src/ops/batch_norm2d/kernels.cu:"
#
# Where the backend's common.cu changed as well, the older one goes with it:
# -DCOMMON=\"../../.gpu/common_old.cu\" (a path from bench/bn_kernels/).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?OUT folder}
shift
variants=("$@")
if [ ${#variants[@]} -eq 0 ]; then
    variants=("tree:src/ops/batch_norm2d/kernels.cu:")
fi
mkdir -p "$out"
build() { # name kernels flags...
    local name=$1 kernels=$2
    shift 2
    nvcc -O3 -std=c++17 -arch=sm_90 -w -DVARIANT="\"$name\"" -DKERNELS="\"$(realpath "$kernels")\"" "$@" \
        -o "$out/bn-$name" bench/bn_kernels/harness.cu
}
# Built side by side (nvcc takes a while for each), run one at a time.
for v in "${variants[@]}"; do
    IFS=: read -r name kernels flags <<<"$v"
    # shellcheck disable=SC2086
    build "$name" "$kernels" $flags &
done
wait
first=
for v in "${variants[@]}"; do
    IFS=: read -r name kernels flags <<<"$v"
    "$out/bn-$name" "$out/$name.bin"
    if [ -z "$first" ]; then
        first=$name
        continue
    fi
    python3 - "$out/$first.bin" "$out/$name.bin" "$first" <<'PY'
import sys
import numpy as np
a, b = (np.fromfile(p, dtype=np.float32) for p in sys.argv[1:3])
if a.shape != b.shape:
    sys.exit(f"outputs of different sizes: {a.shape} against {b.shape}")
scale = np.abs(a).max()
print(f"  against {sys.argv[3]}: {np.count_nonzero(a != b)} of {a.size} values differ, at most {np.abs(a - b).max() / scale:.2e} of the scale")
PY
    rm -f "$out/$name.bin"
done
rm -f "$out/$first.bin"
