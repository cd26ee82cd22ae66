"""A regression gate's worker (``benchmarks.core.pairing.mirrored``): one version of the models, timed on request.

    python mirrored_worker.py ROOT     ROOT holds ``transformer`` (the version under test) and ``benchmarks``
                                     (the case definitions), as links

It reads one JSON request per line on stdin and answers one JSON line on stdout: ``{"cases": [[area,
params, method], ...]}`` builds each case from seed 0 (``{"errors": [...], "regime": ...}``, None for a case
built; the threads and runtime settings it runs in, ``records.regime``);
``{"probe": i}`` times one call of case i after a warm-up one (``{"seconds": s}``); ``{"case": i, "calls":
n}`` times n calls at the case's thread count (``{"seconds": s, "faults": f}``, per call: the minor page faults
that the process took, which tell a memory state: ``measure.memory_states``), and ``{"warm": i, "calls": n}``
makes them to warm the case; with ``"settle": k``, a probe's warm-up and a warm-up go on, k calls at most, until
a call faults in at most ``measure.FAULT_PAGES`` pages (``measure.settle``; an allocator that gives nothing back:
its heap grown to what the case needs); ``{"quit": true}`` ends it.
"""

import json
import os
import resource
import sys
import time

#: set in a worker's environment, it calls torch.set_num_threads with the count torch already has, once
SET_THREADS = "ATTENTION_BENCH_SET_THREADS"


def main(root: str) -> None:
    sys.path[0] = root  # the version's transformer and the suite's benchmarks, nothing from this file's folder
    reply, sys.stdout = sys.stdout, sys.stderr  # anything the models print goes to the log, not the answers
    import torch

    if os.environ.get(SET_THREADS):  # a named condition (scripts/regime_effects.py): as torch.utils.benchmark does
        torch.set_num_threads(torch.get_num_threads())

    from benchmarks import cases
    from benchmarks.core import records

    built = []
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            return
        try:
            answer = handle(request, built, cases, torch)
            if "cases" in request:
                answer["regime"] = records.regime()
        except Exception as error:  # told to the controller, which stops with it
            answer = {"error": f"{type(error).__name__}: {error}"}
        reply.write(json.dumps(answer) + "\n")
        reply.flush()


def case_of(request: dict) -> int:
    """The case a timing request (case, warm or probe) is for."""
    return next(request[k] for k in ("case", "warm", "probe") if k in request)


def handle(request: dict, built: list, cases, torch) -> dict:
    if "cases" in request:
        errors = []
        for area, params, method in request["cases"]:
            try:
                torch.manual_seed(0)
                case = cases.build(area, params)
                built.append((case.work(method)[0], case.threads, case.device))
                errors.append(None)
            except Exception as error:  # this case cannot run here: the gate leaves it out, saying why
                built.append(None)
                errors.append(f"{type(error).__name__}: {error}")
        return {"errors": errors}
    from benchmarks.core.timing.measure import FAULT_PAGES, settle  # the suite's, once ``main`` has set the path

    fn, threads, device = built[case_of(request)]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with cases.using_threads(threads):
        if "probe" in request:
            settle(fn, max(1, request.get("settle", 1)))
            sync()
        calls = request.get("calls", 1)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        seconds = (time.perf_counter() - start) / calls
        faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / calls
        if "warm" in request and request.get("settle") and faults > FAULT_PAGES:
            settle(fn, request["settle"])
            sync()
        return {"seconds": seconds, "faults": faults}


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]))
