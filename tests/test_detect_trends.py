"""Soft drift and loss oscillation: sustained changes judged on smoothed series."""

import numpy as np
from _detect_synth import curves, run_from

from spikeforensics.detect import oscillation, soft_drift
from spikeforensics.params import Params


def test_quiet_on_clean_runs():
    for seed, n in ((0, 500), (1, 3000), (2, 10000)):
        run = run_from(curves(n, seed=seed))
        assert soft_drift.detect(run, Params()) == []
        assert oscillation.detect(run, Params()) == []


def test_loss_drifting_up_is_a_soft_drift():
    c = curves(3000, seed=3)
    c["loss"][2000:] *= np.linspace(1.0, 1.3, 1000)  # +30% over 1000 steps (~1.5% per 50)
    c["loss"][2000:2300] *= np.linspace(1.0, 1.15, 300)
    found = soft_drift.detect(run_from(c), Params())
    assert found and all(f.kind == "soft_drift" and f.severity == "warning" for f in found)
    assert 2000 <= found[0].step_start <= 2300


def test_grad_norm_level_shift_is_a_soft_drift():
    c = curves(3000, seed=4)
    c["grad_norm"][1800:] *= 3
    [f] = soft_drift.detect(run_from(c), Params())
    assert f.evidence[0].signal == "grad_norm" and 1650 <= f.peak_step <= 1850 and f.evidence[0].ratio > 2


def test_one_step_spike_is_not_a_drift():
    c = curves(3000, seed=5)
    c["loss"][1500] *= 3
    c["grad_norm"][1500] *= 30
    assert soft_drift.detect(run_from(c), Params()) == []


def test_oscillating_loss_without_progress():
    c = curves(4000, seed=6)
    rng = np.random.default_rng(6)
    c["loss"][2500:3300] *= np.exp(0.25 * np.sign(np.sin(np.arange(800) * 0.9)) + rng.normal(0, 0.05, 800))
    [f] = oscillation.detect(run_from(c), Params())
    assert f.kind == "loss_oscillation" and 2450 <= f.step_start <= 2600 and 3200 <= f.step_end <= 3400


def test_noisier_but_improving_loss_is_not_oscillation():
    c = curves(4000, seed=7, loss_noise=0.06)
    assert oscillation.detect(run_from(c), Params()) == []


def test_slow_climb_over_thousands_of_steps_is_a_soft_drift():
    """A loss climbing 2x over 3,000 steps (2% per 100 records: never 5% per 50), holding, then falling back:
    the slow-climb test (10% above its lowest of the previous 500 records) must find it, judged against its
    level before those 500 records, not against the level 100 records ago (which a slow climb is barely above)."""
    c = curves(12000, seed=5)
    rise = np.concatenate([np.linspace(0, np.log(2), 3000), np.full(1500, np.log(2)), np.linspace(np.log(2), 0, 3000)])
    c["loss"][3000:10500] *= np.exp(rise)
    found = soft_drift.detect(run_from(c), Params())
    assert found and found[0].kind == "soft_drift" and 3000 <= found[0].step_start <= 4500
    assert soft_drift.detect(run_from(curves(12000, seed=5)), Params()) == []
