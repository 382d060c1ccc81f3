"""Stable-Baselines (RL) logger tables: one boxed table per logged iteration.

Stable-Baselines 2 (`stable_baselines/logger.py`, `HumanOutputFormat.writekvs`) and Stable-Baselines3
(`stable_baselines3/common/logger.py`, the same class, with `section/` header rows) print every
`log_interval` a block of `| key | value |` rows between dashed lines:

    ------------------------------------            -----------------------------------------
    | approxkl           | 0.05277536  |            | time/                   |             |
    | n_updates          | 29          |            |    iterations           | 10          |
    | policy_loss        | 0.016628642 |            |    total_timesteps      | 20480       |
    | total_timesteps    | 237568      |            | train/                  |             |
    | value_loss         | 3735940.5   |            |    loss                 | 12.3        |
    ------------------------------------            |    n_updates            | 90          |
                                                    -----------------------------------------

-> one training record per block (its line: the block's first row): step = `n_updates` (the
training updates done), else `iterations`, else `total_timesteps`; every row a metric by name, an
SB3 row under its section (`train/loss` -> `loss`, `train/learning_rate` -> `lr`, `train/value_loss` ->
`value_loss`; `time/total_timesteps` -> `total_timesteps`). A table without `loss` (SB2's PPO2 prints
`policy_loss` and `value_loss`) has its training loss resolved at diagnosis (`RunData.resolve`: the
non-negative `value_loss` before the signed policy objective). Long values cut by the logger
(`...`) and non-numbers (`env_id`) are not metrics. Mode "done".
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._fields import named_values
from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    prepared_lines,
    sniff_tiers,
    step_int,
    text_result,
)

NAME = "sb_table"
DASHES = r"^\s*-{10,}\s*$"
ROW = r"^\s*\|(?P<k>[^|]*?)\|(?P<v>[^|]*)\|\s*$"
STEP_KEYS = ("n_updates", "iterations", "total_timesteps")


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(
        sample,
        [(r"\|\s+(?:n_updates|total_timesteps|value_loss|policy_loss|explained_variance|ep_rew_mean)\s+\|", 0.9)],
    )


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    boxed = lines.filter(text.str.contains(DASHES) | text.str.contains(ROW)).with_columns(
        text.str.contains(DASHES).cum_sum().alias("_block")
    )
    rows = (
        boxed.filter(~text.str.contains(DASHES))
        .with_columns(text.str.extract_groups(ROW).alias("_g"))
        .unnest("_g")
        .with_columns(pl.col("k").str.strip_chars().alias("k"), pl.col("v").str.strip_chars().alias("v"))
    )
    # an SB3 section header (`| train/ |   |`) prefixes the indented rows under it, within its block
    section = pl.when(pl.col("k").str.ends_with("/") & (pl.col("v") == "")).then(pl.col("k"))
    rows = rows.with_columns(section.forward_fill().over("_block").fill_null("").alias("_section"))
    rows = rows.filter(pl.col("v") != "").with_columns(
        pl.when(pl.col("_section") != "").then(pl.col("_section") + pl.col("k")).otherwise(pl.col("k")).alias("k"),
        pl.col("line").min().over("_block").alias("_first"),
    )
    blocks = rows.group_by("_block").agg(
        pl.col("_first").first().alias("line"),
        pl.col("prefix_rank").first(),
        *[pl.col("v").filter(pl.col("k").str.replace(r"^[a-z_]+/", "") == key).first().alias(key) for key in STEP_KEYS],
    )
    step = pl.coalesce([step_int(pl.col(k).cast(pl.Float64, strict=False)) for k in STEP_KEYS])
    records = (
        blocks.with_columns(step.alias("step"))
        .join(lines.select("line", "text"), on="line", how="left")
        .select("line", "step", "prefix_rank", pl.lit("train").alias("record_kind"), extract_time(text).alias("time"))
        .sort("line")
    )
    pairs = rows.select(
        pl.col("_first").alias("line"),
        pl.col("k").str.replace(r"^(?:train|rollout|time)/", ""),
        "v",
    )
    values = named_values(pairs).select("line", "name", "value")
    records = records.join(values.select("line").unique(), on="line", how="semi")
    return text_result(src.name, lines, records, values, None, mode="done")
