#!/usr/bin/env bash
# GPU tests and runs in one command.
#
#   scripts/gpu.sh test     on a machine with cargo and a GPU: runs the GPU tests
#   scripts/gpu.sh stage    here, without a GPU: builds the release binary and the
#                           GPU test binary, strips them into .gpu/ (git-ignored),
#                           for a GPU machine without cargo
#   scripts/gpu.sh run      there, in the repository root: runs the staged GPU tests
#
# Where no GPU is usable every GPU test prints "SKIPPED <test>: no usable GPU (...)".
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
test)
    # The data-parallel tests (NCCL, 1 and 2 GPUs) run in a process of their
    # own, after the others.
    cargo test --release --locked --test gpu -- --test-threads=1 --skip data_parallel_
    exec cargo test --release --locked --test gpu -- --test-threads=1 data_parallel_
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
    .gpu/gpu-tests --test-threads=1 --skip data_parallel_
    exec .gpu/gpu-tests --test-threads=1 data_parallel_
    ;;
*)
    sed -n '2,11p' "$0" >&2
    exit 2
    ;;
esac
