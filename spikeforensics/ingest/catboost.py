"""CatBoost's verbose training output: one line per boosting iteration (`verbose=N` prints every Nth).

    0:	learn: 0.6851236	test: 0.6849507	best: 0.6849507 (0)	total: 58.5ms	remaining: 58.4s
    61:	learn 0.1211191019	passed: 17.7 sec	total: 20m 56s	remaining: 12m 50s      (CatBoost 0.x)
    65:	learn nanpassed: 17.5 sec	total: 22m 8s	remaining: 11m 24s                 (a paste that lost its tabs)

Printing code: `catboost/libs/logging/logging.cpp` (`TLogger::OutputProfile`: the iteration, then
`learn:` and `test:` with the value of the first (optimised) metric, `best:` with its iteration,
`total:` and `remaining:` times); CatBoost 0.x wrote `learn`/`test` without the colon and a
`passed: X sec` field. The iteration (0-based, as printed) is the step. `learn` is the training
loss (the objective, Logloss by default), `test` the eval set's (`eval_loss`); `best` and the times
are not metrics. A paste that lost its tabs glues the next field onto the value (`nanpassed:`), so
the value is read without a word boundary after it.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import grammar_records
from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    prepared_lines,
    sniff_share,
    text_result,
)

NAME = "catboost"
# a value with no word boundary after it (`0.1211191019passed:`, `nanpassed:` in a paste without tabs)
VALUE = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|[Nn]a[Nn]|[Ii]nf)"
BODY = (
    rf"\s+learn:?\s*(?P<learn>{VALUE})"
    rf"(?:\s*test:?\s*(?P<test>{VALUE}))?(?:\s*best(?:Test)?:?\s*{VALUE}(?:\s*\(\d+\))?)?\s*(?:passed|total):"
)
LINE = rf"^\s*(?P<step>\d+):{BODY}"


def sniff(sample: SniffSample) -> float:
    # (sample lines are prefix-stripped: the `61: ` of a paste without tabs is gone from them)
    hits = sniff_share(sample, rf"^\s*(?:\d+:)?{BODY}")
    return 0.9 if hits >= min(2, max(1, len(sample.lines))) else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    # a paste whose tabs became spaces opens its lines with `61: `, which the launcher-prefix stripper reads
    # as an `srun --label` rank: that number is the iteration, put back in front of the line
    taken = pl.col("prefix_rank").is_not_null() & pl.col("text").str.contains(r"^\s+learn\b")
    cand = lines.filter(pl.col("text").str.contains(r"\blearn\b")).with_columns(
        pl.when(taken)
        .then(pl.concat_str(pl.col("prefix_rank").cast(pl.String), pl.lit(":"), pl.col("text")))
        .otherwise(pl.col("text"))
        .alias("text"),
        pl.when(taken).then(None).otherwise(pl.col("prefix_rank")).alias("prefix_rank"),
    )
    records, values, _ = grammar_records(cand, LINE, {"learn": "loss", "test": "eval_loss"})
    return text_result(src.name, lines, records, values, mode="done")
