#!/usr/bin/env bash
# Formats everything CI checks. `cargo fmt` alone misses the ops' folders:
# the registry macro (src/ops/mod.rs) declares those modules where cargo fmt
# does not look, so they are formatted by path here, as .ci/run checks them.
# `scripts/fmt.sh --check` checks without writing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--check" ]; then
    cargo fmt --all -- --check
    rustfmt --edition 2021 --check src/ops/*/mod.rs
else
    cargo fmt --all
    rustfmt --edition 2021 src/ops/*/mod.rs
fi
