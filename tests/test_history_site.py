"""asv's history site opens offline: ``attention-bench site`` publishes results of two commits of a copy
of this project, and headless Chromium, served the site from localhost with every other host unreachable,
draws a benchmark's graph with both commits on it and reports no error and no failed request.

.ci/run sets ATTENTION_BENCH_REQUIRE_BROWSER=1, so there a missing browser or missing npm packages fail
instead of skipping."""

from __future__ import annotations

import functools
import glob
import http.server
import json
import os
import subprocess
import sys
import threading

import pytest
from run_helpers import ARTIFACTS, CHROMIUM, chromium_page, copy_project

from reports import asv_site

pytestmark = pytest.mark.slow  # two asv runs, asv publish and Chromium

REQUIRED = os.environ.get("ATTENTION_BENCH_REQUIRE_BROWSER") == "1"
BENCHMARK = "bench_layers.SelfAttentionVsRecurrentLayer.track_matmul_flops"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """asv results of two commits of a copy of this project, published by ``attention-bench site``."""
    if not os.path.isfile(os.path.join(asv_site.MODULES, "jquery", "dist", "jquery.min.js")):
        if REQUIRED:
            pytest.fail(f"no npm packages in {asv_site.MODULES}: run bash scripts/setup.sh --history")
        pytest.skip("no npm packages for the history site (bash scripts/setup.sh --history)")
    tmp = tmp_path_factory.mktemp("history")
    project, home = tmp / "project", tmp / "home"
    copy_project(project)
    os.symlink(asv_site.MODULES, project / "reports" / "history_js" / "node_modules")  # as setup.sh --history
    git = ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    env = {k: v for k, v in {**os.environ, "HOME": str(home), "ATTENTION_BENCH_GRID": "quick"}.items()
           if not k.startswith("ASV_")}
    asv = [sys.executable, "-m", "asv"]
    subprocess.run(asv + ["machine", "--yes", "--machine", "box"], cwd=project, env=env, check=True,
                   capture_output=True)
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "first"], ["branch", "-M", "main"]):
        subprocess.run(git + cmd, cwd=project, check=True, capture_output=True)
    for second in (False, True):
        if second:
            subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "second"], cwd=project, check=True)
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True).stdout.strip()
        done = subprocess.run(asv + ["run", "-E", f"existing:{sys.executable}", "--quick", "--machine", "box",
                                     "--bench", BENCHMARK, "--set-commit-hash", sha],
                              cwd=project, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run([sys.executable, "-m", "attention_bench", "site"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=600)
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
def test_the_site_draws_a_graph_offline_in_headless_chromium(site):
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "ATTENTION_BENCH_REQUIRE_BROWSER=1 but chromium is not installed"
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(http.server.SimpleHTTPRequestHandler, directory=site))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    errors, remote = [], []
    try:
        with sync_playwright() as p:
            browser, page = chromium_page(p, errors)
            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base)
                       else (remote.append(route.request.url), route.abort()))
            page.goto(base + "index.html#" + BENCHMARK, wait_until="networkidle")
            page.wait_for_selector("#graph-display canvas.flot-base", timeout=30_000)
            drawn = page.evaluate(
                "(() => { const c = document.querySelector('#graph-display canvas.flot-base'); "
                "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0; "
                "for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return [c.width, c.height, n]; })()")
            ticks = page.evaluate("Array.from(document.querySelectorAll('#graph-display .flot-y-axis "
                                  ".flot-tick-label')).map(e => e.textContent)")
            os.makedirs(ARTIFACTS, exist_ok=True)
            page.screenshot(path=os.path.join(ARTIFACTS, "history-graph.png"))
            url = page.url
            browser.close()
    finally:
        server.shutdown()
    assert not remote, remote  # nothing asked of another host
    assert not errors, errors
    assert "error.html" not in url  # asv's "continental origin of swallow" page
    width, height, painted = drawn
    assert width > 300 and height > 100 and painted > 500, drawn  # axes and the line are drawn
    assert ticks and all(t.strip() for t in ticks), ticks  # flot's axis labels, drawn as text
    graphs = glob.glob(os.path.join(site, "graphs", "**", BENCHMARK + ".json"), recursive=True)
    assert graphs and all(len(json.load(open(g))) == 2 for g in graphs), graphs  # both commits on the graph
