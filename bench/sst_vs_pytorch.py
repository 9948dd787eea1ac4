#!/usr/bin/env python3
"""sst-lstm against the same model in PyTorch with packed sequences: accuracy over seeds, epoch time.

    python3 bench/sst_vs_pytorch.py --bumpgrad .gpu/bumpgrad            # the GPU, 3 seeds, both class counts
    python3 bench/sst_vs_pytorch.py --bumpgrad .gpu/bumpgrad --classes 2 --seeds 1 --epochs 1   # a quick look

Both sides train issue 32's `sst-lstm` (embedding 300 -> `nn.LSTM` 1 x 150 ->
linear from each sentence's state at its own last word; `SstLstm` of
`bench/models.py`) on `data/sst/train.txt`, batch 25, Adagrad lr 0.05 (no
weight decay), for `--epochs` epochs, and report the root accuracy on the
development split (`dev.txt`, what bumpgrad's epoch line calls its test
accuracy) after every epoch.

- bumpgrad: `bumpgrad train --model sst-lstm --data data/sst --json ...`;
  sentences grouped by length into 8 buckets, each batch of one bucket
  (right-padded to the bucket's length, padding rows weighing nothing), one
  captured CUDA graph per bucket. An epoch's time is its JSON line's
  `seconds` (training only; evaluation is `eval_seconds`), the median over
  the epochs after the first (which plans and captures).
- PyTorch: the training sentences shuffled every epoch (a generator seeded
  with the seed), batches of 25 whatever their lengths, each batch's
  embeddings packed with `nn.utils.rnn.pack_padded_sequence`
  (`enforce_sorted=False`) so cuDNN runs no padding, the class read from
  the final hidden state (the state at each sentence's own last word),
  mean cross-entropy, `torch.optim.Adagrad(lr=0.05)`; `cudnn.benchmark` on.
  With `--pytorch-batching buckets` PyTorch batches as bumpgrad does
  instead: each sentence in the first of bumpgrad's bucket lengths (read
  from its run's report) that holds it, sentences shuffled within their
  bucket, a bucket cut into batches of 25 (its last one short), the
  batches' order shuffled: the same procedure, to tell the batching's
  effect on accuracy from the implementation's.
  An epoch's time is the training loop between two `cuda.synchronize()`s,
  the median over the epochs after the first.

The vocabulary on both sides: the distinct words of the training sentences
kept (for `--classes 2`, those with a non-neutral root), id 0 the unknown
word. Accuracy is compared as the mean over seeds of the last epoch's
development accuracy (issue 32: within 1 point), time as the ratio of the
medians (target: bumpgrad <= 0.5x PyTorch's).

Writes `bench/results/sst-vs-pytorch-<date>-<gpu>.json` and prints a table.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from result_names import gpu_slug

REPO_ROOT = Path(__file__).resolve().parent.parent
SST = REPO_ROOT / "data" / "sst"
CONFIG = {"embed": 300, "hidden": 150, "batch": 25, "lr": 0.05}
TARGETS = {"accuracy_within_points": 1.0, "epoch_time_vs_pytorch": 0.5}
LEAF = re.compile(r"\((\d) ([^()]+)\)")


# --------------------------------------------------------------------------
# The treebank, as bumpgrad reads it (src/data/text/)
# --------------------------------------------------------------------------

def read_split(name, classes):
    """`[(words, label)]` of one split: the leaves in order, the root's class;
    neutral roots dropped for 2 classes (0-1 negative, 3-4 positive)."""
    out = []
    for line in (SST / f"{name}.txt").read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        root = int(line[1])
        words = [m.group(2) for m in LEAF.finditer(line)]
        if classes == 2:
            if root == 2:
                continue
            root = 0 if root < 2 else 1
        out.append((words, root))
    return out


def encode(split, vocab):
    return [([vocab.get(w, 0) for w in words], label) for words, label in split]


# --------------------------------------------------------------------------
# PyTorch (a child process: `--pytorch-worker JSON`)
# --------------------------------------------------------------------------

def pytorch_worker(spec):
    import torch
    import torch.nn.functional as F
    from torch.nn.utils.rnn import pack_padded_sequence

    sys.path.insert(0, str(REPO_ROOT / "bench"))
    from models import SstLstm

    torch.backends.cudnn.benchmark = True
    torch.manual_seed(spec["seed"])
    device = torch.device(spec["device"])
    classes = spec["classes"]
    train = read_split("train", classes)
    dev = read_split("dev", classes)
    vocab = {w: i + 1 for i, w in enumerate(sorted({w for words, _ in train for w in words}))}
    train, dev = encode(train, vocab), encode(dev, vocab)
    model = SstLstm(len(vocab) + 1, classes, CONFIG["embed"], CONFIG["hidden"]).to(device)
    opt = torch.optim.Adagrad(model.parameters(), lr=CONFIG["lr"])

    def batch(items):
        lengths = torch.tensor([len(t) for t, _ in items])
        tokens = torch.zeros(int(lengths.max()), len(items), dtype=torch.long)
        for b, (t, _) in enumerate(items):
            tokens[: len(t), b] = torch.tensor(t)
        labels = torch.tensor([label for _, label in items])
        return tokens.to(device, non_blocking=True), lengths, labels.to(device, non_blocking=True)

    def logits(tokens, lengths):
        packed = pack_padded_sequence(model.embedding(tokens), lengths, enforce_sorted=False)
        _, (h, _) = model.rnn(packed)
        return model.fc(h[-1])

    # Batches are built on the host before the clock starts, as bumpgrad's
    # are resident: the epoch time is the device's work and its launches.
    gen = torch.Generator().manual_seed(spec["seed"])
    dev_batches = [batch(dev[i:i + 250]) for i in range(0, len(dev), 250)]
    epochs = []
    for _ in range(spec["epochs"]):
        batches = [batch([train[j] for j in rows]) for rows in epoch_batches(train, spec.get("buckets"), gen)]
        model.train()
        torch.cuda.synchronize()
        start = time.perf_counter()
        total = torch.zeros((), device=device)
        for tokens, lengths, labels in batches:
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(logits(tokens, lengths), labels)
            loss.backward()
            opt.step()
            total += loss.detach()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        model.eval()
        right = 0
        with torch.no_grad():
            for tokens, lengths, labels in dev_batches:
                right += int((logits(tokens, lengths).argmax(1) == labels).sum())
        epochs.append({"seconds": seconds, "train_loss": float(total) / len(batches),
                       "dev_accuracy": right / len(dev), "steps": len(batches)})
    print(json.dumps({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                      "vocab": len(vocab) + 1, "epochs": epochs}))


def epoch_batches(train, buckets, gen):
    """One epoch's batches as lists of sentence indices: random batches, or
    with `buckets` (ascending lengths) bumpgrad's bucketed ones."""
    import torch

    size = CONFIG["batch"]
    if not buckets:
        order = torch.randperm(len(train), generator=gen).tolist()
        return [order[i:i + size] for i in range(0, len(order), size)]
    members = [[] for _ in buckets]
    for i, (tokens, _) in enumerate(train):
        members[next(k for k, n in enumerate(buckets) if len(tokens) <= n)].append(i)
    batches = []
    for rows in members:
        rows = [rows[j] for j in torch.randperm(len(rows), generator=gen).tolist()]
        batches += [rows[i:i + size] for i in range(0, len(rows), size)]
    return [batches[j] for j in torch.randperm(len(batches), generator=gen).tolist()]


