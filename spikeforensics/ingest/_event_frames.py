"""The `events`-table frames the text event families build (`text_events`, `run_facts`):
their columns and types, an empty one, and `_ret`, which turns matched lines into event rows."""

from __future__ import annotations

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest.base import bounded_int, extract_time

EVENT_COLUMNS = {
    "line": pl.Int64,
    "step": pl.Int64,
    "rank": pl.Int32,
    "kind": pl.String,
    "time": schema.TIME,
    "detail": pl.String,
}


def empty_events() -> pl.DataFrame:
    return pl.DataFrame(schema=EVENT_COLUMNS)


def _ret(frame: pl.DataFrame, kind: pl.Expr | str, detail: pl.Expr, step: pl.Expr | None = None) -> pl.DataFrame:
    kind_expr = pl.lit(kind) if isinstance(kind, str) else kind
    return frame.select(
        "line",
        (bounded_int(step) if step is not None else pl.lit(None, dtype=pl.Int64)).alias("step"),
        pl.col("prefix_rank").cast(pl.Int32).alias("rank"),
        kind_expr.alias("kind"),
        extract_time(pl.col("text")).alias("time"),
        detail.alias("detail"),
    )
