#!/usr/bin/env python3
"""PyTorch's answer for one training step of a narrow ResNet or SqueezeNet, as a fixture.

    python3 bench/pytorch_steps.py --model resnet18      # -> tests/fixtures/resnet
    python3 bench/pytorch_steps.py --model resnet50      # -> tests/fixtures/resnet50
    python3 bench/pytorch_steps.py --model squeezenet    # -> tests/fixtures/squeezenet

Writes two safetensors files:

- `weights.safetensors`: the initial `state_dict` of `bench/models.py`'s
  ResNet-18 or ResNet-50 at width 0.125 (or SqueezeNet at width 0.25) for 3x16x16 images and 10 classes (parameters and
  batch-norm buffers, float32; `num_batches_tracked` as float32, which
  `load_state_dict` converts back);
- `step.safetensors`: one batch (`input` [6, 3, 16, 16] for ResNet-18,
  [8, 3, 32, 32] for ResNet-50, [4, 3, 32, 32] for SqueezeNet, which steps
  in evaluation mode; `labels` as float32),
  and what one training-mode forward and backward of the mean cross-entropy
  gives: `logits`, `loss`, `grad.<name>` for every parameter and
  `after.<name>` for every buffer (the running statistics the step updated),
  and for each of those `f32err.<name>`: the largest error of PyTorch's own
  float32 step (same weights, same batch) against that float64 answer.

The step runs in float64 from the float32 weights, so the fixture is the
exact answer to within float32 rounding; bumpgrad (float32, both backends)
must match it within 1e-4 of each tensor's scale, or where PyTorch's own
float32 step is further off than that (deep in ResNet-50's backward), within
a small multiple of PyTorch's own error (tests/pytorch_models.rs,
tests/gpu/networks.rs).
"""

import argparse
import copy
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from models import build

CHANNELS, CLASSES = 3, 10
# ResNet-18 on 16x16 images ends at 2x2 maps, batch-norm over 24 values per
# channel. ResNet-50 needs more: there a channel of 24 nearly equal values
# makes the normalisation's 1/std, and so the gradients, swing with float32
# rounding (bumpgrad's float32 gradients against this float64 reference
# differed by up to 4% of scale, and finite differences of either changed
# with the step), so it gets 32x32 images and batch 8: 128 values a channel.
# SqueezeNet has no batch-norm; its step is taken in evaluation mode, since
# its dropout's masks are PyTorch's own draws: the forward and every gradient
# are compared, without dropout.
SETUPS = {  # model: (width, batch, size, training)
    "resnet18": (0.125, 6, 16, True),
    "resnet50": (0.125, 8, 32, True),
    "squeezenet": (0.25, 4, 32, False),
}
DIRS = {"resnet18": "resnet", "resnet50": "resnet50", "squeezenet": "squeezenet"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", choices=sorted(SETUPS))
    parser.add_argument("--out", type=Path, help="default: tests/fixtures/<resnet|resnet50|squeezenet>")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    out = args.out or Path("tests/fixtures") / DIRS[args.model]
    width, batch, size, training = SETUPS[args.model]
    torch.manual_seed(args.seed)
    model = build(args.model, CLASSES, CHANNELS, width)
    weights = {k: v.detach().clone().float().contiguous() for k, v in model.state_dict().items()}
    x = torch.randn(batch, CHANNELS, size, size)
    labels = torch.randint(0, CLASSES, (batch,))

    # PyTorch's own float32 step from the same state, to measure how far
    # float32 arithmetic lands from the float64 answer on this network.
    model32 = copy.deepcopy(model).train(training)
    logits32 = model32(x)
    loss32 = F.cross_entropy(logits32, labels)
    loss32.backward()

    model = model.double().train(training)
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
    out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(out / "weights.safetensors"))
    save_file({k: v.contiguous() for k, v in step.items()}, str(out / "step.safetensors"))
    print(f"{args.model}: loss {loss.item():.6f}; {len(weights)} tensors in weights, {len(step)} in step -> {out}")


if __name__ == "__main__":
    main()
