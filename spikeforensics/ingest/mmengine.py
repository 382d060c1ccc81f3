"""mmengine / xtuner / mmdet / mmcv logs:
`10/30 22:18:02 - mmengine - INFO - Epoch(train) [1][240/735]  lr: 1.98e-04  eta: 2:44:49
time: 2.8874  data_time: 0.0042  memory: 10762  loss: 2.5128  grad_norm: nan`,
iteration-based `Iter(train) [ 100/1000]  ...` (mmcv 1.x: `Iter [50/40000]\tlr: ...`), old mmcv
`Epoch [7][5850/32025]\tlr: 7.146e-04, eta: ..., loss: 31.4201, grad_norm: 3637.0292`, and such a
record pasted without its prefix (`lr: 1.819e-04, eta: 2 days, 12:35:35, time: 1.072, ...`: step null).

Step: iteration-based loops print the global iteration; epoch-based loops print the
iteration inside the epoch, stored as (epoch - 1) * iters_per_epoch + i (equal to i in
epoch 1), with `epoch` kept as a metric. `time` (seconds per iteration) becomes
`step_time_ms`. `Epoch(val)`/`Iter(val)` lines are eval
records and take the step of the train record before them. The log's `MM/DD` time has
no year: `time` stays null.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    find_pairs,
    named_values,
    prepared_lines,
    sniff_share,
    text_result,
)

NAME = "mmengine"
EPOCH = r"\bEpoch(?:\((?P<mode>train|val|test)\))?\s*\[(?P<epoch>\d+)\]\s*\[\s*(?P<i>\d+)\s*/\s*(?P<n>\d+)\]"
# mmengine `Iter(train) [ 100/1000]`; mmcv 1.x iteration-based runners `Iter [50/40000]\tlr: ...`
ITER = r"\bIter(?:\((?P<mode>train|val|test)\))?\s*\[\s*(?P<i>\d+)\s*/\s*(?P<n>\d+)\]"
# an mmcv record pasted without its `... - INFO - Epoch [e][i/n]` prefix: the body alone,
# `lr: 1.819e-04, eta: 2 days, 12:35:35, time: 1.072, data_time: 0.021, memory: 6349, loss: nan, ...`
# (a record, step null: the counter was in the cut prefix)
BODY_ONLY = r"^\W{0,3}lr: [-+\d.eE]+,?\s+eta: "
PAIR = rf"(?P<k>[A-Za-z_][\w./]*):\s+(?P<v>{NUM_TOKEN})(?:,|\s|$)"


def sniff(sample: SniffSample) -> float:
    if sniff_share(sample, r"\b(?:Epoch|Iter)\((?:train|val)\)\s*\[[\d\s/\]\[]+\]"):
        return 0.95 if " - mmengine - " in sample.text else 0.85
    if sniff_share(sample, r"\b(?:Epoch \[\d+\]\[\d+/\d+\]|Iter \[\d+/\d+\])\s+lr: "):
        return 0.8
    if sniff_share(sample, BODY_ONLY + r".*\bloss\w*: "):
        return 0.6
    return 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains(r"Epoch|Iter\(|Iter \["))
    e = cand.with_columns(text.str.extract_groups(EPOCH).alias("_e"), text.str.extract_groups(ITER).alias("_i"))
    mode = pl.coalesce(pl.col("_e").struct.field("mode"), pl.col("_i").struct.field("mode"), pl.lit("train"))
    epoch = pl.col("_e").struct.field("epoch").cast(pl.Int64, strict=False)
    i = pl.coalesce(pl.col("_e").struct.field("i"), pl.col("_i").struct.field("i")).cast(pl.Int64, strict=False)
    n = pl.col("_e").struct.field("n").cast(pl.Int64, strict=False)
    step = pl.when(epoch.is_not_null()).then((epoch - 1) * n + i).otherwise(i)
    rec = (
        e.with_columns(
            step.alias("step"),
            epoch.alias("_epoch"),
            pl.when(mode == "train").then(pl.lit("train")).otherwise(pl.lit("eval")).alias("record_kind"),
        )
        .filter(pl.col("step").is_not_null())
        .drop("_e", "_i")
    )
    bodies = lines.filter(text.str.contains(BODY_ONLY) & ~text.str.contains(r"Epoch|Iter\(|Iter \[")).select(
        "line",
        "text",
        "prefix_rank",
        pl.lit(None, dtype=pl.Int64).alias("step"),
        pl.lit(None, dtype=pl.Int64).alias("_epoch"),
        pl.lit("train").alias("record_kind"),
    )
    rec = pl.concat([rec.select(bodies.columns), bodies]).sort("line")
    # eval lines take the step of the train record before them
    train_step = pl.when(pl.col("record_kind") == "train").then(pl.col("step"))
    rec = rec.with_columns(
        pl.when(pl.col("record_kind") == "train")
        .then(pl.col("step"))
        .otherwise(train_step.forward_fill())
        .alias("step")
    )
    body = text.str.replace(r"^.*?(?:\bEpoch|\bIter)[^\]]*\](?:\s*\[[^\]]*\])?", "")
    # `eta: 1 day, 12:59:34` is not a metric (its `1` would pair up)
    pairs = find_pairs(rec.select("line", body.alias("text"), "record_kind"), PAIR).filter(pl.col("k") != "eta")
    values = named_values(pairs, eval_rows=pl.col("record_kind") == "eval").select("line", "name", "value")
    ep = rec.filter(pl.col("_epoch").is_not_null() & (pl.col("record_kind") == "train")).select(
        "line", pl.lit("epoch").alias("name"), pl.col("_epoch").cast(pl.Float64).alias("value")
    )
    # `time` is seconds per iteration: the canonical step_time_ms
    values = values.with_columns(
        pl.when(pl.col("name") == "time").then(pl.col("value") * 1000).otherwise("value").alias("value"),
        pl.when(pl.col("name") == "time").then(pl.lit("step_time_ms")).otherwise("name").alias("name"),
    )
    values = pl.concat([values.filter(pl.col("name") != "epoch"), ep])
    records = rec.select("line", "step", "prefix_rank", "record_kind")
    unparsed = rec.join(values.select("line").unique(), on="line", how="anti")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
