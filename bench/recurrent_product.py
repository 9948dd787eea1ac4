#!/usr/bin/env python3
"""The recurrent product of an LSTM step through cuBLAS, timed on its own.

Why `ops::lstm_layer` has its own product kernel: at batch 64 and hidden
512 the per-step products, [64, 512] x [512, 2048] forward and
[64, 2048] x [2048, 512] back, are too small to fill a large GPU through
cuBLAS. On the GPU machine, from the repository root:

    python3 bench/recurrent_product.py

prints each product's time (CUDA events around 200 launches, fp32, TF32
off) and, for scale, cuDNN's whole one-layer LSTM forward over 128 steps.
"""
import torch

torch.backends.cuda.matmul.allow_tf32 = False


def timed(fn, n=200):
    for _ in range(10):
        fn()
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n * 1000


def main():
    d = "cuda"
    h, w = torch.randn(64, 512, device=d), torch.randn(2048, 512, device=d)
    g = torch.randn(64, 2048, device=d)
    gates, states = torch.randn(8128, 2048, device=d), torch.randn(8128, 512, device=d)
    o1, o2, o3 = (torch.empty(64, 2048, device=d), torch.empty(64, 512, device=d),
                  torch.empty(2048, 512, device=d))
    print("forward  h @ W_hh.T  [64,512]x[512,2048]:   %.1f us" % timed(lambda: torch.mm(h, w.t(), out=o1)))
    print("backward g @ W_hh    [64,2048]x[2048,512]:  %.1f us" % timed(lambda: torch.mm(g, w, out=o2)))
    print("W_hh grad over steps [2048,8128]x[8128,512]: %.1f us" % timed(lambda: torch.mm(gates.t(), states, out=o3)))
    lstm, x = torch.nn.LSTM(512, 512, 1).to(d), torch.randn(128, 64, 512, device=d)
    with torch.no_grad():
        print("cuDNN LSTM, 1 layer, forward, T 128:       %.1f us" % timed(lambda: lstm(x), n=20))


if __name__ == "__main__":
    main()
