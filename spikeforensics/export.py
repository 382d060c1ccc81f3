"""`export`: one table of a run in the canonical columns of CONTRACT.md.

JSON has no NaN, so in JSONL a non-finite float is written as the string "nan",
"inf" or "-inf"; an event's `detail` is written as a JSON object. The JSONL text is
built with polars expressions (no Python loop per row).
"""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl

from spikeforensics import schema

EXPORT_FORMATS = ("jsonl", "csv", "parquet")
EXPORT_TABLES = ("metrics", "events", "layers", "batches", "telemetry", "sources")

# Columns in the order CONTRACT.md lists them; our extra columns follow.
EXPORT_COLUMNS = {
    "metrics": ["source", "line", "step", "record", "attempt", "rank", "name", "value", "time"],
    "events": ["source", "line", "step", "rank", "kind", "time", "detail", "attempt"],
    "layers": [
        "source",
        "line",
        "step",
        "rank",
        "layer",
        "grad_norm",
        "zero_frac",
        "pos_frac",
        "max_abs",
        "numel",
        "param_norm",
        "update_norm",
    ],
    "batches": ["source", "line", "step", "rank", "micro", "sample_id", "sample_loss", "tokens", "sample_source"],
    "sources": list(schema.TABLES["sources"]),
}


def export_frame(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """The stored table reshaped for export (telemetry pivoted to one column per field)."""
    if table == "telemetry":
        index = ["source", "line", "time", "host", "gpu"]
        if frame.height == 0:
            return pl.DataFrame(schema={c: schema.TABLES["telemetry"][c] for c in index})
        wide = frame.pivot(on="field", index=index, values="value", aggregate_function="first")
        return wide.sort("source", "line", nulls_last=True)
    cols = EXPORT_COLUMNS[table]
    return frame.select(cols)


def _json_literal(name: str, dtype: pl.DataType) -> pl.Expr:
    """`"name":<json value>` for one column, as a string expression."""
    col = pl.col(name)
    key = pl.lit(f'"{name}":')
    if name == "detail":
        value = col.fill_null("null")
    elif dtype.is_float():
        value = (
            pl.when(col.is_null())
            .then(pl.lit("null"))
            .when(col.is_nan())
            .then(pl.lit('"nan"'))
            .when(col == float("inf"))
            .then(pl.lit('"inf"'))
            .when(col == float("-inf"))
            .then(pl.lit('"-inf"'))
            .otherwise(col.cast(pl.String))
        )
        return pl.concat_str(key, value)
    else:
        encoded = pl.struct(col).struct.json_encode()
        return encoded.str.slice(1, encoded.str.len_chars() - 2)
    return pl.concat_str(key, value)


def to_jsonl(frame: pl.DataFrame) -> str:
    if frame.height == 0:
        return ""
    parts = [_json_literal(c, frame.schema[c]) for c in frame.columns]
    lines = frame.select(pl.concat_str([pl.lit("{"), pl.concat_str(parts, separator=","), pl.lit("}")]).alias("j"))
    return "\n".join(lines.get_column("j").to_list()) + "\n"


def _csv_ready(frame: pl.DataFrame) -> pl.DataFrame:
    exprs = []
    for name, dtype in frame.schema.items():
        col = pl.col(name)
        if dtype.is_float():
            exprs.append(
                pl.when(col.is_nan())
                .then(pl.lit("nan"))
                .when(col == float("inf"))
                .then(pl.lit("inf"))
                .when(col == float("-inf"))
                .then(pl.lit("-inf"))
                .otherwise(col.cast(pl.String))
                .alias(name)
            )
        else:
            exprs.append(col)
    return frame.select(exprs)


def write_export(frame: pl.DataFrame, fmt: str, out: str | Path | None) -> bytes | None:
    """Write to `out`, or return the bytes for stdout when `out` is None."""
    if fmt == "jsonl":
        data = to_jsonl(frame).encode()
    elif fmt == "csv":
        data = _csv_ready(frame).write_csv().encode()
    elif fmt == "parquet":
        buf = io.BytesIO()
        frame.write_parquet(buf)
        data = buf.getvalue()
    else:
        raise ValueError(f"unknown export format {fmt!r}")
    if out is None:
        return data
    Path(out).write_bytes(data)
    return None
