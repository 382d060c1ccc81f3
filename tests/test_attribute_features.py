"""Evidence features on hand-made runs: ranks, hardware telemetry, replay, layers, LR, clipping."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from attribute_synth import events, feats, incident, make_run, metric_rows, step_time, telemetry

from spikeforensics.attribute.features import FEATURES
from spikeforensics.params import Params
from spikeforensics.rundata import RunData


def test_every_feature_is_documented_and_computed():
    run = make_run(spike_at=150)
    f = feats(run, incident(150))
    assert set(f) == set(FEATURES)
    for name, (ftype, doc) in FEATURES.items():
        assert ftype in ("bool", "number", "str") and doc
        v = f[name]
        assert (
            v is None
            or {"bool": bool, "number": (int, float), "str": str}[ftype] in (type(v),)
            or isinstance(v, {"bool": bool, "number": (int, float), "str": str}[ftype])
        ), name
    assert f["peak_grad_ratio"] == pytest.approx(60, rel=0.2)
    assert f["nonfinite"] is False and f["duration_steps"] == 1


def test_single_rank_run_is_never_rank_confined():
    run = make_run(spike_at=150, ranks=1)
    f = feats(run, incident(150, ranks=[0]))
    assert f["multi_rank"] is False and f["rank_confined"] is False and f["hw_evidence"] is False


def test_rank_mismatch_after_allreduce():
    run = make_run(spike_at=150, ranks=4, per_rank_grad=True, spike_rank=2, per_rank_mode="mismatch")
    f = feats(run, incident(150))
    assert f["rank_norms_agree_healthy"] is True
    assert f["rank_mismatch"] is True and f["rank_confined"] is True and f["peak_rank"] == 2
    assert f["hw_evidence"] is True
    # the same per-rank norms agreeing at the spike (a data outlier all-reduced to every rank): no mismatch
    run2 = make_run(spike_at=150, ranks=4, per_rank_grad=True, spike_rank=2, per_rank_mode="agree")
    f2 = feats(run2, incident(150))
    assert f2["rank_mismatch"] is False and f2["rank_confined"] is False and f2["rank_all"] is True


def test_xid_in_window_weighted_and_outside_ignored():
    xid = lambda code, step: ("xid", None, step_time(step), json.dumps({"code": code, "pci": "0000:cb:00"}))  # noqa: E731
    run = make_run(spike_at=150, extra={"events": events([xid(79, 150), xid(13, 10)])})
    f = feats(run, incident(150))
    assert f["time_aligned"] and f["xid_count"] == 1 and f["xid_hw_weight"] == 1.0 and f["xid_codes"] == "79"
    run = make_run(spike_at=150, extra={"events": events([xid(13, 151)])})
    f = feats(run, incident(150))
    assert f["xid_hw_weight"] == pytest.approx(0.3) and f["hw_evidence"] is True
    # no wall clock in the log: an Xid with only a time cannot be placed
    run = make_run(spike_at=150, timed=False, extra={"events": events([xid(79, 150)])})
    f = feats(run, incident(150))
    assert f["time_aligned"] is False and f["xid_count"] == 0


def test_ecc_counters_use_the_change_across_the_window():
    def tel(jump_at):
        rows = []
        for s in range(0, 300, 5):
            value = 7 + (3 if jump_at is not None and s >= jump_at else 0)  # cumulative counter
            rows.append((step_time(s), "node1", 2, "ecc_corrected", value))
            rows.append((step_time(s), "node1", 2, "temperature", 60))
        return telemetry(rows)

    f = feats(make_run(spike_at=150, extra={"telemetry": tel(None)}), incident(150))
    assert f["ecc_delta"] == 0  # a high but constant counter is history, not this incident
    f = feats(make_run(spike_at=150, extra={"telemetry": tel(150)}), incident(150))
    assert f["ecc_delta"] == 3 and f["ecc_gpu"] == "node1:2" and f["temp_rise"] == 0
    f = feats(make_run(spike_at=150, extra={"telemetry": tel(250)}), incident(150))
    assert f["ecc_delta"] == 0


def _with_replay(run: RunData, spike_again: bool) -> RunData:
    """Append attempt 1 replaying steps 140-170 (as after a resume from a checkpoint at 139)."""
    steps = np.arange(140, 171)
    base = run.metrics.filter((pl.col("attempt") == 0) & pl.col("step").is_in(steps.tolist()))
    rows = []
    for name in ("loss", "grad_norm"):
        vals = base.filter(pl.col("name") == name).sort("step").get_column("value").to_numpy().copy()
        if not spike_again:
            vals[150 - 140] = vals[149 - 140]
        rows.append(metric_rows(name, steps, vals, attempt=1, record0=400))
    return RunData.from_frames(
        run.run_id, metrics=pl.concat([run.metrics, *rows], how="diagonal_relaxed"), batches=run.batches
    )


def test_replay_recurrence():
    run = make_run(spike_at=150)
    f = feats(_with_replay(run, spike_again=False), incident(150))
    assert f["replayed"] is True and f["replay_recurred"] is False and f["hw_evidence"] is True
    f = feats(_with_replay(run, spike_again=True), incident(150))
    assert f["replayed"] is True and f["replay_recurred"] is True
    f = feats(run, incident(150))
    assert f["replayed"] is False and f["replay_recurred"] is None


def _layers(n=200, hidden_at=None, zero_layer=None, stuck_layer=None):
    rows = []
    for s in range(1, n + 1):
        for i, layer in enumerate(["h.0.attn", "h.0.mlp", "h.1.attn", "h.1.mlp"]):
            g = 0.25
            if hidden_at == s and i == 1:
                g = 5.0
            zf = 0.999 if (zero_layer == layer and s >= 100) else 0.0
            pf = 0.99 if (stuck_layer == layer and s >= 100) else 0.5
            rows.append(
                {
                    "source": "grads.csv",
                    "line": s,
                    "step": s,
                    "layer": layer,
                    "grad_norm": g,
                    "zero_frac": zf,
                    "pos_frac": pf,
                }
            )
    return pl.DataFrame(rows)


def test_hidden_layer_explosion_and_structural_signals():
    run = make_run(n=200, extra={"layers": _layers(hidden_at=120)})
    f = feats(run, incident(120, kind="layer_outlier"))
    assert f["layer_hidden"] is True and f["top_layer"] == "h.0.mlp" and f["layer_top_ratio"] == pytest.approx(20)
    run = make_run(n=200, extra={"layers": _layers(zero_layer="h.1.mlp", stuck_layer="h.0.attn")})
    f = feats(run, incident(150, kind="underflow_zeros", start=100, end=200))
    assert f["layer_all_zero"] is True and f["sign_stuck"] is True and f["fp16"] is False


def test_lr_schedule_features():
    n = 300
    lr = np.concatenate([np.linspace(1e-5, 3e-4, 50), np.linspace(3e-4, 1e-4, 150), np.linspace(1e-4, 4e-4, 100)])
    f = feats(make_run(n=n, spike_at=280, lr=lr), incident(280))
    assert f["lr_rising_late"] is True and f["in_warmup"] is False
    f = feats(make_run(n=n, spike_at=20, lr=lr), incident(20))
    assert f["in_warmup"] is True and f["early"] is True and f["lr_rising_late"] is False


def test_clip_before_unscale_signature():
    run = make_run(spike_at=150)
    scaled = run.metrics.with_columns(
        pl.when(pl.col("name") == "grad_norm").then(pl.col("value") * 65536).otherwise(pl.col("value")).alias("value")
    )
    run = RunData.from_frames("c", metrics=scaled)
    params = Params()
    params.calibration.current_clip_norm = 1.0
    f = feats(run, incident(150), params=params)
    assert f["clip_rate"] == pytest.approx(1.0) and f["norm_over_clip"] > 1e4


def test_fp16_loss_scale_halvings():
    run = make_run(spike_at=150)
    scale = [65536.0] * 140 + [65536.0 / 2**k for k in range(1, 11)] + [64.0] * 150
    run = RunData.from_frames(
        "fp", metrics=pl.concat([run.metrics, metric_rows("loss_scale", range(1, 301), scale)], how="diagonal_relaxed")
    )
    f = feats(run, incident(150, kind="loss_scale_collapse"))
    assert f["fp16"] is True and f["loss_scale_halvings"] == 10 and f["loss_scale_min"] == 64.0


def test_xid_without_a_clock_is_kept_as_unplaced_evidence():
    xid = ("xid", None, step_time(150), json.dumps({"code": 48}))
    f = feats(make_run(spike_at=150, timed=False, extra={"events": events([xid])}), incident(150))
    assert f["xid_count"] == 0 and f["xid_unplaced_weight"] == 1.0 and f["hw_evidence"] is True
    f = feats(make_run(spike_at=150, timed=True, extra={"events": events([xid])}), incident(150))
    assert f["xid_count"] == 1 and f["xid_unplaced_weight"] == 0.0


def test_an_excerpt_from_mid_training_has_no_start_to_judge(tmp_path):
    """bigscience tr8-104B, iterations 7000-7220: a loss spike at 7010. Three records, the first at 7000:
    'early in training' and 'no warmup' cannot be read off an excerpt (this once blamed the LR schedule),
    and a recovery the log ends before showing is unknown, not 'never'."""
    from conftest import REAL

    from spikeforensics import api

    store = tmp_path / "s"
    api.ingest([REAL / "megatron" / "bigscience_tr8_104b_exp1_glitch_with_validation.log"], run_id="x", store=store)
    [inc] = api.diagnose("x", store=store)["incidents"]
    assert inc["peak_step"] == 7010
    f = inc["features"]
    assert f["early"] is False and f["warmup_steps"] is None and f["recovery"] == "unknown"
    assert inc["root_cause"] not in ("lr_schedule",)
