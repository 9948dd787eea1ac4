#!/usr/bin/env bash
# GPU runs with and without --deterministic, on one binary: whether runs of
# one seed repeat (counts of distinct epoch-1 losses), and the cost in
# s/epoch (full MNIST, graph on, median of epochs 2-4, rounds interleaved).
#
#   bench/deterministic.sh [BINARY]     default: target/release/bumpgrad, else .gpu/bumpgrad
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-$( [ -x target/release/bumpgrad ] && echo target/release/bumpgrad || echo .gpu/bumpgrad )}
ck=$(mktemp -d)
trap 'rm -rf "$ck"' EXIT
small=(train --device cuda --train-limit 5050 --test-limit 2000 --epochs 1 --poison-step --checkpoint-every off --checkpoint-dir "$ck")
first_loss() { "$bin" "$@" --json 2>/dev/null | python3 -c "import json,sys; r=json.loads(sys.stdin.readline()); print(repr(r['train_loss']), r['test_accuracy'])"; }
for det in "" --deterministic; do
    for graph in off on; do
        echo "repeats, graph $graph ${det:-(default algorithms)}: count, epoch-1 loss, accuracy"
        for _ in $(seq 8); do first_loss "${small[@]}" --graph "$graph" $det; done | sort | uniq -c
    done
done
echo "speed: s/epoch, median of epochs 2-4, full MNIST, graph on"
for batch in 100 1000; do
    for round in 1 2 3; do
        for det in "" --deterministic; do
            "$bin" train --device cuda --epochs 4 --batch "$batch" --checkpoint-every off --checkpoint-dir "$ck" --json $det 2>/dev/null |
                python3 -c "
import json, statistics, sys
r = [json.loads(l) for l in sys.stdin]
print('batch $batch round $round ${det:-default}', round(statistics.median(x['seconds'] for x in r[1:]), 5),
      'step high-water', r[0]['arena']['step_high_water_bytes'], 'accuracy', r[-1]['test_accuracy'])"
        done
    done
done
