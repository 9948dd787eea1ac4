#!/usr/bin/env python3
"""Run bumpgrad and PyTorch on the same MNIST CNN workload, side by side.

Both trainers are run one after the other in this one invocation, on the same
machine, with the same thread count, epochs, batch size and seed, so that
their timings are comparable. Each prints one JSON object per epoch on stdout
(`bumpgrad train --json` and bench/pytorch_mnist.py share that format); this
script reads those lines, prints a markdown table and writes everything,
raw epochs included, to a JSON file.

The headline figure is the median training time of epochs 2 onward: epoch 1
carries one-off costs (allocator warm-up, oneDNN kernel selection, page faults
on the data) that say little about steady-state speed.

Example (from the repository root, after `cargo build --release`):

    python3 bench/cpu_vs_pytorch.py --threads 2 --epochs 4
"""

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from cli_args import positive_int

REPO_ROOT = Path(__file__).resolve().parent.parent
PYTORCH_SCRIPT = REPO_ROOT / "bench" / "pytorch_mnist.py"
# "pytorch-cl" is PyTorch with channels-last (NHWC) convolutions: about twice
# as fast as its default NCHW on this CPU, so both are anchors.
FRAMEWORKS = ("bumpgrad", "pytorch", "pytorch-cl")


def log(*parts):
    """Progress for people; stdout is kept for the table."""
    print(*parts, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

def parse_order(text):
    """'bumpgrad,pytorch,bumpgrad,pytorch' -> list of framework names.

    `b`/`p` are accepted as short forms, so `--order b,p,b,p` alternates.
    """
    short = {"b": "bumpgrad", "p": "pytorch", "c": "pytorch-cl"}
    order = []
    for item in text.split(","):
        name = short.get(item.strip().lower(), item.strip().lower())
        if name not in FRAMEWORKS:
            raise argparse.ArgumentTypeError(
                f"unknown framework {item!r} in --order (use bumpgrad/b, pytorch/p, pytorch-cl/c)")
        order.append(name)
    if not order:
        raise argparse.ArgumentTypeError("--order is empty")
    return order


def default_out_path():
    """bench/results/cpu-<date>-<host>.json; 'dev' when the host has no name."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "dev"
    return REPO_ROOT / "bench" / "results" / f"cpu-{dt.date.today().isoformat()}-{host}.json"


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Benchmark bumpgrad against PyTorch on Lantern's MNIST CNN "
                    "(CPU): both run in this one invocation with the same "
                    "settings; prints a markdown table and writes JSON.",
        epilog="Arguments for one side only go through --bumpgrad-arg / "
               "--pytorch-arg, written with '=' because they start with a "
               "dash, e.g. --pytorch-arg=--channels-last.",
    )
    p.add_argument("--bumpgrad", type=Path, default=REPO_ROOT / "target" / "release" / "bumpgrad",
                   help="bumpgrad binary (default: target/release/bumpgrad "
                        "under the repository root)")
    p.add_argument("--python", default=sys.executable,
                   help="Python interpreter with torch installed, for "
                        "bench/pytorch_mnist.py (default: this interpreter)")
    p.add_argument("--threads", type=positive_int, default=2,
                   help="CPU threads for both frameworks (default: 2)")
    p.add_argument("--epochs", type=positive_int, default=4,
                   help="epochs per run (default: 4); the headline median "
                        "uses epochs 2 onward")
    p.add_argument("--batch", type=positive_int, default=100,
                   help="minibatch size (default: 100)")
    p.add_argument("--seed", type=int, default=1,
                   help="seed passed to both trainers (default: 1)")
    p.add_argument("--train-limit", type=positive_int, default=None, metavar="N",
                   help="train on the first N examples only (both trainers); "
                        "for quick checks, not for published figures")
    p.add_argument("--data", type=Path, default=None,
                   help="MNIST directory for the PyTorch script (default: its "
                        "own, data/mnist under the repository root); bumpgrad "
                        "runs from the repository root and uses its default")
    p.add_argument("--order", type=parse_order, default=["bumpgrad", "pytorch", "pytorch-cl"],
                   metavar="LIST",
                   help="comma-separated run sequence, e.g. 'pytorch,bumpgrad' "
                        "or 'b,p,c,b,p,c' to alternate and spread drift in the "
                        "machine's speed over all (default: bumpgrad,pytorch,pytorch-cl; "
                        "pytorch-cl is PyTorch with --channels-last)")
    p.add_argument("--bumpgrad-arg", action="append", default=[], metavar="ARG",
                   help="extra argument appended to the bumpgrad command "
                        "(repeatable)")
    p.add_argument("--pytorch-arg", action="append", default=[], metavar="ARG",
                   help="extra argument appended to the PyTorch command "
                        "(repeatable), e.g. --pytorch-arg=--channels-last")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON results file (default: "
                        "bench/results/cpu-<date>-<hostname or 'dev'>.json)")
    return p.parse_args(argv)


# --------------------------------------------------------------------------
# Running the trainers
# --------------------------------------------------------------------------

def command_for(framework, args):
    """The exact command line for one run of `framework`."""
    if framework == "bumpgrad":
        cmd = [str(args.bumpgrad), "train", "--device", "cpu",
               "--epochs", str(args.epochs), "--batch", str(args.batch),
               "--threads", str(args.threads), "--seed", str(args.seed), "--json"]
        extra = args.bumpgrad_arg
    else:
        cmd = [args.python, str(PYTORCH_SCRIPT), "--device", "cpu",
               "--epochs", str(args.epochs), "--batch", str(args.batch),
               "--threads", str(args.threads), "--seed", str(args.seed)]
        if args.data is not None:
            cmd += ["--data", str(args.data)]
        if framework == "pytorch-cl":
            cmd.append("--channels-last")
        extra = args.pytorch_arg
    if args.train_limit is not None:
        cmd += ["--train-limit", str(args.train_limit)]
    return cmd + list(extra)


def cpu_jiffies():
    """(busy, total) CPU time of the whole machine since boot, in clock ticks.

    From the first line of /proc/stat; iowait counts as idle.
    """
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    total = sum(fields)
    return total - fields[3] - fields[4], total


def own_cpu_seconds():
    """CPU-seconds used by this process and its waited-for children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def cpu_busy_fraction(interval=1.0):
    """Fraction of all CPUs' time spent busy over `interval` seconds.

    Sampled from /proc/stat rather than the load average, which still
    carries the previous run of this very script for a minute or more.
    Returns None where /proc/stat is unavailable (not Linux).
    """
    try:
        busy0, total0 = cpu_jiffies()
        time.sleep(interval)
        busy1, total1 = cpu_jiffies()
    except (OSError, ValueError, IndexError):
        return None
    total = total1 - total0
    return (busy1 - busy0) / total if total > 0 else None


def describe_epoch(record):
    """One progress line for an epoch record, tolerant of missing fields."""
    def num(key, scale=1.0, unit=""):
        value = record.get(key)
        return f"{scale * value:.2f}{unit}" if isinstance(value, (int, float)) else "?"
    return (f"epoch {record.get('epoch')}: {num('seconds', unit=' s')}, "
            f"test accuracy {num('test_accuracy', 100, '%')}")


def run_trainer(framework, cmd, threads):
    """Run one trainer; return its per-epoch JSON records and wall time.

    stderr is passed straight through so its progress shows while it runs;
    stdout is read line by line, and any line that is not a JSON object is
    echoed to stderr rather than silently dropped.
    """
    env = dict(os.environ)
    # Cap OpenMP/MKL pools too, in case a library spins one up outside
    # torch.set_num_threads' reach; harmless for bumpgrad.
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)

    log(f"\n=== {framework}: {shlex.join(cmd)}")
    # Another busy process skews the figures badly (a 2-core box has no spare
    # core), so how busy the CPUs are just before each run is recorded, and a
    # warning is printed when the machine is not quiet.
    busy_before = cpu_busy_fraction()
    if busy_before is not None and busy_before > 0.10:
        log(f"warning: CPUs were {100 * busy_before:.0f}% busy just before this "
            "run; other work on the machine will distort the timings")
    records = []
    tick = os.sysconf("SC_CLK_TCK")
    try:
        machine0, own0 = cpu_jiffies()[0] / tick, own_cpu_seconds()
    except (OSError, ValueError, IndexError):
        machine0 = None
    t0 = time.perf_counter()
    # Run from the repository root so relative defaults (data/mnist) resolve
    # the same way for both trainers.
    with subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                          text=True, bufsize=1) as proc:
        for line in proc.stdout:
            stripped = line.strip()
            if not stripped:
                continue
            try:
                record = json.loads(stripped)
            except json.JSONDecodeError:
                record = None
            if isinstance(record, dict) and "epoch" in record:
                records.append(record)
                log(f"[{framework}] {describe_epoch(record)}")
            else:
                log(f"[{framework} stdout] {stripped}")
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"error: {framework} exited with status {proc.returncode}")
    # CPU time the rest of the machine used while the trainer ran: what the
    # CPUs were busy with, less the trainer's and this script's own share.
    # Anything sizeable means the run competed for cores and is suspect.
    other = None
    if machine0 is not None:
        machine_used = cpu_jiffies()[0] / tick - machine0
        other = max(0.0, machine_used - (own_cpu_seconds() - own0))
        if other > 0.05 * wall:
            log(f"warning: other processes used {other:.1f} CPU-seconds during "
                f"this {wall:.1f} s run; its timings are suspect")
    return records, wall, busy_before, other


