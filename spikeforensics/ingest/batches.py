"""Batch manifests (JSONL, CSV, Parquet) -> the `batches` table (one row per sample).

Recognised by columns (names through `aliases.BATCH_COLUMN_ALIASES`, extendable by a
user TOML). Two layouts:

- one row per step (or per micro-batch) with a `sample_ids` list, optionally a
  parallel `sample_losses` list and `tokens` (a parallel list, or one number: the
  row's total, shared evenly by its samples, rounded, so per-step sums stay right);
- one row per sample with `sample_id`, optionally `sample_loss`, `tokens`.

Both may carry `step`, `rank`, `micro` and `source` (stored as `sample_source`). In
CSV a list is either JSON (`["a", "b"]`) or separated by `;`, `|` or spaces.
"""

from __future__ import annotations

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest import _tables as T
from spikeforensics.ingest import aliases
from spikeforensics.ingest.aliases import rename_columns
from spikeforensics.ingest.base import ParseResult, SniffSample, SourceFile, to_float

NAME = "batches"
BINARY = True  # Parquet manifests

_SCALARS = ("step", "rank", "micro", "sample_source")


def _canonical(columns: list[str]) -> dict[str, str]:
    return rename_columns(columns, aliases.BATCH_COLUMN_ALIASES)


def looks_like_batches(columns: list[str]) -> bool:
    canon = set(_canonical(columns).values())
    return bool({"sample_id", "sample_ids"} & canon)


def sniff(sample: SniffSample) -> float:
    cols = T.sample_columns(sample)
    if not cols or not looks_like_batches(cols):
        return 0.0
    return 0.9 if "step" in _canonical(cols).values() else 0.6


def parse(src: SourceFile, chunk_bytes: int | None = None) -> ParseResult:
    from spikeforensics.ingest.layers import side_table_chunks

    result = ParseResult()
    kind = T.file_kind(src.path)
    if kind == "npz":
        raise T.ingest_error(f"{src.path}: batch manifests are read from JSONL, CSV or Parquet, not NPZ")
    parts, lacking = [], None
    for frame in side_table_chunks(src, kind, result, chunk_bytes):
        columns = [c for c in frame.columns if c != "line"]
        if not looks_like_batches(columns):  # its rows are unparsed (the file fails if no chunk has ids)
            lacking = lacking or columns
            T.unparsed(result, frame.select("line", pl.lit("row without sample ids").alias("text")))
            continue
        parts.append(_batch_rows(frame.rename(_canonical(columns)), result))
    if lacking is not None and not parts:
        raise T.ingest_error(
            f"{src.path}: not a batch manifest: no sample_id or sample_ids column (found: {T.shown_names(lacking)})"
        )
    if parts:
        result.add("batches", schema.conform("batches", pl.concat(parts, how="diagonal_relaxed")))
    return result


def _batch_rows(frame: pl.DataFrame, result: ParseResult) -> pl.DataFrame:
    """A manifest frame (canonical column names) -> batches rows, one per sample; rows without
    sample ids and steps out of range are unparsed."""
    if "step" in frame.columns:  # a step no run reaches: that row is unparsed, the rest stays
        oob = T.out_of_range(frame, "step")
        bad = frame.filter(oob)
        if bad.height:
            T.unparsed(result, bad.select("line", pl.lit("step out of range").alias("text")))
            frame = frame.filter(~oob)
    frame = frame.with_row_index("_row")
    scalars = [
        pl.col("line"),
        pl.col("_row"),
        *[
            (T.integer(frame, c) if c != "sample_source" else pl.col(c).cast(pl.String)).alias(c)
            for c in _SCALARS
            if c in frame.columns
        ],
    ]
    if "sample_ids" in frame.columns:
        rows = per_step_rows(frame, scalars)
    else:
        rows = frame.select(
            *scalars,
            _id_text(frame, "sample_id").alias("sample_id"),
            *([T.numeric(frame, "sample_loss").alias("sample_loss")] if "sample_loss" in frame.columns else []),
            *([T.integer(frame, "tokens").alias("tokens")] if "tokens" in frame.columns else []),
        )
    good = pl.col("sample_id").is_not_null() & (pl.col("sample_id") != "")
    bad_rows = rows.filter(~good).get_column("_row").unique()
    if bad_rows.len():
        raw = frame.filter(pl.col("_row").is_in(bad_rows.implode()))
        T.unparsed(result, raw.select("line", pl.lit("row without sample ids").alias("text")))
    rows = rows.filter(good)
    result.records += rows.get_column("_row").n_unique()
    return rows.drop("_row")


