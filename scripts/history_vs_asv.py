"""A synthetic commit history timed both ways, paired (``attention-bench history``) and absolute (``asv run``), and the
steps each names, true and false.

In a throw-away clone of this repository it commits, on top of HEAD, ten commits that each change equation (1)'s
module: every one makes the attention call spin for a fraction of its own elapsed time after it (so the work scales
with the machine's speed), 5% up to commit 3, then a 10% slowdown at commit 4 and a 4.8% speed-up at commit 8
(``factors``; ``--step`` sets the slowdown, the speed-up half of it); the other commits change only a comment
and the speed not at all. Then:

- ``attention-bench history`` over the ten commits (the first the reference), on the attention area's CPU forward
  cases of the quick grid: its steps (``history.steps`` at ``--threshold``);
- ``asv run`` over the same commits, ``ScaledDotProductAttention.time_forward`` in asv's own virtualenv, at asv's
  best setting here (``ASV_SETTING``): per case, asv's step detection (``asv.step_detect.detect_steps`` with its
  weights, as its graphs draw) and its regressions list (``detect_regressions`` at asv's default 5% threshold).

A step is true at commit 4 (up) and commit 8 (down); any other is false. The record (kind ``history-vs-asv``) holds
every case's steps for both, what each took, and is rendered by ``attention-bench measured``.

    .venv/bin/python scripts/history_vs_asv.py [--budget 60] [--threshold 0.03] [--step 0.10] [--record FILE]

Needs a clean commit to clone: run it after committing.
"""

from __future__ import annotations

import argparse
import itertools
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
from reports import asv_paired, measured  # noqa: E402
from scripts.check_regression_detection import BENCH  # noqa: E402
from scripts.gate_sensitivity import SPIN, sh  # noqa: E402

#: the slowdown at commit 4 unless --step says otherwise; the speed-up at commit 8 is half of it
STEP = 0.10
TRUE_STEPS = {4: "up", 8: "down"}


def factors(step: float = STEP) -> tuple[float, ...]:
    """Each commit's spin (a fraction of the call's time): 5% up to commit 3, ``step`` slower from commit 4
    (1.05 x (1 + step)), half of that faster from commit 8; at the default, 0.05, 0.155 and 0.10."""
    up = 1.05 * (1 + step)
    return (0.05,) * 4 + (up - 1,) * 4 + (up / (1 + step / 2) - 1,) * 2


FACTORS = factors()
ASV_SETTING = "-a rounds=4 --interleave-rounds"
#: asv's default threshold for its regressions list (asv.conf.json's ``regressions_thresholds``)
ASV_REGRESSION_THRESHOLD = 0.05
RECORD = os.path.join("results", "history", "history-vs-asv.json")


def make_history(repo: str, base: str, spins: tuple[float, ...] = FACTORS) -> list[str]:
    """The ten commits on top of ``base``, each setting equation (1)'s spin to its ``spins`` entry; their
    hashes."""
    path = os.path.join(repo, "transformer", "attention.py")
    with open(path) as f:
        original = f.read()
    made = []
    for i, x in enumerate(spins):
        with open(path, "w") as f:
            f.write(original + SPIN.format(x=x) + f"\n# synthetic history commit {i}\n")
        sh("git", "-c", "user.name=check", "-c", "user.email=check@localhost", "commit", "-qam",
           f"synthetic history {i}: spin {x:g}", cwd=repo)
        made.append(sh("git", "rev-parse", "HEAD", cwd=repo).stdout.strip())
    return made


