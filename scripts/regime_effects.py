"""What runtime settings change, measured on purpose: each a paired ratio with its 95% interval.

Two workers of this checkout (``benchmarks.core.pairing.mirrored``) time the same cases in mirrored blocks, one in the
users' default regime and one with a setting changed; each case's ratio is its time with the setting over
its time without. The settings:

    passive     OpenMP threads sleep as soon as they wait (OMP_WAIT_POLICY=PASSIVE) instead of spinning a while
    allocator   glibc's allocator fixed: every allocation from the heap, none given back (``FIXED_ALLOCATOR``)
    threads-set torch.set_num_threads called once with the count torch already has, as torch.utils.benchmark's
                Timer and a user who sets the threads do
    idle        nothing: both workers in the default regime (the no-change control); with ``--pauses`` also
                without the pause before each handover, which shows what the idle worker costs the timed one

The cases: the C1 pair (Transformer and width-matched RNN, teacher-forced forward, n = 128) at tiny and at
paper-base, and the C3 pair (multi-head attention with 1 and 64 heads, batched, W_O in). From a setting's
ratios on both cases of a pair follows the pair's own ratio under that setting (C1: RNN time over Transformer
time; C3: 64 heads over 1).

    .venv/bin/python scripts/regime_effects.py [--settings passive,allocator,threads-set,idle] [--budget 40] \
        [--record docs/measured/<date>-vm-regime.json]

``attention-bench measured <record>`` renders it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from attention_bench import options  # noqa: E402
from benchmarks import cases  # noqa: E402
from benchmarks.core import guards, records  # noqa: E402
from benchmarks.core.pairing.mirrored import (  # noqa: E402
    FIXED_ALLOCATOR,
    HANDOVER_S,
    IDLE_PASSIVE,
    MirroredRounds,
    Side,
)
from benchmarks.core.pairing.mirrored_worker import SET_THREADS  # noqa: E402
from benchmarks.core.pairing.workers import Worker, WorkerDied  # noqa: E402
from reports import measured  # noqa: E402

SETTINGS = {"passive": IDLE_PASSIVE, "allocator": FIXED_ALLOCATOR, "threads-set": {SET_THREADS: "1"}, "idle": {}}
#: the pairs whose ratio a setting may move: (name, area, method, axis, a's value, b's value, shared params)
PAIRS = [
    ("C1 tiny", "models", "forward", "model", "transformer", "rnn-width",
     {"preset": "tiny", "seq_len": 128, "batch": 8, "device": "cpu"}),
    ("C1 paper-base", "models", "forward", "model", "transformer", "rnn-width",
     {"preset": "paper-base", "seq_len": 128, "batch": 8, "device": "cpu"}),
    ("C3 h=64", "multihead", "forward", "heads", 1, 64,
     {"strategy": "batched", "out_proj": True, "device": "cpu"}),
]
BLOCK_S, MIN_ROUNDS, MAX_ROUNDS = 0.05, 12, 200


def todo() -> list[tuple[str, dict, str]]:
    out = []
    for _, area, method, axis, a, b, shared in PAIRS:
        for value in (a, b):
            params = {**shared, axis: value}
            if not cases.on_grid(area, params, "full"):
                raise ValueError(f"{area} {params} is not a case of the full grid")
            out.append((area, params, method))
    return out


def compare(setting: str, budget: float, handover: float) -> dict:
    """Every case of ``todo`` in a default worker (side a) and a worker with ``setting`` (side b)."""
    cases_ = todo()
    default, changed = Worker("default", ROOT, ROOT, {}), Worker(setting, ROOT, ROOT, SETTINGS[setting])
    rounds = MirroredRounds([default, changed], cases_, [(Side(default, i), Side(changed, i))
                                                         for i in range(len(cases_))], BLOCK_S, handover)
    started = time.monotonic()
    try:
        rounds.start()
        n = rounds.run(lambda estimates: False, budget, MIN_ROUNDS, MAX_ROUNDS)
    finally:
        rounds.stop()
    rows = []
    for (area, params, method), est, times in zip(cases_, rounds.estimates(), rounds.times, strict=True):
        rows.append({"area": area, "params": params, "method": method, "ratio": est.ratio, "low": est.low,
                     "high": est.high, "rounds": est.rounds, "default_s": sorted(times["a"])[len(times["a"]) // 2],
                     "setting_s": sorted(times["b"])[len(times["b"]) // 2]})
    return {"setting": setting, "env": SETTINGS[setting], "handover_s": handover, "rounds": n,
            "seconds": time.monotonic() - started, "regimes": {"default": default.regime, setting: changed.regime},
            "cases": rows, "pairs": pair_ratios(rows)}


def pair_ratios(rows: list[dict]) -> list[dict]:
    """Each pair's own ratio (b over a) in the default regime and with the setting, from its two cases' times."""
    out = []
    for i, (name, *_rest) in enumerate(PAIRS):
        a, b = rows[2 * i], rows[2 * i + 1]
        out.append({"pair": name, "default": b["default_s"] / a["default_s"],
                    "setting": b["setting_s"] / a["setting_s"], "change": b["ratio"] / a["ratio"]})
    return out


def show(result: dict) -> str:
    lines = [f"{result['setting']} ({', '.join(f'{k}={v}' for k, v in result['env'].items()) or 'no change'}; "
             f"pause {result['handover_s'] * 1e3:.0f} ms before each handover; {result['rounds']} rounds)"]
    for r in result["cases"]:
        label = " ".join(f"{k}={v}" for k, v in r["params"].items() if k not in ("device", "out_proj"))
        lines.append(f"  {r['area']:<10} {label:<56} {r['default_s'] * 1e3:9.2f} ms {r['setting_s'] * 1e3:9.2f} ms "
                     f"{r['ratio']:6.3f} ({r['low']:.3f}-{r['high']:.3f})")
    for p in result["pairs"]:
        lines.append(f"  {p['pair']:<14} ratio {p['default']:.2f}x by default, {p['setting']:.2f}x with the setting")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/regime_effects.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"comma list of {', '.join(SETTINGS)} (default all)")
    p.add_argument("--setting-budget", type=guards.seconds, default=40.0, metavar="SECONDS",
                   help="seconds of paired rounds at most per setting (default 40)")
    p.add_argument("--pauses", action="store_true",
                   help="time the no-change control also without the pause before each handover")
    options.add(p, "--record")
    return p


def main(argv: list[str] | None = None) -> int:
    args = (parse := parser()).parse_args(argv)
    chosen = [s.strip() for s in args.settings.split(",") if s.strip()]
    for s in chosen:
        if s not in SETTINGS:
            parse.error(f"unknown setting {s!r}; allowed: {', '.join(SETTINGS)}")
    if args.record:
        try:
            records.check_record_path(args.record, "regime")
        except ValueError as error:
            parse.error(str(error))
    runs = [(s, HANDOVER_S) for s in chosen] + ([("idle", 0.0)] if args.pauses else [])
    results = []
    try:
        for setting, handover in runs:
            results.append(compare(setting, args.setting_budget, handover))
            print(show(results[-1]), flush=True)
    except WorkerDied as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if args.record and results:
            measured.save(args.record, "regime", records.commit(), budget_s=args.setting_budget, results=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
