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

from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
    to_float,
)

NAME = "catboost"
# a value with no word boundary after it (`0.1211191019passed:`, `nanpassed:` in a paste without tabs)
VALUE = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|[Nn]a[Nn]|[Ii]nf)"
# (the iteration is optional: a paste whose tabs became spaces has `61: ` opening the line, which the
# launcher-prefix stripper reads as an `srun --label` rank; the parser takes it back from there)
LINE = (
    rf"^\s*(?:(?P<step>\d+):)?\s+learn:?\s*(?P<learn>{VALUE})"
    rf"(?:\s*test:?\s*(?P<test>{VALUE}))?(?:\s*best(?:Test)?:?\s*{VALUE}(?:\s*\(\d+\))?)?\s*(?:passed|total):"
)


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, LINE) >= min(2, max(1, len(sample.lines))) else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    rec = (
        lines.filter(text.str.contains(LINE))
        .with_columns(text.str.extract_groups(LINE).alias("_g"))
        .unnest("_g")
        .with_columns(
            step_int(pl.coalesce(pl.col("step").cast(pl.Float64, strict=False), pl.col("prefix_rank"))).alias("step"),
            pl.when(pl.col("step").is_null()).then(None).otherwise(pl.col("prefix_rank")).alias("prefix_rank"),
            extract_time(text).alias("time"),
        )
        .filter(pl.col("step").is_not_null())
    )
    train = rec.select("line", "step", "prefix_rank", "time", pl.lit("train").alias("record_kind"))
    values = pl.concat(
        [
            rec.select("line", pl.lit("loss").alias("name"), to_float(pl.col("learn")).alias("value")),
            rec.filter(pl.col("test").is_not_null()).select(
                "line", pl.lit("eval_loss").alias("name"), to_float(pl.col("test")).alias("value")
            ),
        ],
        how="vertical_relaxed",
    )
    return text_result(src.name, lines, train, values, mode="done")
