"""Prove that `asv continuous` flags a 2x slowdown, and does not flag a commit that changes nothing.

In a throw-away clone of this repository it makes two commits on top of HEAD: one that changes only
the README (the control), and one that makes equation (1) do its work twice (an injected 2x
slowdown). It then runs, in asv-managed virtualenvs (torch==2.13.0 from the local wheel),

    asv continuous HEAD  control    --bench ScaledDotProductAttention.time_forward   (expect: unchanged)
    asv continuous control slowdown --bench ScaledDotProductAttention.time_forward   (expect: decreased)

and exits 0 only if both verdicts are right. Needs a clean commit to clone: run it after committing.

    .venv/bin/python scripts/check_regression_detection.py [--keep DIR] \
        [--record docs/measured/<date>-regression-check.json]

``--record`` saves what it found (each flagged row with its ratio, the verdicts, the commit, the machine,
the time taken) as a JSON record; the README's sentence about this check is generated from it
(``attention-bench measured <record>``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from attention_bench import options  # noqa: E402
from benchmarks import cases  # noqa: E402
from reports import measured  # noqa: E402

BENCH = "ScaledDotProductAttention.time_forward"
FACTOR = 1.5  # asv continuous flags a benchmark that got this much slower
SLOWDOWN = '''

# Injected by scripts/check_regression_detection.py: every call does its work twice.
_single_pass_attention = scaled_dot_product_attention


def scaled_dot_product_attention(*args, **kwargs):  # noqa: F811
    _single_pass_attention(*args, **kwargs)
    return _single_pass_attention(*args, **kwargs)
'''


def sh(*cmd: str, cwd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=check)


def commit(repo: str, message: str) -> str:
    sh("git", "-c", "user.name=check", "-c", "user.email=check@localhost", "commit", "-qam", message, cwd=repo)
    return sh("git", "rev-parse", "HEAD", cwd=repo).stdout.strip()


def continuous(repo: str, base: str, head: str) -> tuple[int, str]:
    asv = os.path.join(os.path.dirname(sys.executable), "asv")
    proc = sh(asv, "continuous", "--factor", str(FACTOR), "--bench", BENCH, base, head, cwd=repo, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def changed_rows(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if re.match(r"\|\s*[+-]\s*\|", line)]


def parse_row(row: str) -> dict:
    """One row of asv's comparison table: | change | before | after | ratio | benchmark(params) |."""
    change, before, after, ratio, name = [cell.strip() for cell in row.strip("|").split("|")][:5]
    return {"change": change, "before": before, "after": after, "ratio": float(ratio.lstrip("~")), "benchmark": name}


def record(path: str, base: str, out_control: str, out_slow: str, passed: bool, seconds: float) -> None:
    """Save the check's findings as a JSON record (kind ``regression-check``) for the README."""
    cpu_cases = cases.select("attention", grid=os.environ.get("ATTENTION_BENCH_GRID", "quick"), device="cpu")
    measured.save(path, "regression-check", base, benchmark=BENCH, factor=FACTOR, cases=len(cpu_cases),
                  passed=passed, seconds=seconds,
                  control={"changed": [parse_row(r) for r in changed_rows(out_control)]},
                  slowdown={"changed": [parse_row(r) for r in changed_rows(out_slow)]})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/check_regression_detection.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--keep", help="clone into this folder and keep it (default: a temporary folder)")
    options.add(p, "--record")
    return p


def main() -> int:
    args = parser().parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="asv-regression-")
    os.makedirs(work, exist_ok=True)
    repo = os.path.join(work, "repo")
    start = time.time()
    try:
        sh("git", "clone", "-q", ROOT, repo, cwd=work)
        base = sh("git", "rev-parse", "HEAD", cwd=repo).stdout.strip()
        with open(os.path.join(repo, "README.md"), "a") as f:
            f.write("\n<!-- control commit: no code change -->\n")
        control = commit(repo, "control: README only")
        with open(os.path.join(repo, "transformer", "attention.py"), "a") as f:
            f.write(SLOWDOWN)
        slowdown = commit(repo, "inject a 2x slowdown into equation (1)")

        # asv needs this machine described once (~/.asv-machine.json); --yes takes its defaults
        sh(os.path.join(os.path.dirname(sys.executable), "asv"), "machine", "--yes", cwd=repo)
        code_control, out_control = continuous(repo, base, control)
        code_slow, out_slow = continuous(repo, control, slowdown)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    print(f"control  (README only): exit {code_control}; changed rows: {changed_rows(out_control) or 'none'}")
    print(f"slowdown (2x equation 1): exit {code_slow}; changed rows:")
    for row in changed_rows(out_slow):
        print("   ", row)
    ok = code_control == 0 and code_slow == 1 and "PERFORMANCE DECREASED" in out_slow
    if not ok:
        print(out_control[-3000:], out_slow[-3000:], sep="\n---\n")
    if args.record:
        record(args.record, base, out_control, out_slow, ok, time.time() - start)
    print(f"{'PASS' if ok else 'FAIL'}: asv continuous flagged the slowdown and not the control "
          f"({time.time() - start:.0f} s)" if ok else "FAIL: wrong verdict (output above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
