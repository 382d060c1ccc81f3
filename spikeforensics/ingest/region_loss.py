"""The YOLOv2 region-loss print of marvis/pytorch-yolo2 (`region_loss.py`) and the many detectors
built on it (marvis pytorch-yolo3, Meta-YOLO / FSRW few-shot detection, CME, ...):

    9856: nGT 39, recall 0, proposals 0, loss: x 1692.913574, y 1690.920166, w nan, h nan, conf nan, cls nan, total nan
    80: nGT 40, recall 13, proposals 39993, loss: x 23.94, y 22.21, w 2029862.6, h 16542059.0, conf nan, cls 111.28, class_contrast 0.000000, total nan

Printing code: `print('%d: nGT %d, recall %d, proposals %d, loss: x %f, y %f, w %f, h %f, conf %f, cls %f,
total %f' % (self.seen, nGT, nCorrect, nProposals, loss_x.data[0], ...))` once per forward pass. The
leading number is `self.seen`, the count of images seen so far (it grows by the batch size), the
only counter the line prints: it is the step. `total` is the loss; `x`, `y`, `w`, `h`, `conf`,
`cls` (and forks' extra terms such as `class_contrast`) keep their names, prefixed `loss_`; `nGT`
(ground-truth boxes), `recall` and `proposals` are kept as they are.

A counter of up to 4 digits followed by `: ` is also how `srun --label` prefixes a rank, so the
line preparation takes it for a rank: here it is the counter again, and the record has no rank.
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
    step_int,
    text_result,
)

NAME = "region_loss"
# after the line preparation: `nGT 39, recall 0, ...` (the counter taken as a rank) or `123456: nGT ...`
LINE = r"^\s*(?:(\d+):\s*)?nGT\s+\d+,\s*recall\s+\d+,\s*proposals\s+\d+,\s*loss:"
PAIR = rf"(?P<k>[A-Za-z_]\w*)\s+(?P<v>{NUM_TOKEN})(?:\s*,|\s*$)"
COUNTS = ("nGT", "recall", "proposals")


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, LINE + r".*\btotal\s+[-+]?[\d.nNiI]") else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains(LINE))
    counter = pl.coalesce(text.str.extract(LINE, 1).cast(pl.Int64, strict=False), pl.col("prefix_rank").cast(pl.Int64))
    rec = cand.with_columns(step_int(counter).alias("step"), pl.lit(None, dtype=pl.Int32).alias("prefix_rank"))
    body = rec.select("line", text.str.replace(r"^.*?\bloss:", "").alias("text"))
    counts = rec.select("line", text.str.replace(r"\bloss:.*$", "").str.replace(r"^\s*\d+:", "").alias("text"))
    pairs = pl.concat([find_pairs(body, PAIR), find_pairs(counts, PAIR)], how="vertical_relaxed").with_columns(
        pl.when(pl.col("k") == "total")
        .then(pl.lit("loss"))
        .when(pl.col("k").is_in(COUNTS))
        .then(pl.col("k"))
        .otherwise(pl.lit("loss_") + pl.col("k"))
        .alias("k")
    )
    values = named_values(pairs, eval_rows=pl.lit(False)).select("line", "name", "value")
    records = rec.select("line", "step", "prefix_rank", pl.lit(None, dtype=pl.Datetime("us")).alias("time"))
    records = records.with_columns(pl.lit("train").alias("record_kind"))
    return text_result(src.name, lines, records, values, mode="done")
