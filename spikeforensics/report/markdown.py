"""The diagnosis as Markdown, for pasting into an issue tracker.

Everything that came from a log or a file (sample IDs, layer names, log lines) is
put in code spans or fenced blocks, so a tracker that renders HTML inside Markdown
shows it as text; table cells escape `|`.
"""

from __future__ import annotations

from spikeforensics.attribute.model import Calibration, DiagnosedIncident, Diagnosis, as_diagnosis, given
from spikeforensics.report.text import (
    cause_name,
    coverage_sentence,
    fmt_num,
    fmt_pct,
    fmt_rate,
    step_span,
    verdict_sentence,
)

TOP_SAMPLES = 10


def code(text) -> str:
    """A code span that survives backticks, pipes and newlines inside `text`."""
    s = str(text).replace("\n", " ").replace("|", "\\|")
    fence = "`"
    while fence in s:
        fence += "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def cell(text) -> str:
    return str(text).replace("\n", " ").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(rows_cell for rows_cell in row) + " |" for row in rows]
    return out


def render_markdown(diagnosis: dict | Diagnosis) -> str:
    # attributes, so a renamed field fails loudly (values as the JSON holds them: NaN as "nan")
    typed = as_diagnosis(diagnosis.to_dict() if isinstance(diagnosis, Diagnosis) else diagnosis)
    sentence = verdict_sentence(typed)
    lines = [f"## Training postmortem: {code(typed.run_id)}", "", f"**{cell(sentence)}**", ""]
    if typed.verdict.summary and typed.verdict.summary != sentence:
        lines += [cell(typed.verdict.summary), ""]
    if coverage_sentence(typed):
        lines += [cell(coverage_sentence(typed)), ""]
    steps = typed.steps
    lines += [
        f"Steps {fmt_num(steps.first)}-{fmt_num(steps.last)} ({fmt_num(steps.count)} logged); "
        f"spikeforensics {cell(typed.tool_version)}.",
        "",
    ]
    if typed.incidents:
        lines += _table(
            ["id", "severity", "kind", "steps", "peak", "root cause", "confidence", "top samples"],
            [
                [
                    cell(i.id),
                    cell(str(i.severity).upper()),
                    cell(i.kind),
                    cell(_span(i)),
                    cell(i.peak_step),
                    cell(i.root_cause),
                    fmt_pct(i.confidence),
                    ", ".join(code(s) for s in (i.sample_ids or [])[:3]) or "-",
                ]
                for i in typed.incidents
            ],
        )
        lines.append("")
    elif not typed.counted_incidents:
        lines += ["No incident at warning level or above.", ""]
    for inc in typed.incidents:
        lines += _incident(inc)
    lines += _calibration(typed.calibration)
    for note in typed.notes or []:
        text = (note.get("summary") or note.get("text") or "") if isinstance(note, dict) else note
        lines.append(f"- Note: {cell(text)}")
    return "\n".join(lines).rstrip() + "\n"


def _span(inc: DiagnosedIncident) -> str:
    return step_span(inc)


def _calibration(cal: Calibration | None) -> list[str]:
    if not isinstance(cal, Calibration) or not cal.items():
        return []
    expected = given(cal.expected_clip_rate)
    return [
        "### Calibration",
        "",
        f"- Recommended clip threshold: **{fmt_num(given(cal.recommended_clip_norm)) or 'none'}**"
        + (f" (expected clip rate {fmt_rate(expected)})" if expected is not None else ""),
        f"- Current clip threshold: {fmt_num(given(cal.current_clip_norm)) or 'not found'}, "
        f"clip rate {fmt_rate(cal.clip_rate)}",
        f"- Basis: {cell(given(cal.basis, ''))}",
        "",
    ]


def _incident(inc: DiagnosedIncident) -> list[str]:
    """One incident's section: heading, cause, where, evidence, samples, log lines, actions."""
    out = [
        f"### {cell(inc.id)} [{str(inc.severity).upper()}] {cell(inc.kind).replace('_', ' ')}, {_span(inc)} "
        f"(peak {inc.peak_step})",
        "",
        _cause_line(inc),
    ]
    if inc.explanation:
        out += ["", cell(inc.explanation)]
    if inc.ranks:
        out += ["", "Ranks: " + ", ".join(cell(r) for r in inc.ranks)]
    if inc.layers:
        out += ["", "Layers: " + ", ".join(code(name) for name in inc.layers)]
    out += _evidence(inc) + _samples(inc) + _log_lines(inc)
    if inc.actions:
        out += ["", "**Recommended actions**", ""] + [f"{n}. {cell(a)}" for n, a in enumerate(inc.actions, 1)]
    return out + [""]


def _cause_line(inc: DiagnosedIncident) -> str:
    alts = "; ".join(f"{cause_name(a.root_cause)} ({fmt_pct(a.confidence)})" for a in inc.alternatives or [])
    return (
        f"**Root cause:** {cause_name(inc.root_cause)} ({code(inc.root_cause)}), "
        f"{fmt_pct(inc.confidence)} confidence" + (f"; runner-up: {alts}" if alts else "") + "."
    )


def _evidence(inc: DiagnosedIncident) -> list[str]:
    rows = [dict(e.items()) for e in inc.evidence or []]  # a row's fields with a value, by name
    if not rows:
        return []
    cols = [
        c
        for c in ("signal", "step", "rank", "layer", "value", "baseline", "ratio", "note")
        if any(c in e for e in rows)
    ]
    return ["", "**Evidence**", ""] + _table(
        cols, [[cell(fmt_num(e[c] if c in e else None)) for c in cols] for e in rows]
    )


def _samples(inc: DiagnosedIncident) -> list[str]:
    ids = inc.sample_ids or []
    if not ids:
        return []
    more = f" and {len(ids) - TOP_SAMPLES} more" if len(ids) > TOP_SAMPLES else ""
    out = ["", "**Implicated samples:** " + ", ".join(code(s) for s in ids[:TOP_SAMPLES]) + more]
    if inc.sample_ranking_note:
        out += ["", "Note: " + str(inc.sample_ranking_note) + "."]
    return out


def _log_lines(inc: DiagnosedIncident) -> list[str]:
    items = [item for item in inc.log_lines or [] if isinstance(item, dict)]
    if not items:
        return []
    body = "\n".join(f"{item.get('line', '')}: {item.get('text', '')}" for item in items)
    fence = "```"
    while fence in body:
        fence += "`"
    return [
        "",
        "<details><summary>Log lines around the peak</summary>",
        "",
        fence + "text",
        body,
        fence,
        "",
        "</details>",
    ]
