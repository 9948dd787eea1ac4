#!/usr/bin/env python3
"""ResNet on the GPU, bumpgrad against PyTorch, side by side in one run.

One command on the GPU machine (run from the repository root, with a bumpgrad
binary built by `scripts/gpu.sh stage`):

    python3 bench/resnet_vs_pytorch.py --bumpgrad .gpu/bumpgrad

For every case (model, batch, precision) it runs bumpgrad, then PyTorch, one
after the other on the same GPU, each in a fresh process:

- **Same work.** Synthetic CIFAR-10-shaped data (uint8 images resident on the
  device, normalised per channel inside the step), the model of
  `bench/models.py` (torchvision's layout and initialisation; bumpgrad draws
  from the same distributions), cross-entropy, SGD lr 0.1, momentum 0.9,
  Nesterov, weight decay 5e-4.
- **Precision.** `fp32`: TF32 off in both (cuDNN's and cuBLAS's FMA math).
  `tf32`: TF32 on in both; PyTorch runs channels_last there, its fastest TF32
  layout on this GPU. `bf16`: mixed precision, bumpgrad's `--precision bf16`
  against PyTorch's bf16 autocast, channels_last (its fastest bf16 layout).
- **PyTorch eager, and its CUDA-graph mode:** `cudnn.benchmark` on, data on
  the device, no host sync per step. Each case also runs
  `torch.compile(model, mode="reduce-overhead")` (the model's forward and
  backward replayed as CUDA graphs: PyTorch's own whole-step replay, the bar
  where eager is bound by its Python launches, as in bf16; `--no-graphs`
  skips it), and the table gives bumpgrad's ratio to each.
- **ms/step.** PyTorch: every step timed by CUDA events, median of `--steps`
  steps after `--warmup`. bumpgrad: its whole step is one CUDA graph whose
  replays run back to back; an epoch of `--steps-per-epoch` steps is timed
  and the median is over the per-step means of `--epochs` epochs after the
  first (which captures the graph and chooses the convolution algorithms).
- **Step memory.** PyTorch: `max_memory_allocated()` during the steps minus
  `memory_allocated()` before them (data, parameters, gradients, momentum).
  bumpgrad: the step region's high-water mark (`arena.step_peak_bytes`).
- **Largest batch in 4 GiB** (`--max-batch`): bumpgrad's
  `bumpgrad memory --max-batch --arena-size 4GiB` (persistent region with the
  50,000 resident images, and the step plan, must fit), PyTorch's largest
  batch whose eager step runs with `set_per_process_memory_fraction` capping
  the allocator at 4 GiB (binary search, one process per trial).

Writes `bench/results/resnet-vs-pytorch-<date>-<gpu>.json` and `.svg`, and
prints the table the README shows. `--budget F` measures memory budgets
instead (`bench/results/memory-budget-<date>-<gpu>.json`): each case
unbudgeted and under F of its own step memory (bumpgrad's predicted extra
time beside the measured one), PyTorch eager and with every residual block
under `torch.utils.checkpoint`; with `--max-batch`, bumpgrad's largest batch
in 4 GiB recomputing to fit, and PyTorch's checkpointed. `--profile` adds each side's op/kernel
profile of one case to the output (bumpgrad `--profile`, torch.profiler).
"""

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from xml.sax.saxutils import escape

from result_names import gpu_slug

REPO_ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30
MIB = 1 << 20

# CIFAR-10's per-channel mean and std of the training set (as bumpgrad uses
# for CIFAR-shaped data).
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)

# (model, batch, precision) of the default run, and the targets of the issue:
# bumpgrad's ms/step as a fraction of PyTorch's.
DEFAULT_CASES = [
    ("resnet18", 128, "fp32"),
    ("resnet18", 512, "fp32"),
    ("resnet18", 512, "tf32"),
    ("resnet50", 128, "fp32"),
    ("resnet18", 128, "bf16"),
    ("resnet18", 512, "bf16"),
]
TIME_TARGET = {"resnet18": 0.8, "resnet50": 0.85}
MEMORY_TARGET = 0.5


# --------------------------------------------------------------------------
# PyTorch (runs in a child process: `--pytorch-worker JSON`)
# --------------------------------------------------------------------------

