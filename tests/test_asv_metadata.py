"""Where asv's machine metadata is written in asv's own virtualenvs (in an ``existing`` environment, and read back by
the report: test_history_site, whose asv project it is written in)."""

from __future__ import annotations

from benchmarks.core.hardware import machine


def test_asv_metadata_path_in_asvs_own_virtualenvs(monkeypatch, tmp_path):
    (tmp_path / "asv.conf.json").write_text('{"version": 1, // a comment, as asv allows\n"results_dir": "out/res"}')
    monkeypatch.setenv("ASV_CONF_DIR", str(tmp_path))
    monkeypatch.setenv("ASV_ENV_NAME", "virtualenv-py3.11-torch2.13.0")
    path = machine.asv_metadata_path()
    assert path.startswith(str(tmp_path / "out" / "metadata" / "virtualenv-py3.11-torch2.13.0-"))
