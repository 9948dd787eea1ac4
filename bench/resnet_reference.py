#!/usr/bin/env python3
"""PyTorch's answer for one training step of a small ResNet-18, as a fixture.

    python3 bench/resnet_reference.py --out tests/fixtures/resnet

Writes two safetensors files:

- `weights.safetensors`: the initial `state_dict` of `bench/models.py`'s
  ResNet-18 at width 0.125 for 3x16x16 images and 10 classes (parameters and
  batch-norm buffers, float32; `num_batches_tracked` as float32, which
  `load_state_dict` converts back);
- `step.safetensors`: one batch (`input` [6, 3, 16, 16], `labels` as float32),
  and what one training-mode forward and backward of the mean cross-entropy
  gives: `logits`, `loss`, `grad.<name>` for every parameter and
  `after.<name>` for every buffer (the running statistics the step updated).

The step runs in float64 from the float32 weights, so the fixture is the
exact answer to within float32 rounding; bumpgrad (float32, both backends)
must match it within 1e-4 of each tensor's scale (tests/pytorch_resnet.rs,
tests/gpu/resnet.rs).
"""

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from models import resnet

WIDTH = 0.125
BATCH, CHANNELS, SIZE, CLASSES = 6, 3, 16, 10


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/resnet"))
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = resnet(18, CLASSES, CHANNELS, WIDTH)
    weights = {k: v.detach().clone().float().contiguous() for k, v in model.state_dict().items()}
    x = torch.randn(BATCH, CHANNELS, SIZE, SIZE)
    labels = torch.randint(0, CLASSES, (BATCH,))

    model = model.double().train()
    logits = model(x.double())
    loss = F.cross_entropy(logits, labels)
    loss.backward()

    step = {"input": x, "labels": labels.float(), "logits": logits.detach().float(), "loss": loss.detach().float()}
    for name, p in model.named_parameters():
        step[f"grad.{name}"] = p.grad.float()
    for name, b in model.named_buffers():
        step[f"after.{name}"] = b.float()
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(args.out / "weights.safetensors"))
    save_file({k: v.contiguous() for k, v in step.items()}, str(args.out / "step.safetensors"))
    print(f"loss {loss.item():.6f}; {len(weights)} tensors in weights, {len(step)} in step -> {args.out}")


if __name__ == "__main__":
    main()
