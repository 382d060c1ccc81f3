"""YOLACT / YOLACT++ (dbolya/yolact `train.py`, and yolact_edge, which keeps its print) stdout:

    [  0]      10 || B: 1.347 | C: 1.971 | M: 2.307 | S: 0.451 | T: 6.076 || ETA: 15:08:58 || timer: 1.314
    [  3]   12340 || B: 0.912 | C: 1.104 | M: 1.390 | S: 0.101 | I: 0.201 | T: 3.708 || ETA: 2 days, 1:02:03 || timer: 0.9

Printing code: `('[%3d] %7d ||' + (' %s: %.3f |' * len(losses)) + ' T: %.3f || ETA: %s || timer: %.3f') %
tuple([epoch, iteration] + loss_labels + [total, eta_str, elapsed])`, every 10 iterations. The loss
letters are YOLACT's `loss_types`: B box regression, C class confidence, M mask, P prototypes, D coefficient
diversity, E class existence, S semantic segmentation, I mask IoU; `T` is their total, the loss that is
back-propagated. Each is a `MovingAverage(100)` of the last 100 iterations (a non-finite value is dropped from
the average with `Warning: Moving average ignored a value of inf`), so the printed curve is smoothed.

Step = the iteration as printed (global: it does not restart with the epoch); `epoch` kept as a metric;
`T` -> `loss`, a letter X -> `loss_<name>` (`B` -> `loss_box`), `timer` -> `iter_time_s`.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._fields import find_pairs, parse_numbers
from spikeforensics.ingest._grammar_helpers import empty_values
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "yolact"
NUM = r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
LINE = (
    r"^\[\s*(?P<epoch>\d+)\]\s+(?P<iteration>\d+)\s+\|\|(?P<body>(?:\s*[A-Z]:\s*\S+\s*\|)+)\|?\s*ETA:[^|]*"
    rf"\|\|\s*timer:\s*(?P<timer>{NUM})"
)
PAIR = rf"(?P<k>[A-Z]):\s*(?P<v>{NUM_TOKEN})"
NAMES = {
    "T": "loss",
    "B": "loss_box",
    "C": "loss_conf",
    "M": "loss_mask",
    "P": "loss_proto",
    "D": "loss_coef_diversity",
    "E": "loss_class_existence",
    "S": "loss_semantic",
    "I": "loss_mask_iou",
}


def sniff(sample: SniffSample) -> float:
    hits = sniff_share(sample, LINE)
    return 0.9 if hits >= min(2, max(1, len(sample.lines))) else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    hit = (
        lines.with_columns(pl.col("text").str.extract_groups(LINE).alias("_g"))
        .unnest("_g")
        .filter(pl.col("iteration").is_not_null())
    )
    if hit.height == 0:
        return text_result(src.name, lines, lines.head(0).select("line"), empty_values())
    records = hit.select(
        "line",
        step_int(pl.col("iteration").cast(pl.Float64, strict=False)).alias("step"),
        "prefix_rank",
        pl.lit("train").alias("record_kind"),
        pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
    )
    pairs = find_pairs(hit.select("line", pl.col("body").alias("text")), PAIR)
    named = pairs.with_columns(pl.col("k").replace_strict(NAMES, default=None).alias("name")).filter(
        pl.col("name").is_not_null()
    )
    values = parse_numbers(named, raw="v", out="value").filter(pl.col("value").is_not_null())
    extra = hit.select(
        "line",
        pl.lit("epoch").alias("name"),
        pl.col("epoch").cast(pl.Float64).alias("value"),
    ).vstack(hit.select("line", pl.lit("iter_time_s").alias("name"), pl.col("timer").cast(pl.Float64).alias("value")))
    return text_result(
        src.name, lines, records, pl.concat([values.select("line", "name", "value"), extra]), mode="done"
    )
