"""Clipping analysis: threshold inference, bands, consecutive runs, clip-before-unscale, dominant layer."""

import numpy as np
import polars as pl
from _detect_synth import curves, layer_dump, run_from

from spikeforensics.detect import clipping
from spikeforensics.params import Params


def clipped_run(n, seed, threshold, scale=1.0, layers=None):
    c = curves(n, seed=seed)
    c["grad_norm"] = c["grad_norm"] * scale
    c["grad_norm_clipped"] = np.minimum(c["grad_norm"], threshold)
    return run_from(c, layers=layers)


def threshold_for_rate(rate, n=3000, seed=0):
    g = curves(n, seed=seed)["grad_norm"][300:]
    return float(np.quantile(g, 1 - rate))


def test_threshold_inferred_from_post_clip_norms_and_healthy_rate_is_a_note():
    thr = threshold_for_rate(0.05)
    found = clipping.detect(clipped_run(3000, 0, thr), Params())
    assert all(f.severity == "info" for f in found)
    summary = [f for f in found if "clip_threshold" in f.facts][0]
    assert abs(summary.facts["clip_threshold"] - thr) < 1e-9
    assert 0.03 < summary.facts["clip_rate"] < 0.09


def test_twelve_percent_is_only_notes():
    thr = threshold_for_rate(0.12)
    found = clipping.detect(clipped_run(3000, 0, thr), Params())
    assert found and all(f.severity == "info" for f in found)


def test_threshold_too_small_is_a_warning():
    thr = threshold_for_rate(0.8)
    found = clipping.detect(clipped_run(3000, 0, thr), Params())
    warn = [f for f in found if f.severity == "warning"]
    assert warn and warn[0].facts["band"] == "threshold too small"


def test_clip_before_unscale_signature():
    found = clipping.detect(clipped_run(3000, 1, 1.0, scale=65536.0), Params())
    [f] = found
    assert f.severity == "warning" and f.facts["cause"] == "clip_before_unscale"


def test_consecutive_clipped_steps_are_notes_with_their_steps():
    c = curves(2000, seed=2)
    c["grad_norm"][1000:1004] = 5.0
    params = Params.load(overrides=["clipping.threshold=1.0"])
    found = clipping.detect(run_from(c), params)
    runs = [f for f in found if "consecutive_clipped" in f.facts]
    assert [(f.step_start, f.step_end, f.severity) for f in runs if f.step_start > 500] == [(1001, 1004, "info")]


def test_no_threshold_no_analysis():
    assert clipping.detect(run_from(curves(1000, seed=3)), Params()) == []


def test_high_clip_rate_from_one_dominant_layer_names_it():
    c = curves(3000, seed=4)
    lay = layer_dump(c["step"], ["wte", "h.0.attn", "lm_head"], seed=4, norm=0.05)
    lay = lay.with_columns(
        pl.when(pl.col("layer") == "lm_head")
        .then(pl.col("grad_norm") * 20)
        .otherwise(pl.col("grad_norm"))
        .alias("grad_norm")
    )
    thr = threshold_for_rate(0.6, seed=4)
    found = clipping.detect(clipped_run(3000, 4, thr, layers=lay), Params())
    warn = [f for f in found if f.severity == "warning"]
    assert warn and warn[0].layer == "lm_head" and warn[0].facts["cause"] == "dominant_layer"


def test_clip_before_unscale_seen_from_the_loss_scale_without_a_threshold():
    c = curves(1000, seed=5)
    c["loss_scale"] = np.full(1000, 65536.0)
    healthy = run_from(c)  # unscaled norms ~0.4 next to a scale of 65536
    assert clipping.detect(healthy, Params()) == []
    c["grad_norm"] = c["grad_norm"] * 65536.0  # norms measured on scaled gradients
    [f] = clipping.detect(run_from(c), Params())
    assert f.severity == "warning" and f.facts["cause"] == "clip_before_unscale"