def summarise_run(framework, index, cmd, records, wall, expected_epochs):
    """Reduce one run's epoch records to the figures the table shows."""
    if len(records) != expected_epochs:
        sys.exit(f"error: {framework} printed {len(records)} epoch records, "
                 f"expected {expected_epochs}")
    for r in records:
        for key in ("seconds", "test_accuracy"):
            if not isinstance(r.get(key), (int, float)):
                sys.exit(f"error: {framework} epoch record lacks numeric {key!r}: {r}")
    seconds = [float(r["seconds"]) for r in records]
    return {
        "framework": framework,
        "run": index,
        "command": cmd,
        "process_wall_seconds": wall,
        "seconds_per_epoch": seconds,
        # Epoch 1 is warm-up; with a single epoch there is nothing else.
        "steady_seconds": seconds[1:] or seconds,
        "median_seconds": statistics.median(seconds[1:] or seconds),
        "final_test_accuracy": float(records[-1]["test_accuracy"]),
        "final_train_loss": records[-1].get("train_loss"),
        "epochs": records,
    }


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------

def summarise(runs):
    """Per framework: median over all its runs' steady epochs, and the ratio."""
    summary = {}
    for fw in FRAMEWORKS:
        mine = [r for r in runs if r["framework"] == fw]
        if not mine:
            continue
        steady = [s for r in mine for s in r["steady_seconds"]]
        summary[fw] = {
            "runs": len(mine),
            "median_seconds_per_epoch": statistics.median(steady),
            "final_test_accuracy": [r["final_test_accuracy"] for r in mine],
        }
    for anchor in ("pytorch", "pytorch-cl"):
        if "bumpgrad" in summary and anchor in summary:
            summary[f"ratio_bumpgrad_over_{anchor.replace('-', '_')}"] = (
                summary["bumpgrad"]["median_seconds_per_epoch"]
                / summary[anchor]["median_seconds_per_epoch"])
    return summary


