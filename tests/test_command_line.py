"""One command, ``attention-bench``: every job a subcommand, each flag one meaning wherever it appears, the same
exit codes everywhere, results on stdout and the rest on stderr."""

from __future__ import annotations

import argparse
import importlib.util
import io
import os

import pytest
from run_helpers import MEASURE_ONLY, in_process, measured_run

from attention_bench import cli, options
from reports import columns

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")


def subparsers() -> dict[str, argparse.ArgumentParser]:
    top = cli.parser()
    action = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def script_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each measurement script's parser (``parser()``), by the script's file name."""
    found = {}
    for name in sorted(os.listdir(SCRIPTS)):
        if name.endswith(".py") and name != "__init__.py":
            spec = importlib.util.spec_from_file_location(f"script_{name[:-3]}", os.path.join(SCRIPTS, name))
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            found[name] = module.parser()
    return found


def meaning(action: argparse.Action) -> tuple:
    """What a flag is: where it lands, how it parses and checks its value, its default, its choices, its help."""
    return (type(action).__name__, action.dest, action.type, repr(action.default), tuple(action.choices or ()),
            action.nargs, action.metavar, action.help)


def test_the_help_lists_every_command_and_the_exit_codes(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "usage: attention-bench" in out
    for name in ("run", "report", "compare", "gate", "pairs", "profile", "predict", "csv", "claims", "measured",
                 "site", "reproduce", "ranks"):
        assert name in cli.COMMANDS and f"\n    {name}" in out, name
    for code in ("0 ", "1 ", "2 ", "130"):
        assert f"\n  {code}" in out


def test_each_flag_has_one_meaning_in_every_command_and_script_that_takes_it():
    seen: dict[str, dict[tuple, list[str]]] = {}
    parsers = {**subparsers(), **script_parsers()}
    assert len(parsers) == len(cli.COMMANDS) + len([n for n in os.listdir(SCRIPTS) if n.endswith(".py")]) - 1
    for name, parser in parsers.items():
        for action in parser._actions:
            for flag in action.option_strings:
                seen.setdefault(flag, {}).setdefault(meaning(action), []).append(name)
    shared = {flag: by for flag, by in seen.items() if sum(map(len, by.values())) > 1}
    assert {"--grid", "--area", "--param", "--device", "--out", "--report", "--record", "--machine", "--budget",
            "--min-run-time", "--threads", "--mirrored-rounds", "--no-progress", "--quiet"} <= set(shared)
    differing = {flag: {m[1:4]: names for m, names in by.items()} for flag, by in shared.items() if len(by) > 1}
    assert not differing, differing
    for flag, by in shared.items():  # a shared flag is the one options.OPTIONS defines
        if flag in options.OPTIONS:
            assert next(iter(by))[-1] == options.OPTIONS[flag]["help"], flag


def test_every_command_documents_the_exit_codes():
    for name, parser in subparsers().items():
        assert "130  interrupted" in parser.format_help(), name


def test_bad_input_is_exit_2_and_ctrl_c_is_130(tmp_path, capsys, monkeypatch):
    code, err = in_process(capsys, "run", "--grid", "huge")
    assert code == 2 and "argument --grid: invalid choice: 'huge'" in err
    code, err = in_process(capsys, *MEASURE_ONLY, "--grid", "quick", "--param", "colour=red", "--out",
                           str(tmp_path / "run"))
    assert code == 2 and "no axis 'colour'" in err and not os.path.exists(tmp_path / "run" / "cases")

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "claims", ("", lambda p: None, interrupted))
    code, err = in_process(capsys, "claims")
    assert code == 130 and "interrupted" in err


def test_param_restricts_the_run_to_the_cases_with_that_value(tmp_path, capsys):
    code, err = in_process(capsys, *MEASURE_ONLY, "--grid", "quick", "--area", "attention", "--device", "cpu",
                           "--param", "backend=sdpa", "--param", "seq_len=128", "--min-run-time", "0.01",
                           "--rounds", "1", "--out", str(tmp_path / "run"), "--no-progress")
    assert code == 0, err
    names = sorted(os.listdir(tmp_path / "run" / "cases"))
    assert names and all("backend=sdpa" in n and "seq_len=128" in n for n in names), names
    assert len(names) == 2  # causal False and True: the quick grid's other axes left free


def test_quiet_passes_errors_only():
    stream = io.StringIO()
    quiet = cli.ErrorsOnly(stream)
    quiet.write("note: replaced the report\nwarning: a case failed\nerr")
    quiet.write("or: no case was measured\nprogress 10%")
    assert stream.getvalue() == "error: no case was measured\n"


def test_results_go_to_stdout_and_notes_to_stderr(tmp_path, fake_peaks, capsys):
    run = measured_run(tmp_path / "run")
    assert cli.main(["report", run, "--report", str(tmp_path / "r")]) == 0
    said = capsys.readouterr()
    assert said.out == os.path.abspath(tmp_path / "r" / "index.html") + "\n" and "index.html" not in said.err
    assert cli.main(["report", run, "--report", str(tmp_path / "r"), "--quiet"]) == 0  # replaces it: a note, unsaid
    said = capsys.readouterr()
    assert said.out == os.path.abspath(tmp_path / "r" / "index.html") + "\n" and said.err == ""
    assert cli.main(["csv", run]) == 0  # without --csv, the table on stdout
    assert capsys.readouterr().out.startswith(",".join(columns.COLUMNS) + "\n")
