"""Small helpers shared by the one-regex record grammars (mlx-lm, litgpt, insightface,
detectron2, MetricLogger, wav2letter, tqdm postfixes). Kept out of `base.py` (the driver's
module); every helper is vectorised (polars expressions over the lines frame).
"""

from __future__ import annotations

import re

import polars as pl

from spikeforensics.ingest._fields import normalise_name
from spikeforensics.ingest.base import captured_values, extract_time, step_int

VALUE_SCHEMA = {"line": pl.Int64, "name": pl.String, "value": pl.Float64}

# A number as C's printf writes it, NaN and Inf included in every C library's spelling: `-nan`, `nan`, `inf`,
# MSVC's `-nan(ind)`, `1.#QNAN0`, `1.#INF00`, `-1.#IND00` (darknet, CNTK: C/C++ trainers run on Windows)
CNUM = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+|1\.#(?:QNAN|INF|IND|SNAN)\d*|[Nn]a[Nn](?:\([a-z]*\))?|[Ii]nf)"


def snake_case(name: str) -> str:
    """A CamelCase metric or node name in the store's spelling: `WeightedCategoryAccuracy` ->
    `weighted_category_accuracy`, `Err` -> `err` (then `normalise_name`: other separators as `_`)."""
    return normalise_name(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name))


def c_number(expr: pl.Expr) -> pl.Expr:
    """C printf spellings of NaN/Inf (`CNUM`) as the tokens `to_float` reads."""
    lower = expr.str.to_lowercase()
    return (
        pl.when(lower.str.contains(r"#(?:qnan|snan|ind)|nan"))
        .then(pl.lit("nan"))
        .when(lower.str.contains(r"#inf"))
        .then(pl.when(lower.str.starts_with("-")).then(pl.lit("-inf")).otherwise(pl.lit("inf")))
        .otherwise(expr)
    ).alias(expr.meta.output_name())


def grammar_records(
    cand: pl.DataFrame,
    pattern: str,
    cols: dict[str, str],
    kind: str = "train",
    step_group: str = "step",
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Lines of `cand` that match `pattern` (named groups) -> (records, values, rest).

    `records`: `line`, `step` (Int64 from group `step_group`), `prefix_rank`, `record_kind`,
    `time`; `values`: long (`line`, `name`, `value`) from the groups in `cols` (group ->
    metric name); `rest`: the lines of `cand` the pattern did not claim."""
    g = cand.with_columns(pl.col("text").str.extract_groups(pattern).alias("_g")).unnest("_g")
    hit = g.filter(pl.col(step_group).is_not_null())
    records = hit.select(
        "line",
        step_int(pl.col(step_group)).alias("step"),
        "prefix_rank",
        pl.lit(kind).alias("record_kind"),
        extract_time(pl.col("text")).alias("time"),
    )
    values = captured_values(hit, cols) if hit.height else pl.DataFrame(schema=VALUE_SCHEMA)
    rest = cand.join(hit.select("line"), on="line", how="anti")
    return records, values, rest


def scale_metric(values: pl.DataFrame, name: str, new_name: str, factor: float) -> pl.DataFrame:
    """Rename metric `name` to `new_name`, multiplying its values by `factor` (units)."""
    is_it = pl.col("name") == name
    return values.with_columns(
        pl.when(is_it).then(pl.col("value") * factor).otherwise(pl.col("value")).alias("value"),
        pl.when(is_it).then(pl.lit(new_name)).otherwise(pl.col("name")).alias("name"),
    )


def empty_values() -> pl.DataFrame:
    return pl.DataFrame(schema=VALUE_SCHEMA)


def block_owners(lines: pl.DataFrame, is_head: pl.Expr, is_break: pl.Expr) -> pl.DataFrame:
    """`lines` (sorted by line) with `_blk`: for a line under a block header (Coqui's `--> STEP`, RSL-RL's
    `Learning iteration`), the header's line number, up to the next header or a line where `is_break`
    holds; -1 or null elsewhere (break lines, lines before the first header). Headers own themselves."""
    return (
        lines.sort("line")
        .with_columns(pl.when(is_head).then(pl.col("line")).when(is_break).then(pl.lit(-1)).alias("_blk"))
        .with_columns(pl.col("_blk").forward_fill())
    )
