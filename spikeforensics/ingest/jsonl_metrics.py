"""Generic JSON-lines metric logs: one JSON object per line.

Covers LLaMA-Factory `trainer_log.jsonl` (2023 schema with nulls and `learning_rate`,
current schema with `lr`), W&B `history` JSONL (`_step`, `train/global_step`,
`_timestamp`), fairseq `--log-format json` (every value a string, optionally behind a
logger prefix) and any `{"step": .., "loss": ..}` lines. Bare `NaN`/`Infinity`/`nan`
tokens are accepted anywhere.

Step: the first present of STEP_KEYS. Restarts: LLaMA-Factory appends after a resume
and two concurrent writers may interleave (each a few logging intervals apart), so
a record counts as "going back" (a new attempt) only when its step is below both of
the two preceding records' steps; a step repeated within an attempt (the second
writer) is dropped, first value kept.
"""

from __future__ import annotations

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest import _tables as T
from spikeforensics.ingest.aliases import METRIC_ALIASES
from spikeforensics.ingest.base import ParseResult, SniffSample, SourceFile, normalise_name, records_to_metrics

NAME = "jsonl_metrics"

# Normalised key names that carry the step, best first.
STEP_KEYS = ("train_global_step", "global_step", "current_steps", "step", "num_updates",
             "iteration", "iter", "trainer_global_step", "_step")
# Bookkeeping keys that are not metrics (progress, wall-clock strings).
IGNORE_KEYS = {"total_steps", "percentage", "elapsed_time", "remaining_time", "runtime", "timestamp",
               "time", "rank", "max_steps", "wandb", "update", "attempt"}
TIME_KEYS = ("_timestamp", "timestamp")
RANK_KEYS = ("rank", "global_rank")


def _norm(col: str) -> str:
    # keep W&B's leading underscore visible: `_step` differs from `step`
    return ("_" if col.startswith("_") else "") + normalise_name(col)


def step_column(columns: list[str]) -> str | None:
    by_norm = {_norm(c): c for c in columns}
    return next((by_norm[k] for k in STEP_KEYS if k in by_norm), None)


def sniff(sample: SniffSample) -> float:
    cols = T.sample_columns(sample)
    if cols is None:
        # fairseq json behind a logger prefix: `... | INFO | train_inner | {"epoch": 1, ...}`
        hits = sum(1 for ln in sample.lines if '{"' in ln and ln.rstrip().endswith("}") and '": "' in ln)
        return 0.5 if hits >= 3 else 0.0
    if T.file_kind(sample.path) != "jsonl":
        return 0.0
    from spikeforensics.ingest import batches, layers

    if layers.looks_like_layers(cols) or batches.looks_like_batches(cols) or layers.looks_like_global_grads(cols):
        return 0.0
    norm = {normalise_name(c) for c in cols}
    metrics = {METRIC_ALIASES.get(n) for n in norm} - {None}
    has_step = step_column(cols) is not None
    if has_step and metrics:
        return 0.85
    return 0.5 if metrics else (0.35 if has_step and len(cols) > 1 else 0.0)


def parse(src: SourceFile) -> ParseResult:
    result = ParseResult()
    objects, bad = T.json_objects(src.lines())
    T.unparsed(result, bad)
    result.add("metrics", metrics_from_objects(objects, src.name, result))
    return result


def metrics_from_objects(objects: pl.DataFrame, source: str, result: ParseResult) -> pl.DataFrame | None:
    """Decoded JSON objects (line + one column per key) -> metrics rows."""
    if objects.height == 0:
        return None
    cols = [c for c in objects.columns if c != "line"]
    step_col = step_column(cols)
    time_col = next((c for c in cols if c in TIME_KEYS), None)
    rank_col = next((c for c in cols if _norm(c) in RANK_KEYS), None)
    skip = {step_col, time_col, rank_col}
    metric_cols = [c for c in cols if c not in skip and _norm(c).lstrip("_") not in IGNORE_KEYS
                   and not c.startswith("_")]
    if step_col:  # a step no run reaches: that record is an unparsed line, the rest of the file stays
        oob = T.out_of_range(objects, step_col)
        bad = objects.filter(oob)
        if bad.height:
            T.unparsed(result, bad.select("line", pl.concat_str(
                pl.lit(f"{step_col} out of range: "), pl.col(step_col).cast(pl.String)).alias("text")))
            objects = objects.filter(~oob)
    wide = objects.select(
        "line",
        (T.integer(objects, step_col) if step_col else pl.lit(None, dtype=pl.Int64)).alias("step"),
        (T.integer(objects, rank_col).cast(pl.Int32) if rank_col else pl.lit(None, dtype=pl.Int32)).alias("prefix_rank"),
        (pl.from_epoch((T.numeric(objects, time_col) * 1e6).cast(pl.Int64, strict=False), time_unit="us")
         if time_col else pl.lit(None, dtype=schema.TIME)).alias("time"),
        *[T.numeric(objects, c).alias(c) for c in metric_cols],
    )
    metric_cols = T.drop_empty_columns(wide, metric_cols)
    wide = wide.with_columns(T.classify_rows(wide, metric_cols).alias("record_kind")).filter(
        pl.col("record_kind").is_not_null()
    )
    if wide.height == 0:
        return None
    wide, attempts = dedupe_writers(wide)
    meta = ["line", "step", "prefix_rank", "time"]
    wide, names = T.canonical_wide(wide, metric_cols, meta)
    metrics = records_to_metrics(wide, source, names)
    result.records += metrics.get_column("line").n_unique()
    return fix_attempts(metrics, attempts)


def dedupe_writers(wide: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Attempt numbers robust to interleaved writers, and repeated steps dropped.

    Returns the wide frame without the second writer's repeats, and (line, attempt)
    for every kept row (eval/summary rows take the attempt of the record before them).
    """
    stream = pl.col("prefix_rank").fill_null(-1)
    train = wide.filter((pl.col("record_kind") == "train") & pl.col("step").is_not_null())
    # collapse consecutive repeats first (the duplicate-writer pattern)
    prev = pl.col("step").shift(1).over(stream)
    train = train.filter(prev.is_null() | (pl.col("step") != prev))
    p1 = pl.col("step").shift(1).over(stream)
    p2 = pl.col("step").shift(2).over(stream)
    back = (pl.col("step") < pl.min_horizontal(p1, p2.fill_null(p1))).fill_null(False)
    train = train.with_columns(back.cum_sum().over(stream).cast(pl.Int32).alias("attempt"))
    repeat = pl.col("line").rank("ordinal").over(stream, "attempt", "step") > 1
    dropped = train.filter(repeat).get_column("line")
    attempts = train.filter(~repeat).select("line", "attempt")
    kept = wide.filter(~pl.col("line").is_in(dropped.implode()))
    all_attempts = (
        kept.select("line").join(attempts, on="line", how="left").sort("line")
        .with_columns(pl.col("attempt").forward_fill().fill_null(0))
    )
    return kept, all_attempts


def fix_attempts(metrics: pl.DataFrame, attempts: pl.DataFrame) -> pl.DataFrame:
    """Replace `records_to_metrics`' attempt (which counts every step decrease) by ours."""
    if metrics.height == 0:
        return metrics
    fixed = metrics.drop("attempt").join(attempts, on="line", how="left")
    return schema.conform("metrics", fixed).sort("line", "name")
