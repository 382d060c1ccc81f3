"""Open generated reports in headless chromium and check what a reader would see.

For each report: every chart drew an SVG, the page's error hooks (window.onerror,
unhandled rejections, console.error, CSP violations) caught nothing, no resource
outside the file was fetched, and the content a reader needs is in the rendered
DOM. A screenshot goes to tests/actual/screenshots/ for a developer to look at.

Skipped when no chromium is installed, except under CI (env CI set), where a
missing browser is a failure. Reports: the hand-made unstable run, and every
run under sample_logs/ diagnosed end to end (when the pipeline is present).
"""

import os
import re
from pathlib import Path

import chromium
import pytest
from report_helpers import make_diagnosis, make_run

from spikeforensics.report import write_reports

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
SHOTS = Path(__file__).parent / "actual" / "screenshots"
# `tune` and `holdout` hold every log, dump and manifest format of the fixtures; `fresh` and `final`
# repeat the holdout formats (CI diagnoses all of them in the accuracy benchmark; rendering them too
# would double this test's time for no new page shape)
SAMPLE_RUNS = sorted(p for s in ("tune", "holdout") for p in (ROOT / "sample_logs" / s).glob("*") if p.is_dir())
# Screenshots of sample runs: the first few by default, all with SPIKEFORENSICS_SCREENSHOTS=all.
SAMPLE_SHOTS = 2


@pytest.fixture(scope="session")
def browser():
    binary = chromium.find()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium not found under CI: .ci/run must install Debian's chromium package")
        pytest.skip("chromium not installed (apt-get install chromium)")
    return binary


def _check_page(status: chromium.PageStatus) -> None:
    assert status.done, "the page script never finished (see #sf-status)"
    assert status.errors == [], f"errors in the page: {status.errors}"
    assert status.external == [], f"resources fetched from outside the file: {status.external}"
    assert status.charts_expected > 0 and status.charts_rendered == status.charts_expected
    rendered = re.findall(r'class="sf-chart[^"]*"[^>]*data-rendered="1"', status.dom)
    assert len(rendered) == status.charts_expected


def test_unstable_run_report(browser, tmp_path):
    out = write_reports(make_diagnosis(), make_run(), tmp_path / "report.html", tmp_path / "diagnosis.json")
    status = chromium.load(out["html"], browser)
    _check_page(status)
    dom = status.dom
    # the incident card names its top sample IDs; the hostile one is text, not an element
    card = dom[dom.index('id="incident-inc-1"') :]
    card = card[: card.index("</article>")]
    assert "shard03-000123" in card
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in card
    assert "<script>alert" not in dom
    # NaN steps are listed
    nonfinite = dom[dom.index('id="nonfinite"') : dom.index('id="incidents"')]
    assert "loss = nan" in nonfinite and "1493-1494" in nonfinite
    # the layer heatmap drew, and names the offending layer
    heat = dom[dom.index('id="chart-layers"') :]
    heat = heat[: heat.index("</figure>")]
    assert 'data-rendered="1"' in heat and "transformer.h.3.attn.c_attn" in heat and "▶" in heat
    # plotly decoded our escaped labels to visible text, not markup
    assert "alert(1)" not in heat
    png = chromium.screenshot(out["html"], SHOTS / "unstable_run.png", browser, height=5000)
    assert png.stat().st_size > 50_000


@pytest.mark.parametrize("run_dir", SAMPLE_RUNS, ids=[f"{p.parent.name}/{p.name}" for p in SAMPLE_RUNS])
def test_sample_run_report(browser, run_dir, tmp_path):
    pytest.importorskip("spikeforensics.attribute")
    from spikeforensics import api
    from spikeforensics.attribute import diagnose_run
    from spikeforensics.store import Store

    store = Store(tmp_path / "store")
    report = api.ingest([str(run_dir)], run_id=run_dir.name, store=store)
    assert report.ok
    run = api.load_run(run_dir.name, store)
    diagnosis = diagnose_run(run)
    out = write_reports(diagnosis, run, tmp_path / "report.html", tmp_path / "diagnosis.json", tmp_path / "report.md")
    status = chromium.load(out["html"], browser)
    _check_page(status)
    dom = status.dom
    assert diagnosis["verdict"]["status"].upper() in dom
    for inc in diagnosis["incidents"]:
        card = dom[dom.index(f'id="incident-{inc["id"]}"') :]
        card = card[: card.index("</article>")]
        for sample in inc["sample_ids"][:3]:
            assert _html_text(sample) in card
    if run.layers.height:
        assert re.search(r'id="chart-layers"[^>]*data-rendered="1"', dom)
    if run.events.filter(run.events["kind"] == "nan").height or diagnosis_has_nan(run):
        assert "Non-finite steps" in dom and "None: every logged loss" not in dom
    if os.environ.get("SPIKEFORENSICS_SCREENSHOTS") == "all" or SAMPLE_RUNS.index(run_dir) < SAMPLE_SHOTS:
        chromium.screenshot(out["html"], SHOTS / f"{run_dir.parent.name}_{run_dir.name}.png", browser)


def diagnosis_has_nan(run) -> bool:
    import polars as pl

    return run.metrics.filter(pl.col("name").is_in(["loss", "grad_norm"]) & ~pl.col("value").is_finite()).height > 0


def _html_text(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
