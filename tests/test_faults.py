"""Faults injected into the suite's entry points: each gets a clear outcome, never a silently wrong one.

Every test here throws one bad input or one broken folder at the real code (a subprocess, a folder on
disk, the Python API) and asserts what a user sees: an error that names the value and what is allowed,
a non-zero exit code, and no result file that was there before changed or lost.
"""

from __future__ import annotations

import math
import statistics
import time

import pytest
import torch

from transformer import MultiHeadAttention, RNNAttentionConfig, TransformerConfig, flops, scaled_dot_product_attention
from transformer.layers import EncoderLayer, PositionalEncoding

# -- model parameters (item 5) and errors that name what the user typed (item 10) --------------------


@pytest.mark.parametrize("make, named, shown", [
    (lambda: TransformerConfig(layer_norm_eps=-1), "layer_norm_eps", "-1"),
    (lambda: TransformerConfig(layer_norm_eps=float("nan")), "layer_norm_eps", "nan"),
    (lambda: TransformerConfig(norm_first="no"), "norm_first", "'no'"),
    (lambda: TransformerConfig(share_embeddings=1), "share_embeddings", "1"),
    (lambda: TransformerConfig(dropout=1.0), "dropout", "1.0"),
    (lambda: TransformerConfig(dropout=-0.1), "dropout", "-0.1"),
    (lambda: TransformerConfig(dropout=float("nan")), "dropout", "nan"),
    (lambda: EncoderLayer(32, 4, 64, layer_norm_eps=0.0), "layer_norm_eps", "0.0"),
    (lambda: EncoderLayer(32, 4, 64, norm_first="yes"), "norm_first", "'yes'"),
    (lambda: EncoderLayer(32, 4, -64), "d_ff", "-64"),
    (lambda: MultiHeadAttention(32, 4, dropout=2), "dropout", "2"),
    (lambda: MultiHeadAttention(32, 4, out_proj="False"), "out_proj", "'False'"),
    (lambda: MultiHeadAttention(32, 4)(torch.randn(1, 3, 32), causal="no"), "causal", "'no'"),
    (lambda: PositionalEncoding(32, dropout=1.5), "dropout", "1.5"),
    (lambda: RNNAttentionConfig(enc_hidden=0), "enc_hidden", "0"),
])
def test_invalid_model_parameters_name_the_argument_and_value(make, named, shown):
    with pytest.raises((ValueError, TypeError)) as error:
        make()
    assert named in str(error.value) and shown in str(error.value)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), 0.0, -1.0])
def test_attention_scale_must_be_finite_and_positive(scale):
    q = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match=f"scale must be a finite number > 0, got {scale!r}"):
        scaled_dot_product_attention(q, q, q, scale=scale)


@pytest.mark.parametrize("call, named, shown", [
    (lambda: flops.transformer(TransformerConfig.preset("tiny"), -8, 16, 16), "batch", "-8"),
    (lambda: flops.transformer(TransformerConfig.preset("tiny"), 8, 0, 16), "n_src", "0"),
    (lambda: flops.transformer_generate(TransformerConfig.preset("tiny"), 8, -1, 4), "n_src", "-1"),
    (lambda: flops.multi_head_attention(-2, 16, 32, 4), "batch", "-2"),  # not "batch*h = -8"
    (lambda: flops.multi_head_attention(2, 16, 32, 4, n_k=-3), "n_k", "-3"),
    (lambda: flops.multi_head_attention(2, 16, 30, 4), "d_model=30", "num_heads=4"),  # not "d_head=7.5"
    (lambda: flops.attention(2, -16, 16, 8), "n_q", "-16"),
    (lambda: flops.rnn_attention(RNNAttentionConfig.preset("tiny"), 2, 16, -1), "n_tgt", "-1"),
    (lambda: flops.rnn_attention_generate(RNNAttentionConfig.preset("tiny"), 0, 16, 4), "batch", "0"),
    (lambda: flops.useful_attention_flops(2, 16, 16, -64), "d_head", "-64"),
])
def test_flop_functions_refuse_non_positive_sizes_naming_the_argument(call, named, shown):
    with pytest.raises(ValueError) as error:
        call()
    assert named in str(error.value) and shown in str(error.value)


def test_valid_edge_values_still_work():
    assert math.isclose(scaled_dot_product_attention(*(torch.ones(1, 2, 4),) * 3, scale=1.0).sum().item(), 8.0)
    TransformerConfig(dropout=0.0, layer_norm_eps=1e-12, norm_first=True)
    assert flops.attention(1, 1, 1, 1).forward.matmul_total == 4


# -- fully masked rows (item 2) ----------------------------------------------------------------------

def _masked_inputs(strategy=None):
    q = torch.randn(2, 4, 3, 8)
    keep = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    keep[0, :, 1] = False  # query 1 of batch 0 may attend to no key
    return q, torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8), keep


