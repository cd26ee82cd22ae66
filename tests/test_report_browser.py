"""The report in a real browser: headless Chromium loads it from disk, with no console errors, every image
loaded and every section present (the performance model's scatter and the roofline among the plots), the
answers table on the first screen and the plots at least 800 px wide;
screenshots (the first screen, the whole page) are kept in artifacts/ (ATTENTION_BENCH_ARTIFACTS).

By default the report is built from a short sweep of the quick grid; ATTENTION_BENCH_REPORT=<index.html>
checks (and photographs) a report already built instead, such as the main job's: README's screenshot,
docs/report.png, is this test's first-screen shot of it.

.ci/run installs Debian's chromium and sets ATTENTION_BENCH_REQUIRE_BROWSER=1, so there a missing browser
fails instead of skipping."""

import json
import os
import re

import pytest
from run_helpers import ARTIFACTS, CHROMIUM, chromium_page

from reports import html
from reports.claims import CLAIMS

pytestmark = pytest.mark.slow  # a runner sweep, a report and Chromium



@pytest.fixture(scope="module")
def report(request):
    """The main job's report on the quick grid's CPU cases (conftest's ``main_job``), or ATTENTION_BENCH_REPORT."""
    if os.environ.get("ATTENTION_BENCH_REPORT"):
        return os.environ["ATTENTION_BENCH_REPORT"]
    run, folder, code, _ = request.getfixturevalue("main_job")
    assert code == 0
    return os.path.join(folder, "index.html")


def section_keys(report):
    with open(os.path.join(os.path.dirname(report), html.REPORT_RECORD)) as f:
        analysed = [a["key"] for a in json.load(f)["analyses"]]
    return ["answers", "claims"] + analysed + ["grid", "noise", "runs", "machine", "history"]


def test_report_folder_is_self_contained(report):
    folder = os.path.dirname(report)
    page = open(report).read()
    for key in section_keys(report):
        assert f'<section id="{key}">' in page
    images = [f for f in os.listdir(folder) if f.endswith(".png")]
    assert images and all(f'src="{f}"' in page for f in images)
    assert "http://" not in page and "https://" not in page  # nothing fetched from elsewhere
    assert "No GPU results" in page or "no GPU results" in page  # missing parts say so
    assert "attention-bench report" in page  # a single machine says how to add another
    # every relative link (traces, memory figures, results.csv) points at a file inside the report folder
    links = re.findall(r'href="([^"#:]+)"', page)
    assert any(link.endswith("trace.json.gz") for link in links)
    drawn = [link for link in links if link.endswith("memory.png")]  # drawn by the report from each profile
    assert drawn and all(os.path.getsize(os.path.join(folder, link)) > 1000 for link in drawn)
    missing = [link for link in links if not os.path.exists(os.path.join(folder, link))
               and not link.startswith("..")]  # asv's site lives next to the report, not in it
    assert not missing, missing
    for claim in ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "Table 1"):
        assert f">{claim}<" in page


@pytest.mark.skipif(not CHROMIUM and os.environ.get("ATTENTION_BENCH_REQUIRE_BROWSER") != "1",
                    reason="no chromium on this machine (apt-get install chromium)")
def test_report_loads_in_headless_chromium(report):
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "ATTENTION_BENCH_REQUIRE_BROWSER=1 but chromium is not installed"
    errors = []
    with sync_playwright() as p:
        browser, page = chromium_page(p, errors)
        page.goto("file://" + os.path.abspath(report), wait_until="load")
        images = page.evaluate("Array.from(document.images).map(i => [i.getAttribute('src'), i.complete && "
                               "i.naturalWidth > 0])")
        sections = page.evaluate("Array.from(document.querySelectorAll('section')).map(s => s.id)")
        answers = page.evaluate("(() => { const t = document.querySelector('table.answers'); const r = "
                                "t.getBoundingClientRect(); return [r.top, r.bottom, Array.from(t.rows).slice(1)"
                                ".map(row => row.cells[0].textContent)]; })()")
        # the warnings a run on a busy machine puts above the answers (rightly): their height, margins included
        warned = page.evaluate("Array.from(document.querySelectorAll('p.warning')).reduce((h, p) => { const s = "
                               "getComputedStyle(p); return h + p.getBoundingClientRect().height + "
                               "parseFloat(s.marginTop) + parseFloat(s.marginBottom); }, 0)")
        widths = page.evaluate("Array.from(document.querySelectorAll('figure img')).map(i => [i.getAttribute('src'), "
                               "Math.min(i.getBoundingClientRect().width, i.naturalWidth)])")
        os.makedirs(ARTIFACTS, exist_ok=True)
        page.screenshot(path=os.path.join(ARTIFACTS, "report-first-screen.png"))
        page.screenshot(path=os.path.join(ARTIFACTS, "report.png"), full_page=True)
        browser.close()
    assert not errors, errors
    assert images and all(ok for _, ok in images), [src for src, ok in images if not ok]
    # the performance model's validation scatter and the full roofline are drawn and shown
    assert {"prediction_predicted_vs_measured.png", "c2_roofline_roofline_cpu.png"} <= {src for src, _ in images}
    assert sections == section_keys(report)
    top, bottom, claims = answers
    # the page's own head takes under 300 px; each "Read with care" warning (a busy machine, say) adds its height
    assert top < 300 + warned, (f"the answers table starts {top:.0f} px down, below the first screen's top "
                                f"(300 px and {warned:.0f} px of warnings)")
    assert top + 150 < 900, f"the answers table starts {top:.0f} px down: its first rows are below the first screen"
    assert {c.key for c in CLAIMS} <= {k for cell in claims for k in cell.split("/")}  # every claim has a row
    narrow = [(src, w) for src, w in widths if w < 800]
    assert widths and not narrow, narrow  # plots readable: shown at 800 px or more
