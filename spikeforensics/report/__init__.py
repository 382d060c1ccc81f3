"""Reports of a diagnosis: a self-contained HTML postmortem, the JSON, Markdown, terminal lines.

`write_reports` is what `diagnose` calls; the pieces live in `html.py`
(with `charts.py`, `panels.py`, `downsample.py`), `markdown.py` and `terminal.py`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path


def _json_safe_fallback(obj):
    """Non-finite floats as the strings "nan", "inf", "-inf" (CONTRACT.md), recursively."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {str(k): _json_safe_fallback(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe_fallback(v) for v in obj]
    return obj


def json_safe(obj):
    try:
        from spikeforensics.attribute.diagnosis import json_safe as shared
    except ImportError:
        return _json_safe_fallback(obj)
    return shared(obj)


def write_reports(diagnosis: dict, run, html_path, json_path, md_path=None, max_points: int = 2000) -> dict:
    """Write the HTML report, the diagnosis JSON and (optionally) Markdown; return {kind: path}."""
    from spikeforensics.report.html import render_html
    from spikeforensics.report.markdown import render_markdown

    written = {}
    json_path = Path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(json_safe(diagnosis), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    written["json"] = json_path
    if md_path is not None:
        md_path = Path(md_path)
        md_path.parent.mkdir(parents=True, exist_ok=True)
        md_path.write_text(render_markdown(diagnosis), encoding="utf-8")
        written["markdown"] = md_path
    html_path = Path(html_path)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(render_html(diagnosis, run, max_points=max_points), encoding="utf-8")
    written["html"] = html_path
    return written
