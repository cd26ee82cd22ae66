"""scripts/regime_effects.py: a runtime setting's effect as paired ratios (the setting's worker over the
default one), and each pair's own ratio under both."""


import pytest
from run_helpers import StandInWorker

from benchmarks.core.pairing import mirrored
from benchmarks.core.pairing.mirrored_worker import case_of
from scripts import regime_effects


class FakeWorker(StandInWorker):
    """A worker whose calls take ``seconds`` (the setting's worker: ``slower`` times that)."""

    def __init__(self, label, models, suite, env, settle=0):
        self.label, self.env, self.settle = label, env, settle
        self.regime = {"threads": 1, "env": env}

    def start(self, todo):
        self.todo = todo
        return [None] * len(todo)

    def ask(self, request, timeout=None):
        area, params, _ = self.todo[case_of(request)]
        base = 0.002 * (3 if params.get("model") == "rnn-width" or params.get("heads") == 64 else 1)
        return {"seconds": base * (1.2 if self.env else 1.0)}


def test_a_setting_that_slows_every_case_by_a_fifth_reads_as_1_2_and_leaves_the_pairs_ratios(monkeypatch):
    monkeypatch.setattr(regime_effects, "Worker", FakeWorker)
    monkeypatch.setattr(regime_effects, "MIN_ROUNDS", 4)
    result = regime_effects.compare("passive", 0.2, 0.0)
    assert result["env"] == mirrored.IDLE_PASSIVE and result["regimes"]["passive"]["env"] == mirrored.IDLE_PASSIVE
    assert len(result["cases"]) == 2 * len(regime_effects.PAIRS)
    for case in result["cases"]:
        assert case["ratio"] == pytest.approx(1.2) and case["low"] <= 1.2 <= case["high"]
    for pair in result["pairs"]:  # RNN over Transformer, 64 heads over 1: 3x under both regimes
        assert pair["default"] == pytest.approx(3.0) and pair["setting"] == pytest.approx(3.0)
        assert pair["change"] == pytest.approx(1.0)
    assert "C1 paper-base  ratio 3.00x by default, 3.00x with the setting" in regime_effects.show(result)


def test_an_unknown_setting_is_refused_naming_the_allowed_ones(capsys):
    with pytest.raises(SystemExit) as done:
        regime_effects.main(["--settings", "turbo"])
    assert done.value.code == 2
    assert "unknown setting 'turbo'; allowed: passive, allocator, threads-set, idle" in capsys.readouterr().err
