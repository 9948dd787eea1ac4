#!/usr/bin/env python3
"""Fixtures for bumpgrad's optimizer ops, made by PyTorch's own optimizers.

For each case, torch.optim.SGD, AdamW or Adagrad (CPU, float32,
foreach=False: the per-tensor update) takes three parameter tensors of
different lengths through six steps of seeded gradients, with the learning
rate set per step through param_groups (as a schedule does), and this
writes <out>/<case>.json:

  optimizer   "sgd", "adamw" or "adagrad"
  hyper       sgd: momentum, nesterov, weight_decay (dampening 0);
              adamw: beta1, beta2, eps, weight_decay (amsgrad off);
              adagrad: lr_decay, weight_decay, initial_accumulator_value,
              eps; any: clip_norm, where torch.nn.utils.clip_grad_norm_
              (max_norm clip_norm, the 2-norm over all three tensors)
              runs before each step
  lengths     the three tensors' lengths
  lr          the rate of each step
  params      the three tensors before the first step, one after another
  steps       per step: grad (that step's gradients) and, after the update,
              param and the optimizer's state: momentum_buffer (sgd with
              momentum), exp_avg, exp_avg_sq and step (adamw), sum and
              step (adagrad), each flat; with clip_norm also grad_norm
              (the norm clip_grad_norm_ returned) and clipped_grad

Tensor values are written as the shortest decimals that read back as the
same float32; hyper-parameters and rates as Python floats (every rate is a
float32 value, so a float32 table holds it exactly).

    python3 bench/optim_fixtures.py --out tests/fixtures/optim
"""

import argparse
import math
import os
import struct

import torch

LENGTHS = [5, 67, 13]
STEPS = 6
# Gradient scale per tensor: the last one small, so AdamW's eps matters.
SCALES = [1.0, 1.0, 1e-3]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


CASES = [
    ("sgd_plain", "sgd", dict(momentum=0.0, nesterov=False, weight_decay=0.0), [0.1] * 6),
    ("sgd_momentum", "sgd", dict(momentum=0.9, nesterov=False, weight_decay=0.0), [0.1] * 6),
    # A warm-up, then a cosine-like decay.
    (
        "sgd_nesterov_weight_decay",
        "sgd",
        dict(momentum=0.9, nesterov=True, weight_decay=5e-4),
        [0.025, 0.05, 0.1, 0.075, 0.04, 0.01],
    ),
    # A step decay after three steps.
    (
        "sgd_momentum_weight_decay",
        "sgd",
        dict(momentum=0.9, nesterov=False, weight_decay=1e-2),
        [0.05, 0.05, 0.05, 0.005, 0.005, 0.005],
    ),
    ("adamw_defaults", "adamw", dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2), [1e-3] * 6),
    (
        "adamw_betas",
        "adamw",
        dict(betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1),
        [0.02, 0.05, 0.05, 0.04, 0.03, 0.01],
    ),
    # beta1 below one half: PyTorch's lerp then starts from the gradient's end.
    ("adamw_low_beta1", "adamw", dict(betas=(0.3, 0.9), eps=1e-8, weight_decay=0.0), [0.01] * 6),
    # Adagrad as the Tree-LSTM paper ran it (lr 0.05, weight decay 1e-4),
    # then with every knob: lr decay, a starting accumulator, a large eps.
    (
        "adagrad_tree_lstm",
        "adagrad",
        dict(lr_decay=0.0, weight_decay=1e-4, initial_accumulator_value=0.0, eps=1e-10),
        [0.05] * 6,
    ),
    (
        "adagrad_every_knob",
        "adagrad",
        dict(lr_decay=0.1, weight_decay=1e-2, initial_accumulator_value=0.1, eps=1e-3),
        [0.1, 0.1, 0.05, 0.05, 0.02, 0.02],
    ),
    # clip_grad_norm_ before each step: max_norm 1 clips every step of these
    # gradients (their norm is about 9); 100 clips none.
    ("sgd_momentum_clip", "sgd", dict(momentum=0.9, nesterov=False, weight_decay=0.0, clip=1.0), [0.1] * 6),
    (
        "adagrad_clip",
        "adagrad",
        dict(lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10, clip=1.0),
        [0.05] * 6,
    ),
    ("adamw_clip_none", "adamw", dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, clip=100.0), [1e-3] * 6),
]


