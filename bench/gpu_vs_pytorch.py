#!/usr/bin/env python3
"""bumpgrad against PyTorch on one GPU, in one command.

For each batch size, one after another on the same GPU:

    bumpgrad train --device cuda --graph on  --json    bumpgrad, graph on
    bumpgrad train --device cuda --graph off --json    bumpgrad, graph off
    bench/pytorch_gpu.py --mode eager                  PyTorch eager
    bench/pytorch_gpu.py --mode benchmark              PyTorch cudnn.benchmark
    bench/pytorch_gpu.py --mode graph                  PyTorch CUDA graph

Each run is its own process; its stdout JSON lines (one per epoch) are read
and reduced to: seconds per epoch (the median of epochs 2..E; epoch 1 carries
one-off costs such as kernel compilation, cuDNN set-up and graph capture),
final test accuracy, training-step memory, total device memory, kernels per
step. Memory means, for each framework:

- bumpgrad: step memory = the arena's step high-water
  (`arena.step_high_water_bytes`, everything one step bump-allocates above
  the mark); device memory = `device_total_bytes - device_free_bytes`.
- PyTorch: step memory = peak `max_memory_allocated()` during training minus
  `memory_allocated()` after data + model + optimizer (graph mode also
  reports the reserved peak, where the graph's private pool shows); device
  memory = total - free from `torch.cuda.mem_get_info()`.

Both device figures are total - free on the whole device, so they include
the CUDA context and library handles; run on an otherwise idle GPU.

Prints a markdown table, bumpgrad (graph on)'s ratio to each PyTorch mode per
batch, and the targets (batch 100: at most 0.5x PyTorch's graph time; batch
1000: at most 0.7x). Writes the same, with every run's raw epochs, commands
and versions, to bench/results/gpu-<date>-<gpu>.json, and a chart to the
.svg beside it. A run that fails is reported as failed, with the last lines
of its stderr, and the others still run.

    python3 bench/gpu_vs_pytorch.py                       # on the GPU machine
    python3 bench/gpu_vs_pytorch.py --render FILE.json    # redraw from a result
"""

import argparse
import collections
import datetime as dt
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from gpu_chart import render_svg
from cli_args import positive_int
import result_names

REPO_ROOT = Path(__file__).resolve().parent.parent
PYTORCH_SCRIPT = REPO_ROOT / "bench" / "pytorch_gpu.py"
RESULTS_DIR = REPO_ROOT / "bench" / "results"

# Every kind of run, in the order they run within a batch size and are shown.
RunKind = collections.namedtuple("RunKind", "key framework mode label")
RUN_KINDS = (
    RunKind("bumpgrad-graph", "bumpgrad", "on", "bumpgrad, graph on"),
    RunKind("bumpgrad-nograph", "bumpgrad", "off", "bumpgrad, graph off"),
    RunKind("pytorch-eager", "pytorch", "eager", "PyTorch eager"),
    RunKind("pytorch-benchmark", "pytorch", "benchmark", "PyTorch cudnn.benchmark"),
    RunKind("pytorch-graph", "pytorch", "graph", "PyTorch CUDA graph"),
)
ANCHOR_KEY = "bumpgrad-graph"
# bumpgrad (graph on) must take at most this fraction of PyTorch's
# whole-step-graph time per epoch at these batch sizes.
TARGETS = {100: 0.5, 1000: 0.7}

STDERR_TAIL_LINES = 15
MIB = 2 ** 20