@pytest.mark.parametrize("backend", ["math", "sdpa"])
@pytest.mark.parametrize("additive", [False, True])
def test_a_query_with_every_key_masked_attends_to_nothing(backend, additive):
    q, k, v, keep = _masked_inputs()
    mask = keep if not additive else torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    out = scaled_dot_product_attention(q, k, v, mask, backend=backend)
    assert not out.isnan().any()
    assert (out[0, :, 1] == 0).all()  # the fully masked row: zero output
    unmasked = scaled_dot_product_attention(q[1:], k[1:], v[1:], backend=backend)
    torch.testing.assert_close(out[1:], unmasked)  # other rows untouched
    if backend == "math":
        _, weights = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
        assert (weights[0, :, 1] == 0).all() and torch.allclose(weights[1].sum(-1), torch.ones(4, 3))


@pytest.mark.parametrize("strategy", ["batched", "looped", "sdpa"])
def test_all_padding_keys_give_zero_heads_with_every_strategy(strategy):
    mha = MultiHeadAttention(16, 4, strategy=strategy, bias=False).eval()
    x = torch.randn(2, 3, 16)
    padding = torch.tensor([[True, True, True], [False, False, True]])
    out = mha(x, key_padding_mask=padding)
    assert not out.isnan().any() and (out[0] == 0).all()  # no bias: W_O maps the zero heads to 0


def _padded_batch(lengths, vocab, n):
    tokens = torch.randint(1, vocab, (len(lengths), n))
    padding = torch.arange(n)[None, :] >= torch.tensor(lengths)[:, None]
    return tokens.masked_fill(padding, 0), padding


@pytest.mark.parametrize("strategy", ["batched", "looped", "sdpa"])
def test_transformer_on_a_padded_batch_equals_each_sequence_alone(strategy):
    from transformer import Transformer

    model = Transformer.from_preset("tiny", strategy=strategy).eval()
    src, src_pad = _padded_batch([7, 3, 5], 64, 7)
    tgt, tgt_pad = _padded_batch([6, 2, 4], 64, 6)
    with torch.no_grad():
        batch = model(src, tgt, src_pad, tgt_pad)
        generated = model.generate(src, 5, bos_id=1, src_key_padding_mask=src_pad)
        for i, (ns, nt) in enumerate([(7, 6), (3, 2), (5, 4)]):
            alone = model(src[i:i + 1, :ns], tgt[i:i + 1, :nt])
            torch.testing.assert_close(batch[i:i + 1, :nt], alone, atol=1e-5, rtol=1e-5)
            assert torch.equal(generated[i], model.generate(src[i:i + 1, :ns], 5, bos_id=1)[0])


def test_transformer_with_left_padded_targets_or_an_empty_source_gives_no_nan():
    from transformer import Transformer

    model = Transformer.from_preset("tiny", strategy="batched").eval()
    src, tgt = torch.randint(1, 64, (2, 5)), torch.randint(1, 64, (2, 4))
    left = torch.tensor([[True, True, False, False], [False] * 4])  # rows 0-1 of target 0 see no key
    empty = torch.tensor([[True] * 5, [False] * 5])  # source 0 is all padding
    with torch.no_grad():
        assert not model(src, tgt, tgt_key_padding_mask=left).isnan().any()
        assert not model(src, tgt, src_key_padding_mask=empty).isnan().any()


def test_rnn_on_a_padded_batch_equals_each_sequence_alone_and_refuses_an_empty_source():
    from transformer import RNNAttention

    model = RNNAttention.from_preset("tiny").eval()
    src, src_pad = _padded_batch([6, 2], 64, 6)
    tgt = torch.randint(1, 64, (2, 4))
    with torch.no_grad():
        batch = model(src, tgt, src_pad)
        for i, n in enumerate([6, 2]):
            torch.testing.assert_close(batch[i:i + 1], model(src[i:i + 1, :n], tgt[i:i + 1]), atol=1e-5, rtol=1e-5)
        with pytest.raises(ValueError, match="every position of row 1 as padding"):
            model(src, tgt, torch.tensor([[False] * 6, [True] * 6]))


# -- result folders: runs kept apart, never pooled, never emptied (items 1, 4) ----------------------

import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pandas as pd  # noqa: E402

from benchmarks import runner as runner_cli  # noqa: E402
from benchmarks.core import machine, records, runner  # noqa: E402
from reports import tidy  # noqa: E402
from reports.__main__ import main as reports_main  # noqa: E402
from reports.analyses import c1_length, heads, registry, runs  # noqa: E402

PLAN = [("models", {"model": "transformer", "preset": "tiny", "seq_len": 16, "batch": 8, "device": "cpu"}),
        ("models", {"model": "rnn-width", "preset": "tiny", "seq_len": 16, "batch": 8, "device": "cpu"})]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def fake_peaks(monkeypatch):
    monkeypatch.setattr(machine, "calibrate", lambda threads=(): {
        machine.peak_key("cpu", "float32", t): 1e11 for t in (None, *threads)})


