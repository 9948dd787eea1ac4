#!/usr/bin/env python3
"""ResNets on the CPU, bumpgrad against PyTorch's CPU build, side by side.

Issue 35's CPU case: a network at `--width-mult 0.125` (ResNet-18 has
176,258 parameters, as bench/models.py's) on the first 6,000 MNIST images,
batch 100, SGD momentum 0.9, one and two threads. Both sides run in fresh
processes, alternated (bumpgrad, PyTorch, bumpgrad, PyTorch, ...) so that a
noisy neighbour hits both; each run trains `--epochs` epochs and its figure
is the median training time of the epochs after the first (evaluation
excluded on both sides).

    cargo build --release
    python3 bench/resnet_cpu_vs_pytorch.py --python /path/to/venv/bin/python

Prints a markdown table and writes bench/results/resnet-cpu-vs-pytorch-DATE-HOST.json.
"""

import argparse
import datetime as dt
import json
import platform
import socket
import statistics
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def epochs_of(cmd):
    """The `seconds` of every epoch line the command prints on stdout."""
    log("$", " ".join(cmd))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO_ROOT).stdout
    lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    return [l["seconds"] for l in lines if "seconds" in l and "epoch" in l]


def bumpgrad_cmd(args, model, threads):
    return [str(args.bumpgrad), "train", "--model", model, "--width-mult", str(args.width_mult),
            "--data", str(args.data), "--device", "cpu", "--threads", str(threads),
            "--train-limit", str(args.train_limit), "--test-limit", str(args.test_limit),
            "--batch", str(args.batch), "--epochs", str(args.epochs), "--lr", "0.05",
            "--momentum", "0.9", "--weight-decay", "0", "--seed", "1",
            "--checkpoint-every", "off", "--checkpoint-dir", "/tmp/bumpgrad-bench-resnet-cpu", "--json"]


def pytorch_cmd(args, model, threads):
    return [args.python, str(REPO_ROOT / "bench" / "pytorch_resnet_mnist.py"), "--model", model,
            "--width-mult", str(args.width_mult), "--data", str(args.data), "--device", "cpu",
            "--threads", str(threads), "--train-limit", str(args.train_limit),
            "--test-limit", str(args.test_limit), "--batch", str(args.batch), "--epochs", str(args.epochs),
            "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "0", "--seed", "1"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bumpgrad", type=Path, default=REPO_ROOT / "target" / "release" / "bumpgrad")
    p.add_argument("--python", default=sys.executable, help="the interpreter that has torch")
    p.add_argument("--models", default="resnet18,squeezenet", help="comma-separated")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--width-mult", type=float, default=0.125)
    p.add_argument("--train-limit", type=int, default=6000)
    p.add_argument("--test-limit", type=int, default=1000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--epochs", type=int, default=3, help="per run; the first is not counted")
    p.add_argument("--repeats", type=int, default=2, help="runs of each side, alternated")
    p.add_argument("--data", type=Path, default=REPO_ROOT / "data" / "mnist")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results")
    args = p.parse_args()
    if args.epochs < 2:
        p.error("--epochs must be at least 2: the first epoch is not counted")

    rows = []
    for model in args.models.split(","):
        for threads in (int(t) for t in args.threads.split(",")):
            times = {"bumpgrad": [], "pytorch": []}
            for _ in range(args.repeats):
                times["bumpgrad"] += epochs_of(bumpgrad_cmd(args, model, threads))[1:]
                times["pytorch"] += epochs_of(pytorch_cmd(args, model, threads))[1:]
            b, t = statistics.median(times["bumpgrad"]), statistics.median(times["pytorch"])
            rows.append({"model": model, "threads": threads, "bumpgrad_s": b, "pytorch_s": t,
                         "ratio": b / t, "epochs": times})
            log(f"{model}, {threads} thread(s): bumpgrad {b:.3f} s, PyTorch {t:.3f} s, {b / t:.3f}x")

    print("| model | threads | bumpgrad s/epoch | PyTorch s/epoch | ratio |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['threads']} | {r['bumpgrad_s']:.3f} | {r['pytorch_s']:.3f} | {r['ratio']:.3f} |")

    torch_version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=REPO_ROOT).stdout.strip()
    result = {"date": dt.date.today().isoformat(), "host": socket.gethostname(),
              "cpu": platform.processor() or platform.machine(), "commit": commit, "torch": torch_version,
              "config": {k: str(v) for k, v in vars(args).items()}, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"resnet-cpu-vs-pytorch-{result['date']}-{socket.gethostname()}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    log("wrote", path)


if __name__ == "__main__":
    main()
