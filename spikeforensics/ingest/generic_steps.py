"""Fallback for custom training loops: a step counter followed by key/value pairs,
whatever the separators:

    step 6/1500 | loss 2.31 | lr 3e-4 | grad_norm 0.64
    step=6, loss=2.31, lr=0.0003
    Step 6: loss 2.31 grad norm 0.64
    [Epoch 1, step 6] loss: 2.31, lr: 3e-4
    Step 12 | Loss: 2.31 | LR: 3e-4 | GradNorm: 0.64          # GradNorm -> grad_norm, LR -> lr
    Epoch 3 Step 120 loss 2.3                                # epoch kept as a metric
    E5 iter[ 14/ 15] | [Loss] 51566519.44 | ... | [step]    89   # a `step` counter wins over `iter`
    [10] epoch 0, 10/186, g_loss nan d_fake_loss nan flat nan   # a bracketed counter at the line start

The last shape (convmesh `train.py`: `print(f'[{total_it}] epoch {epoch}, {i}/{n}, g_loss ...')`)
has no counter word: a `[N]` that opens the line, followed by a word, is the step. The launcher
prefix stripper (`base.PREFIX_RE`) takes a `[NN] ` of two or more digits for a log viewer's line
number and removes it, so for such lines the counter is read back from the raw file (only when
this grammar reads the whole file and has loss lines without a counter word).

A line is a record when it has a step counter (`step`, `iter`, `iteration`,
`global_step`, `it`) and a key containing `loss` with a number. Keys may be two words
(`train loss`, `grad norm`); names go through the alias table (`train loss` -> `loss`,
`val loss` -> `eval_loss`). A line whose only loss is an eval loss is an eval record.
Steps are stored as printed (taken as done steps; mode "done").

Its sniffer is deliberately unsure (at most 0.35) so that every specific parser wins.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    ANSI_RE,
    MAX_STEP,
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    find_pairs,
    lines_from_bytes,
    named_values,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "generic_steps"
# the counter may be rounded with a K/M suffix (LeRobot `step:1K`, `step:12K`): see `_step`
COUNT = r"(\d+(?:\.\d+)?[KM]?|\d+)"
STEP = rf"(?i)\b(?:global[_ ]step|step|iteration|iter|it)\b\]?\s*[:=#]?\s*\[?\s*(?-i:{COUNT})\s*(?:/\s*\d+)?"
# a `step` counter wins over an `iter` one printed before it (`E5 iter[ 14/ 15] | ... | [step]    89`)
STEP_FIRST = rf"(?i)\b(?:global[_ ]step|step)\b\]?\s*[:=#]?\s*\[?\s*(?-i:{COUNT})\s*(?:/\s*\d+)?"
KEY = r"[A-Za-z_][\w./-]*"
PAIR = rf"(?P<k>{KEY}(?: {KEY})?)(?:\s*[:=]\s*|\s+)(?P<v>{NUM_TOKEN})(?:[\s,;|)\]]|$)"
LOSSY = r"(?i)loss"
COUNTER_KEYS = r"(?i)^(?:global[_ ]step|step|iteration|iter|it)$"
# a bracketed counter opening the line (`[10] epoch 0, 10/186, g_loss nan ...`); RAW_BRACKET on the
# raw line, where a paste's `> ` may still stand before it
BRACKET = r"^\s*\[(\d+)\]\s+[A-Za-z]"
RAW_BRACKET = r"^(?:(?:\+?> ?)+)?\s*\[(\d+)\]\s+[A-Za-z]"
BRACKET_RECORD = RAW_BRACKET + r".*?(?i:loss)\w*\]?\s*[:=]?\s*[-+]?[\d.nN]"
# the raw file is read a second time for bracketed counters only up to this size (pastes and
# small custom-loop logs; a big log with such lines keeps them as unparsed rather than doubling memory)
RAW_REREAD_MAX_BYTES = 64 << 20
EVAL_WORDS = r"(?i)\b(?:evaluation|evaluating|validation|validating|eval|valid|val|test|testing)\b"
MAX_CONFIDENCE = 0.35
# the catch-all grammar: in a mixed log it is never offered a line the event catalogue read
CATCH_ALL = True


def sniff(sample: SniffSample) -> float:
    n = sniff_share(sample, STEP + r".*?" + r"(?i:loss)\w*\]?\s*[:=]?\s*[-+]?[\d.nN]")
    if n < 2:  # bracketed counters, on the raw lines (the prefix stripper may have taken them)
        raw = sample.text.splitlines()[: len(sample.lines) + 1]
        n += int(pl.Series(raw, dtype=pl.String).str.contains(BRACKET_RECORD).sum()) if raw else 0
    # one record line is enough in a paste of a few lines (`... iter: 5100  loss: nan (nan) ...`)
    return MAX_CONFIDENCE if n >= 2 or (n == 1 and len(sample.lines) <= 5) else (0.2 if n else 0.0)


def _step(token: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(step, step_approx) from a counter token. A rounded counter (`1K`, `1.2M`) gives its
    value (1000) and is approximate: consecutive records that print the same rounded step
    are separate records, not one record printed twice (see `base.number_records`)."""
    mult = pl.when(token.str.ends_with("K")).then(1e3).when(token.str.ends_with("M")).then(1e6).otherwise(1.0)
    value = token.str.strip_chars_end("KM").cast(pl.Float64, strict=False) * mult
    # a float is exact only up to MAX_STEP: a counter past it is out of range
    value = pl.when(value <= MAX_STEP).then(value.round(0)).otherwise(pl.lit(float("inf")))
    return step_int(pl.when(token.is_not_null()).then(value)).alias("step"), token.str.contains("[KM]$").alias(
        "step_approx"
    )


