#!/usr/bin/env python3
"""Soak benchmark: a long bumpgrad run, printing per epoch what must stay flat.

Runs `bumpgrad train --json` for many epochs and prints, per epoch, the
arena's step high-water, the device's free memory (GPU runs) and the
process's resident memory, then whether each stayed flat from epoch 2 on
(epoch 1 includes one-time growth: the first step's host buffers, the
libraries' lazy loading). Not a CI test: 100 GPU epochs take a few minutes,
20 CPU epochs on a subset a minute.

    python3 bench/soak.py --device cuda --epochs 100              # on the GPU machine
    python3 bench/soak.py --device cpu --epochs 20 --train-limit 6000

Exit status 1 when the step high-water or the device's free memory moved at
all, or resident memory still grew in the last quarter of the run.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bumpgrad", default=None, help="binary (default: .gpu/bumpgrad, else target/release/bumpgrad)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--train-limit", type=int, default=None)
    ap.add_argument("--out", default=None, help="also write the per-epoch JSON lines here")
    args = ap.parse_args()
    binary = args.bumpgrad or next(
        (str(p) for p in (REPO / ".gpu/bumpgrad", REPO / "target/release/bumpgrad") if p.exists()), None
    )
    if binary is None:
        print("no bumpgrad binary: run `cargo build --release` (or scripts/gpu.sh stage)", file=sys.stderr)
        return 2
    cmd = [binary, "train", "--device", args.device, "--epochs", str(args.epochs), "--json",
           "--checkpoint-every", "off"]
    if args.train_limit:
        cmd += ["--train-limit", str(args.train_limit)]
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rows = []
    out = open(args.out, "w") if args.out else None
    print(f"{'epoch':>5} {'s':>7} {'test acc':>8} {'step high-water':>16} {'device free':>16} {'resident':>14}")
    for line in proc.stdout:
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        rows.append(r)
        if out:
            out.write(line)
        print(f"{r['epoch']:>5} {r['seconds']:>7.3f} {100 * r['test_accuracy']:>7.2f}% "
              f"{r['arena']['step_high_water_bytes']:>16} {str(r.get('device_free_bytes', '-')):>16} "
              f"{str(r.get('resident_bytes', '-')):>14}", flush=True)
    if proc.wait() != 0 or not rows:
        print(f"bumpgrad exited with {proc.returncode}", file=sys.stderr)
        return 1
    # The arena's figures must not move at all. Resident memory may settle
    # once (the allocator's first pages for per-epoch reporting); what counts
    # as a leak is growth that continues into the last quarter of the run.
    moved = []
    quarter = rows[len(rows) * 3 // 4:]
    for name, get, exact in [("step high-water", lambda r: r["arena"]["step_high_water_bytes"], True),
                             ("device free bytes", lambda r: r.get("device_free_bytes"), True),
                             ("resident bytes", lambda r: r.get("resident_bytes"), False)]:
        values = [get(r) for r in rows[1:]] or [get(rows[0])]
        if values[0] is None:
            continue
        spread = max(values) - min(values)
        changes = [r["epoch"] for a, r in zip(rows[1:], rows[2:]) if get(r) != get(a)]
        late = [get(r) for r in quarter]
        flat = spread == 0 if exact else max(late) == min(late)
        print(f"{name}: epoch 2 {values[0]}, epoch {rows[-1]['epoch']} {values[-1]}, spread {spread}"
              + (f", last change at epoch {changes[-1]}" if changes else "")
              + ("" if flat else "  <- moved"))
        if not flat:
            moved.append(name)
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
