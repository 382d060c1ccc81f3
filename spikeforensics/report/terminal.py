"""The few lines `diagnose` prints on stdout: verdict, incidents, where the reports went.

Plain text, no colour codes (the caller adds colour unless NO_COLOR is set).
"""

from __future__ import annotations

from spikeforensics.report.text import coverage_sentence, fmt_pct, verdict_sentence

TOP_SAMPLES = 3
MAX_INCIDENTS = 20


def summary_lines(diagnosis: dict, paths: dict | None = None) -> list[str]:
    lines = [f"run {diagnosis.get('run_id', '')}: {verdict_sentence(diagnosis)}"]
    covered = coverage_sentence(diagnosis)
    if covered:
        lines.append(f"  {covered}")
    incidents = [i for i in diagnosis.get("incidents") or [] if isinstance(i, dict)]
    for inc in incidents[:MAX_INCIDENTS]:
        ids = [str(s) for s in inc.get("sample_ids") or []]
        samples = ", ".join(ids[:TOP_SAMPLES]) + (f" (+{len(ids) - TOP_SAMPLES})" if len(ids) > TOP_SAMPLES else "")
        lines.append(
            f"  {inc.get('id', '')} {str(inc.get('severity', '')).upper():8} step {inc.get('peak_step')} "
            f"({inc.get('step_start')}-{inc.get('step_end')}) {inc.get('kind', '')}: "
            f"{inc.get('root_cause', 'unknown')} {fmt_pct(inc.get('confidence'))}"
            + (f"; samples {samples}" if samples else "")
        )
    if len(incidents) > MAX_INCIDENTS:
        lines.append(f"  ... and {len(incidents) - MAX_INCIDENTS} more incidents (see the report)")
    for label, path in (paths or {}).items():
        if path:
            lines.append(f"{label}: {path}")
    return lines
