"""Microsoft CNTK's SGD progress (`Source/SGDLib/SGD.cpp` in BrainScript runs; the Python API's
`ProgressPrinter` prints the same shape):

    08/16/2016 10:44:04:  Epoch[ 1 of 25]-Minibatch[   1-  10]: CrossEntropyWithSoftmax = 5.02329865 * 2560; EvalClassificationError = 0.96875000 * 2560; time = 0.0268s; samplesPerSecond = 95490.3
    08/16/2016 10:44:19:  Epoch[ 2 of 25]-Minibatch[   1-  10, 0.94%]: ce = 1.8 * 10240; err = 0.5 * 10240; time = ...
     Minibatch[   1- 128]: loss = 4.609212 * 16, metric = 96.88% * 16;
    08/16/2016 10:44:13: Finished Epoch[ 1 of 25]: [Training] CrossEntropyWithSoftmax = 2.51173429 * 1124823; ...

A record is a `Minibatch[a-b]` line, every `numMBsToShowResult` minibatches: its first `name = value * samples`
field is the training criterion, the loss (the mean per sample over those minibatches, whatever the
criterion node is called); later fields keep their names in snake case without an `Eval` prefix
(`classification_error`; a percentage as printed). The counter is the range end `b`, which restarts every epoch: the step as printed,
each epoch a new attempt, the epoch a metric. `Starting Epoch E: learning rate per sample = x` gives the
epoch's records their `lr` (per sample, as printed). `Finished Epoch` summaries are not records; a `Final Results: Minibatch[...]` line (the
cross-validation pass) is an eval record (`eval_loss`, `eval_<name>`).
"""

from __future__ import annotations

import re

import polars as pl

from spikeforensics.ingest._fields import find_pairs
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    parse_numbers,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "cntk"
RECORD = (
    r"(?:Epoch\[\s*(?P<epoch>\d+) of \d+\]-)?Minibatch\[\s*\d+-\s*(?P<step>\d+)(?:,\s*[\d.]+%)?\]:\s*(?P<fields>.*)$"
)
FIELD = rf"(?P<k>[A-Za-z_][\w.]*) = (?P<v>{NUM_TOKEN})%? \* \d+"
# the cross-validation pass at an epoch's end (`Final Results: Minibatch[1-12249]: cr = 3.8457 * 122487; ...`)
EVAL = r"Final Results: Minibatch\["
START = rf"Starting Epoch (?P<epoch>\d+): learning rate per sample = (?P<lr>{NUM_TOKEN})"


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, RECORD + r"") and sniff_share(sample, FIELD) >= 2 else 0.0


def _snake(name: str) -> str:
    """`EvalClassificationError` -> `classification_error`: the evaluation criterion a training record carries
    (an `eval_` name is an evaluation record's metric in the store)."""
    return re.sub(r"^eval_", "", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower().replace(".", "_"))


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    hit = (
        lines.filter(text.str.contains(RECORD) & text.str.contains(FIELD))
        .with_columns(text.str.extract_groups(RECORD).alias("_g"))
        .unnest("_g")
        .with_columns(text.str.contains(EVAL).alias("_eval"))
    )
    records = hit.select(
        "line",
        # an evaluation covers a whole pass: it takes the step of the record before it
        pl.when(~pl.col("_eval")).then(step_int(pl.col("step"))).alias("step"),
        "prefix_rank",
        pl.when(pl.col("_eval")).then(pl.lit("eval")).otherwise(pl.lit("train")).alias("record_kind"),
        extract_time(text).alias("time"),
    )
    pairs = find_pairs(hit.select("line", pl.col("fields").alias("text")), FIELD)
    pairs = parse_numbers(pairs, raw="v", out="value").with_columns(
        (pl.int_range(pl.len()).over("line") == 0).alias("_first")
    )
    names = {k: _snake(k) for k in pairs.get_column("k").unique().to_list()}
    named = pairs.join(hit.select("line", "_eval"), on="line").select(
        "line",
        (
            pl.when(pl.col("_eval")).then(pl.lit("eval_")).otherwise(pl.lit(""))
            + pl.when(pl.col("_first")).then(pl.lit("loss")).otherwise(pl.col("k").replace_strict(names))
        ).alias("name"),
        "value",
    )
    # the epoch on the line, and the learning rate its `Starting Epoch` line announced
    starts = (
        lines.filter(text.str.contains(START)).with_columns(text.str.extract_groups(START).alias("_g")).unnest("_g")
    )
    lr = parse_numbers(starts.select("epoch", "lr"), raw="lr", out="lr").unique("epoch", keep="last")
    context = hit.select("line", "epoch").join(lr.select("epoch", "lr"), on="epoch", how="left")
    extra = pl.concat(
        [
            parse_numbers(context.select("line", pl.lit("epoch").alias("name"), pl.col("epoch").alias("raw"))).select(
                "line", "name", "value"
            ),
            context.select("line", pl.lit("lr").alias("name"), pl.col("lr").alias("value")),
        ]
    )
    values = pl.concat([named, extra]).filter(pl.col("value").is_not_null())
    return text_result(src.name, lines, records, values, lines.head(0), mode="done")
