#!/usr/bin/env python3
"""PyTorch's answer for one training step of a narrow ResNet or SqueezeNet, as a fixture.

    python3 bench/pytorch_steps.py --model resnet18      # -> tests/fixtures/resnet
    python3 bench/pytorch_steps.py --model resnet50      # -> tests/fixtures/resnet50
    python3 bench/pytorch_steps.py --model squeezenet    # -> tests/fixtures/squeezenet

Writes two safetensors files:

- `weights.safetensors`: the initial `state_dict` of `bench/models.py`'s
  ResNet-18 or ResNet-50 at width 0.125 (or SqueezeNet at width 0.25) for
  3x16x16 images (SqueezeNet 3x32x32) and 10 classes (parameters and
  batch-norm buffers, float32; `num_batches_tracked` as float32, which
  `load_state_dict` converts back); ResNet-50's with each bottleneck's last
  batch-norm weight at 0.2 (see SETUPS);
- `step.safetensors`: one batch (`input` [6, 3, 16, 16] for ResNet-18,
  [8, 3, 16, 16] for ResNet-50, [4, 3, 32, 32] for SqueezeNet, which steps
  in evaluation mode; `labels` as float32),
  and what one training-mode forward and backward of the mean cross-entropy
  gives: `logits`, `loss`, `grad.<name>` for every parameter and
  `after.<name>` for every buffer (the running statistics the step updated),
  and for each of those `f32err.<name>`: the largest error of PyTorch's own
  float32 step (same weights, same batch, deterministic algorithms) against
  that float64 answer, a figure the tests print beside their own.

The step runs in float64 from the float32 weights, so the fixture is the
exact answer to within float32 rounding. bumpgrad (float32, both backends)
must land within 1e-4 of each tensor's scale (its largest magnitude) on
every tensor of every network, with no allowance for PyTorch's own error
(tests/pytorch_models.rs, tests/gpu/networks.rs). On the CPU bumpgrad's
worst tensor is 4.3e-6 (ResNet-18), 3.4e-6 (ResNet-50), 9.4e-7
(SqueezeNet) of scale off, PyTorch float32's 5.0e-6, 2.9e-6, 2.1e-6.

That bound proves the step's arithmetic, not a tolerance for rounding: a
float32 step lands this close only where it decides every ReLU mask as the
float64 step does, so the script prints how far the float64 ReLU input
nearest zero lies from it, in units of PyTorch float32's largest error on
that ReLU's inputs (ResNet-18 8.5, ResNet-50 1.8, SqueezeNet 0.9), and how
many of PyTorch's float32 masks differ from float64's (none), and refuses
a ResNet-50 fixture below MIN_MASK_MARGIN or with a flip. Float32 errors
differ a little between machines, so those figures may too.
"""

import argparse
import copy
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

from models import Bottleneck, build

CHANNELS, CLASSES = 3, 10
# ResNet-18 on 16x16 images ends at 2x2 maps, batch-norm over 24 values per
# channel. SqueezeNet has no batch-norm; its step is taken in evaluation
# mode, since its dropout's masks are PyTorch's own draws: the forward and
# every gradient are compared, without dropout.
#
# ResNet-50 from torchvision's initialisation is no fit for a tight float64
# comparison: its forward amplifies rounding some 300x (a float32 forward's
# ReLU inputs land up to 1.5e-4 of their spread from float64's), so among
# its ReLU inputs (2.9 million at 8x3x32x32) several lie closer to zero than
# that, float32 flips their masks, and each flip moves the gradients behind
# it by up to 10% of scale (PyTorch's own float32 step flipped 6 and landed
# 11% off; in float64, a 1e-9 change of the weights moved the gradients
# 3e-7, a 1e-7 change 2%: steps, not slopes). Batches of 8-16x3x16x16 and
# 16-32x3x8x8 flipped 1 or 2 as well. Two changes make it smooth: each
# bottleneck's last batch-norm starts at weight 0.2 (RESIDUAL_GAIN;
# torchvision's `zero_init_residual` starts it at 0, which would leave every
# other gradient of the block zero), which cuts the forward's amplification
# ~25x, and 16x16 images cut the ReLU inputs to 735,232 (the deepest
# batch-norm then normalises 32 values a channel, which at this gain costs
# nothing measurable). Of the seeds 0-109 (`--seed N` tries one), 36 leaves
# the most room: no float64 ReLU input lies within 1.8x PyTorch float32's
# largest error on its ReLU's inputs (`mask_margin`), none of PyTorch's
# float32 masks differs, and its float32 step lands within 3e-6 of scale.
SETUPS = {  # model: (width, batch, size, training, seed)
    "resnet18": (0.125, 6, 16, True, 13),
    "resnet50": (0.125, 8, 16, True, 36),
    "squeezenet": (0.25, 4, 32, False, 13),
}
RESIDUAL_GAIN = {"resnet50": 0.2}
# A ResNet-50 fixture is refused unless every float64 ReLU input is this
# many times PyTorch float32's largest error in its layer away from zero.
MIN_MASK_MARGIN = {"resnet50": 1.5}
DIRS = {"resnet18": "resnet", "resnet50": "resnet50", "squeezenet": "squeezenet"}


