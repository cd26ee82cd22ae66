#!/usr/bin/env bash
# .ci/run from fresh clones of this checkout's HEAD, N times in a row (default 3), each with two CPU-bound
# processes beside it: the tests must pass on a busy machine, not only an idle one. One line per run in
# results/ci-under-load.log (exit code, seconds, pytest's closing line); each run's output beside it.
#   bash scripts/ci_under_load.sh [N]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$ROOT/results"; mkdir -p "$OUT"; LOG="$OUT/ci-under-load.log"
for i in $(seq 1 "${1:-3}"); do
    clone="$(mktemp -d)/clone"
    git clone -q "$ROOT" "$clone" || exit 2
    timeout 3600 sh -c 'while :; do :; done' & s1=$!
    timeout 3600 sh -c 'while :; do :; done' & s2=$!
    start=$(date +%s)
    (cd "$clone" && CI=true bash .ci/run) > "$OUT/ci-under-load-$i.out" 2>&1; rc=$?
    kill "$s1" "$s2"
    echo "run $i at $(git -C "$clone" rev-parse --short HEAD): exit $rc in $(( $(date +%s) - start )) s;" \
         "$(grep -E '(passed|failed)' "$OUT/ci-under-load-$i.out" | tail -1)" | tee -a "$LOG"
    rm -rf "$(dirname "$clone")"
done
