#!/usr/bin/env bash
# The checks that need a GPU, as one short script for a machine with one (a few minutes on one GPU):
# the CUDA tests, the head-parallel cases over NCCL (1 rank; 2 ranks on one GPU must be a clear error),
# the quick grid on the GPU (with the performance model's constants measured there, machine.json), a report
# built from them (predicted against measured on the GPU too), the GPU cases priced from the H200's datasheet,
# and our speed against torch's modules on the GPU. It uses the python that holds a CUDA torch
# (PYTHON, default python3) from the repository root, and writes its log, the run folder and the
# report into OUT (default results/device-checks), with the run folder also packed whole
# (OUT/run-folder.tar.gz: records, machine.json). Every step runs even if one before it failed; the
# exit code is the number of steps that failed.
#
#     bash scripts/device_checks.sh            # or: OUT=/some/dir PYTHON=.venv/bin/python MACHINE=h200 bash ...
set -u
OUT=${OUT:-results/device-checks}
PY=${PYTHON:-python3}
NAME=(); [ -n "${MACHINE:-}" ] && NAME=(--machine "$MACHINE")   # the machine's label in reports (default: hostname)
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$(pwd)
mkdir -p "$OUT"
RUN=$OUT/run
failed=0

step() {  # step NAME EXPECTED-EXIT COMMAND...: run it, say whether it ended as expected
    local name=$1 expected=$2
    shift 2
    echo "== $name: $*"
    local start=$SECONDS
    "$@"
    local code=$?
    if { [ "$expected" = 0 ] && [ $code = 0 ]; } || { [ "$expected" = nonzero ] && [ $code != 0 ]; }; then
        echo "== $name: ok (exit $code, $((SECONDS - start)) s)"
    else
        echo "== $name: FAILED (exit $code, expected $expected, $((SECONDS - start)) s)"
        failed=$((failed + 1))
    fi
}

{
    step machine 0 "$PY" -c "import torch; print(torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name())"
    # one file in one process: pyproject's addopts (two pytest-xdist workers) left out, xdist installed or not
    step cuda-tests 0 "$PY" -m pytest -q -p no:cacheprovider -o addopts="" tests/test_devices.py
    step nccl-1-rank 0 "$PY" -m torch.distributed.run --nproc_per_node=1 -m attention_bench ranks --grid quick \
        --backend nccl --out "$RUN" --min-run-time 0.1 "${NAME[@]}"
    gpus=$("$PY" -c "import torch; print(torch.cuda.device_count())")
    if [ "${gpus:-0}" -ge 2 ]; then
        step nccl-2-ranks 0 "$PY" -m torch.distributed.run --nproc_per_node=2 -m attention_bench ranks --grid quick \
            --backend nccl --out "$RUN" --min-run-time 0.1
    else  # NCCL refuses two ranks on one GPU: the suite must say so before anything runs
        step nccl-2-ranks-one-gpu nonzero "$PY" -m torch.distributed.run --nproc_per_node=2 -m attention_bench ranks \
            --grid quick --backend nccl --out "$RUN"
    fi
    step quick-grid-cuda 0 "$PY" -m attention_bench run --no-report --no-profile --pairs-budget 0 --grid quick \
        --device cuda --out "$RUN" --no-progress "${NAME[@]}"
    step report 0 "$PY" -m attention_bench report "$RUN" --report "$OUT/report"
    step predict-from-datasheet 0 "$PY" -m attention_bench predict docs/machines/h200.json "$RUN" --dtype float32 \
        --csv "$OUT/predicted-h200-datasheet.csv"
    step compare-with-torch-cuda 0 "$PY" scripts/compare_with_torch.py --device cuda --mirrored-rounds 5 \
        --record "$OUT/compare-with-torch-cuda.json"
    # the whole run folder (machine.json with the GPU's constants, every case record, the profiles) as one file,
    # to keep in docs/measured: the performance model is then checked against a real GPU offline
    step keep-run-folder 0 tar -czf "$OUT/run-folder.tar.gz" -C "$OUT" run
    echo "== $failed step(s) failed"
} 2>&1 | tee "$OUT/log.txt"
exit "$(tail -n 1 "$OUT/log.txt" | awk '{print $2}')"
