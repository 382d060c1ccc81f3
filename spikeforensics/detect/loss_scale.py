"""fp16 dynamic loss scale: collapse (repeated halvings, then no regrowth), the floor, overflow storms.

The scale comes from a logged `loss_scale` series (Megatron `loss scale:`), else from
`overflow` events (DeepSpeed `OVERFLOW! ... Attempted loss scale: X, reducing to Y`).
A dynamic scaler (Megatron, DeepSpeed, apex, torch GradScaler) halves on every overflow and
doubles after `growth_interval` clean steps, so a healthy one regularly dips several halvings
after a cluster of overflows and then regrows. A collapse is a scale that keeps falling and does
not regrow:

- the fall: net halvings (log2) against each earlier level in the trailing `window_steps`, less
  one per complete `growth_interval` between the two (what regrowth could have restored: a fall
  inside one interval counts whole, a cluster spread over two intervals one less); the first
  `calibration_steps` are ignored (the scaler searching down from 2^16 / 2^32 is not a collapse);
  >= `min_halvings` is a candidate;
- no regrowth: the candidate is a collapse unless, within `regrowth_steps` per level after its
  low, the scale climbs back to less than `min_halvings` below the level it fell from and keeps that
  for `regrowth_hold` steps (a doubling undone at once is a scaler stuck at its low; settling at a
  level 2^8 lower is no recovery). A log that ends before the scale regrew has shown no regrowth
  (a storm at the end of a run, an excerpt cut at the fall). A candidate that regrew is a healthy
  dip: no finding.

Reaching `min_scale` is critical whatever follows (OPT: "loss scale hitting the minimum").
`overflow_storm` = many skipped steps close together.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.detect import robust, signals
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData

# how far (in log2) a printed scale may be from a power of two and still be read as it: 3
# significant digits put 0.062 at 0.011 from 2^-4; a scale that is truly between two powers of
# two (a growth factor other than 2) is 0.2 or more away
SNAP_LOG2 = 0.05


def scale_timeline(run: RunData) -> tuple[pl.DataFrame, str]:
    """(frame with pos, step, attempt, scale), and where it came from."""
    s = run.series("loss_scale")
    if s.height:
        # lazily: the filter copies only the columns kept, not the whole series; a timeline already in `pos`
        # order is not sorted again, and `pos` is the `step` column itself in a run of one attempt
        out = (
            s.lazy()
            .filter(pl.col("value").is_finite() & (pl.col("value") > 0))
            .select(
                robust.position(pl.col("attempt"), pl.col("step")).alias("pos"),
                "step",
                "attempt",
                _snapped(pl.col("value")).alias("scale"),
            )
            .collect()
        )
        return robust.share_pos(signals.in_order(out, "pos")), "loss_scale"
    ev = _overflows(run)
    if ev.height == 0:
        return pl.DataFrame(schema={"pos": pl.Int64, "step": pl.Int64, "attempt": pl.Int32, "scale": pl.Float64}), ""
    old = ev.select("pos", "step", "attempt", pl.col("old_scale").alias("scale"), pl.lit(0).alias("o"))
    new = ev.select("pos", "step", "attempt", pl.col("new_scale").alias("scale"), pl.lit(1).alias("o"))
    out = pl.concat([old, new]).filter(pl.col("scale").is_finite() & (pl.col("scale") > 0)).sort("pos", "o")
    return out.drop("o"), "overflow events"


def _snapped(value: pl.Expr) -> pl.Expr:
    """A printed scale as the power of two it rounds: dynamic scalers (DeepSpeed, Megatron, apex,
    torch GradScaler, fairseq) halve and double, and logs round what they print (fairseq's
    `loss_scale=0.062` is 2^-4, `0.004` is 2^-8); a value not within `SNAP_LOG2` of a power of two
    is kept as printed."""
    l2 = value.log(2)
    near = (l2 - l2.round(0)).abs() <= SNAP_LOG2
    return pl.when(near).then(pl.lit(2.0).pow(l2.round(0))).otherwise(value)


def _overflows(run: RunData) -> pl.DataFrame:
    ev = run.events_of("overflow").filter(pl.col("step").is_not_null())
    detail = pl.col("detail").fill_null("{}")
    return ev.select(
        robust.position(pl.col("attempt"), pl.col("step")).alias("pos"),
        "step",
        "attempt",
        "rank",
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
    return s.select(
        robust.position(pl.col("attempt"), pl.col("step")).alias("pos"),
        "step",
        "attempt",
        pl.col("inc").cast(pl.Int64, strict=False).alias("count"),
    ).drop_nulls("count")


def detect(run: RunData, params) -> list[Finding]:
    lp = params.loss_scale
    findings = []
    scale, origin = scale_timeline(run)
    # the scaler's search down from 2^16 / 2^32 happens at the start of training: a log that starts
    # later (an excerpt, a resumed job's log) has no calibration to exempt
    log_first = run.step_range()[0]
    calibration = lp.calibration_steps if log_first is None or log_first <= params.hard_spike.start_max_step else 0
    scale = signals.rows_where(scale, pl.col("pos").is_not_null())  # a scale printed with no step cannot be placed
    # a scale that never changes never fell: no halving, no collapse (its columns are not built)
    if scale.height and scale.select(pl.col("scale").min() < pl.col("scale").max()).item():
        first_step = int(scale.get_column("step").min())
        settled = pl.col("step") >= first_step + calibration
        scale = scale.with_columns(pl.col("scale").log(2).alias("l2")).with_columns(
            pl.when(settled).then(pl.col("l2")).alias("l2s")
        )
        scale = scale.with_columns(
            pl.col("l2s").rolling_max_by("pos", window_size=f"{lp.window_steps}i").alias("level")
        ).with_columns((pl.col("level") - pl.col("l2")).alias("halvings"), _excess(scale, lp).alias("excess"))
        floor = math.log2(lp.min_scale) + 1e-9
        # at the floor counts only when the scale came down to it (a constant 1.0 is bf16/fp32 printing a scale),
        # and only for a scaler whose floor this is: one that goes below min_scale (fairseq halves on to 1e-4)
        # has a lower floor, and there only the halvings count
        below = scale.filter(pl.col("scale") < lp.min_scale * (1 - 1e-9)).height > 0
        at_floor = (pl.col("l2") <= floor) & (pl.col("halvings") >= 1) & pl.lit(not below)
        bad = scale.filter(settled & ((pl.col("excess") >= lp.min_halvings) | at_floor))
        if bad.height:
            log_end = _log_end(run, scale)
            for _, g in robust.flag_groups(bad, lp.window_steps).group_by("group", maintain_order=True):
                low = g.sort("l2", "pos").row(0, named=True)
                if low["l2"] > floor and _regrew(scale, low, origin, log_end, lp):
                    continue  # a healthy scaler's dip: it fell after a cluster of overflows and grew back
                # a scaler that goes below min_scale has a lower floor: its fall is judged by the halvings alone
                findings.append(_collapse(g, -math.inf if below else floor, origin, lp))
    skips = _skip_counts(run)
    if skips.height:
        first_step = int(skips.get_column("step").min()) if scale.height == 0 else int(scale.get_column("step").min())
        skips = skips.sort("pos").with_columns(
            pl.col("count").rolling_sum_by("pos", window_size=f"{lp.storm_window}i").alias("recent")
        )
        storm = skips.filter((pl.col("step") >= first_step + calibration) & (pl.col("recent") >= lp.storm_count))
        if storm.height:
            for _, g in robust.flag_groups(storm, lp.storm_window).group_by("group", maintain_order=True):
                findings.append(_storm(g, skips, lp))
    return findings


def _excess(scale: pl.DataFrame, lp) -> pl.Expr:
    """Net halvings beyond what regrowth could have restored: against each earlier level in the trailing
    `window_steps`, the fall minus the doublings a scaler makes in the complete growth intervals between
    (one per `growth_interval` clean steps). A fall of k halvings inside one growth interval counts k; a
    healthy scaler's cluster of overflows spread over two intervals counts one less."""
    parts = []
    for k in range(max(1, math.ceil(lp.window_steps / lp.growth_interval))):
        span = min(lp.growth_interval, lp.window_steps - k * lp.growth_interval)
        top = (
            scale.rolling(index_column="pos", period=f"{span}i", offset=f"-{k * lp.growth_interval + span}i")
            .agg(pl.col("l2s").max())
            .get_column("l2s")
        )
        parts.append(pl.lit(top) - pl.col("l2") - k)
    return pl.max_horizontal(parts)


