"""RSL-RL's console log (`rsl_rl/runners/on_policy_runner.py`, the PPO runner of legged_gym, IsaacLab,
Isaac Gym Envs' locomotion tasks and their forks): one centred block per learning iteration.

    ################################################################################
                           Learning iteration 8391/10000

                           Computation: 14963 steps/s (collection: 6.407s, learning 0.163s)
                   Value function loss: inf
                        Surrogate loss: 0.0000
                 Mean action noise std: 0.56
                     Mean total reward: 25.66
                   Mean episode length: 1000.00
    Episode_Reward/track_lin_vel_xy_exp: 1.2263
    --------------------------------------------------------------------------------
                       Total timesteps: 824967168
                        Iteration time: 6.57s

Printing code: `OnPolicyRunner.log` builds `log_string` from a rule of `#`, the centred
`Learning iteration {it}/{tot_iter}` header and one `{'Value function loss:':>{pad}} {loss:.4f}` line per
value (right-aligned names, so a long name starts the line), the episode infos and the totals.
The iteration is the step; every `name: number` line of the block is a metric of the record, named
as printed in snake case (`value_function_loss`, `surrogate_loss`, `mean_action_noise_std`,
`mean_total_reward`, `episode_reward/track_lin_vel_xy_exp`, ...). A line of prose (`Computation:
14963 steps/s (...)`, `ETA: 00:12:03`) is not a metric. A block ends at the next header or `#` rule.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import block_owners
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
    to_float,
)

NAME = "rsl_rl"
HEADER = r"^\s*Learning iteration\s+(\d+)\s*/\s*\d+\s*$"
RULE = r"^\s*#{10,}\s*$"
FIELD = rf"^\s*(?P<k>[A-Za-z][\w /.-]*?):\s*(?P<v>{NUM_TOKEN})\s*[a-z%]{{0,3}}\s*$"


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, HEADER) and sniff_share(sample, r"(?i)\bloss:\s*[-+]?[\d.nNiI]") else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src).sort("line")
    text = pl.col("text")
    is_head = text.str.contains(HEADER)
    # each line belongs to the header above it, up to the next header or `#` rule
    marked = block_owners(lines, is_head, text.str.contains(RULE))
    heads = marked.filter(is_head).with_columns(
        step_int(text.str.extract(HEADER, 1)).alias("step"), pl.lit("train").alias("record_kind")
    )
    fields = marked.filter(~is_head & (pl.col("_blk") >= 0) & text.str.contains(FIELD))
    values = fields.select(
        pl.col("_blk").alias("line"),
        text.str.extract(FIELD, 1).str.strip_chars().str.to_lowercase().str.replace_all(" ", "_").alias("name"),
        to_float(text.str.extract(FIELD, 2)).alias("value"),
    )
    records = heads.select(
        "line", "step", "prefix_rank", "record_kind", pl.lit(None, dtype=pl.Datetime("us")).alias("time")
    )
    result = text_result(src.name, lines, records, values, mode="done")
    result.body_lines = marked.filter(~is_head & (pl.col("_blk") >= 0)).get_column("line")  # prose lines too
    return result
