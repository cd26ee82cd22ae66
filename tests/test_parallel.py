"""Head-parallel attention on 2 and 4 gloo ranks (torch.multiprocessing): the same weights give the same
output and the same gradients as the single-process module, for both ways of combining the heads, for the
encoder layer, with and without masks; bad input gets a clear error. Under torchrun: the measurements over
ranks, the grid spread over ranks, two nodes meeting by rendezvous, and a rank killed mid-run."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from run_helpers import in_process

from transformer import MultiHeadAttention
from transformer.layers import EncoderLayer
from transformer.parallel import HeadParallelEncoderLayer, HeadParallelMultiHeadAttention

WORLD = 2


def _init(rank, store, world=WORLD):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)  # the same single-device module and inputs on every rank


def _grads(module, x):
    return {n: p.grad.clone() for n, p in module.named_parameters()}, x.grad.clone()


def _mha_case(rank, store, world):
    _init(rank, store, world)
    try:
        for strategy in ("sdpa", "batched"):
            single = MultiHeadAttention(16, 4, strategy=strategy)
            x = torch.randn(3, 5, 16)
            padding = torch.tensor([[False] * 5, [False, False, False, True, True], [False] * 4 + [True]])
            for combine in ("allreduce", "allgather"):
                par = HeadParallelMultiHeadAttention.from_single(single, combine)
                assert par.local_heads == 4 // world
                for kwargs in ({}, {"key_padding_mask": padding}, {"causal": True}):
                    xs, xp = x.clone().requires_grad_(), x.clone().requires_grad_()
                    single.zero_grad(), par.zero_grad()
                    ref, out = single(xs, **kwargs), par(xp, **kwargs)
                    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
                    (ref ** 2).sum().backward()
                    (out ** 2).sum().backward()
                    torch.testing.assert_close(xp.grad, xs.grad, atol=1e-5, rtol=1e-5)  # the input's, all-reduced
                    rows, d = par.head_slice, 16
                    g = single.in_proj_weight.grad
                    torch.testing.assert_close(par.in_proj_weight.grad,
                                               torch.cat([g[j * d:(j + 1) * d][rows] for j in range(3)]),
                                               atol=1e-5, rtol=1e-5)
                    wo = single.out_proj.weight.grad
                    torch.testing.assert_close(par.out_proj_weight.grad, wo[:, rows] if combine == "allreduce" else wo,
                                               atol=1e-5, rtol=1e-5)
                    torch.testing.assert_close(par.out_proj_bias.grad, single.out_proj.bias.grad, atol=1e-5, rtol=1e-5)
            # cross-attention: queries of one length, keys and values of another
            par = HeadParallelMultiHeadAttention.from_single(single, "allgather")
            mem = torch.randn(3, 7, 16)
            torch.testing.assert_close(par(x, mem, mem), single(x, mem, mem), atol=1e-5, rtol=1e-5)
    finally:
        dist.destroy_process_group()


def _layer_case(rank, store, world):
    _init(rank, store, world)
    try:
        for norm_first in (False, True):
            single = EncoderLayer(16, 4, 32, norm_first=norm_first)
            x = torch.randn(2, 6, 16)
            padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
            for combine in ("allreduce", "allgather"):
                par = HeadParallelEncoderLayer.from_single(single, combine)
                xs, xp = x.clone().requires_grad_(), x.clone().requires_grad_()
                single.zero_grad()
                ref, out = single(xs, padding), par(xp, padding)
                torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
                ref.sum().backward()
                out.sum().backward()
                torch.testing.assert_close(xp.grad, xs.grad, atol=1e-5, rtol=1e-5)
                units = slice(rank * 32 // world, (rank + 1) * 32 // world)
                torch.testing.assert_close(par.ffn.w1.grad, single.ffn.linear1.weight.grad[units], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(par.ffn.w2.grad, single.ffn.linear2.weight.grad[:, units],
                                           atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(par.norm1.weight.grad, single.norm1.weight.grad, atol=1e-5, rtol=1e-5)
    finally:
        dist.destroy_process_group()


def _bad_input_case(rank, store, world):
    assert world == WORLD
    _init(rank, store)
    try:
        with pytest.raises(ValueError, match="num_heads=3 is not divisible by the world size 2"):
            HeadParallelMultiHeadAttention(15, 3)
        with pytest.raises(ValueError, match="unknown combine 'concat'"):
            HeadParallelMultiHeadAttention(16, 4, combine="concat")
        with pytest.raises(ValueError, match="d_ff=33 is not divisible by the world size 2"):
            HeadParallelEncoderLayer.from_single(EncoderLayer(16, 4, 33))
        # each rank given its own sequence length: one clear error on every rank, not a gloo abort
        par = HeadParallelMultiHeadAttention.from_single(MultiHeadAttention(16, 4))
        with pytest.raises(ValueError, match=r"the same shapes on every rank; got rank 0: query \(2, 5, 16\), key "
                                             r"\(2, 5, 16\), value \(2, 5, 16\); rank 1: query \(2, 6, 16\)"):
            par(torch.randn(2, 5 + rank, 16))
        assert par(torch.randn(2, 5, 16)).shape == (2, 5, 16)  # the group still works
    finally:
        dist.destroy_process_group()


def _cases(rank, store, world, cases):
    """Each of ``cases`` in turn, each in a process group of its own: one start of ``world`` processes (each
    imports torch) for all of them."""
    for i, case in enumerate(cases):
        case(rank, f"{store}-{i}", world)


@pytest.mark.parametrize("world, cases", [(2, (_mha_case, _layer_case, _bad_input_case)),
                                          (4, (_mha_case, _layer_case))], ids=["2-ranks", "4-ranks"])
@pytest.mark.slow
def test_gloo_ranks_match_the_single_process_module(world, cases, tmp_path):
    """Multi-head attention and the encoder layer, split over the ranks, against the single-process module
    (outputs and gradients); at 2 ranks, bad input too."""
    mp.start_processes(_cases, args=(str(tmp_path / "store"), world, cases), nprocs=world, start_method="spawn")


def test_the_forward_its_compute_and_its_collectives_are_timed_in_the_same_mirrored_blocks(tmp_path, monkeypatch):
    from benchmarks.core.ranks import head_parallel

    class Clock:  # a fake clock each function advances by its cost: the shares hold on a busy machine
        now = 0.0

        @classmethod
        def perf_counter(cls):
            return cls.now

    def cost(name, t):
        order.append(name)
        Clock.now += t

    monkeypatch.setattr(head_parallel, "time", Clock)
    order = []
    fns = {name: (lambda name=name, t=t: cost(name, t)) for name, t in
           (("forward", 0.004), ("compute", 0.003), ("comm", 0.001))}
    _init(0, str(tmp_path / "store"), world=1)
    try:
        blocks = head_parallel.lockstep_blocks(fns, torch.device("cpu"), min_run_time=0.03, repeats=4)
    finally:
        dist.destroy_process_group()
    timed = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]  # runs of one function
    # after each one's probe: A B C, C B A, A B C, C B A (a function run twice in a row reads as one run)
    assert timed[3:] == ["forward", "compute", "comm", "compute", "forward", "compute", "comm", "compute", "forward"]
    assert {k: len(v) for k, v in blocks.items()} == {"forward": 4, "compute": 4, "comm": 4}
    shares = [c / (c + w) for c, w in zip(blocks["comm"], blocks["compute"], strict=True)]
    assert shares == pytest.approx([0.25] * 4)  # 1 ms of 4 ms in every block
    assert blocks["forward"] == pytest.approx([0.004] * 4)  # seconds per call: the block's time over its calls


def test_without_a_process_group_the_error_says_so():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="need torch.distributed initialised"):
        HeadParallelMultiHeadAttention(16, 4)


# -- the measurements over ranks (attention-bench ranks under torchrun) --------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def torchrun(ranks, *args):
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
                           "--master_port", str(29500 + ranks + os.getpid() % 1000), "-m", "attention_bench", "ranks",
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def two_nodes(out, *args):
    """The README's two-machine command (c10d rendezvous, one rank per node), both nodes on this machine: each
    node's (exit code, stdout, stderr)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
               f"--rdzv_endpoint=127.0.0.1:{29300 + os.getpid() % 1000}", f"--rdzv_id=test{os.getpid()}",
               "-m", "attention_bench", "ranks", "--out", out, *args]
    nodes = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    said = [node.communicate(timeout=300) for node in nodes]
    return [(node.returncode, *out) for node, out in zip(nodes, said, strict=True)]


