"""asv's machine metadata in both of asv's environment modes, read back by the report."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from run_helpers import copy_project

from benchmarks.core.hardware import machine
from reports import tidy

# -- asv's machine metadata in both environment modes -------------------------------------

def test_asv_metadata_path_in_asvs_own_virtualenvs(monkeypatch, tmp_path):
    (tmp_path / "asv.conf.json").write_text('{"version": 1, // a comment, as asv allows\n"results_dir": "out/res"}')
    monkeypatch.setenv("ASV_CONF_DIR", str(tmp_path))
    monkeypatch.setenv("ASV_ENV_NAME", "virtualenv-py3.11-torch2.13.0")
    path = machine.asv_metadata_path()
    assert path.startswith(str(tmp_path / "out" / "metadata" / "virtualenv-py3.11-torch2.13.0-"))


@pytest.mark.slow
def test_asv_run_with_an_existing_environment_writes_the_metadata_the_report_reads(tmp_path):
    """A real ``asv run -E existing`` (which sets no ASV_* variables) in a copy of this project."""
    project, home = tmp_path / "project", tmp_path / "home"
    copy_project(project)
    git = ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "copy"], ["branch", "-M", "main"]):
        subprocess.run(git + cmd, cwd=project, check=True, capture_output=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True).stdout.strip()
    env = {**os.environ, "HOME": str(home), "ATTENTION_BENCH_GRID": "quick"}
    env = {k: v for k, v in env.items() if not k.startswith("ASV_")}
    asv = [sys.executable, "-m", "asv"]
    subprocess.run(asv + ["machine", "--yes", "--machine", "box"], cwd=project, env=env, check=True,
                   capture_output=True)
    done = subprocess.run(asv + ["run", "-E", f"existing:{sys.executable}", "--quick", "--machine", "box",
                                 "--bench", "SelfAttentionVsRecurrentLayer.track_matmul_flops",
                                 "--set-commit-hash", sha],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    written = os.listdir(project / ".asv" / "metadata")
    assert written == [f"existing-py{sys.executable.replace(os.sep, '_')}-{machine.metadata()['hostname']}.json"]
    t = tidy.load([str(project / ".asv" / "results")])
    assert set(t.torch) == {torch.__version__} and set(t.machine) == {"box"}