def _id_text(frame: pl.DataFrame, col: str) -> pl.Expr:
    dtype = frame.schema[col]
    if dtype.is_float():  # ids stored as floats by a CSV/Parquet writer: 12.0 -> "12"
        return pl.col(col).cast(pl.Int64, strict=False).cast(pl.String)
    return pl.col(col).cast(pl.String).str.strip_chars()


def as_list(frame: pl.DataFrame, col: str) -> pl.Expr:
    """A list-valued column as List(String): native lists, JSON text or separated text."""
    dtype = frame.schema[col]
    if isinstance(dtype, (pl.List, pl.Array)):
        return pl.col(col).cast(pl.List(pl.String))
    if dtype != pl.String:
        return pl.col(col).cast(pl.String).cast(pl.List(pl.String))
    text = pl.col(col).str.strip_chars()
    is_json = text.str.starts_with("[")
    as_json = T.safe_json(text).str.json_decode(pl.List(pl.String))
    separated = text.str.replace_all(r"[;|\s]+", " ").str.strip_chars().str.split(" ")
    return pl.when(is_json).then(as_json).otherwise(separated)


def per_step_rows(frame: pl.DataFrame, scalars: list[pl.Expr]) -> pl.DataFrame:
    """Explode `sample_ids` (and the parallel lists) into one row per sample."""
    ids = frame.select(*scalars, as_list(frame, "sample_ids").alias("sample_id"))
    ids = ids.with_columns(
        pl.int_ranges(0, pl.col("sample_id").list.len()).alias("_pos"), pl.col("sample_id").list.len().alias("_n")
    ).explode("sample_id", "_pos")
    ids = ids.with_columns(pl.col("sample_id").str.strip_chars().str.strip_chars("'\""))
    for col, target in (("sample_losses", "sample_loss"), ("sample_loss", "sample_loss"), ("tokens", "tokens")):
        if col not in frame.columns or target in ids.columns:
            continue
        par = _parallel(frame, col)
        # a one-element list on a row of several samples is one number for the row
        single = par.group_by("_row").agg(pl.len().alias("_len"), pl.col("_l").first().alias("_one"))
        ids = ids.join(par, on=["_row", "_pos"], how="left").join(single, on="_row", how="left")
        ids = ids.join(frame.select("_row", _scalar_text(frame, col).alias("_s")), on="_row", how="left")
        one = (pl.col("_len") == 1) & (pl.col("_n") > 1)
        ids = ids.with_columns(
            pl.when(one).then(None).otherwise(pl.col("_l")).alias("_l"),
            pl.when(one).then(pl.col("_one")).otherwise(pl.col("_s")).alias("_s"),
        ).drop("_len", "_one")
        scalar = to_float(pl.col("_s"))
        if target == "tokens":  # one number for the row: its total, shared evenly by its samples
            scalar = (scalar / pl.col("_n")).round(0)
        value = pl.coalesce(to_float(pl.col("_l")), scalar)
        if target == "tokens":
            value = value.cast(pl.Int64, strict=False)
        ids = ids.with_columns(value.alias(target)).drop("_l", "_s")
    return ids.sort("_row", "_pos").drop("_pos", "_n")


def _is_list_value(frame: pl.DataFrame, col: str) -> pl.Expr:
    dtype = frame.schema[col]
    if isinstance(dtype, (pl.List, pl.Array)):
        return pl.lit(True)
    if dtype == pl.String:
        return pl.col(col).str.strip_chars().str.starts_with("[").fill_null(False)
    return pl.lit(False)


def _parallel(frame: pl.DataFrame, col: str) -> pl.DataFrame:
    """(_row, _pos, _l): the elements of a list-valued cell, as text."""
    rows = frame.filter(_is_list_value(frame, col))
    if rows.height == 0:
        return pl.DataFrame(schema={"_row": pl.UInt32, "_pos": pl.Int64, "_l": pl.String})
    part = rows.select("_row", as_list(rows, col).alias("_l"))
    return part.with_columns(pl.int_ranges(0, pl.col("_l").list.len()).alias("_pos")).explode("_l", "_pos")


def _scalar_text(frame: pl.DataFrame, col: str) -> pl.Expr:
    """A cell that is one number (not a list), as text; null for list cells."""
    dtype = frame.schema[col]
    if isinstance(dtype, (pl.List, pl.Array)):
        return pl.lit(None, dtype=pl.String)
    return pl.when(~_is_list_value(frame, col)).then(pl.col(col).cast(pl.String))
