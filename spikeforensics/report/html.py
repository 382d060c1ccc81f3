"""The self-contained HTML postmortem: diagnosis + run -> one HTML file.

`build_context` turns the diagnosis dict (CONTRACT.md) and the run's frames into
plain, template-ready values; every optional extra (`notes`, `log_lines`,
`samples`, `skiplist`, `root_cause_detail` ...) is defaulted here, so the
templates can stay strict (`StrictUndefined` turns a template typo into an error,
not a blank). `render_html` renders `templates/report.html` with autoescape on.

The page is one file: CSS, the page script and plotly.js are inlined (plotly.js
once), and all chart specs sit in a single `<script type="application/json">`
block whose NaN/Inf were mapped to null beforehand (JSON.parse rejects bare NaN).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from functools import lru_cache

import polars as pl
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from jinja2.utils import htmlsafe_json_dumps
from markupsafe import Markup

from spikeforensics import resources
from spikeforensics.attribute.model import (
    Calibration,
    DiagnosedIncident,
    Diagnosis,
    EvidenceRow,
    SkipList,
    as_diagnosis,
    given,
)
from spikeforensics.attribute.raw_lines import peak_lines_from_series, read_windows
from spikeforensics.report import charts, panels
from spikeforensics.report.downsample import format_ranges, step_ranges
from spikeforensics.report.text import (
    STATUSES,
    as_float,
    cause_name,
    coverage_sentence,
    fmt_num,
    fmt_pct,
    fmt_rate,
    main_incident,
    step_span,
    verdict_sentence,
)

EVIDENCE_COLUMNS = ("signal", "step", "rank", "layer", "value", "baseline", "ratio", "note")
# Sample IDs listed in an incident card before the rest go behind a <details>.
TOP_SAMPLES = 10
# Log lines of context on each side of the peak line (when the diagnosis carries none).
LOG_CONTEXT = 6
# Characters of one log line shown (longer lines are cut, and marked so).
LOG_LINE_CHARS = 400
# Incident cards whose raw log lines start unfolded.
OPEN_LOGS = 3
# Step ranges listed in full per non-finite signal before the rest are counted.
MAX_NONFINITE_RANGES = 2000


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(resources.templates_dir())),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.policies["json.dumps_kwargs"] = {"allow_nan": False, "separators": (",", ":")}
    env.filters["num"] = fmt_num
    env.filters["pct"] = fmt_pct
    env.filters["rate"] = fmt_rate
    env.filters["cause"] = cause_name
    return env


def json_ready(obj):
    """Replace every non-finite float by None (recursively), so strict JSON accepts it."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    return obj


def embed_json(payload) -> Markup:
    """JSON for a `<script type="application/json">` block: strict, and `<`, `>`, `&`, `'` escaped."""
    return htmlsafe_json_dumps(json_ready(payload), dumps=json.dumps, allow_nan=False, separators=(",", ":"))


