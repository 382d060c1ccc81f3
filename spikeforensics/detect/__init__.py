"""Detectors: one module per finding kind, each `detect(run, params) -> list[Finding]`.

`run_detectors` runs them all. A detector that raises does not stop the others, but it is
never silent: its failure becomes an `info` finding with `facts["detector_failed"]` (the
detector's name) and `facts["traceback"]`, and the diagnosis built from it has the status
`incomplete` (never healthy: the figures are partial). `detect_incidents` groups the
findings into incidents (warning and above) and returns the `info` findings as notes.
"""

from __future__ import annotations

import traceback

from spikeforensics.detect import (
    above_uniform,
    clipping,
    converged,
    divergence,
    epoch_restarts,
    events,
    hard_spike,
    heldout,
    layer_outlier,
    loss_scale,
    loss_terms,
    nonfinite,
    oscillation,
    runs_in_log,
    sign_ratio,
    signals,
    signed_jump,
    soft_drift,
    stall,
    underflow,
    vanishing,
)
from spikeforensics.detect.base import Evidence, Finding, Incident, severity_rank
from spikeforensics.detect.incidents import group_incidents
from spikeforensics.rundata import RunData

DETECTORS = (
    ("nonfinite", nonfinite.detect),
    ("hard_spike", hard_spike.detect),
    ("signed_jump", signed_jump.detect),
    ("soft_drift", soft_drift.detect),
    ("loss_scale_collapse", loss_scale.detect),
    ("underflow_zeros", underflow.detect),
    ("sign_ratio_anomaly", sign_ratio.detect),
    ("clip_rate_anomaly", clipping.detect),
    ("layer_outlier", layer_outlier.detect),
    ("vanishing_gradients", vanishing.detect),
    ("loss_oscillation", oscillation.detect),
    ("divergence", divergence.detect),
    ("divergence_above_uniform", above_uniform.detect),
    ("heldout_mismatch", heldout.detect_mismatch),
    ("events", events.detect),
    ("no_progress", stall.detect),
)


def failure_finding(name: str, exc: BaseException, run: RunData | None = None) -> Finding:
    """The note that stands for a detector (or stage) that raised: named, with its traceback."""
    first = None
    if run is not None:
        try:
            first, _, _ = run.step_range()
        except Exception:  # noqa: BLE001 - the note must be built even from a broken run
            first = None
    kind = name if name in _KINDS else "hard_spike"
    return Finding(
        kind=kind,
        step_start=first or 0,
        step_end=first or 0,
        peak_step=first or 0,
        severity="info",
        score=0.0,
        summary=f"detector {name} failed (a bug in spikeforensics): {type(exc).__name__}: {exc}",
        evidence=[Evidence(signal="detector_error", step=None, value=None, note=str(exc))],
        facts={
            "error": "".join(traceback.format_exception_only(exc)).strip(),
            "scope": "run",
            "detector_failed": name,
            "traceback": "".join(traceback.format_exception(exc)),
        },
    )


# cached detector frames whose last reader is the detector named: released once it has run (issues 14/16: the
# grad-norm baseline alone is 0.13 GB at 2M records that the later detectors would carry). The grad-norm baseline
# is read by hard_spike (with its recurrence and loss-answer helpers) and, in a run with a layer dump, by
# layer_outlier, which then builds it again; a later reader always gets the same frame, only later.
RELEASED_AFTER = {"hard_spike": ("sf-base:grad_norm", "sf-loss-answer")}


def run_detectors(run: RunData, params) -> list[Finding]:
    """Every detector's findings, in step order; a detector error is kept as an info note that marks
    the detector as failed (`facts["detector_failed"]`)."""
    parts, findings = runs_in_log.split_runs(run, params)
    for part in parts:
        found: list[Finding] = []
        for name, detect in DETECTORS:
            try:
                found.extend(detect(part, params))
            except Exception as exc:  # noqa: BLE001 - one broken detector must not hide the others
                found.append(failure_finding(name, exc, part))
            signals.release(part, RELEASED_AFTER.get(name, ()))
        found = epoch_restarts.quiet_epoch_drifts(found, part, params)
        found = loss_terms.quiet_switched_on_terms(found, part, params)
        findings.extend(converged.quiet_converged_bumps(found, part, params))
        signals.release(part)
    findings = vanishing.absorb_spikes(findings, params)
    findings.sort(key=lambda f: (f.attempt, f.step_start, -severity_rank(f.severity)))
    return findings


def failed_detectors(findings: list[Finding]) -> list[str]:
    """Names of the detectors whose failure notes are among `findings`."""
    return [f.facts["detector_failed"] for f in findings if f.facts.get("detector_failed")]


def detect_incidents(run: RunData, params) -> tuple[list[Incident], list[Finding]]:
    """(incidents at warning and above, info notes); failed detectors are notes with `detector_failed`."""
    findings = run_detectors(run, params)
    notes = [f for f in findings if f.severity == "info"]
    interval = signals.record_interval(runs_in_log.judged_run(run, params))
    return group_incidents(findings, params, interval), notes


from spikeforensics.detect.base import KINDS as _KINDS  # noqa: E402

__all__ = ["DETECTORS", "run_detectors", "detect_incidents", "group_incidents", "failed_detectors", "failure_finding"]
