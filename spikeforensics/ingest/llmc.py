"""llm.c: the `main.log` written by `llmc/logger.h` (`s:N trl:X lr:Y norm:Z`, `s:N tel:X`,
`s:N eval:X`) and the stdout of `train_gpt2.cu`
(`step N/M | loss X (+0.12z)| norm Y (+0.05z)| lr Z | T ms | M% bf16 MFU | K tok/s`,
older `step N: train loss X (took T ms)`, `val loss X`).

Steps are stored as printed: `main.log`'s `s` is the 0-based step index (the stdout of
the same run prints s + 1). Val/eval lines are eval records (`eval_loss`,
`hellaswag_acc`, record null); in stdout a `val loss` line has no step and takes the
step of the next step line. `skipping update due to ... z-score` lines are
`skipped_step` events (see text_events).
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
    sniff_tiers,
    step_int,
    text_result,
)

NAME = "llmc"
N = rf"(?:{NUM_TOKEN})"
MAINLOG = rf"^\s*s:(?P<step>\d+) (?P<key>trl|tel|eval):(?P<v>{N})(?: lr:(?P<lr>{N}))?(?: norm:(?P<norm>{N}))?"
STDOUT = (
    rf"\bstep\s+(?P<step>\d+)/\d+ \| (?:train )?loss (?P<loss>{N})(?: \([^)]*\))?\s*\|"
    rf"(?: norm (?P<norm>{N})(?: \([^)]*\))?\s*\|)?(?: lr (?P<lr>{N}) \|)?(?: (?P<ms>{N}) ms)?"
    rf"(?: \| (?P<mfu>{N})% bf16 MFU)?(?: \| (?P<tps>{N}) tok/s)?"
)
OLD_STDOUT = rf"\bstep (?P<step>\d+): train loss (?P<loss>{N}) \(took (?P<ms>{N}) ms\)"
VAL = rf"^\s*val loss (?P<v>{N})\s*$"
LOOKS_LIKE = r"^\s*s:\d+ \w+:|\bstep\s+\d+/\d+ \|"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(
        sample,
        [
            (r"^\s*s:\d+ (?:trl|tel):", 0.95),
            (r"\bstep\s+\d+/\d+ \| (?:train )?loss \S+ (?:\([^)]*z\))?\s*\| norm ", 0.9),
            (r"\bstep \d+: train loss \S+ \(took ", 0.8),
        ],
    )


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    recs, vals = [], []
    # main.log
    m = (
        lines.with_columns(text.str.extract_groups(MAINLOG).alias("_g"))
        .unnest("_g")
        .filter(pl.col("step").is_not_null())
    )
    kind = pl.when(pl.col("key") == "trl").then(pl.lit("train")).otherwise(pl.lit("eval"))
    recs.append(m.select("line", step_int(pl.col("step")), "prefix_rank", kind.alias("record_kind")))
    m = m.with_columns(
        pl.when(pl.col("key") == "trl").then("v").alias("loss"),
        pl.when(pl.col("key") == "tel").then("v").alias("tel"),
        pl.when(pl.col("key") == "eval").then("v").alias("hs"),
    )
    vals.append(
        captured_values(m, {"loss": "loss", "lr": "lr", "norm": "grad_norm", "tel": "eval_loss", "hs": "hellaswag_acc"})
    )
    rest = lines.join(m.select("line"), on="line", how="anti")
    # stdout
    for pattern in (STDOUT, OLD_STDOUT):
        s = (
            rest.with_columns(text.str.extract_groups(pattern).alias("_g"))
            .unnest("_g")
            .filter(pl.col("step").is_not_null())
        )
        rest = rest.join(s.select("line"), on="line", how="anti")
        recs.append(s.select("line", step_int(pl.col("step")), "prefix_rank", pl.lit("train").alias("record_kind")))
        cols = {"loss": "loss", "ms": "step_time_ms"}
        cols |= {
            k: v
            for k, v in {"norm": "grad_norm", "lr": "lr", "mfu": "mfu", "tps": "tokens_per_s"}.items()
            if k in s.columns
        }
        vals.append(captured_values(s, cols))
    # stdout `val loss X`: the step of the next step line
    v = rest.with_columns(text.str.extract(VAL, 1).alias("v")).filter(pl.col("v").is_not_null())
    if v.height:
        train = (
            pl.concat(recs)
            .filter(pl.col("record_kind") == "train")
            .select(pl.col("line").alias("_n"), "step")
            .sort("_n")
        )
        v = v.sort("line").join_asof(train, left_on="line", right_on="_n", strategy="forward")
        recs.append(v.select("line", "step", "prefix_rank", pl.lit("eval").alias("record_kind")))
        vals.append(captured_values(v, {"v": "eval_loss"}))
        rest = rest.join(v.select("line"), on="line", how="anti")
    values = pl.concat(vals)
    values = values.filter(~((pl.col("name") == "mfu") & (pl.col("value") < 0)))  # -100%: not measured
    records = pl.concat(recs, how="diagonal_relaxed").with_columns(pl.lit(None, dtype=pl.Datetime("us")).alias("time"))
    unparsed = rest.filter(text.str.contains(LOOKS_LIKE))
    return text_result(src.name, lines, records, values, unparsed, mode="done")
