"""Event-convicted runs (detect/events.py), divergence (detect/divergence.py), grad-norm blips on long
runs, and the incident anchoring of divergence / first non-finite step (detect/incidents.py)."""

import json
from pathlib import Path

import numpy as np
import polars as pl
from _detect_synth import curves, run_from

from spikeforensics import detect as det
from spikeforensics.detect import divergence, events
from spikeforensics.detect.base import Finding
from spikeforensics.detect.incidents import group_incidents
from spikeforensics.params import Params
from spikeforensics.rundata import RunData

DEV = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "dev"
REAL = DEV.parent


def ev(kind, step=None, line=1, source="train.log", **detail):
    return {
        "source": source,
        "line": line,
        "step": step,
        "attempt": 0,
        "rank": None,
        "kind": kind,
        "time": None,
        "detail": json.dumps(detail),
    }


def events_run(rows, cols=None):
    frame = pl.DataFrame(rows, schema_overrides={"step": pl.Int64, "rank": pl.Int32, "time": pl.Datetime("us")})
    if cols is None:
        return RunData.from_frames(events=frame)
    return run_from(cols, events=frame)


def test_overflow_at_the_floor_convicts_without_any_series():
    run = events_run(
        [ev("overflow", None, 1, old_scale=2.0, new_scale=1.0), ev("overflow", None, 2, old_scale=1.0, new_scale=1.0)]
    )
    found = events.detect(run, Params())
    assert [(f.kind, f.severity, f.facts["cause"]) for f in found] == [
        ("loss_scale_collapse", "critical", "loss_scale_floor")
    ]


def test_scale_already_at_minimum_message_convicts():
    run = events_run(
        [
            ev(
                "error",
                None,
                5,
                exception="Exception",
                message="Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
            )
        ]
    )
    assert events.detect(run, Params())[0].facts["cause"] == "loss_scale_floor"


def test_overflows_above_the_floor_are_not_decisive():
    run = events_run([ev("overflow", s, s, old_scale=65536.0 / 2**s, new_scale=32768.0 / 2**s) for s in range(1, 5)])
    assert events.detect(run, Params()) == []


def test_every_logged_step_overflowing_convicts_but_calibration_does_not():
    c = curves(40)
    rows = [ev("overflow", int(s), i, old_scale=1024.0, new_scale=1024.0) for i, s in enumerate(c["step"])]
    found = events.detect(events_run(rows, c), Params())
    assert [f.facts["cause"] for f in found] == ["all_steps_overflow"]
    few = events.detect(events_run(rows[:10], c), Params())  # 10 of 40 steps: a scaler finding its level
    assert few == []


def test_a_short_run_whose_skips_keep_one_scale_convicts_but_halving_skips_do_not():
    # Megatron-LM #602: 4 of 4 iterations skipped at loss scale 16384 (no loss printed). A dynamic
    # scaler halves by its 2nd consecutive overflow, so skips at one scale are not calibration.
    c = curves(4)
    stuck = [
        ev("overflow" if i == 0 else "hysteresis", int(s), i, old_scale=16384.0, new_scale=16384.0)
        for i, s in enumerate(c["step"])
    ]
    found = events.detect(events_run(stuck, c), Params())
    assert [(f.facts["cause"], f.facts["same_scale_skips"]) for f in found] == [("all_steps_overflow", 4)]
    halving = [
        ev("overflow", int(s), i, old_scale=2.0 ** (32 - i), new_scale=2.0 ** (31 - i)) for i, s in enumerate(c["step"])
    ]
    assert events.detect(events_run(halving, c), Params()) == []  # a scaler finding its level from 2^32
    two = events.detect(events_run(stuck[:2], curves(2)), Params())  # 2 skips at one scale: hysteresis 2
    assert two == []


