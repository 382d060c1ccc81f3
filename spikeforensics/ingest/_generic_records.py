"""Record steps of the `generic_steps` grammar after its lines are read: a record printed one metric per line,
and the non-finite loss terms of a line that repeats the step before it. Frame in, frame out; called by
`generic_steps.parse`.
"""

from __future__ import annotations

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest.base import nan_detail


def hidden_nans(records: pl.DataFrame, values: pl.DataFrame) -> pl.DataFrame | None:
    """`nan` events for the non-finite loss terms of a line that repeats the step of the line before it
    (NVIDIA dllogger prints `Training Iteration: 1882 average_loss : nan` again after an fp16 skip): the
    record keeps the first line's values (CONTRACT), the NaN is not lost."""
    if records.height < 2:
        return None
    rec = records.sort("line").select(
        "line",
        "step",
        "prefix_rank",
        "time",
        (
            (pl.col("step") == pl.col("step").shift(1))
            & pl.col("prefix_rank").eq_missing(pl.col("prefix_rank").shift(1))
            & (pl.col("record_kind") == "train")
        )
        .fill_null(False)
        .alias("_again"),
    )
    again = rec.filter(pl.col("_again"))
    if again.height == 0:
        return None
    bad = values.join(again.select("line"), on="line", how="semi").filter(
        pl.col("name").str.contains(schema.LOSS_TERM)
        & ~pl.col("name").str.starts_with("loss_scale")
        & ~pl.col("value").is_finite()
    )
    if bad.height == 0:
        return None
    detail = nan_detail(', "repeated_step": true')
    return (
        bad.group_by("line", maintain_order=True)
        .agg(detail.first().alias("detail"))
        .join(again.select("line", "step", pl.col("prefix_rank").alias("rank"), "time"), on="line")
        .select("line", "step", "rank", pl.lit("nan").alias("kind"), "time", "detail")
    )


def one_metric_lines(records: pl.DataFrame, values: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A record printed one metric per line (TensorFlowTTS `base_trainer`: `(Step: 95400) train_f0_loss =
    0.0659.`, then `(Step: 95400) train_mel_loss_after = nan.`): consecutive lines of one stream with the
    same step that each hold one metric, each a different one, are one record on its first line (the
    contract's same-step rule would keep the first line's one value and lose the others). Lines that
    repeat a name (ranks printing the same record) are left to that rule."""
    if records.height < 2:
        return records, values
    per_line = values.group_by("line").agg(pl.len().alias("_n"), pl.col("name").first().alias("_name"))
    rec = records.join(per_line, on="line", how="left").sort("line")
    same = (
        (pl.col("step") == pl.col("step").shift(1))
        & pl.col("prefix_rank").eq_missing(pl.col("prefix_rank").shift(1))
        & (pl.col("record_kind") == pl.col("record_kind").shift(1))
        & (pl.col("_n") == 1)
        & (pl.col("_n").shift(1) == 1)
    ).fill_null(False)
    rec = rec.with_columns((~same).cum_sum().alias("_grp"))
    rec = rec.with_columns(
        pl.col("line").first().over("_grp").alias("_first"),
        (pl.col("_name").n_unique().over("_grp") == pl.len().over("_grp")).alias("_distinct"),
    )
    moved = rec.filter(pl.col("_distinct") & (pl.col("line") != pl.col("_first")))
    if moved.height == 0:
        return records, values
    mapping = dict(zip(moved.get_column("line").to_list(), moved.get_column("_first").to_list()))
    values = values.with_columns(pl.col("line").replace(mapping))
    return records.join(moved.select("line"), on="line", how="anti"), values
