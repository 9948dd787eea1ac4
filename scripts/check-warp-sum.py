#!/usr/bin/env python3
"""block_sum_256_by_warp (src/backend/cuda/common.cu) adds as block_sum does
over 256 threads: the same float32 additions in the same order, so the same
bits. This emulates both trees on the host, float32 rounding after every
addition (an add done in double and rounded to float32 is float32's add),
on random sets of 256 values with zeros and -0 among them, and counts the
sets whose totals differ in any bit. It checks the pairing of the trees,
not the GPU: the GPU batch-norm tests compare the kernels themselves.

    python3 scripts/check-warp-sum.py          # expects 0 differences
    python3 scripts/check-warp-sum.py --break  # pairs wrongly: expects many
"""
import random
import struct
import sys


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def add(a, b):
    return f32(a + b)


def bits(x):
    return struct.unpack("I", struct.pack("f", x))[0]


def shuffles(t):
    # __shfl_down_sync: lane i adds lane i + stride's value (its own past 31).
    stride = 16
    while stride > 0:
        t = [add(t[i], t[i + stride] if i + stride < 32 else t[i]) for i in range(32)]
        stride //= 2
    return t[0]


def block_sum(v):
    p = list(v)
    stride = 128
    while stride >= 32:
        for i in range(stride):
            p[i] = add(p[i], p[i + stride])
        stride //= 2
    return shuffles(p[:32])


def by_warp(v, wrong=False):
    lanes = []
    for lane in range(32):
        w = [v[lane + 32 * k] for k in range(8)]
        if wrong:
            lanes.append(add(add(add(w[0], w[1]), add(w[2], w[3])), add(add(w[4], w[5]), add(w[6], w[7]))))
        else:
            lanes.append(add(add(add(w[0], w[4]), add(w[2], w[6])), add(add(w[1], w[5]), add(w[3], w[7]))))
    return shuffles(lanes)


def main():
    wrong = "--break" in sys.argv
    rng = random.Random(1)
    differ = 0
    trials = 3000
    for trial in range(trials):
        v = [f32(rng.gauss(0, 1) * 10.0 ** rng.randint(-8, 7)) for _ in range(256)]
        kind = trial % 4
        if kind in (1, 2):
            for i in rng.sample(range(256), 150):
                v[i] = 0.0 if kind == 1 else -0.0
        if kind == 3:
            v = [-0.0] * 256
            for i in rng.sample(range(256), 3):
                v[i] = f32(rng.gauss(0, 1))
        if bits(block_sum(v)) != bits(by_warp(v, wrong)):
            differ += 1
    print(f"{trials} sets of 256 values, {differ} totals differ in some bit" + (" (pairing broken)" if wrong else ""))
    sys.exit(0 if (differ == 0) != wrong else 1)


if __name__ == "__main__":
    main()