def _asset(name: str) -> Markup:
    # our own files, inlined verbatim
    return Markup((resources.templates_dir() / name).read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def plotly_js() -> Markup:
    from plotly.offline import get_plotlyjs

    # A literal "</script" inside the bundle would end our <script> element early.
    return Markup(get_plotlyjs().replace("</script", "<\\/script"))


def plotly_version() -> str:
    from plotly.offline import get_plotlyjs_version

    return get_plotlyjs_version()


# ---------------------------------------------------------------------------- pieces


def _evidence_table(rows: list[EvidenceRow]) -> dict:
    """Columns: the evidence fields some row has a value for, in `EVIDENCE_COLUMNS` order, then any
    extra field of an older or hand-made file, by name."""
    cells = [dict(r.items()) for r in rows]  # a row's fields with a value, by name
    present = {k for c in cells for k in c}
    keys = [k for k in EVIDENCE_COLUMNS if k in present]
    keys += sorted(present - set(keys))
    return {"columns": keys, "rows": [[_cell(c[k] if k in c else None) for k in keys] for c in cells]}


def _cell(value) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(json_ready(value), ensure_ascii=False)
    return fmt_num(value)


# the diagnosis' sample fields as a reader knows them (JSON keeps the field names; docs/diagnosis.md)
SAMPLE_COLUMNS = {
    "sample_id": "sample",
    "score": "suspicion score",
    "step": "step",
    "rank": "rank",
    "micro": "micro-batch",
    "sample_loss": "sample loss",
    "loss_ratio": "loss / normal",
    "own_outlier": "stands out on its own loss",
    "own_nonfinite": "own loss non-finite",
    "tokens": "tokens",
    "sample_source": "source",
    "recurrence": "other spikes it is in",
    "healthy_seen": "seen in healthy steps",
}


def _samples(inc: DiagnosedIncident, run) -> dict:
    """Implicated samples: the diagnosis' `samples` rows, else looked up in the batch manifest."""
    ids = [str(s) for s in inc.sample_ids or []]
    rows = given(inc.samples, [])
    if rows:
        cells = [dict(r.items()) for r in rows]  # a sample's fields with a value, by name
        present = {k for c in cells for k in c} - {"sample_id"}
        keys = ["sample_id"] + [k for k in SAMPLE_COLUMNS if k in present] + sorted(present - set(SAMPLE_COLUMNS))
        table = [[_cell(c[k] if k in c else None) for k in keys] for c in cells]
    elif ids and run.batches.height:
        keys = ["sample_id", "step", "rank", "sample_loss", "sample_source"]
        found = (
            run.batches.filter(pl.col("sample_id").is_in(ids))
            .group_by("sample_id")
            .agg(
                pl.col("step").min(), pl.col("rank").min(), pl.col("sample_loss").max(), pl.col("sample_source").first()
            )
        )
        by_id = {r["sample_id"]: r for r in found.iter_rows(named=True)}
        listed = [by_id[i] if i in by_id else {**dict.fromkeys(keys), "sample_id": i} for i in ids]
        keys = [k for k in keys if k == "sample_id" or any(r[k] is not None for r in listed)]
        table = [[_cell(r[k]) for k in keys] for r in listed]
    else:
        keys, table = ["sample_id"], [[i] for i in ids]
    return {
        "ids": ids,
        "top": ids[:TOP_SAMPLES],
        "rest": ids[TOP_SAMPLES:],
        "columns": [SAMPLE_COLUMNS.get(k, k.replace("_", " ")) for k in keys],
        "rows": table[:TOP_SAMPLES],
        "more_rows": table[TOP_SAMPLES:],
        "note": str(inc.sample_ranking_note or ""),
    }


def _log_lines_all(incidents: list[DiagnosedIncident], run) -> list[list[dict]]:
    """Raw log lines around each incident's peak: the diagnosis' `log_lines`, else read from the ingested
    file (only when its hash still matches: raw_lines.py), all incidents located and read at once."""
    given = [
        [g for g in inc.log_lines if isinstance(g, dict)] if isinstance(inc.log_lines, list) else []
        for inc in incidents
    ]
    # the peaks are looked up only for lines the diagnosis did not give or did not mark (a lookup takes the
    # loss and grad-norm series of the whole run out of the store: 1.1 GB for a log copied 20,000 times)
    wanted = [not items or any(not isinstance(g.get("peak"), bool) for g in items) for items in given]
    peaks = [None] * len(incidents)
    if any(wanted):
        found = peak_lines_from_series(run, [int(inc.peak_step) for inc, w in zip(incidents, wanted) if w])
        peaks = [found.pop(0) if w else None for w in wanted]
    read = read_windows(run, [None if g else p for g, p in zip(given, peaks)], LOG_CONTEXT)
    out = []
    for items, fallback, peak in zip(given, read, peaks):
        lines = [
            {
                "line": g.get("line"),
                "text": str(g.get("text", "")),
                "source": str(g.get("source", "")),
                "peak": g.get("peak"),
            }
            for g in (items or fallback)
        ]
        for item in lines:
            flag = item["peak"]
            item["peak"] = (
                bool(flag) if isinstance(flag, bool) else (peak is not None and (item["source"], item["line"]) == peak)
            )
            if item["line"] is None:
                item["line"] = ""  # a note about the file, not a line of it
            if len(item["text"]) > LOG_LINE_CHARS:
                item["text"] = item["text"][:LOG_LINE_CHARS] + " [...]"
        out.append(lines)
    return out


def _incident(inc: DiagnosedIncident, run, window: charts.Figure | None, index: int, log_lines: list[dict]) -> dict:
    alternatives = [
        {"cause": cause_name(a.root_cause), "label": str(a.root_cause), "confidence": fmt_pct(a.confidence)}
        for a in inc.alternatives or []
    ]
    return {
        "id": str(inc.id),
        "kind": str(inc.kind),
        "kinds": [str(k) for k in inc.kinds or [inc.kind]],
        "severity": inc.severity if inc.severity in ("info", "warning", "critical") else "info",
        "span": step_span(inc),
        "step_start": inc.step_start,
        "step_end": inc.step_end,
        "peak_step": inc.peak_step,
        "ranks": [str(r) for r in inc.ranks or []],
        "layers": [str(name) for name in inc.layers or []],
        "root_cause": str(inc.root_cause or "unknown"),
        "cause": cause_name(inc.root_cause),
        "root_cause_detail": str(inc.root_cause_detail or ""),
        "confidence": fmt_pct(inc.confidence),
        "confidence_value": max(0.0, min(1.0, as_float(inc.confidence) or 0.0)),
        "alternatives": alternatives,
        "explanation": str(inc.explanation or inc.other.get("summary") or ""),
        "evidence": _evidence_table(inc.evidence or []),
        "samples": _samples(inc, run),
        "log_lines": log_lines,
        "actions": [str(a) for a in inc.actions or []],
        "figure": _figure_ctx(window),
        "open_logs": index < OPEN_LOGS,
    }


def _figure_ctx(fig: charts.Figure | None) -> dict | None:
    if fig is None:
        return None
    return {"id": fig.id, "title": fig.title, "height": fig.layout.get("height", fig.height), "notes": fig.notes}


def _nonfinite(run, infos: list[charts.SeriesInfo]) -> list[dict]:
    """Every non-finite step, per signal and kind, as explicit step ranges."""
    rows = []
    for info in infos:
        for kind in ("nan", "inf", "-inf"):
            xs = info.nonfinite.filter(pl.col("kind") == kind).get_column("x")
            if xs.len():
                rows.append(_nf_row(f"{info.signal} = {kind}", xs, info.xlabel))
    nan_ev = run.events.filter(pl.col("kind") == "nan")
    if nan_ev.height:
        rows.append(
            _nf_row(
                "non-finite value reported in a step record (nan events)",
                nan_ev.get_column("step"),
                "step",
                unknown=nan_ev.get_column("step").null_count(),
            )
        )
    bad_layers = run.layers.filter(pl.col("grad_norm").is_not_null() & ~pl.col("grad_norm").is_finite())
    if bad_layers.height:
        names = bad_layers.get_column("layer").unique().sort().to_list()
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        rows.append(_nf_row(f"layer grad norm non-finite ({shown})", bad_layers.get_column("step"), "step"))
    return rows


def _nf_row(signal: str, steps: pl.Series, xlabel: str, unknown: int = 0) -> dict:
    ranges = step_ranges(steps)
    return {
        "signal": signal,
        "count": sum(n for _, _, n in ranges),
        "xlabel": xlabel,
        "ranges": format_ranges(ranges, MAX_NONFINITE_RANGES),
        "unknown": unknown,
    }


def _calibration(diagnosis: Diagnosis, run) -> dict | None:
    cal = diagnosis.calibration
    if not isinstance(cal, Calibration) or not cal.items():
        return None
    rec = as_float(cal.recommended_clip_norm)
    expected = given(cal.expected_clip_rate)
    if expected is None:
        expected = panels.expected_clip_rate(run, rec if rec is not None and math.isfinite(rec) else None)
    rows = [
        (
            "Recommended clip threshold (max grad norm)",
            fmt_num(given(cal.recommended_clip_norm)) or "no recommendation",
        ),
        ("Expected clip rate at the recommended threshold", fmt_rate(expected)),
        ("Current clip threshold", fmt_num(given(cal.current_clip_norm)) or "not found in the logs"),
        ("Clip rate at the current threshold", fmt_rate(cal.clip_rate)),
        ("How it was derived", str(given(cal.basis) or "")),
    ]
    known = {"recommended_clip_norm", "expected_clip_rate", "current_clip_norm", "clip_rate", "basis"}
    rows += [(k.replace("_", " "), _cell(v)) for k, v in cal.items() if k not in known and v not in (None, "", [], {})]
    return {"rows": rows}


def _inputs(run) -> dict:
    files = []
    for r in run.sources.iter_rows(named=True):
        examples = []
        try:
            examples = [(e[0], str(e[1])[:LOG_LINE_CHARS]) for e in json.loads(r.get("unparsed_examples") or "[]")]
        except (ValueError, TypeError, IndexError, KeyError):
            pass
        files.append(
            {
                "source": str(r["source"]),
                "path": str(r.get("path") or ""),
                "format": str(r.get("format") or "unknown"),
                "lines": fmt_num(r.get("lines")),
                "records": fmt_num(r.get("records")),
                "unparsed": r.get("unparsed") or 0,
                "bytes": fmt_num(r.get("bytes")),
                "examples": examples,
            }
        )
    tables = {"metrics": run.metric_rows()} | {
        t: getattr(run, t).height for t in ("events", "layers", "batches", "telemetry")
    }
    return {"files": files, "tables": tables}


def _notes(diagnosis: Diagnosis) -> list[dict]:
    out = []
    for n in diagnosis.notes or []:
        if isinstance(n, dict):
            out.append(
                {"severity": str(n.get("severity", "info")), "text": str(n.get("text") or n.get("summary") or "")}
            )
        else:
            out.append({"severity": "info", "text": str(n)})
    return out


def _todo(diagnosis: Diagnosis, main: DiagnosedIncident | None) -> dict | None:
    """The first screen's "What to do": the headline incident's actions, the skip list in one line,
    and a pointer to the other incidents."""
    if main is None:
        return None
    actions = [str(a) for a in main.actions or []][:3]
    sk = diagnosis.skiplist if isinstance(diagnosis.skiplist, SkipList) else SkipList()
    n_ids, n_steps = len(sk.sample_ids or []), len(sk.steps or [])
    skip = ""
    if n_ids or n_steps:
        skip = "On resume, skip " + " and ".join(
            x
            for x in (
                f"{n_ids} sample{'s' if n_ids != 1 else ''}" if n_ids else "",
                f"{n_steps} step{'s' if n_steps != 1 else ''}" if n_steps else "",
            )
            if x
        )
    others = [i for i in diagnosis.counted_incidents if i is not main]
    more = (
        f"{len(others)} more incident{'s' if len(others) != 1 else ''} below, each with its own actions"
        if others
        else ""
    )
    if not actions and not skip:
        return None
    return {"actions": actions, "skip": skip, "more": more}


def _skiplist(diagnosis: Diagnosis) -> dict | None:
    sk = diagnosis.skiplist
    if not isinstance(sk, SkipList) or not (sk.steps or sk.sample_ids):
        return None
    steps = [int(s) for s in sk.steps or [] if isinstance(s, (int, float))]
    return {"steps": format_ranges(step_ranges(steps), 200), "sample_ids": [str(s) for s in sk.sample_ids or []]}


# ---------------------------------------------------------------------------- context and render


def build_context(diagnosis: dict | Diagnosis, run, max_points: int = 2000) -> dict:
    # the report reads attributes: a renamed field fails loudly (values as the JSON holds them: NaN as "nan")
    typed = as_diagnosis(diagnosis.to_dict() if isinstance(diagnosis, Diagnosis) else diagnosis)
    drawn = charts.drawn_run(run)  # the attempts the charts draw (a log copied 20,000 times: 12 copies)
    overview, infos = charts.overview(drawn, typed, max_points)
    windows = charts.incident_windows(drawn, typed)
    overview_notes = overview.notes if overview else []  # printed once, under "Downsampled for display"
    if overview:
        overview.notes = []
    extra = {
        "layers": panels.layer_heatmap(drawn, typed),
        "ranks": panels.rank_comparison(drawn, typed, max_points),
        "clip_rate": panels.clip_rate(drawn, typed),
        "loss_scale": panels.loss_scale(drawn, max_points),
        "telemetry": panels.telemetry(run, max_points),
        "calibration": panels.calibration_hist(drawn, typed),
    }
    figures = [f for f in [overview, *windows.values(), *extra.values()] if f is not None]
    verdict = typed.verdict
    status = str(verdict.status or "healthy")
    main = main_incident(typed)
    steps = typed.steps
    generated = typed.other.get("generated_at") or datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return {
        "run_id": str(typed.run_id or run.run_id),
        "tool_version": str(typed.tool_version),
        "schema_version": str(typed.schema_version),
        "generated": str(generated),
        "plotly_version": plotly_version(),
        "verdict": {
            "status": status if status in STATUSES else "inconclusive",
            "coverage": coverage_sentence(typed),
            "sentence": verdict_sentence(typed),
            "summary": str(verdict.summary or ""),
            "root_cause": cause_name(verdict.root_cause) if verdict.root_cause else "",
            "confidence": fmt_pct(main.confidence) if main else "",
        },
        "steps": {"first": fmt_num(steps.first), "last": fmt_num(steps.last), "count": fmt_num(steps.count)},
        "counts": {s: sum(1 for i in typed.incidents if i.severity == s) for s in ("critical", "warning", "info")},
        "n_incidents": len(typed.counted_incidents),
        "incidents": [
            _incident(i, run, windows.get(str(i.id)), n, lines)
            for n, (i, lines) in enumerate(zip(typed.incidents, _log_lines_all(typed.incidents, run)))
        ],
        "notes": _notes(typed),
        "overview": _figure_ctx(overview),
        "downsampled": overview_notes,
        "nonfinite": _nonfinite(run, infos),
        "panels": {k: _figure_ctx(v) for k, v in extra.items()},
        "ranks": [str(r) for r in run.ranks()],
        "n_layers": len(run.layer_names()),
        "calibration": _calibration(typed, run),
        "skiplist": _skiplist(typed),
        "todo": _todo(typed, main),
        "inputs": _inputs(run),
        "chart_count": len(figures),
        "data_json": embed_json({"figures": {f.id: f.spec() for f in figures}}),
        "css": _asset("report.css"),
        "js": _asset("report.js"),
        "plotly_js": plotly_js(),
    }


def render_html(diagnosis: dict | Diagnosis, run, max_points: int = 2000) -> str:
    """The complete, self-contained report page."""
    context = build_context(diagnosis, run, max_points)
    return environment().get_template("report.html").render(**context)
