"""fp16 dynamic loss scale: collapse (repeated halvings without regrowth), the floor, overflow storms.

The scale comes from a logged `loss_scale` series (Megatron `loss scale:`), else from
`overflow` events (DeepSpeed `OVERFLOW! ... Attempted loss scale: X, reducing to Y`).
Halvings are counted in log2 against the trailing maximum over `window_steps` steps,
ignoring the first `calibration_steps` (the scaler searching down from 2^16 / 2^32 is
not a collapse). >= 4 net halvings is a warning; reaching `min_scale` is critical (OPT:
"loss scale hitting the minimum"). `overflow_storm` = many skipped steps close together.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.detect import robust
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData


def scale_timeline(run: RunData) -> tuple[pl.DataFrame, str]:
    """(frame with pos, step, attempt, scale), and where it came from."""
    s = run.series("loss_scale")
    if s.height:
        return s.filter(pl.col("value").is_finite() & (pl.col("value") > 0)).select(
            robust.position(pl.col("attempt"), pl.col("step")).alias("pos"), "step", "attempt",
            pl.col("value").alias("scale")).sort("pos"), "loss_scale"
    ev = _overflows(run)
    if ev.height == 0:
        return pl.DataFrame(schema={"pos": pl.Int64, "step": pl.Int64, "attempt": pl.Int32, "scale": pl.Float64}), ""
    old = ev.select("pos", "step", "attempt", pl.col("old_scale").alias("scale"), pl.lit(0).alias("o"))
    new = ev.select("pos", "step", "attempt", pl.col("new_scale").alias("scale"), pl.lit(1).alias("o"))
    out = pl.concat([old, new]).filter(pl.col("scale").is_finite() & (pl.col("scale") > 0)).sort("pos", "o")
    return out.drop("o"), "overflow events"


def _overflows(run: RunData) -> pl.DataFrame:
    ev = run.events_of("overflow").filter(pl.col("step").is_not_null())
    detail = pl.col("detail").fill_null("{}")
    return ev.select(
        robust.position(pl.col("attempt"), pl.col("step")).alias("pos"), "step", "attempt", "rank",
        detail.str.json_path_match("$.old_scale").cast(pl.Float64, strict=False).alias("old_scale"),
        detail.str.json_path_match("$.new_scale").cast(pl.Float64, strict=False).alias("new_scale"),
        detail.str.json_path_match("$.count").cast(pl.Int64, strict=False).fill_null(1).alias("count"),
    ).sort("pos")


def _skip_counts(run: RunData) -> pl.DataFrame:
    """Overflow-skipped steps per step: events, else increments of Megatron's `skipped_iters`."""
    ev = _overflows(run)
    if ev.height:
        return ev.group_by("pos", "step", "attempt").agg(pl.col("count").max()).sort("pos")
    s = run.series("skipped_iters")
    if s.height == 0:
        return pl.DataFrame(schema={"pos": pl.Int64, "step": pl.Int64, "attempt": pl.Int32, "count": pl.Int64})
    s = s.sort("t").with_columns(pl.col("value").diff().alias("inc")).filter(pl.col("inc") > 0)
    # a counter that jumps by inf or past Int64 (a garbled number) is no count of skipped steps
    return s.select(robust.position(pl.col("attempt"), pl.col("step")).alias("pos"), "step", "attempt",
                    pl.col("inc").cast(pl.Int64, strict=False).alias("count")).drop_nulls("count")


