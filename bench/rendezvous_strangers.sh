#!/usr/bin/env bash
# Strangers against rank 0 of a real 2-rank data-parallel run (on a GPU host):
# 4 KiB of random bytes, a hello claiming 4 GiB, 200 held connections, then a
# rank 1 with the wrong token, then the real rank 1. Rank 0 must log each drop,
# stay up, refuse the wrong token and form the group with the real rank.
# Both ranks use GPU 0 by default, so on a host with one GPU the group
# forms and NCCL then refuses two ranks on one GPU; with two GPUs, set
# RANK1_GPU=1. Logs go to $OUT (a new temporary folder by default).
#
#   bench/rendezvous_strangers.sh [BINARY]
cd "$(dirname "$0")/.."
B=${1:-$( [ -x target/release/bumpgrad ] && echo target/release/bumpgrad || echo .gpu/bumpgrad )}; P=${PORT:-29611}; OUT=${OUT:-$(mktemp -d)}
export BUMPGRAD_RENDEZVOUS_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
common=(train --epochs 1 --train-limit 2000 --checkpoint-every off --rendezvous-timeout 60)
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P $B "${common[@]}" --json >$OUT/r0.json 2>$OUT/r0.err &
r0=$!
sleep 2
python3 - <<EOF
import os, socket, time
a = ('127.0.0.1', $P)
s = socket.create_connection(a); s.sendall(os.urandom(4096)); time.sleep(0.5); s.close()
s = socket.create_connection(a); s.sendall(b'\x01BGR2\xff\xff\xff\xff' + os.urandom(64)); time.sleep(0.5); s.close()
held = [socket.create_connection(a) for _ in range(200)]
time.sleep(2)
print("strangers done: random bytes, a 4 GiB hello, 200 held connections")
EOF
kill -0 $r0 && echo "rank 0 alive after the strangers"
BUMPGRAD_RENDEZVOUS_TOKEN=wrong RANK=1 WORLD_SIZE=2 LOCAL_RANK=${RANK1_GPU:-0} MASTER_ADDR=127.0.0.1 MASTER_PORT=$P $B "${common[@]}" >$OUT/wrong.err 2>&1
echo "wrong-token rank 1: status $?"; tail -2 $OUT/wrong.err
kill -0 $r0 && echo "rank 0 alive after the wrong token"
RANK=1 WORLD_SIZE=2 LOCAL_RANK=${RANK1_GPU:-0} MASTER_ADDR=127.0.0.1 MASTER_PORT=$P $B "${common[@]}" >$OUT/r1.json 2>$OUT/r1.err
echo "real rank 1: status $?"
wait $r0; echo "rank 0: status $?"
echo "--- rank 0 stderr"; head -40 $OUT/r0.err
echo "--- rank 1 stderr"; tail -8 $OUT/r1.err
