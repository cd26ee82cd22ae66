"""asv's history site opens offline: ``attention-bench site`` publishes asv's results of two commits of a copy
of this project and a paired history of the same two commits, and headless Chromium, served the site from
localhost with every other host unreachable, draws asv's graph and the paired graph with both commits on each and
reports no error and no failed request. The same asv project's machine metadata is what the report reads.

.ci/run sets ATTENTION_BENCH_REQUIRE_BROWSER=1, so there a missing browser or missing npm packages fail
instead of skipping."""

from __future__ import annotations

import functools
import glob
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest
import torch
from run_helpers import ARTIFACTS, ASV_BENCHMARK, CHROMIUM, chromium_page

from benchmarks.core.hardware import machine
from reports import asv_site, tidy

pytestmark = pytest.mark.slow  # two asv runs, asv publish and Chromium

REQUIRED = os.environ.get("ATTENTION_BENCH_REQUIRE_BROWSER") == "1"
BENCHMARK = ASV_BENCHMARK
#: the same class's paired history (reports.asv_paired)
PAIRED = "bench_layers.SelfAttentionVsRecurrentLayer.track_vs_reference_forward"


def paired_history(folder, commits):
    """A paired history of the layers area's CPU cases over ``commits`` (the first the reference): the second
    commit's cases 10% slower, each with an interval, as ``attention-bench history`` records them."""
    from benchmarks import cases
    from benchmarks.core.records import case_key

    os.makedirs(folder)
    for i, commit in enumerate(commits):
        rows = [{"area": "layers", "method": "forward", "params": p, "case": case_key("layers", "forward", p),
                 "ratio": 1.0 + 0.1 * i, "low": 1.0 + 0.09 * i, "high": 1.0 + 0.11 * i, "rounds": 12}
                for p in cases.select("layers", "quick", device="cpu")]
        with open(os.path.join(folder, f"{commit}.json"), "w") as f:
            json.dump({"kind": "history", "status": "ok", "commit": commit, "reference": commits[0],
                       "generated": "2026-12-05T10:00:00+00:00", "cases": rows}, f)


@pytest.fixture(scope="module")
def site(request, tmp_path_factory):
    """asv results of two commits of a copy of this project (conftest's ``asv_project``, copied) and a paired
    history of the same two commits, published by ``attention-bench site``."""
    if not os.path.isfile(os.path.join(asv_site.MODULES, "jquery", "dist", "jquery.min.js")):
        if REQUIRED:
            pytest.fail(f"no npm packages in {asv_site.MODULES}: run bash scripts/setup.sh --history")
        pytest.skip("no npm packages for the history site (bash scripts/setup.sh --history)")
    shared, env, shas = request.getfixturevalue("asv_project")
    project = tmp_path_factory.mktemp("history") / "project"
    shutil.copytree(shared, project, symlinks=True)
    os.symlink(asv_site.MODULES, project / "reports" / "history_js" / "node_modules")  # as setup.sh --history
    paired_history(project / "results" / "history" / f"{shas[0][:8]}-quick", shas)  # where history writes it
    done = subprocess.run([sys.executable, "-m", "attention_bench", "site", "--machine", "box"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    index = done.stdout.splitlines()[0]
    assert index == str(project / ".asv" / "html" / "index.html")
    return os.path.dirname(index)


def test_the_published_site_loads_nothing_from_another_host(site):
    page = open(os.path.join(site, "index.html")).read()
    assert "https://cdn" not in page and "https://code." not in page
    for _source, target in asv_site.LIBRARIES.values():
        assert f'"{asv_site.VENDOR}/{target}"' in page and os.path.getsize(os.path.join(site, asv_site.VENDOR, target))
    assert "integrity=" not in page  # npm's copies are not the CDN's bytes


def test_a_library_it_does_not_know_is_named(tmp_path):
    (tmp_path / "index.html").write_text('<script src="https://cdn.example.invalid/lib/unknown.min.js"></script>')
    with pytest.raises(ValueError, match=r"https://cdn.example.invalid/lib/unknown.min.js"):
        asv_site.offline(str(tmp_path))
    assert "cdn.example.invalid" in (tmp_path / "index.html").read_text()  # the page is left as it was
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no index.html: run `asv publish` first"):
        asv_site.offline(str(tmp_path / "empty"))


@pytest.mark.skipif(not CHROMIUM and not REQUIRED, reason="no chromium on this machine (apt-get install chromium)")
def test_the_site_draws_asvs_and_the_paired_graph_offline_in_headless_chromium(site):
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "ATTENTION_BENCH_REQUIRE_BROWSER=1 but chromium is not installed"
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(http.server.SimpleHTTPRequestHandler, directory=site))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    errors, remote = [], []
    try:
        with sync_playwright() as p:
            seen = {}
            for name, shot in ((BENCHMARK, "history-graph.png"), (PAIRED, "history-paired-graph.png")):
                browser, page = chromium_page(p, errors)  # a page of its own: asv draws the hash's graph on load
                page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base)
                           else (remote.append(route.request.url), route.abort()))
                page.goto(base + "index.html#" + name, wait_until="networkidle")
                page.wait_for_selector("#graph-display canvas.flot-base", timeout=30_000)
                drawn = page.evaluate(
                    "(() => { const c = document.querySelector('#graph-display canvas.flot-base'); "
                    "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0; "
                    "for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return [c.width, c.height, n]; })()")
                ticks = page.evaluate("Array.from(document.querySelectorAll('#graph-display .flot-y-axis "
                                      ".flot-tick-label')).map(e => e.textContent)")
                os.makedirs(ARTIFACTS, exist_ok=True)
                page.screenshot(path=os.path.join(ARTIFACTS, shot))
                seen[name] = (drawn, ticks, page.url)
                browser.close()
    finally:
        server.shutdown()
    assert not remote, remote  # nothing asked of another host
    assert not errors, errors
    for name, ((width, height, painted), ticks, url) in seen.items():
        assert "error.html" not in url and name in url  # not asv's "continental origin of swallow" page
        assert width > 300 and height > 100 and painted > 500, (name, width, height, painted)  # axes and line drawn
        assert ticks and all(t.strip() for t in ticks), ticks  # flot's axis labels, drawn as text
        graphs = glob.glob(os.path.join(site, "graphs", "**", name + ".json"), recursive=True)
        assert graphs and all(len(json.load(open(g))) == 2 for g in graphs), graphs  # both commits on the graph
    paired = [json.load(open(g)) for g in glob.glob(os.path.join(site, "graphs", "**", PAIRED + ".json"),
                                                   recursive=True)]
    # the second commit 10% slower in every graph (one per parameter combination, and one of them all)
    last = [v for g in paired for v in (g[-1][1] if isinstance(g[-1][1], list) else [g[-1][1]])]
    assert paired and last == pytest.approx([1.1] * len(last)), paired


def test_asv_run_with_an_existing_environment_writes_the_metadata_the_report_reads(asv_project):
    """asv's machine metadata, written by a real ``asv run -E existing`` (which sets no ASV_* variables) in the
    copy of this project the site is published from (conftest's ``asv_project``), is what the report reads."""
    project, _, _ = asv_project
    written = os.listdir(project / ".asv" / "metadata")
    assert written == [f"existing-py{sys.executable.replace(os.sep, '_')}-{machine.metadata()['hostname']}.json"]
    t = tidy.load([str(project / ".asv" / "results")])
    assert set(t.torch) == {torch.__version__} and set(t.machine) == {"box"}