def _raw_bracket(src: SourceFile, wanted: pl.Series) -> pl.Expr:
    """`_raw_bracket`: the `[N]` counter opening the raw line, for the lines in `wanted` (loss lines
    without a counter word) whose counter the prefix stripper removed. The raw file is read again
    (not through `read_bytes`: the driver's hash sees the file once) only when there are such lines."""
    none = pl.lit(None, dtype=pl.String).alias("_raw_bracket")
    if wanted.len() == 0 or src.only_lines is not None or src.path.stat().st_size > RAW_REREAD_MAX_BYTES:
        return none
    try:
        raw = lines_from_bytes(src.path.read_bytes())
    except OSError:
        return none
    found = (
        raw.filter(pl.col("line").is_in(wanted.implode()))
        .select("line", pl.col("text").str.replace_all(ANSI_RE, "").str.extract(RAW_BRACKET, 1).alias("_b"))
        .drop_nulls()
    )
    if found.height == 0:
        return none
    mapping = dict(zip(found.get_column("line").to_list(), found.get_column("_b").to_list()))
    return pl.col("line").replace_strict(mapping, default=None, return_dtype=pl.String).alias("_raw_bracket")


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    token = pl.coalesce(text.str.extract(STEP_FIRST, 1), text.str.extract(STEP, 1), text.str.extract(BRACKET, 1))
    lossy_lines = lines.filter(text.str.contains(LOSSY))
    lossy_lines = lossy_lines.with_columns(_raw_bracket(src, lossy_lines.filter(token.is_null()).get_column("line")))
    token = pl.coalesce(token, pl.col("_raw_bracket"))
    cand = lossy_lines.with_columns(*_step(token)).filter(pl.col("step").is_not_null()).drop("_raw_bracket")
    # brackets around names or values (`[Loss] 2.3`, `lr=[5e-05]`) do not hide the pair
    body = text.str.replace(STEP, " ").str.replace_all(r"[\[\]]", " ")
    pairs = find_pairs(cand.select("line", body.alias("text")), PAIR)
    pairs = pairs.filter(~pl.col("k").str.contains(COUNTER_KEYS))
    # a line that says it is an evaluation before its first loss (`Evaluation result for step 435000:
    # loss = 148890.7 ; perplexity = inf`, `Validation at step 200: loss 2.1`) is an eval record
    eval_lines = cand.filter(text.str.extract(r"(?i)^(.*?)loss", 1).str.contains(EVAL_WORDS)).get_column("line")
    values = named_values(pairs, eval_rows=pl.col("line").is_in(eval_lines.implode())).select("line", "name", "value")
    # the loss that makes a line a record: not `loss_scale` (`Attempted loss scale: 64` is an fp16 event)
    lossy = (
        values.filter(pl.col("name").str.contains("loss") & ~pl.col("name").str.starts_with("loss_scale"))
        .group_by("line")
        .agg((pl.col("name").str.starts_with("eval_") | pl.col("name").str.starts_with("val")).all().alias("_eval"))
    )
    records = cand.join(lossy, on="line").select(
        "line",
        "step",
        "step_approx",
        "prefix_rank",
        extract_time(text).alias("time"),
        pl.when(pl.col("_eval")).then(pl.lit("eval")).otherwise(pl.lit("train")).alias("record_kind"),
    )
    values = values.join(records.select("line"), on="line", how="semi")
    unparsed = cand.join(records.select("line"), on="line", how="anti")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
