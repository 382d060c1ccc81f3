"""GluonTS's (MXNet) `Trainer` log: one evaluation line per epoch and metric, through the `logging` module.

    2020-05-19 18:29:27,221 : INFO : Epoch[0] Elapsed time 1353.823 seconds
    2020-05-19 18:29:27,223 : INFO : Epoch[0] Evaluation metric 'epoch_loss'=0.347671
    2020-05-19 18:29:27,245 : INFO : Epoch[1] Learning rate is 0.0001
    100%|######| 4000/4000 [34:43<00:00,  1.92it/s, epoch=2/100, avg_epoch_loss=0.289]
    ... Epoch[1] Evaluation metric 'validation_epoch_loss'=0.301

Printing code, `gluonts/mx/trainer/_base.py` (`gluonts/trainer/_base.py` before 0.6): `logger.info(f"Epoch[{epoch_no}]
Learning rate is {curr_lr}")` at an epoch's start, then its batches under a tqdm bar whose postfix is
`epoch=<no+1>/<epochs>, avg_epoch_loss=<mean>`, then `logger.info(f"Epoch[{epoch_no}] Elapsed time {..:.3f}
seconds")` and `logger.info(f"Epoch[{epoch_no}] Evaluation metric '{name}'={value}")` for `epoch_loss` (the
training loss, the mean over the epoch's batches) and, with a validation set, `validation_epoch_loss`.

The `epoch_loss` line is the training-step record; step = epochs done (`Epoch[0]` is step 1, as the bar's
`epoch=1/100` counts), `epoch` the 0-based number as printed. Its `Learning rate is` line -> `lr`, `Elapsed
time` -> `epoch_time_s`; `validation_epoch_loss` -> `eval_loss` (an eval record at that step). The bar's
postfix repeats the epoch mean rounded: an epoch whose evaluation line is missing (a log cut inside its
last epoch) takes its record from the bar (`epoch=5/100` is step 5); otherwise the bar's lines are read
(claimed) but make no record of their own.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._fields import captured_values
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
)

NAME = "gluonts"
METRIC = rf"\bEpoch\[(?P<epoch>\d+)\] Evaluation metric '(?P<name>[\w.]+)'\s*=\s*(?P<v>{NUM_TOKEN})"
LR = rf"\bEpoch\[(?P<epoch>\d+)\] Learning rate is (?P<v>{NUM_TOKEN})"
ELAPSED = rf"\bEpoch\[(?P<epoch>\d+)\] Elapsed time (?P<v>{NUM_TOKEN}) seconds"
# the tqdm bar's postfix of an epoch (`epoch=2/100, avg_epoch_loss=0.289`; `validation_avg_epoch_loss` on the
# validation pass's bar)
BAR = rf"\bepoch=(?P<epoch>\d+)/\d+,\s*(?P<name>(?:validation_)?avg_epoch_loss)=(?P<v>{NUM_TOKEN})"


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, METRIC) else (0.5 if sniff_share(sample, LR) else 0.0)


def _epoch_values(lines: pl.DataFrame, pattern: str, name: str) -> pl.DataFrame:
    """(epoch, name, value) of the lines matching `pattern` (groups `epoch`, `v`), the last per epoch."""
    g = lines.with_columns(pl.col("text").str.extract_groups(pattern).alias("_g")).unnest("_g")
    hit = g.filter(pl.col("epoch").is_not_null())
    vals = captured_values(hit.select("line", "v"), {"v": name})
    return vals.join(hit.select("line", pl.col("epoch").cast(pl.Int64)), on="line").unique(
        "epoch", keep="last", maintain_order=True
    )


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    g = lines.with_columns(text.str.extract_groups(METRIC).alias("_g")).unnest("_g")
    hit = g.filter(pl.col("epoch").is_not_null()).with_columns(pl.col("epoch").cast(pl.Int64))
    train = pl.col("name") == "epoch_loss"
    records = hit.select(
        "line",
        step_int(pl.col("epoch") + 1).alias("step"),
        "prefix_rank",
        pl.when(train).then(pl.lit("train")).otherwise(pl.lit("eval")).alias("record_kind"),
        extract_time(text).alias("time"),
    )
    # each metric line's value, under the contract's names (`epoch_loss` the loss, `validation_*` eval)
    raw = pl.col("_raw")
    own = (
        captured_values(hit.select("line", "v"), {"v": "_v"})
        .join(hit.select("line", pl.col("name").alias("_raw")), on="line")
        .with_columns(
            pl.when(raw == "epoch_loss")
            .then(pl.lit("loss"))
            .when(raw == "validation_epoch_loss")
            .then(pl.lit("eval_loss"))
            .otherwise(pl.lit("eval_") + raw.str.replace(r"^validation_", ""))
            .alias("name")
        )
    )
    # a training bar of an epoch without its evaluation line (the log ends after the bar) stands for it
    b = lines.with_columns(text.str.extract_groups(BAR).alias("_g")).unnest("_g")
    bars = (
        b.filter((pl.col("name") == "avg_epoch_loss") & pl.col("epoch").is_not_null())
        .with_columns(pl.col("epoch").cast(pl.Int64) - 1)
        .join(hit.filter(train).select("epoch"), on="epoch", how="anti")
        .unique("epoch", keep="last", maintain_order=True)
    )
    if bars.height:
        records = pl.concat(
            [
                records,
                bars.select(
                    "line",
                    step_int(pl.col("epoch") + 1).alias("step"),
                    "prefix_rank",
                    pl.lit("train").alias("record_kind"),
                    extract_time(text).alias("time"),
                ),
            ]
        ).sort("line")
        own = pl.concat(
            [
                own.select("line", "name", "value"),
                captured_values(bars.select("line", "v"), {"v": "loss"}),
            ]
        )
        hit = pl.concat([hit.filter(train).select("line", "epoch"), bars.select("line", "epoch")])
    else:
        hit = hit.filter(train).select("line", "epoch")
    # the epoch's LR, time and number go with its training record
    per_epoch = pl.concat([_epoch_values(lines, LR, "lr"), _epoch_values(lines, ELAPSED, "epoch_time_s")])
    train_lines = hit
    extra = per_epoch.join(train_lines.rename({"line": "_rec"}), on="epoch").select(
        pl.col("_rec").alias("line"), "name", "value"
    )
    epochs = train_lines.select("line", pl.lit("epoch").alias("name"), pl.col("epoch").cast(pl.Float64).alias("value"))
    values = pl.concat([own.select("line", "name", "value"), extra, epochs])
    out = text_result(src.name, lines, records, values, mode="done")
    out.body_lines = lines.filter(
        text.str.contains(BAR) | text.str.contains(LR) | text.str.contains(ELAPSED)
    ).get_column("line")
    return out
