"""The per-epoch `train = ... | dev = ...` summary of funcwj's speech-separation trainers (uPIT,
conv-tasnet, setk, voice-filter and the recipes copied from them): one line per epoch.

    Loss(time/mini-batch) - Epoch  1: train = nan(1581.14s/2500) | dev = nan(152.82s/625)
    Loss(time/N, lr=1.000e-03) - Epoch  3: train = -11.2034(10.52m/2500) | dev = -12.0451(1.21m/625)

Printing code: `trainer.py` `self.logger.info("Loss(time/N, lr={:.3e}) - Epoch {:2d}: train = {:.4f}({:.2f}m/{:d})
| dev = {:.4f}({:.2f}m/{:d})")` after each epoch (the older uPIT version prints `Loss(time/mini-batch)` and
seconds). The training loss is the epoch's mean; the number after the slash is the epoch's mini-batch count,
so the record's step is epoch x that count (the updates done by the end of the epoch). The `dev` loss is
kept as `eval_loss` on the same record (one line, one record); `lr` is kept when printed. Negative losses (SI-SNR objectives) are read as printed.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
    to_float,
)

NAME = "train_dev_epochs"
LINE = (
    rf"Loss\(time/[^)]*?(?:lr\s*=\s*(?P<lr>{NUM_TOKEN}))?\)\s*-\s*Epoch\s+(?P<epoch>\d+):\s*"
    rf"train\s*=\s*(?P<train>{NUM_TOKEN})\([^/)]*/(?P<n>\d+)\)"
    rf"(?:\s*\|\s*dev\s*=\s*(?P<dev>{NUM_TOKEN})\()?"
)


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, LINE) else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    rec = (
        lines.filter(text.str.contains(LINE))
        .with_columns(text.str.extract_groups(LINE).alias("_g"))
        .unnest("_g")
        .with_columns(
            step_int(pl.col("epoch").cast(pl.Int64, strict=False) * pl.col("n").cast(pl.Int64, strict=False)).alias(
                "step"
            ),
            extract_time(text).alias("time"),
        )
    )
    train = rec.select("line", "step", "prefix_rank", "time", pl.lit("train").alias("record_kind"))
    values = pl.concat(
        [
            rec.select("line", pl.lit("loss").alias("name"), to_float(pl.col("train")).alias("value")),
            rec.select("line", pl.lit("epoch").alias("name"), to_float(pl.col("epoch")).alias("value")),
            rec.filter(pl.col("lr").is_not_null()).select(
                "line", pl.lit("lr").alias("name"), to_float(pl.col("lr")).alias("value")
            ),
            rec.filter(pl.col("dev").is_not_null()).select(
                "line", pl.lit("eval_loss").alias("name"), to_float(pl.col("dev")).alias("value")
            ),
        ],
        how="vertical_relaxed",
    )
    return text_result(src.name, lines, train, values, mode="done")
