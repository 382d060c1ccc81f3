"""Per-layer detectors: underflow zeros, sign ratio, layer outlier, vanishing gradients."""

import numpy as np
import polars as pl
from _detect_synth import curves, layer_dump, run_from

from spikeforensics.detect import layer_outlier, sign_ratio, underflow, vanishing
from spikeforensics.params import Params

NAMES = ["wte", "h.0.attn", "h.0.mlp", "h.1.attn", "h.1.mlp", "lm_head"]


def base_run(n=2000, seed=0, edit=None):
    c = curves(n, seed=seed)
    lay = layer_dump(c["step"], NAMES, seed=seed)
    if edit is not None:
        lay = edit(lay)
    return run_from(c, layers=lay)


def test_all_layer_detectors_quiet_on_clean():
    run = base_run()
    for det in (underflow, sign_ratio, layer_outlier, vanishing):
        assert det.detect(run, Params()) == [], det.__name__


def test_rising_zero_fraction_fires_on_that_layer():
    def edit(lay):
        rise = (pl.col("step").cast(pl.Float64) / 2000.0) ** 2 * 0.3
        return lay.with_columns(
            pl.when(pl.col("layer") == "h.0.mlp")
            .then(pl.col("zero_frac") + rise)
            .otherwise(pl.col("zero_frac"))
            .alias("zero_frac")
        )

    c = curves(2000, seed=0)
    c["loss_scale"] = np.full(2000, 65536.0)  # fp16 with dynamic loss scaling
    c["loss_scale"][1000:] = 32768.0
    run = run_from(c, layers=edit(layer_dump(c["step"], NAMES, seed=0)))
    [f] = underflow.detect(run, Params())
    assert f.kind == "underflow_zeros" and f.layer == "h.0.mlp" and f.severity == "warning"
    assert f.facts["layers"] == ["h.0.mlp"] and 1000 < f.step_start < 1700
    # the same rise in one layer of a bf16/fp32 run is only a note
    [note] = underflow.detect(base_run(edit=edit), Params())
    assert note.severity == "info"


def test_constant_sparse_layer_is_not_underflow():
    def edit(lay):  # a masked layer: 40% zeros from step 1, no trend
        return lay.with_columns(
            pl.when(pl.col("layer") == "wte").then(0.4).otherwise(pl.col("zero_frac")).alias("zero_frac")
        )

    assert underflow.detect(base_run(edit=edit), Params()) == []


def test_num_zeros_counter_trend():
    c = curves(2000, seed=1)
    c["num_zeros"] = np.where(c["step"] > 1000, (c["step"] - 1000) * 50.0, 10.0) + np.random.default_rng(1).normal(
        0, 2, 2000
    )
    [f] = underflow.detect(run_from(c), Params())
    assert f.evidence[0].signal == "num_zeros"


def test_stuck_sign_is_a_warning_mild_bias_only_a_note():
    def edit(lay):
        return lay.with_columns(
            pl.when(pl.col("layer") == "h.1.attn")
            .then(0.97)
            .when(pl.col("layer") == "h.1.mlp")
            .then(0.25)
            .otherwise(pl.col("pos_frac"))
            .alias("pos_frac")
        )

    found = sign_ratio.detect(base_run(edit=edit), Params())
    by_layer = {f.layer: f.severity for f in found}
    assert by_layer == {"h.1.attn": "warning", "h.1.mlp": "info"}


def test_sign_ratio_counts_only_nonzero_elements():
    def edit(lay):  # half the elements are exact zeros, the other half split evenly: pos_frac 0.25 is healthy
        return lay.with_columns(
            pl.when(pl.col("layer") == "h.0.attn").then(0.25).otherwise(pl.col("pos_frac")).alias("pos_frac"),
            pl.when(pl.col("layer") == "h.0.attn").then(0.5).otherwise(pl.col("zero_frac")).alias("zero_frac"),
        )

    assert sign_ratio.detect(base_run(edit=edit), Params()) == []


def test_layer_spike_hidden_by_normal_global_norm():
    c = curves(2000, seed=2)
    lay = layer_dump(c["step"], NAMES, seed=2, norm=0.02)  # layers small next to the logged global norm
    lay = lay.with_columns(
        pl.when((pl.col("layer") == "h.0.attn") & pl.col("step").is_between(1300, 1302))
        .then(pl.col("grad_norm") * 30)
        .otherwise(pl.col("grad_norm"))
        .alias("grad_norm")
    )
    [f] = layer_outlier.detect(run_from(c, layers=lay), Params())
    assert f.layer == "h.0.attn" and f.step_start == 1300 and f.step_end == 1302
    assert f.evidence[0].ratio > 10


def test_layer_spike_with_global_spike_belongs_to_hard_spike():
    c = curves(2000, seed=3)
    c["grad_norm"][1299] *= 20
    lay = layer_dump(c["step"], NAMES, seed=3)
    lay = lay.with_columns(
        pl.when((pl.col("layer") == "h.0.attn") & (pl.col("step") == 1300))
        .then(pl.col("grad_norm") * 30)
        .otherwise(pl.col("grad_norm"))
        .alias("grad_norm")
    )
    assert layer_outlier.detect(run_from(c, layers=lay), Params()) == []


def test_global_vanishing_fires_after_warmup_fall_does_not():
    c = curves(3000, seed=4)  # grad norm falls 30x in the first ~150 steps: not vanishing
    assert vanishing.detect(run_from(c), Params()) == []
    c["grad_norm"][1500:] *= np.geomspace(1, 1e-3, 1500)
    [f] = vanishing.detect(run_from(c), Params())
    assert f.layer is None and 1500 < f.step_start < 2200 and f.evidence[0].ratio <= 0.1


def test_short_dip_is_not_vanishing():
    c = curves(3000, seed=5)
    c["grad_norm"][1500:1550] *= 0.01
    assert vanishing.detect(run_from(c), Params()) == []


def test_one_layer_dying_while_global_is_fine():
    def edit(lay):
        return lay.with_columns(
            pl.when((pl.col("layer") == "wte") & (pl.col("step") > 1000))
            .then(pl.col("grad_norm") * 1e-3)
            .otherwise(pl.col("grad_norm"))
            .alias("grad_norm")
        )

    c = curves(2000, seed=6)
    run = run_from(c, layers=edit(layer_dump(c["step"], NAMES, seed=6)))
    found = vanishing.detect(run, Params())
    assert [f.layer for f in found] == ["wte"]
