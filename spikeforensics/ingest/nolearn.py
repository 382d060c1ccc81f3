"""nolearn's (Lasagne / Theano) `NeuralNet` training table, printed by `nolearn.lasagne.PrintLog`:

      epoch    trn loss    val loss    trn/val    valid acc  dur
    -------  ----------  ----------  ---------  -----------  ------
          1     0.65432     0.59999    1.09057      0.62500  430.20s
         12         nan         nan        nan      0.62500  419.85s

Printing code, `nolearn/lasagne/handlers.py` (`PrintLog.table`): one row per epoch through `tabulate`,
columns `epoch`, `trn loss` (`train loss` in nolearn 0.5), `val loss` (`valid loss`), `trn/val`
(`train/val`), `valid acc` when the net scores accuracy, any custom scores by name, then `dur` (seconds,
printed with an `s`); the header and its dashed rule come before the first row. Values may be ANSI-coloured
(the best so far), which the line reader strips.

Step = the epoch; `trn loss` -> `loss`, `val loss` -> `eval_loss` (the same record: the epoch's
validation), `trn/val` -> `train_val_ratio`, `valid acc` -> `eval_acc`, `dur` -> `epoch_time_s`, a custom
score under its own name. A paste that lost the header (its first rows scrolled away) is recognised by the
table's invariant: six columns, the last a duration in seconds, and the fourth equal to the second over the
third (the `trn/val` ratio) on the rows where both losses are finite; its columns are then nolearn's default
ones.
"""

from __future__ import annotations

import re

import polars as pl

from spikeforensics.ingest._fields import normalise_name
from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "nolearn"
HEADER = r"^\s*epoch\s{2,}(?:trn|train) loss\s{2,}"
RULE = r"^\s*-{3,}(?:\s{2}-{3,})+\s*$"
N = r"(?:[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|nan|inf|-inf)"
# a headerless row of nolearn's default table: epoch, trn loss, val loss, trn/val, valid acc, dur
ROW6 = rf"^\s*(\d+)\s+({N})\s+({N})\s+({N})\s+({N})\s+(\d+(?:\.\d+)?)s\s*$"
DEFAULT = ["epoch", "trn loss", "val loss", "trn/val", "valid acc", "dur"]
NAMES = {
    "trn loss": "loss",
    "train loss": "loss",
    "val loss": "eval_loss",
    "valid loss": "eval_loss",
    "trn/val": "train_val_ratio",
    "train/val": "train_val_ratio",
    "valid acc": "eval_acc",
    "dur": "epoch_time_s",
}
RATIO_RTOL = 2e-3  # the printed ratio against the ratio of the printed losses (5 decimals each)
MIN_ROWS = 3


def _ratio_holds(rows: list[str]) -> bool:
    """The headerless shape's invariant: column 4 is column 2 over column 3 wherever both are finite."""
    checked = 0
    for row in rows:
        m = re.match(ROW6, row)
        if not m:
            continue
        trn, val, ratio = (float(m.group(i)) for i in (2, 3, 4))
        if not all(map(lambda x: x == x and abs(x) != float("inf"), (trn, val, ratio))) or val == 0:
            continue
        if abs(trn / val - ratio) > RATIO_RTOL * max(1.0, abs(ratio)):
            return False
        checked += 1
    return checked >= MIN_ROWS


def sniff(sample: SniffSample) -> float:
    if sniff_share(sample, HEADER):
        return 0.9
    rows = [ln for ln in sample.lines if re.match(ROW6, ln)]
    return 0.8 if len(rows) >= MIN_ROWS and _ratio_holds(rows) else 0.0


def _columns(header: str) -> list[str]:
    return [c.strip().lower() for c in re.split(r"\s{2,}", header.strip())]


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    headers = lines.filter(text.str.contains(HEADER)).select("line", "text").rows()
    rows = lines.filter(text.str.contains(r"^\s*\d+\s") & ~text.str.contains(RULE))
    parts = []
    if headers:
        # each table runs from its header to the next one (a resumed fit prints a new header)
        bounds = [*headers, (None, None)]
        for (start, head), (end, _) in zip(bounds, bounds[1:], strict=False):
            cols = _columns(head)
            block = rows.filter((pl.col("line") > start) & (pl.col("line") < end if end else pl.lit(True)))
            parts.append((cols, block))
    elif _ratio_holds(rows.get_column("text").to_list()):
        parts.append((DEFAULT, rows.filter(text.str.contains(ROW6))))
    records, values, unparsed = [], [], []
    for cols, block in parts:
        split = block.with_columns(
            text.str.strip_chars().str.replace(r"(\d)s$", "$1").str.extract_all(r"\S+").alias("_c")
        )
        fits = split.filter(pl.col("_c").list.len() == len(cols))
        unparsed.append(split.filter(pl.col("_c").list.len() != len(cols)).select("line", "text"))
        records.append(
            fits.select(
                "line",
                step_int(pl.col("_c").list.get(0).cast(pl.Int64, strict=False)).alias("step"),
                "prefix_rank",
                pl.lit("train").alias("record_kind"),
                pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
            )
        )
        for i, col in enumerate(cols):
            name = "epoch" if i == 0 else NAMES.get(col, normalise_name(col))
            values.append(
                fits.select(
                    "line",
                    pl.lit(name).alias("name"),
                    pl.col("_c").list.get(i).str.to_lowercase().cast(pl.Float64, strict=False).alias("value"),
                )
            )
    if not records:
        return ParseResult()
    recs = pl.concat(records)
    vals = pl.concat(values).filter(pl.col("value").is_not_null() | pl.col("name").is_in(["loss", "eval_loss"]))
    return text_result(src.name, lines, recs, vals, pl.concat(unparsed), mode="done")
