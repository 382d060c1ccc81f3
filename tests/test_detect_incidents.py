"""Grouping findings into incidents, notes, the detector driver and its error isolation."""

import time

import numpy as np
from _detect_synth import curves, run_from

from spikeforensics import detect as det
from spikeforensics.detect.base import Finding
from spikeforensics.detect.incidents import group_incidents
from spikeforensics.params import Params


def f(kind, lo, hi, severity="warning", score=1.0, **kw):
    return Finding(
        kind=kind,
        step_start=lo,
        step_end=hi,
        peak_step=kw.pop("peak", lo),
        severity=severity,
        score=score,
        summary=kind,
        **kw,
    )


def test_overlapping_findings_merge_with_max_severity_and_strongest_kind():
    found = [
        f("soft_drift", 100, 180, score=3.0),
        f("hard_spike", 150, 152, "critical", peak=151, layer="h.1"),
        f("nonfinite", 153, 400, "critical"),
        f("clip_rate_anomaly", 900, 950),
    ]
    inc = group_incidents(found, Params())
    assert [i.id for i in inc] == ["inc-1", "inc-2"]
    first = inc[0]
    assert first.kind == "hard_spike" and first.kinds == ["hard_spike", "nonfinite", "soft_drift"]
    assert first.severity == "critical" and (first.step_start, first.step_end, first.peak_step) == (100, 400, 151)
    assert first.layers == ["h.1"]


def test_info_findings_never_join_incidents_and_run_wide_ones_do_not_swallow_spikes():
    found = [
        f("clip_rate_anomaly", 120, 125, "info"),
        f("hard_spike", 121, 121, "critical"),
        f("underflow_zeros", 50, 5000, facts={"scope": "run"}),
        f("hard_spike", 3000, 3001),
    ]
    inc = group_incidents(found, Params())
    assert [(i.kind, i.step_start) for i in inc] == [("underflow_zeros", 50), ("hard_spike", 121), ("hard_spike", 3000)]
    assert all("clip_rate_anomaly" not in i.kinds for i in inc)


def test_attempts_are_kept_apart():
    found = [f("hard_spike", 500, 502, attempt=0), f("hard_spike", 500, 502, attempt=1)]
    assert [i.attempt for i in group_incidents(found, Params())] == [0, 1]


def test_detect_incidents_end_to_end_and_detector_errors_become_notes(monkeypatch):
    c = curves(3000, seed=1)
    c["grad_norm"][1999] *= 40
    c["loss"][1999] *= 2.5
    c["loss"][2600:] = np.nan
    run = run_from(c)

    def broken(run, params):
        raise RuntimeError("boom")

    monkeypatch.setattr(det, "DETECTORS", (*det.DETECTORS, ("sign_ratio_anomaly", broken)))
    incidents, notes = det.detect_incidents(run, Params())
    assert [(i.kind, i.severity, i.peak_step) for i in incidents] == [
        ("hard_spike", "critical", 2000),
        ("nonfinite", "critical", 2601),
    ]
    assert any("boom" in n.summary for n in notes)


def test_clean_run_has_no_incidents():
    incidents, _ = det.detect_incidents(run_from(curves(5000, seed=9)), Params())
    assert incidents == []


def test_hundred_thousand_steps_in_seconds():
    c = curves(100_000, seed=2)
    c["grad_norm"][60_000] *= 50
    c["loss"][60_000] *= 2.5  # a spike the loss answers (a grad-only blip on a run this long is a note)
    run = run_from(c)
    t0 = time.perf_counter()
    incidents, _ = det.detect_incidents(run, Params())
    assert time.perf_counter() - t0 < 20
    assert [i.peak_step for i in incidents] == [60_001]


def test_an_incident_recovers_as_its_worst_known_finding():
    # a spike the log ends on (recovery unknown) merged with a climb still rising at the end: it never recovered
    found = [
        f("hard_spike", 220, 385, "critical", score=5.0, facts={"recovery": "unknown"}),
        f("soft_drift", 220, 385, facts={"recovery": "never", "excerpt_climb": True}),
    ]
    (inc,) = group_incidents(found, Params())
    assert inc.kind == "hard_spike" and inc.facts["recovery"] == "never"
    both_known = [
        f("hard_spike", 10, 12, "critical", facts={"recovery": "fast"}),
        f("soft_drift", 10, 40, facts={"recovery": "slow"}),
    ]
    assert group_incidents(both_known, Params())[0].facts["recovery"] == "slow"
    unknown = [f("hard_spike", 10, 12, "critical", facts={"recovery": "unknown"})]
    assert group_incidents(unknown, Params())[0].facts["recovery"] == "unknown"
