"""Did the loss answer a grad-norm spike? For isolated grad-norm blips (detect/hard_spike.py): the
loss "moved" after a step when `blips.loss_effect_records` or more of the `blips.reach` records after it
rise `blips.loss_effect_ratio` or `blips.loss_effect_z` over the loss's pre-step level; and those answers
count only beyond chance: on a noisy per-example loss (batch size 1) such a rise follows a third of all
records, so 2 answers out of 4 blips is what the loss does anyway (`chance_of_answers`, the binomial tail
at that base rate, against `hard_spike.corroborate_chance`).

Pure: run data in, a frame out.
"""

from __future__ import annotations

import math
from dataclasses import astuple

import polars as pl

from spikeforensics.detect import signals
from spikeforensics.rundata import RunData


def answer(run: RunData, params, steps: list[int]) -> pl.DataFrame | None:
    """Per step of `steps`: `rise`, the loss's highest ratio over its pre-step median within `blips.reach` records
    after it, and `moved`: `blips.loss_effect_records` or more of those records are >= loss_effect_ratio or
    loss_effect_z above it (one record alone is as likely noise). None without a loss series."""
    bp = params.blips
    loss, _ = signals.with_baseline(run, "loss", params)
    key = ("sf-loss-answer", astuple(params.series))  # asked once per blip: the judged rows are prepared once
    if key not in run._cache:
        run._cache[key] = (  # lazily: the filter copies the four columns kept, not the whole baseline frame
            loss.lazy()
            .filter(pl.col("left").is_not_null())
            .select("step", "t", (pl.col("y") - pl.col("left")).alias("rise"), "z_left")
            .collect()
        )
    rows = run._cache[key]
    if rows.height == 0 or not steps:
        return None
    at = (
        rows.filter(pl.col("step").is_in(steps))
        .select(pl.col("step").alias("at"), pl.col("t").alias("t0"))
        .unique("at")
    )
    if at.height == 0:
        return None
    rises = (pl.col("rise") >= math.log(bp.loss_effect_ratio)) | (pl.col("z_left") >= bp.loss_effect_z)
    near = pl.concat([at.with_columns((pl.col("t0") + d).alias("t")) for d in range(bp.reach + 1)])
    hit = near.join(rows, on="t").with_columns(rises.alias("moved"))
    out = (
        hit.group_by("at")
        .agg(pl.col("rise").max().exp(), pl.col("moved").sum() >= bp.loss_effect_records)
        .rename({"at": "step"})
        .sort("step")
    )
    # the loss "answers" a blip only more often than it moves after any record: on a noisy loss (batch
    # size 1, per-example SFT losses) a 10% rise within a few records comes after half of all records
    answered = int(out.get_column("moved").sum())
    if (
        answered
        and chance_of_answers(run, rows, rises, answered, out.height, params) > params.hard_spike.corroborate_chance
    ):
        out = out.with_columns(pl.lit(False).alias("moved"))
    return out


def chance_of_answers(run: RunData, rows: pl.DataFrame, rises: pl.Expr, answered: int, blips: int, params) -> float:
    """The chance that the loss "moves" (as `answer` judges it) after `answered` or more of `blips`
    records picked at random: the binomial tail at the share of all records after which it moves."""
    bp = params.blips
    key = ("sf-loss-move-share", id(rows))  # once per run: the judged rows are the run's loss
    if key not in run._cache:
        moved = (
            rows.sort("t")
            .select(rises.cast(pl.Int32).alias("m"))
            .select(pl.col("m").reverse().rolling_sum(bp.reach + 1, min_samples=1).reverse() >= bp.loss_effect_records)
            .to_series()
        )
        run._cache[key] = float(moved.mean()) if moved.len() else 0.0
    p = run._cache[key]
    return sum(math.comb(blips, k) * p**k * (1 - p) ** (blips - k) for k in range(answered, blips + 1))
