"""Clip-threshold calibration: P99 x margin over healthy steps, clip-rate bands, regime warnings."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from attribute_synth import incident, make_run, metric_rows

from spikeforensics.attribute.calibration import calibrate, clip_rate_meaning
from spikeforensics.attribute.context import build_context
from spikeforensics.params import CalibrationParams, Params
from spikeforensics.rundata import RunData


def calib(run, incidents, params=None):
    params = params or Params()
    return calibrate(run, build_context(run, incidents, params), params.calibration)


def test_recommendation_is_p99_of_healthy_norms_times_margin():
    run = make_run(spike_at=150, spike_grad=500.0)
    out = calib(run, [incident(150)])
    g = run.metrics.filter(pl.col("name") == "grad_norm").sort("step")
    healthy = g.filter(~pl.col("step").is_between(148, 152)).get_column("value").slice(int(g.height * 0.02))
    expected = float(np.quantile(healthy.to_numpy(), 0.99)) * 2
    assert out["recommended_clip_norm"] == pytest.approx(expected, rel=0.02)
    assert out["recommended_clip_norm"] < 2  # the 500x spike is not part of the basis
    assert "P99" in out["basis"] and "x 2" in out["basis"]
    assert out["expected_clip_rate"] == pytest.approx(1 / 300, abs=1e-3)  # only the spike would clip
    assert out["current_clip_norm"] is None and out["clip_rate"] is None


def test_current_clip_norm_inferred_from_logged_clipped_norm():
    run = make_run(n=300)
    g = run.metrics.filter(pl.col("name") == "grad_norm").sort("step").get_column("value").to_numpy()
    clipped = np.minimum(g, 0.52)
    run = RunData.from_frames(
        "c",
        metrics=pl.concat(
            [run.metrics, metric_rows("grad_norm_clipped", range(1, 301), clipped)], how="diagonal_relaxed"
        ),
    )
    out = calib(run, [])
    assert out["current_clip_norm"] == pytest.approx(0.52)
    assert out["clip_rate"] == pytest.approx(float((g > 0.52).mean()))
    assert out["clip_rate"] > 0.2 and "too tight" in out["clip_rate_meaning"]
    assert out["current_clip_source"] == "logged post-clip grad norm"


@pytest.mark.parametrize(
    "rate, words",
    [(0.85, "far too small"), (0.3, "LR too high"), (0.05, "healthy"), (0.0001, "too loose"), (None, "unknown")],
)
def test_clip_rate_bands(rate, words):
    assert words in clip_rate_meaning(rate, CalibrationParams())


def test_regime_change_warnings_and_layer_thresholds():
    run = make_run(n=200, ranks=2, micro=2)
    # world size halves at step 101
    b = run.batches.filter(~((pl.col("step") > 100) & (pl.col("rank") == 1)))
    layers = pl.DataFrame(
        [
            {"step": s, "layer": name, "grad_norm": v}
            for s in range(1, 201)
            for name, v in (("wte", 0.1), ("h.0", 0.3 + 0.001 * (s % 10)))
        ]
    )
    run = RunData.from_frames("w", metrics=run.metrics, batches=b, layers=layers)
    out = calib(run, [])
    assert any("world size" in w and "step 101" in w for w in out["warnings"])
    assert any("global batch size" in w for w in out["warnings"])
    assert not any("gradient accumulation" in w for w in out["warnings"])
    assert out["layer_clip_norms"]["wte"] == pytest.approx(0.2)
    assert out["layer_clip_norms"]["h.0"] == pytest.approx(2 * 0.309, rel=0.01)


def test_too_few_healthy_steps_gives_no_recommendation():
    run = make_run(n=15)
    out = calib(run, [])
    assert out["recommended_clip_norm"] is None and "not enough healthy steps" in out["basis"]
