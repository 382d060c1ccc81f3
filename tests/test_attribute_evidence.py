"""Evidence that separates the root causes: per-sample loss against normal data, replayed samples,
loss scaling that is really in use, LR schedules that rise or skip the warmup, stuck signs among
non-zero gradients. Hand-made runs; the tune-fixture checks are in test_attribute_fixtures.py."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from attribute_synth import events, feats, incident, make_run, metric_rows, ranked

from spikeforensics.attribute.rules import load_rules
from spikeforensics.attribute.scoring import attribute
from spikeforensics.params import Params
from spikeforensics.rundata import RunData


def verdict(f):
    return attribute(load_rules(), f, Params().attribution).root_cause


def _set_losses(run: RunData, step: int, n_bad: int, bad_loss: float) -> tuple[RunData, list[str]]:
    """Give the first `n_bad` samples of `step` the loss `bad_loss` (a batch with several bad documents)."""
    at = run.batches.filter(pl.col("step") == step)
    bad = at.head(n_bad).get_column("sample_id").to_list()
    b = run.batches.with_columns(
        pl.when(pl.col("sample_id").is_in(bad))
        .then(pl.lit(bad_loss))
        .otherwise(pl.col("sample_loss"))
        .alias("sample_loss")
    )
    return RunData.from_frames(run.run_id, metrics=run.metrics, batches=b), bad


def test_most_of_the_batch_bad_still_stands_out_against_normal_data():
    # 7 of 8 samples of the spiking step are junk: the step median is junk too, normal data is not
    run, bad = _set_losses(make_run(spike_at=150, micro=2, per_micro=4), 150, 7, 10.0)
    out = ranked(run, incident(150))
    assert set(out.head(5).get_column("sample_id")) <= set(bad)
    assert out.row(0, named=True)["loss_ratio"] == pytest.approx(5.0, rel=0.1)
    f = feats(run, incident(150))
    assert f["sample_loss_outlier"] is True and verdict(f) == "data_outlier"


def test_a_batch_wide_loss_rise_is_not_a_sample_outlier():
    # every sample's loss x4 (LR or hardware): no sample stands out from its own batch
    run = make_run(spike_at=150, micro=2, per_micro=4)
    b = run.batches.with_columns(
        pl.when(pl.col("step") == 150)
        .then(pl.col("sample_loss") * 4)
        .otherwise(pl.col("sample_loss"))
        .alias("sample_loss")
    )
    run = RunData.from_frames("r", metrics=run.metrics, batches=b)
    f = feats(run, incident(150))
    assert f["top_sample_loss_ratio"] < 1.5 and f["sample_loss_outlier"] is False


def test_all_nan_step_is_not_one_sample_nonfinite():
    run = make_run(spike_at=150)
    b = run.batches.with_columns(
        pl.when(pl.col("step") == 150).then(float("nan")).otherwise(pl.col("sample_loss")).alias("sample_loss")
    )
    run = RunData.from_frames("r", metrics=run.metrics, batches=b)
    assert feats(run, incident(150))["sample_loss_nonfinite"] is False


def _replayed(run: RunData, step: int, replay_loss: float) -> RunData:
    """The manifest of steps step-1..step again (a resume), the bad sample with `replay_loss`."""
    b = run.batches
    again = b.filter(pl.col("step").is_between(step - 1, step))
    top = (
        b.filter(pl.col("step") == step)
        .sort("sample_loss", descending=True, nulls_last=False)
        .get_column("sample_id")[0]
    )
    again = again.with_columns(
        pl.when(pl.col("sample_id") == top)
        .then(pl.lit(replay_loss))
        .otherwise(pl.col("sample_loss"))
        .alias("sample_loss")
    )
    return RunData.from_frames(run.run_id, metrics=run.metrics, batches=pl.concat([b, again]))


def test_sample_nan_that_is_clean_on_replay_is_exonerated():
    run = _replayed(make_run(spike_at=150, bad_sample_loss=float("nan")), 150, 2.0)
    f = feats(run, incident(150))
    assert f["sample_loss_nonfinite"] is True and f["sample_replay_recurred"] is False
    assert verdict(f) != "data_outlier"
    out = ranked(run, incident(150))
    assert out.row(0, named=True)["score"] < 6  # the replay took back most of the NaN's weight


def test_sample_nan_again_on_replay_is_data():
    run = _replayed(make_run(spike_at=150, bad_sample_loss=float("nan")), 150, float("nan"))
    f = feats(run, incident(150))
    assert f["sample_replay_recurred"] is True and verdict(f) == "data_outlier"


def test_constant_loss_scale_of_one_is_not_fp16():
    run = make_run(spike_at=150)
    ones = metric_rows("loss_scale", range(1, 301), [1.0] * 300)
    run = RunData.from_frames("r", metrics=pl.concat([run.metrics, ones], how="diagonal_relaxed"), batches=run.batches)
    f = feats(run, incident(150))
    assert f["fp16"] is False and f["loss_scale_min"] is None
    assert "fp16_overflow" not in attribute(load_rules(), f, Params().attribution).scores


def test_loss_scale_reset_at_relaunch_is_not_an_overflow_storm():
    run = make_run(n=300)
    scale = [65536.0] * 150 + [1.0] * 150
    skipped = metric_rows("skipped_iters", range(1, 301), [0.0] * 300)
    ev = events([("resume", 150, None, '{"message": "loading checkpoint"}')])
    run = RunData.from_frames(
        "r",
        metrics=pl.concat(
            [run.metrics, metric_rows("loss_scale", range(1, 301), scale), skipped], how="diagonal_relaxed"
        ),
        batches=run.batches,
        events=ev,
    )
    f = feats(run, incident(151, kind="underflow_zeros", start=151, end=300))
    assert f["fp16"] is True and f["scale_drop_at_resume"] is True and f["loss_scale_halvings"] == 16
    # the same drop spread over overflow-skipped steps is what a real storm looks like
    skipped = metric_rows("skipped_iters", range(1, 301), [0.0] * 148 + [float(i) for i in range(1, 153)])
    run = RunData.from_frames(
        "r",
        metrics=pl.concat(
            [make_run(n=300).metrics, metric_rows("loss_scale", range(1, 301), scale), skipped], how="diagonal_relaxed"
        ),
        events=ev,
    )
    assert feats(run, incident(151, kind="loss_scale_collapse"))["scale_drop_at_resume"] is False


def test_startup_halvings_do_not_count_toward_the_incident():
    scale = [2.0 ** (32 - min(s, 16)) for s in range(1, 301)]  # 2^32 down to 2^16 in the first 16 steps
    run = make_run(spike_at=200)
    run = RunData.from_frames(
        "r", metrics=pl.concat([run.metrics, metric_rows("loss_scale", range(1, 301), scale)], how="diagonal_relaxed")
    )
    assert feats(run, incident(200))["loss_scale_halvings"] == 0


def test_lr_rising_without_any_decay_is_a_schedule_fault():
    n = 400
    lr = np.concatenate([np.full(30, 3e-3), np.geomspace(3e-3, 0.3, n - 30)])  # an inverted cosine, never decays
    f = feats(make_run(n=n, spike_at=360, lr=lr), incident(360))
    assert f["lr_rising_late"] is True and f["lr_late_rise"] > 10 and f["in_warmup"] is False
    assert verdict(f) == "lr_schedule"
    # a normal warmup then a flat LR: nothing rises late
    lr = np.concatenate([np.linspace(1e-4, 3e-3, 30), np.full(n - 30, 3e-3)])
    f = feats(make_run(n=n, spike_at=360, lr=lr), incident(360))
    assert f["lr_rising_late"] is False and f["warmup_steps"] == 29


def test_no_warmup_with_an_early_spike_is_a_schedule_fault():
    n = 400
    lr = 0.3 * (0.5 + 0.5 * np.cos(np.pi * np.arange(n) / n))  # starts at the peak: no warmup
    f = feats(
        make_run(n=n, spike_at=3, spike_loss=12.0, lr=lr), incident(3, start=2, end=3, facts={"recovery": "fast"})
    )
    assert f["warmup_steps"] == 0 and f["early"] is True
    assert verdict(f) == "lr_schedule"


def test_recurring_grad_spikes_grouped_by_the_detector_point_at_lr():
    inc = incident(112, start=112, end=367, severity="warning", facts={"onset_step": 112})
    inc.findings[0].facts["recurring_spikes"] = [112, 142, 176, 239, 367]
    f = feats(make_run(n=400, spike_at=112, spike_loss=2.0), inc)
    assert f["recurring_spikes"] == 5 and verdict(f) == "lr_too_high"


def test_all_zero_layer_is_not_a_stuck_sign():
    rows = [
        {
            "source": "g",
            "line": s,
            "step": s,
            "layer": lay,
            "grad_norm": 0.25,
            "zero_frac": 0.999 if (lay == "h.1" and s >= 100) else 0.0,
            "pos_frac": 0.0005 if (lay == "h.1" and s >= 100) else 0.5,
        }
        for s in range(1, 201)
        for lay in ("h.0", "h.1")
    ]
    run = make_run(n=200, extra={"layers": pl.DataFrame(rows)})
    f = feats(run, incident(150, kind="underflow_zeros", start=100, end=200))
    assert f["layer_all_zero"] is True and f["sign_stuck"] is False
