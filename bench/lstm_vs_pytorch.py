#!/usr/bin/env python3
"""Character language models, bumpgrad against PyTorch, side by side in one run.

One command on the GPU machine (from the repository root, with a bumpgrad
binary built by `scripts/gpu.sh stage`):

    python3 bench/lstm_vs_pytorch.py --bumpgrad .gpu/bumpgrad

Two configurations of issue 32, each side in a fresh process, one after the
other on the same machine:

- **GPU** (`../shared/GPU.md`): tiny-shakespeare, embedding 65 -> 128,
  LSTM 2 x 512, linear 512 -> 65, sequence 128, batch 64 streams, the state
  carried from window to window (truncated BPTT), AdamW lr 2e-3 (weight
  decay 0.01, PyTorch's default and bumpgrad's), `clip_grad_norm_` 1.0.
  PyTorch's cuDNN `nn.LSTM` (`cudnn.benchmark` on), the same model as an
  `nn.LSTMCell` loop, and bumpgrad's `char-lstm` (its own kernels, the whole
  step one CUDA graph).
  - ms/step: PyTorch, CUDA events around every step, the median of
    `--timed` steps after `--warmup`; bumpgrad, an epoch (122 steps) is
    timed whole (`seconds / steps` of its `--json` line, evaluation
    excluded), the median over the epochs after the first (which captures
    the graph).
  - step memory: PyTorch, `max_memory_allocated()` during the steps minus
    `memory_allocated()` before them (parameters, gradients, AdamW's state,
    the resident data); bumpgrad, the step region's high-water mark
    (`arena.step_high_water_bytes`).
  - validation loss after `--steps N` (default 2000; 0 skips it): both
    sides train the same number of steps, whole epochs of bumpgrad's
    (`ceil(N / 122)` epochs, as bumpgrad evaluates at an epoch's end), then
    the mean cross-entropy per token over the validation split's windows,
    64 streams, state carried from a zero start, as bumpgrad's evaluation
    does.
- **CPU, one thread** (Lantern's configuration): 1 layer, hidden 50,
  sequence 20, batch 20, one-hot input (`--embed 0`; PyTorch:
  `F.one_hot` into `nn.LSTM(input_size=65)`), Adagrad lr 0.1, 5,000
  iterations; `torch.set_num_threads(1)` and bumpgrad `--threads 1`. The LSTM
  and the vanilla tanh RNN (`nn.RNN`; bumpgrad `char-rnn`), total seconds of
  the training steps. bumpgrad's epoch is 2,509 steps, so it runs 2 epochs
  (5,018 steps) and its training seconds are scaled to 5,000 (both are
  recorded). `--cpu-cell-loop` adds PyTorch's `nn.LSTMCell` loop.

The data is the repository's `data/tinyshakespeare/input.txt`, cut as
bumpgrad cuts it (first 90% training, B contiguous streams, windows of T).
Writes `bench/results/lstm-vs-pytorch-<date>-<gpu>.json` and prints a table
with the ratios and the issue's targets.
"""

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from result_names import gpu_slug

REPO_ROOT = Path(__file__).resolve().parent.parent
CORPUS = REPO_ROOT / "data" / "tinyshakespeare" / "input.txt"
MIB = 1 << 20

GPU_CONFIG = {"embed": 128, "hidden": 512, "layers": 2, "seq_len": 128, "batch": 64, "lr": 2e-3, "clip": 1.0}
CPU_CONFIG = {"embed": 0, "hidden": 50, "layers": 1, "seq_len": 20, "batch": 20, "lr": 0.1}
# The targets: bumpgrad's figure as a fraction of PyTorch's.
TARGETS = {"gpu_time_vs_cudnn": 0.8, "gpu_time_vs_cell_loop": 0.2, "gpu_memory_vs_cudnn": 0.8,
           "gpu_valid_loss_within": 0.03, "cpu_time_vs_pytorch": 0.5}


