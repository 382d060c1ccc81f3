""" "N: value" loss prints: NVIDIA WaveGlow / nv-wavenet `train.py` (and the many TTS and
vocoder repos copied from it), one line per iteration:

    print("{}:\\t{:.9f}".format(iteration, reduced_loss))                        # NVIDIA/waveglow train.py
    print("{}:\\t{:.9f},\\t{:.9f}".format(iteration, reduced_loss, reduced_valid_loss))   # forks with a valid loss

    123873:\t-5.480178833
    123892:\t40490.179687500
    123893: -3.482588530            # an issue paste, the tab shown as a space
    2000:\t-4.123456789,\t-4.001234567

A record is a whole line of that shape: step = the iteration as printed (the step just done),
`loss`; a second number is `eval_loss` on the same record. WaveGlow's loss is a negative
log-likelihood (negative when training well). Its other prints (`Epoch: 3`, `Saving model and
optimizer state at iteration N to PATH`, `Loaded checkpoint 'F' (iteration N)`) are not records.

The bare "step value" pair, one a line, is the same print without the colon: YANMTT
(`prajdabre/yanmtt:pretrain_nmt.py` and `train_nmt.py`, every 10 batches on the master rank;
`lv` is the loss as a numpy scalar) and any loop that does `print(step, loss)`:

    print(ctr, lv)                                                              # prajdabre/yanmtt pretrain_nmt.py

    76930 2.6496577
    76980 nan
    120 1.2345e-05
    7\t-0.5                # a tab-separated print

A record is a whole line of exactly these two tokens, the second a non-integer number
(`3.0`, `2.5e-05`, `nan`, `inf`: a numpy float always prints one; an `int int` pair is a
data table, not a loss print): step = the first, `loss` = the second. YANMTT's `Saving the
model` / `Loading from checkpoint` lines carry no step.

The shapes are so plain that the sniffer claims a file only when nearly all its lines that
hold a digit are of one of them, and only just above the driver's threshold: every framework
parser, and the generic loop parser, wins over it. (The bare pairs have no word a record
prints, so they are never offered to this grammar as a mixed file's rest lines either.)

NVIDIA Tacotron 2 (`NVIDIA/tacotron2:train.py`, and the TTS repos built on it), the sibling of
WaveGlow, prints its iteration and validation lines without a counter word either:

    print("Train loss {} {:.6f} Grad Norm {:.6f} {:.2f}s/it".format(iteration, reduced_loss, grad_norm, duration))
    print("Validation loss {}: {:9f}  ".format(iteration, val_loss))

    Train loss 1000 0.512345 Grad Norm 0.876543 1.23s/it
    Train loss 1001 0.509876 Grad Norm 0.812345 D Grad Norm 0.100000 1.20s/it      # a GAN fork
    Validation loss 1000:  0.534567

-> a training record (step, `loss`, `grad_norm`, `step_time_ms`; a fork's `D Grad Norm` as `d_grad_norm`)
and an eval record (`eval_loss`). These lines are distinctive: claimed with a framework's confidence.
Checkpoint lines of both (`Saving model and optimizer state at iteration N to PATH`, `Loaded
checkpoint 'F' from iteration N` / `(iteration N)`) are events of the shared catalogue.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    captured_values,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "step_colon"
LINE = rf"^\s*(?P<step>\d+):\s+(?P<loss>{NUM_TOKEN})(?:,\s+(?P<val>{NUM_TOKEN}))?\s*$"
LOOSE = r"^\s*\d+:\s+[-+]?[\d.nNiI]"
# `5000: -4.1` (a tab shown as a space, up to 4 digits): the launcher-prefix stripper takes
# `5000: ` for an `srun --label` rank; the bare value left is read with that number as the step
BARE = rf"^\s*(?P<loss>{NUM_TOKEN})(?:,\s+(?P<val>{NUM_TOKEN}))?\s*$"
# `76930 2.6496577`: step, whitespace, one non-integer number (numpy float / Python float repr)
FLOAT = r"[-+]?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|nan|NaN|-?inf|-?Infinity)"
PAIR = rf"^\s*(?P<step>\d+)[ \t]+(?P<loss>{FLOAT})\s*$"
PAIR_LOOSE = r"^\s*\d+[ \t]+[-+]?(?:\d*\.|\d+[eE]|[nNiI])\S*\s*$"
TACO = (
    rf"^\s*Train [Ll]oss (?P<step>\d+) (?P<loss>{NUM_TOKEN}) Grad [Nn]orm (?P<gn>{NUM_TOKEN})"
    rf"(?: D Grad [Nn]orm (?P<dgn>{NUM_TOKEN}))? (?P<dur>{NUM_TOKEN})s/it"
)
TACO_VAL = rf"^\s*Validation [Ll]oss (?P<step>\d+):\s+(?P<val>{NUM_TOKEN})"
TACO_CONFIDENCE = 0.6
CONFIDENCE = 0.31  # just above MIN_CONFIDENCE 0.3; generic_steps is 0.35
MIN_LINES = 3
MIN_SHARE = 0.8  # of the head's lines that hold a digit


def sniff(sample: SniffSample) -> float:
    if sniff_share(sample, TACO):
        return TACO_CONFIDENCE
    lines = pl.Series(sample.text.splitlines()[: len(sample.lines) + 1], dtype=pl.String)  # raw: see BARE
    digits = lines.filter(lines.str.contains(r"\d"))
    if digits.len() == 0:
        return 0.0
    hits = max(int(digits.str.contains(LINE).sum()), int(digits.str.contains(PAIR).sum()))
    return CONFIDENCE if hits >= MIN_LINES and hits >= MIN_SHARE * digits.len() else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains(LOOSE))
    g = cand.with_columns(text.str.extract_groups(LINE).alias("_g")).unnest("_g").filter(pl.col("step").is_not_null())
    bare = (
        lines.filter(pl.col("prefix_rank").is_not_null())
        .with_columns(text.str.extract_groups(BARE).alias("_g"))
        .unnest("_g")
        .filter(pl.col("loss").is_not_null())
        .with_columns(
            pl.col("prefix_rank").cast(pl.String).alias("step"), pl.lit(None, dtype=pl.Int32).alias("prefix_rank")
        )
    )
    pairs = lines.filter(text.str.contains(PAIR_LOOSE))
    p = pairs.with_columns(text.str.extract_groups(PAIR).alias("_g")).unnest("_g").filter(pl.col("step").is_not_null())
    p = p.with_columns(pl.lit(None, dtype=pl.String).alias("val"))
    g = pl.concat([g, bare.select(g.columns), p.select(g.columns)]).sort("line")
    cand = pl.concat([cand, pairs])
    records = g.select(
        "line", step_int(pl.col("step")).alias("step"), "prefix_rank", pl.lit("train").alias("record_kind")
    )
    values = captured_values(g, {"loss": "loss", "val": "eval_loss"})
    unparsed = cand.join(g.select("line"), on="line", how="anti")
    taco = lines.filter(text.str.contains(r"^\s*(?:Train|Validation) [Ll]oss \d"))
    if taco.height:
        t = (
            taco.with_columns(text.str.extract_groups(TACO).alias("_g"))
            .unnest("_g")
            .filter(pl.col("step").is_not_null())
        )
        t = t.with_columns((pl.col("dur").cast(pl.Float64, strict=False) * 1000).cast(pl.String).alias("ms"))
        v = (
            taco.with_columns(text.str.extract_groups(TACO_VAL).alias("_g"))
            .unnest("_g")
            .filter(pl.col("step").is_not_null())
        )
        records = pl.concat(
            [
                records,
                t.select(
                    "line", step_int(pl.col("step")).alias("step"), "prefix_rank", pl.lit("train").alias("record_kind")
                ),
                v.select(
                    "line", step_int(pl.col("step")).alias("step"), "prefix_rank", pl.lit("eval").alias("record_kind")
                ),
            ]
        ).sort("line")
        values = pl.concat(
            [
                values,
                captured_values(t, {"loss": "loss", "gn": "grad_norm", "dgn": "d_grad_norm", "ms": "step_time_ms"}),
                captured_values(v, {"val": "eval_loss"}),
            ]
        )
        bad = taco.join(t.select("line"), on="line", how="anti").join(v.select("line"), on="line", how="anti")
        unparsed = pl.concat([unparsed.select("line", "text"), bad.select("line", "text")])
    return text_result(src.name, lines, records, values, unparsed, mode="done")