def test_a_norm_guard_skipping_every_step_at_steady_norms_convicts_as_a_tight_threshold():
    # minFM#4: `Step N: detected nan/inf/spiky gradient (norm=2.19); skipping optimizer step.` on every step
    c = curves(4)
    steady = [
        ev("skipped_step", int(s), i, reason="user_skip", value=str(2.16 + 0.01 * i)) for i, s in enumerate(c["step"])
    ]
    found = events.detect(events_run(steady, c), Params())
    assert [(f.kind, f.severity, f.facts["cause"], f.facts["guard_skips"]) for f in found] == [
        ("clip_rate_anomaly", "critical", "guard_skips_every_step", 4)
    ]
    # a guard skipping a norm that climbs 10x is stopping an explosion, not set too tight
    climbing = [
        ev("skipped_step", int(s), i, reason="user_skip", value=str(2.0 * 10**i)) for i, s in enumerate(c["step"])
    ]
    assert events.detect(events_run(climbing, c), Params()) == []
    # two skips among forty logged steps: the guard doing its job
    c40 = curves(40)
    assert events.detect(events_run(steady[:2], c40), Params()) == []


def test_hardware_error_then_nothing_convicts_and_a_later_record_clears_it():
    c = curves(20)
    dead = events_run(
        [ev("ecc", 20, 25, uncorrectable=True, message="CUDA error: uncorrectable ECC error encountered")], c
    )
    found = events.detect(dead, Params())
    assert [(f.kind, f.severity, f.facts["cause"]) for f in found] == [("hardware_error", "critical", "hardware_death")]
    alive = events_run([ev("ecc", 5, 5, uncorrectable=True, message="uncorrectable ECC error")], c)
    assert events.detect(alive, Params()) == []  # training went on after it (lines 6..20 are records)
    weak_xid = events_run([ev("xid", None, 30, source="kern.log", code=13)])
    assert events.detect(weak_xid, Params()) == []  # Xid 13 is usually the application


def test_stop_on_nonfinite_loss_convicts():
    run = events_run(
        [ev("nan", None, 3, metric="loss", value="nan", stopped=True, message="Loss is nan, stopping training")]
    )
    found = events.detect(run, Params())
    assert [(f.kind, f.facts["cause"]) for f in found] == [("nonfinite", "stopped_nonfinite")]


def test_divergence_is_one_incident_not_a_string_of_spikes():
    c = curves(1500, seed=4)
    c["loss"][1000:] *= np.linspace(1.5, 6.0, 500)  # leaves its band at 1001 and never comes back
    c["grad_norm"][1000:] *= 5
    found = divergence.detect(run_from(c), Params())
    assert len(found) == 1 and found[0].kind == "divergence" and found[0].severity == "critical"
    assert 995 <= found[0].step_start <= 1005
    incidents, _ = det.detect_incidents(run_from(c), Params())
    assert len(incidents) == 1 and incidents[0].kind == "divergence" and incidents[0].step_end == 1500


def test_spike_that_recovers_is_not_a_divergence():
    c = curves(1500, seed=5)
    c["loss"][1000:1004] *= [3.0, 2.5, 2.0, 1.5]
    assert divergence.detect(run_from(c), Params()) == []
    c = curves(1500, seed=6)  # a slow recovery cut off by the end of the log (bigscience tr1-13B)
    c["loss"][1490:] *= [2.6, 3.1, 2.8, 2.7, 2.6, 2.5, 2.45, 2.4, 2.35, 2.3]
    assert divergence.detect(run_from(c), Params()) == []


def test_monotone_climb_to_nan_is_a_divergence():
    c = curves(800, seed=7)
    c["loss"][700:705] *= [1.6, 2.2, 3.5, 6.0, 12.0]
    c["loss"][705:] = np.nan
    found = divergence.detect(run_from(c), Params())
    assert len(found) == 1 and found[0].facts["ends_nonfinite"]


def test_loss_ending_above_its_start_behind_a_noisy_band_is_a_divergence():
    # the noise grows before the rise (an LR range test): the trailing band is too wide for the band test, but the
    # loss fell 10x and ends above where it began
    rng = np.random.default_rng(3)
    loss = np.concatenate(
        [
            np.linspace(0.69, 0.07, 60),
            0.07 * np.exp(np.abs(rng.normal(0, 1.0, 20))),  # 0.07-0.5, returning each time
            np.linspace(0.68, 0.95, 20) * np.exp(rng.normal(0, 0.05, 20)),
        ]
    )
    c = {"step": np.arange(1, 101), "loss": loss}
    found = divergence.detect(run_from(c), Params())
    assert len(found) == 1 and found[0].severity == "critical" and 78 <= found[0].step_start <= 81
    # the same fall, ending at twice its lowest level but well under its start: not this arm's
    c["loss"] = np.concatenate([loss[:80], np.full(20, 0.14) * np.exp(rng.normal(0, 0.05, 20))])
    assert divergence.detect(run_from(c), Params()) == []


