"""MLPerf Training result logs (mlcommons/logging `mllog`): one `:::MLLOG {json}` line per logged
key, among whatever else the benchmark's stack prints (a shell trace, HugeCTR's `[HCTR]` lines,
NeMo's warnings), optionally behind a rank prefix (`0: :::MLLOG {...}`).

    :::MLLOG {"namespace": "", "time_ms": 1714725015064, "event_type": "POINT_IN_TIME",
        "key": "tracked_stats", "value": {"throughput": 370.0, "loss": 1.1177, "lr": 2.55e-06},
        "metadata": {"file": "/workspace/sd/mlperf_logging_utils.py", "lineno": 178, "step_num": 100}}
    :::MLLOG {..., "key": "train_loss", "value": 1.364, "metadata": {..., "samples_count": 3072}}

Most keys are bookkeeping (`submission_*`, `opt_*` hyper-parameters, `init_start`, `block_start`,
`eval_accuracy`, `run_stop`): not records. A training record is a `tracked_stats` line whose value
dict prints a loss, or a scalar loss key (`train_loss`, `training_loss`, `loss`). Its step is the
metadata's `step_num`, `step`, `iteration` or `samples_count` (the first present; an epoch fraction
such as HugeCTR's `"step": 0.7499` is no step), as printed, or the iteration of an `[epoch, iteration]` pair
(NVIDIA's MXNet SSD, whose epoch summaries then print `"step": E`: no records), and `time_ms` its time. A stack's own
per-step lines beside the MLLOG lines (HugeCTR's `Iter: 100 ... Loss: 0.1322 lr:0.004`) are read by
their grammar in the line mix (`_mixing.py`).
"""

from __future__ import annotations

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    find_pairs,
    named_values,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "mlperf_log"
LINE = r":::MLLOG\s*\{"
KEY = r'"key":\s*"([^"]+)"'
# the value of a `tracked_stats` line: a flat dict of numbers
VALUE_DICT = r'"value":\s*(\{[^{}]*\})'
VALUE_NUM = rf'"value":\s*({NUM_TOKEN})\s*[,}}]'
PAIR = rf'"(?P<k>[A-Za-z_][\w/.-]*)":\s*(?P<v>{NUM_TOKEN})\s*(?:[,}}])'
# metadata keys that carry the step, best first (an integer: an epoch fraction is no step)
STEP_KEYS = ("step_num", "step", "iteration", "samples_count")
SCALAR_LOSS_KEYS = ("train_loss", "training_loss", "loss")
LOSS_IN_DICT = r'"(?:[\w/]*_)?loss"\s*:'


def sniff(sample: SniffSample) -> float:
    # any MLLOG line makes the file an MLPerf result log, whatever its records are printed as
    return 0.9 if sniff_share(sample, LINE) else 0.0


def _metadata_step(text: pl.Expr) -> pl.Expr:
    meta = text.str.extract(r'"metadata":\s*(\{.*)', 1)
    # an integer, also printed as a float (`"step": 448.0`, NeMo's Llama 3.1 405B); a fraction is an epoch
    found = [meta.str.extract(rf'"{key}":\s*(\d+)(?:\.0*)?\s*[,}}]', 1) for key in STEP_KEYS]
    return step_int(pl.coalesce(_pair_step(text), *found))


def _pair_step(text: pl.Expr) -> pl.Expr:
    """The iteration of a `"step": [epoch, iteration]` pair (NVIDIA's MXNet SSD: `"step": [50, 12900]`)."""
    return text.str.extract(r'"metadata":\s*\{.*"step":\s*\[\s*\d+\s*,\s*(\d+)\s*\]', 1)


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains(LINE)).with_columns(
        text.str.extract(KEY, 1).alias("_key"),
        text.str.extract(VALUE_DICT, 1).alias("_dict"),  # a tracked_stats line's {...}
        text.str.extract(VALUE_NUM, 1).alias("_num"),  # a scalar key's value
    )
    stats = (pl.col("_key") == "tracked_stats") & pl.col("_dict").str.contains(LOSS_IN_DICT)
    scalar = pl.col("_key").is_in(SCALAR_LOSS_KEYS) & pl.col("_num").is_not_null()
    rec = cand.filter((stats | scalar).fill_null(False)).with_columns(
        _metadata_step(text).alias("step"),
        pl.from_epoch(text.str.extract(r'"time_ms":\s*(\d+)', 1).cast(pl.Int64, strict=False), time_unit="ms")
        .cast(schema.TIME)
        .alias("time"),
        pl.lit("train").alias("record_kind"),
    )
    rec = rec.filter(pl.col("step").is_not_null())
    if rec.select(_pair_step(text).is_not_null().any()).item():
        # beside [epoch, iteration] steps, a plain `"step": E` is the epoch of an epoch summary (its mean loss)
        rec = rec.filter(_pair_step(text).is_not_null() | ~text.str.contains(r'"metadata":\s*\{.*"step":\s*\d'))
    records = rec.select("line", "step", "prefix_rank", "record_kind", "time")
    in_dict = rec.filter(pl.col("_key") == "tracked_stats").select("line", pl.col("_dict").alias("text"))
    pairs = find_pairs(in_dict, PAIR).select("line", "k", "v")
    scalars = rec.filter(pl.col("_key") != "tracked_stats").select(
        "line", pl.lit("loss").alias("k"), pl.col("_num").alias("v")
    )
    values = named_values(pl.concat([pairs, scalars])).select("line", "name", "value")
    return text_result(src.name, lines, records, values, mode="done")
