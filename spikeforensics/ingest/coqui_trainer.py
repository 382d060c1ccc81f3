"""Coqui's `trainer` package (behind Coqui TTS: VITS, Tacotron, GlowTTS, YourTTS, XTTS fine-tunes):
one block per logged step, a header and one `name: value  (running average)` line per metric.

     > EPOCH: 0/1000
       --> STEP: 24/36 -- GLOBAL_STEP: 1000025
         | > loss_disc: 3.01874  (3.46002)
         | > amp_scaler: 512.00000  (512.00000)
         | > loss_0: 3.01874  (3.46002)
         | > grad_norm_0: 0.53343  (2.77572)
         | > loss_gen: 2.46  (2.52)
         | > loss_1: 26.93  (27.10)
         | > grad_norm_1: 54.03583  (62.89337)
         | > current_lr_0: 0.00019
         | > step_time: 0.75520  (0.56876)
      --> EVAL PERFORMANCE
         | > avg_loader_time: 10.05089 (+0.00000)
         | > avg_loss_disc: 2.93308 (+0.00000)

Printing code: `trainer/logging/console_logger.py` `print_train_step` (`--> STEP: {step}/{batch_steps}
-- GLOBAL_STEP: {global_step}`, then `| > {key}: {value:.5f}  ({avg:.5f})` per loss and
`log_dict` item) and `print_eval_step` / `print_epoch_end` (`--> EVAL PERFORMANCE`, `| > avg_{key}:
{value} ({diff})`), headers in ANSI bold. `GLOBAL_STEP` is the step; the block's fields are the record
(the value, not the running average in brackets). A model with one optimizer prints `loss` and
`grad_norm`; a GAN (VITS, HiFiGAN) one `loss_<i>` / `grad_norm_<i>` / `current_lr_<i>` per optimizer
(kept as named: `loss_0`, the discriminator's, and `loss_1`, the generator's); `amp_scaler` is the
fp16 loss scale (`loss_scale`). `EVAL PERFORMANCE` blocks are eval records (`avg_` dropped, `eval_`
prefixed) at the step of the train record before them.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import block_owners
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

NAME = "coqui_trainer"
HEADER = r"-->\s*STEP:\s*\d+/\d+\s*--\s*GLOBAL_STEP:\s*(\d+)"
EVAL_HEADER = r"-->\s*EVAL PERFORMANCE"
FIELD = rf"^\s*\|\s*>\s*(?P<k>[A-Za-z_][\w/.-]*):\s*(?P<v>{NUM_TOKEN})"
RENAME = {"amp_scaler": "loss_scale"}


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, HEADER) else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src).sort("line")
    text = pl.col("text")
    is_head = text.str.contains(HEADER) | text.str.contains(EVAL_HEADER)
    is_field = text.str.contains(FIELD)
    # each field line belongs to the header above it when only field lines stand between them
    marked = block_owners(lines, is_head, ~is_field)
    heads = marked.filter(is_head).with_columns(
        step_int(text.str.extract(HEADER, 1)).alias("step"),
        pl.when(text.str.contains(EVAL_HEADER)).then(pl.lit("eval")).otherwise(pl.lit("train")).alias("record_kind"),
    )
    heads = heads.with_columns(pl.col("step").forward_fill()).filter(pl.col("step").is_not_null())
    fields = marked.filter(is_field & (pl.col("_blk") >= 0)).join(
        heads.select(pl.col("line").alias("_blk"), "record_kind"), on="_blk"
    )
    pairs = find_pairs(fields.select(pl.col("_blk").alias("line"), "record_kind", "text"), FIELD).with_columns(
        pl.when(pl.col("record_kind") == "eval")
        .then(pl.col("k").str.replace(r"^avg_", ""))
        .otherwise(pl.col("k").replace(RENAME))
        .alias("k")
    )
    values = named_values(pairs, eval_rows=pl.col("record_kind") == "eval").select("line", "name", "value")
    records = heads.select(
        "line", "step", "prefix_rank", "record_kind", pl.lit(None, dtype=pl.Datetime("us")).alias("time")
    )
    result = text_result(src.name, lines, records, values, mode="done")
    result.body_lines = fields.get_column("line")
    return result
