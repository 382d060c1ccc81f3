"""Line rewrites and phase marks of the `generic_steps` grammar: which value of a counted line is its loss
when no key says `loss`, and which step-less or counted lines belong to an evaluation, not to training.

Each is a polars expression or a frame-in, frame-out step over the prepared lines (`text` column), called by
`generic_steps.sniff` / `parse`; the grammar itself stays in generic_steps.py.
"""

from __future__ import annotations

import re

import polars as pl

from spikeforensics.ingest.base import SniffSample

# a loop that names its summed objective `total` and no term `loss` (SIBA-Jittor's `[Epoch 0/60] [batch 0/321]
# [lr 0.0001] [total 0.349915] [joint 0.005893] [intensity 0.323806] [sobel 0.258607]`): on a counted line that
# names no loss, a real-valued `total` is the loss (read as `total_loss`); `total 1200` (a count) or `total
# time: 3.2` (another key) is not
TOTAL_AS_LOSS = r"(?i)\btotal(\s*[:=]?\s*[-+]?\d*\.\d)"
TOTAL_COUNTER = r"(?i)\b(?:global[_ ]step|steps?|iteration|iter|it|batch|epoch)\b"
# the SSD family's MultiBox terms named by a letter (RFBNet / M2Det `Epoch:1 || epochiter: 5/489|| Totel iter 5 ||
# L: 4.0048 C: 10.7443 ||Batch time: ...`; FaceBoxes `Loc: 2.1 Cla: 3.4`): localisation and confidence loss,
# `loss_l` / `loss_c` as their code names them (loss = loss_l + loss_c), on a counted line naming no loss
MULTIBOX_TERMS = r"\b(L|Loc):\s*([-+]?(?:\d|[Nn]a[Nn]|[Ii]nf)\S*)\s+(C|Cla):\s*"
# WeTTS's `Epoch 1 [TRAIN] progress 10/2754 loss 0.666556 ...`: a `progress i/n` fraction is the batch counter (read
# as `batch i/n`)
PROGRESS_FRAC = r"(?i)\bprogress\s*[:=]?\s*(\d+\s*/\s*\d+)"
# the total of a tqdm bar's count (`| 125/125 [01:33<00:00, ...]`)
TQDM_TOTAL = r"\|\s*\d+/(\d+)\s*\["
# a line that is only an evaluation section's title (`Evaluation:`, `Validation`, `Testing...`, PaddlePaddle hapi's
# `Eval begin...` before its `step 10/88 - loss: 0.15 - ...` eval lines)
EVAL_SECTION = r"(?i)^\W*(?:evaluation|evaluating|validation|validating|valid|eval|test|testing)(?:\s+(?:begins?|start(?:s|ed)?))?\W*$"


def eval_section(lines: pl.DataFrame) -> pl.DataFrame:
    """`lines` with `_in_eval`: the block of same-shaped lines right under a line that is only an evaluation
    section's title (Knover's `Evaluation:`, then `<TAB>step 1:lm_loss: 4.0102, ppl: 55.1562, loss: 4.0102` per eval
    batch, 15,483 of them). The block ends at the first line of another shape (digits aside): training goes on, or
    a new run."""
    text = pl.col("text")
    if not lines.select(text.str.contains(EVAL_SECTION).any()).item():
        return lines.with_columns(pl.lit(False).alias("_in_eval"))
    shape = text.str.replace_all(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", "0").str.slice(0, 12)
    marked = lines.with_columns(text.str.contains(EVAL_SECTION).cum_sum().alias("_sec"), shape.alias("_shape"))
    marked = marked.with_columns(pl.int_range(pl.len()).over("_sec").alias("_row"))
    marked = marked.with_columns(pl.when(pl.col("_row") == 1).then(pl.col("_shape")).max().over("_sec").alias("_first"))
    other = ((pl.col("_row") >= 1) & (pl.col("_shape") != pl.col("_first"))).fill_null(True).cast(pl.Int32)
    marked = marked.with_columns(other.cum_sum().over("_sec").alias("_other"))
    in_eval = (pl.col("_sec") > 0) & (pl.col("_row") >= 1) & (pl.col("_other") == 0)
    return marked.with_columns(in_eval.alias("_in_eval")).drop("_sec", "_shape", "_row", "_first", "_other")


def rewrite_lines(text: pl.Expr) -> pl.Expr:
    """The text as the grammar reads it: a `progress i/n` fraction as `batch i/n` (PROGRESS_FRAC); on a counted line
    naming no loss, a real-valued `total` as `total_loss` (TOTAL_AS_LOSS) or letter-named MultiBox terms as
    `loss_l` / `loss_c` (MULTIBOX_TERMS)."""
    text = text.str.replace(PROGRESS_FRAC, "batch ${1}")
    counted = text.str.contains(TOTAL_COUNTER) & ~text.str.contains(r"(?i)loss")
    return (
        pl.when(counted & text.str.contains(TOTAL_AS_LOSS))
        .then(text.str.replace(TOTAL_AS_LOSS, "total_loss${1}"))
        .when(counted & text.str.contains(MULTIBOX_TERMS))
        .then(text.str.replace(MULTIBOX_TERMS, "loss_l: ${2} loss_c: "))
        .otherwise(text)
    )


def rewritten_sample(sample: SniffSample) -> SniffSample:
    """The sample's lines as `parse` reads them (`rewrite_lines`), for the sniffer; the sample itself when no line
    can need it."""
    low = sample.text.lower()
    if "total" not in low and "progress" not in low and not re.search(MULTIBOX_TERMS, sample.text):
        return sample
    lines = pl.DataFrame({"text": sample.lines}, schema={"text": pl.String})
    fixed = lines.select(rewrite_lines(pl.col("text"))).get_column("text").to_list()
    return SniffSample(sample.path, sample.text, fixed)


def validation_bars(lossy_lines: pl.DataFrame, min_lines: int) -> pl.Expr | None:
    """Step-less loss lines that are the final states of tqdm bars alternating between two totals (AllenNLP's
    console: `accuracy: 0.13, loss: 5.1068 ||: 100%|###| 125/125 [...]` for the epoch's training, then `... 31/31
    [...]` for its validation): the bars of the smaller total are the validation's, when the two alternate line
    by line (a validation pass after each training pass). None when the lines are not such pairs."""
    totals = lossy_lines.get_column("text").str.extract(TQDM_TOTAL, 1).cast(pl.Int64, strict=False)
    if totals.null_count() or totals.len() < 2 * min_lines or totals.n_unique() != 2:
        return None
    if not bool((totals.diff().drop_nulls() != 0).all()):
        return None
    return pl.col("text").str.extract(TQDM_TOTAL, 1).cast(pl.Int64, strict=False) == int(totals.min())
