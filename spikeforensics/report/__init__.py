"""Reports of a diagnosis: a self-contained HTML postmortem, the JSON, Markdown, terminal lines.

`write_reports` is what `diagnose` calls; the pieces live in `html.py`
(with `charts.py`, `panels.py`, `downsample.py`), `markdown.py` and `terminal.py`.
"""

from __future__ import annotations

from pathlib import Path

from spikeforensics.attribute.diagnosis import write_atomic, write_outputs


def write_reports(diagnosis: dict, run, html_path, json_path, md_path=None, max_points: int = 2000) -> dict:
    """Write the HTML report, the diagnosis JSON with its skip list beside it (`X.json`,
    `X.skiplist.json`), and (optionally) Markdown, each file atomically; return {kind: path}."""
    from spikeforensics.report.html import render_html
    from spikeforensics.report.markdown import render_markdown

    written = {}
    written["json"], written["skiplist"] = write_outputs(diagnosis, json_path)
    if md_path is not None:
        md_path = Path(md_path)
        md_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(md_path, render_markdown(diagnosis))
        written["markdown"] = md_path
    html_path = Path(html_path)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    with run.engine():
        html = render_html(diagnosis, run, max_points=max_points)
    write_atomic(html_path, html)
    written["html"] = html_path
    return written
