"""The diagnosis as typed values: `Diagnosis`, `Verdict`, `Coverage`, `StepRange`, `Calibration`, `SkipList`,
`DiagnosedIncident`, `Alternative`, `EvidenceRow`, `SampleRow`.

`build_diagnosis` builds these; the report (HTML, Markdown) reads their attributes, so a renamed
field fails loudly instead of showing a blank. `Diagnosis.to_dict()` is the diagnosis.json object
(CONTRACT.md, schema_version 1): the fields in their declared order, contract fields first, an
extra that a diagnosis does not carry (`ABSENT`) left out, unknown keys read from a file kept after
the known ones. `Diagnosis.from_dict()` reads such an object back, tolerating what older files or
hand-made dicts leave out. `dumps` is the one JSON encoder (non-finite numbers as "nan"/"inf"/"-inf").

Evidence rows and samples are sparse: a field without a value (None; for evidence also "") is left out
of their JSON, as the detectors' `Evidence.as_dict` and the sample tables always wrote them.

Still plain dicts inside: notes (findings, errors and hand-made text notes: several shapes), features,
log lines (a line, or a note about the file with no line number: two shapes), `label_scores`, the skip
list's `reasons`.
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


def _plain(obj):
    """`obj` with every typed value inside it turned into its dict, numbers left as they are."""
    if isinstance(obj, _Record):
        return obj.to_dict(safe=False)
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


class _Record:
    """Shared to_dict/from_dict of the typed values: declared fields in order, then `other`."""

    def _left_out(self, value) -> bool:
        """A field value the JSON does not carry (an extra this value does not have)."""
        return value is ABSENT

    def items(self) -> list[tuple[str, Any]]:
        """(name, value) of every field the JSON carries, declared fields in order, then `other`."""
        out = [(f.name, getattr(self, f.name)) for f in fields(self) if f.name != "other"]  # type: ignore[arg-type]
        out = [(name, value) for name, value in out if not self._left_out(value)]
        return out + [(str(k), v) for k, v in (getattr(self, "other", {}) or {}).items()]

    def to_dict(self, safe: bool = True) -> dict:
        """The JSON object (`safe`: every value made JSON-clean by `json_safe`; else the values as held,
        typed values inside turned into dicts)."""
        conv = json_safe if safe else _plain
        return {name: conv(value) for name, value in self.items()}

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


class _SparseRecord(_Record):
    """A table row: a field without a value (None) is not written."""

    def _left_out(self, value) -> bool:
        return value is ABSENT or value is None


@dataclass(frozen=True)
class EvidenceRow(_SparseRecord):
    """One measured fact behind an incident (a row of the report's evidence table; detect/base.py `Evidence`)."""

    signal: str = ""
    step: int | None = None
    value: float | str | None = None  # a non-finite number is "nan"/"inf"/"-inf" once read from JSON
    baseline: float | str | None = None
    ratio: float | str | None = None
    rank: int | None = None
    layer: str | None = None
    note: str | None = None
    other: dict = field(default_factory=dict)

    def _left_out(self, value) -> bool:
        return super()._left_out(value) or (isinstance(value, str) and value == "")


@dataclass(frozen=True)
class SampleRow(_SparseRecord):
    """One implicated sample of an incident, most suspicious first (attribute/tracing.py `SAMPLE_COLUMNS`,
    in that order; docs/diagnosis.md says what each field means)."""

    sample_id: str = ""
    score: float | None = None
    step: int | None = None
    rank: int | None = None
    micro: int | None = None
    sample_loss: float | str | None = None
    loss_ratio: float | str | None = None
    recurrence: int | None = None
    healthy_seen: int | None = None
    source: str | None = None
    source_enrichment: float | None = None
    tokens: int | None = None
    own_nonfinite: bool | None = None
    own_outlier: bool | None = None
    replay_loss: float | str | None = None
    replay_ratio: float | str | None = None
    place: int | None = None
    other: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Coverage(_Record):
    """`verdict.coverage`: what was read. Contract fields: signals, records, unparsed_lines, detectors_run,
    detectors_failed; the rest are extras (left out when a file does not carry them)."""

    signals: list[str] = field(default_factory=list)
    unjudged: dict[str, str] | Any = ABSENT  # signal -> why its series cannot be judged
    limited: dict[str, str] | Any = ABSENT  # signal -> what of its series is judged and what not
    records: dict[str, int] = field(default_factory=dict)  # step records per source
    unparsed_lines: int = 0
    detectors_run: list[str] = field(default_factory=list)
    detectors_failed: list[str] = field(default_factory=list)
    stages_failed: list[str] | Any = ABSENT
    series_records: dict[str, int] | Any = ABSENT  # records per canonical metric
    series_nonfinite: dict[str, int] | Any = ABSENT  # records per canonical metric whose value is NaN/inf
    events: dict[str, int] | Any = ABSENT  # events per kind
    other: dict = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        """Detectors and stages that failed (a bug in spikeforensics: the diagnosis is `incomplete`)."""
        return list(self.detectors_failed or []) + list(self.stages_failed or [])


@dataclass(frozen=True)
class Alternative(_Record):
    """A runner-up root cause of an incident, with its confidence."""

    root_cause: str = "unknown"
    confidence: float = 0.0
    other: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Calibration(_Record):
    """`calibration`: the recommended clip threshold and how it was derived. Every field may be absent (a
    failed calibration stage writes `{}`); contract fields first, then the extras."""

    recommended_clip_norm: float | None | Any = ABSENT
    basis: str | Any = ABSENT
    current_clip_norm: float | None | Any = ABSENT
    clip_rate: float | None | Any = ABSENT
    quantile_value: float | Any = ABSENT
    expected_clip_rate: float | None | Any = ABSENT
    healthy_steps: int | Any = ABSENT
    current_clip_source: str | Any = ABSENT
    clip_rate_meaning: str | Any = ABSENT
    layer_clip_norms: dict[str, float] | Any = ABSENT  # layer -> threshold, in the dump's layer order
    warnings: list | Any = ABSENT
    other: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SkipList(_Record):
    """What a training script skips on resume (also written alone as `X.skiplist.json`)."""

    run_id: str = ""
    steps: list[int] = field(default_factory=list)
    sample_ids: list[str] = field(default_factory=list)
    reasons: list[dict] | Any = ABSENT  # per incident: {"incident", "steps", "sample_ids"}
    other: dict = field(default_factory=dict)


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
    coverage: Coverage | Any = ABSENT
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
    alternatives: list[Alternative] = field(default_factory=list)
    explanation: str = ""
    sample_ids: list[str] = field(default_factory=list)
    evidence: list[EvidenceRow] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    # extras
    root_cause_detail: str | None | Any = ABSENT
    attempt: int | Any = ABSENT
    first_nonfinite_step: int | None | Any = ABSENT
    implicated_steps: list[int] | Any = ABSENT
    consumed_samples_range: Any = ABSENT
    samples: list[SampleRow] | Any = ABSENT
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
    calibration: Calibration | Any = ABSENT
    notes: list | Any = ABSENT
    rules: list | Any = ABSENT
    skiplist: SkipList | Any = ABSENT
    other: dict = field(default_factory=dict)

    @property
    def counted_incidents(self) -> list[DiagnosedIncident]:
        return [i for i in self.incidents if i.counted]


def given(value, default=None):
    """`value`, or `default` when it is an extra the diagnosis does not carry (`ABSENT`)."""
    return default if value is ABSENT else value


def as_diagnosis(diagnosis: Diagnosis | dict) -> Diagnosis:
    """A `Diagnosis` from either a `Diagnosis` or a diagnosis.json dict."""
    return diagnosis if isinstance(diagnosis, Diagnosis) else Diagnosis.from_dict(diagnosis)


def _rows(cls):
    """Reader of a list of table rows: dicts become `cls`, anything else in the list is dropped."""
    return lambda v: [cls.from_dict(r) for r in v or [] if isinstance(r, dict)]


_READERS = {
    ("Diagnosis", "steps"): lambda v: StepRange.from_dict(v) if isinstance(v, dict) else StepRange(),
    ("Diagnosis", "verdict"): lambda v: Verdict.from_dict(v) if isinstance(v, dict) else Verdict(),
    ("Diagnosis", "incidents"): lambda v: [DiagnosedIncident.from_dict(i) for i in v or [] if isinstance(i, dict)],
    ("Verdict", "coverage"): lambda v: Coverage.from_dict(v) if isinstance(v, dict) else v,
    ("Diagnosis", "calibration"): lambda v: Calibration.from_dict(v) if isinstance(v, dict) else v,
    ("Diagnosis", "skiplist"): lambda v: SkipList.from_dict(v) if isinstance(v, dict) else v,
    ("DiagnosedIncident", "alternatives"): _rows(Alternative),
    ("DiagnosedIncident", "evidence"): _rows(EvidenceRow),
    ("DiagnosedIncident", "samples"): lambda v: _rows(SampleRow)(v) if isinstance(v, list) else v,
}
