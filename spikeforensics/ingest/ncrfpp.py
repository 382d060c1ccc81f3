"""NCRF++ (jiesutd/NCRFpp `main.py`, `train`): sequence labelling (NER, chunking, segmentation).

    Epoch: 0/100
     Learning rate is set as: 0.008
         Instance: 500; Time: 0.87s; loss: 110083.1091; acc: 4527/8986=0.5038
         Instance: 46991; Time: 0.85s; loss: 8282603.4120; acc: 638630/830865=0.7686
    Epoch: 0 training finished. Time: 78.25s, speed: 600.50st/s,  total loss: 8953630.858570099
    totalloss: 8953630.858570099
    ERROR: LOSS EXPLOSION (>1e8) ! PLEASE SET PROPER PARAMETERS AND STRUCTURE! EXIT....

A record is an `Instance:` line, printed every 500 training instances (and once for the epoch's tail); its
counter is the instances seen in the epoch, so it restarts every epoch: the step as printed, each epoch a
new attempt (as `edsr`). `loss` is the sum of the instance losses since the last print (with
`ave_batch_loss` off, NCRF++'s default) and `acc` the running token accuracy; the epoch and LR come from the
`Epoch: E/N` header and the `Learning rate is set as:` line under it. The epoch's `training finished ...
total loss` and `totalloss:` lines are summaries of the records, not records.
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
    parse_numbers,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "ncrfpp"
HEADER = r"^\s*Epoch: (?P<epoch>\d+)/\d+\s*$"
LR = rf"^\s*Learning rate is set as: (?P<lr>{NUM_TOKEN})"
RECORD = (
    rf"^\s*Instance: (?P<step>\d+); Time: [\d.]+s; loss: (?P<loss>{NUM_TOKEN}); "
    rf"acc: \d+/\d+=(?P<acc>{NUM_TOKEN})"
)
LOOSE = r"^\s*Instance: \d+;"


def sniff(sample: SniffSample) -> float:
    records = sniff_share(sample, RECORD)
    if records and sniff_share(sample, HEADER):
        return 0.9
    return 0.6 if records >= 2 else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    owned = block_owners(lines, text.str.contains(HEADER), pl.lit(False))
    hit = (
        owned.with_columns(text.str.extract_groups(RECORD).alias("_g"))
        .unnest("_g")
        .filter(pl.col("step").is_not_null())
    )
    records = hit.select(
        "line",
        step_int(pl.col("step")).alias("step"),
        "prefix_rank",
        pl.lit("train").alias("record_kind"),
        pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
    )
    headers = lines.filter(text.str.contains(HEADER)).select(
        pl.col("line").alias("_blk"), text.str.extract(HEADER, 1).alias("epoch")
    )
    lrs = parse_numbers(
        owned.filter(text.str.contains(LR)).select("_blk", text.str.extract(LR, 1).alias("v")), raw="v", out="lr"
    ).unique("_blk", keep="first")
    context = (
        hit.select("line", "_blk", "loss", "acc")
        .join(headers, on="_blk", how="left")
        .join(lrs.select("_blk", pl.col("lr").cast(pl.String)), on="_blk", how="left")
    )
    values = captured_values(context, {"loss": "loss", "acc": "acc", "epoch": "epoch", "lr": "lr"})
    unparsed = lines.filter(text.str.contains(LOOSE)).join(hit.select("line"), on="line", how="anti")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
