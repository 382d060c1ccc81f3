"""pytorch-kaldi per-epoch results, as `dump_epoch_results` (mravanelli/pytorch-kaldi `utils.py`,
called by `run_exp.py` once per epoch) writes them.

The `res.res` line (`'ep=%s tr=%s loss=%s err=%s '`, then `'valid=%s loss=%s err=%s '` per
validation set, `'lr_%s=%s '` per architecture (`%f` in the 2018 version), `'time(s)=%i'`):

    ep=22 tr=['train_clean_100'] loss=0.671 err=0.214 valid=dev_clean loss=0.693 err=0.212 lr_architecture1=6.25e-06 lr_architecture2=6.25e-06 time(s)=17255
    ep=000 tr=['TIMIT_tr'] loss=3.398 err=0.721 valid=TIMIT_dev loss=2.268 err=0.591 lr_architecture1=0.080000 time(s)=86

and the same figures as the stdout summary block of `run_exp.py`:

    ----- Summary epoch 022 / 023
    Training on ['train_clean_100']
    Loss = 0.671 | err = 0.214
    -----
    Validating on dev_clean
    Loss = 0.693 | err = 0.212
    -----
    Learning rate on architecture1 = 6.25e-06
    -----
    Elapsed time (s) = 17255

One train record per epoch; step = the epoch `ep` as printed (0-based, zero-padded). The first
`loss`/`err` are the training figures (`loss`, `err`); those after the first `valid=` (or under the
first `Validating on`) are `eval_loss`/`eval_err`, a further validation set's
`eval_<set>_loss`/`eval_<set>_err`. In the `res.res` line they stay on the train record (one line
per epoch, as printed); in the stdout block each `Validating on` figure is an eval record at that
epoch. The first architecture's learning rate is `lr` (every one also as `lr_<arch>`); `time(s)`
(the epoch's wall time, training and validation) is `epoch_time_s`. Loss values are `%0.3f`:
`nan`/`inf` as Python prints them.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    normalise_name_expr,
    parse_numbers,
    prepared_lines,
    sniff_tiers,
    step_int,
    text_result,
)

NAME = "pytorch_kaldi"
RES = rf"^\s*ep=(?P<ep>\d+)\s+tr=\[.*?\]\s+loss=(?P<loss>{NUM_TOKEN})\s+err=(?P<err>{NUM_TOKEN})(?:\s|$)"
VALID = rf"\bvalid=(\S+)\s+loss=({NUM_TOKEN})\s+err=({NUM_TOKEN})"
LR = rf"\blr_(\w+)=({NUM_TOKEN})"
TIME = r"\btime\(s\)=(\d+)"
SUMMARY = r"^\s*-+ Summary epoch (\d+) / \d+"
TRAIN_ON = r"^\s*Training on \["
VALID_ON = r"^\s*Validating on (\S+)"
LOSS_ERR = rf"^\s*Loss = ({NUM_TOKEN}) \| err = ({NUM_TOKEN})\s*$"
LR_ON = rf"^\s*Learning rate on (\S+) = ({NUM_TOKEN})\s*$"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(sample, [(RES, 0.9), (SUMMARY, 0.6)])


def _rows(frame: pl.DataFrame, name: pl.Expr | str, raw: pl.Expr, line: str = "line") -> pl.DataFrame:
    """(line, name, raw) string rows: one metric per row of `frame`."""
    name = pl.lit(name) if isinstance(name, str) else name
    return frame.select(pl.col(line).alias("line"), name.alias("name"), raw.alias("raw"))


def _numbers(parts: list[pl.DataFrame]) -> pl.DataFrame:
    rows = pl.concat([p.cast({"line": pl.Int64, "name": pl.String, "raw": pl.String}) for p in parts])
    rows = rows.filter(pl.col("raw").is_not_null())
    return parse_numbers(rows).select("line", "name", "value").filter(pl.col("value").is_not_null())


def _matches(frame: pl.DataFrame, pattern: str, line: str = "line") -> pl.DataFrame:
    """One row per match of `pattern` in `text` (groups 1..3 as `_a`, `_b`, `_c`), `_n` its index."""
    found = frame.select(line, pl.col("text").str.extract_all(pattern).alias("_m")).explode("_m").drop_nulls("_m")
    return found.with_columns(
        pl.int_range(pl.len()).over(line).alias("_n"),
        *[pl.col("_m").str.extract(pattern, i).alias(c) for i, c in ((1, "_a"), (2, "_b"), (3, "_c"))],
    )


def _eval_stem(n: pl.Expr, dataset: pl.Expr) -> pl.Expr:
    """`eval` for the first validation set, `eval_<set>` for the others."""
    return pl.when(n == 0).then(pl.lit("eval")).otherwise("eval_" + normalise_name_expr(dataset))


def _lr_rows(lr: pl.DataFrame, line: str = "line") -> list[pl.DataFrame]:
    """`lr` (the first architecture's) and `lr_<arch>` for each, from `_a` (arch) and `_b` (value)."""
    return [
        _rows(lr.filter(pl.col("_n") == 0), "lr", pl.col("_b"), line),
        _rows(lr, "lr_" + normalise_name_expr(pl.col("_a")), pl.col("_b"), line),
    ]


def _res_lines(lines: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    text = pl.col("text")
    rec = lines.filter(text.str.contains(RES)).with_columns(text.str.extract_groups(RES).alias("_g")).unnest("_g")
    rec = rec.with_columns(step_int(pl.col("ep")).alias("step"), pl.lit("train").alias("record_kind"))
    valid = _matches(rec, VALID).with_columns(_eval_stem(pl.col("_n"), pl.col("_a")).alias("_stem"))
    parts = [
        _rows(rec, "loss", pl.col("loss")),
        _rows(rec, "err", pl.col("err")),
        _rows(rec, "epoch_time_s", text.str.extract(TIME, 1)),
        _rows(valid, pl.col("_stem") + "_loss", pl.col("_b")),
        _rows(valid, pl.col("_stem") + "_err", pl.col("_c")),
        *_lr_rows(_matches(rec, LR)),
    ]
    return rec.select("line", "step", "prefix_rank", "record_kind"), _numbers(parts)


def _summary_blocks(lines: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The stdout summary blocks: the `Loss = | err =` line under `Training on` (train record),
    those under `Validating on` (eval records), `Learning rate on` values on the train record."""
    text = pl.col("text")
    pats = (SUMMARY, TRAIN_ON, VALID_ON, LOSS_ERR, LR_ON)
    cand = lines.filter(pl.any_horizontal([text.str.contains(p) for p in pats])).sort("line")
    header = text.str.contains(SUMMARY)
    section = (
        pl.when(header)
        .then(pl.lit("head"))
        .when(text.str.contains(TRAIN_ON))
        .then(pl.lit("train"))
        .when(text.str.contains(VALID_ON))
        .then(pl.lit("valid"))
    )
    g = cand.with_columns(
        header.cum_sum().alias("_block"),
        step_int(text.str.extract(SUMMARY, 1)).forward_fill().alias("step"),
        section.forward_fill().alias("_section"),
        text.str.extract(VALID_ON, 1).forward_fill().alias("_set"),
        text.str.extract(LOSS_ERR, 1).alias("loss"),
        text.str.extract(LOSS_ERR, 2).alias("err"),
    ).filter(pl.col("_block") > 0)
    is_train = pl.col("_section") == "train"
    figures = (
        g.filter(pl.col("loss").is_not_null() & pl.col("_section").is_in(["train", "valid"]))
        .with_columns(pl.int_range(pl.len()).over("_block", "_section").alias("_n"))
        .filter(~is_train | (pl.col("_n") == 0))
        .with_columns(
            pl.when(is_train).then(pl.lit("train")).otherwise(pl.lit("eval")).alias("record_kind"),
            pl.when(is_train).then(pl.lit("")).otherwise(_eval_stem(pl.col("_n"), pl.col("_set")) + "_").alias("_p"),
        )
    )
    # learning rates go on the block's train record
    train_line = figures.filter(is_train).select("_block", pl.col("line").alias("_train"))
    lr = (
        g.filter(text.str.contains(LR_ON))
        .with_columns(text.str.extract(LR_ON, 1).alias("_a"), text.str.extract(LR_ON, 2).alias("_b"))
        .join(train_line, on="_block")
        .with_columns(pl.int_range(pl.len()).over("_block").alias("_n"))
    )
    parts = [
        _rows(figures, pl.col("_p") + "loss", pl.col("loss")),
        _rows(figures, pl.col("_p") + "err", pl.col("err")),
        *_lr_rows(lr, "_train"),
    ]
    return figures.select("line", "step", "prefix_rank", "record_kind"), _numbers(parts)


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    res_records, res_values = _res_lines(lines)
    blk_records, blk_values = _summary_blocks(lines)
    records = pl.concat([res_records, blk_records])
    values = pl.concat([res_values, blk_values])
    return text_result(src.name, lines, records, values, None, mode="done")
