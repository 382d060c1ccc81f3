"""The HTML report as text: escaping, no network, strict embedded JSON, one plotly.js,
tolerance of a minimal diagnosis; plus the Markdown, terminal and write_reports outputs."""

import json
import math
import re

import pytest
from report_helpers import SCRIPT_ID, SCRIPT_LOG, make_diagnosis, make_run

from spikeforensics.report import write_reports
from spikeforensics.report.html import render_html
from spikeforensics.report.markdown import render_markdown
from spikeforensics.report.terminal import summary_lines
from spikeforensics.rundata import RunData


@pytest.fixture(scope="module")
def page():
    return render_html(make_diagnosis(), make_run())


def _outside_plotly(html: str) -> str:
    """The page without the embedded plotly.js bundle (which mentions URLs in its own code)."""
    start = html.index("/**\n* plotly.js") if "/**\n* plotly.js" in html else None
    scripts = re.findall(r"<script>(.*?)</script>", html, flags=re.S)
    bundle = max(scripts, key=len)
    assert start is None or bundle.lstrip().startswith("/**")
    return html.replace(bundle, "")


def _data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="sf-data">(.*?)</script>', html, flags=re.S)
    return json.loads(m.group(1))


def test_sample_id_script_tag_is_escaped_text(page):
    body = _outside_plotly(page)
    assert SCRIPT_ID not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "alert(2)</script>" not in body  # the hostile log line
    assert "&lt;/script&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in body
    assert "<img src=x" not in body  # an unparsed line from an input file
    assert "weird &lt;b&gt;name&lt;/b&gt;.log" in body
    # only our own <script> elements exist: data, page script, plotly, the render call
    assert len(re.findall(r"<script\b", body)) == 4


def test_no_network_address_requested(page):
    body = _outside_plotly(page)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", body, flags=re.I)
    assert not re.search(r"https?://", body)
    for cdn in ("cdn.plot.ly", "cdn.jsdelivr", "unpkg.com", "cdnjs", "googleapis"):
        assert cdn not in body
    assert "default-src 'none'" in page  # the page's CSP forbids any fetch


def test_plotly_embedded_exactly_once(page):
    assert page.count("Plotly.newPlot") <= 2  # report.js calls it; the bundle defines it
    assert len(re.findall(r"plotly\.js v\d", page)) == 1
    assert 4_000_000 < len(page) < 6_000_000


def test_embedded_json_is_strict_even_with_nan_and_inf(page):
    raw = re.search(r'<script type="application/json" id="sf-data">(.*?)</script>', page, flags=re.S).group(1)
    assert not re.search(r"[:\[,]\s*-?(NaN|Infinity)\b", raw)  # no bare token, only names like "NaN/Inf loss"
    data = json.loads(raw, parse_constant=lambda c: pytest.fail(f"bare {c} in embedded JSON"))
    figures = data["figures"]
    assert {"overview", "layers", "ranks", "clip-rate", "loss-scale", "telemetry", "calibration"} <= set(figures)
    # the NaN/Inf steps are drawn as their own marks, not inside a line
    strip = [t for t in figures["overview"]["data"] if t["name"].startswith("NaN/Inf")]
    assert {t["name"] for t in strip} == {"NaN/Inf loss", "NaN/Inf grad norm"}
    assert sorted(x for t in strip for x in t["x"]) == [1493, 1493, 1494]


def test_overview_keeps_the_spike(page):
    grad = next(t for t in _data(page)["figures"]["overview"]["data"] if t["name"] == "grad norm")
    assert max(v for v in grad["y"] if v is not None) == pytest.approx(43.1)


def test_nonfinite_steps_listed(page):
    section = page[page.index('id="nonfinite"') : page.index('id="incidents"')]
    assert "loss = nan" in section and "1493-1494" in section
    assert "grad norm = inf" in section and "step 1493" in section


def test_incident_card_content(page):
    card = page[page.index('id="incident-inc-1"') :]
    card = card[: card.index("</article>")]
    assert "CRITICAL" in card and "86% confidence" in card
    assert "Runner-up: hardware fault" in card and "(10%)" in card
    assert "shard03-000123" in card and "and 4 more" in card
    assert "<table" in card and "70.6" in card
    assert "Drop or repair sample shard03-000123" in card
    assert "◀ peak" in card or "&#9664; peak" in card