def markdown(runs, summary, config):
    epochs = config["epochs"]
    median_label = (f"median s/epoch (epochs 2–{epochs})" if epochs > 2
                    else "median s/epoch (epoch 2)" if epochs == 2
                    else "s/epoch (epoch 1 only)")
    lines = [
        f"MNIST CNN, CPU, {config['threads']} threads, batch {config['batch']}, "
        f"{epochs} epochs, seed {config['seed']}"
        + (f", train limit {config['train_limit']}" if config["train_limit"] else ""),
        "",
        f"| framework | run | {median_label} | all epochs (s) | final test accuracy "
        "| others' CPU-s during run |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for r in runs:
        lines.append(
            f"| {r['framework']} | {r['run']} | {r['median_seconds']:.3f} | "
            + ", ".join(f"{s:.2f}" for s in r["seconds_per_epoch"])
            + f" | {100 * r['final_test_accuracy']:.2f}% | "
            + ("n/a" if r["other_cpu_seconds"] is None else f"{r['other_cpu_seconds']:.1f}")
            + " |")
    lines.append("")
    for fw in FRAMEWORKS:
        if fw in summary and summary[fw]["runs"] > 1:
            lines.append(f"{fw}: median over {summary[fw]['runs']} runs "
                         f"{summary[fw]['median_seconds_per_epoch']:.3f} s/epoch")
    for anchor, label in (("pytorch", "PyTorch (NCHW)"), ("pytorch-cl", "PyTorch (channels-last)")):
        ratio = summary.get(f"ratio_bumpgrad_over_{anchor.replace('-', '_')}")
        if ratio is not None:
            lines.append(f"**bumpgrad / {label} seconds per epoch: {ratio:.3f}** "
                         "(below 1: bumpgrad is faster)")
    return "\n".join(lines)


def environment():
    """Facts that make a result file interpretable later."""
    def capture(cmd):
        try:
            return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    status = capture(["git", "status", "--porcelain"])
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        # Which bumpgrad was measured; 'dirty' means uncommitted changes.
        "git_commit": capture(["git", "rev-parse", "HEAD"]),
        "git_dirty": bool(status) if status is not None else None,
    }


