"""What detectors return: findings with their evidence.

A detector is a pure function `detect(run: RunData, params: Params) -> list[Finding]`
in its own module under `spikeforensics/detect/`. Findings that overlap in steps are
grouped into incidents (`detect/incidents.py`) before attribution.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SEVERITIES = ("info", "warning", "critical")
KINDS = (
    "hard_spike",
    "soft_drift",
    "nonfinite",
    "loss_scale_collapse",
    "underflow_zeros",
    "sign_ratio_anomaly",
    "clip_rate_anomaly",
    "layer_outlier",
    "vanishing_gradients",
    "loss_oscillation",
    "divergence",
    "hardware_error",
    "no_progress",
)


def row_step(row: dict) -> int:
    """A series row's step, or its position `t` in a log that prints no step."""
    return int(row["step"]) if row["step"] is not None else int(row["t"])


def as_notes(findings: list[Finding], fact: str, why: str) -> None:
    """Make each of `findings` an `info` note marked `facts[fact]`, its summary ending with `why`."""
    for f in findings:
        f.severity = "info"
        f.facts[fact] = True
        f.summary += f"; {why} (note)"


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity)


@dataclass
class Evidence:
    """One measured fact behind a finding (a row of the report's evidence table)."""

    signal: str  # e.g. "grad_norm", "loss", "layer_grad_norm", "clip_rate", "loss_scale"
    step: int | None
    value: float | None
    baseline: float | None = None
    ratio: float | None = None
    rank: int | None = None
    layer: str | None = None
    note: str = ""  # e.g. "derived from per-layer dump (L2 over layers)"

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None and v != ""}


@dataclass
class Finding:
    kind: str  # one of KINDS
    step_start: int
    step_end: int
    peak_step: int
    severity: str  # one of SEVERITIES
    score: float  # detector-specific strength (robust z, ratio...), larger = stronger
    summary: str  # one sentence, plain text
    rank: int | None = None
    layer: str | None = None
    attempt: int = 0
    evidence: list[Evidence] = field(default_factory=list)
    # incident shape and other detector facts: onset, recovery ("fast"/"slow"/"never"),
    # lead_signal, lead_steps, first_rank, plateau_steps, clip_threshold ...
    facts: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")
        self.step_start, self.step_end, self.peak_step = int(self.step_start), int(self.step_end), int(self.peak_step)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["evidence"] = [e.as_dict() for e in self.evidence]
        return out


@dataclass
class Incident:
    """Findings that overlap in steps, grouped; one severity (the highest).

    Built by `detect/incidents.py`; attribution (`attribute/`) fills `root_cause`,
    `confidence`, `alternatives`, `explanation`, `sample_ids`, `actions`.
    """

    id: str  # "inc-1", "inc-2", ... in run order (attempt, then step)
    kind: str  # primary detector kind (the strongest finding)
    kinds: list[str]
    severity: str
    step_start: int
    step_end: int
    peak_step: int
    findings: list[Finding]
    ranks: list[int] = field(default_factory=list)
    layers: list[str] = field(default_factory=list)
    attempt: int = 0
    facts: dict = field(default_factory=dict)  # merged shape facts (onset, recovery, lead...)

    @property
    def evidence(self) -> list[Evidence]:
        return [e for f in self.findings for e in f.evidence]