def bucket_lengths(notes):
    """bumpgrad's bucket lengths from its report's line `N length buckets
    ...: length (training + development batches of B) 10 (54 + 7), 15 ...`."""
    for line in notes:
        if "length buckets" in line:
            return [int(m) for m in re.findall(r"(\d+) \(\d+ \+ \d+\)", line)]
    raise RuntimeError(f"bumpgrad's report names no buckets: {notes}")


def run_pytorch(spec):
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)  # PyTorch refuses to start with another cuDNN on the path
    p = subprocess.run([sys.executable, __file__, "--pytorch-worker", json.dumps(spec)],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"PyTorch {spec} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------
# bumpgrad
# --------------------------------------------------------------------------

def run_bumpgrad(args, classes, seed):
    cmd = [args.bumpgrad, "train", "--model", "sst-lstm", "--data", str(SST), "--classes", str(classes),
           "--batch", str(CONFIG["batch"]), "--optimizer", "adagrad", "--lr", str(CONFIG["lr"]),
           "--epochs", str(args.epochs), "--seed", str(seed), "--device", args.device,
           "--checkpoint-every", "off", "--checkpoint-dir", "/tmp/bumpgrad-bench-sst", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"bumpgrad {' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return {"command": " ".join(cmd),
            "epochs": [{"seconds": e["seconds"], "train_loss": e["train_loss"],
                        "dev_accuracy": e["test_accuracy"], "steps": e["steps"]} for e in lines],
            "notes": [l.strip() for l in p.stderr.splitlines()
                      if l.startswith(("bumpgrad:", "arena:", "step memory plan:"))]}


def epoch_seconds(run):
    times = [e["seconds"] for e in run["epochs"]]
    return statistics.median(times[1:] if len(times) > 1 else times)


def summarise(rows):
    out = {}
    for side in ("bumpgrad", "pytorch"):
        acc = [r[side]["epochs"][-1]["dev_accuracy"] for r in rows]
        sec = [epoch_seconds(r[side]) for r in rows]
        out[side] = {"dev_accuracy_mean": statistics.mean(acc), "dev_accuracy": acc,
                     "epoch_seconds_median": statistics.median(sec), "epoch_seconds": sec}
    out["accuracy_points_apart"] = 100 * (out["bumpgrad"]["dev_accuracy_mean"] - out["pytorch"]["dev_accuracy_mean"])
    out["epoch_time_ratio"] = out["bumpgrad"]["epoch_seconds_median"] / out["pytorch"]["epoch_seconds_median"]
    return out


def table(results):
    lines = ["| classes | side | dev accuracy by seed (last epoch) | mean | s/epoch (median) |",
             "| --- | --- | --- | --- | --- |"]
    for classes, r in results.items():
        s = r["summary"]
        for side in ("bumpgrad", "pytorch"):
            accs = " / ".join(f"{100 * a:.2f}" for a in s[side]["dev_accuracy"])
            lines.append(f"| {classes} | {side} | {accs} | {100 * s[side]['dev_accuracy_mean']:.2f} "
                         f"| {s[side]['epoch_seconds_median']:.3f} |")
        lines.append(f"| {classes} | bumpgrad − PyTorch | | {s['accuracy_points_apart']:+.2f} points "
                     f"(target within ±{TARGETS['accuracy_within_points']}) | ratio {s['epoch_time_ratio']:.2f} "
                     f"(target ≤ {TARGETS['epoch_time_vs_pytorch']}) |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bumpgrad", default=str(REPO_ROOT / ".gpu" / "bumpgrad"), help="the bumpgrad binary")
    p.add_argument("--device", default="cuda", help="bumpgrad's --device (PyTorch always runs on cuda)")
    p.add_argument("--classes", type=int, choices=[2, 5], action="append",
                   help="2 or 5; repeat for both (default: both)")
    p.add_argument("--seeds", type=int, default=3, help="seeds 1..N on each side")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--pytorch-batching", choices=["random", "buckets"], default="random",
                   help="PyTorch's batches: random (default), or bumpgrad's length buckets")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results")
    p.add_argument("--pytorch-worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.pytorch_worker:
        return pytorch_worker(json.loads(args.pytorch_worker))

    results = {}
    for classes in args.classes or [2, 5]:
        rows = []
        for seed in range(1, args.seeds + 1):
            b = run_bumpgrad(args, classes, seed)
            buckets = bucket_lengths(b["notes"]) if args.pytorch_batching == "buckets" else None
            t = run_pytorch({"device": "cuda", "classes": classes, "seed": seed, "epochs": args.epochs,
                             "buckets": buckets})
            rows.append({"seed": seed, "bumpgrad": b, "pytorch": t})
            print(f"classes {classes} seed {seed}: bumpgrad {100 * b['epochs'][-1]['dev_accuracy']:.2f}% "
                  f"{epoch_seconds(b):.3f} s/epoch, PyTorch {100 * t['epochs'][-1]['dev_accuracy']:.2f}% "
                  f"{epoch_seconds(t):.3f} s/epoch", file=sys.stderr)
        results[classes] = {"runs": rows, "summary": summarise(rows)}

    import torch

    name = torch.cuda.get_device_name(0)
    stem = args.out / (f"sst-vs-pytorch-{datetime.date.today()}-{gpu_slug(name)}"
                       + ("-buckets" if args.pytorch_batching == "buckets" else ""))
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"results": results, "config": CONFIG, "epochs": args.epochs, "targets": TARGETS,
               "pytorch_batching": args.pytorch_batching,
               "command": " ".join(sys.argv), "device": name}
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    print(table(results))
    print(f"\nwrote {stem}.json", file=sys.stderr)


if __name__ == "__main__":
    main()
