"""Trax's `training.Loop` (google/trax `trax/supervised/training.py`, `_log_step` / `log_summary`), also in a
notebook's saved output:

    Step      1: Ran 1 train steps in 21.36 secs
    Step      1: train CrossEntropyLossWithLogSoftmax |  9.85205269
    Step      1: eval  CrossEntropyLossWithLogSoftmax |  9.71523285
    Step      1: eval        WeightedCategoryAccuracy |  0.00000000
    Step    100: Ran 99 train steps in 86.13 secs

A step's `train` line is a training record at its step: the Loop prints one per report, the task's loss
(`CrossEntropyLossWithLogSoftmax`, `L2Loss`, older `trainer_lib`'s `loss`, a custom layer's name), the mean
over the steps since the report before; with several train lines, the one naming a `Loss` is the loss and the
others join its record in snake case. A notebook cell run again prints its steps again: each run is kept (a
new segment each time the step goes back). `eval` lines are the eval record of that step (a
loss -> `eval_loss`, others `eval_<name>` in snake case); `Ran K train steps in S secs` gives `step_time_ms`.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import snake_case
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    parse_numbers,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "trax"
LINE = (
    rf"^\s*Step\s+(?P<step>\d+): (?P<split>train|eval)\s+(?P<metric>[A-Za-z][\w/]*)\s+\|\s+(?P<value>{NUM_TOKEN})\s*$"
)
RAN = r"^\s*Step\s+(?P<step>\d+): Ran (?P<k>\d+) train steps in (?P<secs>[\d.]+) secs"
LOSSY = r"(?i)loss|crossentropy"


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, LINE) >= 2 else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    hit = (
        lines.filter(text.str.contains(LINE))
        .with_columns(text.str.extract_groups(LINE).alias("_g"))
        .unnest("_g")
        .sort("line")
        .with_columns(
            step_int(pl.col("step")).alias("step"),
            pl.col("metric").str.contains(LOSSY).alias("_loss"),
        )
        # a notebook cell run again prints its steps again: a new segment each time the step goes back
        .with_columns((pl.col("step") < pl.col("step").shift(1)).fill_null(False).cum_sum().alias("_seg"))
    )
    names = {m: snake_case(m) for m in hit.get_column("metric").unique().to_list()}
    hit = hit.with_columns(pl.col("metric").replace_strict(names, default=None).alias("_name"))
    # the Loop prints one `train` line per report, the task's loss (`CrossEntropyLossWithLogSoftmax`, older
    # trainer_lib `loss`, a custom layer's name): a step's first train line, a `Loss` one if there are several
    key = ["_seg", "step"]
    order = hit.sort([*key, "_loss", "line"], descending=[False, False, True, False])
    heads = order.unique(subset=[*key, "split"], keep="first", maintain_order=True).select(
        "line", *key, "split", "prefix_rank"
    )
    records = heads.select(
        "line",
        "step",
        "prefix_rank",
        pl.col("split").alias("record_kind"),
        pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
    ).sort("line")
    owned = hit.join(heads.select(pl.col("line").alias("_rec"), *key, "split"), on=[*key, "split"])
    is_head = pl.col("line") == pl.col("_rec")
    name = (
        pl.when(pl.col("split") == "eval")
        .then(pl.lit("eval_") + pl.when(pl.col("_loss")).then(pl.lit("loss")).otherwise(pl.col("_name")))
        .otherwise(pl.when(is_head).then(pl.lit("loss")).otherwise(pl.col("_name")))
    )
    values = parse_numbers(
        owned.select(pl.col("_rec").alias("line"), name.alias("name"), "value"), raw="value", out="v"
    )
    values = values.select("line", "name", pl.col("v").alias("value"))
    # `Ran K train steps in S secs` comes before its step's metric lines: the train record of that step and segment
    ran = lines.filter(text.str.contains(RAN)).with_columns(text.str.extract_groups(RAN).alias("_g")).unnest("_g")
    ran = ran.select(
        "line",
        step_int(pl.col("step")).alias("step"),
        (pl.col("secs").cast(pl.Float64) / pl.col("k").cast(pl.Float64) * 1000).alias("value"),
    ).sort("line")
    train_heads = (
        heads.filter(pl.col("split") == "train").select(pl.col("line").alias("_rec"), "line", "step").sort("line")
    )
    ran = ran.join_asof(train_heads, on="line", by="step", strategy="forward", check_sortedness=False)
    ran = ran.drop_nulls("_rec").select(pl.col("_rec").alias("line"), pl.lit("step_time_ms").alias("name"), "value")
    out = pl.concat([values, ran]).filter(pl.col("value").is_not_null())
    return text_result(src.name, lines, records, out, lines.head(0), mode="done")
