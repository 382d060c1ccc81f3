"""The diagnosis as typed values: `Diagnosis`, `Verdict`, `StepRange`, `DiagnosedIncident`.

`build_diagnosis` builds these; the report (HTML, Markdown) reads their attributes, so a renamed
field fails loudly instead of showing a blank. `Diagnosis.to_dict()` is the diagnosis.json object
(CONTRACT.md, schema_version 1): the fields in their declared order, contract fields first, an
extra that a diagnosis does not carry (`ABSENT`) left out, unknown keys read from a file kept after
the known ones. `Diagnosis.from_dict()` reads such an object back, tolerating what older files or
hand-made dicts leave out. `dumps` is the one JSON encoder (non-finite numbers as "nan"/"inf"/"-inf").

Still plain dicts inside: `coverage`, `calibration`, notes, evidence rows, samples, features, the
skip list, log lines.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from datetime import date, datetime
from typing import Any


class _Absent:
    """An optional extra that this diagnosis does not carry (left out of the JSON, unlike None)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()


def json_safe(obj):
    """Recursively make `obj` JSON-clean: non-finite floats -> "nan"/"inf"/"-inf", tuples -> lists,
    typed diagnosis values -> their dicts."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, float):
        if math.isnan(obj):
            return "nan"
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, _Record):
        return obj.to_dict()
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (datetime, date)):
        return obj.isoformat()
    if hasattr(obj, "item"):  # numpy scalars
        return json_safe(obj.item())
    return str(obj)


def dumps(obj, **kw) -> str:
    """The one JSON encoder of diagnoses and skip lists."""
    return json.dumps(json_safe(obj), allow_nan=False, ensure_ascii=False, **kw)


class _Record:
    """Shared to_dict/from_dict of the typed values: declared fields in order, then `other`."""

    def to_dict(self, safe: bool = True) -> dict:
        """The JSON object (`safe`: every value made JSON-clean by `json_safe`; else the values as held)."""
        conv = json_safe if safe else (lambda v: v)
        out = {}
        for f in fields(self):  # type: ignore[arg-type]
            if f.name == "other":
                continue
            value = getattr(self, f.name)
            if value is ABSENT:
                continue
            out[f.name] = conv(value)
        out.update({str(k): conv(v) for k, v in (getattr(self, "other", {}) or {}).items()})
        return out

    @classmethod
    def from_dict(cls, data: dict):
        known = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        kwargs = {}
        for name in known:
            if name == "other" or name not in data:
                continue
            reader = _READERS.get((cls.__name__, name))
            kwargs[name] = reader(data[name]) if reader else data[name]
        other = {k: v for k, v in data.items() if k not in known}
        return cls(**kwargs, other=other)


@dataclass(frozen=True)
class StepRange(_Record):
    first: int | None = None
    last: int | None = None
    count: int = 0
    other: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict(_Record):
    status: str = "healthy"
    root_cause: str | None = None
    summary: str = ""
    coverage: dict | Any = ABSENT
    other: dict = field(default_factory=dict)


@dataclass(frozen=True)
class DiagnosedIncident(_Record):
    """One incident of diagnosis.json: the contract fields, then the extras (docs/diagnosis.md)."""

    id: str
    kind: str
    kinds: list[str]
    severity: str
    step_start: int
    step_end: int
    peak_step: int
    ranks: list[int] = field(default_factory=list)
    layers: list[str] = field(default_factory=list)
    root_cause: str = "unknown"
    confidence: float = 0.0
    alternatives: list[dict] = field(default_factory=list)
    explanation: str = ""
    sample_ids: list[str] = field(default_factory=list)
    evidence: list[dict] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    # extras
    root_cause_detail: str | None | Any = ABSENT
    attempt: int | Any = ABSENT
    first_nonfinite_step: int | None | Any = ABSENT
    implicated_steps: list[int] | Any = ABSENT
    consumed_samples_range: Any = ABSENT
    samples: list[dict] | Any = ABSENT
    sample_ranking_note: str | None | Any = ABSENT
    features: dict | Any = ABSENT
    matched_rules: list | Any = ABSENT
    gated_labels: list | Any = ABSENT
    label_scores: dict | Any = ABSENT
    findings: list[str] | Any = ABSENT
    log_lines: list[dict] | Any = ABSENT
    other: dict = field(default_factory=dict)

    @property
    def counted(self) -> bool:
        """Warning and above are incidents (for the verdict, `--fail-on`, accuracy); info is a note."""
        return self.severity in ("warning", "critical")

    @classmethod
    def from_dict(cls, data: dict) -> DiagnosedIncident:
        """Tolerant of hand-made or older dicts: a missing `kinds` is `[kind]`, missing steps are 0."""
        data = dict(data)
        data.setdefault("id", "")
        data.setdefault("kind", "")
        data.setdefault("kinds", [data["kind"]] if data["kind"] else [])
        data.setdefault("severity", "info")
        for key in ("step_start", "step_end", "peak_step"):
            data.setdefault(key, 0)
        return super().from_dict(data)


@dataclass(frozen=True)
class Diagnosis(_Record):
    """diagnosis.json (schema_version 1)."""

    schema_version: int = 1
    tool_version: str = ""
    run_id: str = ""
    steps: StepRange = field(default_factory=StepRange)
    verdict: Verdict = field(default_factory=Verdict)
    incidents: list[DiagnosedIncident] = field(default_factory=list)
    calibration: dict | Any = ABSENT
    notes: list | Any = ABSENT
    rules: list | Any = ABSENT
    skiplist: dict | Any = ABSENT
    other: dict = field(default_factory=dict)

    @property
    def counted_incidents(self) -> list[DiagnosedIncident]:
        return [i for i in self.incidents if i.counted]


def as_diagnosis(diagnosis: Diagnosis | dict) -> Diagnosis:
    """A `Diagnosis` from either a `Diagnosis` or a diagnosis.json dict."""
    return diagnosis if isinstance(diagnosis, Diagnosis) else Diagnosis.from_dict(diagnosis)


_READERS = {
    ("Diagnosis", "steps"): lambda v: StepRange.from_dict(v) if isinstance(v, dict) else StepRange(),
    ("Diagnosis", "verdict"): lambda v: Verdict.from_dict(v) if isinstance(v, dict) else Verdict(),
    ("Diagnosis", "incidents"): lambda v: [DiagnosedIncident.from_dict(i) for i in v or [] if isinstance(i, dict)],
}
