"""PaddleGAN's trainer (`ppgan/engine/trainer.py`, `Trainer.print_log`), one line per `log_interval` iterations:

    [05/22 13:54:02] ppgan.engine.trainer INFO: Epoch: 1/100, iter: 10/991 lr: 2.000e-04 perceptual: 175.116
        equivariance_value: 1.148 equivariance_jacobian: 0.633 batch_cost: 8.35565 sec reader_cost: 4.86971 sec
        ips: 0.11968 images/s eta: 9 days, 13:59:57
    [06/01 10:02:11] ppgan.engine.trainer INFO: Iter: 100/30000 lr: 2.000e-04 D_A_loss: 0.251 G_idt_A_loss: 0.402 ...

Printing code: `'Epoch: %d/%d, iter: %d/%d ' % (current_epoch, epochs, inner_iter, iters_per_epoch)` when the
config trains by epoch (else `'Iter: %d/%d ' % (current_iter, total_iters)`), `f'lr: {lr:.3e} '`, then
`'%s: %.3f ' % (k, v)` for each of the model's current losses, then the timings. Every PaddleGAN model (FOMM,
CycleGAN, Pix2Pix, StyleGAN2, ESRGAN, ...) prints through it, with its own loss names.

The step is the global iteration: `inner_iter` is `current_iter % iters_per_epoch`, so it is (E - 1) * M + I
(E * M when I is 0, the epoch's last iteration; E * M + I on a line where I wrapped but E has not moved yet). The losses are the pairs between the LR and `batch_cost`; each
name `X` is stored as `loss_x` (as the CycleGAN grammar does; a name that already says loss, `G_idt_A_loss`, is
kept: `g_idt_a_loss`); `lr` is the printed LR. The logger's `[MM/DD HH:MM:SS]` has no year: no time is stored.
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
    sniff_tiers,
    step_int,
    text_result,
)

NAME = "paddlegan"
COUNTER = r"(?:Epoch: (?P<epoch>\d+)/\d+, iter: (?P<inner>\d+)/(?P<per>\d+)|Iter: (?P<iter>\d+)/\d+)"
LINE = rf"ppgan\.engine\.trainer INFO: {COUNTER}\s+lr: (?P<lr>{NUM_TOKEN})\s+(?P<body>.*?)(?:batch_cost:.*)?$"
PAIR = rf"(?P<k>[A-Za-z_][\w.]*): (?P<v>{NUM_TOKEN})(?:\s|$)"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(sample, [(rf"ppgan\.engine\.trainer INFO: {COUNTER}\s+lr: ", 0.9)])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    hit = (
        lines.with_columns(pl.col("text").str.extract_groups(LINE).alias("_g"))
        .unnest("_g")
        .filter(pl.col("lr").is_not_null())
        .with_columns(pl.col(c).cast(pl.Int64, strict=False) for c in ("epoch", "inner", "per", "iter"))
    )
    if hit.height == 0:
        return text_result(src.name, lines, lines.head(0).select("line"), empty_values())
    # the epoch counter can lag by a line at an epoch's end (2021's trainer: `Epoch: 9/100, iter: 982/991`, then
    # `Epoch: 9/100, iter: 1/991`, then `Epoch: 10/100, iter: 11/991`): the inner counter wrapped within one
    # printed epoch, so the line belongs to the next (as `iter: 0`, the epoch's last iteration, does)
    wrapped = (pl.col("epoch") == pl.col("epoch").shift(1)) & (pl.col("inner") < pl.col("inner").shift(1))
    next_epoch = wrapped.fill_null(False) | (pl.col("inner") == 0)
    by_epoch = (pl.col("epoch") - 1 + next_epoch.cast(pl.Int64)) * pl.col("per") + pl.col("inner")
    records = hit.select(
        "line",
        step_int(pl.coalesce(pl.col("iter"), by_epoch).cast(pl.Float64)).alias("step"),
        "prefix_rank",
        pl.lit("train").alias("record_kind"),
        pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
    )
    pairs = find_pairs(hit.select("line", pl.col("body").alias("text")), PAIR)
    name = pl.col("k").str.to_lowercase()
    named = pairs.select(
        "line", pl.when(name.str.contains("loss")).then(name).otherwise("loss_" + name).alias("name"), "v"
    )
    lr = hit.select("line", pl.lit("lr").alias("name"), pl.col("lr").alias("v"))
    values = parse_numbers(pl.concat([named, lr]), raw="v", out="value").select("line", "name", "value")
    values = values.filter(pl.col("value").is_not_null())
    return text_result(src.name, lines, records, values, mode="done")