# --------------------------------------------------------------------------
# The corpus, as bumpgrad reads it (src/data/text/)
# --------------------------------------------------------------------------

def corpus():
    data = CORPUS.read_bytes()
    vocab = sorted(set(data))
    index = {b: i for i, b in enumerate(vocab)}
    tokens = [index[b] for b in data]
    cut = len(data) // 10 * 9 + len(data) % 10 * 9 // 10
    return len(vocab), tokens[:cut], tokens[cut:]


def windows(torch, tokens, streams, seq_len, device):
    """`(inputs, targets)`, each `[W, T, B]`: window k of stream b is tokens
    `(b*W + k)*T ...` (src/data/text/windows.rs)."""
    count = (len(tokens) - 1) // streams // seq_len
    t = torch.tensor(tokens, dtype=torch.long, device=device)
    n = streams * count * seq_len
    x = t[:n].view(streams, count, seq_len).permute(1, 2, 0).contiguous()
    y = t[1:n + 1].view(streams, count, seq_len).permute(1, 2, 0).contiguous()
    return x, y


# --------------------------------------------------------------------------
# PyTorch (a child process: `--pytorch-worker JSON`)
# --------------------------------------------------------------------------

class CellLoop:
    """The same parameters as `nn.LSTM`, stepped by `nn.LSTMCell`s in a
    Python loop (the baseline the issue calls the LSTMCell loop)."""

    def __init__(self, torch, model):
        import torch.nn as nn

        self.torch, self.model = torch, model
        lstm = model.rnn
        self.cells = []
        for k in range(lstm.num_layers):
            cell = nn.LSTMCell(lstm.input_size if k == 0 else lstm.hidden_size, lstm.hidden_size)
            cell = cell.to(next(model.parameters()).device)
            self.cells.append(cell)
        model.rnn = None
        for k, cell in enumerate(self.cells):
            model.add_module(f"cell{k}", cell)

    def __call__(self, ids, state):
        torch, m = self.torch, self.model
        x = m.encoder(ids) if m.encoder is not None else torch.nn.functional.one_hot(ids, m.vocab).float()
        if state is None:
            z = x.new_zeros(ids.shape[1], m.hidden)
            state = [(z, z) for _ in self.cells]
        outs = []
        for t in range(ids.shape[0]):
            h = x[t]
            new = []
            for cell, (hp, cp) in zip(self.cells, state):
                hn, cn = cell(h, (hp, cp))
                new.append((hn, cn))
                h = hn
            state = new
            outs.append(h)
        y = torch.stack(outs)
        return m.decoder(y.reshape(-1, m.hidden)), state


def detach(state):
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.detach() for s in state)
    if isinstance(state, list):
        return [tuple(s.detach() for s in pair) for pair in state]
    return state.detach()