def relu_inputs(model):
    """Records every ReLU's input (before `inplace` overwrites it)."""
    seen = []
    for m in model.modules():
        if isinstance(m, nn.ReLU):
            m.register_forward_pre_hook(lambda _m, inp: seen.append(inp[0].detach().clone()))
    return seen


def mask_margin(ins32, ins64):
    """How far from zero the float64 step's ReLU inputs lie, in units of
    PyTorch float32's largest error on that ReLU's input (the nearest, over
    all ReLUs; exact zeros, which float32 computes exactly too, aside), and
    how many of PyTorch's float32 masks differ from float64's."""
    margin, flips = float("inf"), 0
    for a, b in zip(ins32, ins64):
        flips += ((a > 0) != (b > 0)).sum().item()
        err = (a.double() - b).abs().max().item()
        away = b.abs()[b != 0]
        if err > 0 and away.numel():
            margin = min(margin, away.min().item() / err)
    return margin, flips


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", choices=sorted(SETUPS))
    parser.add_argument("--out", type=Path, help="default: tests/fixtures/<resnet|resnet50|squeezenet>")
    parser.add_argument("--seed", type=int, help="default: the model's in SETUPS")
    args = parser.parse_args()
    out = args.out or Path("tests/fixtures") / DIRS[args.model]
    width, batch, size, training, seed = SETUPS[args.model]
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed if args.seed is None else args.seed)
    model = build(args.model, CLASSES, CHANNELS, width)
    if args.model in RESIDUAL_GAIN:
        with torch.no_grad():
            for block in model.modules():
                if isinstance(block, Bottleneck):
                    block.bn3.weight.fill_(RESIDUAL_GAIN[args.model])
    weights = {k: v.detach().clone().float().contiguous() for k, v in model.state_dict().items()}
    x = torch.randn(batch, CHANNELS, size, size)
    labels = torch.randint(0, CLASSES, (batch,))

    # PyTorch's own float32 step from the same state, to measure how far
    # float32 arithmetic lands from the float64 answer on this network.
    model32 = copy.deepcopy(model).train(training)
    ins32 = relu_inputs(model32)
    logits32 = model32(x)
    loss32 = F.cross_entropy(logits32, labels)
    loss32.backward()

    model = model.double().train(training)
    ins64 = relu_inputs(model)
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
    margin, flips = mask_margin(ins32, ins64)
    print(
        f"ReLU inputs: {sum(t.numel() for t in ins64)}; the nearest to zero is {margin:.2f}x PyTorch float32's "
        f"largest error on its ReLU's input; {flips} of PyTorch's float32 masks differ from float64's"
    )
    if margin < MIN_MASK_MARGIN.get(args.model, 0.0) or (args.model in MIN_MASK_MARGIN and flips):
        raise SystemExit(
            f"{args.model}: a ReLU input lies within {MIN_MASK_MARGIN[args.model]}x float32's error of zero: "
            "float32 steps would differ from this one by mask flips, not rounding; pick another --seed"
        )
    out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(out / "weights.safetensors"))
    save_file({k: v.contiguous() for k, v in step.items()}, str(out / "step.safetensors"))
    print(f"{args.model}: loss {loss.item():.6f}; {len(weights)} tensors in weights, {len(step)} in step -> {out}")


if __name__ == "__main__":
    main()
