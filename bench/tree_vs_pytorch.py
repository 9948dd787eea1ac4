#!/usr/bin/env python3
"""tree-lstm against the same model in PyTorch: epoch time one tree at a time and level-batched, accuracy over seeds.

    python3 bench/tree_vs_pytorch.py --bumpgrad .gpu/bumpgrad --only speed
    python3 bench/tree_vs_pytorch.py --bumpgrad .gpu/bumpgrad --device cpu --only speed
    python3 bench/tree_vs_pytorch.py --bumpgrad .gpu/bumpgrad --only accuracy --seeds 3
    python3 bench/tree_vs_pytorch.py --check-levels      # PyTorch's forward_levels against its forward

Both sides train issue 33's `tree-lstm` (embedding 300 -> binary
constituency Tree-LSTM, hidden 150 -> linear to 5 classes on every node's
h; `TreeLstm` of `bench/models.py`) with Adagrad lr 0.05 (no weight decay),
the loss of a step being the cross-entropy summed over every node of every
tree of the batch, divided by the batch's trees.

Two modes (`--only speed,accuracy`, both by default):

- `speed`: one epoch is a pass over the development split (1,101 trees of
  `data/sst/dev.txt`), training on it, in two cases: batch 1, one node at a
  time (bumpgrad `--tree-batching none`, PyTorch `TreeLstm.forward`), and
  batch 25, level by level (bumpgrad `--tree-batching levels`, PyTorch
  `TreeLstm.forward_levels`), `--epochs-speed` epochs of seed 1 each, on
  `--device` (on the CPU one thread on each side). A case's time is the
  median epoch after the first; the ratio is bumpgrad's over PyTorch's
  (targets: batch 1 at most 0.25 on the GPU and 0.35 on the CPU, levels of
  25 at most 0.5 on either).
- `accuracy`: `data/sst/train.txt`, batch 25 by levels, `--epochs` epochs,
  seeds 1..`--seeds`; the mean over seeds of the last epoch's development
  root accuracy (5 classes), binary root accuracy (non-neutral roots, by
  sign) and all-node accuracy (target: root and binary within 1 point).

How each side runs and is timed:

- bumpgrad: `bumpgrad train --model tree-lstm --data DIR --json ...`, one
  JSON line per epoch. Every step is its own shape, its batch's forest (the
  level plan) made on the host at the epoch's start. An epoch's time is its
  line's `seconds` (training only; evaluation is `eval_seconds`). For
  `speed`, DIR is a temporary directory holding `dev.txt` as `train.txt`
  (and `dev.txt` and `test.txt`, which bumpgrad reads too); for `accuracy`
  `data/sst`.
- PyTorch (a child process, `--pytorch-worker JSON`, of `--python` where
  the `python3` running this has no torch): trees parsed with
  `read_tree`, the vocabulary the distinct words of the training trees,
  sorted, ids from 1 (0 the unknown word), as bumpgrad's. The training
  trees shuffled every epoch (a generator seeded with the seed), batches of
  the given size in that order (the last one short). Each batch's inputs
  (word ids, labels and, by levels, the `plan_levels` index tensors) are
  put on the device before the clock starts, as bumpgrad's forests are
  made before its steps; the epoch's time is the training loop between two
  `cuda.synchronize()`s (on the CPU, the plain clock). The development
  split is scored after every epoch under `no_grad`, by levels in batches
  of 250, with bumpgrad's definitions (a root is called positive when
  classes 3 and 4 are likelier together than 0 and 1).

Writes `bench/results/tree-vs-pytorch-<date>-<gpu or cpu>.json` (a mode run
later the same day replaces that mode's part and keeps the other's;
`--skip-pytorch` writes `...-bumpgrad-only.json`) and prints a table.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SST = REPO_ROOT / "data" / "sst"
CONFIG = {"embed": 300, "hidden": 150, "classes": 5, "lr": 0.05, "accuracy_batch": 25}
# (name, batch, bumpgrad's --tree-batching, what PyTorch runs)
SPEED_CASES = [("batch 1, one node at a time", 1, "none", "forward"),
               ("batch 25, levels", 25, "levels", "forward_levels")]
TARGETS = {"epoch_time_vs_pytorch": {"cuda": {"none": 0.25, "levels": 0.5},
                                     "cpu": {"none": 0.35, "levels": 0.5}},
           "accuracy_within_points": 1.0}
DEV_EVAL_BATCH = 250
MODES = ("speed", "accuracy")


# --------------------------------------------------------------------------
# PyTorch (a child process: `--pytorch-worker JSON`)
# --------------------------------------------------------------------------

def pytorch_worker(spec):
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(REPO_ROOT / "bench"))
    from models import TreeLstm, plan_levels, read_tree

    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    device = torch.device(spec["device"])
    cuda = device.type == "cuda"

    def read(path):
        return [read_tree(line.strip()) for line in Path(path).read_text().splitlines() if line.strip()]

    train, dev = read(spec["train"]), read(spec["dev"])
    vocab = {w: i + 1 for i, w in enumerate(sorted({w for words, _ in train for w in words}))}

    def encode(trees):
        return [(torch.tensor([vocab.get(w, 0) for w in words], dtype=torch.long), nodes,
                 torch.tensor([label for label, *_ in nodes], dtype=torch.long)) for words, nodes in trees]

    train, dev = encode(train), encode(dev)
    model = TreeLstm(len(vocab) + 1, CONFIG["classes"], CONFIG["embed"], CONFIG["hidden"]).to(device)
    opt = torch.optim.Adagrad(model.parameters(), lr=CONFIG["lr"])
    levels = spec["forward"] == "forward_levels"

    def batch(items):
        labels = torch.cat([labels for _, _, labels in items]).to(device)
        if levels:
            inputs = plan_levels([(ids, nodes) for ids, nodes, _ in items], device)
        else:
            inputs = [(ids.to(device), nodes) for ids, nodes, _ in items]
        return inputs, labels, len(items)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def eval_batches(trees):
        out = []
        for i in range(0, len(trees), DEV_EVAL_BATCH):
            items = trees[i:i + DEV_EVAL_BATCH]
            roots = torch.tensor([len(nodes) for _, nodes, _ in items]).cumsum(0) - 1
            out.append((plan_levels([(ids, nodes) for ids, nodes, _ in items], device),
                        torch.cat([labels for _, _, labels in items]).to(device), roots.to(device)))
        return out

    def evaluate(batches, trees):
        roots_right = signs_right = non_neutral = nodes_right = 0
        with torch.no_grad():
            for plan, labels, roots in batches:
                logits = model.forward_levels(plan)
                nodes_right += int((logits.argmax(1) == labels).sum())
                root_logits, root_labels = logits[roots], labels[roots]
                roots_right += int((root_logits.argmax(1) == root_labels).sum())
                p = root_logits.softmax(1)
                positive = p[:, 3] + p[:, 4] > p[:, 0] + p[:, 1]
                keep = root_labels != 2
                signs_right += int(((positive == (root_labels > 2)) & keep).sum())
                non_neutral += int(keep.sum())
        nodes = sum(len(labels) for _, labels, _ in batches)
        return roots_right / trees, signs_right / max(non_neutral, 1), nodes_right / nodes

    dev_batches = eval_batches(dev)
    test = encode(read(spec["test"])) if spec.get("test") else []

    gen = torch.Generator().manual_seed(spec["seed"])
    size = spec["batch"]
    epochs = []
    for _ in range(spec["epochs"]):
        order = torch.randperm(len(train), generator=gen).tolist()
        batches = [batch([train[j] for j in order[i:i + size]]) for i in range(0, len(order), size)]
        model.train()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        sync()
        start = time.perf_counter()
        total = torch.zeros((), device=device)
        for inputs, labels, trees in batches:
            opt.zero_grad(set_to_none=True)
            logits = model.forward_levels(inputs) if levels else model(inputs)
            loss = F.cross_entropy(logits, labels, reduction="sum") / trees
            loss.backward()
            opt.step()
            total += loss.detach()
        sync()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() if cuda else None

        model.eval()
        start = time.perf_counter()
        root, binary, nodes = evaluate(dev_batches, len(dev))
        sync()
        epochs.append({"seconds": seconds, "eval_seconds": time.perf_counter() - start,
                       "train_loss": float(total) / len(batches), "dev_accuracy": root,
                       "binary_accuracy": binary, "node_accuracy": nodes, "steps": len(batches),
                       "max_memory_allocated_bytes": peak})
    if test:
        # The held-out split once, after the last epoch, as bumpgrad's final_test.
        root, binary, nodes = evaluate(eval_batches(test), len(test))
        epochs[-1].update({"test_root_accuracy": root, "test_binary_accuracy": binary, "test_node_accuracy": nodes})
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "device": torch.cuda.get_device_name(device) if cuda else "cpu",
                      "vocab": len(vocab) + 1, "parameters": sum(p.numel() for p in model.parameters()),
                      "epochs": epochs}))


def run_pytorch(args, spec):
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)  # PyTorch refuses to start with another cuDNN on the path
    cmd = [args.python, __file__, "--pytorch-worker", json.dumps(spec)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"PyTorch {spec} failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["command"] = " ".join(cmd[:3] + [f"'{cmd[3]}'"])
    return out


def check_levels():
    """`forward_levels` against `forward` on a tiny model in float64: the
    same logits and the same gradient of every parameter, with the plan
    made inside and beforehand, on the CPU and (where there is one) the
    GPU."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(REPO_ROOT / "bench"))
    from models import TreeLstm, plan_levels, read_tree

    lines = [
        "(3 (2 It) (4 (2 's) (3 fine)))",  # right-leaning, heights 0 to 2
        "(1 bad)",  # a lone leaf: no inner level
        "(2 (2 (1 a) (3 b)) (2 (0 c) (4 (2 d) (1 e))))",  # children of unequal heights
        "(0 (1 (2 (3 w) (4 x)) (0 y)) (2 z))",  # left-leaning
    ]
    vocab = 13
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for name in devices:
        device = torch.device(name)
        torch.manual_seed(0)
        model = TreeLstm(vocab, 5, 7, 5).double().to(device)
        trees, labels = [], []
        for line in lines:
            words, nodes = read_tree(line)
            trees.append((torch.randint(1, vocab, (len(words),), device=device), nodes))
            labels += [label for label, *_ in nodes]
        labels = torch.tensor(labels, device=device)
        params = list(model.parameters())

        def logits_and_grads(run):
            logits = run()
            loss = F.cross_entropy(logits, labels, reduction="sum") / len(trees)
            return logits.detach(), torch.autograd.grad(loss, params)

        want, want_grads = logits_and_grads(lambda: model(trees))
        plan = plan_levels(trees, device)
        for how, run in (("trees", lambda: model.forward_levels(trees)), ("plan", lambda: model.forward_levels(plan))):
            got, got_grads = logits_and_grads(run)
            assert got.shape == want.shape, f"{name} {how}: logits {tuple(got.shape)}, want {tuple(want.shape)}"
            assert torch.allclose(got, want), f"{name} {how}: logits differ by {(got - want).abs().max():.3e}"
            for (pname, _), g, w in zip(model.named_parameters(), got_grads, want_grads):
                assert torch.allclose(g, w), f"{name} {how}: grad of {pname} differs by {(g - w).abs().max():.3e}"
        print(f"check-levels {name}: {len(trees)} trees, {len(labels)} nodes: forward_levels equals forward "
              f"(logits and {len(params)} gradients)")