def pytorch_worker(spec):
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(REPO_ROOT / "bench"))
    from models import CharLM

    cuda = spec["device"] == "cuda"
    device = torch.device(spec["device"])
    if cuda:
        torch.backends.cudnn.benchmark = True
    else:
        torch.set_num_threads(1)
    torch.manual_seed(spec["seed"])
    c = spec["config"]
    vocab, train, valid = corpus()
    x, y = windows(torch, train, c["batch"], c["seq_len"], device)
    model = CharLM(vocab, c["embed"], c["hidden"], c["layers"], spec["cell"]).to(device)
    forward = CellLoop(torch, model) if spec["cell_loop"] else model
    if spec["optimizer"] == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=c["lr"])
    else:
        opt = torch.optim.Adagrad(model.parameters(), lr=c["lr"])
    state = None
    losses = []

    def step(i):
        nonlocal state
        k = i % x.shape[0]
        if k == 0:
            state = None  # bumpgrad zeroes the carried state at an epoch's start
        opt.zero_grad(set_to_none=True)
        logits, state = forward(x[k], state)
        state = detach(state)
        loss = F.cross_entropy(logits, y[k].reshape(-1))
        loss.backward()
        if c.get("clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["clip"])
        opt.step()
        return loss

    result = {"torch": torch.__version__, "windows_per_epoch": x.shape[0]}
    if cuda:
        result["cudnn"] = torch.backends.cudnn.version()
        step(0)  # AdamW's state exists after the first step: count it as state
        torch.cuda.synchronize()
        for i in range(1, spec["warmup"]):
            step(i)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        events = []
        for i in range(spec["timed"]):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step(spec["warmup"] + i)
            b.record()
            events.append((a, b))
        torch.cuda.synchronize()
        result["ms_per_step"] = statistics.median(a.elapsed_time(b) for a, b in events)
        result["step_memory_bytes"] = torch.cuda.max_memory_allocated() - base
        result["state_bytes"] = base
        done = spec["warmup"] + spec["timed"]
    else:
        start = time.perf_counter()
        for i in range(spec["steps"]):
            loss = step(i)
            if i < 100 or i >= spec["steps"] - 100:
                losses.append(loss.item())
        result["seconds"] = time.perf_counter() - start
        result["first_loss"] = statistics.mean(losses[:100])
        result["last_loss"] = statistics.mean(losses[-100:])
        done = spec["steps"]
    if cuda and spec["steps"] > done:
        for i in range(done, spec["steps"]):
            step(i)
        torch.cuda.synchronize()
        done = spec["steps"]
    if spec["validate"]:
        result["steps_trained"] = done
        result["valid_loss"] = validate(torch, F, forward, valid, c, device)
    print(json.dumps(result))


def validate(torch, F, forward, valid, c, device):
    """The mean of every validation window's mean loss per token, the state
    carried from zeros: what bumpgrad's evaluation reports."""
    vx, vy = windows(torch, valid, c["batch"], c["seq_len"], device)
    state, total = None, 0.0
    with torch.no_grad():
        for k in range(vx.shape[0]):
            logits, state = forward(vx[k], state)
            total += F.cross_entropy(logits, vy[k].reshape(-1)).item()
    return total / vx.shape[0]


def run_pytorch(spec):
    env = dict(os.environ)
    # PyTorch refuses to start with another cuDNN on the library path.
    env.pop("LD_LIBRARY_PATH", None)
    p = subprocess.run([sys.executable, __file__, "--pytorch-worker", json.dumps(spec)],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"PyTorch {spec} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------
# bumpgrad
# --------------------------------------------------------------------------

def run_bumpgrad(args, model, c, device, optimizer, epochs, seed=None):
    cmd = [args.bumpgrad, "train", "--model", model, "--data", str(CORPUS),
           "--embed", str(c["embed"]), "--hidden", str(c["hidden"]), "--layers", str(c["layers"]),
           "--seq-len", str(c["seq_len"]), "--batch", str(c["batch"]),
           "--optimizer", optimizer, "--lr", str(c["lr"]),
           *(["--clip-norm", str(c["clip"])] if c.get("clip") else []),
           "--device", device, *(["--threads", "1"] if device == "cpu" else []),
           "--epochs", str(epochs), "--seed", str(args.seed if seed is None else seed),
           "--checkpoint-every", "off", "--checkpoint-dir", "/tmp/bumpgrad-bench-checkpoints", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"bumpgrad {' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return {
        "command": " ".join(cmd),
        "epochs": lines,
        "steps_per_epoch": lines[0]["steps"],
        "notes": [l.strip() for l in p.stderr.splitlines() if l.startswith(("arena:", "step memory plan:"))],
    }


def bumpgrad_gpu(args):
    c = GPU_CONFIG
    probe_epochs = args.timed_epochs + 1
    steps_per_epoch = 122  # ⌊⌊(1,003,854 − 1) / 64⌋ / 128⌋; checked against the run below
    epochs = max(probe_epochs, math.ceil(args.steps / steps_per_epoch)) if args.steps else probe_epochs
    r = run_bumpgrad(args, "char-lstm", c, "cuda", "adamw", epochs)
    assert r["steps_per_epoch"] == steps_per_epoch, r["steps_per_epoch"]
    timed = r["epochs"][1:probe_epochs]
    out = {
        "ms_per_step": statistics.median(1e3 * e["seconds"] / e["steps"] for e in timed),
        "step_memory_bytes": max(e["arena"]["step_high_water_bytes"] for e in r["epochs"]),
        "state_bytes": r["epochs"][-1]["arena"]["persistent_bytes"],
        "graph_nodes": r["epochs"][-1].get("kernels_per_step"),
        "command": r["command"],
        "notes": r["notes"],
    }
    if args.steps:
        out["steps_trained"] = epochs * steps_per_epoch
        out["valid_loss"] = r["epochs"][-1]["valid_loss"]
        out["valid_loss_by_epoch"] = [e["valid_loss"] for e in r["epochs"]]
    return out


def bumpgrad_cpu(args, model):
    c = CPU_CONFIG
    per_epoch = 2509  # ⌊⌊(1,003,854 − 1) / 20⌋ / 20⌋
    epochs = math.ceil(args.cpu_iterations / per_epoch)
    r = run_bumpgrad(args, model, c, "cpu", "adagrad", epochs)
    steps = sum(e["steps"] for e in r["epochs"])
    seconds = sum(e["seconds"] for e in r["epochs"])
    return {
        "steps": steps,
        "seconds_measured": seconds,
        "seconds": seconds * args.cpu_iterations / steps,
        "ms_per_step": 1e3 * seconds / steps,
        "train_loss_by_epoch": [e["train_loss"] for e in r["epochs"]],
        "valid_loss": r["epochs"][-1]["valid_loss"],
        "command": r["command"],
    }


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------

def gpu_rows(args):
    steps_total = math.ceil(args.steps / 122) * 122 if args.steps else 0
    rows = {"bumpgrad": bumpgrad_gpu(args)}
    print(f"bumpgrad char-lstm (GPU): {rows['bumpgrad']['ms_per_step']:.2f} ms/step", file=sys.stderr, flush=True)
    base = {"device": "cuda", "config": GPU_CONFIG, "seed": args.seed, "cell": "lstm", "optimizer": "adamw",
            "warmup": args.warmup, "timed": args.timed}
    rows["cudnn"] = run_pytorch({**base, "cell_loop": False, "steps": max(steps_total, args.warmup + args.timed),
                                 "validate": bool(args.steps)})
    print(f"PyTorch nn.LSTM (cuDNN): {rows['cudnn']['ms_per_step']:.2f} ms/step", file=sys.stderr, flush=True)
    if not args.skip_cell_loop:
        rows["cell_loop"] = run_pytorch({**base, "cell_loop": True, "steps": 0, "validate": False,
                                         "warmup": 3, "timed": args.cell_loop_timed})
        print(f"PyTorch nn.LSTMCell loop: {rows['cell_loop']['ms_per_step']:.2f} ms/step", file=sys.stderr, flush=True)
    if args.steps and args.loss_seeds > 1:
        rows["loss_seeds"] = loss_seeds(args, rows, base, steps_total)
    return rows


def loss_seeds(args, rows, base, steps_total):
    """The validation loss of both sides over seeds `--seed` .. `--seed +
    --loss-seeds - 1` (the first seed's runs are the timed ones): the two
    sides draw their initial weights differently, so a gap is read against
    each side's spread over seeds."""
    out = {"seeds": [args.seed], "bumpgrad": [rows["bumpgrad"]["valid_loss"]],
           "pytorch": [rows["cudnn"]["valid_loss"]]}
    for seed in range(args.seed + 1, args.seed + args.loss_seeds):
        b = run_bumpgrad(args, "char-lstm", GPU_CONFIG, "cuda", "adamw", steps_total // 122, seed)
        t = run_pytorch({**base, "seed": seed, "cell_loop": False, "steps": steps_total, "validate": True,
                         "warmup": 2, "timed": 1})
        out["seeds"].append(seed)
        out["bumpgrad"].append(b["epochs"][-1]["valid_loss"])
        out["pytorch"].append(t["valid_loss"])
        print(f"seed {seed}: valid loss bumpgrad {out['bumpgrad'][-1]:.4f}, PyTorch {out['pytorch'][-1]:.4f}",
              file=sys.stderr, flush=True)
    for side in ("bumpgrad", "pytorch"):
        out[f"{side}_mean"] = statistics.mean(out[side])
        out[f"{side}_spread"] = max(out[side]) - min(out[side])
    out["mean_gap"] = out["bumpgrad_mean"] - out["pytorch_mean"]
    return out


def cpu_rows(args):
    rows = {}
    for model, cell in (("char-lstm", "lstm"), ("char-rnn", "rnn")):
        b = bumpgrad_cpu(args, model)
        t = run_pytorch({"device": "cpu", "config": CPU_CONFIG, "seed": args.seed, "cell": cell,
                         "optimizer": "adagrad", "cell_loop": False, "steps": args.cpu_iterations,
                         "validate": False})
        rows[cell] = {"bumpgrad": b, "pytorch": t, "ratio": b["seconds"] / t["seconds"]}
        if cell == "lstm" and args.cpu_cell_loop:
            rows[cell]["pytorch_cell_loop"] = run_pytorch(
                {"device": "cpu", "config": CPU_CONFIG, "seed": args.seed, "cell": cell, "optimizer": "adagrad",
                 "cell_loop": True, "steps": args.cpu_iterations, "validate": False})
        print(f"CPU {cell}: bumpgrad {b['seconds']:.2f} s, PyTorch {t['seconds']:.2f} s", file=sys.stderr, flush=True)
    return rows


def table(gpu, cpu, args):
    out = []
    if gpu:
        b, d = gpu["bumpgrad"], gpu["cudnn"]
        out += ["| GPU: char-lstm 2×512, seq 128, batch 64 | ms/step | ratio (target) | step MiB | ratio (target) "
                "| valid loss after steps |",
                "| --- | --- | --- | --- | --- | --- |"]
        loss = lambda r: f"{r['valid_loss']:.4f} ({r['steps_trained']})" if "valid_loss" in r else "-"  # noqa: E731
        out.append(f"| bumpgrad (own kernels, one CUDA graph) | {b['ms_per_step']:.2f} | | "
                   f"{b['step_memory_bytes'] / MIB:,.0f} | | {loss(b)} |")
        out.append(f"| PyTorch nn.LSTM (cuDNN) | {d['ms_per_step']:.2f} | "
                   f"{b['ms_per_step'] / d['ms_per_step']:.2f} (≤ {TARGETS['gpu_time_vs_cudnn']}) | "
                   f"{d['step_memory_bytes'] / MIB:,.0f} | {b['step_memory_bytes'] / d['step_memory_bytes']:.2f} "
                   f"(≤ {TARGETS['gpu_memory_vs_cudnn']}) | {loss(d)} |")
        if "cell_loop" in gpu:
            c = gpu["cell_loop"]
            out.append(f"| PyTorch nn.LSTMCell loop | {c['ms_per_step']:.2f} | "
                       f"{b['ms_per_step'] / c['ms_per_step']:.2f} (≤ {TARGETS['gpu_time_vs_cell_loop']}) | "
                       f"{c['step_memory_bytes'] / MIB:,.0f} | | - |")
        if "valid_loss" in b and "valid_loss" in d:
            out.append(f"\nvalidation loss: bumpgrad − PyTorch = {b['valid_loss'] - d['valid_loss']:+.4f} "
                       f"(target within ±{TARGETS['gpu_valid_loss_within']})")
        if "loss_seeds" in gpu:
            s = gpu["loss_seeds"]
            row = lambda side: " / ".join(f"{v:.4f}" for v in s[side])  # noqa: E731
            out.append(f"over seeds {s['seeds']}: bumpgrad {row('bumpgrad')} (mean {s['bumpgrad_mean']:.4f}, "
                       f"spread {s['bumpgrad_spread']:.4f}); PyTorch {row('pytorch')} (mean {s['pytorch_mean']:.4f}, "
                       f"spread {s['pytorch_spread']:.4f}); means apart {s['mean_gap']:+.4f}")
    if cpu:
        out += ["", f"| CPU, one thread: {args.cpu_iterations} iterations | bumpgrad s | ms/iter | PyTorch s "
                "| ratio (target ≤ 0.5) | bumpgrad valid loss | PyTorch train loss first → last 100 |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for cell, r in cpu.items():
            b, t = r["bumpgrad"], r["pytorch"]
            out.append(f"| {cell} (hidden 50, one-hot, Adagrad 0.1) | {b['seconds']:.2f} | {b['ms_per_step']:.3f} "
                       f"| {t['seconds']:.2f} | {r['ratio']:.2f} | {b['valid_loss']:.4f} "
                       f"| {t['first_loss']:.3f} → {t['last_loss']:.3f} |")
            if "pytorch_cell_loop" in r:
                out.append(f"| {cell}, PyTorch nn.LSTMCell loop | | | {r['pytorch_cell_loop']['seconds']:.2f} | "
                           f"{b['seconds'] / r['pytorch_cell_loop']['seconds']:.2f} | | |")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bumpgrad", default=str(REPO_ROOT / ".gpu" / "bumpgrad"), help="the bumpgrad binary")
    p.add_argument("--only", choices=["gpu", "cpu"], help="one configuration only")
    p.add_argument("--steps", type=int, default=2000,
                   help="GPU: train both sides this many steps (rounded up to whole epochs of 122) and compare "
                        "validation losses; 0: timing and memory only")
    p.add_argument("--timed-epochs", type=int, default=2, help="GPU, bumpgrad: timed epochs after the first")
    p.add_argument("--warmup", type=int, default=20, help="GPU, PyTorch: untimed steps first")
    p.add_argument("--timed", type=int, default=100, help="GPU, PyTorch: timed steps (median)")
    p.add_argument("--skip-cell-loop", action="store_true", help="GPU: leave out the nn.LSTMCell loop")
    p.add_argument("--cell-loop-timed", type=int, default=20, help="GPU: timed steps of the nn.LSTMCell loop")
    p.add_argument("--cpu-iterations", type=int, default=5000, help="CPU: training iterations")
    p.add_argument("--cpu-cell-loop", action="store_true", help="CPU: also PyTorch's nn.LSTMCell loop (35 s)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--loss-seeds", type=int, default=1,
                   help="GPU: train both sides from this many seeds (from --seed) and compare the validation "
                        "losses' means and spreads; the first seed's runs are the timed ones")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results")
    p.add_argument("--pytorch-worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.pytorch_worker:
        return pytorch_worker(json.loads(args.pytorch_worker))

    gpu = gpu_rows(args) if args.only in (None, "gpu") else None
    cpu = cpu_rows(args) if args.only in (None, "cpu") else None
    import torch

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    stem = args.out / f"lstm-vs-pytorch-{datetime.date.today()}-{gpu_slug(name)}"
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"gpu": gpu, "cpu": cpu, "gpu_config": GPU_CONFIG, "cpu_config": CPU_CONFIG, "targets": TARGETS,
               "command": " ".join(sys.argv), "device": name, "host_cpu": host_cpu()}
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    print(table(gpu, cpu, args))
    print(f"\nwrote {stem}.json", file=sys.stderr)


def host_cpu():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


if __name__ == "__main__":
    main()