def log(*parts):
    """Progress for people; stdout is kept for the report."""
    print(*parts, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

def int_list(text):
    """'100,1000' -> [100, 1000]."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Benchmark bumpgrad (CUDA graph on and off) against PyTorch "
                    "(eager, cudnn.benchmark, CUDA graph) on Lantern's MNIST CNN "
                    "on one GPU; prints a markdown table and the targets, writes "
                    "JSON and an SVG chart.",
        epilog="Extra arguments for one side go through --bumpgrad-arg / "
               "--pytorch-arg, written with '=' since they start with a dash.")
    p.add_argument("--bumpgrad", type=Path, default=REPO_ROOT / ".gpu" / "bumpgrad",
                   help="bumpgrad binary (default: .gpu/bumpgrad, what "
                        "scripts/gpu.sh stage writes)")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter with torch for bench/pytorch_gpu.py "
                        "(default: this one)")
    p.add_argument("--epochs", type=positive_int, default=4,
                   help="epochs per run (default: 4); s/epoch is the median of 2..E")
    p.add_argument("--batches", type=int_list, default=[100, 1000], metavar="LIST",
                   help="batch sizes, comma-separated (default: 100,1000)")
    p.add_argument("--benchmark-batches", type=int_list, default=None, metavar="LIST",
                   help="batch sizes at which PyTorch's cudnn.benchmark mode runs "
                        "(default: all of --batches), e.g. 100 to save time")
    p.add_argument("--only", choices=("bumpgrad", "pytorch"), default=None,
                   help="run one framework only (ratios then show as '–')")
    p.add_argument("--seed", type=int, default=1,
                   help="seed passed to both (default: 1)")
    p.add_argument("--data", type=Path, default=None,
                   help="MNIST directory for both (default: their own, data/mnist)")
    p.add_argument("--run-timeout", type=positive_int, default=300, metavar="S",
                   help="seconds before a run is killed and reported failed (default: 300)")
    p.add_argument("--bumpgrad-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for every bumpgrad run (repeatable)")
    p.add_argument("--pytorch-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for every PyTorch run (repeatable)")
    p.add_argument("--out", type=Path, default=RESULTS_DIR,
                   help="directory for gpu-<date>-<gpu>.json and .svg "
                        "(default: bench/results)")
    p.add_argument("--render", type=Path, default=None, metavar="FILE",
                   help="run nothing: print the report of an earlier result JSON "
                        "and redraw its SVG beside it")
    # Testing the pipeline where there is no GPU: both trainers on the CPU,
    # on a subset, and (for a bumpgrad that predates the flag) no --graph.
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    p.add_argument("--train-limit", type=positive_int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--omit-graph-flag", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.benchmark_batches is None:
        args.benchmark_batches = args.batches
    return args


# --------------------------------------------------------------------------
# Planning and running
# --------------------------------------------------------------------------

def planned_runs(args):
    """(kind, batch) pairs in running order: per batch, every kind wanted."""
    plan = []
    for batch in args.batches:
        for kind in RUN_KINDS:
            if args.only and kind.framework != args.only:
                continue
            if kind.key == "pytorch-benchmark" and batch not in args.benchmark_batches:
                continue
            plan.append((kind, batch))
    return plan


def command_for(kind, batch, args):
    """The exact command line of one run."""
    common = ["--epochs", str(args.epochs), "--batch", str(batch), "--seed", str(args.seed)]
    if args.data is not None:
        common += ["--data", str(args.data)]
    if args.train_limit is not None:
        common += ["--train-limit", str(args.train_limit)]
    if kind.framework == "bumpgrad":
        cmd = [str(args.bumpgrad), "train", "--device", args.device, *common, "--json"]
        if not args.omit_graph_flag:
            cmd += ["--graph", kind.mode]
        return cmd + args.bumpgrad_arg
    return ([args.python, str(PYTORCH_SCRIPT), "--device", args.device,
             "--mode", kind.mode, *common] + args.pytorch_arg)


def run_process(cmd, label, timeout):
    """Run one trainer; collect its JSON epoch lines and its last stderr lines.

    stderr is echoed as it comes (prefixed with the run's label) so progress
    shows, and its tail is kept to explain a failure. A run still going after
    `timeout` seconds is killed.
    """
    log(f"\n=== {label}: {shlex.join(cmd)}")
    tail = collections.deque(maxlen=STDERR_TAIL_LINES)
    records, stray = [], []
    started = time.perf_counter()
    try:
        # Its own process group, so a timeout also ends anything it started
        # (which would otherwise hold the pipes open).
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, bufsize=1,
                                start_new_session=True)
    except OSError as error:
        return {"returncode": None, "records": [], "stderr_tail": [str(error)],
                "stray_stdout": [], "timed_out": False, "wall_seconds": 0.0}

    def pump_stderr():
        for line in proc.stderr:
            line = line.rstrip("\n")
            tail.append(line)
            log(f"  [{label}] {line}")

    pump = threading.Thread(target=pump_stderr, daemon=True)
    pump.start()
    timed_out = threading.Event()

    def kill():
        timed_out.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        for line in proc.stdout:
            record = parse_json_line(line)
            if record is not None:
                records.append(record)
            elif line.strip():
                stray.append(line.rstrip("\n"))
                log(f"  [{label} stdout] {line.rstrip()}")
        proc.wait()
    except BaseException:
        # Interrupted (Ctrl-C): its own session would not get the signal.
        kill()
        raise
    finally:
        timer.cancel()
    pump.join()
    return {"returncode": proc.returncode, "records": records, "stderr_tail": list(tail),
            "stray_stdout": stray, "timed_out": timed_out.is_set(),
            "wall_seconds": time.perf_counter() - started}


def parse_json_line(line):
    """An epoch record (a JSON object with 'epoch'), or None."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) and "epoch" in record else None


# --------------------------------------------------------------------------
# Reducing a run to its figures
# --------------------------------------------------------------------------

def number(value):
    """The value if it is a number (not a bool), else None."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def steady(records):
    """Epochs 2..E, or epoch 1 alone when there is no other."""
    return records[1:] or records


def median_of(records, extract):
    """Median of extract(record) over the steady epochs, skipping absences."""
    values = [v for v in (extract(r) for r in steady(records)) if v is not None]
    return statistics.median(values) if values else None


def max_of(records, extract):
    values = [v for v in (extract(r) for r in records) if v is not None]
    return max(values) if values else None


def bumpgrad_step_memory(r):
    return number((r.get("arena") or {}).get("step_high_water_bytes"))


def bumpgrad_step_reserved(r):
    """The step region: what the one allocation holds beyond the persistent part."""
    arena = r.get("arena") or {}
    capacity, persistent = number(arena.get("capacity_bytes")), number(arena.get("persistent_bytes"))
    return capacity - persistent if capacity is not None and persistent is not None else None


def bumpgrad_device_memory(r):
    total, free = number(r.get("device_total_bytes")), number(r.get("device_free_bytes"))
    return total - free if total is not None and free is not None else None


def framework_figures(framework, records):
    """Memory, kernel and per-step figures, read the way each framework reports them."""
    last = records[-1]
    if framework == "bumpgrad":
        kernel_seconds = median_of(records, lambda r: number(r.get("kernel_seconds_per_step")))
        return {
            "step_memory_bytes": max_of(records, bumpgrad_step_memory),
            "step_reserved_bytes": max_of(records, bumpgrad_step_reserved),
            "device_memory_bytes": max_of(records, bumpgrad_device_memory),
            "kernels_per_step": number(last.get("kernels_per_step")),
            "kernel_us_per_step": kernel_seconds * 1e6 if kernel_seconds is not None else None,
        }
    return {
        "step_memory_bytes": max_of(records, lambda r: number(r.get("step_memory_bytes"))),
        "step_reserved_bytes": max_of(records, lambda r: number(r.get("step_reserved_bytes"))),
        "device_memory_bytes": max_of(records, lambda r: number(r.get("device_used_bytes"))),
        "kernels_per_step": number(last.get("kernels_per_step")),
        "kernel_us_per_step": None,
    }


def failure_reason(result, expected_epochs):
    """Why a run does not count, or None when it does."""
    if result["timed_out"]:
        return "timed out"
    if result["returncode"] is None:
        return "did not start"
    if result["returncode"] != 0:
        return f"exit {result['returncode']}"
    if len(result["records"]) != expected_epochs:
        return f"{len(result['records'])} of {expected_epochs} epochs printed"
    if any(number(r.get("seconds")) is None for r in result["records"]):
        return "an epoch lacks 'seconds'"
    return None


def summarise_run(kind, batch, cmd, result, expected_epochs):
    """One run's row: status, the headline figures and the raw epochs."""
    records = result["records"]
    failure = failure_reason(result, expected_epochs)
    run = {
        "key": kind.key, "framework": kind.framework, "mode": kind.mode,
        "label": kind.label, "batch": batch, "command": cmd,
        "status": "failed" if failure else "ok", "failure": failure,
        "returncode": result["returncode"],
        "process_wall_seconds": result["wall_seconds"],
        "stderr_tail": result["stderr_tail"] if failure else [],
        "stray_stdout": result["stray_stdout"],
        "epochs": records,
        "seconds_per_epoch": None, "epoch_seconds": [], "steps": None,
        "us_per_step": None, "final_test_accuracy": None,
        "step_memory_bytes": None, "step_reserved_bytes": None,
        "device_memory_bytes": None, "kernels_per_step": None,
        "kernel_us_per_step": None,
    }
    if failure:
        return run
    seconds = median_of(records, lambda r: number(r["seconds"]))
    steps = number(records[-1].get("steps"))
    run.update(framework_figures(kind.framework, records))
    run.update({
        "seconds_per_epoch": seconds,
        "epoch_seconds": [r["seconds"] for r in records],
        "steps": steps,
        "us_per_step": seconds / steps * 1e6 if steps else None,
        "final_test_accuracy": number(records[-1].get("test_accuracy")),
    })
    return run


# --------------------------------------------------------------------------
# Comparisons
# --------------------------------------------------------------------------

def find_run(runs, key, batch):
    """The successful run of `key` at `batch`, or None."""
    for run in runs:
        if run["key"] == key and run["batch"] == batch and run["status"] == "ok":
            return run
    return None


def anchor_ratio(runs, run):
    """bumpgrad (graph on)'s time over `run`'s, for PyTorch rows of its batch."""
    anchor = find_run(runs, ANCHOR_KEY, run["batch"])
    if run["framework"] != "pytorch" or anchor is None or run["status"] != "ok":
        return None
    return anchor["seconds_per_epoch"] / run["seconds_per_epoch"]


def ratios(runs, batches):
    """Per batch: bumpgrad (graph on) / each PyTorch mode, None where unmeasured."""
    table = {}
    for batch in batches:
        table[batch] = {}
        for kind in RUN_KINDS:
            if kind.framework != "pytorch":
                continue
            run = find_run(runs, kind.key, batch)
            table[batch][kind.key] = anchor_ratio(runs, run) if run else None
    return table


def check_targets(runs, batches):
    """Each batch with a target: limit, measured ratio and met / not met / unknown."""
    checks = []
    for batch in batches:
        if batch not in TARGETS:
            continue
        factor = TARGETS[batch]
        ours = find_run(runs, ANCHOR_KEY, batch)
        theirs = find_run(runs, "pytorch-graph", batch)
        check = {"batch": batch, "factor": factor,
                 "bumpgrad_seconds": ours["seconds_per_epoch"] if ours else None,
                 "pytorch_graph_seconds": theirs["seconds_per_epoch"] if theirs else None,
                 "limit_seconds": None, "ratio": None, "met": None}
        if theirs:
            check["limit_seconds"] = factor * theirs["seconds_per_epoch"]
        if ours and theirs:
            check["ratio"] = ours["seconds_per_epoch"] / theirs["seconds_per_epoch"]
            check["met"] = check["ratio"] <= factor
        checks.append(check)
    return checks


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------

DASH = "–"


def fmt(value, pattern):
    """`pattern` applied to a number, '–' for an absent one."""
    return DASH if value is None else pattern.format(value)


def fmt_bytes(value):
    if value is None:
        return DASH
    return f"{value / MIB:.1f} MiB" if value >= 100 * MIB else f"{value / MIB:.2f} MiB"


def fmt_percent(fraction):
    return DASH if fraction is None else f"{100 * fraction:.2f}%"


def step_memory_cell(run):
    """Step memory, with what is reserved for it where that was measured."""
    used = fmt_bytes(run["step_memory_bytes"])
    reserved = run["step_reserved_bytes"]
    # bumpgrad's auto-sized arena reserves exactly its high-water: say it once.
    if reserved is None or reserved == run["step_memory_bytes"]:
        return used
    what = "region" if run["framework"] == "bumpgrad" else "pool"
    return f"{used} ({what} {fmt_bytes(reserved)})"


def epochs_phrase(epochs):
    """Which epochs the seconds per epoch are the median of."""
    if epochs > 2:
        return f"median of epochs 2–{epochs}"
    return "epoch 2" if epochs == 2 else "epoch 1 only"


def run_table(runs, epochs):
    """Every run: time, memory, accuracy, kernels, and bumpgrad's ratio to it."""
    lines = [
        f"| run | batch | s/epoch ({epochs_phrase(epochs)}) | µs/step | step memory | device memory "
        "| test accuracy | kernels/step | kernel µs/step | bumpgrad graph ÷ row |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        if run["status"] != "ok":
            lines.append(f"| {run['label']} | {run['batch']} | **failed** ({run['failure']}) "
                         "| | | | | | | |")
            continue
        ratio = anchor_ratio(runs, run)
        lines.append(
            f"| {run['label']} | {run['batch']} | {fmt(run['seconds_per_epoch'], '{:#.4g}')} "
            f"| {fmt(run['us_per_step'], '{:.0f}')} | {step_memory_cell(run)} "
            f"| {fmt_bytes(run['device_memory_bytes'])} "
            f"| {fmt_percent(run['final_test_accuracy'])} "
            f"| {fmt(run['kernels_per_step'], '{:g}')} "
            f"| {fmt(run['kernel_us_per_step'], '{:.0f}')} "
            f"| {fmt(ratio, '{:.2f}×')} |")
    return lines


def ratio_table(ratio_by_batch):
    """bumpgrad (graph on) / PyTorch per batch and mode."""
    modes = [k for k in RUN_KINDS if k.framework == "pytorch"]
    lines = ["| batch | " + " | ".join(f"÷ {k.label}" for k in modes) + " |",
             "|---:|" + "---:|" * len(modes)]
    for batch, row in ratio_by_batch.items():
        lines.append(f"| {batch} | " + " | ".join(fmt(row.get(k.key), "{:.3f}×") for k in modes)
                     + " |")
    return lines


def target_lines(checks):
    """One line per target: met / not met / not measurable, with the numbers."""
    lines = []
    for c in checks:
        head = f"- batch {c['batch']}: bumpgrad (graph on) ≤ {c['factor']:g}× PyTorch CUDA graph"
        if c["met"] is None:
            missing = [name for name, v in (("bumpgrad graph on", c["bumpgrad_seconds"]),
                                            ("PyTorch CUDA graph", c["pytorch_graph_seconds"]))
                       if v is None]
            lines.append(f"{head}: **not measured** (no result from {', '.join(missing)})")
            continue
        verdict = "**met**" if c["met"] else "**NOT met**"
        lines.append(
            f"{head}: {verdict}: {c['bumpgrad_seconds']:.4g} s vs limit "
            f"{c['factor']:g} × {c['pytorch_graph_seconds']:.4g} s = {c['limit_seconds']:.4g} s "
            f"(ratio {c['ratio']:.3f}×)")
    return lines


def failure_lines(runs):
    """The stderr tail of every failed run, so the cause is in the report."""
    lines = []
    for run in runs:
        if run["status"] == "ok":
            continue
        lines += ["", f"{run['label']}, batch {run['batch']}: {run['failure']}",
                  f"    $ {shlex.join(run['command'])}"]
        lines += [f"    {line}" for line in run["stderr_tail"][-STDERR_TAIL_LINES:]]
    return lines


def markdown(report):
    """The whole human report."""
    config, env = report["config"], report["environment"]
    gpu = env.get("gpu_name") or config["device"]
    lines = [
        f"## MNIST CNN on {gpu}: bumpgrad vs PyTorch "
        f"({config['epochs']} epoch{'s' if config['epochs'] != 1 else ''}, seed {config['seed']}"
        + (f", train limit {config['train_limit']}" if config.get("train_limit") else "") + ")",
        "",
        *run_table(report["runs"], config["epochs"]),
        "",
        "Step memory: bumpgrad's arena step high-water (region = the arena's step "
        "region); PyTorch's peak allocated above data + model + optimizer "
        "(pool = peak reserved above setup, graph mode). Device memory: total − "
        "free on the device, context included.",
        "",
        *(["(Test run: bumpgrad was run without --graph, so its 'graph on' and "
           "'graph off' rows are the same program.)", ""] if config.get("omit_graph_flag") else []),
        "### bumpgrad (graph on) ÷ PyTorch, seconds per epoch",
        "",
        *ratio_table(report["ratios"]),
        "",
        "### Targets",
        "",
        *(target_lines(report["targets"]) or ["- no batch size with a target was run"]),
    ]
    failures = failure_lines(report["runs"])
    if failures:
        lines += ["", "### Failed runs", "```", *failures[1:], "```"]
    return "\n".join(lines)


def chart(report):
    """The SVG chart of a report."""
    config, env = report["config"], report["environment"]
    gpu = env.get("gpu_name") or config["device"]
    versions = ", ".join(f"{name} {value}" for name, value in (
        ("PyTorch", env.get("torch_version")), ("CUDA", env.get("torch_cuda_version")),
        ("driver", env.get("driver_version"))) if value)
    title = f"MNIST CNN training on {gpu}: bumpgrad vs PyTorch"
    subtitle = (f"seconds per epoch, {epochs_phrase(config['epochs'])}"
                f" (shorter is faster); {report['started'][:10]}"
                + (f"; {versions}" if versions else ""))
    footer = ("dashed: target for bumpgrad with graph on (≤ 0.5× PyTorch's CUDA graph at "
              "batch 100, ≤ 0.7× at batch 1000); " + f"git {(env.get('git_commit') or '?')[:10]}"
              + (" (dirty)" if env.get("git_dirty") else ""))
    return render_svg(report["runs"], report["targets"], title, subtitle, footer)


# --------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------

def capture(cmd):
    """A command's stdout, stripped, or None if it cannot run or fails."""
    try:
        return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_facts():
    """The first GPU's name, driver version and memory, and the driver's CUDA."""
    facts = {"gpu_name": None, "driver_version": None, "gpu_memory": None,
             "driver_cuda_version": None}
    query = capture(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                     "--format=csv,noheader"])
    if query:
        fields = [f.strip() for f in query.splitlines()[0].split(",")]
        if len(fields) == 3:
            facts["gpu_name"], facts["driver_version"], facts["gpu_memory"] = fields
    banner = capture(["nvidia-smi"]) or ""
    match = re.search(r"CUDA Version:\s*([\d.]+)", banner)
    if match:
        facts["driver_cuda_version"] = match.group(1)
    return facts


def environment(args, runs):
    """Versions and machine facts that make a result file interpretable later."""
    env = {"hostname": platform.node(), "platform": platform.platform(),
           "python": platform.python_version(), **gpu_facts()}
    torch_record = next((r["epochs"][0] for r in runs
                         if r["framework"] == "pytorch" and r["epochs"]), {})
    env["torch_version"] = torch_record.get("torch_version")
    env["torch_cuda_version"] = torch_record.get("cuda_version")
    env["torch_cudnn_version"] = torch_record.get("cudnn_version")
    env["gpu_name"] = env["gpu_name"] or torch_record.get("device_name")
    if args.bumpgrad.exists():
        env["bumpgrad_version"] = capture([str(args.bumpgrad), "--version"])
    # A binary staged by scripts/gpu.sh carries the commit it was built from;
    # the GPU machine's copy of the checkout may have stale git metadata.
    staged = args.bumpgrad.parent / "commit"
    if staged.exists():
        described = staged.read_text().strip()
        env["git_commit"] = described.removesuffix("-dirty")
        env["git_dirty"] = described.endswith("-dirty")
    else:
        status = capture(["git", "status", "--porcelain"])
        env["git_commit"] = capture(["git", "rev-parse", "HEAD"])
        env["git_dirty"] = bool(status) if status is not None else None
    return env


def gpu_slug(name, device):
    """'NVIDIA H200' -> 'h200'; the device type when there is no GPU name."""
    if not name:
        return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "unknown"
    return result_names.gpu_slug(name)


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------

def benchmark(args):
    """Run every planned run; return the report (a JSON-ready dict)."""
    started = dt.datetime.now().astimezone()
    runs = []
    for kind, batch in planned_runs(args):
        cmd = command_for(kind, batch, args)
        label = f"{kind.label}, batch {batch}"
        result = run_process(cmd, label, args.run_timeout)
        run = summarise_run(kind, batch, cmd, result, args.epochs)
        log(f"=== {label}: " + (f"{run['seconds_per_epoch']:.4g} s/epoch"
                                 if run["status"] == "ok" else f"FAILED ({run['failure']})"))
        runs.append(run)
    return {
        "benchmark": "mnist-cnn-gpu",
        "started": started.isoformat(timespec="seconds"),
        "config": {"epochs": args.epochs, "batches": args.batches,
                   "benchmark_batches": args.benchmark_batches, "seed": args.seed,
                   "only": args.only, "device": args.device,
                   "train_limit": args.train_limit, "omit_graph_flag": args.omit_graph_flag,
                   "targets": {str(b): f for b, f in TARGETS.items()}},
        "environment": environment(args, runs),
        "runs": runs,
        "ratios": ratios(runs, args.batches),
        "targets": check_targets(runs, args.batches),
    }


def write_results(report, out_dir, device):
    """gpu-<date>-<gpu>.json and .svg in out_dir; returns their paths."""
    slug = gpu_slug(report["environment"]["gpu_name"], device)
    stem = f"gpu-{report['started'][:10]}-{slug}"
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, svg_path = out_dir / f"{stem}.json", out_dir / f"{stem}.svg"
    json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    svg_path.write_text(chart(report))
    return json_path, svg_path


def rerender(path):
    """--render: the report and chart of an earlier result, nothing run."""
    report = json.loads(path.read_text())
    # JSON turned the batch keys of `ratios` into strings; ints sort and read better.
    report["ratios"] = {int(b): row for b, row in report["ratios"].items()}
    svg_path = path.with_suffix(".svg")
    svg_path.write_text(chart(report))
    log(f"wrote {svg_path}")
    print(markdown(report))


def main(argv=None):
    args = parse_args(argv)
    if args.render is not None:
        rerender(args.render)
        return

    # The trainers run from the repository root: make paths absolute first.
    args.bumpgrad = args.bumpgrad.resolve()
    args.data = args.data.resolve() if args.data is not None else None
    if args.only != "pytorch" and not args.bumpgrad.exists():
        sys.exit(f"error: {args.bumpgrad} not found; build it (scripts/gpu.sh stage "
                 "writes .gpu/bumpgrad) or pass --bumpgrad")

    report = benchmark(args)
    report["markdown"] = markdown(report)
    # Files first: a closed stdout (| head) must not lose the results.
    json_path, svg_path = write_results(report, args.out, args.device)
    log(f"\nwrote {json_path}\nwrote {svg_path}\n")
    print(report["markdown"])


if __name__ == "__main__":
    main()
