"""A plain, independent check of a published ratio: two cases timed in mirrored blocks in a bare process.

Each process builds only the two cases (nothing else in its memory), warms each with two calls, then times
them with ``time.perf_counter`` in mirrored blocks (a b b a, then b a a b) for ``--rounds`` rounds, in the
users' default regime; its ratio is the median of its rounds' ratios (b's two blocks over a's). Several such
processes, one after another, give the ratio's spread over processes; each side's minor page faults per
timed call say whether a process's allocator gave its buffers back to the OS each call. Nothing here is
shared with the runner's or the pairs' timing code (``benchmarks.core.timing.measure``,
``benchmarks.core.pairing.mirrored``): only the case definitions.

    .venv/bin/python scripts/plain_pair.py                    C1 at tiny and paper-base, n = 128, 3 processes
    .venv/bin/python scripts/plain_pair.py --processes 5 --mirrored-rounds 20
    .venv/bin/python scripts/plain_pair.py --apart            each model alone in its processes

With ``--apart`` each process builds and times one model alone (as a user runs one, and as the pairs' workers
do, ``benchmarks.pairs.SEPARATE``): ``--processes`` pairs of processes, a's and b's alternated (a b, then b a),
each warming its model with two calls and timing ``--calls`` calls; the ratio is the median of b's processes'
median times over a's, and each pair of processes gives one ratio for its spread.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the checks: (name, area, method, (a's params, b's params)); the ratio is b's time over a's
CHECKS = {
    f"C1 {preset} n=128": ("models", "forward", tuple(
        {"model": m, "preset": preset, "seq_len": 128, "batch": 8, "device": "cpu"}
        for m in ("transformer", "rnn-width")))
    for preset in ("tiny", "paper-base")
}
#: seconds each block lasts at least (at least one call)
BLOCK_S = 0.05


def warmed(name: str, side: int):
    """In this process: side ``side`` of check ``name`` built from seed 0 and warmed with two calls."""
    sys.path.insert(0, ROOT)
    import torch

    from benchmarks import cases

    area, method, sides = CHECKS[name]
    torch.manual_seed(0)
    fn = cases.build(area, sides[side]).work(method)[0]
    for _ in range(2):
        fn()
    return fn


def one_process(name: str, rounds: int) -> dict:
    """In this process: the two cases of check ``name`` timed in mirrored blocks; their median times per call
    and the median of the rounds' ratios."""
    fns = [warmed(name, side) for side in (0, 1)]
    start = time.perf_counter()
    fns[0]()
    calls = max(1, round(BLOCK_S / max(time.perf_counter() - start, 1e-9)))

    faults = {0: 0, 1: 0}

    def block(side: int) -> float:
        before, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
        for _ in range(calls):
            fns[side]()
        took = (time.perf_counter() - start) / calls
        faults[side] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        return took

    ratios, times = [], {0: [], 1: []}
    for r in range(rounds):
        order = (0, 1, 1, 0) if r % 2 == 0 else (1, 0, 0, 1)
        got = {0: [], 1: []}
        for side in order:
            got[side].append(block(side))
        ratios.append(sum(got[1]) / sum(got[0]))
        for side in got:
            times[side].extend(got[side])
    return {"check": name, "pid": os.getpid(), "ratio": statistics.median(ratios),
            "a_s": statistics.median(times[0]), "b_s": statistics.median(times[1]), "rounds": rounds,
            "a_faults_per_call": faults[0] / (2 * rounds * calls),
            "b_faults_per_call": faults[1] / (2 * rounds * calls)}


def one_side(name: str, side: int, calls: int) -> dict:
    """In this process: side ``side`` of check ``name`` alone, warmed with two calls, then ``calls`` calls timed
    one by one; their median time and minor page faults per call."""
    fn = warmed(name, side)
    times, before = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"check": name, "side": side, "s": statistics.median(times),
            "faults_per_call": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls}


def apart(name: str, processes: int, calls: int) -> str:
    """Check ``name`` with each side alone in its processes (a b, then b a), as one line."""
    got: dict[int, list[dict]] = {0: [], 1: []}
    for i in range(processes):
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            done = subprocess.run([sys.executable, __file__, "--side", str(side), "--one", name, "--calls",
                                   str(calls)], capture_output=True, text=True, check=True)
            got[side].append(json.loads(done.stdout))
    each = sorted(b["s"] / a["s"] for a, b in zip(got[0], got[1], strict=True))
    a_s, b_s = (statistics.median(f["s"] for f in got[side]) for side in (0, 1))
    return (f"{name}, each side alone: ratio (b/a) {b_s / a_s:.3f}, pairs of processes "
            f"{', '.join(f'{r:.3f}' for r in each)}; a {a_s * 1e3:.2f} ms, b {b_s * 1e3:.2f} ms per call; page "
            f"faults per call a {_counts(got[0], 'faults_per_call')}, b {_counts(got[1], 'faults_per_call')}")


def parser() -> argparse.ArgumentParser:
    sys.path.insert(0, ROOT)
    from attention_bench import options
    from benchmarks.core import guards

    p = argparse.ArgumentParser(prog="scripts/plain_pair.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--processes", type=guards.count, default=3, help="fresh processes per check (default 3)")
    options.add(p, "--mirrored-rounds")
    p.add_argument("--apart", action="store_true", help="each side alone in its own processes, alternated")
    p.add_argument("--calls", type=guards.count, default=10, help="with --apart: calls timed per process (default 10)")
    p.add_argument("--preset", action="append", choices=("tiny", "paper-base"),
                   help="only this model size (repeatable; default both)")
    p.add_argument("--one", help=argparse.SUPPRESS)  # inside a process of its own: one check
    p.add_argument("--side", type=int, help=argparse.SUPPRESS)  # with --one: that side alone
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.one:
        print(json.dumps(one_process(args.one, args.mirrored_rounds) if args.side is None else
                         one_side(args.one, args.side, args.calls)))
        return 0
    for name in (f"C1 {preset} n=128" for preset in args.preset or ("tiny", "paper-base")):
        if args.apart:
            print(apart(name, args.processes, args.calls))
            continue
        found = []
        for _ in range(args.processes):
            done = subprocess.run([sys.executable, __file__, "--one", name, "--mirrored-rounds",
                                   str(args.mirrored_rounds)],
                                  capture_output=True, text=True, check=True)
            found.append(json.loads(done.stdout))
        ratios = sorted(f["ratio"] for f in found)
        print(f"{name}: ratio (b/a) {statistics.median(ratios):.3f}, "
              f"processes {', '.join(f'{r:.3f}' for r in ratios)}; "
              f"a {statistics.median(f['a_s'] for f in found) * 1e3:.2f} ms, "
              f"b {statistics.median(f['b_s'] for f in found) * 1e3:.2f} ms per call; page faults per call "
              f"a {_counts(found, 'a_faults_per_call')}, b {_counts(found, 'b_faults_per_call')}")
    return 0


def _counts(found: list[dict], key: str) -> str:
    return ", ".join(f"{f[key]:.0f}" for f in found)


if __name__ == "__main__":
    sys.exit(main())
