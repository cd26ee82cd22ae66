"""asv's machine metadata in both of asv's environment modes, read back by the report."""

from __future__ import annotations

import os
import sys

import pytest
import torch

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
def test_asv_run_with_an_existing_environment_writes_the_metadata_the_report_reads(asv_project):
    """A real ``asv run -E existing`` (which sets no ASV_* variables) in a copy of this project (conftest)."""
    project, _, _ = asv_project
    written = os.listdir(project / ".asv" / "metadata")
    assert written == [f"existing-py{sys.executable.replace(os.sep, '_')}-{machine.metadata()['hostname']}.json"]
    t = tidy.load([str(project / ".asv" / "results")])
    assert set(t.torch) == {torch.__version__} and set(t.machine) == {"box"}
