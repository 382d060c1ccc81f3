"""EDSR-PyTorch's trainer (sanghyun-son/EDSR-PyTorch `src/trainer.py`, `src/loss/__init__.py`), also the
trainer of the super-resolution repos built on its code (RCAN, SAN, HAN, DRLN, CSNLN, ...):

    [Epoch 26]	Learning rate: 1.00e-4
    [1600/16000]	[L1: 5.9633]	65.8+0.4s
    [11200/16000]	[L1: 2948.0002]	65.9+0.1s
    [3200/16000]	[L1: 0.0123][VGG54: 0.8521][GAN: 0.0046][DIS: 0.6931][Total: 0.8690]	30.1+0.2s

Printing code: `'[{}/{}]\\t{}\\t{:.1f}+{:.1f}s'.format((batch + 1) * batch_size, len(dataset), loss.display_loss(batch),
model time, data time)`, every `print_every` batches; `display_loss` writes `[type: running mean]` for each
loss term and `Total` when there are several (`DIS` is the discriminator's). The counter is the samples seen
inside the epoch: it restarts every epoch, so each epoch is a new attempt (the step as printed); `epoch` and
`lr` come from the `[Epoch N]` header before the records. The terms are stored as `loss_<type>`
(`loss_l1`, `loss_vgg54`); `loss` is `Total` where printed, else the one term.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._fields import captured_values, find_pairs, parse_numbers
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
)

NAME = "edsr"
HEADER = r"^\[Epoch (?P<epoch>\d+)\]\s+Learning rate: (?P<lr>\S+)"
RECORD = r"^\[(?P<i>\d+)/(?P<n>\d+)\]\s+(?P<terms>(?:\[[A-Za-z][\w-]*: [^\]]*\])+)"
TERM = rf"\[(?P<k>[A-Za-z][\w-]*): (?P<v>{NUM_TOKEN})\]"


def sniff(sample: SniffSample) -> float:
    records = sniff_share(sample, RECORD)
    if records >= 2 and sniff_share(sample, HEADER):
        return 0.9
    return 0.6 if records >= 3 else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    head = pl.col("text").str.contains(HEADER)
    owned = block_owners(lines, head, pl.lit(False))
    headers = lines.filter(head).with_columns(pl.col("text").str.extract_groups(HEADER).alias("_g")).unnest("_g")
    hit = (
        owned.with_columns(pl.col("text").str.extract_groups(RECORD).alias("_g"))
        .unnest("_g")
        .filter(pl.col("i").is_not_null())
    )
    records = hit.select(
        "line",
        step_int(pl.col("i")).alias("step"),
        "prefix_rank",
        pl.lit("train").alias("record_kind"),
        pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
    )
    pairs = find_pairs(hit.select("line", pl.col("terms").alias("text")), TERM)
    terms = parse_numbers(pairs, raw="v", out="value").filter(pl.col("value").is_not_null())
    named = terms.select(
        "line", ("loss_" + pl.col("k").str.to_lowercase().str.replace_all("-", "_")).alias("name"), "value"
    )
    per_line = terms.group_by("line").agg(
        pl.col("value").filter(pl.col("k") == "Total").first().alias("total"),
        pl.col("value").first().alias("one"),
        pl.len().alias("n"),
    )
    loss = per_line.select(
        "line", pl.lit("loss").alias("name"), pl.coalesce("total", pl.when(pl.col("n") == 1).then("one")).alias("value")
    ).filter(pl.col("value").is_not_null())
    # the epoch header's epoch and learning rate, on each record under it
    context = hit.select("line", "_blk").join(
        headers.select(pl.col("line").alias("_blk"), "epoch", "lr"), on="_blk", how="inner"
    )
    values = pl.concat([named, loss, captured_values(context, {"epoch": "epoch", "lr": "lr"})]).filter(
        pl.col("value").is_not_null()
    )
    unparsed = lines.join(hit.select("line"), on="line", how="anti").filter(
        pl.col("text").str.contains(r"^\[\d+/\d+\]\s+\[")
    )
    return text_result(src.name, lines, records, values, unparsed, mode="done")