def test_heatmap_names_offending_layer(page):
    layers = _data(page)["figures"]["layers"]
    assert layers["data"][0]["type"] == "heatmap"
    assert any("▶ transformer.h.3.attn.c_attn" in t for t in layers["layout"]["yaxis"]["ticktext"])


def test_minimal_diagnosis_and_empty_run_render():
    diagnosis = {
        "schema_version": 1,
        "run_id": "empty",
        "steps": {"first": None, "last": None, "count": 0},
        "verdict": {"status": "healthy", "root_cause": None, "summary": ""},
        "incidents": [],
    }
    html = render_html(diagnosis, RunData.from_frames("empty"))
    assert "Healthy: no incident" in html
    assert _data(html) == {"figures": {}}


def test_healthy_run_without_extras(page):
    run = make_run(with_layers=False)
    d = make_diagnosis(with_log_lines=False)
    for key in ("notes", "skiplist", "calibration", "generated_at"):
        d.pop(key)
    for inc in d["incidents"]:
        inc.pop("alternatives")
        inc.pop("evidence")
    html = render_html(d, run)
    assert 'id="chart-layers"' not in html and "No evidence rows" in html


def test_log_lines_read_from_the_source_file(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join(f"line {i} <b>x</b>\n" for i in range(1, 7001)))
    d = make_diagnosis(with_log_lines=False)
    html = render_html(d, make_run(log_path=str(log)))
    card = html[html.index('id="incident-inc-1"') :]
    assert 'logline peak"><span class="ln">2984</span>line 2984 &lt;b&gt;x&lt;/b&gt;' in card
    assert ">2978</span>" in card and ">2990</span>" in card


def test_markdown_export():
    md = render_markdown(make_diagnosis())
    assert md.startswith("## Training postmortem: `gpt-small-03`")
    assert "probable root cause bad data sample(s) (86% confidence)" in md
    assert "| inc-1 | CRITICAL | hard_spike |" in md
    assert f"`{SCRIPT_ID}`" in md  # in a code span: shown as text by trackers
    assert SCRIPT_LOG in md.split("```text")[1]  # log lines fenced
    assert "Recommended clip threshold: **1.1**" in md


def test_terminal_summary():
    lines = summary_lines(make_diagnosis(), {"report": "/tmp/r.html", "json": "/tmp/d.json"})
    assert lines[0].startswith("run gpt-small-03: Unstable: 2 incidents")
    assert any(
        "inc-1 CRITICAL" in l and "step 1492" in l and "data_outlier 86%" in l and "shard03-000123" in l for l in lines
    )
    assert lines[-2:] == ["report: /tmp/r.html", "json: /tmp/d.json"]
    assert not any("\x1b[" in l for l in lines)


def test_write_reports(tmp_path):
    d = make_diagnosis()
    d["incidents"][1]["evidence"].append({"signal": "loss", "step": 1493, "value": math.nan})
    paths = write_reports(
        d, make_run(), tmp_path / "r" / "report.html", tmp_path / "r" / "diagnosis.json", tmp_path / "r" / "report.md"
    )
    assert set(paths) == {"html", "json", "skiplist", "markdown"}
    assert json.loads(paths["skiplist"].read_text())["run_id"] == d["run_id"]
    text = paths["json"].read_text()
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert data["incidents"][1]["evidence"][-1]["value"] == "nan"
    assert paths["html"].stat().st_size > 4_000_000 and paths["markdown"].read_text().startswith("## ")


def test_the_report_looks_up_only_the_peak_lines_the_diagnosis_did_not_give(monkeypatch):
    """The lookup of a peak's line takes the loss and grad-norm series of the whole run out of the store (1.1 GB
    for a log copied 20,000 times): the report makes it only for incidents whose lines the diagnosis did not
    give, or gave without marking the peak."""
    from spikeforensics.report import html as html_module

    asked = []

    def lookup(run, steps):
        asked.append(list(steps))
        return [None] * len(steps)

    monkeypatch.setattr(html_module, "peak_lines_from_series", lookup)
    diagnosis = make_diagnosis()
    for inc in diagnosis["incidents"]:
        inc["log_lines"] = [
            {"line": 10 + i, "text": f"given line {i}", "source": "train.log", "peak": i == 1} for i in range(3)
        ]
    page = render_html(diagnosis, make_run(with_layers=False))
    assert asked == [] and "given line 1" in page
    del diagnosis["incidents"][1]["log_lines"]
    render_html(diagnosis, make_run(with_layers=False))
    assert asked == [[int(diagnosis["incidents"][1]["peak_step"])]]