def measure(folder, plan=PLAN, name="vm", rounds=1):
    runner.Runner(str(folder), min_run_time=0.01, name=name, rounds=rounds).run(plan, progress=False)
    return str(folder)


def files(folder):
    """Every file under ``folder`` with its bytes: what must not change."""
    out = {}
    for root, _, names in os.walk(folder):
        for n in names:
            with open(os.path.join(root, n), "rb") as f:
                out[os.path.relpath(os.path.join(root, n), folder)] = f.read()
    return out


def test_git_failure_is_recorded_with_its_reason(monkeypatch):
    monkeypatch.setenv("GIT_DIR", "/nonexistent")  # git cannot read the checkout
    sha, why = records.git_head()
    assert sha is None and "git rev-parse HEAD failed" in why


@pytest.mark.slow
def test_a_run_without_a_commit_is_kept_and_labelled_next_to_one_with_a_commit(tmp_path, fake_peaks, monkeypatch):
    with_commit = measure(tmp_path / "with-commit")
    monkeypatch.setattr(runner, "git_head", lambda: (None, "git rev-parse HEAD failed: dubious ownership"))
    monkeypatch.setattr(runner, "commit", lambda: None)
    without = measure(tmp_path / "no-commit")  # measured later: the latest run
    t = tidy.load([with_commit, without])
    listed = tidy.runs(t)
    assert listed.loc[os.path.normpath(without), "commit"] == "none: git rev-parse HEAD failed: dubious ownership"
    used = runs.latest(t)
    assert set(used.run) == {os.path.normpath(without)} and (used.status == "ok").any()
    first = registry.run_all(t)[0]
    assert "no models results" not in first.missing and "as fast" in first.verdict  # not "No ... results"
    assert reports_main(["build", with_commit, without, "--report", str(tmp_path / "r")]) == 0
    page = open(tmp_path / "r" / "index.html").read()
    assert "dubious ownership" in page and "<img" in page


def test_two_runs_of_one_machine_are_not_pooled(tmp_path, fake_peaks):
    old = measure(tmp_path / "quick")
    new = measure(tmp_path / "default", PLAN[:1])  # later, fewer cases
    t = tidy.load([old, new])
    used = runs.latest(t)
    assert set(used.run) == {os.path.normpath(new)}
    assert set(used[used.area == "models"].model.dropna()) == {"transformer"}  # nothing borrowed from the older run
    assert len(used[used.metric == "gemm_peak_flops_per_s"]) == len(t[(t.metric == "gemm_peak_flops_per_s")
                                                                      & (t.run == os.path.normpath(new))])
    page = tmp_path / "r"
    assert reports_main(["build", old, new, "--report", str(page)]) == 0
    assert "no: an older run of this machine" in open(page / "index.html").read()


def test_the_same_folder_twice_is_read_once_and_compare_needs_two_runs(tmp_path, fake_peaks, capsys):
    run = measure(tmp_path / "a")
    once = tidy.load([run])
    assert len(tidy.load([run, run + "/", str(tmp_path / "." / "a")])) == len(once)
    before = files(tmp_path)
    for argv in (["compare", run, run], ["compare", run]):
        assert reports_main(argv + ["--report", str(tmp_path / "cmp")]) == 2
        assert "compare needs two runs or more" in capsys.readouterr().err
    assert files(tmp_path) == before and not os.path.exists(tmp_path / "cmp")


# -- bad command-line values, checked before anything runs (items 3, 9, 11, 12) -----------------------

def cli(*args, module="reports"):
    """The command in a real subprocess, as a user runs it."""
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def in_process(capsys, *args, module="reports"):
    """The command's main() in this process (faster); (exit code, stderr)."""
    from benchmarks import profile

    main = {"reports": reports_main, "benchmarks.runner": runner_cli.main, "benchmarks.profile": profile.main}[module]
    try:
        code = main(list(args))
    except SystemExit as exit:  # argparse's errors
        code = exit.code
    return code, capsys.readouterr().err


@pytest.mark.slow
def test_min_run_time_nan_in_a_real_subprocess(tmp_path):
    done = cli("--min-run-time", "nan", "--out", str(tmp_path / "run"), "--no-progress")
    assert done.returncode == 2 and "--min-run-time: must be a finite number of seconds > 0, got 'nan'" in done.stderr
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "abc"])
@pytest.mark.parametrize("module", ["reports", "benchmarks.runner"])
def test_min_run_time_must_be_a_finite_positive_number(tmp_path, capsys, value, module):
    code, err = in_process(capsys, f"--min-run-time={value}", "--out", str(tmp_path / "run"), "--no-progress",
                           module=module)
    assert code == 2 and "--min-run-time" in err and value in err
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("value", ["0", "-3", "2.5", "five"])
@pytest.mark.parametrize("module", ["reports", "benchmarks.runner"])
def test_rounds_must_be_a_whole_number_of_at_least_one(tmp_path, capsys, value, module):
    code, err = in_process(capsys, f"--rounds={value}", "--out", str(tmp_path / "run"), "--no-progress",
                           module=module)
    assert code == 2 and f"--rounds: must be a whole number >= 1, got {value!r}" in err
    assert not os.path.exists(tmp_path / "run")


