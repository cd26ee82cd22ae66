#!/usr/bin/env bash
# Creates .venv in the repository root and installs the project with its test extra.
# torch==2.13.0 is pinned in the same install: it is the tested CPU build, and a bare "torch" requirement could
# pull a multi-GB CUDA build. A GPU machine that already has a CUDA torch can skip this and `pip install -e .`.
#   --history   also fetch the JavaScript asv's history site loads (npm ci in reports/history_js), so that
#               `attention-bench site` publishes a site that opens offline
#   --browser   --history, and Debian's chromium (for the browser tests) if it is not on PATH
# What comes from Debian and npm is fetched beside pip's install, not after it.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
history=""; [ "${1:-}" = "--history" ] || [ "${1:-}" = "--browser" ] && history=1
debian=()
[ -n "$history" ] && ! command -v npm >/dev/null && debian+=(npm)
[ "${1:-}" = "--browser" ] && ! command -v chromium >/dev/null && debian+=(chromium)
(
    if [ ${#debian[@]} -gt 0 ]; then
        $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${debian[@]}" >/dev/null
    fi
    if [ -n "$history" ]; then
        cd reports/history_js && npm ci --no-audit --no-fund --omit-lockfile-registry-resolved --loglevel=error
    fi
) &
fetched=$!
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0" -e ".[test]"
# the project's modules compiled once, as pip compiles what it installs: where PYTHONDONTWRITEBYTECODE is set,
# every process would compile them again on import (0.2 s of each command's start; the tests start about 100)
.venv/bin/python -m compileall -q attention_bench benchmarks reports transformer scripts >/dev/null
wait "$fetched"
