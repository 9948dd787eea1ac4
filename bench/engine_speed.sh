#!/usr/bin/env bash
# s/epoch of two bumpgrad binaries side by side, the MNIST CNN at batch 100
# and 1000: before and after a change to the engine ("nothing moves").
#
#   bench/engine_speed.sh OLD_BINARY NEW_BINARY [cuda|cpu] [rounds]
#
# Each round runs OLD then NEW for 3 epochs at each batch; an epoch's
# training seconds come from --json. Prints the median of epochs 2 and 3
# over all rounds for each binary, and NEW/OLD.
set -euo pipefail
old=$1 new=$2 device=${3:-cuda} rounds=${4:-3}
out=$(mktemp -d)
for batch in 100 1000; do
    for round in $(seq "$rounds"); do
        for which in old new; do
            bin=${!which}
            "$bin" train --device "$device" --epochs 3 --batch "$batch" --checkpoint-every off --json \
                >"$out/$which-$batch-$round.json" 2>/dev/null
        done
    done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print(f"{'batch':>6} {'old s/epoch':>12} {'new s/epoch':>12} {'new/old':>8}")
for batch in (100, 1000):
    med = {}
    for which in ("old", "new"):
        secs = []
        for r in range(1, rounds + 1):
            lines = [json.loads(l) for l in open(f"{out}/{which}-{batch}-{r}.json") if l.startswith("{")]
            secs += [e["seconds"] for e in lines if e["epoch"] >= 2]
        med[which] = statistics.median(secs)
    print(f"{batch:>6} {med['old']:>12.4f} {med['new']:>12.4f} {med['new']/med['old']:>8.3f}")
PY
