"""PyMARL's console log (`src/utils/logging.py` `Logger.print_recent_stats`, also in EPyMARL, pymarl2 and their
forks; sacred's captured `cout.txt` holds the same): every `log_interval` env steps a header, then the mean of
each stat over the interval, four `name: value` pairs a line, tab-separated:

    [INFO 04:47:27] my_main Recent Stats | t_env:      20044 | Episode:      712
    battle_won_mean:           0.0000	ep_length_mean:           28.6250	epsilon:                   1.0000	grad_norm:                 3.3918
    loss:                      0.2325	q_taken_mean:              0.0500	return_mean:               1.8047	return_std:                0.4186
    target_mean:               0.0782	td_error_abs:              0.3716	test_battle_won_mean:      0.0000	test_ep_length_mean:     120.0000
    test_return_mean:          0.0000	test_return_std:           0.0000
    [INFO 04:47:29] my_main t_env: 20235 / 10050000

The header is the record, `t_env` its step and `Episode` a value; the pair lines right under it are its
metrics (the block ends at the first other line). A Q-learner's block (`target_mean`, `td_error_abs` or
`q_taken_mean` beside `loss`: `q_learner.py` logs `loss` as the mean squared TD error) names its loss
`td_loss`, a critic's loss (`schema.VALUE_LOSS`): it grows with the returns by design. The StarCraft II
client's own output between blocks (relaunches, `Error: expected response` on shutdown) is left to the
event readers.
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

NAME = "pymarl"
HEADER = r"Recent Stats \|\s*t_env:\s*(\d+)\s*\|\s*Episode:\s*(\d+)\s*$"
PAIR = rf"([A-Za-z_][\w/.-]*):\s+({NUM_TOKEN})"
PAIRS_LINE = rf"^\s*(?:[A-Za-z_][\w/.-]*:\s+{NUM_TOKEN}\s*)+$"
# stats a Q-learner logs beside its TD loss
TD_STATS = ("target_mean", "td_error_abs", "q_taken_mean")
# what a learner logs at each of its updates (`q_learner.py`, `coma_learner.py`, ...), the rest being the runner's
LEARNER_STATS = ("loss", "grad_norm", "critic_loss", "critic_grad_norm", "pg_loss", "agent_grad_norm", *TD_STATS)


def _without_stale_learner_stats(pairs: pl.DataFrame) -> pl.DataFrame:
    """The learner's stats of a block that prints them exactly as the block before did are dropped: the logger
    prints every stat's latest mean in every block, so a runner that logs more often than the learner (LINDA's
    runs: a block every ~400 env steps, a learner update every ~10,000) repeats the learner's last loss, grad norm
    and Q statistics ~25 times over. Those repeats are no new records of them: a block is stale when each learner
    stat it prints equals that stat's previous value (all of them at once: a real update repeating five means to
    four decimals does not happen)."""
    learner = pl.col("name").is_in(LEARNER_STATS)
    same = pl.col("value") == pl.col("value").shift(1).over("name")
    stale_blocks = (
        pairs.with_row_index("_i")
        .filter(learner)
        .sort("line", "_i")
        .with_columns(same.fill_null(False).alias("_same"))
        .group_by("line")
        .agg(pl.col("_same").all())
        .filter(pl.col("_same"))
        .get_column("line")
    )
    if stale_blocks.len() == 0:
        return pairs
    return pairs.filter(~(learner & pl.col("line").is_in(stale_blocks.implode())))


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, HEADER) and sniff_share(sample, PAIRS_LINE) else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src).sort("line")
    text = pl.col("text")
    is_head = text.str.contains(HEADER)
    marked = block_owners(lines, is_head, ~text.str.contains(PAIRS_LINE))
    heads = marked.filter(is_head).with_columns(
        step_int(text.str.extract(HEADER, 1)).alias("step"), pl.lit("train").alias("record_kind")
    )
    body = marked.filter(~is_head & (pl.col("_blk") >= 0))
    pairs = (
        body.select(pl.col("_blk").alias("line"), text.str.extract_all(PAIR).alias("_p"))
        .explode("_p")
        .select(
            "line",
            pl.col("_p").str.extract(PAIR, 1).alias("name"),
            to_float(pl.col("_p").str.extract(PAIR, 2)).alias("value"),
        )
    )
    pairs = _without_stale_learner_stats(pairs)
    if pairs.filter(pl.col("name").is_in(TD_STATS)).height:
        pairs = pairs.with_columns(
            pl.when(pl.col("name") == "loss").then(pl.lit("td_loss")).otherwise("name").alias("name")
        )
    episodes = heads.select(
        "line", pl.lit("episode").alias("name"), to_float(text.str.extract(HEADER, 2)).alias("value")
    )
    records = heads.select(
        "line", "step", "prefix_rank", "record_kind", pl.lit(None, dtype=pl.Datetime("us")).alias("time")
    )
    result = text_result(src.name, lines, records, pl.concat([pairs, episodes]), mode="done")
    result.body_lines = body.get_column("line")
    return result
