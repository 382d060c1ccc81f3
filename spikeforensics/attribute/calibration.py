"""Clip-threshold calibration from the pre-clip grad-norm distribution (DOMAIN.md).

recommended = quantile(pre-clip norm over healthy steps) x margin   (default P99 x 2)

Healthy steps: finite, outside every incident (padded), after a short burn-in. Also
reported: the clip rate the recommendation would give, the current threshold and clip
rate with what that rate means (DOMAIN bands), per-layer thresholds from the layer
dump, and warnings when the world size, gradient accumulation or the model changed
within the run (a threshold calibrated on one regime does not carry over).
"""

from __future__ import annotations

import polars as pl

from spikeforensics.attribute.context import RunContext
from spikeforensics.params import CalibrationParams
from spikeforensics.rundata import RunData


def clip_rate_meaning(rate: float | None, cp: CalibrationParams) -> str:
    if rate is None:
        return "unknown (no clip threshold or grad norm in the log)"
    if rate > cp.very_high:
        return (
            f"{rate:.1%} of steps clipped: the threshold is far too small (> {cp.very_high:.0%}); training under-fits"
        )
    if rate > cp.high:
        return f"{rate:.1%} of steps clipped: LR too high or threshold too tight (> {cp.high:.0%})"
    if rate > cp.healthy_high:
        return f"{rate:.1%} of steps clipped: above the healthy {cp.healthy_low:.0%}-{cp.healthy_high:.0%} band"
    if rate >= cp.healthy_low:
        return f"{rate:.1%} of steps clipped: healthy ({cp.healthy_low:.0%}-{cp.healthy_high:.0%})"
    if rate < cp.too_loose:
        return f"{rate:.2%} of steps clipped: the threshold is too loose to catch spikes (< {cp.too_loose:.1%})"
    return f"{rate:.2%} of steps clipped: below the healthy band, spikes mostly pass unclipped"


def healthy_norms(ctx: RunContext, cp: CalibrationParams) -> pl.DataFrame:
    finite = ctx.grad.filter(pl.col("value").is_finite() & (pl.col("value") > 0))
    burn = int(finite.height * cp.burn_in_frac)
    return ctx.healthy(finite.slice(burn))


def regime_warnings(run: RunData) -> list[str]:
    """World size, gradient accumulation or model changes inside the run."""
    out = []
    b = run.batches.filter(pl.col("step").is_not_null())
    if b.height:
        per_step = (
            b.group_by("step")
            .agg(
                pl.col("rank").n_unique().alias("ranks"),
                pl.col("micro").n_unique().alias("micros"),
                pl.len().alias("samples"),
            )
            .sort("step")
        )
        for col, what in (
            ("ranks", "world size (ranks per step in the batch manifest)"),
            ("micros", "gradient accumulation (micro-batches per step)"),
            ("samples", "global batch size (samples per step)"),
        ):
            body = per_step.head(max(per_step.height - 1, 1))  # the last step may be partial
            changed = body.filter(pl.col(col) != pl.col(col).shift(1))
            if body.get_column(col).n_unique() > 1 and changed.height:
                step = int(changed.get_column("step")[0])
                vals = body.get_column(col).unique(maintain_order=True).to_list()[:4]
                out.append(
                    f"The {what} changed within the run (values {vals}, first change at step {step}): "
                    "recalibrate the clip threshold for each regime."
                )
    for name in ("global_batch_size", "world_size", "gradient_accumulation_steps"):
        s = run.series(name)
        if s.height and s.get_column("value").n_unique() > 1:
            out.append(f"The logged {name} changed within the run: recalibrate the clip threshold for each regime.")
    layers = run.layers.filter(pl.col("step").is_not_null())
    if layers.height:
        per_step = layers.group_by("step").agg(pl.col("layer").n_unique().alias("n")).sort("step")
        body = per_step.head(max(per_step.height - 1, 1))
        if body.get_column("n").n_unique() > 1:
            out.append(
                "The set of layers in the gradient dump changed within the run (model changed?): "
                "recalibrate the clip threshold."
            )
    return out


def layer_thresholds(run: RunData, ctx: RunContext, cp: CalibrationParams) -> dict[str, float]:
    layers = run.layers.filter(pl.col("step").is_not_null() & pl.col("grad_norm").is_finite())
    if layers.height == 0:
        return {}
    healthy = ctx.healthy(
        layers.group_by("step", "layer", maintain_order=True).agg(pl.col("grad_norm").max())
    )  # dump order
    per = (
        healthy.group_by("layer", maintain_order=True)
        .agg(pl.len().alias("n"), pl.col("grad_norm").quantile(cp.quantile, "linear").alias("q"))
        .filter(pl.col("n") >= cp.layer_min_steps)
    )
    return {row["layer"]: round(float(row["q"]) * cp.margin, 6) for row in per.iter_rows(named=True)}


def calibrate(run: RunData, ctx: RunContext, cp: CalibrationParams) -> dict:
    """The `calibration` object of diagnosis.json (contract fields first, extras after)."""
    norms = healthy_norms(ctx, cp)
    finite = ctx.grad.filter(pl.col("value").is_finite())
    current = ctx.clip_threshold
    current_rate = float((finite.get_column("value") > current).mean()) if current and finite.height else None
    out = {
        "recommended_clip_norm": None,
        "basis": "",
        "current_clip_norm": current,
        "clip_rate": current_rate,
    }
    if norms.height >= cp.min_healthy_steps:
        q = float(norms.get_column("value").quantile(cp.quantile, "linear"))
        rec = q * cp.margin
        out["recommended_clip_norm"] = round(rec, 6)
        out["basis"] = (
            f"P{cp.quantile * 100:g} of pre-clip grad norm over {norms.height} healthy steps "
            f"({q:.4g}) x {cp.margin:g}" + (" (norm derived from the per-layer dump)" if ctx.grad_derived else "")
        )
        out["quantile_value"] = q
        out["expected_clip_rate"] = float((finite.get_column("value") > rec).mean()) if finite.height else None
        out["healthy_steps"] = norms.height
    else:
        out["basis"] = (
            f"not enough healthy steps with a grad norm ({norms.height} < {cp.min_healthy_steps}); no recommendation"
        )
    out["current_clip_source"] = ctx.clip_threshold_source
    out["clip_rate_meaning"] = clip_rate_meaning(current_rate, cp)
    out["layer_clip_norms"] = layer_thresholds(run, ctx, cp)
    out["warnings"] = regime_warnings(run)
    return out
