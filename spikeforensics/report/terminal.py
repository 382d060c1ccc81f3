"""The few lines `diagnose` prints on stdout: verdict, incidents, where the reports went.

Plain text, no colour codes (the caller adds colour unless NO_COLOR is set).
"""

from __future__ import annotations

from spikeforensics.attribute.model import Diagnosis, as_diagnosis
from spikeforensics.report.text import coverage_sentence, fmt_pct, verdict_sentence

TOP_SAMPLES = 3
MAX_INCIDENTS = 20


def summary_lines(diagnosis: Diagnosis | dict, paths: dict | None = None) -> list[str]:
    typed = as_diagnosis(diagnosis)
    lines = [f"run {typed.run_id}: {verdict_sentence(typed)}"]
    covered = coverage_sentence(typed)
    if covered:
        lines.append(f"  {covered}")
    incidents = typed.incidents
    for inc in incidents[:MAX_INCIDENTS]:
        ids = [str(s) for s in inc.sample_ids or []]
        samples = ", ".join(ids[:TOP_SAMPLES]) + (f" (+{len(ids) - TOP_SAMPLES})" if len(ids) > TOP_SAMPLES else "")
        lines.append(
            f"  {inc.id} {str(inc.severity).upper():8} step {inc.peak_step} "
            f"({inc.step_start}-{inc.step_end}) {inc.kind}: "
            f"{inc.root_cause} {fmt_pct(inc.confidence)}" + (f"; samples {samples}" if samples else "")
        )
    if len(incidents) > MAX_INCIDENTS:
        lines.append(f"  ... and {len(incidents) - MAX_INCIDENTS} more incidents (see the report)")
    for label, path in (paths or {}).items():
        if path:
            lines.append(f"{label}: {path}")
    return lines