# --------------------------------------------------------------------------
# bumpgrad
# --------------------------------------------------------------------------

def run_bumpgrad(args, data, batch, batching, epochs, seed):
    cmd = [args.bumpgrad, "train", "--model", "tree-lstm", "--data", str(data), "--batch", str(batch),
           "--tree-batching", batching, "--optimizer", "adagrad", "--lr", str(CONFIG["lr"]),
           "--epochs", str(epochs), "--seed", str(seed), "--device", args.device]
    cmd += ["--threads", "1"] if args.device == "cpu" else []
    cmd += ["--checkpoint-every", "off", "--checkpoint-dir", "/tmp/bumpgrad-bench-tree", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"bumpgrad {' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    objects = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    lines = [o for o in objects if "epoch" in o]
    tests = [o["final_test"] for o in objects if "final_test" in o]
    final = {f"test_{k}": v for k, v in tests[-1].items()} if tests else {}
    return {"command": " ".join(cmd), "final_test": final,
            "epochs": [{"seconds": e["seconds"], "eval_seconds": e["eval_seconds"], "train_loss": e["train_loss"],
                        "dev_accuracy": e["test_accuracy"], "binary_accuracy": e["binary_accuracy"],
                        "node_accuracy": e["node_accuracy"], "steps": e["steps"],
                        "step_high_water_bytes": e["arena"]["step_high_water_bytes"]} for e in lines],
            "notes": [l.strip() for l in p.stderr.splitlines() if l.startswith(("bumpgrad:", "arena:"))]}


def with_test(run):
    """`run`'s last epoch, with the test split's figures of bumpgrad's
    final_test line where it has them."""
    return {**run["epochs"][-1], **run.get("final_test", {})}


def check_parameters(bumpgrad, pytorch):
    """Warns when the two models differ in size: the vocabularies differ
    (bumpgrad's report opens `bumpgrad: tree-lstm (N parameters), ...`)."""
    found = [re.search(r"tree-lstm \((\d+) parameters\)", n) for n in bumpgrad["notes"]]
    theirs = next((int(m.group(1)) for m in found if m), None)
    if theirs != pytorch["parameters"]:
        print(f"warning: bumpgrad's tree-lstm has {theirs} parameters, PyTorch's {pytorch['parameters']}",
              file=sys.stderr)


def epoch_seconds(run):
    times = [e["seconds"] for e in run["epochs"]]
    return statistics.median(times[1:] if len(times) > 1 else times)


# --------------------------------------------------------------------------
# The two modes
# --------------------------------------------------------------------------

def speed(args):
    # bumpgrad trains on its directory's train.txt, so a directory whose
    # train.txt is the development split makes an epoch a pass over dev.
    data = Path(tempfile.mkdtemp(prefix="bumpgrad-bench-tree-"))
    try:
        shutil.copy(SST / "dev.txt", data / "train.txt")
        shutil.copy(SST / "dev.txt", data / "dev.txt")
        shutil.copy(SST / "test.txt", data / "test.txt")
        cases = []
        for name, batch, batching, forward in SPEED_CASES:
            b = run_bumpgrad(args, data, batch, batching, args.epochs_speed, 1)
            row = {"case": name, "batch": batch, "tree_batching": batching, "pytorch_forward": forward,
                   "target": TARGETS["epoch_time_vs_pytorch"][args.device][batching],
                   "bumpgrad": b, "bumpgrad_seconds": epoch_seconds(b)}
            line = f"speed, {name}: bumpgrad {row['bumpgrad_seconds']:.3f} s/epoch"
            if not args.skip_pytorch:
                t = run_pytorch(args, {"device": args.device, "train": str(SST / "dev.txt"),
                                       "dev": str(SST / "dev.txt"), "batch": batch, "forward": forward,
                                       "epochs": args.epochs_speed, "seed": 1, "threads": threads(args)})
                row.update(pytorch=t, pytorch_seconds=epoch_seconds(t))
                check_parameters(b, t)
                row["ratio"] = row["bumpgrad_seconds"] / row["pytorch_seconds"]
                row["met"] = row["ratio"] <= row["target"]
                line += f", PyTorch {row['pytorch_seconds']:.3f} s/epoch, ratio {row['ratio']:.3f}"
            print(line, file=sys.stderr)
            cases.append(row)
    finally:
        shutil.rmtree(data)
    return {"epochs": args.epochs_speed, "seed": 1, "train": "data/sst/dev.txt (1,101 trees)",
            "bumpgrad_data_dir": "a temporary directory: train.txt and dev.txt copies of data/sst/dev.txt, "
                                 "test.txt of data/sst/test.txt",
            "cases": cases}


def accuracy(args):
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        b = run_bumpgrad(args, SST, CONFIG["accuracy_batch"], "levels", args.epochs, seed)
        row = {"seed": seed, "bumpgrad": b}
        line = f"accuracy, seed {seed}: bumpgrad {describe(b['epochs'][-1])}"
        if not args.skip_pytorch:
            t = run_pytorch(args, {"device": args.device, "train": str(SST / "train.txt"),
                                   "dev": str(SST / "dev.txt"), "test": str(SST / "test.txt"),
                                   "batch": CONFIG["accuracy_batch"],
                                   "forward": "forward_levels", "epochs": args.epochs, "seed": seed,
                                   "threads": threads(args)})
            row["pytorch"] = t
            check_parameters(b, t)
            line += f"; PyTorch {describe(t['epochs'][-1])}"
        print(line, file=sys.stderr)
        rows.append(row)
    sides = ["bumpgrad"] + ([] if args.skip_pytorch else ["pytorch"])
    summary = {}
    for side in sides:
        last = [with_test(r[side]) for r in rows]
        summary[side] = {f"{k}_mean": statistics.mean(e[k] for e in last) for k in ACCURACIES}
        summary[side].update({k: [e[k] for e in last] for k in ACCURACIES})
        summary[side]["epoch_seconds_median"] = statistics.median(epoch_seconds(r[side]) for r in rows)
    if not args.skip_pytorch:
        summary["points_apart"] = {k: 100 * (summary["bumpgrad"][f"{k}_mean"] - summary["pytorch"][f"{k}_mean"])
                                   for k in ACCURACIES}
        summary["met"] = all(abs(summary["points_apart"][k]) <= TARGETS["accuracy_within_points"]
                             for k in ("test_root_accuracy", "test_binary_accuracy"))
    return {"epochs": args.epochs, "seeds": args.seeds, "first_seed": args.first_seed, "batch": CONFIG["accuracy_batch"],
            "tree_batching": "levels", "runs": rows, "summary": summary}


ACCURACIES = ("dev_accuracy", "binary_accuracy", "node_accuracy",
              "test_root_accuracy", "test_binary_accuracy", "test_node_accuracy")


def describe(epoch):
    return (f"root {100 * epoch['dev_accuracy']:.2f}%, binary {100 * epoch['binary_accuracy']:.2f}%, "
            f"nodes {100 * epoch['node_accuracy']:.2f}%")


def threads(args):
    return 1 if args.device == "cpu" else None


# --------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------

def table(results, device):
    lines = []
    if "speed" in results:
        lines += [f"speed ({device}, an epoch over dev's 1,101 trees, median after the first)", "",
                  "| case | bumpgrad s/epoch | PyTorch s/epoch | ratio | target |", "| --- | --- | --- | --- | --- |"]
        for c in results["speed"]["cases"]:
            torch_s = f"{c['pytorch_seconds']:.3f}" if "pytorch_seconds" in c else "—"
            ratio = f"{c['ratio']:.3f} ({'met' if c['met'] else 'missed'})" if "ratio" in c else "—"
            lines.append(f"| {c['case']} | {c['bumpgrad_seconds']:.3f} | {torch_s} | {ratio} | ≤ {c['target']} |")
    if "accuracy" in results:
        a = results["accuracy"]
        lines += [""] if lines else []
        s = a["summary"]
        for split, prefix in (("dev", ""), ("test", "test_")):
            root_key = "dev_accuracy" if split == "dev" else "test_root_accuracy"
            if any(root_key not in s[side] for side in ("bumpgrad", "pytorch") if side in s):
                continue
            lines += [f"accuracy on {split} (after the last of {a['epochs']} epochs, seeds {a.get('first_seed', 1)}..{a.get('first_seed', 1) + a['seeds'] - 1})", "",
                      "| side | root by seed | root mean | binary mean | all nodes mean | s/epoch |",
                      "| --- | --- | --- | --- | --- | --- |"]
            for side in ("bumpgrad", "pytorch"):
                if side not in s:
                    continue
                roots = " / ".join(f"{100 * x:.2f}" for x in s[side][root_key])
                lines.append(f"| {side} | {roots} | {100 * s[side][root_key + '_mean']:.2f} "
                             f"| {100 * s[side][prefix + 'binary_accuracy_mean']:.2f} "
                             f"| {100 * s[side][prefix + 'node_accuracy_mean']:.2f} "
                             f"| {s[side]['epoch_seconds_median']:.3f} |")
            if "points_apart" in s:
                d = s["points_apart"]
                target = (f"target: root and binary within ±{TARGETS['accuracy_within_points']} "
                          f"({'met' if s['met'] else 'missed'})") if split == "test" else "(the issue's target is on test)"
                lines.append(f"| bumpgrad − PyTorch | | {d[root_key]:+.2f} | {d[prefix + 'binary_accuracy']:+.2f} "
                             f"| {d[prefix + 'node_accuracy']:+.2f} | {target} |")
            lines.append("")
    return "\n".join(lines)


def summarise(results):
    out = {}
    if "speed" in results:
        keep = ("batch", "tree_batching", "pytorch_forward", "bumpgrad_seconds", "pytorch_seconds", "ratio",
                "target", "met")
        out["speed"] = {c["case"]: {k: c[k] for k in keep if k in c} for c in results["speed"]["cases"]}
    if "accuracy" in results:
        out["accuracy"] = results["accuracy"]["summary"]
    return out


def device_name(device):
    if device == "cpu":
        return "cpu"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True).stdout
        return out.strip().splitlines()[0].strip().lower().replace(" ", "-")
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "cuda"


