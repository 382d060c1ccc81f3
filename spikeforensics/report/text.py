"""Words and numbers shared by the HTML, Markdown and terminal reports.

Plain functions over the diagnosis (a typed `Diagnosis`, or the diagnosis.json dict, read
through `as_diagnosis`): how a root cause label reads, how a number or a confidence prints,
and the one-sentence verdict every report opens with.
"""

from __future__ import annotations

import math

from spikeforensics.attribute.model import ABSENT, Coverage, DiagnosedIncident, Diagnosis, as_diagnosis

ROOT_CAUSE_NAMES = {
    "data_outlier": "bad data sample(s)",
    "data_drift": "data drift",
    "hardware_fault": "hardware fault",
    "lr_too_high": "learning rate too high",
    "lr_schedule": "learning-rate schedule fault",
    "fp16_overflow": "fp16 overflow / loss-scale collapse",
    "fp16_underflow": "fp16 underflow",
    "clip_misconfigured": "misconfigured gradient clipping",
    "layer_instability": "layer instability",
    "vanishing_gradients": "vanishing gradients",
    "model_bug": "model or code bug",
    "unknown": "unknown",
}

STATUS_WORDS = {
    "healthy": "Healthy",
    "degraded": "Degraded",
    "unstable": "Unstable",
    "inconclusive": "Inconclusive",
    "incomplete": "Incomplete",
}
STATUSES = tuple(STATUS_WORDS)
# what a run can leave behind besides its metrics, as the coverage line names it
SIDE_SIGNALS = (("layers", "per-layer norms"), ("batches", "batch manifest"), ("telemetry", "telemetry"))
KEY_METRICS = ("loss", "grad_norm", "lr")
SEVERITY_ORDER = ("info", "warning", "critical")


def as_float(value) -> float | None:
    """A JSON number or one of the strings "nan"/"inf"/"-inf" as a float; else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in ("nan", "inf", "-inf", "+inf", "infinity", "-infinity"):
        return float(value.strip().lower().replace("infinity", "inf"))
    return None


def fmt_num(value, digits: int = 4) -> str:
    """Compact human number: 4 significant digits, ints as ints, NaN/Inf as words."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 100_000 else str(value)
    f = as_float(value)
    if f is None:
        return str(value)
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == int(f) and abs(f) < 1e15:
        return fmt_num(int(f))
    return f"{f:.{digits}g}"


def fmt_pct(value) -> str:
    f = as_float(value)
    if f is None or not math.isfinite(f):
        return "n/a"
    return f"{f * 100:.0f}%"


def fmt_rate(value) -> str:
    """A clip rate: percent with one decimal (4.8%), or n/a."""
    f = as_float(value)
    if f is None or not math.isfinite(f):
        return "n/a"
    if 0 < f < 0.01:
        return f"{f * 100:.2g}%"
    return f"{f * 100:.1f}%"


def cause_name(label: str | None) -> str:
    if not label:
        return "none"
    return ROOT_CAUSE_NAMES.get(label, str(label).replace("_", " "))


def step_span(inc: DiagnosedIncident) -> str:
    a, b = inc.step_start, inc.step_end
    return f"step {a}" if a == b else f"steps {a}-{b}"


def main_incident(diagnosis: Diagnosis | dict) -> DiagnosedIncident | None:
    """The incident the verdict names: among the most severe, the one holding the run's first
    non-finite step when there is one, else the first in step order (as `attribute.diagnosis`)."""
    best = None
    for inc in as_diagnosis(diagnosis).incidents:
        sev = SEVERITY_ORDER.index(inc.severity) if inc.severity in SEVERITY_ORDER else 0
        if sev < 1:
            continue
        nf = None if inc.first_nonfinite_step is ABSENT else inc.first_nonfinite_step
        key = (sev, nf is not None, -(nf if isinstance(nf, (int, float)) else 0))
        if best is None or key > best[0]:
            best = (key, inc)
    return None if best is None else best[1]


def counted_incidents(diagnosis: Diagnosis | dict) -> list[DiagnosedIncident]:
    """Incidents at warning or above (info notes are not incidents)."""
    return as_diagnosis(diagnosis).counted_incidents


