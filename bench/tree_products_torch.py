#!/usr/bin/env python3
"""The Tree-LSTM's matrix products through PyTorch's CPU build, one thread.

The counterpart of `cargo run --release --example sgemm_bench tree`: the
same shapes (the leaves' forward, a level's forward at 100, 32, 16 and 8
rows, its input gradient and its weight gradient), so a machine's MKL
can be set beside our kernels on the same core. From the repository root:

    python3 bench/tree_products_torch.py

prints each product's median time over 30 calls and its GFLOP/s.
"""
import time

import torch

torch.set_num_threads(1)


def bench(name, f, flops):
    for _ in range(5):
        f()
    times = []
    for _ in range(30):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    times.sort()
    t = times[len(times) // 2]
    print(f"{name:26s} {t * 1e9:12.0f} ns {flops / t / 1e9:7.1f} GFLOP/s")


def main():
    print(f"torch {torch.__version__}, MKL {torch.backends.mkl.is_available()}, one thread")
    # Forward, x · Wᵀ: the leaves (475 leaves, [3H, E]) and a level's rows
    # against the joined inner weights [5H, 2H].
    for m, n, k in [(475, 450, 300), (100, 750, 300), (32, 750, 300), (16, 750, 300), (8, 750, 300)]:
        a, b, out = torch.randn(m, k), torch.randn(n, k), torch.empty(m, n)
        bench(f"nt {m}x{n}x{k}", lambda: torch.mm(a, b.t(), out=out), 2 * m * n * k)
    # A level's input gradient, dy · W.
    for m in (100, 32, 8):
        n, k = 300, 750
        a, b, out = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
        bench(f"nn dx {m}x{n}x{k}", lambda: torch.mm(a, b, out=out), 2 * m * n * k)
    # A level's weight gradient, added in place: dW += dyᵀ · x.
    for k in (100, 32, 8):
        m, n = 750, 300
        a, b, out = torch.randn(k, m), torch.randn(k, n), torch.zeros(m, n)
        bench(f"tn dW {m}x{n}x{k} +=", lambda: out.addmm_(a.t(), b), 2 * m * n * k)


if __name__ == "__main__":
    main()
