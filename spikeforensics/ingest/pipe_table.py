"""A training table with `|` between its cells: HF Trainer's notebook progress table (`NotebookProgressCallback`
renders `Step | Training Loss | Validation Loss | ...` as HTML; copied into an issue it becomes a Markdown
table) and any Markdown table of per-step or per-epoch metrics:

    Step | Training Loss | reward | reward_std | kl | entropy
    -- | -- | -- | -- | -- | --
    1 | -0.283600 | 13.437500 | 21.810942 | nan | 0
    2 | -0.149100 | 6.931818 | 14.526671 | nan | No Log

A header row whose first cell is the counter (`Step`, `Epoch`, `Iteration`, `Iter`) and that names a loss, then
a rule row of dashes (`--`, `---:`), then rows whose first cell is the counter's number; leading and trailing
pipes are optional. Cell names go through the alias table (`Training Loss` -> `loss`, `Validation Loss` ->
`eval_loss`); `No Log` (the Trainer's cell for a value not logged at that row) and empty cells are no value,
`nan` a value. Step = the first cell (an `Epoch` table: the epoch). A new header starts a new table (a
re-run cell); a row with another number of cells is unparsed.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._fields import normalise_name
from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    named_values,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "pipe_table"
HEADER = r"(?i)^\s*\|?\s*(?:global[ _]step|step|epoch|iteration|iter)\s*\|(?:[^|\n]*\|)*[^|\n]*loss"
RULE = r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)+\|?\s*$"
ROW = r"^\s*\|?\s*\d+(?:\.\d+)?\s*\|"


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, HEADER) and sniff_share(sample, RULE) and sniff_share(sample, ROW) >= 2 else 0.0


def _cells(expr: pl.Expr) -> pl.Expr:
    """The cells of a `|` row, outer pipes dropped."""
    return expr.str.strip_chars().str.strip_chars("|").str.split("|").list.eval(pl.element().str.strip_chars())


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    headers = lines.filter(text.str.contains(HEADER)).select("line", _cells(text).alias("_h")).rows()
    if not headers:
        return ParseResult()
    rows = lines.filter(text.str.contains(ROW) & ~text.str.contains(RULE)).with_columns(_cells(text).alias("_c"))
    records, values, unparsed = [], [], []
    bounds = [*headers, (None, None)]
    for (start, cols), (end, _) in zip(bounds, bounds[1:], strict=False):
        block = rows.filter((pl.col("line") > start) & ((pl.col("line") < end) if end else pl.lit(True)))
        fits = block.filter(pl.col("_c").list.len() == len(cols))
        unparsed.append(block.filter(pl.col("_c").list.len() != len(cols)).select("line", "text"))
        records.append(
            fits.select(
                "line",
                step_int(pl.col("_c").list.get(0).cast(pl.Float64, strict=False)).alias("step"),
                "prefix_rank",
                pl.lit("train").alias("record_kind"),
                pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
            )
        )
        counter = normalise_name(cols[0])
        pairs = pl.concat(
            [
                fits.select("line", pl.lit(name).alias("k"), pl.col("_c").list.get(j).alias("v"))
                for j, name in enumerate(cols)
                if j > 0 or counter == "epoch"
            ]
        ).filter(~pl.col("v").str.to_lowercase().is_in(["no log", "", "-"]))
        values.append(named_values(pairs).select("line", "name", "value"))
    recs = pl.concat(records)
    return text_result(src.name, lines, recs, pl.concat(values), pl.concat(unparsed), mode="done")
