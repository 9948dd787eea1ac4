#!/usr/bin/env bash
# GPU tests and runs in one command.
#
#   scripts/gpu.sh test     on a machine with cargo and a GPU: runs the GPU tests
#   scripts/gpu.sh stage    here, without a GPU: builds the release binary and the
#                           GPU test binary, strips them into .gpu/ (git-ignored),
#                           for a GPU machine without cargo
#   scripts/gpu.sh run      there, in the repository root: runs the staged GPU tests
#
# Where no GPU is usable every GPU test prints "SKIPPED <test>: no usable GPU (...)"
# and passes (so CI, which has none, runs them as no-ops). This script is for GPU
# machines: it sets BUMPGRAD_REQUIRE_GPU to the GPUs nvidia-smi lists (at least 1),
# under which the skip of any test needing no more GPUs than that is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

require_gpus() {
    local n
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    export BUMPGRAD_REQUIRE_GPU="${BUMPGRAD_REQUIRE_GPU:-$((n > 1 ? n : 1))}"
    echo "BUMPGRAD_REQUIRE_GPU=$BUMPGRAD_REQUIRE_GPU: a test that needs that many GPUs or fewer fails rather than skips" >&2
}

case "${1:-}" in
test)
    require_gpus
    # The data-parallel tests (NCCL, 1 and 2 GPUs) run in a process of their
    # own, after the others.
    status=0
    cargo test --release --locked --test gpu -- --test-threads=1 --skip data_parallel_ || status=$?
    cargo test --release --locked --test gpu -- --test-threads=1 data_parallel_ || status=$?
    exit "$status"
    ;;
stage)
    cargo build --release --locked --bin bumpgrad
    tests=$(cargo test --release --locked --test gpu --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "gpu":
        print(m["executable"])')
    mkdir -p .gpu
    cp target/release/bumpgrad .gpu/bumpgrad
    cp "$tests" .gpu/gpu-tests
    strip .gpu/bumpgrad .gpu/gpu-tests
    git describe --always --dirty --abbrev=10 > .gpu/commit
    ls -l .gpu
    ;;
run)
    [ -x .gpu/gpu-tests ] || { echo "no staged GPU tests: run 'scripts/gpu.sh stage' where cargo is" >&2; exit 2; }
    require_gpus
    # Both processes run, whatever the first one's result.
    status=0
    .gpu/gpu-tests --test-threads=1 --skip data_parallel_ || status=$?
    .gpu/gpu-tests --test-threads=1 data_parallel_ || status=$?
    exit "$status"
    ;;
*)
    sed -n '2,11p' "$0" >&2
    exit 2
    ;;
esac
