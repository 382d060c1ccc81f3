"""detectron2 / d2go / AdelaiDet `CommonMetricPrinter` lines (`d2.utils.events`):

    [04/05 01:30:24 d2.utils.events]:  eta: 0:03:35  iter: 19  total_loss: 1.36  loss_cls: 0.6522  loss_box_reg: 0.5817  ...  time: 0.3636  data_time: 0.1102  lr: 3.8077e-06  max_mem: 433M

Step = `iter` as printed (detectron2's 0-based `storage.iter`, the iteration just done;
mode "done"). `total_loss` -> `loss` (the other `loss_*` terms keep their names; every value
is the median over the logging window, as printed), `time` (seconds per iteration) ->
`step_time_ms`, `max_mem: 433M` -> `max_mem_mb` 433, `eta` is not a metric. The log's
`MM/DD` time has no year: `time` stays null. `FloatingPointError: Loss became infinite or
NaN at iteration=N!` is a `nan` event (text_events); the `loss_dict = {'loss_cls': tensor(nan,
...), 'loss_box_reg': tensor(0.2576, ...)}` line detectron2 prints with it (`_detect_anomaly`)
is the record of iteration N: each term under its name, and `loss` = their sum (what the
trainer back-propagates, so NaN when a term is).
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import scale_metric
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    find_pairs,
    named_values,
    prepared_lines,
    sniff_tiers,
    text_result,
)

NAME = "detectron2"
HEAD = r"\biter: (\d+)\s+total_loss: "
PAIR = rf"(?P<k>[A-Za-z_][\w./-]*):\s+(?P<v>{NUM_TOKEN})(?:\s|$)"
RENAME = {"total_loss": "loss"}
ANOMALY = r"Loss became infinite or NaN at iteration=(\d+)"
LOSS_DICT = r"^\s*loss_dict\s*=\s*\{"
DICT_PAIR = rf"'(?P<k>[A-Za-z_][\w./-]*)':\s*tensor\((?P<v>{NUM_TOKEN})"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(sample, [(HEAD, 0.9), (ANOMALY, 0.6)])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains("total_loss:", literal=True)).with_columns(
        text.str.extract(HEAD, 1).cast(pl.Int64, strict=False).alias("step")
    )
    rec = cand.filter(pl.col("step").is_not_null())
    body = text.str.replace(r"^.*?\biter: \d+", "")
    pairs = find_pairs(rec.select("line", body.alias("text")), PAIR).filter(~pl.col("k").is_in(["eta", "iter"]))
    pairs = pairs.with_columns(pl.col("k").replace(RENAME))
    values = named_values(pairs).select("line", "name", "value")
    values = scale_metric(values, "time", "step_time_ms", 1000.0)
    values = scale_metric(values, "max_mem", "max_mem_mb", 1e-6)  # `433M` was read as 433e6
    records = rec.select("line", "step", "prefix_rank", pl.lit("train").alias("record_kind"))
    anomaly_records, anomaly_values = _anomaly_dicts(lines)
    records = pl.concat([records, anomaly_records], how="vertical_relaxed").sort("line")
    values = pl.concat([values, anomaly_values], how="vertical_relaxed")
    unparsed = cand.filter(pl.col("step").is_null() & text.str.contains(r"\biter: \d+"))
    return text_result(src.name, lines, records, values, unparsed, mode="done")


def _anomaly_dicts(lines: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The `loss_dict = {...}` line printed with `Loss became infinite or NaN at iteration=N!`
    (within the next few lines): a record of step N, its terms and their sum as `loss`."""
    text = pl.col("text")
    marked = lines.with_columns(
        text.str.extract(ANOMALY, 1).cast(pl.Int64, strict=False).alias("_it"), pl.col("line").alias("_at")
    )
    marked = marked.with_columns(
        pl.when(pl.col("_it").is_not_null()).then(pl.col("_at")).forward_fill().alias("_at"),
        pl.col("_it").forward_fill(),
    )
    dicts = marked.filter(
        text.str.contains(LOSS_DICT) & pl.col("_it").is_not_null() & (pl.col("line") - pl.col("_at") <= 3)
    )
    pairs = find_pairs(dicts.select("line", "text"), DICT_PAIR)
    values = named_values(pairs).select("line", "name", "value")
    total = values.group_by("line").agg(pl.col("value").sum().alias("value")).with_columns(pl.lit("loss").alias("name"))
    values = pl.concat([values, total.select("line", "name", "value")])
    records = dicts.filter(pl.col("line").is_in(values.get_column("line").implode())).select(
        "line", pl.col("_it").alias("step"), "prefix_rank", pl.lit("train").alias("record_kind")
    )
    return records, values