@pytest.mark.slow
def test_one_rank_and_two_nodes_meeting_by_rendezvous_share_a_folder_and_the_report_reads_their_scaling(tmp_path):
    """One rank, then two ranks on two nodes that meet through torchrun's rendezvous (the README's two-machine
    command, both nodes on this machine), into one run folder; a rerun's resume is the killed-rank test's."""
    import json

    from reports import tidy
    from reports.analyses import c3_parallel

    out = str(tmp_path / "run")
    done = torchrun(1, "--grid", "quick", "--out", out, "--min-run-time", "0.02", "--machine", "box")
    assert done.returncode == 0 and "1 ranks (gloo): ok 4" in done.stdout, done.stderr[-2000:]
    # the performance model prices no head-parallel case: its constants are neither measured nor kept
    assert "performance model's constants" not in done.stderr
    assert json.loads((tmp_path / "run" / "machine.json").read_text())["constants"] == {}
    nodes = two_nodes(out, "--grid", "quick", "--min-run-time", "0.02", "--machine", "box")
    assert [code for code, _, _ in nodes] == [0, 0], [err[-2000:] for _, _, err in nodes]
    assert sum("2 ranks (gloo): ok 4" in stdout for _, stdout, _ in nodes) == 1  # rank 0, on one of the nodes
    records = [json.loads(p.read_text()) for p in (tmp_path / "run" / "cases").iterdir()]
    assert {(r["params"]["ranks"], r["hosts"]) for r in records} == {(1, 1), (2, 1)}  # both nodes on one host
    t = tidy.load([out])
    rows = t[(t.area == "parallel") & (t.metric == "time")]
    assert len(rows) == 8 and set(rows.ranks) == {1, 2} and set(rows.backend) == {"gloo"}
    assert set(rows["combine"]) == {"allreduce", "allgather"} and (rows.status == "ok").all()
    # each time's spread is over its timed blocks (the slowest rank's quartiles), not a zero-width guess
    assert (rows.samples == 5).all() and (rows.q25 <= rows.value).all() and (rows.value <= rows.q75).all()
    assert (rows.q75 > rows.q25).any()
    moved = t[(t.metric == "comm_bytes") & (t.ranks == 2)].set_index("combine").value
    b, n, d = 2, 64, 64  # the quick grid: ring all-reduce moves 2(w-1)/w of the output, all-gather (w-1) slices
    assert moved["allreduce"].max() == 2 * (2 - 1) / 2 * b * n * d * 4
    assert moved["allgather"].max() == b * n * (d // 2) * 4
    assert (t[(t.metric == "comm_bytes") & (t.ranks == 1)].value == 0).all()
    # what each rank sent, read from the network interfaces: the payload plus TCP/IP headers, never less
    wire = t[(t.metric == "comm_bytes_measured") & (t.ranks == 2)].set_index(["combine", "heads"]).value
    counted = t[(t.metric == "comm_bytes") & (t.ranks == 2)].set_index(["combine", "heads"]).value
    assert len(wire) == 4 and ((wire / counted).between(1.0, 1.15)).all(), (wire / counted)
    a = c3_parallel.analyse(t)
    assert not a.missing and len(a.tables["strong_scaling"]) == 4 and len(a.tables["weak_scaling"]) == 2
    assert "On 2 ranks against one" in a.verdict and "shared one machine's" in a.verdict
    inside = a.tables["strong_scaling"].comm_in_layer_share
    assert inside.notna().all() and (inside < 1).all()
    assert (f"inside the layer (end to end minus the same forward without them) they add {inside.median():.0%}"
            in a.verdict)
    assert "Weak scaling (the same heads per rank, h growing with the ranks), median efficiency: 2 ranks" in a.verdict
    ratio = (wire / counted).median()
    assert (f"The bytes each rank sent, read from the network interfaces, were {ratio:.2f}× the ring algorithms' "
            "count") in a.verdict


def test_bad_launches_are_clear_errors(tmp_path, capsys, monkeypatch):
    """Refused before a rank joins a group, so in this process: without torchrun's environment, and with it (one
    rank's) but a backend or grid this machine cannot give. The launches themselves are the torchrun tests'."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    code, err = in_process(capsys, "ranks", "--out", str(tmp_path))
    assert code == 2 and "launch with torchrun" in err
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "127.0.0.1"),
                        ("MASTER_PORT", "29500")):
        monkeypatch.setenv(name, value)
    if not torch.cuda.is_available():
        code, err = in_process(capsys, "ranks", "--backend", "nccl", "--out", str(tmp_path))
        assert code == 2 and "--backend nccl needs a CUDA device" in err
    code, err = in_process(capsys, "ranks", "--grid", "huge", "--out", str(tmp_path))
    assert code == 2 and "invalid choice: 'huge'" in err
    assert not dist.is_initialized()


@pytest.mark.slow
def test_the_runner_under_two_ranks_measures_every_case_exactly_once(tmp_path):
    import json

    from benchmarks.core.running import runner
    from reports import tidy

    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port",
                           str(29600 + os.getpid() % 1000), "-m", "attention_bench", "run", "--no-report",
                           "--no-profile", "--pairs-budget", "0", "--grid", "quick", "--area", "depth", "--out",
                           str(out), "--no-progress"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    plan = runner.plan("quick", ["depth"])
    records = [json.loads(p.read_text()) for p in (out / "cases").iterdir()]
    measured = sorted(sorted(r["params"].items()) for r in records)
    assert measured == sorted(sorted(p.items()) for _, p in plan)  # every case, each once
    by_rank = {r["rank"] for r in records}
    assert by_rank == {0, 1} and {r["world_size"] for r in records} == {2}
    assert sum(r["rank"] == 0 for r in records) == len(plan[0::2])
    assert f"all 2 ranks: failed 0, ok {len(plan)}" in done.stdout
    t = tidy.load([str(out)])
    assert (t[(t.metric == "sequential_depth")].status == "ok").sum() == len(plan)  # the report sees them all


@pytest.mark.slow
def test_the_asv_benchmark_spawns_two_ranks_and_tracks_time_and_communication():
    from benchmarks.bench_parallel import HeadParallelAttention
    from reports import asv_table, tidy

    bench = HeadParallelAttention()
    small = ["attention", "allgather", 4, 32, 32, 2, 2, "gloo", "cpu"]  # the benchmark's axes, a small case
    bench.setup(*small)
    assert bench.track_time(*small) > 0 and 0 < bench.track_comm_share(*small) < 1
    assert tidy.asv_method_metric("track_comm_share") == ("forward", "comm_share")
    names = asv_table._asv_param_names("HeadParallelAttention", asv_table._asv_areas(), 9)
    assert names == HeadParallelAttention.param_names


def _worker(launcher: int, local_rank: int) -> int | None:
    """The pid of torchrun's worker process with this LOCAL_RANK (Linux /proc), or None."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if parent == launcher and f"LOCAL_RANK={local_rank}".encode() in env:
            return int(pid)
    return None


@pytest.mark.slow
def test_a_rank_killed_mid_run_stops_the_others_with_a_clear_error_and_a_rerun_completes(tmp_path):
    import json
    import signal

    out = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port",
               str(29700 + os.getpid() % 1000), "-m", "attention_bench", "ranks", "--grid", "quick", "--out", str(out),
               "--min-run-time", "0.3"]
    launched = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / "cases").is_dir() or not list((out / "cases").iterdir()):  # the first case is recorded
        assert launched.poll() is None and time.time() < deadline, launched.communicate()[1][-2000:]
        time.sleep(0.05)
    victim = _worker(launched.pid, 1)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    stdout, stderr = launched.communicate(timeout=120)
    assert launched.returncode != 0
    said = [line for line in stderr.splitlines() if line.startswith("error: rank 0 of 2 stopped")]
    assert len(said) == 1, stderr[-3000:]
    assert "while measuring parallel--forward--" in said[0] and "run the same command again to resume" in said[0]
    assert "Traceback" not in stderr.split("failed (exitcode")[0]  # rank 0 said it in one line, before torchrun
    kept = list((out / "cases").iterdir())
    assert f"The {len(kept)} records in {out / 'cases'} are whole" in said[0]
    assert 1 <= len(kept) < 4 and all(json.loads(p.read_text())["status"] == "ok" for p in kept)  # no partial record
    again = torchrun(2, "--grid", "quick", "--out", str(out), "--min-run-time", "0.02")
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resumed {len(kept)}" in again.stdout and f"ok {4 - len(kept)}" in again.stdout
    assert len(list((out / "cases").iterdir())) == 4