def test_real_lr_range_test_climbing_past_its_chance_level_start_is_a_divergence(tmp_path):
    from spikeforensics import api

    case = (
        REAL / "fresh52" / "keras-tf-course-lr-range-test-circles-100-epochs-loss-bottoms-epoch60-diverges-from-epoch80"
    )
    api.ingest([case / "02_neural_network_classification_in_tensorflow_cell95_stdout.txt"], run_id="r", store=tmp_path)
    found = divergence.detect(api.load_run("r", tmp_path), Params())
    assert len(found) == 1 and 79 <= found[0].step_start <= 80 and found[0].step_end == 100


def test_real_tr1_13b_spike_with_slow_recovery_is_not_a_divergence(tmp_path):
    from spikeforensics import api

    api.ingest(
        [DEV / "megatron-deepspeed-tr1-13b-lm-loss-spike" / "chronicles_excerpt.log"], run_id="r", store=tmp_path
    )
    run = api.load_run("r", tmp_path)
    assert divergence.detect(run, Params()) == []


def f(kind, lo, hi, severity="critical", score=1.0, **kw):
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


def test_first_nonfinite_step_anchors_the_incident_when_it_comes_first():
    inc = group_incidents([f("nonfinite", 2, 19), f("hard_spike", 3, 3, score=9.0)], Params())
    assert (inc[0].kind, inc[0].peak_step, inc[0].facts["first_nonfinite_step"]) == ("nonfinite", 2, 2)
    # a spike that precedes the NaN stays the headline (propagation)
    inc = group_incidents([f("hard_spike", 100, 101, peak=100), f("nonfinite", 103, 110)], Params())
    assert (inc[0].kind, inc[0].peak_step) == ("hard_spike", 100)


def test_long_healthy_run_with_grad_norm_blips_stays_healthy():
    c = curves(40_000, seed=3)
    for step, ratio in [(2000, 50), (7000, 5), (15000, 20), (26000, 30), (35000, 8)]:
        c["grad_norm"][step] *= ratio
    incidents, notes = det.detect_incidents(run_from(c), Params())
    assert incidents == []
    pattern = [n for n in notes if n.facts.get("recurring_spikes")]
    assert len(pattern) == 1 and pattern[0].facts["blips"] == [2001, 7001, 15001, 26001, 35001]
    assert "at steps 2001, 7001" in pattern[0].summary


def test_blip_the_loss_answers_is_still_an_incident_on_a_long_run():
    c = curves(40_000, seed=3)
    c["grad_norm"][20_000] *= 50
    c["loss"][20_001] *= 2.5
    incidents, _ = det.detect_incidents(run_from(c), Params())
    assert [i.severity for i in incidents] == ["critical"]


def test_detector_failure_is_recorded_by_name(monkeypatch):
    def broken(run, params):
        raise RuntimeError("boom")

    monkeypatch.setattr(det, "DETECTORS", (*det.DETECTORS, ("sign_ratio_anomaly", broken)))
    findings = det.run_detectors(run_from(curves(300)), Params())
    assert det.failed_detectors(findings) == ["sign_ratio_anomaly"]
    note = next(x for x in findings if x.facts.get("detector_failed"))
    assert "RuntimeError: boom" in note.facts["traceback"] and "Traceback" in note.facts["traceback"]


def test_a_scale_of_one_is_the_floor_only_for_scalers_whose_minimum_it_is():
    c = curves(40)
    deepspeed = events_run([ev("overflow", 20, 21, old_scale=2.0, new_scale=1.0, source_format="deepspeed")], c)
    assert [f.facts["cause"] for f in events.detect(deepspeed, Params())] == ["loss_scale_floor"]
    # fairseq halves on to 1e-4: "setting loss scale to: 1.0" once is no floor
    fairseq = events_run([ev("overflow", 20, 21, new_scale=1.0, source_format="fairseq")], c)
    assert events.detect(fairseq, Params()) == []
    # whatever the framework, a halving that could not happen ("reducing to 1" from 1) is the floor
    stuck = events_run([ev("overflow", 20, 21, old_scale=1.0, new_scale=1.0)], c)
    assert [f.facts["cause"] for f in events.detect(stuck, Params())] == ["loss_scale_floor"]
