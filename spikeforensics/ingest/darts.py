"""DARTS's training log (quark0/darts `train_search.py` / `train.py`) and the many architecture-search codes
copied from it (PC-DARTS, P-DARTS, DARTS-, SDARTS, ...), through `logging` with `'%(asctime)s %(message)s'`:

    05/31 02:32:56 PM epoch 0 lr 2.498816e-02
    05/31 02:32:57 PM train 000 2.345704e+00 6.250000 54.687500
    05/31 02:33:19 PM train 050 2.102168e+00 20.373775 72.855392
    05/31 02:36:12 PM valid 000 1.711712e+00 28.125000 85.937500
    05/31 02:36:40 PM train_acc 30.524395

Printing code: `logging.info('epoch %d lr %e', epoch, lr)` at an epoch's start, `logging.info('train %03d %e %f %f',
step, objs.avg, top1.avg, top5.avg)` every `report_freq` batches, `logging.info('valid %03d %e %f %f', ...)` during
validation, then `train_acc` / `valid_acc`. The loss is `objs.avg`, the mean since the epoch began (an
AverageMeter reset each epoch: see detect/epoch_restarts.py), top1/top5 running accuracies.

The `train` line is the training-step record; its batch counter restarts every epoch and no epoch length is
printed, so step = epoch x S + batch with S the epoch's span as the file shows it (the largest batch printed
plus the usual gap between two prints: 350 + 50 = 400 for `report_freq` 50); `epoch` and `lr` come from the
`epoch K lr X` line above; `top1` -> `acc1`, `top5` -> `acc5`. `valid` lines are eval records (`eval_loss`,
`eval_acc1`, `eval_acc5`) at the step of the train record before them; `train_acc` / `valid_acc` and the
genotype lines are read as no record.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "darts"
E = r"[-+]?(?:\d+\.\d+e[-+]\d+|nan|inf)"
F = r"[-+]?(?:\d+\.\d+|nan|inf)"
RECORD = rf"\b(?P<kind>train|valid) (?P<i>\d{{3,}}) (?P<loss>{E}) (?P<top1>{F}) (?P<top5>{F})\s*$"
EPOCH_LR = rf"\bepoch (?P<epoch>\d+) lr (?P<lr>{E})\s*$"
ACC = r"\b(?:train_acc|valid_acc) [-+]?\d"


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, RECORD) >= 2 else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    g = lines.with_columns(
        text.str.extract_groups(RECORD).alias("_r"), text.str.extract_groups(EPOCH_LR).alias("_e")
    ).unnest("_r", "_e")
    g = g.filter(pl.col("kind").is_not_null() | pl.col("epoch").is_not_null()).with_columns(
        pl.col("epoch").cast(pl.Int64).forward_fill().fill_null(0).alias("_epoch"),
        pl.col("lr").forward_fill().alias("_lr"),
        pl.col("i").cast(pl.Int64).alias("_i"),
    )
    rec = g.filter(pl.col("kind").is_not_null())
    train = rec.filter(pl.col("kind") == "train")
    # the epoch's span: the largest batch printed plus the usual gap between two prints
    batches = train.get_column("_i")
    gaps = train.with_columns(pl.col("_i").diff().over("_epoch").alias("_d")).get_column("_d").drop_nulls()
    gap = int(gaps.filter(gaps > 0).mode().min()) if gaps.filter(gaps > 0).len() else 1
    span = (int(batches.max()) + gap) if batches.len() else 1
    is_train = pl.col("kind") == "train"
    rec = rec.with_columns(
        pl.when(is_train).then(pl.col("_epoch") * span + pl.col("_i")).alias("_step"),
    ).with_columns(pl.col("_step").forward_fill())  # a valid line: the step of the train record before it
    records = rec.select(
        "line",
        step_int(pl.col("_step")).alias("step"),
        "prefix_rank",
        pl.when(is_train).then(pl.lit("train")).otherwise(pl.lit("eval")).alias("record_kind"),
        pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
    )
    prefix = pl.when(is_train).then(pl.lit("")).otherwise(pl.lit("eval_"))
    num = lambda c: pl.col(c).str.to_lowercase().cast(pl.Float64, strict=False)  # noqa: E731
    values = pl.concat(
        [
            rec.select(
                "line",
                pl.when(is_train).then(pl.lit("loss")).otherwise(pl.lit("eval_loss")).alias("name"),
                num("loss").alias("value"),
            ),
            rec.select("line", (prefix + pl.lit("acc1")).alias("name"), num("top1").alias("value")),
            rec.select("line", (prefix + pl.lit("acc5")).alias("name"), num("top5").alias("value")),
            rec.filter(is_train).select(
                "line", pl.lit("epoch").alias("name"), pl.col("_epoch").cast(pl.Float64).alias("value")
            ),
            rec.filter(is_train & pl.col("_lr").is_not_null()).select(
                "line", pl.lit("lr").alias("name"), num("_lr").alias("value")
            ),
        ]
    )
    out = text_result(src.name, lines, records, values, mode="done")
    out.body_lines = lines.filter(text.str.contains(EPOCH_LR) | text.str.contains(ACC)).get_column("line")
    return out