def verdict_sentence(diagnosis: Diagnosis | dict) -> str:
    """One sentence: status, probable root cause with confidence, and where."""
    diagnosis = as_diagnosis(diagnosis)
    verdict = diagnosis.verdict
    status = verdict.status
    word = STATUS_WORDS.get(status, str(status).capitalize())
    if status in ("inconclusive", "incomplete") and verdict.summary:
        return str(verdict.summary).split(". What ran says:")[0].rstrip(".") + "."
    counted = diagnosis.counted_incidents
    if not counted:
        count = diagnosis.steps.count
        # a log that numbers few of its records (trl's dicts glued to a tqdm bar: 16 records, 4 printed steps)
        # was judged over its records, not its distinct steps
        coverage = diagnosis.verdict.coverage
        series = getattr(coverage, "series_records", None)
        records = max(series.values(), default=0) if isinstance(series, dict) else 0
        if records > count:
            over = f" over {fmt_num(records)} records" + (f" ({fmt_num(count)} distinct steps)" if count else "")
        else:
            over = f" over {fmt_num(count)} steps" if count else ""
        return f"{word}: no incident at warning level or above{over}."
    main = main_incident(diagnosis) or counted[0]
    cause = verdict.root_cause or main.root_cause
    n = len(counted)
    plural = "incident" if n == 1 else "incidents"
    return (
        f"{word}: {n} {plural}; probable root cause {cause_name(cause)} ({fmt_pct(main.confidence)} confidence), "
        f"strongest at step {main.peak_step} ({main.kind.replace('_', ' ')}, {main.severity})."
    )


def _events_phrase(events: dict) -> list[str]:
    out = []
    for kind, n in sorted(events.items(), key=lambda kv: (-int(kv[1]), kv[0]))[:5]:
        word = kind.replace("_", " ")
        out.append(f"{fmt_num(int(n))} {word} event{'s' if int(n) != 1 else ''}")
    return out


def coverage_sentence(diagnosis: Diagnosis | dict) -> str:
    """What was and was not read, in words: "Read: loss (1,234 records), grad_norm, lr, 3 overflow events.
    Not read: per-layer norms, batch manifest, telemetry." ("" when the diagnosis has no coverage)."""
    cov = as_diagnosis(diagnosis).verdict.coverage
    if not isinstance(cov, Coverage):
        return ""
    signals = list(cov.signals or [])
    counts = cov.series_records or {}
    read = []
    for name in signals:
        if name in ("layers", "batches", "telemetry", "events"):
            continue
        n = counts[name] if name in counts else None
        read.append(f"{name} ({n:,} records)" if name in ("loss", "grad_norm") and isinstance(n, int) else name)
    read += [words for key, words in SIDE_SIGNALS if key in signals]
    read += _events_phrase(cov.events or {})
    # a series with too few records for the detectors was still read: say so, not "not read"
    short = [m for m in KEY_METRICS if m not in signals and counts.get(m)]
    # a series whose every value is NaN/inf was read too (a run that was non-finite from its first step)
    nonfinite = cov.series_nonfinite if isinstance(cov.series_nonfinite, dict) else {}
    # (any series: a held-out loss NaN at every evaluation beside a finite training loss)
    never_finite = [m for m in nonfinite if m not in signals and m not in short and not counts.get(m)]
    missing = [m for m in KEY_METRICS if m not in signals and m not in short and m not in never_finite]
    missing += [w for key, w in SIDE_SIGNALS if key not in signals]
    parts = [("Read: " + ", ".join(read) + ".") if read else "Read: nothing the detectors could use."]
    if short:
        few = (f"{m} ({counts[m]:,} record{'s' if counts[m] != 1 else ''})" for m in short)
        parts.append("Too few records to judge: " + ", ".join(few) + ".")
    if never_finite:
        nf = (f"{m} ({nonfinite[m]:,} record{'s' if nonfinite[m] != 1 else ''})" for m in never_finite)
        parts.append("Read, never finite: " + ", ".join(nf) + ".")
    if missing:
        parts.append("Not read: " + ", ".join(missing) + ".")
    unparsed = cov.unparsed_lines or 0
    if unparsed:
        parts.append(f"{fmt_num(int(unparsed))} line{'s' if unparsed != 1 else ''} not recognised.")
    failed = cov.failed
    if failed:
        parts.append("Failed (a bug in spikeforensics): " + ", ".join(failed) + ".")
    return " ".join(parts)
