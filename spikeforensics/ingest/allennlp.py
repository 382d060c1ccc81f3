"""AllenNLP's per-epoch metrics table (`allennlp.training.tensorboard_writer` in 0.x, `callbacks.console_logger` in
1.x/2.x), printed through `logging` after each epoch's validation:

    2019-04-15 18:00:47,877 - INFO - allennlp.training.trainer - Epoch 0/999
    ...
    2019-04-15 18:01:28,614 - INFO - allennlp.training.tensorboard_writer -                   Training |  Validation
    2019-04-15 18:01:28,614 - INFO - allennlp.training.tensorboard_writer - cpu_memory_MB |   261.680  |       N/A
    2019-04-15 18:01:28,614 - INFO - allennlp.training.tensorboard_writer - loss          |     1.614  |     1.459
    2019-04-15 18:01:28,615 - INFO - allennlp.training.tensorboard_writer - accuracy      |     0.505  |     0.555

The `Training | Validation` header is the record (an epoch's training means: one record per epoch), its step the
epoch of the last `Epoch N/M` line before it (null without one); each row under it gives the training column as
`name` and the validation column as `val_name` (`N/A`: no value). The table ends at the first other line.
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

NAME = "allennlp"
HEADER = r"\bTraining\s+\|\s+Validation\s*$"
CELL = rf"(?:{NUM_TOKEN}|N/A)"
ROW = rf"(?:^|\s-\s)\s*([A-Za-z_][\w/.-]*)\s*\|\s*({CELL})\s*\|\s*({CELL})\s*$"
EPOCH = r"\bEpoch (\d+)/\d+\s*$"


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, HEADER) and sniff_share(sample, ROW) else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src).sort("line")
    text = pl.col("text")
    is_head = text.str.contains(HEADER)
    marked = block_owners(lines, is_head, ~text.str.contains(ROW))
    epochs = lines.filter(text.str.contains(EPOCH)).select("line", step_int(text.str.extract(EPOCH, 1)).alias("step"))
    heads = (
        marked.filter(is_head)
        .drop("step", strict=False)
        .join_asof(epochs.sort("line"), on="line", strategy="backward")
        .with_columns(pl.lit("train").alias("record_kind"))
    )
    body = marked.filter(~is_head & (pl.col("_blk") >= 0))
    cells = body.select(
        pl.col("_blk").alias("line"),
        text.str.extract(ROW, 1).alias("name"),
        text.str.extract(ROW, 2).alias("train"),
        text.str.extract(ROW, 3).alias("val"),
    )
    values = pl.concat(
        [
            cells.select("line", "name", to_float(pl.col("train")).alias("value")),
            cells.select("line", ("val_" + pl.col("name")).alias("name"), to_float(pl.col("val")).alias("value")),
        ]
    ).filter(pl.col("value").is_not_null())
    records = heads.select(
        "line", "step", "prefix_rank", "record_kind", pl.lit(None, dtype=pl.Datetime("us")).alias("time")
    )
    result = text_result(src.name, lines, records, values, mode="done")
    result.body_lines = body.get_column("line")
    return result
