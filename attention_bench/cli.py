"""attention-bench: benchmarks and profiles of Transformer attention against the RNN-attention baseline it
replaced. One command per job; a flag means the same in every command that takes it.

    attention-bench run                          the main job: measure the default grid on this machine (CPU;
                                                 GPU too if there is one), profile, time the pairs, write the
                                                 report and print its path
    attention-bench report RESULTS...            the report on results already measured
    attention-bench compare RESULTS...           machines or runs side by side
    attention-bench gate main                    is the working tree slower than main?
    attention-bench pairs | profile              one part of the main job on its own
    torchrun --nproc_per_node=2 -m attention_bench ranks    head-parallel attention over ranks
"""

from __future__ import annotations

import argparse
import io
import sys
from importlib import metadata

from . import measuring, options, reporting

EXIT_CODES = """exit codes:
  0    done
  1    a finding the command exists to report (gate: a case slower than the threshold; history: a step)
  2    bad input, or the command could not finish (a worker died, a case failed, a full disk); says why
  130  interrupted (Ctrl-C): what was measured so far is kept, and a run resumes where it stopped

results go to stdout; progress, notes, warnings and errors to stderr"""

#: every command: name -> (one line of help, the function adding its flags, the function running it)
COMMANDS = {**measuring.COMMANDS, **reporting.COMMANDS}


def parser() -> argparse.ArgumentParser:
    """The command line, every command's flags included."""
    top = argparse.ArgumentParser(prog="attention-bench", description=__doc__.split("\n\n")[0],
                                  epilog=__doc__.split("\n\n")[1] + "\n" + EXIT_CODES,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    shared = argparse.ArgumentParser(add_help=False)
    options.add(shared, "--no-progress", "--quiet")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (line, add, run) in COMMANDS.items():
        p = sub.add_parser(name, parents=[shared], help=line, description=run.__doc__, epilog=EXIT_CODES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        add(p)
        p.set_defaults(handler=run)
    return top


def _version() -> str:
    try:
        return metadata.version("attention-bench")
    except metadata.PackageNotFoundError:
        return "(not installed)"


class ErrorsOnly(io.TextIOBase):
    """A stderr for --quiet: passes on the lines that start with "error:" and drops the rest."""

    def __init__(self, stream):
        self.stream, self.pending = stream, ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            if line.startswith("error:"):
                self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.quiet:
        args.no_progress = True
    stderr = sys.stderr
    if args.quiet:
        sys.stderr = ErrorsOnly(stderr)
    try:
        return args.handler(args)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        sys.stderr = stderr