def main(argv=None):
    args = parse_args(argv)
    # The trainers run with the repository root as cwd, so paths given
    # relative to the caller's cwd must be made absolute first.
    args.bumpgrad = args.bumpgrad.resolve()
    if args.data is not None:
        args.data = args.data.resolve()
    if "bumpgrad" in args.order and not args.bumpgrad.exists():
        sys.exit(f"error: {args.bumpgrad} not found; build it with "
                 "`cargo build --release` or pass --bumpgrad")

    config = {
        "threads": args.threads,
        "epochs": args.epochs,
        "batch": args.batch,
        "seed": args.seed,
        "train_limit": args.train_limit,
        "order": args.order,
    }
    started = dt.datetime.now().astimezone()

    runs = []
    counts = dict.fromkeys(FRAMEWORKS, 0)
    for framework in args.order:
        counts[framework] += 1
        cmd = command_for(framework, args)
        records, wall, busy_before, other = run_trainer(framework, cmd, args.threads)
        run = summarise_run(framework, counts[framework], cmd, records, wall,
                            args.epochs)
        run["cpu_busy_before"] = busy_before
        run["other_cpu_seconds"] = other
        runs.append(run)

    summary = summarise(runs)
    table = markdown(runs, summary, config)
    print(table)

    pytorch_records = [e for r in runs if r["framework"].startswith("pytorch") for e in r["epochs"]]
    env = environment()
    env["torch_version"] = pytorch_records[0].get("torch_version") if pytorch_records else None

    out = args.out or default_out_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "benchmark": "mnist-cnn-cpu",
        "started": started.isoformat(timespec="seconds"),
        "config": config,
        "environment": env,
        "summary": summary,
        "runs": runs,
        "markdown": table,
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    log(f"\nwrote {out}")


if __name__ == "__main__":
    main()