def pytorch_worker(spec):
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(REPO_ROOT / "bench"))
    from models import build

    device = torch.device("cuda")
    tf32 = spec["precision"] == "tf32"
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    if spec.get("memory_cap"):
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(spec["memory_cap"] / total, 0)
    torch.manual_seed(spec["seed"])
    gen = torch.Generator(device=device).manual_seed(spec["seed"])
    images = torch.randint(0, 256, (spec["images"], 3, 32, 32), dtype=torch.uint8, device=device, generator=gen)
    labels = torch.randint(0, 10, (spec["images"],), device=device, generator=gen)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255.0
    inv_std = 1.0 / (torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255.0)
    bf16 = spec["precision"] == "bf16"
    memory_format = torch.channels_last if tf32 or bf16 else torch.contiguous_format
    model = build(spec["model"]).to(device).to(memory_format=memory_format)
    if spec.get("checkpoint"):
        checkpoint_blocks(model)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    forward = torch.compile(model, mode="reduce-overhead") if spec.get("graphs") else model
    batch = spec["batch"]

    def step(i):
        start = (i * batch) % (spec["images"] - batch + 1)
        idx = torch.arange(start, start + batch, device=device)
        x = ((images.index_select(0, idx).float() - mean) * inv_std).contiguous(memory_format=memory_format)
        y = labels.index_select(0, idx)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()

    # Momentum buffers exist after the first step: count them as state.
    step(0)
    torch.cuda.synchronize()
    opt.zero_grad(set_to_none=True)
    for i in range(1, spec["warmup"]):
        step(i)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    events = []
    for i in range(spec["steps"]):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step(spec["warmup"] + i)
        b.record()
        events.append((a, b))
    torch.cuda.synchronize()
    times = [a.elapsed_time(b) for a, b in events]
    result = {
        "ms_per_step": statistics.median(times),
        "step_memory_bytes": torch.cuda.max_memory_allocated() - base,
        "state_bytes": base,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
    }
    if spec.get("profile"):
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(5):
                step(i)
            torch.cuda.synchronize()
        result["profile"] = prof.key_averages().table(sort_by="cuda_time_total", row_limit=40)
    print(json.dumps(result))


class Checkpointed:
    """A residual block run under torch.utils.checkpoint (non-reentrant):
    its activations are recomputed in backward, as a user wraps blocks by
    hand."""

    def __init__(self, block):
        self.block = block

    def __call__(self, x):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.block, x, use_reentrant=False)


def checkpoint_blocks(model):
    import types

    for name in ("layer1", "layer2", "layer3", "layer4"):
        layer = getattr(model, name)
        wrapped = [Checkpointed(block) for block in layer]

        def forward(self, x, wrapped=wrapped):
            for w in wrapped:
                x = w(x)
            return x

        layer.forward = types.MethodType(forward, layer)


