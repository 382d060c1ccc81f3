"""Metric tables in CSV: Lightning `CSVLogger` `metrics.csv`, W&B CSV exports, any step CSV.

- Lightning: sorted, sparse columns (`epoch`, `step`, `train_loss_step`,
  `train_loss_epoch`, `val_loss`, ...); a row with only `val*` values is an eval record,
  a row with only epoch aggregates (`*_epoch`, `epoch_time`) is a summary record. A
  resumed run writes a new `version_N/metrics.csv` whose first row is the resumed step.
- W&B export: `_step`, `_runtime`, `_timestamp` plus metric keys (`train/loss`, ...);
  the step is `train/global_step` when present (W&B's `_step` is its own counter).
- generic: a `step` (or `global_step`, `iteration`, `iter`) column and metric columns.

Empty cells are no value (no row); `nan`/`inf` are values.
"""

from __future__ import annotations

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest import _tables as T
from spikeforensics.ingest.aliases import METRIC_ALIASES
from spikeforensics.ingest.base import ParseResult, SniffSample, SourceFile, normalise_name, records_to_metrics
from spikeforensics.ingest.jsonl_metrics import IGNORE_KEYS, RANK_KEYS, TIME_KEYS, _norm, step_column

NAME = "csv_metrics"


def sniff(sample: SniffSample) -> float:
    if T.file_kind(sample.path) != "csv":
        return 0.0
    cols = T.sample_columns(sample)
    if not cols or len(cols) < 2:
        return 0.0
    from spikeforensics.ingest import batches, layers

    if layers.looks_like_layers(cols) or layers.looks_like_global_grads(cols) or batches.looks_like_batches(cols):
        return 0.0
    if any("[" in c for c in cols) or any(normalise_name(c) in ("index", "pci_bus_id", "uuid") for c in cols):
        return 0.0  # nvidia-smi query output
    if step_column(cols) is None:
        return 0.0
    norm = [normalise_name(c) for c in cols]
    known = [n for n in norm if n in METRIC_ALIASES or T.metric_target(n, "train") in METRIC_ALIASES.values()]
    return 0.85 if known else 0.4


def parse(src: SourceFile) -> ParseResult:
    result = ParseResult()
    frame = T.read_csv_lines(src, result)
    cols = [c for c in frame.columns if c != "line"]
    step_col = step_column(cols)
    if step_col is None:
        raise T.ingest_error(f"{src.path}: CSV without a step column (found: {', '.join(cols[:12]) or 'none'})")
    frame = frame.filter(pl.col(step_col).is_null() | (pl.col(step_col) != step_col))  # repeated headers
    time_col = next((c for c in cols if c in TIME_KEYS), None)
    rank_col = next((c for c in cols if _norm(c) in RANK_KEYS), None)
    skip = {step_col, time_col, rank_col}
    metric_cols = [c for c in cols if c not in skip and not c.startswith("_")
                   and _norm(c) not in IGNORE_KEYS and _norm(c) not in ("step",)]
    step = T.integer(frame, step_col)
    wide = frame.select(
        "line",
        step.alias("step"),
        (T.integer(frame, rank_col).cast(pl.Int32) if rank_col else pl.lit(None, dtype=pl.Int32)).alias("prefix_rank"),
        (pl.from_epoch((T.numeric(frame, time_col) * 1e6).cast(pl.Int64, strict=False), time_unit="us")
         if time_col else pl.lit(None, dtype=schema.TIME)).alias("time"),
        *[T.numeric(frame, c).alias(c) for c in metric_cols],
    )
    bad = wide.with_row_index("_i").filter(pl.col("step").is_null()).get_column("_i")
    if bad.len():
        raw = frame[bad.to_list()]
        text = pl.concat_str([pl.col(c).fill_null("") for c in cols], separator=",")
        T.unparsed(result, raw.select("line", text.alias("text")))
    wide = wide.filter(pl.col("step").is_not_null())
    metric_cols = T.drop_empty_columns(wide, metric_cols)
    wide = wide.with_columns(T.classify_rows(wide, metric_cols).alias("record_kind")).filter(
        pl.col("record_kind").is_not_null()
    )
    if wide.height == 0:
        return result
    wide = _merge_logger_rows(wide, metric_cols)
    synthetic = wide.get_column("line").null_count() > 0
    if synthetic:  # quoted multi-line cells: keep file order with row numbers, report no line
        wide = wide.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("line"))
    wide, names = T.canonical_wide(wide, metric_cols, ["line", "step", "prefix_rank", "time"])
    metrics = records_to_metrics(wide, src.name, names)
    result.records += metrics.get_column("line").n_unique()
    if synthetic:
        metrics = metrics.with_columns(pl.lit(None, dtype=pl.Int64).alias("line"))
    result.add("metrics", metrics)
    return result


def _merge_logger_rows(wide: pl.DataFrame, metric_cols: list[str]) -> pl.DataFrame:
    """Consecutive rows of one step and kind are one record, their values merged (first value of
    each column): Lightning's CSVLogger writes one row per `log` call, so a step's `lr-Adam` and its
    `train/loss` can sit on two rows (a stdout line printed twice keeps its first values, as here)."""
    key = [pl.col("step"), pl.col("record_kind"), pl.col("prefix_rank")]
    new = pl.any_horizontal([k.ne_missing(k.shift(1)) for k in key]) | (pl.int_range(pl.len()) == 0)
    grouped = wide.with_columns(new.cum_sum().alias("_run"))
    if grouped.get_column("_run").n_unique() == wide.height:
        return wide
    others = [c for c in wide.columns if c not in (*metric_cols, "_run")]
    return grouped.group_by("_run", maintain_order=True).agg(
        *[pl.col(c).first() for c in others], *[pl.col(c).drop_nulls().first() for c in metric_cols]
    ).drop("_run").select(wide.columns)

