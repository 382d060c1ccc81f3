"""Microsoft CNTK's SGD progress (`Source/SGDLib/SGD.cpp` in BrainScript runs; the Python API's
`ProgressPrinter` prints the same shape):

    08/16/2016 10:44:04:  Epoch[ 1 of 25]-Minibatch[   1-  10]: CrossEntropyWithSoftmax = 5.02329865 * 2560; EvalClassificationError = 0.96875000 * 2560; time = 0.0268s; samplesPerSecond = 95490.3
    08/16/2016 10:44:19:  Epoch[ 2 of 25]-Minibatch[   1-  10, 0.94%]: ce = 1.8 * 10240; err = 0.5 * 10240; time = ...
     Minibatch[   1- 128]: loss = 4.609212 * 16, metric = 96.88% * 16;
    08/16/2016 10:44:13: Finished Epoch[ 1 of 25]: [Training] CrossEntropyWithSoftmax = 2.51173429 * 1124823; ...

A record is a `Minibatch[a-b]` line, every `numMBsToShowResult` minibatches: its first `name = value * samples`
field is the training criterion, the loss (the mean per sample over those minibatches, whatever the
criterion node is called; MSVC's `-nan(ind)` / `1.#QNAN0` / `1.#INF00` are NaN / Inf); later fields keep their
names in snake case without an `Eval` prefix (`classification_error`; a percentage as printed). The range end
`b` restarts every epoch: the step is a running minibatch count, `b` plus each earlier epoch's last printed
range end (it undercounts by the minibatches after an epoch's last report; without `Epoch[...]` the range end
as printed), and the epoch a metric. The last `Starting Epoch E: learning rate per sample = x` line above a
record gives its `lr` (per sample, as printed). `Finished Epoch` summaries are not records; a `Final Results:
Minibatch[...]` line (the cross-validation pass) is an eval record (`eval_loss`, `eval_<name>`) at the step of
the record before it.
"""

from __future__ import annotations

import re

import polars as pl

from spikeforensics.ingest._fields import find_pairs
from spikeforensics.ingest._grammar_helpers import CNUM, c_number, snake_case
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
RECORD = r"(?:Epoch\[\s*(?P<epoch>\d+) of \d+\]-)?Minibatch\[\s*\d+-\s*(?P<b>\d+)(?:,\s*[\d.]+%)?\]:\s*(?P<fields>.*)$"
FIELD = rf"(?P<k>[A-Za-z_][\w.]*) = (?P<v>{CNUM})%? \* \d+"
# the cross-validation pass at an epoch's end (`Final Results: Minibatch[1-12249]: cr = 3.8457 * 122487; ...`)
EVAL = r"Final Results: Minibatch\["
START = rf"Starting Epoch \d+: learning rate per sample = (?P<lr>{NUM_TOKEN})"


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, RECORD) and sniff_share(sample, FIELD) else 0.0


def _snake(name: str) -> str:
    """`EvalClassificationError` -> `classification_error`: the evaluation criterion a training record carries
    (an `eval_` name is an evaluation record's metric in the store)."""
    return re.sub(r"^eval_", "", snake_case(name))


def _running_steps(hit: pl.DataFrame) -> pl.Expr:
    """The running minibatch count of the train lines (`hit` in line order): the range end plus the last range
    end of every epoch printed before (a new epoch starts when the epoch number changes)."""
    train = hit.filter(~pl.col("_eval") & pl.col("epoch").is_not_null())
    if train.height == 0:
        return step_int(pl.col("b"))
    b = pl.col("b").cast(pl.Int64, strict=False)
    epochs = (
        train.with_columns(
            b.alias("_b"), (pl.col("epoch") != pl.col("epoch").shift(1)).fill_null(True).cum_sum().alias("_e")
        )
        .group_by("_e", maintain_order=True)
        .agg(pl.col("line"), pl.col("_b").max().alias("_last"))
        .with_columns((pl.col("_last").cum_sum() - pl.col("_last")).alias("_offset"))
        .explode("line")
    )
    offset = dict(zip(epochs.get_column("line").to_list(), epochs.get_column("_offset").to_list()))
    return step_int(b + pl.col("line").replace_strict(offset, default=0, return_dtype=pl.Int64))


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    hit = (
        lines.filter(text.str.contains(RECORD) & text.str.contains(FIELD))
        .with_columns(text.str.extract_groups(RECORD).alias("_g"))
        .unnest("_g")
        .with_columns(text.str.contains(EVAL).alias("_eval"))
        .sort("line")
    )
    # an evaluation covers a whole pass: it takes the step of the record before it
    hit = hit.with_columns(pl.when(~pl.col("_eval")).then(_running_steps(hit)).forward_fill().alias("step"))
    records = hit.select(
        "line",
        "step",
        "prefix_rank",
        pl.when(pl.col("_eval")).then(pl.lit("eval")).otherwise(pl.lit("train")).alias("record_kind"),
        extract_time(text).alias("time"),
    )
    pairs = find_pairs(hit.select("line", pl.col("fields").alias("text")), FIELD).with_columns(c_number(pl.col("v")))
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
    # the learning rate of the last `Starting Epoch` line above each train record (several training actions,
    # pretraining then training, each start at epoch 1)
    starts = parse_numbers(
        lines.filter(text.str.contains(START)).select("line", text.str.extract(START, 1).alias("lr")), raw="lr", out="v"
    ).select("line", "v")
    train = hit.filter(~pl.col("_eval")).select("line", "epoch")
    lr = train.join_asof(starts, on="line", strategy="backward").select(
        "line", pl.lit("lr").alias("name"), pl.col("v").alias("value")
    )
    epoch = parse_numbers(train.select("line", pl.lit("epoch").alias("name"), pl.col("epoch").alias("raw"))).select(
        "line", "name", "value"
    )
    values = pl.concat([named, lr, epoch]).filter(pl.col("value").is_not_null())
    return text_result(src.name, lines, records, values, lines.head(0), mode="done")
