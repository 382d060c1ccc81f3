"""nnU-Net's training log (`nnunet_training_log_*.txt` and its console twin; `print_to_log_file` writes
each message after a `<datetime>: ` prefix). nnU-Net prints no per-iteration loss: one block per epoch,
whose train loss is the mean over the epoch's iterations.

v2 (`nnunetv2/training/nnUNetTrainer/nnUNetTrainer.py`, `on_epoch_start` / `on_epoch_end`):

    2024-04-26 09:39:10.910043: Epoch 0
    2024-04-26 09:39:10.914042: Current learning rate: 0.01
    2024-04-26 09:41:39.493872: train_loss 0.7088
    2024-04-26 09:41:39.498914: val_loss 0.4628
    2024-04-26 09:41:39.501914: Pseudo dice [0.0, 0.0002, ...]

v1 (`nnunet/training/network_training/network_trainer.py`, `run_training`: `print_to_log_file("\\nepoch: ",
epoch)` puts the epoch on a line of its own, without the prefix):

    epoch:  0
    2021-03-02 10:11:12.123456: train loss : -0.2345
    2021-03-02 10:13:40.654321: validation loss: -0.3456
    2021-03-02 10:13:40.700000: lr: 0.00991

A record is a train-loss line; its step is the epoch of the header above it (the epoch is the step: one
record per epoch); the header block's learning rate is its `lr`. The validation loss is an eval record of
the same epoch. nnU-Net's loss is Dice + CE with the Dice term negative, so values below 0 are normal.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import block_owners
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    captured_values,
    extract_time,
    parse_numbers,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "nnunet"
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?:\s*"
HEADER = rf"^(?:{STAMP})?(?:Epoch|epoch:)\s+(?P<epoch>\d+)\s*$"
TRAIN = rf"^(?:{STAMP})?train(?:_loss| loss :)\s+(?P<loss>{NUM_TOKEN})\s*$"
VALID = rf"^(?:{STAMP})?(?:val_loss|validation loss:)\s+(?P<loss>{NUM_TOKEN})\s*$"
LR = rf"^(?:{STAMP})?(?:Current learning rate:|lr:)\s+(?P<lr>{NUM_TOKEN})\s*$"


def sniff(sample: SniffSample) -> float:
    # `print_to_log_file` stamps every message (the console copy too): an unstamped `train_loss 0.5` under a bare
    # `Epoch 3` is a custom loop's epoch summary, not nnU-Net (the v1 `epoch:  0` header is the one unstamped line)
    stamped = sniff_share(sample, rf"^{STAMP}train(?:_loss| loss :)\s+{NUM_TOKEN}\s*$")
    return 0.9 if stamped and sniff_share(sample, HEADER) else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    owned = block_owners(lines, text.str.contains(HEADER), pl.lit(False))
    epochs = lines.filter(text.str.contains(HEADER)).select(
        pl.col("line").alias("_blk"), text.str.extract(HEADER, 1).alias("epoch")
    )
    blocks = owned.join(epochs, on="_blk", how="inner")
    train = blocks.filter(text.str.contains(TRAIN)).with_columns(text.str.extract(TRAIN, 1).alias("loss"))
    valid = blocks.filter(text.str.contains(VALID)).with_columns(text.str.extract(VALID, 1).alias("loss"))
    rec_cols = ["line", "prefix_rank", step_int(pl.col("epoch")).alias("step"), extract_time(text).alias("time")]
    records = pl.concat(
        [
            train.select(*rec_cols, pl.lit("train").alias("record_kind")),
            valid.select(*rec_cols, pl.lit("eval").alias("record_kind")),
        ]
    ).sort("line")
    # the block's learning rate (v2 prints it before the loss, v1 after) on its train record
    lrs = parse_numbers(
        blocks.filter(text.str.contains(LR)).select("_blk", text.str.extract(LR, 1).alias("v")), raw="v", out="lr"
    ).unique("_blk", keep="first")
    context = train.select("line", "_blk", "epoch", "loss").join(lrs.select("_blk", "lr"), on="_blk", how="left")
    values = pl.concat(
        [
            captured_values(context, {"loss": "loss", "epoch": "epoch", "lr": "lr"}),
            captured_values(valid.select("line", "loss"), {"loss": "eval_loss"}),
        ]
    ).filter(pl.col("value").is_not_null())
    # a loss line outside any epoch block (a log that starts mid-epoch) has no step to carry
    unparsed = lines.filter(text.str.contains(TRAIN)).join(records.select("line"), on="line", how="anti")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
