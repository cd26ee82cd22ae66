"""Where the time goes, for one case or a named set (``benchmarks.core.profiler``), in the paper's terms.

    python -m benchmarks.profile --area models --model transformer --preset paper-base --seq-len 64 --batch 8
    python -m benchmarks.profile --set default --out results/runs/<machine>-default

One grid case (axes not given take the default grid's first value) or a named set is run under
torch.profiler and broken into the models' components; each case's record, with its memory timeline,
goes to ``<out>/profiles/<case>/profile.json`` next to its Chrome/Perfetto trace, and the report draws
its memory figure.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from . import cases
from .core import guards
from .core.profiler import profile_case, run_set

# -- the command line -------------------------------------------------------------------------------

def _axis_values() -> dict[str, dict[str, list]]:
    """Every value each area's axes take in any grid: what a profiled case may be."""
    values: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for grid in cases.GRIDS.values():
        for area, ax in grid.items():
            for axis, vs in ax.items():
                for v in vs:
                    if v not in values[area][axis]:
                        values[area][axis].append(v)
    return values


def _parse(axis: str, text: str, allowed: list):
    for v in allowed:
        if str(v) == text or (isinstance(v, bool) and text.lower() == str(v).lower()):
            return v
    if all(isinstance(v, int) and not isinstance(v, bool) for v in allowed):
        try:
            number = int(text)
        except ValueError:
            raise ValueError(f"--{axis.replace('_', '-')} {text!r} is not an integer; allowed: "
                             f"{', '.join(map(str, allowed))}") from None
        if number <= 0:
            raise ValueError(f"--{axis.replace('_', '-')} must be positive, got {number}")
    raise ValueError(f"--{axis.replace('_', '-')} {text!r} is not on any grid; allowed: {', '.join(map(str, allowed))}")


def case_from_args(area: str, given: dict[str, str | None]) -> dict:
    """A grid case from command-line values; axes not given take the default grid's first value."""
    values = _axis_values()
    if area not in values:
        raise ValueError(f"unknown area {area!r}; allowed: {', '.join(values)}")
    unknown = [k for k, v in given.items() if v is not None and k not in values[area]]
    if unknown:
        raise ValueError(f"area {area!r} has no axis {', '.join('--' + k.replace('_', '-') for k in unknown)}; "
                         f"its axes: {', '.join('--' + a.replace('_', '-') for a in values[area])}")
    defaults = cases.GRIDS["default"].get(area, values[area])
    return {axis: _parse(axis, given[axis], allowed) if given.get(axis) is not None else defaults[axis][0]
            for axis, allowed in values[area].items()}


def main(argv: list[str] | None = None) -> int:
    values = _axis_values()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:3]))
    parser.add_argument("--set", help=f"a named set of cases: {', '.join(cases.PROFILE_SETS)}")
    parser.add_argument("--area", help=f"the case's area: {', '.join(values)}")
    parser.add_argument("--method", default="forward", help="forward (default), train_step or generate")
    parser.add_argument("--out", default="results/profiles", help="folder; profiles go to <out>/profiles/<case>/")
    parser.add_argument("--cycles", type=int, default=5, help="profiled calls (each after an unprofiled one)")
    for axis in sorted({a for ax in values.values() for a in ax}):
        parser.add_argument(f"--{axis.replace('_', '-')}", dest=axis, help="a value of this axis on a grid")
    args = parser.parse_args(argv)
    if args.cycles < 1:
        parser.error(f"--cycles must be at least 1, got {args.cycles}")
    try:
        guards.writable_folder(args.out, "--out")
        if args.set is not None:
            if args.set not in cases.PROFILE_SETS:
                raise ValueError(f"unknown set {args.set!r}; allowed: {', '.join(cases.PROFILE_SETS)}")
            counts = run_set(args.set, args.out, cycles=args.cycles)
            print(f"{args.out}/profiles: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
            return 0 if not counts.get("failed") else 1
        if args.area is None:
            raise ValueError("give --set NAME or --area AREA with the case's axes")
        given = {a: getattr(args, a) for ax in values.values() for a in ax}
        params = case_from_args(args.area, given)
        if args.method not in cases.METHODS[args.area]:
            raise ValueError(f"area {args.area!r} has no method {args.method!r}; allowed: "
                             f"{', '.join(cases.METHODS[args.area])}")
        record = profile_case(args.area, params, args.method, args.out, cycles=args.cycles)
    except (ValueError, cases.Skip) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(summary(record))
    return 0


def summary(r: dict) -> str:
    """The breakdown as text: one line per component."""
    lines = [f"{r['area']} {r['method']} {r['params']} on {r['device']} ({r['threads'] or '-'} threads)",
             f"unprofiled {r['unprofiled_s'] * 1e3:.3g} ms, profiled {r['profiled_s'] * 1e3:.3g} ms "
             f"(profiler overhead {r['overhead']:+.0%}); components sum to {r['sum_over_unprofiled']:.2f}x the "
             f"unprofiled call; matmul FLOPs equal the analytic model per component: {r['flops_match_analytic']}; "
             f"sequential depth {r['sequential_depth']}, {r['op_launches']} launches; peak memory "
             f"{r['peak_bytes'] / 2**20:.1f} MiB",
             f"{'component':28s} {'time ms':>9s} {'share':>6s} {'calls':>6s} {'launch':>6s} {'GFLOP':>9s} "
             f"{'GFLOP/s':>8s}"]
    for c in r["components"]:
        rate = c["achieved_flops_per_s"]
        lines.append(f"{c['component']:28s} {c['time_s'] * 1e3:9.3f} {c['share']:6.1%} {c['calls']:6d} "
                     f"{c['launches']:6d} {c['analytic_matmul_flops'] / 1e9:9.3f} "
                     f"{'' if rate is None else f'{rate / 1e9:8.1f}'}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
