"""`MetricLogger.log_every` lines of the torchvision reference scripts and the Meta
research codebases built on them (MAE, DeiT, DINO, ConvNeXt, BEiT, LLaMA-Adapter,
LLaMA2-Accessory, ...), with or without a `[HH:MM:SS.ffffff]` or MPI prefix:

    Epoch: [2]  [ 150/1251]  eta: 0:20:52  lr: 0.000201  loss: 6.8610 (6.8841)  time: 1.0552  data: 0.0035  max mem: 8249
    Epoch: [0/100]  [2240/2502]  eta: 0:02:44  loss: 5.385776 (7.546279)  lr: 0.000089 (0.000045)  wd: 0.040071 (0.040024)  ...
    [03:23:49.951215] Epoch: [0]  [1480/1504]  lr: 0.000026  closs: 1.0800 (1.1317)  grad_norm: 0.4995 (1.1826)  ...
    Test:  [ 0/50]  eta: 0:00:41  loss: 0.6931 (0.6931)  acc1: 87.5000 (87.5000)  ...   # eval record

Value = the current (smoothed-window) value printed first; the running average in
parentheses is ignored. **Step = epoch * iters_per_epoch + iteration**, from `Epoch: [e]`
(0-based, as the engines print it; DINO's `[e/E]` form too) and `[i/n]`: a global
iteration counter that keeps growing across epochs (the log prints no global counter).
`closs` (LLaMA-Adapter's causal-LM loss) is `loss` in a file that prints no `loss`;
`time` (seconds) -> `step_time_ms`, `data` -> `data_time` (seconds), `max mem` (MB) ->
`max_mem_mb`. `Test:` lines are eval records (names prefixed `eval_`) with the step of the
train record before them. `Averaged stats:` and `Total time:` lines are not records.
`Loss is nan, stopping training` is a `nan` event (text_events).
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import scale_metric
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    find_pairs,
    named_values,
    prepared_lines,
    sniff_tiers,
    text_result,
)

NAME = "metriclogger"
TRAIN = r"\bEpoch: \[(?P<epoch>\d+)(?:/\d+)?\]\s*\[\s*(?P<i>\d+)\s*/\s*(?P<n>\d+)\]"
TEST = r"\bTest:\s*\[\s*(?P<ti>\d+)\s*/\s*(?P<tn>\d+)\]"
PAIR = rf"(?P<k>[A-Za-z_][\w./-]*(?: mem)?):\s+(?P<v>{NUM_TOKEN})(?:\s|$)"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(
        sample,
        [
            (rf"{TRAIN}\s+(?:eta: |lr: |loss: )", 0.9),
            (rf"{TEST}\s+eta: ", 0.5),
        ],
    )


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains("Epoch: [", literal=True) | text.str.contains("Test:", literal=True))
    g = cand.with_columns(text.str.extract_groups(TRAIN).alias("_t"), text.str.extract_groups(TEST).alias("_e")).unnest(
        "_t", "_e"
    )
    epoch, i, n = (pl.col(c).cast(pl.Int64, strict=False) for c in ("epoch", "i", "n"))
    is_train = pl.col("i").is_not_null()
    rec = (
        g.filter(is_train | pl.col("ti").is_not_null())
        .with_columns(
            pl.when(is_train).then(epoch * n + i).alias("step"),
            pl.when(is_train).then(pl.lit("train")).otherwise(pl.lit("eval")).alias("record_kind"),
        )
        .sort("line")
    )
    rec = rec.with_columns(pl.col("step").forward_fill())  # eval lines: step of the train record before
    body = text.str.replace(r"^.*?(?:\bEpoch: \[[^\]]*\]|\bTest:)\s*\[[^\]]*\]", "")
    pairs = find_pairs(rec.select("line", body.alias("text"), "record_kind"), PAIR).filter(pl.col("k") != "eta")
    if pairs.height and not pairs.filter(pl.col("k") == "loss").height:
        pairs = pairs.with_columns(pl.col("k").replace({"closs": "loss"}))
    pairs = pairs.with_columns(pl.col("k").replace({"data": "data_time", "max mem": "max_mem_mb"}))
    values = named_values(pairs, eval_rows=pl.col("record_kind") == "eval").select("line", "name", "value")
    values = scale_metric(values, "time", "step_time_ms", 1000.0)
    values = scale_metric(values, "eval_time", "eval_step_time_ms", 1000.0)
    records = rec.select("line", "step", "prefix_rank", "record_kind")
    unparsed = rec.join(values.select("line").unique(), on="line", how="anti")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
