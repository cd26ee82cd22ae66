"""The measurement core: everything between a case (``benchmarks.cases``) and a record in a run folder.

    records       run folders' JSON records: atomic writes, clear read errors, set-aside, status of a failure
    guards        checks of user input before anything is measured
    machine       the machine's facts and its measured GEMM peaks
    telemetry     GPU power, clocks and energy (NVML)
    opgraph       the executed operator graph: FLOPs per label, sequential depth, launches, bytes, shapes
    constants     the machine's constants by micro-benchmark: kernel rates by shape, bandwidth, overheads
    perfmodel     a call's time predicted from those constants and its operators (never from timings)
    measure       timing a case's method (torch.utils.benchmark), achieved FLOP/s, rounds
    gemm_floor    a call's matrix products recorded and replayed alone: the floor of a speed target
    profiler      torch.profiler breakdowns in the paper's components, memory, traces
    head_parallel the heads split over ranks, measured in lockstep
    runner        a grid swept into a run folder, resumable; the run summary
    lock          one writer per run folder
    ranks         a grid spread over torchrun's ranks; a stopped rank's one-line exit
    pipeline      one run as every command line does it, and their shared options
"""