def machine():
    """What the result file records of where it ran: the CPU's model (a
    `cpu` file names no machine) and the commit measured."""
    cpu = None
    try:
        cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                    if l.startswith("model name")), None)
    except OSError:
        pass

    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"cpu": cpu, "cores": os.cpu_count(), "commit": commit and commit.strip(),
            "dirty": None if status is None else bool(status.strip())}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bumpgrad", default=str(REPO_ROOT / ".gpu" / "bumpgrad"), help="the bumpgrad binary")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="both sides' device; on cpu, one thread each")
    p.add_argument("--only", default=",".join(MODES), help="comma-separated modes: speed, accuracy")
    p.add_argument("--epochs-speed", type=int, default=3, help="epochs of each speed case")
    p.add_argument("--epochs", type=int, default=6, help="epochs of each accuracy run")
    p.add_argument("--seeds", type=int, default=3, help="accuracy: seeds 1..N on each side")
    p.add_argument("--first-seed", type=int, default=1,
                   help="accuracy: start at this seed (more seeds in a second run: --first-seed 4)")
    p.add_argument("--skip-pytorch", action="store_true", help="run bumpgrad's side only")
    p.add_argument("--python", default=sys.executable, help="the interpreter that has torch (PyTorch's side)")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results")
    p.add_argument("--check-levels", action="store_true",
                   help="check PyTorch's forward_levels against forward, and stop")
    p.add_argument("--pytorch-worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.pytorch_worker:
        return pytorch_worker(json.loads(args.pytorch_worker))
    if args.check_levels:
        return check_levels()
    modes = [m.strip() for m in args.only.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        p.error(f"--only takes {', '.join(MODES)}, comma-separated; got {args.only!r}")

    results = {}
    for mode in MODES:
        if mode in modes:
            started = datetime.datetime.now().isoformat(timespec="seconds")
            results[mode] = {"started": started, "command": " ".join(sys.argv),
                             **(speed(args) if mode == "speed" else accuracy(args))}

    name = device_name(args.device)
    stem = f"tree-vs-pytorch-{datetime.date.today()}-{name}" + ("-bumpgrad-only" if args.skip_pytorch else "")
    path = args.out / f"{stem}.json"
    # Each mode is its own invocation (see the docstring): a later one the
    # same day keeps the other mode's results in the file.
    summary = json.loads(path.read_text()) if path.exists() else {}
    versions = [r["pytorch"]["torch"] for mode in results.values()
                for r in mode.get("cases", mode.get("runs", [])) if "pytorch" in r]
    summary.update({"config": CONFIG, "targets": TARGETS, "device": args.device, "device_name": name,
                    "machine": machine()})
    if versions:
        summary["torch"] = versions[0]
    summary.setdefault("results", {}).update(results)
    summary["summary"] = summarise(summary["results"])
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=1) + "\n")
    print(table(results, name))
    print(f"\nwrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