def test_a_rank_that_torchrun_stops_says_what_it_was_measuring_and_that_its_records_are_whole(tmp_path, capsys,
                                                                                            fake_peaks):
    import signal

    from benchmarks.core.ranks.world import RankGuard
    from benchmarks.core.running.runner import Runner, plan

    Runner(str(tmp_path), min_run_time=0.01).run(plan("quick", ["depth"])[:1], progress=False)
    capsys.readouterr()  # what the run said (a busy machine's warning, say) is not the guard's line
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        with RankGuard(1, 2, str(tmp_path), lambda: "attention seq_len=128"):
            os.kill(os.getpid(), signal.SIGTERM)  # what torchrun sends the others when one rank dies
            pytest.fail("SIGTERM did not stop the rank")
    assert stopped.value.code == 1 and signal.getsignal(signal.SIGTERM) is before
    said = capsys.readouterr().err
    assert said.startswith("error: rank 1 of 2 stopped while measuring attention seq_len=128: torchrun stopped this "
                           "rank (another rank failed, or the run was cancelled). The 1 records in "
                           f"{tmp_path / 'cases'}")
    with RankGuard(0, 1, str(tmp_path)):  # one rank: nothing changes
        assert signal.getsignal(signal.SIGTERM) is before
    with pytest.raises(ValueError), RankGuard(0, 2, str(tmp_path)):  # other errors pass through
        raise ValueError("a bug")


def test_nccl_with_more_ranks_than_gpus_is_a_clear_error(monkeypatch):
    from benchmarks.core.ranks import head_parallel

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(dist, "is_backend_available", lambda backend: True)
    message = r"--backend nccl needs one GPU per rank on a machine: local rank 1, but 1 GPU\(s\)"
    with pytest.raises(ValueError, match=message):
        head_parallel.init("nccl")


def test_a_torch_without_gloo_is_a_clear_error(monkeypatch):
    from benchmarks.core.ranks import head_parallel
    from benchmarks.core.ranks import world as ranks

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(dist, "is_backend_available", lambda backend: False)
    with pytest.raises(ValueError, match="torch.distributed backend 'gloo' is not available in this torch build"):
        head_parallel.init("gloo")
    with pytest.raises(ValueError, match="this torch build has no torch.distributed gloo backend"):
        ranks.Ranks()
