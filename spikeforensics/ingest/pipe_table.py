"""A training table with `|` between its cells: HF Trainer's notebook progress table (`NotebookProgressCallback`
renders `Step | Training Loss | Validation Loss | ...` as HTML; copied into an issue it becomes a Markdown
table) and any Markdown table of per-step or per-epoch metrics:

    Step | Training Loss | reward | reward_std | kl | entropy
    -- | -- | -- | -- | -- | --
    1 | -0.283600 | 13.437500 | 21.810942 | nan | 0
    2 | -0.149100 | 6.931818 | 14.526671 | nan | No Log

A header row with a counter cell (`Step`, `Epoch`, `Iteration`, `Iter`) and a loss cell, in any order
(sentence-transformers' model cards: `| Epoch | Step | Training Loss |`, the Trainer's `| Training Loss | Epoch |
Step | Validation Loss |`), then a rule row of dashes (`--`, `:---:`), then the rows; leading and trailing pipes
are optional. The step is the `Step` (or `Iteration`) cell wherever it sits, else the `Epoch` cell when it holds
whole numbers, else the row count (a fractional epoch alone); the epoch stays a value. Cell names go through the alias table (`Training Loss` -> `loss`, `Validation Loss` ->
`eval_loss`); `No Log` (the Trainer's cell for a value not logged at that row) and empty cells are no value,
`nan` a value. A new header starts a new table (a re-run cell); a row with another number of cells is
unparsed.

MATLAB's `trainNetwork` / `trainYOLOv2ObjectDetector` verbose table frames a header of two or three rows
between rules of `=` and splits each name over them; a name is its column's cells joined (`Mini-batch` +
`Loss` -> `Mini-batch Loss` -> `loss`, `Base Learning` + `Rate` -> `lr`, `Validation Loss` -> `eval_loss`):

    |======================================================================================================================|
    |  Epoch  |  Iteration  |  Time Elapsed  |  Mini-batch  |  Validation  |  Mini-batch  |  Validation  |  Base Learning  |
    |         |             |   (hh:mm:ss)   |     RMSE     |     RMSE     |     Loss     |     Loss     |      Rate       |
    |======================================================================================================================|
    |       1 |           1 |       00:00:12 |         6.04 |         2.89 |      36.4648 |       8.3261 |          0.0010 |
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
# a header row naming a counter cell and a loss cell, in any order (`| Training Loss | Epoch | Step | Validation Loss |`,
# the Trainer's model-card table)
COUNTER_CELL = r"(?:global[ _]step|step|epoch|iteration|iter)"
HEADER = (
    rf"(?i)^\s*\|?(?:[^|\n]*\|)*\s*{COUNTER_CELL}\s*\|(?:[^|\n]*\|?)*loss"
    rf"|(?i)^\s*\|?(?:[^|\n]*\|)*[^|\n]*loss[^|\n]*\|(?:[^|\n]*\|)*\s*{COUNTER_CELL}\s*(?:\||$)"
)
STEP_CELLS = ("step", "global_step", "iteration", "iter")
RULE = r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)+\|?\s*$"
# MATLAB's header frame: a rule of `=` (`|=====|`), the header's rows between two of them
FRAME = r"^\s*(?:%\s*)?\|?={3,}\|?\s*$"  # also behind a MATLAB comment's `% ` (a table pasted into a script)
FRAMED_COUNTER = rf"(?i)^\s*(?:%\s*)?\|(?:[^|\n]*\|)*\s*{COUNTER_CELL}\s*\|"
FRAMED_HEADER_ROWS = 3
# a row: cells between pipes, one of them a number
ROW = r"^\s*\|?[^|\n]*\|(?:[^|\n]*\|?)*" + r"(?:^|\|)\s*[-+]?\d"


def sniff(sample: SniffSample) -> float:
    rows = sniff_share(sample, ROW) >= 2
    if sniff_share(sample, HEADER) and sniff_share(sample, RULE) and rows:
        return 0.9
    framed = sniff_share(sample, FRAME) >= 2 and sniff_share(sample, FRAMED_COUNTER)
    return 0.9 if framed and sniff_share(sample, r"(?i)^\s*(?:%\s*)?\|.*\bloss\b") and rows else 0.0


def _cells(expr: pl.Expr) -> pl.Expr:
    """The cells of a `|` row, outer pipes (and a MATLAB comment's leading `%`) dropped."""
    return (
        expr.str.replace(r"^\s*%\s*\|", "|")
        .str.strip_chars()
        .str.strip_chars("|")
        .str.split("|")
        .list.eval(pl.element().str.strip_chars())
    )


def _framed_headers(lines: pl.DataFrame) -> list[tuple[int, list[str]]]:
    """MATLAB's headers: 2-3 rows of as many cells between two `=` rules, each column's cells joined into its
    name; a header names a counter and a loss. Each is placed at its closing rule, where its rows start."""
    text = pl.col("text")
    frames = lines.filter(text.str.contains(FRAME)).get_column("line").to_list()
    out = []
    for start, end in zip(frames, frames[1:], strict=False):
        block = lines.filter((pl.col("line") > start) & (pl.col("line") < end)).select(_cells(text)).to_series()
        widths = block.list.len().unique()
        if not 2 <= block.len() <= FRAMED_HEADER_ROWS or widths.len() != 1 or widths[0] < 2:
            continue
        cols = [" ".join(c for c in parts if c) for parts in zip(*block.to_list(), strict=True)]
        names = [normalise_name(c) for c in cols]
        if any(n in (*STEP_CELLS, "epoch") for n in names) and any("loss" in n for n in names):
            out.append((end, cols))
    return out


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    headers = lines.filter(text.str.contains(HEADER)).select("line", _cells(text).alias("_h")).rows()
    headers = sorted([*headers, *_framed_headers(lines)])
    if not headers:
        return ParseResult()
    rows = lines.filter(text.str.contains(ROW) & ~text.str.contains(RULE)).with_columns(_cells(text).alias("_c"))
    records, values, unparsed = [], [], []
    bounds = [*headers, (None, None)]
    for (start, cols), (end, _) in zip(bounds, bounds[1:], strict=False):
        block = rows.filter((pl.col("line") > start) & ((pl.col("line") < end) if end else pl.lit(True)))
        fits = block.filter(pl.col("_c").list.len() == len(cols))
        unparsed.append(block.filter(pl.col("_c").list.len() != len(cols)).select("line", "text"))
        names = [normalise_name(c) for c in cols]
        # the step: a `Step` column wherever it sits, else the epoch when whole numbers, else the row count
        at = next((j for j, c in enumerate(names) if c in STEP_CELLS), None)
        epoch_at = next((j for j, c in enumerate(names) if c == "epoch"), None)
        if at is None and epoch_at is not None:
            whole = fits.select(
                pl.col("_c").list.get(epoch_at).cast(pl.Float64, strict=False).round(0)
                == pl.col("_c").list.get(epoch_at).cast(pl.Float64, strict=False)
            )
            at = epoch_at if whole.height and whole.to_series().all() else None
        step = (
            pl.col("_c").list.get(at).cast(pl.Float64, strict=False)
            if at is not None
            else (pl.int_range(pl.len()) + 1 + sum(r.height for r in records)).cast(pl.Float64)
        )
        records.append(
            fits.select(
                "line",
                step_int(step).alias("step"),
                "prefix_rank",
                pl.lit("train").alias("record_kind"),
                pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
            )
        )
        pairs = pl.concat(
            [
                fits.select("line", pl.lit(name).alias("k"), pl.col("_c").list.get(j).alias("v"))
                for j, name in enumerate(cols)
                if j != at or names[j] == "epoch"
            ]
        ).filter(~pl.col("v").str.to_lowercase().is_in(["no log", "", "-"]))
        values.append(named_values(pairs).select("line", "name", "value"))
    recs = pl.concat(records)
    return text_result(src.name, lines, recs, pl.concat(values), pl.concat(unparsed), mode="done")