def _regrew(scale: pl.DataFrame, low: dict, origin: str, log_end: int, lp) -> bool:
    """Did the scale, within `regrowth_steps` per level to regain after its low, climb back to less than
    `min_halvings` below the level it fell from, and keep that for `regrowth_hold` steps?

    A printed scale: the stretches of the timeline at or above that target after the low, each lasting
    until the scale falls below it again, or to the end of the log. From overflow events the scale between
    two events is not printed, but no overflow happened there: a clean gap after the low long enough for
    the doublings needed (`growth_interval` each) plus `regrowth_hold` is regrowth kept."""
    target = max(low["level"] - lp.min_halvings + 1, low["l2"] + 1)
    levels = math.ceil(target - low["l2"] - 1e-9)
    horizon = low["pos"] + levels * lp.regrowth_steps
    after = scale.filter(pl.col("pos") > low["pos"]).select("pos", (pl.col("l2") >= target - 1e-9).alias("up"))
    if origin == "overflow events":
        need = levels * lp.growth_interval + lp.regrowth_hold
        gaps = pl.concat(
            [
                pl.DataFrame({"pos": [low["pos"]]}),
                after.select("pos").unique(),
                pl.DataFrame({"pos": [max(log_end, low["pos"])]}),
            ]
        ).sort("pos")
        gaps = gaps.with_columns(pl.col("pos").shift(-1).alias("next")).drop_nulls("next")
        return gaps.filter((pl.col("pos") <= horizon) & (pl.col("next") - pl.col("pos") >= need)).height > 0
    if after.height == 0:
        return False
    stretches = (
        after.with_columns((pl.col("up") != pl.col("up").shift(1)).fill_null(True).cum_sum().alias("run"))
        .group_by("run", maintain_order=True)
        .agg(pl.col("up").first(), pl.col("pos").min().alias("start"))
    )
    stretches = stretches.with_columns(pl.col("start").shift(-1).fill_null(max(log_end, low["pos"])).alias("end"))
    return (
        stretches.filter(
            pl.col("up") & (pl.col("start") <= horizon) & (pl.col("end") - pl.col("start") >= lp.regrowth_hold)
        ).height
        > 0
    )