def paired(repo: str, base: str, made: list[str], budget: float, threshold: float, folder: str) -> dict:
    """``attention-bench history`` over the commits: per case, the commit indices where it names a step."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "attention_bench", "history", f"{base}..{made[-1]}", "--grid", "quick",
                           "--area", "attention", "--method", "forward", "--device", "cpu", "--budget", str(budget),
                           "--threshold", str(threshold), "--history", folder, "--no-progress"],
                          cwd=repo, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"attention-bench history failed (exit {done.returncode}): {done.stderr[-2000:]}")
    from benchmarks import history

    kept = {r["commit"]: r for r in asv_paired.load_history(folder)}
    timeline = [kept[c] for c in made]
    index = {c: i for i, c in enumerate(made)}
    steps: dict[str, list[int]] = {c["case"]: [] for c in timeline[0]["cases"]}
    for s in history.steps(timeline, threshold):
        steps[s["case"]].append(index[s["commit"]])
    seconds = [r.get("elapsed_s") for r in timeline if r.get("elapsed_s") is not None]
    return {"steps": steps, "seconds": time.monotonic() - started, "seconds_per_timed_commit": seconds,
            "ratios": {c["case"]: [next(x["ratio"] for x in r["cases"] if x["case"] == c["case"]) for r in timeline]
                       for c in timeline[0]["cases"]}}


def absolute(repo: str, base: str, made: list[str]) -> dict:
    """``asv run`` over the commits: per CPU case, asv's step positions and its regressions list's."""
    from asv import _stats, step_detect
    from asv.results import iter_results

    asv = os.path.join(os.path.dirname(sys.executable), "asv")
    started = time.monotonic()
    sh(asv, "machine", "--yes", cwd=repo)
    done = subprocess.run([asv, "run", *ASV_SETTING.split(), "--bench", BENCH, f"{base}..{made[-1]}"], cwd=repo,
                          capture_output=True, text=True, env={**os.environ, "ATTENTION_BENCH_GRID": "quick"})
    if done.returncode:
        raise RuntimeError(f"asv run failed (exit {done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
    by_commit = {}
    for res in iter_results(os.path.join(repo, ".asv", "results")):
        key = next(k for k in res.get_all_result_keys() if k.endswith(BENCH))
        params = res.get_result_params(key)
        by_commit[res.commit_hash] = (params, res.get_result_value(key, params), res.get_result_stats(key, params))
    steps, regressions, times = {}, {}, {}
    for i, combo in enumerate(itertools.product(*by_commit[made[0]][0])):
        if "'cpu'" not in combo:
            continue
        y = [by_commit[c][1][i] if c in by_commit else None for c in made]
        w = [_stats.get_weight(by_commit[c][2][i]) if c in by_commit else None for c in made]
        found = step_detect.detect_steps(y, w)
        name = ", ".join(combo)
        steps[name] = [left for left, *_ in found[1:]]
        _, _, regressed = step_detect.detect_regressions(found, ASV_REGRESSION_THRESHOLD) or (None, None, None)
        regressions[name] = [after for _, after, _, _ in regressed or []]
        times[name] = y
    return {"steps": steps, "regressions": regressions, "times": times, "seconds": time.monotonic() - started}


def score(steps: dict[str, list[int]]) -> dict:
    """Per true step, the share of cases that name it; the false steps named (case, commit index)."""
    n = len(steps)
    found = {f"{i} ({d})": sum(i in s for s in steps.values()) / n for i, d in TRUE_STEPS.items()} if n else {}
    false = [(case, i) for case, s in steps.items() for i in s if i not in TRUE_STEPS]
    return {"cases": n, "found": found, "false_steps": false}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/history_vs_asv.py", description=__doc__.split("\n\n")[0])
    options.add(p, "--budget", "--record", "--threshold")
    p.add_argument("--no-asv", action="store_true", help="time the paired history only")
    p.add_argument("--step", type=float, default=STEP, metavar="FRACTION",
                   help=f"the slowdown at commit 4 (default {STEP:g}); commit 8 speeds up by half of it")
    return p


def main(argv: list[str] | None = None) -> int:
    args = (parser_ := parser()).parse_args(argv)
    args.record = args.record or RECORD
    try:
        if not 0 < args.step < 1:
            raise ValueError(f"--step {args.step}: give a fraction between 0 and 1, e.g. 0.03 for a 3% slowdown")
        records.check_record_path(args.record, "history-vs-asv")
        guards.writable_file(args.record, "--record")
    except ValueError as error:
        parser_.error(str(error))
    work = tempfile.mkdtemp(prefix="history-vs-asv-")
    repo = os.path.join(work, "repo")
    try:
        sh("git", "clone", "-q", ROOT, repo, cwd=work)
        base = sh("git", "rev-parse", "HEAD", cwd=repo).stdout.strip()
        made = make_history(repo, base, factors(args.step))
        out = {"paired": paired(repo, base, made, args.budget, args.threshold, os.path.join(work, "history"))}
        print(f"paired: {score(out['paired']['steps'])}, {out['paired']['seconds']:.0f} s", flush=True)
        if not args.no_asv:
            out["asv"] = absolute(repo, base, made)
            print(f"asv steps: {score(out['asv']['steps'])}; regressions list: {score(out['asv']['regressions'])}, "
                  f"{out['asv']['seconds']:.0f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    measured.save(args.record, "history-vs-asv", base, None, factors=list(factors(args.step)), true_steps=TRUE_STEPS,
                  threshold=args.threshold, budget_s=args.budget, asv_setting=None if args.no_asv else ASV_SETTING,
                  asv_regression_threshold=ASV_REGRESSION_THRESHOLD, cases=len(cases.select(
                      "attention", "quick", device="cpu")), results=out,
                  scores={k: score(v["steps"]) for k, v in out.items()}
                  | ({"asv regressions list": score(out["asv"]["regressions"])} if "asv" in out else {}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
