"""Detectors: one module per finding kind, each `detect(run, params) -> list[Finding]`.

`run_detectors` runs them all (a detector that fails becomes an `info` note, the others
still run); `detect_incidents` groups the findings into incidents (warning and above)
and returns the `info` findings as notes.
"""

from __future__ import annotations

import traceback

from spikeforensics.detect import (
    clipping, hard_spike, layer_outlier, loss_scale, nonfinite, oscillation, sign_ratio, soft_drift, underflow, vanishing,
)
from spikeforensics.detect.base import Evidence, Finding, Incident, severity_rank
from spikeforensics.detect.incidents import group_incidents
from spikeforensics.rundata import RunData

DETECTORS = (
    ("nonfinite", nonfinite.detect),
    ("hard_spike", hard_spike.detect),
    ("soft_drift", soft_drift.detect),
    ("loss_scale_collapse", loss_scale.detect),
    ("underflow_zeros", underflow.detect),
    ("sign_ratio_anomaly", sign_ratio.detect),
    ("clip_rate_anomaly", clipping.detect),
    ("layer_outlier", layer_outlier.detect),
    ("vanishing_gradients", vanishing.detect),
    ("loss_oscillation", oscillation.detect),
)


def run_detectors(run: RunData, params) -> list[Finding]:
    """Every detector's findings, in step order; a detector error is kept as an info note."""
    findings: list[Finding] = []
    for kind, detect in DETECTORS:
        try:
            findings.extend(detect(run, params))
        except Exception as exc:  # noqa: BLE001 - one broken detector must not hide the others
            first, _, _ = run.step_range()
            findings.append(Finding(
                kind=kind, step_start=first or 0, step_end=first or 0, peak_step=first or 0, severity="info", score=0.0,
                summary=f"detector {kind} failed: {type(exc).__name__}: {exc}",
                evidence=[Evidence(signal="detector_error", step=None, value=None, note=str(exc))],
                facts={"error": "".join(traceback.format_exception_only(exc)).strip(), "scope": "run"},
            ))
    findings.sort(key=lambda f: (f.attempt, f.step_start, -severity_rank(f.severity)))
    return findings


def detect_incidents(run: RunData, params) -> tuple[list[Incident], list[Finding]]:
    """(incidents at warning and above, info notes)."""
    findings = run_detectors(run, params)
    notes = [f for f in findings if f.severity == "info"]
    return group_incidents(findings, params), notes


__all__ = ["DETECTORS", "run_detectors", "detect_incidents", "group_incidents"]
