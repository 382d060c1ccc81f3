"""tensorflow/nmt's training prints (the TensorFlow Neural Machine Translation tutorial, `nmt/train.py`, and the
seq2seq codes built on it):

      global step 100 lr 1 step-time 0.53s wps 7.34K ppl 2424133542.95 bleu 0.00
      global step 200 lr 1 step-time 0.32s wps 12.28K ppl 23.17 gN 5.21 dev ppl 30.12, dev bleu 4.1, ...
      eval dev: perplexity 25.07, time 3s, Mon Jan 15 10:01:13 2018.          # eval
      eval test: perplexity 26.43, time 3s, Mon Jan 15 10:01:16 2018.         # eval

Printing code: `print_step_info` (`"%sstep %d lr %g step-time %.2fs wps %.2fK ppl %.2f gN %.2f %s, %s"`, the
prefix `"  global "`; 2017 versions print no `gN`) every `steps_per_stats` steps; `_internal_eval`'s
`"  eval %s: perplexity %.2f"`. The step is the printed global step.

TF NMT prints the training perplexity, not the loss: `train_ppl = safe_exp(loss / predict_count)`, the
exponential of the per-token cross-entropy. The record's `loss` is therefore its natural logarithm (a
perplexity that overflows prints `inf`: so does the loss), with `ppl` kept as printed; `eval dev`/`eval test`
perplexities give `eval_loss` / `eval_test_loss` the same way. `step-time` (s) -> `step_time_ms`, `wps` (K
words/s) -> `tokens_per_s`, `gN` -> `grad_norm`; `bleu` (the last dev BLEU, repeated on every line) is kept.
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
    sniff_tiers,
    step_int,
    text_result,
    to_float,
)

NAME = "tf_nmt"
TRAIN = (
    rf"^\s*global step (?P<step>\d+) lr (?P<lr>{NUM_TOKEN}) step-time (?P<st>{NUM_TOKEN})s "
    rf"wps (?P<wps>{NUM_TOKEN})K ppl (?P<ppl>{NUM_TOKEN})(?: gN (?P<gn>{NUM_TOKEN}))?(?: bleu (?P<bleu>{NUM_TOKEN}))?"
)
EVAL = rf"^\s*eval (?P<split>dev|test): perplexity (?P<eppl>{NUM_TOKEN})"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(sample, [(TRAIN, 0.9), (rf"{EVAL}, time \d", 0.5)])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains("global step", literal=True) | text.str.contains("perplexity", literal=True))
    train = (
        cand.with_columns(text.str.extract_groups(TRAIN).alias("_t")).unnest("_t").filter(pl.col("step").is_not_null())
    )
    evals = (
        cand.with_columns(text.str.extract_groups(EVAL).alias("_e")).unnest("_e").filter(pl.col("split").is_not_null())
    )
    records = (
        pl.concat(
            [
                train.select(
                    "line",
                    step_int(pl.col("step")).alias("step"),
                    "prefix_rank",
                    pl.lit("train").alias("record_kind"),
                    "text",
                ),
                evals.select(
                    "line",
                    pl.lit(None, dtype=pl.Int64).alias("step"),
                    "prefix_rank",
                    pl.lit("eval").alias("record_kind"),
                    "text",
                ),
            ]
        )
        .sort("line")
        .with_columns(
            pl.col("step").forward_fill(), extract_time(text).alias("time")
        )  # an eval takes the step before it
        .drop("text")
    )
    ppl = to_float(pl.col("ppl"))
    fields = {
        "loss": ppl.log(),
        "ppl": ppl,
        "lr": to_float(pl.col("lr")),
        "step_time_ms": to_float(pl.col("st")) * 1000.0,
        "tokens_per_s": to_float(pl.col("wps")) * 1000.0,
        "grad_norm": to_float(pl.col("gn")),
        "bleu": to_float(pl.col("bleu")),
    }
    values = [train.select("line", pl.lit(k).alias("name"), v.alias("value")) for k, v in fields.items()]
    eval_name = pl.when(pl.col("split") == "dev").then(pl.lit("eval_loss")).otherwise(pl.lit("eval_test_loss"))
    values.append(evals.select("line", eval_name.alias("name"), to_float(pl.col("eppl")).log().alias("value")))
    values = pl.concat(values).filter(pl.col("value").is_not_null())
    return text_result(src.name, lines, records.filter(pl.col("step").is_not_null()), values, mode="done")
