"""Soft drift and loss oscillation: sustained changes judged on smoothed series."""

import numpy as np
import pytest
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


def bimodal_loss(n: int, seed: int, step_every: int = 50) -> dict:
    """A per-batch loss under mixup/cutmix as timm prints it every 50 updates: each batch's loss sits
    near one of two levels (about 5.0 and 3.5), most near the upper one, slowly falling; in some
    stretches the mix shifts (more batches near 3.5), which moves the rolling median 10-15% and makes
    the stretch look 1.5x as volatile. No drift anywhere (a healthy timm ViTAE run looks like this)."""
    rng = np.random.default_rng(seed)
    fall = np.linspace(0.0, -0.25, n)
    share_low = np.full(n, 0.2)
    for lo in rng.integers(n // 10, n - 300, size=6):
        share_low[lo : lo + 200] = 0.4
    mode = np.where(rng.random(n) < share_low, np.log(3.5), np.log(5.0))
    loss = np.exp(mode + fall + rng.normal(0, 0.06, n))
    return {"step": np.arange(1, n + 1) * step_every, "loss": loss}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_bimodal_per_batch_loss_is_no_oscillation(seed):
    # a typical volatility under the absolute level needs the 3x ratio: the mix shifts are 1.5x
    assert oscillation.detect(run_from(bimodal_loss(6000, seed)), Params()) == []


@pytest.mark.parametrize(
    "seed",
    [1, 2, 3],
)
def test_a_bimodal_per_batch_loss_is_no_drift(seed):
    # its rolling median jumps between the two levels (10-15% swings): the run's own spread of rises
    # (median + 3 robust sigma of the same rise over the run) sets the bar; seed 3 comes back from a dip
    # that sits where the 500-record window starts (judged against one past level, it read as a slow climb)
    assert soft_drift.detect(run_from(bimodal_loss(6000, seed)), Params()) == []


def test_a_real_drift_on_a_bimodal_loss_is_still_found():
    # the level climbs 1.8x over 1,000 records (50,000 steps) and stays there (before the floor: 35-37
    # soft drifts on each clean run of this shape, none of them real)
    c = bimodal_loss(6000, 4)
    c["loss"][3000:4000] *= np.exp(np.linspace(0.0, np.log(1.8), 1000))
    c["loss"][4000:] *= 1.8
    found = soft_drift.detect(run_from(c), Params())
    # (the level holds to the end: a finding in the hold is the same drift; none before it)
    assert found and 3000 * 50 <= found[0].step_start <= 4500 * 50 and all(f.step_start >= 3000 * 50 for f in found)


def test_a_slow_grad_norm_climb_is_a_soft_drift():
    """The grad norm creeps up 4x over 600 records, holds, and falls back: a level-shift test that
    compares two 100-record medians never sees a 2x step, the slow-climb test (as for the loss) does."""
    c = curves(3000, seed=8)
    climb = np.concatenate([np.linspace(0, np.log(4), 600), np.full(300, np.log(4)), np.linspace(np.log(4), 0, 600)])
    c["grad_norm"][1000:2500] *= np.exp(climb)
    found = soft_drift.detect(run_from(c), Params())
    grad = [f for f in found if any(e.signal == "grad_norm" for e in f.evidence)]
    assert grad and 1000 <= grad[0].step_start <= 1700 and grad[0].score >= 2
    assert soft_drift.detect(run_from(curves(3000, seed=8)), Params()) == []


def test_a_slow_loss_climb_of_eight_percent_is_a_soft_drift():
    """DOMAIN's 5%: a loss on its plateau that climbs 8% over 400 records (under 1% per 50) and holds is
    a drift when the loss is quiet enough for 8% to stand out of its own noise (here 1% per step)."""
    rng = np.random.default_rng(9)
    plateau = {"step": np.arange(1, 3001), "loss": 2.0 * np.exp(rng.normal(0, 0.01, 3000))}
    assert soft_drift.detect(run_from(plateau), Params()) == []
    plateau["loss"][1500:1900] *= np.exp(np.linspace(0, np.log(1.08), 400))
    plateau["loss"][1900:] *= 1.08
    found = soft_drift.detect(run_from(plateau), Params())
    assert found and 1500 <= found[0].step_start <= 1950


def test_a_drift_that_fills_most_of_a_short_run_is_still_found():
    """The slow climb's bar is the run's own gaps (median + 3 robust sigma); when a climb, its hold and
    its fall fill three quarters of a 900-record run those gaps are the drift itself (a 54% bar for a
    24% climb, seen on an injected Mixtral curve): the bar is capped at `gap_floor_sigmas` noise units."""
    rng = np.random.default_rng(10)
    plateau = {"step": np.arange(1, 901), "loss": 2.0 * np.exp(rng.normal(0, 0.01, 900))}
    bump = np.concatenate(
        [np.linspace(0, np.log(1.25), 300), np.full(100, np.log(1.25)), np.linspace(np.log(1.25), 0, 300)]
    )
    plateau["loss"][200:900] *= np.exp(bump)
    found = soft_drift.detect(run_from(plateau), Params())
    assert found and 200 <= found[0].step_start <= 500
    uncapped = Params()
    uncapped.set("soft_drift.gap_floor_sigmas", 1000.0)
    assert soft_drift.detect(run_from(plateau), uncapped) == []  # the run's own gaps alone hide it


def diffusion_loss(n: int, seed: int) -> dict:
    """A diffusion model's per-batch loss as OpenAI's logger prints it every 10 steps: a batch that drew
    mostly low noise levels sits near 0.15, the others near 0.8; the share of the upper mode wanders
    between 30% and 60% in stretches, so a 25-record rolling median jumps 5x between the modes and back
    (a healthy improved-diffusion run looks like this: its busiest stretch has ~60% upper-mode records).
    No drift anywhere."""
    rng = np.random.default_rng(seed)
    share_high = np.full(n, 0.45)
    for lo in rng.integers(n // 10, n - 100, size=12):
        share_high[lo : lo + int(rng.integers(20, 80))] = rng.uniform(0.3, 0.6)
    mode = np.where(rng.random(n) < share_high, np.log(0.8), np.log(0.15))
    return {"step": np.arange(n) * 10, "loss": np.exp(mode + rng.normal(0, 0.25, n))}


def test_a_bimodal_diffusion_loss_is_mostly_no_drift():
    # its lower quartile stays in the lower mode while the median flips. Not solved for every mix: a window
    # whose upper-mode share reaches 3/4 by chance flips the quartile too (2 of these 8 runs; before the
    # lower-quartile test all 8 had 2-10 soft drifts each; the real improved-diffusion log has none now)
    drifting = [seed for seed in range(1, 9) if soft_drift.detect(run_from(diffusion_loss(2000, seed)), Params())]
    assert len(drifting) <= 2, drifting


def test_a_real_drift_on_a_diffusion_loss_is_still_found():
    c = diffusion_loss(2000, 4)
    # both modes up 3x and staying (a drift that only moves the loss 1.6x can hide in the mode flips: the
    # median's rise then includes a flip its lower quartile does not share)
    c["loss"][1200:] *= 3.0
    found = soft_drift.detect(run_from(c), Params())
    assert found and 1150 * 10 <= found[0].step_start <= 1400 * 10


def test_a_grad_norm_rising_as_the_lr_decays_is_a_note_not_a_warning():
    """The grad norm of a run whose LR decays to ~0 grows as the LR goes down (a fine-tune's cosine schedule:
    2 -> 10 while the loss keeps falling): lr x norm, the update, does not drift, so the rise is an info note.
    The same rise under a constant LR stays a warning."""
    c = curves(3000, seed=3)
    rise = np.clip((c["lr"][1000] / np.maximum(c["lr"], 1e-12)) ** 0.7, 1, 8)
    rise[:1000] = 1
    c["grad_norm"] = c["grad_norm"] * rise
    decaying = [f for f in soft_drift.detect(run_from(c), Params()) if f.evidence[0].signal == "grad_norm"]
    assert decaying and all(f.severity == "info" for f in decaying)
    assert "LR decayed" in decaying[0].summary and decaying[0].facts["update_ratio"] <= 1
    c["lr"] = np.full(3000, 3e-4)
    constant = [f for f in soft_drift.detect(run_from(c), Params()) if f.evidence[0].signal == "grad_norm"]
    assert constant and constant[0].severity == "warning"


def test_a_loss_that_climbs_back_inside_the_early_phase_is_a_rebound():
    """The curve falls from ~11 to ~3 over its first 60 steps, then (steps 70-110) climbs back 2.4x and falls again:
    inside the early phase (the first 5% of the records and at least 50) that the drift test leaves out. One
    rebound finding from the low (smoothed over 25 records: 1.5x or more); the plain curve, and a level start that bumps 35% with no fall
    to undo, give none."""
    c = curves(4000, seed=7)
    assert [f for f in soft_drift.detect(run_from(c), Params()) if f.facts.get("early_rebound")] == []
    bump = np.ones(4000)
    bump[69:111] = np.concatenate([np.linspace(1, 2.4, 21), np.linspace(2.4, 1, 21)])
    [f] = [
        f for f in soft_drift.detect(run_from(dict(c, loss=c["loss"] * bump)), Params()) if f.facts.get("early_rebound")
    ]
    assert f.score >= 1.5 and 60 <= f.step_start <= 75 and 75 <= f.peak_step <= 95
    level = np.where(np.arange(4000) < 200, 5.0, c["loss"]) * np.exp(np.random.default_rng(1).normal(0, 0.02, 4000))
    level = level * np.where((np.arange(4000) >= 60) & (np.arange(4000) < 100), 1.35, 1.0)
    assert [f for f in soft_drift.detect(run_from(dict(c, loss=level)), Params()) if f.facts.get("early_rebound")] == []
