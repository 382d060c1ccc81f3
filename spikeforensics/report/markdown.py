"""The diagnosis as Markdown, for pasting into an issue tracker.

Everything that came from a log or a file (sample IDs, layer names, log lines) is
put in code spans or fenced blocks, so a tracker that renders HTML inside Markdown
shows it as text; table cells escape `|`.
"""

from __future__ import annotations

from spikeforensics.report.text import (
    cause_name, counted_incidents, coverage_sentence, fmt_num, fmt_pct, fmt_rate, step_span, verdict_sentence,
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


def render_markdown(diagnosis: dict) -> str:
    run_id = diagnosis.get("run_id", "")
    steps = diagnosis.get("steps") or {}
    verdict = diagnosis.get("verdict") or {}
    sentence = verdict_sentence(diagnosis)
    lines = [f"## Training postmortem: {code(run_id)}", "", f"**{cell(sentence)}**", ""]
    if verdict.get("summary") and verdict["summary"] != sentence:
        lines += [cell(verdict["summary"]), ""]
    if coverage_sentence(diagnosis):
        lines += [cell(coverage_sentence(diagnosis)), ""]
    lines += [f"Steps {fmt_num(steps.get('first'))}-{fmt_num(steps.get('last'))} ({fmt_num(steps.get('count'))} logged); "
              f"spikeforensics {cell(diagnosis.get('tool_version', ''))}.", ""]
    incidents = [i for i in diagnosis.get("incidents") or [] if isinstance(i, dict)]
    if incidents:
        lines += _table(
            ["id", "severity", "kind", "steps", "peak", "root cause", "confidence", "top samples"],
            [[cell(i.get("id")), cell(str(i.get("severity", "")).upper()), cell(i.get("kind")), cell(step_span(i)),
              cell(i.get("peak_step")), cell(i.get("root_cause")), fmt_pct(i.get("confidence")),
              ", ".join(code(s) for s in (i.get("sample_ids") or [])[:3]) or "-"] for i in incidents],
        )
        lines.append("")
    elif not counted_incidents(diagnosis):
        lines += ["No incident at warning level or above.", ""]
    for inc in incidents:
        lines += _incident(inc)
    cal = diagnosis.get("calibration")
    if isinstance(cal, dict) and cal:
        lines += ["### Calibration", "",
                  f"- Recommended clip threshold: **{fmt_num(cal.get('recommended_clip_norm'))}**"
                  + (f" (expected clip rate {fmt_rate(cal['expected_clip_rate'])})" if cal.get("expected_clip_rate") is not None else ""),
                  f"- Current clip threshold: {fmt_num(cal.get('current_clip_norm')) or 'not found'}, clip rate {fmt_rate(cal.get('clip_rate'))}",
                  f"- Basis: {cell(cal.get('basis', ''))}", ""]
    for note in diagnosis.get("notes") or []:
        text = note.get("text", "") if isinstance(note, dict) else note
        lines.append(f"- Note: {cell(text)}")
    return "\n".join(lines).rstrip() + "\n"


def _incident(inc: dict) -> list[str]:
    sev = str(inc.get("severity", "")).upper()
    out = [f"### {cell(inc.get('id'))} [{sev}] {cell(inc.get('kind', '')).replace('_', ' ')}, {step_span(inc)} (peak {inc.get('peak_step')})", ""]
    alts = "; ".join(f"{cause_name(a.get('root_cause'))} ({fmt_pct(a.get('confidence'))})"
                     for a in inc.get("alternatives") or [] if isinstance(a, dict))
    out.append(f"**Root cause:** {cause_name(inc.get('root_cause'))} ({code(inc.get('root_cause'))}), "
               f"{fmt_pct(inc.get('confidence'))} confidence" + (f"; runner-up: {alts}" if alts else "") + ".")
    if inc.get("explanation"):
        out += ["", cell(inc["explanation"])]
    if inc.get("ranks"):
        out += ["", "Ranks: " + ", ".join(cell(r) for r in inc["ranks"])]
    if inc.get("layers"):
        out += ["", "Layers: " + ", ".join(code(l) for l in inc["layers"])]
    evidence = [e for e in inc.get("evidence") or [] if isinstance(e, dict)]
    if evidence:
        cols = [c for c in ("signal", "step", "rank", "layer", "value", "baseline", "ratio", "note") if any(c in e for e in evidence)]
        out += ["", "**Evidence**", ""]
        out += _table(cols, [[cell(fmt_num(e.get(c))) for c in cols] for e in evidence])
    ids = inc.get("sample_ids") or []
    if ids:
        more = f" and {len(ids) - TOP_SAMPLES} more" if len(ids) > TOP_SAMPLES else ""
        out += ["", "**Implicated samples:** " + ", ".join(code(s) for s in ids[:TOP_SAMPLES]) + more]
        if inc.get("sample_ranking_note"):
            out += ["", "Note: " + str(inc["sample_ranking_note"]) + "."]
    log_lines = [l for l in inc.get("log_lines") or [] if isinstance(l, dict)]
    if log_lines:
        body = "\n".join(f"{l.get('line', '')}: {l.get('text', '')}" for l in log_lines)
        fence = "```"
        while fence in body:
            fence += "`"
        out += ["", "<details><summary>Log lines around the peak</summary>", "", fence + "text", body, fence, "", "</details>"]
    if inc.get("actions"):
        out += ["", "**Recommended actions**", ""] + [f"{n}. {cell(a)}" for n, a in enumerate(inc["actions"], 1)]
    return out + [""]
