"""Evidence features of the gradients and their handling: clipping (threshold, clip rate,
healthy norm over the threshold), fp16 loss scaling (overflows, halvings, a scale
reconfigured at a resume) and per-layer dumps (concentration, exact zeros, stuck sign,
vanishing norm).
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.attribute._feature_helpers import _f, _median, _onset
from spikeforensics.attribute.context import RunContext, _flag_sorted, step_level, step_window
from spikeforensics.detect.base import Incident
from spikeforensics.frames import rows_where
from spikeforensics.params import AttributionParams, Params
from spikeforensics.rundata import RunData


def clip_features(inc: Incident, ctx: RunContext, params: Params) -> dict:
    thr = ctx.clip_threshold
    out = {"clip_threshold": thr, "clip_rate": None, "clip_rate_before": None, "norm_over_clip": None}
    if not thr or ctx.grad.height == 0:
        return out
    finite = ctx.once("grad_finite", lambda: ctx.grad.filter(pl.col("value").is_finite()))
    if finite.height == 0:
        return out
    out["clip_rate"] = ctx.once(("clip_rate", thr), lambda: float((finite.get_column("value") > thr).mean()))
    on = _onset(inc)
    before = step_window(finite, on - 200, on - 1)
    if before.height == 0:  # the incident starts with the run: judge its own first steps
        before = step_window(finite, on, on + 199)
    if before.height:
        out["clip_rate_before"] = float((before.get_column("value") > thr).mean())
    med = _median(ctx.healthy(finite)) or _median(finite)
    out["norm_over_clip"] = med / thr if med is not None else None
    return out


def precision_features(inc: Incident, run: RunData, ctx: RunContext, ap: AttributionParams) -> dict:
    # run-level parts computed once (ctx.once): an incident's cost does not grow with the run's length
    overflow = ctx.once("overflow_events", lambda: run.events_of("overflow"))
    total = ctx.once(
        "overflow_count",
        lambda: (
            int(
                overflow.select(
                    pl.col("detail").str.json_path_match("$.count").cast(pl.Int64, strict=False).fill_null(1).sum()
                ).item()
                or 0
            )
            if overflow.height
            else 0
        ),
    )
    in_win = overflow.filter(pl.col("step").is_between(inc.step_start - ap.pad_steps, inc.step_end + ap.pad_steps))
    out = {
        "fp16": ctx.fp16,
        "overflow_count": total,
        "overflow_window": in_win.height,
        "loss_scale_halvings": 0,
        "loss_scale_min": None,
        "scale_drop_at_resume": False,
    }
    if not ctx.fp16:  # a constant `loss scale: 1.0` (bf16/fp32 Megatron logs) says nothing
        return out
    scale = ctx.once("scale_positive", lambda: _positive_scales(ctx.loss_scale, overflow))
    upto = step_window(scale, None, inc.step_end)  # a slice of the sorted steps, not a copy per incident
    if upto.height:
        low = float(upto.get_column("value").min())
        out["loss_scale_min"] = low
        # halvings from the level the scale had settled at before the incident (the start-up halvings
        # of a scaler that begins at 2^32 are normal) down to the lowest scale inside it
        on = _onset(inc)
        before = upto.filter(pl.col("step").is_between(on - ap.baseline_window, on - 1))
        top = float((before if before.height else upto).get_column("value").max())
        inside = upto.filter(pl.col("step") >= inc.step_start - ap.pad_steps)
        low_in = float(inside.get_column("value").min()) if inside.height else low
        out["loss_scale_halvings"] = max(0, int(round(math.log2(top / low_in)))) if low_in > 0 else 0
        out["scale_drop_at_resume"] = _scale_drop_at_resume(run, ctx, scale, upto, inc.step_end, ap)
    return out


def _positive_scales(loss_scale: pl.DataFrame, overflow: pl.DataFrame) -> pl.DataFrame:
    """The loss scale's finite, positive values by step: the logged series, else (a log printing its scale only
    when it overflows: DeepSpeed's `reducing to`, apex's `reducing loss scale to`) the scale each overflow left."""
    if loss_scale.height == 0 and overflow.height:
        new = pl.col("detail").str.json_path_match("$.new_scale").cast(pl.Float64, strict=False)
        loss_scale = (
            overflow.filter(pl.col("step").is_not_null())
            .select(
                pl.col("attempt").cast(pl.Int32), "step", new.alias("value"), pl.col("time").cast(pl.Datetime("us"))
            )
            .sort("attempt", "step")
            .unique(["attempt", "step"], keep="last", maintain_order=True)
        )
    return _flag_sorted(rows_where(loss_scale, pl.col("value").is_finite() & (pl.col("value") > 0)))


def _scale_drops(scale: pl.DataFrame) -> pl.DataFrame:
    """Records where the scale fell by >= 2 halvings from the record before (in attempt, step order)."""
    return (
        scale.sort("attempt", "step")
        .with_columns(
            (pl.col("value").shift(1) / pl.col("value")).log(2).alias("halvings"),
            (pl.col("attempt") != pl.col("attempt").shift(1)).alias("new_attempt"),
        )
        .filter(pl.col("halvings") >= 2)
    )


def _scale_drop_at_resume(
    run: RunData, ctx: RunContext, scale: pl.DataFrame, upto: pl.DataFrame, end: int, ap: AttributionParams
) -> bool:
    """A dynamic scaler halves once per overflow and skips that step; a drop of several halvings in one
    record right at a relaunch, with the skipped-iterations counter flat, is a new configuration.
    `upto` is the run's `scale` up to the incident's end; with one attempt it is a prefix of it, so
    the run's drops (computed once) up to `end` are its drops."""
    if ctx.once("scale_one_attempt", lambda: scale.get_column("attempt").n_unique() <= 1):
        drops = ctx.once("scale_drops", lambda: _scale_drops(scale)).filter(pl.col("step") <= end)
    else:
        drops = _scale_drops(upto)
    if drops.height == 0:
        return False
    resumes = ctx.once("resume_steps", lambda: run.events_of("resume").get_column("step").drop_nulls())
    skipped = ctx.once(
        "skipped_iters_delta",
        lambda: (
            step_level(run.series("skipped_iters"))
            .sort("attempt", "step")
            .with_columns((pl.col("value") - pl.col("value").shift(1)).alias("d"))
        ),
    )
    for row in drops.iter_rows(named=True):  # a handful of drops at most
        at_resume = row["new_attempt"] or bool(((resumes - row["step"]).abs() <= ap.pad_steps).any())
        skips = skipped.filter(pl.col("step").is_between(row["step"] - ap.pad_steps, row["step"]) & (pl.col("d") > 0))
        if at_resume and skipped.height and skips.height == 0:
            return True
    return False


