"""Trax's `training.Loop` (google/trax `trax/supervised/training.py`, `_log_step` / `log_summary`), also in a
notebook's saved output:

    Step      1: Ran 1 train steps in 21.36 secs
    Step      1: train CrossEntropyLossWithLogSoftmax |  9.85205269
    Step      1: eval  CrossEntropyLossWithLogSoftmax |  9.71523285
    Step      1: eval        WeightedCategoryAccuracy |  0.00000000
    Step    100: Ran 99 train steps in 86.13 secs

A `train` line naming a loss (`CrossEntropyLossWithLogSoftmax`, `L2Loss`, `WeightedCategoryCrossEntropy`,
a name with `Loss`) is a training record at its step, the mean over the steps since the report before;
`train` lines of other metrics of the same step join it. `eval` lines are the eval record of that step (a
loss -> `eval_loss`, others `eval_<name>` in snake case); `Ran K train steps in S secs` gives `step_time_ms`.
"""

from __future__ import annotations

import re

import polars as pl

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
LOSSY = r"Loss|CrossEntropy"


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, LINE) >= 2 else 0.0


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower().replace("/", "_")


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    hit = (
        lines.filter(text.str.contains(LINE))
        .with_columns(text.str.extract_groups(LINE).alias("_g"))
        .unnest("_g")
        .with_columns(pl.col("metric").str.contains(LOSSY).alias("_loss"))
    )
    names = {m: _snake(m) for m in hit.get_column("metric").unique().to_list()}
    hit = hit.with_columns(
        pl.when(pl.col("_loss"))
        .then(pl.lit("loss"))
        .otherwise(pl.col("metric").replace_strict(names, default=None))
        .alias("_name")
    )
    train, evals = hit.filter(pl.col("split") == "train"), hit.filter(pl.col("split") == "eval")

    # one record per step and split: the step's first loss line (else its first line) carries the others
    def heads(frame: pl.DataFrame, kind: str) -> pl.DataFrame:
        first = frame.sort(["step", "_loss", "line"], descending=[False, True, False]).unique("step", keep="first")
        if kind == "train":
            first = first.filter(pl.col("_loss"))
        return first.select(
            "line",
            step_int(pl.col("step")).alias("step"),
            "prefix_rank",
            pl.lit(kind).alias("record_kind"),
            pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
        )

    records = pl.concat([heads(train, "train"), heads(evals, "eval")]).sort("line")
    values = []
    for frame, kind, prefix in ((train, "train", ""), (evals, "eval", "eval_")):
        owner = records.filter(pl.col("record_kind") == kind).select(pl.col("line").alias("_rec"), "line", "step")
        v = parse_numbers(
            frame.select("line", step_int(pl.col("step")).alias("step"), "_name", "value"), raw="value", out="v"
        )
        # each line belongs to the last record of its step at or above it (a notebook re-run repeats the steps)
        v = (
            v.sort("line")
            .join_asof(owner, on="line", by="step", strategy="backward", check_sortedness=False)
            .drop_nulls("_rec")
        )
        values.append(
            v.select(
                pl.col("_rec").alias("line"),
                (pl.lit(prefix) + pl.col("_name")).alias("name"),
                pl.col("v").alias("value"),
            )
        )
    ran = lines.filter(text.str.contains(RAN)).with_columns(text.str.extract_groups(RAN).alias("_g")).unnest("_g")
    ran = ran.select(
        "line",
        step_int(pl.col("step")).alias("step"),
        (pl.col("secs").cast(pl.Float64) / pl.col("k").cast(pl.Float64) * 1000).alias("value"),
    ).sort("line")
    train_owner = records.filter(pl.col("record_kind") == "train").select(pl.col("line").alias("_rec"), "line", "step")
    # `Ran K train steps` comes before its step's metric lines: the next record of that step
    ran = ran.join_asof(train_owner, on="line", by="step", strategy="forward", check_sortedness=False).drop_nulls(
        "_rec"
    )
    values.append(ran.select(pl.col("_rec").alias("line"), pl.lit("step_time_ms").alias("name"), "value"))
    out = pl.concat(values).filter(pl.col("value").is_not_null())
    return text_result(src.name, lines, records, out, lines.head(0), mode="done")
