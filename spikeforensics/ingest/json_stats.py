"""PySlowFast's `json_stats` lines (facebookresearch/SlowFast `slowfast/utils/logging.py`, and the
video models built on it: MViT, TimeSformer, MaskFeat, MeMViT, ...): a JSON object printed after a
log prefix, one per logging period.

    [06/21 17:58:49][INFO] logging.py:   99: json_stats: {"_type": "train_iter_", "dt": 19.53, "epoch": "1/2",
        "eta": "3:22:31", "gpu_mem": "19.35G", "grad_norm": 6.47215, "iter": "10/316", "loss": 3.55658,
        "lr": 0.00986, "top1_err": 81.25, "top5_err": 59.375}
    [06/21 23:22:48][INFO] logging.py:   99: json_stats: {"RAM": "13.90/187.58G", "_type": "train_epoch", ...}
    [06/22 03:20:02][INFO] logging.py:   99: json_stats: {"_type": "val_epoch", "epoch": "2/20", "top1_err": 60.1, ...}

Printing code: `logging.log_json_stats(stats)` (`json.dumps(stats, sort_keys=True)`, floats as
`"{:.5f}"`, so a NaN prints bare `NaN`) from `TrainMeter.log_iter_stats` (`_type` `train_iter`, or
`train_iter_` in newer versions) every `LOG_PERIOD` iterations, `log_epoch_stats` (`train_epoch`,
`val_epoch`) and `ValMeter.log_iter_stats` (`val_iter`). Only `train_iter` lines are training
records; `val_epoch` lines are eval records at the step of the train record before them; the
per-epoch training summary (`train_epoch`) and per-iteration validation lines repeat what those
say and are not records. Step = (epoch - 1) * n + iter from the `"epoch": "e/E"` and `"iter": "i/n"`
fractions (both 1-based, as printed); a relaunch that starts again from epoch 1 is a new attempt.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    find_pairs,
    named_values,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "json_stats"
LINE = r"\bjson_stats:\s*\{"
TYPE = r'"_type":\s*"(\w+)"'
PAIR = rf'"(?P<k>[A-Za-z_]\w*)":\s*(?P<v>{NUM_TOKEN})(?:\s*[,}}])'
FRACTION = r'"{key}":\s*"(\d+)/(\d+)"'


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, LINE + r'.*"_type":\s*"train_iter') else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    kind = text.str.extract(TYPE, 1)
    cand = lines.filter(text.str.contains(LINE)).with_columns(kind.alias("_type"))
    train = pl.col("_type").str.starts_with("train_iter")
    cand = cand.filter(train | (pl.col("_type") == "val_epoch"))
    epoch = text.str.extract(FRACTION.format(key="epoch"), 1).cast(pl.Int64, strict=False)
    i = text.str.extract(FRACTION.format(key="iter"), 1).cast(pl.Int64, strict=False)
    n = text.str.extract(FRACTION.format(key="iter"), 2).cast(pl.Int64, strict=False)
    rec = (
        cand.with_columns(
            pl.when(train).then(step_int((epoch - 1) * n + i)).alias("step"),
            pl.when(train).then(pl.lit("train")).otherwise(pl.lit("eval")).alias("record_kind"),
            extract_time(text).alias("time"),
        )
        .sort("line")
        .with_columns(pl.col("step").forward_fill())  # val_epoch: the step of the train record before it
        .filter(pl.col("step").is_not_null() | train)
    )
    body = rec.select("line", "record_kind", text.str.extract(r"json_stats:\s*(\{.*)", 1).alias("text"))
    pairs = find_pairs(body, PAIR)
    values = named_values(pairs, eval_rows=pl.col("record_kind") == "eval").select("line", "name", "value")
    records = rec.select("line", "step", "prefix_rank", "record_kind", "time")
    return text_result(src.name, lines, records, values, mode="done")
