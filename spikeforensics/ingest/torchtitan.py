"""torchtitan stdout (`[rank0]:[titan] TIME - root - INFO - step: 200  loss:  6.1384
grad_norm:  0.51  memory: 49.66GiB(52.28%)  tps: 5,856  tflops: 339.16  mfu: 34.29%`),
ANSI colours stripped; `validate step: N  loss: X` lines are eval records.

Steps are the trainer's `step` as printed (done steps; mode "done"). Every rank prints
the line when no `--local-ranks-filter` is set: consecutive copies of one step in one
stream are one record, and with `[rankN]:` prefixes of several ranks each rank's values
are kept with its rank (CONTRACT.md). `memory: 49.66GiB(52.28%)` becomes `memory_gib`
and `memory_pct`; `tps` -> `tokens_per_s`; `mfu` in percent.
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
    step_int,
    text_result,
)

NAME = "torchtitan"
STEP = r"\b(validate )?step:\s*(\d+)\s+loss:"
PAIR = rf"(?P<k>[A-Za-z_][\w()/%]*):\s*(?P<v>{NUM_TOKEN}|N/A)(?:GiB)?"
MEM_PCT = rf"memory:\s*{NUM_TOKEN}\s*GiB\((?P<v>{NUM_TOKEN})%\)"


def sniff(sample: SniffSample) -> float:
    n = sniff_share(sample, r"\bstep:\s*\d+\s+loss:\s*\S+\s+(?:grad_norm|memory):")
    if n:
        return 0.95 if "[titan]" in sample.text else 0.85
    return 0.3 if "[titan]" in sample.text else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    g = text.str.extract_groups(STEP)
    rec = lines.with_columns(
        step_int(g.struct.field("2")).alias("step"), g.struct.field("1").is_not_null().alias("_val")
    ).filter(pl.col("step").is_not_null())
    kind = pl.when(pl.col("_val")).then(pl.lit("eval")).otherwise(pl.lit("train"))
    records = rec.select("line", "step", "prefix_rank", kind.alias("record_kind"), extract_time(text).alias("time"))
    body = text.str.replace(r"^.*?\bstep:\s*\d+", "")
    pairs = find_pairs(rec.select("line", body.alias("text"), "_val"), PAIR)
    pairs = pairs.with_columns(pl.when(pl.col("k") == "memory").then(pl.lit("memory_gib")).otherwise("k").alias("k"))
    values = named_values(pairs, eval_rows=pl.col("_val")).select("line", "name", "value")
    mem = rec.select("line", text.str.extract(MEM_PCT, 1).alias("v")).filter(pl.col("v").is_not_null())
    if mem.height:
        mem = named_values(mem.with_columns(pl.lit("memory_pct").alias("k"))).select("line", "name", "value")
        values = pl.concat([values, mem])
    unparsed = lines.filter(text.str.contains(r"\bstep:\s*\d+") & ~text.str.contains(STEP))
    return text_result(src.name, lines, records, values, unparsed, mode="done")
