"""How small a slowdown the regression gate sees on this machine, and how often it cries wolf.

In a throw-away clone of this repository it commits, on top of HEAD, a no-change control (a comment in
equation (1)'s module) and one commit per slowdown fraction x that makes equation (1) spin for x times
each real call's elapsed time after it (so the injected work scales with the machine's speed). Then, for
each trial and each commit, it runs the gate (``python -m benchmarks.gate``) on equation (1)'s forward
cases against the clone's HEAD and counts the CPU cases flagged slower: the detection rate (flagged /
cases) for each slowdown, the false-alarm rate for the control.

    .venv/bin/python scripts/gate_sensitivity.py [--slowdowns 0.05,0.1,0.2,0.5] [--trials 3] \
        [--record docs/measured/<date>-vm-gate-sensitivity.json]

Needs a clean commit to clone: run it after committing. ``python -m reports measured <record>`` renders it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from reports import measured  # noqa: E402

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
    done = subprocess.run([sys.executable, "-m", "benchmarks.gate", base, head, "--area", "attention", "--device",
                           "cpu", "--budget", str(budget), "--record", record, "--no-progress"], cwd=repo,
                          capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"the gate failed (exit {done.returncode}): {done.stderr[-2000:]}")
    with open(record) as f:
        rows = json.load(f)
    cases = [c for c in rows["cases"] if c["verdict"] != "skipped"]
    return {"exit": done.returncode, "cases": len(cases), "slower": sum(c["verdict"] == "slower" for c in cases),
            "verdicts": [c["verdict"] for c in cases], "ratios": [c["ratio"] for c in cases],
            "rounds": rows["rounds"], "seconds": rows["elapsed_s"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slowdowns", default="0.05,0.1,0.2,0.5", help="comma-separated fractions")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--budget", type=float, default=180.0, help="the gate's budget per comparison (s)")
    parser.add_argument("--record", help="save the table as a JSON record here (for the docs)")
    args = parser.parse_args()
    slowdowns = [float(x) for x in args.slowdowns.split(",")]
    work = tempfile.mkdtemp(prefix="gate-sensitivity-")
    repo = os.path.join(work, "repo")
    start = time.time()
    results: dict[str, list[dict]] = {}
    try:
        sh("git", "clone", "-q", ROOT, repo, cwd=work)
        base = sh("git", "rev-parse", "HEAD", cwd=repo).stdout.strip()
        heads = {"control": commit_change(repo, base, CONTROL, "control: a comment only")}
        for x in slowdowns:
            heads[f"{x:.0%}"] = commit_change(repo, base, SPIN.format(x=x), f"inject a {x:.0%} slowdown")
        sh("git", "checkout", "-q", "--detach", base, cwd=repo)
        for trial in range(args.trials):
            for name, head in heads.items():
                got = gate(repo, base, head, args.budget, os.path.join(work, f"{name}-{trial}.json"))
                results.setdefault(name, []).append(got)
                print(f"trial {trial + 1}, {name:>7}: {got['slower']} of {got['cases']} cases flagged slower, "
                      f"ratios {min(got['ratios']):.3f}-{max(got['ratios']):.3f}, {got['rounds']} rounds, "
                      f"{got['seconds']:.0f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name, trials in results.items():
        rates = [t["slower"] / t["cases"] for t in trials]
        print(f"{name:>7}: flagged {', '.join(f'{r:.0%}' for r in rates)} of the cases in {len(rates)} trials")
    if args.record:
        measured.save(args.record, "gate-sensitivity", base, trials=args.trials, budget_s=args.budget,
                      seconds=time.time() - start, results=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