def test_python_api_refuses_nan_seconds(tmp_path):
    with pytest.raises(ValueError, match="min_run_time must be a finite number of seconds > 0, got nan"):
        runner.Runner(str(tmp_path), min_run_time=float("nan"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("module", ["reports", "benchmarks.runner"])
def test_asking_for_a_missing_gpu_is_an_error_that_replaces_nothing(tmp_path, module):
    report = tmp_path / "report"
    report.mkdir()
    (report / "index.html").write_text("a good report")
    done = cli("--device", "cuda", "--out", str(tmp_path / "run"), "--report", str(report), "--no-progress",
               module=module) if module == "reports" else cli("--device", "cuda", "--out", str(tmp_path / "run"),
                                                                module=module)
    assert done.returncode == 2 and "no CUDA device" in done.stderr and "allowed here: cpu" in done.stderr
    assert (report / "index.html").read_text() == "a good report" and not os.path.exists(tmp_path / "run")


def test_a_report_of_nothing_measured_is_refused(tmp_path, fake_peaks, capsys):
    cuda_only = [("attention", {"seq_len": 128, "d_head": 64, "backend": "math", "causal": False, "dtype": "float32",
                                "device": "cuda"})]
    run = measure(tmp_path / "run", cuda_only)
    report = tmp_path / "report"
    report.mkdir()
    (report / "index.html").write_text("a good report")
    if torch.cuda.is_available():
        pytest.skip("the CUDA case runs here")
    assert reports_main(["build", run, "--report", str(report)]) == 2
    err = capsys.readouterr().err
    assert "no case was measured" in err and "skipped" in err and "left as it is" in err
    assert (report / "index.html").read_text() == "a good report"


@pytest.mark.slow
def test_replacing_a_report_says_what_it_replaced(tmp_path, fake_peaks, capsys):
    run = measure(tmp_path / "run")
    assert reports_main(["build", run, "--report", str(tmp_path / "r")]) == 0
    assert "replaced" not in capsys.readouterr().err
    assert reports_main(["build", run, "--report", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert f"replaced the report in {tmp_path / 'r'}" in err and run in err


@pytest.mark.parametrize("make_bad", [
    lambda p: p.write_text("a file") and str(p),  # --out is a file
    lambda p: p.write_text("a file") and str(p / "sub"),  # its parent is a file
])
def test_an_output_path_that_cannot_be_a_folder_is_refused_before_measuring(tmp_path, capsys, make_bad):
    bad = make_bad(tmp_path / "taken")
    for module in ("reports", "benchmarks.runner", "benchmarks.profile"):
        extra = ["--set", "quick"] if module == "benchmarks.profile" else ["--grid", "quick", "--no-progress"]
        code, err = in_process(capsys, "--out", bad, *extra, module=module)
        assert code == 2 and bad in err and "--out" in err, err
    assert (tmp_path / "taken").read_text() == "a file"
    code, err = in_process(capsys, "--report", str(tmp_path / "taken" / "r"), "--out", str(tmp_path / "run"),
                           "--no-progress")
    assert code == 2 and "--report" in err and not os.path.exists(tmp_path / "run" / "cases")


def test_a_folder_that_cannot_be_written_is_refused(tmp_path, capsys):
    unwritable = "/proc/attention-bench-run"  # not writable, not even by root
    code, err = in_process(capsys, "--out", unwritable, "--no-progress", module="benchmarks.runner")
    assert code == 2 and f"--out {unwritable!r}: cannot write there" in err


def test_csv_to_a_missing_folder_is_a_clear_error(tmp_path, fake_peaks, capsys):
    run = measure(tmp_path / "run")
    assert reports_main(["csv", run, "--out", "/nonexistent/dir/x.csv"]) == 2
    assert "the folder '/nonexistent/dir' does not exist" in capsys.readouterr().err
    assert reports_main(["csv", run, "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_no_results_tells_not_run_from_all_skipped(tmp_path, fake_peaks):
    cuda_models = [("models", {**PLAN[0][1], "device": "cuda"})]
    if torch.cuda.is_available():
        pytest.skip("the CUDA case runs here")
    t = tidy.load([measure(tmp_path / "run", cuda_models + [("depth", {"model": "transformer", "preset": "tiny",
                                                                         "mode": "forward", "seq_len": 8})])])
    c1 = c1_length.analyse_sequence_length(t)
    assert "all 3 cases of the models area were run and none was measured" in c1.verdict
    assert "skipped" in c1.verdict and "CUDA" in c1.verdict
    assert heads.analyse_heads(t).verdict == "No multi-head results: the multihead area was not run."


# -- asv's machine metadata in both environment modes (item 13) -------------------------------------

def test_asv_metadata_path_in_asvs_own_virtualenvs(monkeypatch, tmp_path):
    (tmp_path / "asv.conf.json").write_text('{"version": 1, // a comment, as asv allows\n"results_dir": "out/res"}')
    monkeypatch.setenv("ASV_CONF_DIR", str(tmp_path))
    monkeypatch.setenv("ASV_ENV_NAME", "virtualenv-py3.11-torch2.13.0")
    path = machine.asv_metadata_path()
    assert path.startswith(str(tmp_path / "out" / "metadata" / "virtualenv-py3.11-torch2.13.0-"))


@pytest.mark.slow
def test_asv_run_with_an_existing_environment_writes_the_metadata_the_report_reads(tmp_path):
    """A real ``asv run -E existing`` (which sets no ASV_* variables) in a copy of this project."""
    project, home = tmp_path / "project", tmp_path / "home"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    for name in listed.stdout.splitlines():
        if os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(project / os.path.dirname(name), exist_ok=True)
            shutil.copyfile(os.path.join(ROOT, name), project / name)
    git = ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "copy"], ["branch", "-M", "main"]):
        subprocess.run(git + cmd, cwd=project, check=True, capture_output=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True).stdout.strip()
    env = {**os.environ, "HOME": str(home), "ATTENTION_BENCH_GRID": "quick"}
    env = {k: v for k, v in env.items() if not k.startswith("ASV_")}
    asv = [sys.executable, "-m", "asv"]
    subprocess.run(asv + ["machine", "--yes", "--machine", "box"], cwd=project, env=env, check=True,
                   capture_output=True)
    done = subprocess.run(asv + ["run", "-E", f"existing:{sys.executable}", "--quick", "--machine", "box",
                                 "--bench", "SelfAttentionVsRecurrentLayer.track_matmul_flops",
                                 "--set-commit-hash", sha],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    written = os.listdir(project / ".asv" / "metadata")
    assert written == [f"existing-py{sys.executable.replace(os.sep, '_')}-{machine.metadata()['hostname']}.json"]
    t = tidy.load([str(project / ".asv" / "results")])
    assert set(t.torch) == {torch.__version__} and set(t.machine) == {"box"}


# -- corrupt records, empty folders (items 7, 8) and the end-of-run summary ---------------------------

@pytest.mark.slow
def test_a_truncated_record_is_named_skipped_by_the_report_and_set_aside_and_remeasured(tmp_path, fake_peaks,
                                                                                          capsys):
    run = measure(tmp_path / "run")
    cut = sorted((tmp_path / "run" / "cases").iterdir())[0]
    whole = cut.read_text()
    cut.write_text(whole[: len(whole) // 2])
    t = tidy.load([run])  # the report reads the rest and names the bad file
    bad = t[t.status == "unreadable"]
    assert len(bad) == 1 and cut.name in bad.reason.iloc[0] and "JSONDecodeError" in bad.reason.iloc[0]
    assert bad.area.iloc[0] == "models" and bad.seq_len.iloc[0] == 16  # which case, from the file name
    assert (t.status == "ok").sum() > 0
    assert reports_main(["build", run, "--report", str(tmp_path / "r")]) == 0
    assert "1 unreadable records skipped" in open(tmp_path / "r" / "index.html").read()
    capsys.readouterr()

    others = {p.name: p.read_text() for p in (tmp_path / "run" / "cases").iterdir() if p != cut}
    r = runner.Runner(run, min_run_time=0.01, name="vm")
    counts = r.run(PLAN, progress=False)  # resuming sets it aside and measures that method again, only it
    assert counts["resumed"] == 1 and counts["ok"] == 1
    assert {p.name: p.read_text() for p in (tmp_path / "run" / "cases").iterdir() if p != cut} == others
    assert records.read_json(str(cut))["status"] == "ok"
    kept = os.listdir(tmp_path / "run" / "set-aside")
    assert len(kept) == 1 and (tmp_path / "run" / "set-aside" / kept[0]).read_text() == whole[: len(whole) // 2]
    text = r.summary(counts)
    assert "set aside      1 unreadable records" in text and f"results in     {run}" in text
    assert cut.name in capsys.readouterr().err


def test_a_corrupt_machine_record_is_set_aside_by_the_runner_and_named_by_the_report(tmp_path, fake_peaks, capsys):
    run = measure(tmp_path / "run")
    (tmp_path / "run" / "machine.json").write_text("{")
    assert reports_main(["build", run, "--report", str(tmp_path / "r")]) == 2
    assert "machine.json: not a JSON record" in capsys.readouterr().err
    runner.Runner(run, min_run_time=0.01, name="vm").run(PLAN, progress=False)
    assert records.read_json(str(tmp_path / "run" / "machine.json"))["gemm_peaks"]


def test_a_folder_interrupted_after_calibration_gets_a_one_line_error(tmp_path, fake_peaks, capsys):
    r = runner.Runner(str(tmp_path / "run"), min_run_time=0.01, name="vm")
    r.calibrate([1])  # machine.json written, no case yet
    assert reports_main(["build", str(tmp_path / "run"), "--report", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no case was measured (no case records)") and "Traceback" not in err


def test_the_run_summary_names_skips_failures_and_noisy_cases():
    ok = {"area": "models", "method": "forward", "params": {"seq_len": 16}, "status": "ok", "reason": None,
          "time_median_s": 1.0, "time_iqr_s": 0.5}
    skipped = {**ok, "status": "skipped", "reason": "needs a CUDA device"}
    failed = {**ok, "status": "failed", "reason": "RuntimeError: boom"}
    text = runner.summary("out", [ok, skipped, skipped, failed], {"ok": 1, "skipped": 2, "failed": 1}, [])
    assert "skipped        2: 2 × needs a CUDA device" in text and "failed         1: 1 × RuntimeError: boom" in text
    assert "noisy          1 with IQR/median > 10%: models--forward--seq_len=16 (50%)" in text
    assert "unreplicated   0 timed over fewer than 3 values" in text  # no sample count: an older record
    once = {**ok, "params": {"seq_len": 64}, "time_median_s": 0.7, "time_iqr_s": 0.0, "samples": 1}
    text = runner.summary("out", [ok, {**ok, "samples": 40}, once], {"ok": 3}, [])
    assert ("unreplicated   1 timed over fewer than 3 values, so no spread measured (--rounds R times each R times, "
            "spread over the run): models--forward--seq_len=64 (0.7 s)") in text
    # the two with a wide spread; the one-value case's spread is unknown, not wide
    assert "noisy          2 with" in text


def test_the_page_lists_cases_whose_spread_was_not_measured(tmp_path):
    from reports import html
    from reports.analyses import noise

    base = {"source": "runner", "run": "r", "machine": "m", "commit": "c", "area": "models", "method": "forward",
            "metric": "time", "unit": "s", "status": "ok", "model": "transformer", "device": "cpu"}
    base["date"] = "2026-12-04T08:00:00+00:00"
    t = tidy._frame([{**base, "seq_len": 16, "value": 0.2, "q25": 0.19, "q75": 0.21, "iqr": 0.02, "samples": 9},
                     {**base, "seq_len": 64, "value": 0.7, "q25": 0.7, "q75": 0.7, "iqr": 0.0, "samples": 1},
                     {**base, "seq_len": 32, "value": 0.4, "q25": 0.4, "q75": 0.4, "iqr": 0.0}])
    thin = noise.unreplicated_cases(t)
    assert thin.seq_len.tolist() == [64] and thin.samples.tolist() == [1]  # unknown counts are not guessed
    page = open(html.build(t, str(tmp_path / "report"))).read()
    assert "Unreplicated cases: timed over fewer than 3 values" in page
    assert "<summary>1 unreplicated case</summary>" in page


# -- out of memory: one rule for the runner and asv (item 6) -----------------------------------------

def test_a_cpu_out_of_memory_under_asv_is_recorded_as_out_of_memory(tmp_path, monkeypatch):
    from test_tidy import write_asv_results

    from benchmarks import bench_multihead, cases

    (tmp_path / "asv.conf.json").write_text('{"version": 1, "results_dir": ".asv/results"}')
    monkeypatch.setenv("ASV_CONF_DIR", str(tmp_path))
    monkeypatch.setenv("ASV_ENV_NAME", "virtualenv-py3.11-torch2.13.0")

    def build(area, values):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 68719476736 bytes")

    monkeypatch.setattr(cases, "build", build)
    monkeypatch.setattr(cases, "on_grid", lambda area, values: True)
    bench = bench_multihead.MultiHeadAttention()
    with pytest.raises(cases.Skip, match="out of memory: .*can't allocate memory"):
        bench.setup({}, 1, "batched", True, "cuda")  # asv then records a skip: no value
    root = str(tmp_path / ".asv" / "results")
    write_asv_results(root)  # its (h 1, batched, W_O, cuda) case has no value, as asv stores a skip
    t = tidy.load([root])
    row = t[(t.metric == "time") & (t.heads == 1) & (t.device == "cuda")].iloc[0]
    assert row.status == "oom" and "can't allocate memory" in row.reason
    assert t[(t.metric == "time") & (t.heads == 8) & (t.device == "cuda")].status.iloc[0] == "skipped"


def test_a_cpu_out_of_memory_in_the_runner_is_recorded_and_the_run_goes_on(tmp_path, fake_peaks, monkeypatch):
    from benchmarks import cases

    real = cases.build

    def build(area, params):
        if params["model"] == "transformer":
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
        return real(area, params)

    monkeypatch.setattr(cases, "build", build)
    r = runner.Runner(str(tmp_path / "run"), min_run_time=0.01, name="vm")
    counts = r.run(PLAN, progress=False)
    assert counts["oom"] == 3 and counts["ok"] == 3  # the RNN case still measured
    assert "out of memory  3: 3 × DefaultCPUAllocator: can't allocate memory" in r.summary(counts)


def test_the_page_shows_where_memory_ran_out(tmp_path, fake_peaks):
    run = measure(tmp_path / "run")
    oom = {"area": "models", "method": "forward", "status": "oom",
           "reason": "DefaultCPUAllocator: can't allocate memory",
           "params": {**PLAN[0][1], "seq_len": 4096}, "commit": records.commit(), "started_at": None}
    records.write_json_atomic(str(tmp_path / "run" / "cases" / "oom.json"), oom)
    limits = runs.memory_limits(tidy.load([run]))
    assert list(limits.seq_len) == [4096] and list(limits.largest_n_measured) == [16]
    assert reports_main(["build", run, "--report", str(tmp_path / "r")]) == 0
    assert "Where memory ran out" in open(tmp_path / "r" / "index.html").read()


# -- tables never show NaN, None or <NA> (item 14) ------------------------------------------------------

@pytest.mark.slow
def test_missing_cells_are_dashes_in_the_page_and_in_compare(tmp_path, fake_peaks, capsys):
    import re

    from reports import html

    frame = pd.DataFrame({"n": pd.array([1, None], dtype="Int64"), "name": ["a", None], "x": [1.5, float("nan")],
                          "when": pd.to_datetime(["2026-01-01", None])})
    cells = re.findall(r"<td>([^<]*)</td>", html._html(frame))
    assert cells == ["1", "a", "1.5", "2026-01-01 00:00:00", "—", "—", "—", "—"]
    a, b = measure(tmp_path / "a"), measure(tmp_path / "b")
    assert reports_main(["compare", a, b, "--report", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    page = open(tmp_path / "r" / "index.html").read()
    for text in (out, page):
        assert not re.search(r"\bNaN\b|<NA>|&lt;NA&gt;|\bNone\b|\bNaT\b", text.replace("No ", "")), text
    # the runs' agreement is kept with the compare's report, for docs generated from it (reports.measured)
    from reports import measured
    from reports.analyses import noise

    saved = measured.load(str(tmp_path / "r" / "report.json"))["agreement"]
    assert saved == noise.agreements(tidy.load([a, b])) and len(saved) == 1
    assert (saved[0]["first"], saved[0]["second"]) == (os.path.normpath(a), os.path.normpath(b))
    assert "Run-to-run agreement, " in measured.markdown(measured.load(str(tmp_path / "r" / "report.json")), "r.json",
                                                         ["agreement"])


@pytest.mark.slow
def test_an_agreement_names_the_rounds_each_run_was_timed_in(tmp_path, fake_peaks, capsys):
    from reports import measured

    a, b = measure(tmp_path / "a"), measure(tmp_path / "b", rounds=2)
    t = tidy.load([a, b])
    assert set(t[t.metric == "time"].groupby("run").rounds.max().items()) == {(os.path.normpath(a), 1),
                                                                              (os.path.normpath(b), 2)}
    assert reports_main(["compare", a, b, "--report", str(tmp_path / "r")]) == 0
    assert f"{os.path.normpath(b)} against {os.path.normpath(a)} (timed in 1 and 2 rounds)," in capsys.readouterr().out
    record = measured.load(str(tmp_path / "r" / "report.json"))
    assert record["agreement"][0]["rounds"] == [1, 2]
    assert f"`{os.path.normpath(b)}` against `{os.path.normpath(a)}` (timed in 1 and 2 rounds)," in measured.markdown(
        record, "r.json", ["agreement"])
    assert ", 2 rounds)" in measured.markdown(record, "r.json")  # the analysed run, in the block's first line


# -- noise: interleaved control, normalised times, busy machine, noisy cases (item 16) --------------------

def test_every_cpu_time_has_its_control_and_a_normalised_time(tmp_path, fake_peaks):
    from reports.analyses import noise

    a, b = measure(tmp_path / "a"), measure(tmp_path / "b")
    recs = [records.read_json(str(p)) for p in (tmp_path / "a" / "cases").iterdir()]
    timed = [r for r in recs if r["status"] == "ok" and "time_median_s" in r]
    assert timed and all(r["control_flops_per_s"] > 0 and r["load_average"] is not None for r in timed)
    t = tidy.load([a, b])
    raw, norm = (t[(t.metric == m) & (t.run == os.path.normpath(a))].set_index(["area", "method", "model"]).value
                 for m in ("time", "time_normalised"))
    assert len(raw) == len(norm) and set(raw.index) == set(norm.index)
    assert (norm / raw[norm.index]).between(0.1, 10).all()
    agree = noise.agreement(t, os.path.normpath(a), os.path.normpath(b))
    assert set(agree.index) <= {"time", "time_normalised"} and (agree.worst_gap >= agree.median_gap).all()


def test_a_run_in_rounds_is_normalised_round_by_round_and_keeps_its_best_round(tmp_path):
    """30 cases timed in 2 interleaved rounds. In round 1 the machine's speed flips from case to case (control
    100 then 50 GFLOP/s, the case taking 1 s then 2 s); in round 2 it runs at half speed throughout (50, 2 s).
    Each round scaled by its own control to the run's typical control (50), every case takes 2 s: the
    flips are gone, which a median over neighbouring controls (75 in round 1) would have smeared, and so
    would a control for the record as a whole. The raw time is the median of the rounds; the best round is
    the faster one."""
    from benchmarks.core.measure import combined
    from reports.analyses import noise

    (tmp_path / "cases").mkdir()
    records.write_json_atomic(str(tmp_path / "machine.json"), {
        "machine": {**machine.metadata(), "hostname": "vm"}, "gemm_peaks": {}, "commit": "a" * 40, "name": "vm"})
    at = lambda s: f"2026-12-04T08:{s // 60:02d}:{s % 60:02d}+00:00"  # noqa: E731
    one = lambda start, t, control: {"started_at": at(start), "median_s": t, "q25_s": t, "q75_s": t, "blocks": 1,  # noqa: E731
                                     "calls_per_block": 1, "control_flops_per_s": control}
    for i in range(30):
        fast = i % 2 == 0
        rounds = [one(i, 1.0 if fast else 2.0, 100e9 if fast else 50e9), one(100 + i, 2.0, 50e9)]
        params = {"heads": i + 1, "strategy": "sdpa", "out_proj": True, "device": "cpu"}
        path = tmp_path / "cases" / (records.case_key("multihead", "forward", params) + ".json")
        records.write_json_atomic(str(path), {
            "area": "multihead", "method": "forward", "params": params, "status": "ok", "reason": None,
            "commit": "a" * 40, "started_at": at(i), "threads": 2, **combined(rounds)})
    t = tidy.load([str(tmp_path)]).sort_values("heads")
    value = lambda metric: t[t.metric == metric].value.tolist()  # noqa: E731
    assert value("time") == [1.5, 2.0] * 15
    assert value("time_normalised") == pytest.approx([2.0] * 30)
    assert value("time_best_round") == [1.0, 2.0] * 15
    span = tidy.runs(t).iloc[0]  # the run lasted until its last round, not its first
    assert (span["first"], span["last"]) == (pd.Timestamp(at(0)), pd.Timestamp(at(129)))
    assert set(noise.AGREEMENT_METRICS) >= {"time", "time_normalised", "time_best_round"}


def test_a_busy_machine_is_warned_about_before_the_run(tmp_path, fake_peaks, monkeypatch, capsys):
    import threading

    assert 0 <= runner.cpu_busy(0.2) <= 1
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    monkeypatch.setattr(runner, "cpu_busy", lambda seconds=0.5: 0.93)
    measure(tmp_path / "run", PLAN[:1])
    assert "already busy (other processes use 93% of its 1 cores)" in capsys.readouterr().err
    monkeypatch.undo()
    stop = time.time() + 1.0
    spinners = [threading.Thread(target=lambda: [0 for _ in iter(lambda: time.time() > stop, True)])
                for _ in range(os.cpu_count() or 1)]
    for s in spinners:  # a real busy machine, from this process (threads run while it sleeps)
        s.start()
    measured = runner.cpu_busy(0.5)
    for s in spinners:
        s.join()
    assert measured > 0.3  # Python threads share one core at a time: at least one core is busy


def test_normalised_times_follow_the_machines_drift_not_one_noisy_control():
    base = {"source": "runner", "run": "r", "machine": "vm", "commit": None}

    def record(i, control):
        return {"area": "models", "method": "forward", "params": {"seq_len": i}, "status": "ok", "reason": None,
                "started_at": f"2026-12-04T{i // 60:02d}:{i % 60:02d}:00", "threads": 2, "time_median_s": 1.0,
                "time_q25_s": 1.0, "time_q75_s": 1.0, "time_iqr_s": 0.0, "control_flops_per_s": control}

    # the machine runs at full speed (100) for 40 cases, then at half speed (50) for 40: a slow drift,
    # with one control that misread (5) in the middle of the fast half
    controls = [100.0] * 40 + [50.0] * 40
    controls[20] = 5.0
    rows = tidy._normalised([record(i, c) for i, c in enumerate(controls)], base)
    factor = {r["seq_len"]: r["value"] for r in rows}
    typical = statistics.median(controls)  # the run's typical speed
    assert factor[5] == pytest.approx(100 / typical) and factor[70] == pytest.approx(50 / typical)
    assert factor[20] == pytest.approx(100 / typical)  # the misread control is outvoted by its neighbours
