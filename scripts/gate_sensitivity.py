"""How small a slowdown the regression gate, and asv, see on this machine, and how often they cry wolf.

In a throw-away clone of this repository it commits, on top of HEAD, a no-change control (a comment in
equation (1)'s module) and one commit per slowdown fraction x that makes equation (1) spin for x times
each real call's elapsed time after it (so the injected work scales with the machine's speed). Then, for
each trial and each commit, back to back: the gate (``attention-bench gate``) on equation (1)'s
forward cases, and ``asv continuous`` with each ``--asv`` setting on the same cases
(``ScaledDotProductAttention.time_forward``, in asv's own virtualenvs), both against the clone's HEAD.
Each counts the CPU cases flagged slower: the detection rate (flagged / cases) for each slowdown, the
false-alarm rate for the control.

    .venv/bin/python scripts/gate_sensitivity.py [--slowdowns 0.05,0.1,0.2] [--trials 3] \
        [--asv "--factor 1.05 --interleave-rounds -a rounds=4"] [--record results/gate/sensitivity.json]

Needs a clean commit to clone: run it after committing. ``attention-bench measured <record>`` renders it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from attention_bench import options  # noqa: E402
from benchmarks import cases  # noqa: E402
from benchmarks.core import guards, records  # noqa: E402
from reports import measured  # noqa: E402
from scripts.check_regression_detection import BENCH, parse_row  # noqa: E402

#: asv's own noise controls, at the setting that did best in its own measurement here (--interleave-rounds
#: over 4 rounds, a 5% factor)
ASV_SETTINGS = ["--factor 1.05 --interleave-rounds -a rounds=4"]
GATE = "attention-bench gate"

SPIN = '''

# Injected by scripts/gate_sensitivity.py: after each call, spin for {x} times its elapsed time.
_timed_attention = scaled_dot_product_attention


def scaled_dot_product_attention(*args, **kwargs):  # noqa: F811
    import time as _time

    start = _time.perf_counter()
    out = _timed_attention(*args, **kwargs)
    stop = _time.perf_counter() + {x} * (_time.perf_counter() - start)
    while _time.perf_counter() < stop:
        pass
    return out
'''
CONTROL = "\n# control commit of scripts/gate_sensitivity.py: no code change\n"


def sh(*cmd: str, cwd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=check)


def commit_change(repo: str, base: str, text: str, message: str) -> str:
    """A commit on top of ``base`` that appends ``text`` to transformer/attention.py; its hash."""
    sh("git", "checkout", "-q", "--detach", base, cwd=repo)
    with open(os.path.join(repo, "transformer", "attention.py"), "a") as f:
        f.write(text)
    sh("git", "-c", "user.name=check", "-c", "user.email=check@localhost", "commit", "-qam", message, cwd=repo)
    return sh("git", "rev-parse", "HEAD", cwd=repo).stdout.strip()


def gate(repo: str, base: str, head: str, budget: float, record: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "attention_bench", "gate", base, head, "--grid", "quick", "--area",
                           "attention", "--method", "forward", "--device", "cpu", "--budget", str(budget), "--record",
                           record,
                           "--no-progress"], cwd=repo, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"the gate failed (exit {done.returncode}): {done.stderr[-2000:]}")
    with open(record) as f:
        rows = json.load(f)
    cases = [c for c in rows["cases"] if c["verdict"] != "skipped"]
    return {"exit": done.returncode, "cases": len(cases), "slower": sum(c["verdict"] == "slower" for c in cases),
            "verdicts": [c["verdict"] for c in cases], "ratios": [c["ratio"] for c in cases],
            "rounds": rows["rounds"], "seconds": rows["elapsed_s"]}


def cpu_cases() -> int:
    return len(cases.select("attention", grid="quick", device="cpu"))


def asv_continuous(repo: str, base: str, head: str, setting: str) -> dict:
    """``asv continuous`` of equation (1)'s forward cases: CPU rows it marks slower ('+') and their ratios."""
    asv = os.path.join(os.path.dirname(sys.executable), "asv")
    started = time.monotonic()
    done = subprocess.run([asv, "continuous", *setting.split(), "--bench", BENCH, base, head], cwd=repo,
                          capture_output=True, text=True, env={**os.environ, "ATTENTION_BENCH_GRID": "quick"})
    out = done.stdout + done.stderr
    rows = [parse_row(line) for line in out.splitlines()
            if line.strip().startswith("|") and "'cpu'" in line and BENCH.split(".")[0] in line]
    if done.returncode not in (0, 1) or "PERFORMANCE" not in out and "BENCHMARKS NOT SIGNIFICANTLY" not in out:
        raise RuntimeError(f"asv continuous {setting} failed (exit {done.returncode}): {out[-2000:]}")
    return {"exit": done.returncode, "cases": cpu_cases(), "slower": sum(r["change"] == "+" for r in rows),
            "ratios": [r["ratio"] for r in rows], "seconds": time.monotonic() - started}


