"""Short excerpts judged as a whole, and a GAN's losses judged without a ratio scale (first met in the
real corpus: fresh5's bigscience 104B exp2 and GUI-Actor pastes, fresh3's Unsloth #4982, fresh6's
LightGBM #742 and StyleGAN3 stats.jsonl). Hand-made frames for the boundaries, the real logs for the
behaviour."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
from _detect_synth import run_from

from spikeforensics import api
from spikeforensics.detect import clipping, soft_drift
from spikeforensics.params import Params

REAL = Path(__file__).resolve().parents[1] / "sample_logs" / "real"


def diagnose_case(tmp_path, name):
    folder = next(d / name for d in REAL.iterdir() if (d / name).is_dir())
    facts = tomllib.loads((folder / "FACTS.toml").read_text())
    api.ingest([folder / f for f in facts["files"]], run_id="r", store=tmp_path)
    run = api.load_run("r", tmp_path)
    return run, api.diagnose(run), facts


def excerpt(loss, start=6900, every=10, **cols):
    n = len(loss)
    return run_from({"step": np.arange(start, start + every * n, every)[:n], "loss": np.asarray(loss), **cols})


@pytest.mark.parametrize(
    ("loss", "found"),
    [
        ([6.37, 6.60, 7.31, 9.12, 10.24], True),  # 4 rises, +61%: the bigscience 104B exp2 paste
        ([2.56, 2.70, 2.67, 2.62, 2.81, 2.92, 3.32], True),  # 3 rises from 2.62, +27%
        ([2.56, 2.70, 2.67, 2.62, 2.70, 2.75, 2.80], False),  # 3 rises, only +7%: a wander
        ([6.37, 6.90, 6.60, 9.12, 10.24], False),  # 2 rises at the end (p 1/6 by chance)
        ([10.2, 9.1, 7.3, 6.6, 6.4], False),  # falling
    ],
)
def test_an_excerpt_still_climbing_at_its_end_is_soft_drift(loss, found):
    findings = soft_drift.detect(excerpt(loss), Params())
    assert bool(findings) is found
    if found:
        f = findings[0]
        assert f.kind == "soft_drift" and f.facts["excerpt_climb"] and f.step_end == 6900 + 10 * (len(loss) - 1)


def test_a_climb_of_two_x_is_critical_and_a_long_log_is_left_to_the_drift_test():
    f = soft_drift.detect(excerpt([3.0, 3.3, 4.5, 6.5]), Params())[0]
    assert f.severity == "critical" and f.score >= 2
    # past `early_min` records the smoothed drift test decides, not the excerpt rule
    long = np.r_[np.full(60, 3.0) * np.exp(np.random.default_rng(1).normal(0, 0.01, 60)), [3.4, 3.9, 4.4]]
    assert not any(f.facts.get("excerpt_climb") for f in soft_drift.detect(excerpt(long), Params()))


def test_a_loss_rising_from_the_first_update_needs_only_the_domain_rise():
    # LightGBM #742: binary logloss 0.7127 -> 0.7711 over its first 4 iterations (+8%)
    rising = [0.712679, 0.732192, 0.751667, 0.77109]
    assert soft_drift.detect(excerpt(rising, start=1, every=1), Params())
    # the same climb from mid-training is a wander an excerpt cannot judge
    assert not soft_drift.detect(excerpt(rising, start=5000, every=1), Params())


def test_astronomical_norms_on_a_short_excerpt_without_a_loss_scale_are_flagged():
    loss = [2.56, 2.70, 2.67, 2.62, 2.81]
    big = excerpt(loss, grad_norm=[6.4e6, 1.8e6, 3.6e7, 9.1e6, 2.2e6])
    (f,) = clipping.detect(big, Params())
    assert f.kind == "clip_rate_anomaly" and f.severity == "warning" and f.facts["cause"] == "astronomical_norms"
    assert f.peak_step == 6920
    # ordinary norms, or a loss scale that may be what makes them large: nothing
    assert clipping.detect(excerpt(loss, grad_norm=[0.9, 1.1, 0.8, 1.2, 1.0]), Params()) == []
    scaled = excerpt(loss, grad_norm=[6.4e3, 1.8e3, 3.6e4, 9.1e3, 2.2e3], loss_scale=[4096.0] * 5)
    assert clipping.detect(scaled, Params()) == []


@pytest.mark.parametrize(
    "name",
    [
        "megatron-deepspeed-bigscience-tr8-104b-exp2-seed43-spike-6930-end-of-lr-warmup",
        "hf-trainer-gui-actor-20-qwen25-vl-7b-stage2-grad-norm-1e7-loss-rising",
        "unsloth-4982-gemma4-e2b-grad-accum-bug-loss-186-gradnorm-8128",
        "lightgbm-742-binary-logloss-rises-from-iter1-is-unbalance-and-scale-pos-weight",
    ],
)
def test_real_unhealthy_excerpts_are_not_called_healthy(tmp_path, name):
    if not any((d / name).is_dir() for d in REAL.iterdir()):
        name = next(p.name for d in REAL.iterdir() for p in d.iterdir() if p.name.startswith(name[:40]))
    run, d, facts = diagnose_case(tmp_path, name)
    assert not facts["healthy"]
    assert d["verdict"]["status"] in ("degraded", "unstable")


def test_a_gan_loss_is_judged_without_a_ratio_scale(tmp_path):
    # StyleGAN3 stats.jsonl: every metric a {num, mean, std} summary; G and D losses rise and fall as either
    # side gains. Read whole, judged for NaN and jumps past its range only, and healthy with that limit said
    run, d, facts = diagnose_case(tmp_path, "stylegan3-phytoplankton-stats-jsonl-healthy-751-ticks-3000kimg")
    assert run.series("loss").height == facts["step_records"] == 751
    assert run.loss_without_ratio() == "adversarial"
    v = d["verdict"]
    assert v["status"] == "healthy" and "loss" in v["coverage"]["limited"] and "GAN" in v["summary"]


def test_a_gan_pair_by_name_and_a_plain_loss_beside_a_discriminator_metric():
    steps = np.arange(1, 201)
    g = 3 + np.sin(steps / 5)
    gan = run_from({"step": steps, "g_loss": g, "d_loss": 1 / g})
    assert gan.resolve("loss") in ("d_loss", "g_loss") and gan.loss_without_ratio() == "adversarial"
    # a plain loss with a `d_`-named metric that is no loss: an ordinary loss
    plain = run_from({"step": steps, "loss": g, "d_model": np.full(200, 512.0)})
    assert plain.loss_without_ratio() is None
    # a NaN on a GAN's loss is still found
    g_nan = g.copy()
    g_nan[150:] = np.nan
    d = api.diagnose(run_from({"step": steps, "g_loss": g_nan, "d_loss": 1 / g}))
    assert d["verdict"]["status"] == "unstable"


def test_an_oscillation_that_relapses_above_the_initial_loss_counts_while_its_trend_falls():
    # CS336 at LR 1 (fresh6): the calm level improves, yet spikes of 10-60x come every few records and
    # return above the initial loss again and again
    rng = np.random.default_rng(7)
    n = 500
    calm = 13.0 * np.exp(-np.arange(n) / 30) + 7.0 - 2.0 * np.arange(n) / n
    spikes = np.where(rng.random(n) < 0.35, rng.uniform(3, 60, n), 1.0)
    loss = calm * spikes * np.exp(rng.normal(0, 0.1, n))
    loss[0] = 14.0
    from spikeforensics.detect import oscillation

    found = oscillation.detect(excerpt(loss, start=10, every=10), Params())
    assert found and found[0].kind == "loss_oscillation"
    # the same swings without relapses (every spike stays under the initial loss): a falling noisy phase
    capped = np.minimum(loss, 13.0)
    capped[0] = 14.0
    assert oscillation.detect(excerpt(capped, start=10, every=10), Params()) == []


def test_cs336_lr1_is_an_lr_instability(tmp_path):
    run, d, facts = diagnose_case(tmp_path, "cs336-xiamishaonian-lr1-tinystories-loss-spikes-lr-too-high")
    assert d["verdict"]["status"] == "unstable" and d["verdict"]["root_cause"] == facts["stated_label"] == "lr_too_high"


def test_zeros_a_loss_keeps_returning_from_are_values_not_masked_nans():
    from spikeforensics.detect import nonfinite

    rng = np.random.default_rng(3)
    n = 400
    pairwise = rng.uniform(0.05, 1.2, n)
    pairwise[rng.random(n) < 0.08] = 0.0  # a margin loss is exactly 0 on well-ranked pairs, now and then
    findings = nonfinite.detect(excerpt(pairwise, start=1, every=1), Params())
    assert not [f for f in findings if f.severity != "info"]
    # a trainer that masks a NaN as 0.0: the zeros start after a normal loss and stick
    masked = np.r_[np.linspace(2.0, 1.5, 300), np.zeros(100)]
    findings = nonfinite.detect(excerpt(masked, start=1, every=1), Params())
    assert any(f.severity == "critical" for f in findings)


def test_zeros_of_a_loss_that_never_goes_near_zero_stay_masked_nans_however_often():
    from spikeforensics.detect import nonfinite

    lm = np.linspace(3.0, 2.0, 400)
    lm[50::60] = 0.0  # a trainer printing NaN intervals as 0.0, six times, the loss recovering in between
    findings = nonfinite.detect(excerpt(lm, start=1, every=1), Params())
    assert any(f.severity == "critical" for f in findings)


def test_a_grad_norm_drift_is_judged_when_the_loss_is_too_short_for_the_drift_test():
    # the excerpt rule for a short loss must not switch off the grad-norm drift test (a grad-norm-only log)
    rng = np.random.default_rng(5)
    n = 1200
    grad = np.r_[np.full(600, 0.5), np.full(600, 2.0)] * np.exp(rng.normal(0, 0.05, n))
    run = run_from({"step": np.arange(1, n + 1), "grad_norm": grad})
    found = soft_drift.detect(run, Params())
    assert any(e.signal == "grad_norm" for f in found for e in f.evidence)


def test_a_short_excerpt_joint_rise_needs_both_signals():
    """Under `short_series_records` the robust sigma is no use, so a joint rise is judged on the ratios over the
    past alone: the loss 1.15x and the grad norm 2x at the same or the next record. Either alone is no spike."""
    from spikeforensics.detect import hard_spike

    loss = [0.60, 0.58, 0.62, 0.59, 0.61, 0.60, 0.73, 0.63, 0.61, 0.60]  # 1.2x: over 1.15, under the 1.3 floor
    grad = [0.30, 0.28, 0.31, 0.29, 0.30, 0.31, 4.10, 0.35, 0.30, 0.29]
    both = hard_spike.detect(excerpt(loss, grad_norm=grad), Params())
    assert [f.severity for f in both if f.severity != "info"] == ["critical"]
    flat_grad = [0.30, 0.28, 0.31, 0.29, 0.30, 0.31, 0.33, 0.35, 0.30, 0.29]
    assert all(f.severity == "info" for f in hard_spike.detect(excerpt(loss, grad_norm=flat_grad), Params()))


@pytest.mark.parametrize("seed", range(6))
def test_a_noisy_healthy_short_excerpt_has_no_joint_spike(seed):
    """40 records of a per-batch loss (15% noise) and grad norm (40% noise): their chance co-movements (a loss
    1.15x up beside a grad norm 2x up) are no spike; only a 10x grad norm joins a loss rise in a short excerpt."""
    from spikeforensics.detect import hard_spike

    rng = np.random.default_rng(seed)
    loss = 2 * np.exp(rng.normal(0, 0.15, 40))
    grad = np.exp(rng.normal(0, 0.4, 40))
    found = hard_spike.detect(excerpt(list(loss), grad_norm=grad), Params())
    assert not [f for f in found if f.severity != "info" and f.evidence[0].signal == "grad_norm"]
    assert not [f for f in found if f.severity != "info" and {e.signal for e in f.evidence} == {"loss", "grad_norm"}]
