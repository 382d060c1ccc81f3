"""A table of bare numbers without a header: a loop that appends its values to a file, one row per step or
epoch, and names none of them (a DQN's `loss_log.txt` of `16.84,-210.47` rows, `f.write(f'{loss:.2f},{reward}')`;
timm's `summary.csv` pasted without its header row, `200,4.4025,4.1356,7.76,24.44`):

    16.84,-210.47
    10.07,-158.77
    200,4.4025687376658125,4.13563300743103,7.760000015258789,24.43999983520508

Every row holds 2 to 8 numbers (`nan`/`inf` included) under one separator (comma, semicolon, tab or spaces),
the same count on every row, and some column holds real numbers (a table of integers is an index or counts). A first column of integers that rise strictly through the file is the counter
(the step: timm's epoch); the first value after it is stored as `loss` and the others as `column_<n>`, n its
column in the file, because a loop that logs its loss puts it first (timm's `train_loss`, the DQN's summed
loss) and the file says nothing more. Without such a counter the rows are step-less records in file order
(CONTRACT: step null where the log prints none). A paste's opening and closing backtick are no part of a row.

Its sniffer is unsure (0.3): every reader that knows the file's shape wins, and a file with any word in it
is no bare table. As the table names nothing, only its file's name can say it is a log (`loss`, `log`, `train`,
`metric`, `summary`, `progress`, `history`, `stat`, `curve`, `result` in it, or a `.log`/`.out`/`.txt` file):
`iris.csv` or `predictions.csv` in a run folder is data. The shape is decided on the file's first 400
non-blank lines; rows of another width or other lines after them are unparsed, not a reason to drop the file.
"""

from __future__ import annotations

import re

import polars as pl

from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    prepared_lines,
    step_int,
    text_result,
)

NAME = "headerless_table"
N = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+|(?i:nan|inf))"
SEPARATORS = {",": r"\s*,\s*", ";": r"\s*;\s*", "\t": r"\t", " ": r" +"}
MIN_COLUMNS, MAX_COLUMNS = 2, 8
MIN_ROWS = 5  # rows of the sniffed head: a handful of number pairs is no log yet
MIN_SHARE = 0.95  # of the head's non-blank lines (a banner line or two may open the file)
CONFIDENCE = 0.3
SHAPE_LINES = 400  # the non-blank lines the shape is decided on (about what the sniffer sees)
# a file name that says it holds a log (see `sniff`)
LOG_NAME = r"(?i)loss|log|train|metric|summary|progress|history|stat|curve|result|\.(?:log|out|txt)$"


def _row(sep: str) -> str:
    s = SEPARATORS[sep]
    return rf"^\s*`?\s*{N}(?:{s}{N}){{{MIN_COLUMNS - 1},{MAX_COLUMNS - 1}}}\s*`?\s*$"


def _shape(texts: pl.Series) -> tuple[str, int] | None:
    """(separator, columns) that every row of `texts` (non-blank lines) fits, with >= MIN_SHARE of them rows."""
    solid = texts.filter(texts.str.strip_chars() != "")
    if solid.len() < MIN_ROWS:
        return None
    for sep in SEPARATORS:
        rows = solid.filter(solid.str.contains(_row(sep)))
        if rows.len() < MIN_ROWS or rows.len() < MIN_SHARE * solid.len():
            continue
        cells = _cells(rows, sep)
        counts = cells.list.len().unique()
        if counts.len() == 1 and _real_valued(cells):
            return sep, int(counts[0])
    return None


def _real_valued(cells: pl.Series) -> bool:
    """Some column holds real numbers (a point, an exponent, nan/inf) on at least half the rows: a loss is
    real-valued, a table of integers (`wc -l` output, an index, counts) is no training log."""
    width = cells.list.len().max()
    real = r"(?i)[.e]|nan|inf"
    return any(
        float(cells.list.get(i, null_on_oob=True).str.contains(real).fill_null(False).mean()) >= 0.5
        for i in range(width)
    )


def _cells(texts: pl.Series | pl.Expr, sep: str):
    body = texts.str.strip_chars().str.strip_chars("`").str.strip_chars()
    return body.str.split(",") if sep == "," else body.str.extract_all(rf"{N}")


def sniff(sample: SniffSample) -> float:
    # a table that names nothing is a training log only by its file's name (`loss_log.txt`, `train.log`,
    # `summary.csv`, a paste saved as `*.log`): a data file of numbers (iris measurements, `predictions.csv`,
    # a year and a temperature) found in a run folder must not become the run's loss
    if not re.search(LOG_NAME, sample.path.name):
        return 0.0
    # on the raw lines: a `0: ` the launcher-prefix stripper takes for an srun rank is part of the row (and makes
    # it no bare table: `0: 0.5 0.6` per-class scores)
    raw = pl.Series(sample.text.splitlines()[: len(sample.lines)], dtype=pl.String)
    return CONFIDENCE if _shape(raw) else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    if lines.get_column("prefix_rank").is_not_null().any():
        return ParseResult()  # a launcher's rank prefix (or a `N: ` count) on a line: no bare table
    # the shape of the head the sniffer judged (the first SHAPE_LINES non-blank lines): rows of another width
    # further down, a traceback at the end, are unparsed lines, not a reason to drop the file
    head = lines.get_column("text")
    shape = _shape(head.filter(head.str.strip_chars() != "").head(SHAPE_LINES))
    if shape is None:
        return ParseResult()
    sep, width = shape
    text = pl.col("text")
    rows = lines.filter(text.str.contains(_row(sep))).with_columns(_cells(text, sep).alias("_c"))
    fits = rows.filter(pl.col("_c").list.len() == width)
    cells = fits.select("line", *[pl.col("_c").list.get(i).str.strip_chars().alias(f"c{i + 1}") for i in range(width)])
    first = cells.get_column("c1").cast(pl.Int64, strict=False)
    counted = first.null_count() == 0 and bool((first.diff().drop_nulls() > 0).all())
    step = step_int(pl.col("c1").cast(pl.Float64)) if counted else pl.lit(None, dtype=pl.Int64)
    records = cells.select(
        "line",
        step.alias("step"),
        pl.lit(None, dtype=pl.Int32).alias("prefix_rank"),
        pl.lit("train").alias("record_kind"),
        pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
    )
    first_value = 2 if counted else 1
    values = pl.concat(
        [
            cells.select(
                "line",
                pl.lit("loss" if i == first_value else f"column_{i}").alias("name"),
                pl.col(f"c{i}").str.to_lowercase().cast(pl.Float64, strict=False).alias("value"),
            )
            for i in range(first_value, width + 1)
        ]
    ).filter(pl.col("value").is_not_null())
    unparsed = lines.filter(
        (text.str.strip_chars() != "") & ~pl.col("line").is_in(fits.get_column("line").implode())
    ).select("line", "text")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
