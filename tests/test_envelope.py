"""One envelope for every saved record (gate, pairs, history, the scripts' records): written whole, over a record of
the same kind only, and read back with when it was made."""

import json

import pytest

from benchmarks.core import envelope
from benchmarks.core.records import regime
from reports import measured


def test_a_record_carries_the_envelope_then_its_own_fields(tmp_path):
    path = tmp_path / "r.json"
    saved = envelope.save(str(path), "regime", "abc123", regime=regime(), results=[1, 2])
    assert json.loads(path.read_text()) == saved
    assert list(saved)[:5] == list(envelope.FIELDS) and saved["results"] == [1, 2]
    assert envelope.problem(saved) is None and saved["generated"].endswith("+00:00")
    assert set(saved["machine"]) == set(envelope.MACHINE_FACTS) and saved["regime"]["threads"] >= 1


def test_the_scripts_records_are_in_the_same_envelope(tmp_path):
    path = tmp_path / "r.json"
    measured.save(str(path), "regression-check", "abc123", benchmark="x", factor=1.1)
    saved = json.loads(path.read_text())
    assert envelope.problem(saved) is None and saved["regime"] is None and saved["factor"] == 1.1


def test_a_record_of_another_kind_or_an_envelope_field_is_refused(tmp_path):
    path = tmp_path / "r.json"
    envelope.save(str(path), "gate", "abc", regime=None, cases=[])
    with pytest.raises(ValueError, match="r.json"):
        envelope.save(str(path), "pairs", "abc", regime=None, pairs=[])
    assert json.loads(path.read_text())["kind"] == "gate"  # untouched
    with pytest.raises(ValueError, match=r"fields \['machine'\] are the envelope's"):
        envelope.save(str(tmp_path / "s.json"), "gate", "abc", regime=None, machine={})


def test_a_record_without_the_envelope_says_what_it_lacks():
    assert envelope.problem({"kind": "gate", "date": "2026-12-04T08:00:00+00:00"}) == \
        "no generated, commit, machine, regime"
    assert envelope.when({"date": "2026-12-04T08:00:00+00:00"}) == "2026-12-04T08:00:00+00:00"
    assert envelope.when({"generated": "2026-12-05T01:00:00+00:00", "date": "x"}).startswith("2026-12-05")