class F32s(list):
    """Values written as float32 decimals."""


def num(x):
    """The shortest decimal that reads back as the same float32."""
    x = float(x)
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0"
    for digits in range(6, 10):
        s = "%.*g" % (digits, x)
        if f32(float(s)) == x:
            return s
    raise ValueError(f"{x!r} is not a finite float32")


def dump(value, indent=""):
    if isinstance(value, F32s):
        return "[" + ",".join(num(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(value)
        return repr(value)
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, list):
        inner = indent + "  "
        return "[\n" + ",\n".join(inner + dump(v, inner) for v in value) + "\n" + indent + "]"
    if isinstance(value, dict):
        inner = indent + "  "
        items = (inner + '"' + k + '": ' + dump(v, inner) for k, v in value.items())
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    raise TypeError(type(value))


def flat(tensors):
    out = F32s()
    for t in tensors:
        assert t.dtype == torch.float32
        out.extend(t.detach().reshape(-1).tolist())
    return out


def run(seed, optimizer, hyper, lrs):
    assert len(lrs) == STEPS and all(f32(lr) == lr for lr in lrs)
    torch.manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(n, dtype=torch.float32) * 0.5) for n in LENGTHS]
    initial = flat(params)
    hyper = dict(hyper)
    clip = hyper.pop("clip", None)
    if optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lrs[0], dampening=0.0, foreach=False, **hyper)
        written = dict(hyper)
    elif optimizer == "adagrad":
        opt = torch.optim.Adagrad(params, lr=lrs[0], foreach=False, **hyper)
        written = dict(hyper)
    else:
        opt = torch.optim.AdamW(params, lr=lrs[0], amsgrad=False, foreach=False, **hyper)
        (beta1, beta2) = hyper["betas"]
        written = dict(beta1=beta1, beta2=beta2, eps=hyper["eps"], weight_decay=hyper["weight_decay"])
    if clip is not None:
        written["clip_norm"] = clip
    steps = []
    for k in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = lrs[k]
        grads = [torch.randn(n, dtype=torch.float32) * s for n, s in zip(LENGTHS, SCALES)]
        if k == 3:
            # A step without a gradient for one tensor: momentum and the
            # moments still move it.
            grads[1].zero_()
        for p, g in zip(params, grads):
            p.grad = g.clone()
        record = dict(grad=flat(grads))
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(params, clip, foreach=False)
            record["grad_norm"] = float(norm)
            record["clipped_grad"] = flat(p.grad for p in params)
        opt.step()
        record["param"] = flat(params)
        state = [opt.state[p] for p in params]
        if optimizer == "sgd":
            if hyper["momentum"] != 0.0:
                record["momentum_buffer"] = flat(s["momentum_buffer"] for s in state)
        elif optimizer == "adagrad":
            record["sum"] = flat(s["sum"] for s in state)
            counts = {float(s["step"]) for s in state}
            assert counts == {float(k + 1)}, counts
            record["step"] = k + 1
        else:
            record["exp_avg"] = flat(s["exp_avg"] for s in state)
            record["exp_avg_sq"] = flat(s["exp_avg_sq"] for s in state)
            counts = {float(s["step"]) for s in state}
            assert counts == {float(k + 1)}, counts
            record["step"] = k + 1
        steps.append(record)
    return dict(
        optimizer=optimizer,
        torch=torch.__version__,
        hyper=written,
        lengths=LENGTHS,
        lr=[float(lr) for lr in lrs],
        params=initial,
        steps=steps,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for <case>.json")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}")
    for seed, (name, optimizer, hyper, lrs) in enumerate(CASES):
        lrs = [f32(lr) for lr in lrs]
        case = run(seed, optimizer, hyper, lrs)
        path = os.path.join(args.out, name + ".json")
        with open(path, "w") as f:
            f.write(dump(case) + "\n")
        print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
