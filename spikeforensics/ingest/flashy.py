"""Demucs / flashy `LogProgress` lines (facebookresearch/demucs, AudioCraft's EnCodec / MusicGen solvers,
and the dora-based trainers that share `flashy.logging.LogProgress`): every `updates`-th batch of a stage,

    - Train | Epoch 1 | 143/573 | 1.45 it/sec | Loss 0.2343 | Reco 0.2312 | Grad 0.1202 | Penalty 304.120
    - Valid | Epoch 1 | 1/3 | 0.31 it/sec | Loss 0.2213 | Reco 0.2213 | Nsdr 3.922
    - Train Summary | Epoch 1 | Loss=0.2019 | Reco=0.1994 | Grad=0.0963 | Penalty=247.2265
    INFO:audiocraft.solvers.compression:Train | Epoch 1 | 200/2000 | 3.48 it/sec | bandwidth 6.000 | l1 0.160

-> a `Train` line is a training record: step = (epoch - e0) x total + batch (e0 = 0 when the file prints
an epoch 0, else 1: Demucs and AudioCraft count epochs from 1), `name value` fields by name (`Loss` ->
`loss`, `Grad` -> `grad_norm`: the solver's total gradient norm before clipping); `it/sec` is the
speed, not a metric. A `Valid` / `Evaluate` / `Test` line is an eval record (names `eval_*`), with
the step of the last training record; a `<Stage> Summary | Epoch E | key=value` line is the epoch's
summary record (no step; a validation summary's names `eval_*` too). Mode "done".
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._fields import named_values
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
)

NAME = "flashy"
STAGE = r"(?P<stage>Train|Valid|Validation|Evaluate|Eval|Test)"
PROGRESS = rf"(?:^|[\s:|-]){STAGE}\s*\|\s*Epoch\s+(?P<epoch>\d+)\s*\|\s*(?P<i>\d+)\s*/\s*(?P<n>\d+)\s*\|(?P<rest>.*)$"
SUMMARY = rf"(?:^|[\s:|-]){STAGE} Summary\s*\|\s*Epoch\s+(?P<epoch>\d+)\s*\|(?P<rest>.*)$"
FIELD = rf"^\s*(?P<k>[A-Za-z_][\w./-]*(?: [A-Za-z_][\w./-]*)?)\s*[ =]\s*(?P<v>{NUM_TOKEN})\s*$"  # one `|` piece
NAMES = {"grad": "grad_norm"}


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(sample, [(PROGRESS.replace("(?P<rest>.*)$", r".*\bit/sec"), 0.9), (SUMMARY, 0.5)])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    prog = lines.filter(text.str.contains(PROGRESS)).with_columns(text.str.extract_groups(PROGRESS).alias("_g"))
    prog = prog.unnest("_g")
    summ = lines.filter(text.str.contains(SUMMARY)).with_columns(text.str.extract_groups(SUMMARY).alias("_g"))
    summ = summ.unnest("_g")
    epoch = pl.col("epoch").cast(pl.Float64, strict=False)
    e0 = 0.0 if pl.concat([prog.select("epoch"), summ.select("epoch")]).select((epoch == 0).any()).item() else 1.0
    train = pl.col("stage") == "Train"
    step = (epoch - e0) * pl.col("n").cast(pl.Float64, strict=False) + pl.col("i").cast(pl.Float64, strict=False)
    prog = prog.with_columns(
        pl.when(train).then(step_int(step)).alias("step"),
        pl.when(train).then(pl.lit("train")).otherwise(pl.lit("eval")).alias("record_kind"),
    ).with_columns(pl.col("step").forward_fill())  # an eval line takes the step of the training before it
    summ = summ.with_columns(pl.lit(None, dtype=pl.Int64).alias("step"), pl.lit("summary").alias("record_kind"))
    both = pl.concat(
        [f.select("line", "stage", "step", "prefix_rank", "record_kind", "rest", "text") for f in (prog, summ)]
    ).sort("line")
    records = both.select("line", "step", "prefix_rank", "record_kind", extract_time(pl.col("text")).alias("time"))
    pairs = (
        both.select("line", "stage", pl.col("rest").str.split("|").alias("_p"))
        .explode("_p")
        .filter(pl.col("_p").str.contains(FIELD))  # (a speed piece, `1.45 it/sec`, has no name first)
        .with_columns(pl.col("_p").str.extract_groups(FIELD).alias("_g"))
        .unnest("_g")
        .with_columns(pl.col("k").str.strip_chars().str.to_lowercase().replace(NAMES).alias("k"))
    )
    values = named_values(pairs, eval_rows=pl.col("stage") != "Train").select("line", "name", "value")
    return text_result(src.name, lines, records, values, None, mode="done")