def fractions(text: str) -> list[float]:
    """argparse ``type=`` for ``--slowdowns``: comma-separated finite fractions in (0, 10)."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated fractions, e.g. 0.05,0.1") from None
    if not values or not all(math.isfinite(v) and 0 < v < 10 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each slowdown must be a fraction above 0 and below 10")
    return values


#: where the record goes unless --record says: the report shows the latest
RECORD = os.path.join("results", "gate", "sensitivity.json")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/gate_sensitivity.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--slowdowns", type=fractions, default="0.05,0.1,0.2",
                   help="comma-separated fractions, each above 0 and below 10")
    p.add_argument("--trials", type=guards.count, default=3, help="trials of each change (>= 1; default 3)")
    options.add(p, "--budget", "--record")  # the gate's budget per comparison; the record: RECORD unless given
    p.add_argument("--asv", action="append", help="an asv continuous setting to measure next to the gate "
                   f"(repeatable; default {ASV_SETTINGS}; 'none' for none)")
    p.add_argument("--no-gate", action="store_true", help="measure asv's settings only")
    return p


def main(argv: list[str] | None = None) -> int:
    args = (parser_ := parser()).parse_args(argv)
    args.record = args.record or RECORD
    slowdowns = args.slowdowns
    if args.record:
        try:
            records.check_record_path(args.record, "gate-sensitivity")
        except ValueError as error:
            parser_.error(str(error))
    settings = [] if args.asv == ["none"] else args.asv or ASV_SETTINGS
    work = tempfile.mkdtemp(prefix="gate-sensitivity-")
    repo = os.path.join(work, "repo")
    start = time.time()
    results: dict[str, dict[str, list[dict]]] = {**({} if args.no_gate else {GATE: {}}),
                                                 **{f"asv continuous {s}".strip(): {} for s in settings}}
    try:
        sh("git", "clone", "-q", ROOT, repo, cwd=work)
        base = sh("git", "rev-parse", "HEAD", cwd=repo).stdout.strip()
        heads = {"control": commit_change(repo, base, CONTROL, "control: a comment only")}
        for x in slowdowns:
            heads[f"{x:.0%}"] = commit_change(repo, base, SPIN.format(x=x), f"inject a {x:.0%} slowdown")
        sh("git", "checkout", "-q", "--detach", base, cwd=repo)
        if settings:  # asv needs this machine described once (~/.asv-machine.json); --yes takes its defaults
            sh(os.path.join(os.path.dirname(sys.executable), "asv"), "machine", "--yes", cwd=repo)
        for trial in range(args.trials):
            for name, head in heads.items():
                runs = {} if args.no_gate else {
                    GATE: lambda head=head, name=name, trial=trial: gate(repo, base, head, args.budget,
                                                                       os.path.join(work, f"{name}-{trial}.json"))}
                for setting in settings:
                    runs[f"asv continuous {setting}".strip()] = lambda s=setting, head=head: asv_continuous(
                        repo, base, head, s)
                for method, measure in runs.items():
                    got = measure()
                    results[method].setdefault(name, []).append(got)
                    ratios = f"ratios {min(got['ratios']):.3f}-{max(got['ratios']):.3f}" if got["ratios"] else ""
                    print(f"trial {trial + 1}, {name:>7}, {method}: {got['slower']} of {got['cases']} cases flagged "
                          f"slower, {ratios}, {got['seconds']:.0f} s", flush=True)
                    if args.record:  # what is measured so far is kept, whatever stops the run
                        measured.save(args.record, "gate-sensitivity", base, trials=args.trials, budget_s=args.budget,
                                      seconds=time.time() - start, results=results, done=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for method, by_head in results.items():
        for name, trials in by_head.items():
            rates = [t["slower"] / t["cases"] for t in trials]
            print(f"{method}, {name:>7}: flagged {', '.join(f'{r:.0%}' for r in rates)} of the cases in "
                  f"{len(rates)} trials")
    if args.record:
        measured.save(args.record, "gate-sensitivity", base, trials=args.trials, budget_s=args.budget,
                      seconds=time.time() - start, results=results, done=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
