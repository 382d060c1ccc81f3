"""Ray Tune's verbose console output (`tune.run(..., verbose=3)`, RLlib's `rllib train` and scripts that call
Tune), captured with stdout: after each reported iteration a `Result for <trial>:` block, the trial's result
dict printed as YAML (keys sorted, nested dicts indented by two spaces, lists as `- x` items):

    Result for DQN_shogi_96499_00000:
      agent_timesteps_total: 1217
      episode_reward_mean: 0.0
      info:
        learner:
          player_0:
            learner_stats:
              cur_lr: 0.0005
              grad_gnorm: 0.18033289909362793
              mean_q: -0.01511147990822792
      ...
      training_iteration: 1

Printing code: `ray/tune/progress_reporter.py` (`_print_result`: `yaml.dump` of the result without its
config for verbose >= 3; older versions print `Result for {trial}:` then `pretty_print(result)`). One block is
one training-step record; its step is `training_iteration`. Values are the numeric leaves, named by their
key (`grad_gnorm` -> `grad_norm`, `cur_lr` -> `lr`, RLlib's `total_loss` -> `loss`); a key printed twice in a
block (a multi-agent run's second policy) keeps its first value, the first policy's. The subtrees that are no
training state (`config`, `perf`, `timers`, `hist_stats`, `sampler_perf`, ...) are skipped; the `== Status ==`
tables between blocks are a progress summary of the same results, not records.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._fields import parse_numbers
from spikeforensics.ingest._grammar_helpers import block_owners, empty_values
from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    named_values,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "ray_tune"
HEAD = r"^Result for \S+:\s*$"
LEAF = r"^(?P<indent>\s+)(?P<k>[A-Za-z_][\w./-]*):\s+(?P<v>[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.nan|\.inf|nan|inf))\s*$"
KEY_LINE = r"^(?P<indent>\s+)(?P<k>[A-Za-z_][\w./-]*):"
# top-level subtrees that hold no training state of the step
SKIPPED = (
    "config",
    "perf",
    "timers",
    "hist_stats",
    "sampler_perf",
    "off_policy_estimator",
    "episode_media",
    "counters",
)
# bookkeeping leaves: ids, clocks, counts of the run itself
IGNORED = ("pid", "timestamp", "time_this_iter_s", "time_total_s", "time_since_restore", "date", "done")


def sniff(sample: SniffSample) -> float:
    # (the head may end inside the first block, and the wide second look keeps only lines with a number)
    heads = sniff_share(sample, HEAD)
    iters = sniff_share(sample, r"^\s+training_iteration:\s+\d+\s*$")
    tune_keys = sniff_share(
        sample, r"^\s+(?:episode_reward_mean|timesteps_total|agent_timesteps_total|episodes_total):\s"
    )
    return 0.9 if iters >= 2 or (heads and (iters or tune_keys)) else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    owned = block_owners(lines, text.str.contains(HEAD), ~text.str.contains(r"^\s"))
    body = owned.filter(pl.col("_blk").is_not_null() & (pl.col("_blk") >= 0) & (pl.col("line") != pl.col("_blk")))
    keyed = (
        body.with_columns(text.str.extract_groups(KEY_LINE).alias("_g")).unnest("_g").filter(pl.col("k").is_not_null())
    )
    keyed = keyed.with_columns(pl.col("indent").str.len_chars().alias("_depth"))
    top_depth = pl.col("_depth").min().over("_blk")
    keyed = keyed.with_columns(pl.when(pl.col("_depth") == top_depth).then(pl.col("k")).alias("_top")).with_columns(
        pl.col("_top").forward_fill().over("_blk")
    )
    leaves = (
        keyed.filter(~pl.col("_top").is_in(SKIPPED) & ~pl.col("k").is_in(IGNORED))
        .with_columns(text.str.extract(LEAF, 3).str.replace(r"^\.", "").alias("v"))
        .filter(pl.col("v").is_not_null())
    )
    steps = leaves.filter(pl.col("k") == "training_iteration").group_by("_blk").agg(pl.col("v").first())
    if steps.height == 0:
        return text_result(src.name, lines, lines.head(0).select("line"), empty_values())
    steps = parse_numbers(steps, raw="v", out="_step")
    heads = lines.join(steps.select(pl.col("_blk").alias("line"), "_step"), on="line")
    records = heads.select(
        "line",
        step_int(pl.col("_step")).alias("step"),
        "prefix_rank",
        pl.lit("train").alias("record_kind"),
        pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
    )
    pairs = (
        leaves.filter(pl.col("k") != "training_iteration")
        .sort("line")
        .unique(subset=["_blk", "k"], keep="first", maintain_order=True)
        .select(pl.col("_blk").alias("line"), "k", "v")
    )
    # names through the alias table (`grad_gnorm` -> `grad_norm`, `cur_lr` -> `lr`); a name twice in one record
    # keeps its first value (`metrics_from_long`)
    values = named_values(pairs).select("line", "name", "value") if pairs.height else empty_values()
    return text_result(src.name, lines, records, values, mode="done")