def run_pytorch(case, args, memory_cap=None, profile=False, steps=None, checkpoint=False, graphs=False):
    spec = {
        "model": case[0],
        "batch": case[1],
        "precision": case[2],
        "images": args.images,
        "seed": args.seed,
        "warmup": args.warmup if steps is None else 2,
        "steps": args.steps if steps is None else steps,
        "memory_cap": memory_cap,
        "profile": profile,
        "checkpoint": checkpoint,
        "graphs": graphs,
    }
    env = dict(os.environ)
    # PyTorch refuses to start with another cuDNN on the library path.
    env.pop("LD_LIBRARY_PATH", None)
    p = subprocess.run(
        [sys.executable, __file__, "--pytorch-worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
    )
    if p.returncode != 0:
        if memory_cap and "OutOfMemoryError" in p.stderr:
            return None
        raise RuntimeError(f"PyTorch {case} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------
# bumpgrad
# --------------------------------------------------------------------------

def bumpgrad_common(args, model, batch, precision):
    return [
        "--model", model,
        "--batch", str(batch),
        "--precision", precision,
        "--device", "cuda",
        "--optimizer", "sgd",
        "--lr", "0.1",
        "--momentum", "0.9",
        "--nesterov",
        "--weight-decay", "5e-4",
        "--seed", str(args.seed),
        *(["--workspace-growth", str(args.workspace_growth)] if args.workspace_growth is not None else []),
    ]


def run_bumpgrad(case, args, profile=False, budget=None, recompute=None):
    model, batch, precision = case
    n = batch * args.steps_per_epoch
    cmd = [args.bumpgrad, "train", *bumpgrad_common(args, model, batch, precision),
           *(["--memory-budget", str(budget)] if budget else []),
           *(["--recompute", recompute] if recompute else []),
           "--data", f"synthetic:cifar10:{n}",
           "--epochs", str(args.epochs + 1),
           "--test-limit", str(batch),
           "--checkpoint-every", "off",
           "--checkpoint-dir", "/tmp/bumpgrad-bench-checkpoints",
           "--json"]
    if profile:
        cmd.append("--profile")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"bumpgrad {case} failed:\n{p.stderr[-3000:]}")
    epochs = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    timed = epochs[1:]
    result = {
        "ms_per_step": statistics.median(1e3 * e["seconds"] / e["steps"] for e in timed),
        "step_memory_bytes": max(e["arena"]["step_high_water_bytes"] for e in epochs),
        "state_bytes": epochs[-1]["arena"]["persistent_bytes"],
        "graph_nodes": epochs[-1].get("kernels_per_step"),
        "train_loss": [e["train_loss"] for e in epochs],
        # Where the run recomputes (a budget, or the default's cheap outputs)
        # every epoch line carries the plan it follows (outputs recomputed,
        # chain mode, predicted extra seconds, search).
        "plan": epochs[-1].get("recomputed"),
        # What the run said about its memory and its convolution algorithms.
        "notes": [l.strip() for l in p.stderr.splitlines() if l.strip().startswith(("memory:", "cuDNN:"))],
    }
    if profile:
        result["profile"] = "\n".join(l for l in p.stderr.splitlines() if "profile" in l or l.startswith("  "))
    return result


def bumpgrad_max_batch(model, args):
    cmd = [args.bumpgrad, "memory", *bumpgrad_common(args, model, 128, "fp32"),
           "--data", f"synthetic:cifar10:{args.images}",
           "--max-batch", "--arena-size", f"{args.arena_gib}GiB", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"bumpgrad memory --max-batch failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["max_batch"]


def bumpgrad_predicted(case, args, budget):
    """`bumpgrad memory --memory-budget`'s plan: what it recomputes and the
    extra time it predicts."""
    model, batch, precision = case
    cmd = [args.bumpgrad, "memory", *bumpgrad_common(args, model, batch, precision),
           "--data", f"synthetic:cifar10:{batch * args.steps_per_epoch}", "--test-limit", str(batch),
           "--memory-budget", str(budget), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        # A budget below the least the planner finds: that least instead.
        import re

        least = re.search(r"pass --memory-budget (\d+)MiB or more", p.stderr)
        if least:
            print(f"{case}: {budget / MIB:.0f} MiB is out of reach; {least[1]} MiB instead",
                  file=sys.stderr, flush=True)
            return bumpgrad_predicted(case, args, int(least[1]) * MIB)
        raise RuntimeError(f"bumpgrad memory --memory-budget failed:\n{p.stderr[-3000:]}")
    report = json.loads(p.stdout)
    return {"budget_bytes": budget, "plan_peak_bytes": report["plan_peak_bytes"], **report["recomputed"]}


def bumpgrad_budget_max_batch(model, args):
    """The largest batch in --arena-gib recomputing to fit, and without."""
    cmd = [args.bumpgrad, "memory", *bumpgrad_common(args, model, 128, "fp32"),
           "--data", f"synthetic:cifar10:{args.images}",
           "--max-batch", "--arena-size", f"{args.arena_gib}GiB",
           "--memory-budget", f"{args.arena_gib}GiB", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"bumpgrad memory --max-batch --memory-budget failed:\n{p.stderr[-3000:]}")
    found = json.loads(p.stdout.strip().splitlines()[-1])
    return {"with": found["max_batch"], "without": found["without_recomputation"]}


def budget_rows(args):
    """`--budget F`: each case unbudgeted and under F of its own unbudgeted
    step memory, against PyTorch eager and PyTorch with every residual block
    checkpointed; predicted against measured extra time."""
    rows = []
    for case in args.case or [("resnet50", 256, "fp32"), ("resnet18", 512, "fp32")]:
        # The unbudgeted run and PyTorch's two are the same for every budget:
        # run once per case.
        free = run_bumpgrad(case, args)
        theirs = {}
        if args.only is None:
            theirs["pytorch"] = run_pytorch(case, args)
            theirs["pytorch_checkpoint"] = run_pytorch(case, args, checkpoint=True)
        for fraction in args.budget:
            asked = int(free["step_memory_bytes"] * fraction)
            plan = bumpgrad_predicted(case, args, asked)
            budget = plan["budget_bytes"]
            tight = run_bumpgrad(case, args, budget=budget)
            row = {"model": case[0], "batch": case[1], "precision": case[2], "budget_bytes": budget,
                   "fraction": fraction, "asked_budget_bytes": asked,
                   "bumpgrad": free, "bumpgrad_budget": tight, "plan": plan,
                   "measured_extra_ms": tight["ms_per_step"] - free["ms_per_step"],
                   # What the training run itself predicted for the drops it chose
                   # (with its timed algorithms' workspaces, which may differ from
                   # the `memory` plan's heuristic ones).
                   "run_predicted_extra_ms": run_predicted_ms(tight, free),
                   "predicted_extra_ms": plan["predicted_extra_seconds"] * 1e3,
                   "least_extra_ms": plan["least_extra_seconds"] * 1e3, **theirs}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    max_batches = {}
    if args.max_batch:
        for model in sorted({r["model"] for r in rows}):
            max_batches[model] = bumpgrad_budget_max_batch(model, args)
            if args.only is None and not args.skip_pytorch_max_batch:
                max_batches[model]["pytorch_checkpoint"] = pytorch_max_batch(model, args, checkpoint=True)
            print(f"largest batch in {args.arena_gib} GiB, {model}: {max_batches[model]}", file=sys.stderr, flush=True)
    return rows, max_batches


def run_predicted_ms(result, unbudgeted=None):
    """What a training run predicted its budget costs over `unbudgeted`, the
    run it is measured against: recomputation and held workspaces (the
    cuDNN line alone where nothing is recomputed), less what the unbudgeted
    run predicted for its own (bumpgrad's default recomputes cheap outputs
    and may hold workspaces; both runs predict against a step that keeps
    every output on the fastest algorithms)."""
    import re

    def find(notes, pattern):
        for note in notes:
            m = re.search(pattern, note)
            if m:
                return float(m[1])
        return None

    notes = result.get("notes", [])
    held = r"([0-9.]+) ms more a step by cuDNN's timings"
    plan = result.get("plan")
    ms = (plan["predicted_step_extra_seconds"] * 1e3 if plan else None) \
        or find(notes, r"predicted ([0-9.]+) ms more a step") or find(notes, held)
    if ms is None:
        return None
    if not unbudgeted:
        return ms
    base = unbudgeted.get("plan")
    return ms - ((base["predicted_step_extra_seconds"] * 1e3 if base else None)
                 or find(unbudgeted.get("notes", []), held) or 0.0)


def budget_table(rows, max_batches):
    out = ["| model | batch | budget | bumpgrad ms (unbudgeted) | step MiB (unbudgeted) | slower | predicted extra ms "
           "| measured extra ms | PyTorch checkpointed ms | MiB | PyTorch eager ms | MiB |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        f, b = r["bumpgrad"], r["bumpgrad_budget"]
        pc, pe = r.get("pytorch_checkpoint"), r.get("pytorch")
        cell = lambda x, k, fmt: fmt.format(x[k] if k != "step_memory_bytes" else x[k] / MIB) if x else "-"  # noqa: E731
        out.append(
            f"| {r['model']} | {r['batch']} | {r['budget_bytes'] / MIB:,.0f} MiB | {b['ms_per_step']:.2f} ({f['ms_per_step']:.2f}) "
            f"| {b['step_memory_bytes'] / MIB:,.0f} ({f['step_memory_bytes'] / MIB:,.0f}) "
            f"| {100 * (b['ms_per_step'] / f['ms_per_step'] - 1):.1f}% | {r['run_predicted_extra_ms'] or r['predicted_extra_ms']:.2f} | {r['measured_extra_ms']:.2f} "
            f"| {cell(pc, 'ms_per_step', '{:.2f}')} | {cell(pc, 'step_memory_bytes', '{:,.0f}')} "
            f"| {cell(pe, 'ms_per_step', '{:.2f}')} | {cell(pe, 'step_memory_bytes', '{:,.0f}')} |")
    if max_batches:
        out += ["", "| model | largest batch in 4 GiB: bumpgrad with a budget | without | PyTorch checkpointed |",
                "| --- | --- | --- | --- |"]
        for m, v in max_batches.items():
            out.append(f"| {m} | {v['with']} | {v['without']} | {v.get('pytorch_checkpoint', '-')} |")
    return "\n".join(out)


def pytorch_max_batch(model, args, checkpoint=False):
    cap = args.arena_gib * GIB
    fits = lambda b: run_pytorch((model, b, "fp32"), args, memory_cap=cap, steps=2, checkpoint=checkpoint) is not None
    lo, hi = 0, 64
    while fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 8:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

def table(rows, max_batches):
    out = ["| model | batch | precision | bumpgrad ms/step | PyTorch eager ms/step | ratio (target) "
           "| PyTorch graphs ms/step | ratio "
           "| bumpgrad step MiB | PyTorch eager step MiB | ratio (target 0.6) | bumpgrad --recompute none ms, MiB "
           "| --recompute cheap ms, MiB |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        b, t, g = r["bumpgrad"], r["pytorch"], r.get("pytorch_graphs")
        k = r.get("bumpgrad_keep_all")
        graphs = f"{g['ms_per_step']:.2f} | {r['graphs_time_ratio']:.2f}" if g else "– | –"
        kept = f"{k['ms_per_step']:.2f}, {k['step_memory_bytes'] / MIB:,.0f}" if k else "–"
        c = r.get("bumpgrad_cheap")
        cheap = f"{c['ms_per_step']:.2f}, {c['step_memory_bytes'] / MIB:,.0f}" if c else "–"
        out.append(
            f"| {r['model']} | {r['batch']} | {r['precision']} | {b['ms_per_step']:.2f} | {t['ms_per_step']:.2f} "
            f"| {r['time_ratio']:.2f} (≤ {r['time_target']}) | {graphs} | {b['step_memory_bytes'] / MIB:,.0f} "
            f"| {t['step_memory_bytes'] / MIB:,.0f} | {r['memory_ratio']:.2f} | {kept} | {cheap} |"
        )
    if max_batches:
        out += ["", "| model | largest batch in 4 GiB: bumpgrad | PyTorch | ratio |", "| --- | --- | --- | --- |"]
        for m, v in max_batches.items():
            out.append(f"| {m} | {v['bumpgrad']} | {v['pytorch']} | {v['bumpgrad'] / max(v['pytorch'], 1):.2f} |")
    return "\n".join(out)


def svg(rows):
    """Grouped bars: ms/step and step memory, bumpgrad against PyTorch, per case."""
    bar_h, gap, label_w, width = 16, 14, 210, 900
    panels = [("ms per step", "ms_per_step", 1.0, "{:.1f} ms"), ("step memory", "step_memory_bytes", MIB, "{:,.0f} MiB")]
    height = 40 + len(panels) * (30 + len(rows) * (2 * bar_h + gap))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
             '<rect width="100%" height="100%" fill="white"/>',
             '<text x="10" y="20" font-size="15">ResNet on one H200: bumpgrad (green) and PyTorch eager (orange)</text>']
    y = 40
    for title, key, unit, fmt in panels:
        parts.append(f'<text x="10" y="{y + 12}" font-weight="bold">{escape(title)}</text>')
        y += 22
        top = max(max(r["bumpgrad"][key], r["pytorch"][key]) for r in rows) / unit
        scale = (width - label_w - 120) / top
        for r in rows:
            label = f"{r['model']} b{r['batch']} {r['precision']}"
            parts.append(f'<text x="10" y="{y + bar_h + 4}">{escape(label)}</text>')
            for i, (side, colour) in enumerate((("bumpgrad", "#1b7837"), ("pytorch", "#e08214"))):
                v = r[side][key] / unit
                yy = y + i * bar_h
                parts.append(f'<rect x="{label_w}" y="{yy}" width="{v * scale:.1f}" height="{bar_h - 2}" fill="{colour}"/>')
                parts.append(f'<text x="{label_w + v * scale + 4:.1f}" y="{yy + bar_h - 4}">{escape(fmt.format(v))}</text>')
            y += 2 * bar_h + gap
        y += 8
    parts.append("</svg>")
    return "\n".join(parts)


def parse_case(text):
    model, batch, precision = text.split(":")
    return (model, int(batch), precision)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bumpgrad", default=str(REPO_ROOT / ".gpu" / "bumpgrad"), help="the bumpgrad binary")
    p.add_argument("--case", type=parse_case, action="append",
                   help="MODEL:BATCH:PRECISION (repeatable; default: the issue's four cases)")
    p.add_argument("--steps", type=int, default=40, help="PyTorch: timed steps (median)")
    p.add_argument("--warmup", type=int, default=10, help="PyTorch: untimed steps first")
    p.add_argument("--steps-per-epoch", type=int, default=20, help="bumpgrad: steps per timed epoch")
    p.add_argument("--epochs", type=int, default=3, help="bumpgrad: timed epochs after the first")
    p.add_argument("--images", type=int, default=50000, help="resident training images (PyTorch, --max-batch)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-batch", action="store_true", help="also the largest batch in --arena-gib")
    p.add_argument("--arena-gib", type=int, default=4)
    p.add_argument("--profile", type=parse_case, metavar="MODEL:BATCH:PRECISION",
                   help="print both sides' profiles of this case")
    p.add_argument("--workspace-growth", type=float, metavar="F",
                   help="bumpgrad's --workspace-growth (default: bumpgrad's own)")
    p.add_argument("--keep-all-too", action="store_true",
                   help="also bumpgrad with --recompute none (every output kept): what the default's "
                        "recomputation of cheap outputs costs and saves, side by side")
    p.add_argument("--cheap-too", action="store_true",
                   help="also bumpgrad with --recompute cheap (only the outputs made again without a multiply-add, "
                        "no search for a smaller step): what the default's search costs and saves, side by side")
    p.add_argument("--only", choices=["bumpgrad", "pytorch"], help="run one side only (no ratios)")
    p.add_argument("--no-graphs", dest="graphs", action="store_false",
                   help='skip PyTorch under torch.compile(mode="reduce-overhead"), its CUDA-graph replay, '
                        "which every case otherwise also runs (compiling takes about a minute a case)")
    p.add_argument("--skip-pytorch-max-batch", action="store_true",
                   help="with --budget --max-batch: bumpgrad's largest batches only")
    p.add_argument("--budget", type=float, metavar="F", nargs="+",
                   help="memory budgets instead: each case (default resnet50:256:fp32, resnet18:512:fp32) under each F "
                        "(several make a sweep) of its own unbudgeted step memory (bumpgrad's default, which "
                        "recomputes cheap outputs), against PyTorch eager and checkpointed, run once a case; "
                        "with --max-batch, the largest batch recomputing to fit")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results")
    p.add_argument("--pytorch-worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.pytorch_worker:
        return pytorch_worker(json.loads(args.pytorch_worker))

    if args.profile:
        sides = [("bumpgrad", "bumpgrad", lambda: run_bumpgrad(args.profile, args, profile=True)),
                 ("pytorch", "pytorch eager", lambda: run_pytorch(args.profile, args, profile=True))]
        if args.graphs:
            # The graph replay is the bar at bf16: its kernels are Inductor's.
            sides.append(("pytorch", "pytorch graphs",
                          lambda: run_pytorch(args.profile, args, profile=True, graphs=True)))
        for side, name, run in sides:
            if args.only in (None, side):
                r = run()
                print(f"## {name} {args.profile}: {r['ms_per_step']:.2f} ms/step, "
                      f"{r['step_memory_bytes'] / MIB:.0f} MiB step memory\n{r['profile']}\n", flush=True)
        return

    if args.budget:
        rows, max_batches = budget_rows(args)
        if args.only is None:
            import torch

            gpu = gpu_slug(torch.cuda.get_device_name(0))
        else:
            gpu = "gpu"
        stem = args.out / f"memory-budget-{datetime.date.today()}-{gpu}"
        args.out.mkdir(parents=True, exist_ok=True)
        stem.with_suffix(".json").write_text(json.dumps(
            {"budget": args.budget, "cases": rows, "max_batch": max_batches, "command": " ".join(sys.argv)}, indent=1) + "\n")
        print(budget_table(rows, max_batches))
        print(f"\nwrote {stem}.json", file=sys.stderr)
        return

    rows = []
    for case in args.case or DEFAULT_CASES:
        row = {"model": case[0], "batch": case[1], "precision": case[2]}
        for side, run in (("bumpgrad", run_bumpgrad), ("pytorch", run_pytorch)):
            if args.only in (None, side):
                row[side] = run(case, args)
                print(f"{side:8} {case}: {row[side]['ms_per_step']:.2f} ms/step, "
                      f"{row[side]['step_memory_bytes'] / MIB:,.0f} MiB", file=sys.stderr, flush=True)
        if args.keep_all_too and args.only in (None, "bumpgrad"):
            row["bumpgrad_keep_all"] = run_bumpgrad(case, args, recompute="none")
            k = row["bumpgrad_keep_all"]
            print(f"bumpgrad --recompute none {case}: {k['ms_per_step']:.2f} ms/step, "
                  f"{k['step_memory_bytes'] / MIB:,.0f} MiB", file=sys.stderr, flush=True)
        if args.cheap_too and args.only in (None, "bumpgrad"):
            row["bumpgrad_cheap"] = run_bumpgrad(case, args, recompute="cheap")
            c = row["bumpgrad_cheap"]
            print(f"bumpgrad --recompute cheap {case}: {c['ms_per_step']:.2f} ms/step, "
                  f"{c['step_memory_bytes'] / MIB:,.0f} MiB", file=sys.stderr, flush=True)
        if args.graphs and args.only in (None, "pytorch"):
            row["pytorch_graphs"] = run_pytorch(case, args, graphs=True)
            print(f"pytorch graphs {case}: {row['pytorch_graphs']['ms_per_step']:.2f} ms/step, "
                  f"{row['pytorch_graphs']['step_memory_bytes'] / MIB:,.0f} MiB", file=sys.stderr, flush=True)
        if args.only is None:
            if args.graphs:
                row["graphs_time_ratio"] = row["bumpgrad"]["ms_per_step"] / row["pytorch_graphs"]["ms_per_step"]
            row["time_ratio"] = row["bumpgrad"]["ms_per_step"] / row["pytorch"]["ms_per_step"]
            row["time_target"] = TIME_TARGET[case[0]]
            row["memory_ratio"] = row["bumpgrad"]["step_memory_bytes"] / row["pytorch"]["step_memory_bytes"]
        rows.append(row)
    max_batches = {}
    if args.max_batch:
        for model in sorted({c[0] for c in (args.case or DEFAULT_CASES)}):
            max_batches[model] = {
                side: fn(model, args)
                for side, fn in (("bumpgrad", bumpgrad_max_batch), ("pytorch", pytorch_max_batch))
                if args.only in (None, side)
            }
            print(f"largest batch in {args.arena_gib} GiB, {model}: {max_batches[model]}", file=sys.stderr, flush=True)
    if args.only:
        print(json.dumps({"rows": rows, "max_batch": max_batches}, indent=1))
        return
    import torch

    gpu = gpu_slug(torch.cuda.get_device_name(0))
    stem = args.out / f"resnet-vs-pytorch-{datetime.date.today()}-{gpu}"
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"cases": rows, "max_batch": max_batches, "arena_gib": args.arena_gib,
               "command": " ".join(sys.argv), "gpu": torch.cuda.get_device_name(0)}
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    stem.with_suffix(".svg").write_text(svg(rows) + "\n")
    print(table(rows, max_batches))
    print(f"\nwrote {stem}.json and {stem}.svg", file=sys.stderr)


if __name__ == "__main__":
    main()
