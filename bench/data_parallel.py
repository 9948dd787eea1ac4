#!/usr/bin/env python3
"""Data-parallel bumpgrad on one host's GPUs, in one command.

Runs the staged binary (default .gpu/bumpgrad; see scripts/gpu.sh stage) and
writes one JSON result plus a markdown summary:

  throughput   for each per-GPU batch: 1 GPU plain, 1 GPU through the
               data-parallel path (--gpus 1) and --gpus 2, interleaved and
               repeated; seconds per epoch = median of epochs 2..E of rank 0.
               Throughput ratio = images/s on 2 GPUs / on 1 GPU (the same
               60,000 images an epoch, so t(1 GPU) / t(2 GPUs)). Target >= 1.8.
  buckets      --gpus 2 at batch 100 with several --bucket-kib.
  memory       --gpus 2 for --long-epochs epochs: each rank's device free
               bytes per epoch (one distinct value = flat).
  kill         --gpus 2, rank 1 killed with SIGKILL during training: how long
               until the launcher exits, its status and last lines.
  kill_no_launcher
               the same with the two ranks started by hand, torchrun style
               (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): rank 0 must end
               by itself.
  rendezvous   rank 0 of 2 started alone with --rendezvous-timeout 5.
  interrupt    SIGINT to the launcher mid-run: every rank stops at the same
               step, rank 0 writes a checkpoint, status 130; then --resume.

    python3 bench/data_parallel.py --out DIR
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(cmd, timeout, env=None):
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return p, time.monotonic() - t0


def epochs_of(stdout):
    out = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def median_epoch_seconds(epochs, rank=0):
    mine = [e for e in epochs if e.get("rank", 0) == rank]
    later = [e["seconds"] for e in mine[1:]] or [e["seconds"] for e in mine]
    return statistics.median(later) if later else None


def train(binary, args, timeout=150):
    cmd = [binary, "train", "--device", "cuda", "--json", "--checkpoint-every", "off", *args]
    p, wall = run(cmd, timeout)
    epochs = epochs_of(p.stdout)
    return {
        "cmd": " ".join(cmd),
        "status": p.returncode,
        "wall_s": round(wall, 2),
        "seconds_per_epoch": median_epoch_seconds(epochs),
        "losses": [e["train_loss"] for e in epochs if e.get("rank", 0) == 0],
        "accuracy": [e["test_accuracy"] for e in epochs if e.get("rank", 0) == 0][-1:] or None,
        "stderr_tail": p.stderr.strip().splitlines()[-6:],
        "epochs": epochs,
    }


def throughput(binary, batches, epochs, repeats, kibs):
    out = {}
    for batch in batches:
        runs = {"plain": [], "gpus1": [], "gpus2": []}
        runs.update({f"gpus2_bucket{k}": [] for k in kibs})
        for _ in range(repeats):
            base = ["--epochs", str(epochs), "--batch", str(batch)]
            runs["plain"].append(train(binary, base))
            runs["gpus1"].append(train(binary, base + ["--gpus", "1"]))
            runs["gpus2"].append(train(binary, base + ["--gpus", "2"]))
            for k in kibs:
                runs[f"gpus2_bucket{k}"].append(train(binary, base + ["--gpus", "2", "--bucket-kib", str(k)]))
        med = {k: statistics.median([r["seconds_per_epoch"] for r in v if r["seconds_per_epoch"]] or [float("nan")])
               for k, v in runs.items()}
        out[str(batch)] = {
            "median_seconds_per_epoch": med,
            "throughput_ratio_2_vs_1": med["plain"] / med["gpus2"],
            "throughput_ratio_by_bucket_kib": {k: med["plain"] / med[f"gpus2_bucket{k}"] for k in kibs},
            "gpus1_vs_plain": med["gpus1"] / med["plain"],
            "gpus1_losses_equal_plain": all(a["losses"] == b["losses"] for a, b in zip(runs["plain"], runs["gpus1"])),
            "runs": {k: [{kk: vv for kk, vv in r.items() if kk != "epochs"} for r in v] for k, v in runs.items()},
        }
        print(f"batch {batch}: {med} ratio {out[str(batch)]['throughput_ratio_2_vs_1']:.3f}", flush=True)
    return out


def buckets(binary, kibs, epochs):
    out = {}
    for kib in kibs:
        r = train(binary, ["--epochs", str(epochs), "--batch", "100", "--gpus", "2", "--bucket-kib", str(kib)])
        out[str(kib)] = {"seconds_per_epoch": r["seconds_per_epoch"], "status": r["status"], "losses": r["losses"]}
        print(f"bucket {kib} KiB: {r['seconds_per_epoch']}", flush=True)
    return out


def memory(binary, epochs):
    r = train(binary, ["--epochs", str(epochs), "--batch", "100", "--gpus", "2"], timeout=200)
    per_rank = {}
    for e in r["epochs"]:
        per_rank.setdefault(e["rank"], []).append(e)
    summary = {}
    for rank, es in sorted(per_rank.items()):
        free = [e["device_free_bytes"] for e in es]
        summary[str(rank)] = {
            "epochs": len(es),
            "distinct_device_free_bytes": sorted(set(free)),
            "first_step_free": es[0].get("device_free_bytes_first_step"),
            "step_high_water": sorted({e["arena"]["step_high_water_bytes"] for e in es}),
            "resident_first_last": [es[0].get("resident_bytes"), es[-1].get("resident_bytes")],
            "final_accuracy": es[-1]["test_accuracy"],
            "seconds_per_epoch_median": statistics.median(e["seconds"] for e in es[1:]) if len(es) > 1 else None,
        }
    print("memory:", json.dumps(summary), flush=True)
    return {"status": r["status"], "cmd": r["cmd"], "ranks": summary, "stderr_tail": r["stderr_tail"]}


def rank_pids(launcher_pid):
    pids = {}
    try:
        children = Path(f"/proc/{launcher_pid}/task/{launcher_pid}/children").read_text().split()
    except OSError:
        return pids
    for pid in children:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for kv in env:
            if kv.startswith(b"BUMPGRAD_RANK="):
                pids[int(kv.split(b"=", 1)[1])] = int(pid)
    return pids


def wait_for_epochs(proc, n, timeout):
    """Reads proc's stdout until rank 0 reported n epochs."""
    seen, t0 = 0, time.monotonic()
    while seen < n and time.monotonic() - t0 < timeout:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("{") and '"rank":0' in line.replace(" ", ""):
            seen += 1
    return seen