def _log_end(run: RunData, scale: pl.DataFrame) -> int:
    """Position of the last logged step record (or of the last scale row, if later)."""
    last = (
        run.metrics.lazy()  # lazily: the long table is not copied for one maximum
        .filter(pl.col("record").is_not_null() & pl.col("step").is_not_null())
        .select(robust.position(pl.col("attempt"), pl.col("step")).max())
        .collect()
        .item()
    )
    ends = [int(scale.get_column("pos").max())]
    if last is not None:
        ends.append(int(last))
    return max(ends)


def _collapse(g: pl.DataFrame, floor: float, origin: str, lp) -> Finding:
    low = g.sort("l2").row(0, named=True)
    at_floor = low["l2"] <= floor
    step_lo, step_hi = int(g.get_column("step").min()), int(g.get_column("step").max())
    level = 2.0 ** low["level"] if low["level"] is not None else None
    ev = [
        Evidence(
            signal="loss_scale",
            step=low["step"],
            value=low["scale"],
            baseline=level,
            ratio=(low["scale"] / level) if level else None,
            note=f"{low['halvings']:.0f} net halvings within {lp.window_steps} steps, no regrowth within "
            f"{lp.regrowth_steps} steps after (from {origin})",
        )
    ]
    summary = (
        f"fp16 loss scale fell to {low['scale']:g}"
        + (" (the minimum)" if at_floor else "")
        + f", {low['halvings']:.0f} halvings without regrowth, steps {step_lo}-{step_hi}"
    )
    return Finding(
        kind="loss_scale_collapse",
        step_start=step_lo,
        step_end=step_hi,
        peak_step=int(low["step"]),
        severity="critical" if at_floor else "warning",
        score=float(low["halvings"] or 0.0),
        summary=summary,
        attempt=int(low["attempt"] or 0),
        evidence=ev,
        facts={
            "min_scale": low["scale"],
            "halvings": float(low["halvings"] or 0.0),
            "at_floor": at_floor,
            "onset_step": step_lo,
            "source": origin,
        },
    )


def _storm(g: pl.DataFrame, skips: pl.DataFrame, lp) -> Finding:
    step_lo, step_hi = int(g.get_column("step").min()), int(g.get_column("step").max())
    lo_pos = int(g.get_column("pos").min()) - lp.storm_window
    inside = skips.filter(pl.col("pos").is_between(lo_pos, int(g.get_column("pos").max())))
    n = int(inside.get_column("count").sum())
    step_lo = int(inside.get_column("step").min())
    peak = g.sort("recent", descending=True).row(0, named=True)
    ev = [
        Evidence(
            signal="overflow_skips",
            step=peak["step"],
            value=float(peak["recent"]),
            baseline=float(lp.storm_count),
            ratio=float(peak["recent"]) / lp.storm_count,
            note=f"{n} overflow-skipped steps in steps {step_lo}-{step_hi}",
        )
    ]
    return Finding(
        kind="loss_scale_collapse",
        step_start=step_lo,
        step_end=step_hi,
        peak_step=int(peak["step"]),
        severity="warning",
        score=float(peak["recent"]) / lp.storm_count,
        summary=f"overflow storm: {n} fp16 overflow-skipped steps between steps {step_lo} and {step_hi}",
        attempt=int(peak["attempt"] or 0),
        evidence=ev,
        facts={"overflow_skips": n, "onset_step": step_lo},
    )
