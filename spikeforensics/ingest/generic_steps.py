"""Fallback for custom training loops: a step counter followed by key/value pairs,
whatever the separators:

    step 6/1500 | loss 2.31 | lr 3e-4 | grad_norm 0.64
    step=6, loss=2.31, lr=0.0003
    Step 6: loss 2.31 grad norm 0.64
    [Epoch 1, step 6] loss: 2.31, lr: 3e-4

A line is a record when it has a step counter (`step`, `iter`, `iteration`,
`global_step`, `it`) and a key containing `loss` with a number. Keys may be two words
(`train loss`, `grad norm`); names go through the alias table (`train loss` -> `loss`,
`val loss` -> `eval_loss`). A line whose only loss is an eval loss is an eval record.
Steps are stored as printed (taken as done steps; mode "done").

Its sniffer is deliberately unsure (at most 0.35) so that every specific parser wins.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    find_pairs,
    named_values,
    prepared_lines,
    sniff_share,
    text_result,
)

NAME = "generic_steps"
STEP = r"(?i)\b(?:global[_ ]step|step|iteration|iter|it)\b\s*[:=#]?\s*\[?\s*(\d+)\s*(?:/\s*\d+)?"
KEY = r"[A-Za-z_][\w./-]*"
PAIR = rf"(?P<k>{KEY}(?: {KEY})?)(?:\s*[:=]\s*|\s+)(?P<v>{NUM_TOKEN})(?:[\s,;|)\]]|$)"
LOSSY = r"(?i)loss"
COUNTER_KEYS = r"(?i)^(?:global[_ ]step|step|iteration|iter|it)$"
MAX_CONFIDENCE = 0.35


def sniff(sample: SniffSample) -> float:
    n = sniff_share(sample, STEP + r".*?" + r"(?i:loss)\w*\s*[:=]?\s*[-+]?[\d.]")
    return MAX_CONFIDENCE if n >= 2 else (0.2 if n else 0.0)


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains(LOSSY)).with_columns(
        text.str.extract(STEP, 1).cast(pl.Int64, strict=False).alias("step")
    ).filter(pl.col("step").is_not_null())
    body = text.str.replace(STEP, " ")
    pairs = find_pairs(cand.select("line", body.alias("text")), PAIR)
    pairs = pairs.filter(~pl.col("k").str.contains(COUNTER_KEYS))
    values = named_values(pairs).select("line", "name", "value")
    lossy = values.filter(pl.col("name").str.contains("loss")).group_by("line").agg(
        (pl.col("name").str.starts_with("eval_") | pl.col("name").str.starts_with("val")).all().alias("_eval")
    )
    records = cand.join(lossy, on="line").select(
        "line", "step", "prefix_rank", extract_time(text).alias("time"),
        pl.when(pl.col("_eval")).then(pl.lit("eval")).otherwise(pl.lit("train")).alias("record_kind"),
    )
    values = values.join(records.select("line"), on="line", how="semi")
    unparsed = cand.join(records.select("line"), on="line", how="anti")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