def detect(run: RunData, params) -> list[Finding]:
    lp = params.loss_scale
    findings = []
    scale, origin = scale_timeline(run)
    # the scaler's search down from 2^16 / 2^32 happens at the start of training: a log that starts
    # later (an excerpt, a resumed job's log) has no calibration to exempt
    log_first = run.step_range()[0]
    calibration = lp.calibration_steps if log_first is None or log_first <= params.hard_spike.start_max_step else 0
    if scale.height:
        first_step = int(scale.get_column("step").min())
        settled = pl.col("step") >= first_step + calibration
        scale = scale.with_columns(pl.col("scale").log(2).alias("l2"))
        scale = scale.with_columns(
            pl.when(settled).then(pl.col("l2")).rolling_max_by("pos", window_size=f"{lp.window_steps}i").alias("level")
        ).with_columns((pl.col("level") - pl.col("l2")).alias("halvings"))
        floor = math.log2(lp.min_scale) + 1e-9
        # at the floor counts only when the scale came down to it (a constant 1.0 is bf16/fp32 printing a scale),
        # and only for a scaler whose floor this is: one that goes below min_scale (fairseq halves on to 1e-4)
        # has a lower floor, and there only the halvings count
        below = scale.filter(pl.col("scale") < lp.min_scale * (1 - 1e-9)).height > 0
        at_floor = (pl.col("l2") <= floor) & (pl.col("halvings") >= 1) & pl.lit(not below)
        bad = scale.filter(settled & ((pl.col("halvings") >= lp.min_halvings) | at_floor))
        if bad.height:
            for _, g in robust.flag_groups(bad, lp.window_steps).group_by("group", maintain_order=True):
                findings.append(_collapse(g, floor, origin, lp))
    skips = _skip_counts(run)
    if skips.height:
        first_step = int(skips.get_column("step").min()) if scale.height == 0 else int(scale.get_column("step").min())
        skips = skips.sort("pos").with_columns(
            pl.col("count").rolling_sum_by("pos", window_size=f"{lp.storm_window}i").alias("recent"))
        storm = skips.filter((pl.col("step") >= first_step + calibration) & (pl.col("recent") >= lp.storm_count))
        if storm.height:
            for _, g in robust.flag_groups(storm, lp.storm_window).group_by("group", maintain_order=True):
                findings.append(_storm(g, skips, lp))
    return findings


def _collapse(g: pl.DataFrame, floor: float, origin: str, lp) -> Finding:
    low = g.sort("l2").row(0, named=True)
    at_floor = low["l2"] <= floor
    step_lo, step_hi = int(g.get_column("step").min()), int(g.get_column("step").max())
    level = 2.0 ** low["level"] if low["level"] is not None else None
    ev = [Evidence(signal="loss_scale", step=low["step"], value=low["scale"], baseline=level,
                   ratio=(low["scale"] / level) if level else None,
                   note=f"{low['halvings']:.0f} net halvings within {lp.window_steps} steps (from {origin})")]
    summary = (f"fp16 loss scale fell to {low['scale']:g}" + (" (the minimum)" if at_floor else "")
               + f", {low['halvings']:.0f} halvings without regrowth, steps {step_lo}-{step_hi}")
    return Finding(kind="loss_scale_collapse", step_start=step_lo, step_end=step_hi, peak_step=int(low["step"]),
                   severity="critical" if at_floor else "warning", score=float(low["halvings"] or 0.0), summary=summary,
                   attempt=int(low["attempt"] or 0), evidence=ev,
                   facts={"min_scale": low["scale"], "halvings": float(low["halvings"] or 0.0), "at_floor": at_floor,
                          "onset_step": step_lo, "source": origin})


def _storm(g: pl.DataFrame, skips: pl.DataFrame, lp) -> Finding:
    step_lo, step_hi = int(g.get_column("step").min()), int(g.get_column("step").max())
    lo_pos = int(g.get_column("pos").min()) - lp.storm_window
    inside = skips.filter(pl.col("pos").is_between(lo_pos, int(g.get_column("pos").max())))
    n = int(inside.get_column("count").sum())
    step_lo = int(inside.get_column("step").min())
    peak = g.sort("recent", descending=True).row(0, named=True)
    ev = [Evidence(signal="overflow_skips", step=peak["step"], value=float(peak["recent"]), baseline=float(lp.storm_count),
                   ratio=float(peak["recent"]) / lp.storm_count, note=f"{n} overflow-skipped steps in steps {step_lo}-{step_hi}")]
    return Finding(kind="loss_scale_collapse", step_start=step_lo, step_end=step_hi, peak_step=int(peak["step"]),
                   severity="warning", score=float(peak["recent"]) / lp.storm_count,
                   summary=f"overflow storm: {n} fp16 overflow-skipped steps between steps {step_lo} and {step_hi}",
                   attempt=int(peak["attempt"] or 0), evidence=ev, facts={"overflow_skips": n, "onset_step": step_lo})
