#!/usr/bin/env python3
"""PyTorch's answer for one training step of a small ResNet-18, as a fixture.

    python3 bench/resnet_reference.py --out tests/fixtures/resnet
    python3 bench/resnet_reference.py --depth 50 --out tests/fixtures/resnet50

Writes two safetensors files:

- `weights.safetensors`: the initial `state_dict` of `bench/models.py`'s
  ResNet-18 (or with --depth 50 ResNet-50) at width 0.125 for 3x16x16 images and 10 classes (parameters and
  batch-norm buffers, float32; `num_batches_tracked` as float32, which
  `load_state_dict` converts back);
- `step.safetensors`: one batch (`input` [6, 3, 16, 16] for ResNet-18,
  [8, 3, 32, 32] for ResNet-50; `labels` as float32),
  and what one training-mode forward and backward of the mean cross-entropy
  gives: `logits`, `loss`, `grad.<name>` for every parameter and
  `after.<name>` for every buffer (the running statistics the step updated),
  and for each of those `f32err.<name>`: the largest error of PyTorch's own
  float32 step (same weights, same batch) against that float64 answer.

The step runs in float64 from the float32 weights, so the fixture is the
exact answer to within float32 rounding; bumpgrad (float32, both backends)
must match it within 1e-4 of each tensor's scale, or where PyTorch's own
float32 step is further off than that (deep in ResNet-50's backward), within
a small multiple of PyTorch's own error (tests/pytorch_resnet.rs,
tests/gpu/resnet.rs).
"""

import argparse
import copy
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from models import resnet

WIDTH = 0.125
CHANNELS, CLASSES = 3, 10
# ResNet-18 on 16x16 images ends at 2x2 maps, batch-norm over 24 values per
# channel. ResNet-50 needs more: there a channel of 24 nearly equal values
# makes the normalisation's 1/std, and so the gradients, swing with float32
# rounding (bumpgrad's float32 gradients against this float64 reference
# differed by up to 4% of scale, and finite differences of either changed
# with the step), so it gets 32x32 images and batch 8: 128 values a channel.
SHAPES = {18: (6, 16), 50: (8, 32)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/resnet"))
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--depth", type=int, default=18, choices=[18, 50])
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = resnet(args.depth, CLASSES, CHANNELS, WIDTH)
    weights = {k: v.detach().clone().float().contiguous() for k, v in model.state_dict().items()}
    batch, size = SHAPES[args.depth]
    x = torch.randn(batch, CHANNELS, size, size)
    labels = torch.randint(0, CLASSES, (batch,))

    # PyTorch's own float32 step from the same state, to measure how far
    # float32 arithmetic lands from the float64 answer on this network.
    model32 = copy.deepcopy(model).train()
    logits32 = model32(x)
    loss32 = F.cross_entropy(logits32, labels)
    loss32.backward()

    model = model.double().train()
    logits = model(x.double())
    loss = F.cross_entropy(logits, labels)
    loss.backward()

    step = {"input": x, "labels": labels.float(), "logits": logits.detach().float(), "loss": loss.detach().float()}
    for name, p in model.named_parameters():
        step[f"grad.{name}"] = p.grad.float()
    for name, b in model.named_buffers():
        step[f"after.{name}"] = b.float()
    ours32 = {"logits": logits32.detach(), "loss": loss32.detach()}
    ours32.update({f"grad.{n}": p.grad for n, p in model32.named_parameters()})
    ours32.update({f"after.{n}": b.float() for n, b in model32.named_buffers()})
    worst = 0.0
    for name, value in ours32.items():
        exact = step[name].double()
        err = (value.double() - exact).abs().max()
        step[f"f32err.{name}"] = err.float().reshape(1)
        worst = max(worst, (err / exact.abs().max().clamp_min(1e-30)).item())
    print(f"PyTorch float32 against float64: worst error {worst:.2e} of a tensor's scale")
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(args.out / "weights.safetensors"))
    save_file({k: v.contiguous() for k, v in step.items()}, str(args.out / "step.safetensors"))
    print(f"loss {loss.item():.6f}; {len(weights)} tensors in weights, {len(step)} in step -> {args.out}")


if __name__ == "__main__":
    main()