def _grad_fall(grad: pl.DataFrame) -> float | None:
    """Median grad norm of the run's last fifth over its first fifth (finite, positive values)."""
    g = grad.filter(pl.col("value").is_finite() & (pl.col("value") > 0)).get_column("value")
    k = max(1, g.len() // 5)
    first, last = g.head(k).median(), g.tail(k).median()
    return float(last) / float(first) if first else None


def layer_features(inc: Incident, run: RunData, ctx: RunContext, ap: AttributionParams, peak_grad_ratio) -> dict:
    out = {
        "has_layers": run.layers.height > 0,
        "top_layer": "",
        "layer_top_share": None,
        "layer_top_ratio": None,
        "layer_hidden": False,
        "zero_frac_max": None,
        "zero_frac_rise": None,
        "layer_all_zero": False,
        "sign_stuck": False,
        "grad_fall": None,
    }
    if ctx.grad.height >= 10:
        out["grad_fall"] = ctx.once("grad_fall", lambda: _grad_fall(ctx.grad))
    layers = run.layers.filter(pl.col("step").is_not_null())
    if layers.height == 0:
        return out
    pad = ap.pad_steps
    # in dump order: the shares below are sums over layers, and a float sum depends on its order
    layers = layers.group_by("step", "layer", maintain_order=True).agg(
        pl.col("grad_norm", "zero_frac", "pos_frac").mean()
    )
    window = layers.filter(pl.col("step").is_between(inc.step_start - pad, inc.step_end + pad))
    if window.height == 0:
        nearest = layers.select((pl.col("step") - inc.peak_step).abs().min()).item()
        window = layers.filter((pl.col("step") - inc.peak_step).abs() == nearest)
    healthy = ctx.healthy(layers)
    base = healthy.group_by("layer").agg(
        pl.col("grad_norm").filter(pl.col("grad_norm").is_finite()).median().alias("base"),
        pl.col("zero_frac").sort_by("step").head(20).median().alias("zero_base"),
    )
    sq = window.filter(pl.col("grad_norm").is_finite()).with_columns((pl.col("grad_norm") ** 2).alias("sq"))
    if sq.height:
        peak_step = sq.group_by("step").agg(pl.col("sq").sum()).sort("sq", descending=True).get_column("step")[0]
        at = (
            sq.filter(pl.col("step") == peak_step)
            .join(base, on="layer", how="left")
            .with_columns(
                (pl.col("sq") / pl.col("sq").sum()).alias("share"),
                (pl.col("grad_norm") / pl.col("base")).alias("ratio"),
            )
        )
        top = at.sort("ratio", descending=True, nulls_last=True).row(0, named=True)
        by_share = at.sort("share", descending=True).row(0, named=True)
        out["top_layer"] = by_share["layer"]
        out["layer_top_share"] = _f(by_share["share"])
        out["layer_top_ratio"] = _f(top["ratio"])
        if top["ratio"] is not None and top["ratio"] >= 10 and (peak_grad_ratio is None or peak_grad_ratio < 2):
            out["layer_hidden"] = True
            out["top_layer"] = top["layer"]
    # an update-size outlier (layer_outlier on `update_norm`) names its layer; the gradient shares do not show it
    upd = next(
        (f.layer for f in inc.findings if f.kind == "layer_outlier" and f.layer and "update_ratio" in f.facts), None
    )
    if upd:
        out["top_layer"] = upd
        mine = at.filter(pl.col("layer") == upd) if sq.height else None
        out["layer_top_share"] = _f(mine.get_column("share")[0]) if mine is not None and mine.height else None
    zf = window.filter(pl.col("zero_frac").is_not_null()).join(base, on="layer", how="left")
    if zf.height:
        row = zf.sort("zero_frac", descending=True).row(0, named=True)
        out["zero_frac_max"] = _f(row["zero_frac"])
        out["zero_frac_rise"] = _f(row["zero_frac"] - (row["zero_base"] or 0.0))
        out["layer_all_zero"] = row["zero_frac"] >= ap.zero_frac_stuck
    pf = window.filter(pl.col("pos_frac").is_not_null())
    if pf.height:
        # sign share among the non-zero elements (pos_frac counts > 0 over all elements, so a layer of
        # exact zeros would look "all negative"); layers mostly zero are not judged
        nonzero = 1 - pl.col("zero_frac").fill_null(0.0)
        pf = pf.filter(nonzero >= 1 - ap.sign_max_zero_frac).with_columns(
            (pl.col("pos_frac") / nonzero).alias("pos_share")
        )
        stuck = (
            pf.group_by("layer")
            .agg(pl.col("pos_share").mean())
            .filter((pl.col("pos_share") >= ap.sign_stuck) | (pl.col("pos_share") <= 1 - ap.sign_stuck))
        )
        out["sign_stuck"] = stuck.height > 0
    return out
