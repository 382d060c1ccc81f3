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
non-negative `value_loss` before the signed policy objective). In an epsilon-greedy run's tables (SB3's DQN and
QR-DQN print `rollout/exploration_rate`), a `train/loss` beside no policy term is the Q-network's TD loss, stored as
`td_loss` (a critic's loss, `schema.VALUE_LOSS`: it grows with the returns and is resolved as the loss). Long values cut by the logger
(`...`) and non-numbers (`env_id`) are not metrics. Mode "done".

The same logger lives on in OpenAI's diffusion code (`openai/improved-diffusion`, `guided-diffusion`,
`consistency_models`: `improved_diffusion/logger.py`, `TrainLoop.log_step` / `dumpkvs` every
`log_interval` steps), whose tables carry a `step` row (the step, first among the counters):

    ------------------------
    | grad_norm | 82       |
    | loss      | 16.6     |
    | loss_q0   | 41.7     |
    | samples   | 256      |
    | step      | 0        |
    ------------------------

The logger prints numbers to 3 significant digits, so past 10,000 steps `1.01e+04` stands for several
steps: such a step is approximate (consecutive tables with the same printed step stay separate records).
`lg_loss_scale` (fp16 training: log2 of the loss scale) is stored as `loss_scale` = 2 ** value.
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
STEP_KEYS = ("step", "n_updates", "iterations", "total_timesteps")


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(
        sample,
        [
            (r"\|\s+(?:n_updates|total_timesteps|value_loss|policy_loss|explained_variance|ep_rew_mean)\s+\|", 0.9),
            (r"^\s*\|\s+(?:step|grad_norm|loss|lg_loss_scale|samples|param_norm)\s+\|\s+\S+\s+\|\s*$", 0.9),
        ],
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
    printed = pl.coalesce([pl.col(k) for k in STEP_KEYS])
    records = (
        blocks.with_columns(step.alias("step"), printed.str.contains(r"[eE]").fill_null(False).alias("step_approx"))
        .join(lines.select("line", "text"), on="line", how="left")
        .select(
            "line",
            "step",
            "step_approx",
            "prefix_rank",
            pl.lit("train").alias("record_kind"),
            extract_time(text).alias("time"),
        )
        .sort("line")
    )
    lg_scale = pl.col("k") == "lg_loss_scale"
    # an epsilon-greedy run (SB3's DQN / QR-DQN: `rollout/exploration_rate`) whose `train/` section holds one `loss`
    # and no policy terms: that loss is the Q-network's TD loss, a critic's (`schema.VALUE_LOSS`)
    keys = set(rows.get_column("k").to_list())
    td = "rollout/exploration_rate" in keys and "train/loss" in keys and not any("policy" in k for k in keys)
    pairs = rows.select(
        pl.col("_first").alias("line"),
        pl.when(lg_scale)
        .then(pl.lit("loss_scale"))
        .when(pl.lit(td) & (pl.col("k") == "train/loss"))
        .then(pl.lit("td_loss"))
        .otherwise(pl.col("k").str.replace(r"^(?:train|rollout|time)/", ""))
        .alias("k"),
        pl.when(lg_scale)
        .then((pl.lit(2.0).pow(pl.col("v").cast(pl.Float64, strict=False))).cast(pl.String))
        .otherwise(pl.col("v"))
        .alias("v"),
    )
    values = named_values(pairs).select("line", "name", "value")
    records = records.join(values.select("line").unique(), on="line", how="semi")
    return text_result(src.name, lines, records, values, None, mode="done")
