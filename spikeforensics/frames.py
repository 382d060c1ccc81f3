"""Frame helpers that skip copies a long run cannot afford (issues 14/16).

A polars `filter` that keeps every row, or a `sort` of rows already in order, still writes a new buffer for
every column: on a 10M-record timeline of 18 columns that is 1.4 GB for nothing. These return the frame
itself (its columns shared, not copied) when the filter or the sort would change nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl


def rows_where(frame: pl.DataFrame, keep: pl.Expr) -> pl.DataFrame:
    """`frame.filter(keep)`, but the frame itself when `keep` holds on every row, and a slice of it (sharing its
    buffers) when the rows kept are one contiguous stretch (a baseline that starts after its first records)."""
    mask = frame.select(keep.fill_null(False).alias("_keep")).get_column("_keep")
    n = int(mask.sum())
    if n == frame.height:
        return frame
    first = int(mask.arg_max() or 0) if n else 0
    if n and mask.slice(first, n).all():
        return frame.slice(first, n)
    return frame.filter(mask)


def ordered(frame: pl.DataFrame, *keys: str) -> bool:
    """Every row strictly after the one before in the order of `keys` (lexicographic), none of them null: a
    sort by `keys` would change nothing."""
    if frame.height < 2:
        return True
    if any(frame.get_column(k).null_count() for k in keys):
        return False
    after = pl.lit(False)  # row i strictly after row i-1
    for k in reversed(keys):
        d = pl.col(k).diff()
        after = (d > 0) | ((d == 0) & after)
    return bool(frame.select(after.slice(1).all()).item())


def in_order(frame: pl.DataFrame, *keys: str) -> pl.DataFrame:
    """`frame.sort(*keys)`, but the frame itself when it is already in that order (`ordered`)."""
    return frame if ordered(frame, *keys) else frame.sort(*keys)


def per_group(frame: pl.DataFrame, key: str, over: str | None = None) -> Callable[[pl.Expr], pl.Expr]:
    """A wrapper putting an expression `.over(over or key)` when `frame` holds several values of `key`, and
    leaving it as it is with one (a timeline's global rows, a single rank): the same values, without a grouping
    by a constant key, which writes each group's value out as a column of every row (80 MB at 10M rows)."""
    return (lambda e: e) if one_group(frame, key) else (lambda e: e.over(over or key))


def one_group(frame: pl.DataFrame, key: str) -> bool:
    """`key` holds one value on every row (all null counts as one)."""
    col = frame.get_column(key)
    nulls = col.null_count()
    return nulls == col.len() or (nulls == 0 and col.min() == col.max())


# Rows of a long table aggregated at once by `in_slices`: an in-memory query takes every column it reads out of the
# store whole (a 22.6M-row metrics table: +300 MB for a query that keeps a few rows).
SLICE_ROWS = 1 << 21


def in_slices(
    rows: pl.LazyFrame,
    query: Callable[[pl.LazyFrame], pl.LazyFrame],
    combine: Callable[[pl.DataFrame], pl.DataFrame],
    slice_rows: int | None = None,
) -> pl.DataFrame:
    """`combine(concat(query(slice)))` over slices of `slice_rows` rows of `rows` (each read on its own): for a
    query whose partial results combine (sums and counts per key, distinct keys), the same as
    `query(rows).collect()` at the memory of one slice. `rows` is the table as stored (a scan): a filter before
    the slice would be read over the whole table."""
    slice_rows = slice_rows or SLICE_ROWS
    total = rows.select(pl.len()).collect().item()
    parts = [query(rows.slice(offset, slice_rows)).collect() for offset in range(0, max(total, 1), slice_rows)]
    return combine(pl.concat(parts))