def finish(proc, timeout):
    """Waits for proc; one still running after `timeout` s is killed and
    reported as hung. Returns (status, stderr)."""
    try:
        _, err = proc.communicate(timeout=timeout)
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return f"hung (killed after {timeout} s)", err


def kill_rank(binary):
    cmd = [binary, "train", "--device", "cuda", "--json", "--checkpoint-every", "off", "--epochs", "200", "--gpus", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = wait_for_epochs(proc, 2, 120)
    pids = rank_pids(proc.pid)
    t0 = time.monotonic()
    if 1 in pids:
        os.kill(pids[1], signal.SIGKILL)
    status, err = finish(proc, 120)
    res = {"epochs_before_kill": seen, "rank_pids": pids, "seconds_to_exit": round(time.monotonic() - t0, 2),
           "status": status, "stderr_tail": err.strip().splitlines()[-6:]}
    print("kill:", json.dumps(res), flush=True)
    return res


def manual_ranks(binary, extra, world=2, only=None, timeout_s=None):
    port = 29500 + os.getpid() % 1000
    procs = []
    for rank in range(world):
        if only is not None and rank not in only:
            continue
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        cmd = [binary, "train", "--device", "cuda", "--json", "--checkpoint-every", "off", *extra]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    return procs


def kill_no_launcher(binary):
    procs = manual_ranks(binary, ["--epochs", "200"])
    seen = wait_for_epochs(procs[0], 2, 120)
    t0 = time.monotonic()
    procs[1].kill()
    status, err = finish(procs[0], 120)
    procs[1].communicate()
    res = {"epochs_before_kill": seen, "seconds_to_exit": round(time.monotonic() - t0, 2), "status": status,
           "stderr_tail": err.strip().splitlines()[-4:]}
    print("kill_no_launcher:", json.dumps(res), flush=True)
    return res


def rendezvous_alone(binary):
    t0 = time.monotonic()
    procs = manual_ranks(binary, ["--epochs", "1", "--rendezvous-timeout", "5"], only=[0])
    status, err = finish(procs[0], 60)
    res = {"seconds": round(time.monotonic() - t0, 2), "status": status, "stderr_tail": err.strip().splitlines()[-3:]}
    print("rendezvous:", json.dumps(res), flush=True)
    return res


def interrupt(binary):
    d = tempfile.mkdtemp(prefix="bumpgrad-dp-")
    cmd = [binary, "train", "--device", "cuda", "--json", "--epochs", "30", "--gpus", "2", "--checkpoint-dir", d,
           "--checkpoint-every", "off"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = wait_for_epochs(proc, 2, 120)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    status, err = finish(proc, 120)
    files = sorted(os.listdir(d))
    resumed, _ = run([binary, "train", "--device", "cuda", "--json", "--epochs", "4", "--gpus", "2", "--resume", d,
                      "--checkpoint-every", "off"], 300)
    res = {"epochs_before_signal": seen, "seconds_to_exit": round(time.monotonic() - t0, 2), "status": status,
           "checkpoints": files, "stderr_tail": err.strip().splitlines()[-5:],
           "resume_status": resumed.returncode, "resume_stderr_tail": resumed.stderr.strip().splitlines()[-4:],
           "resume_epochs": [(e["rank"], e["epoch"], e["test_accuracy"]) for e in epochs_of(resumed.stdout)]}
    print("interrupt:", json.dumps(res), flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(REPO / ".gpu" / "bumpgrad"))
    ap.add_argument("--out", default=".")
    ap.add_argument("--batches", default="100,1000")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--long-epochs", type=int, default=100)
    ap.add_argument("--bucket-kibs", default="", help="extra --bucket-kib values to time in the throughput runs")
    ap.add_argument("--only", default="throughput,buckets,memory,kill,kill_no_launcher,rendezvous,interrupt")
    a = ap.parse_args()
    parts = a.only.split(",")
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "binary": a.binary}
    commit = REPO / ".gpu" / "commit"
    if commit.exists():
        result["commit"] = commit.read_text().strip()
    def smi(*args):
        try:
            return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True).stdout.strip().splitlines()
        except OSError as e:  # no driver here: the runs will say so too
            return [f"nvidia-smi: {e}"]

    result["gpus"] = smi("--query-gpu=name,driver_version", "--format=csv,noheader")
    result["topology"] = smi("topo", "-m")[:4]
    steps = {
        "throughput": lambda: throughput(a.binary, [int(b) for b in a.batches.split(",")], a.epochs, a.repeats,
                                         [int(k) for k in a.bucket_kibs.split(",") if k]),
        "buckets": lambda: buckets(a.binary, [4, 32, 128, 1024], a.epochs),
        "memory": lambda: memory(a.binary, a.long_epochs),
        "kill": lambda: kill_rank(a.binary),
        "kill_no_launcher": lambda: kill_no_launcher(a.binary),
        "rendezvous": lambda: rendezvous_alone(a.binary),
        "interrupt": lambda: interrupt(a.binary),
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in parts:
        try:
            result[name] = steps[name]()
        except Exception as e:  # one failing part must not lose the others
            result[name] = {"error": repr(e)}
            print(f"{name}: {e!r}", flush=True)
        (out / "data_parallel.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {out / 'data_parallel.json'}")


if __name__ == "__main__":
    sys.exit(main())
