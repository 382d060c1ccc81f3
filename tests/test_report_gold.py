"""Gold-file test of the HTML report, with the volatile parts scrubbed.

Scrubbed: the embedded plotly.js bundle, the plotly.js and tool versions, the
generation time. A mismatch writes the new page to tests/actual/ for a diff;
regenerate with SPIKEFORENSICS_REGEN_GOLD=1 after checking the change is wanted.
"""

import os
import re
from pathlib import Path

from report_helpers import make_diagnosis, make_run

from spikeforensics.report.html import render_html

GOLD = Path(__file__).parent / "gold"
ACTUAL = Path(__file__).parent / "actual"


def scrub(html: str) -> str:
    scripts = re.findall(r"<script>(.*?)</script>", html, flags=re.S)
    bundle = max(scripts, key=len)
    html = html.replace(bundle, "\n/* plotly.js bundle scrubbed */\n")
    html = re.sub(r'(data-volatile="\w+">)[^<]*(<)', r"\1SCRUBBED\2", html)
    html = re.sub(r'<meta name="generator" content="[^"]*">', '<meta name="generator" content="SCRUBBED">', html)
    return html


def _check(name: str, html: str) -> None:
    gold, actual = GOLD / name, ACTUAL / name
    text = scrub(html)
    if os.environ.get("SPIKEFORENSICS_REGEN_GOLD"):
        gold.parent.mkdir(parents=True, exist_ok=True)
        gold.write_text(text, encoding="utf-8")
    expected = gold.read_text(encoding="utf-8") if gold.exists() else None
    if text != expected:
        actual.parent.mkdir(parents=True, exist_ok=True)
        actual.write_text(text, encoding="utf-8")
        raise AssertionError(
            f"{name} differs from {gold} (new page in {actual}; "
            "diff them, and set SPIKEFORENSICS_REGEN_GOLD=1 if the change is intended)"
        )


def test_scrub_removes_only_volatile_parts():
    html = render_html(make_diagnosis(), make_run())
    scrubbed = scrub(html)
    assert "plotly.js bundle scrubbed" in scrubbed and len(scrubbed) < len(html) / 4
    assert "2024-05-01 12:00 UTC" not in scrubbed
    assert 'id="sf-data"' in scrubbed and "Runner-up" in scrubbed


def test_report_matches_gold():
    _check("report_unstable.html", render_html(make_diagnosis(), make_run()))


def test_minimal_report_matches_gold():
    d = make_diagnosis(with_log_lines=False)
    d["incidents"] = d["incidents"][1:]
    for key in ("notes", "skiplist", "calibration"):
        d.pop(key)
    _check("report_minimal.html", render_html(d, make_run(n=2200, with_layers=False)))
