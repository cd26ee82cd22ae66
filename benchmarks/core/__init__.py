"""The measurement core: everything between a case (``benchmarks.cases``) and a record in a run folder, one
sub-package per job; each imports only the ones below it (pyproject.toml's contracts).

    pipeline      one run as every command line does it: plan, check the folders, measure, summarise
    ranks/        torchrun's ranks: a grid spread over them (world), the heads split over them (head_parallel)
    running/      a grid swept into a run folder, resumable (runner), its summary (run_summary), one writer
                  per run folder (lock)
    profiling/    torch.profiler breakdowns in the paper's components (profiler, components); a call's matrix
                  products replayed alone, the floor of a speed target (gemm_floor)
    pairing/      two versions timed in mirrored blocks, each in a worker process (mirrored, mirrored_worker)
    timing/       timing a case's method (measure: torch.utils.benchmark, achieved FLOP/s, rounds); GPU power,
                  clocks and energy (telemetry, NVML)
    hardware/     the machine model: facts and GEMM peaks (machine), constants by micro-benchmark (constants,
                  cached per machine in constants_cache), a call's time predicted from them (perfmodel)
    opgraph       the executed operator graph: FLOPs per label, sequential depth, launches, bytes, shapes
    records       run folders' JSON records: atomic writes, clear read errors, set-aside, status of a failure
    guards        checks of user input before anything is measured
"""
