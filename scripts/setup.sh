#!/usr/bin/env bash
# Creates .venv in the repository root and installs the project with its test extra.
# torch==2.13.0 comes first: it is the tested CPU build, and a bare "torch" requirement could pull a
# multi-GB CUDA build. A GPU machine that already has a CUDA torch can skip this and `pip install -e .`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test]"
