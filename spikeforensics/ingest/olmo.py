"""OLMo trainer logs: one record over several physical lines - a header
`DATE TIME host:rank  olmo.train:908  INFO  [step=N/MAX,epoch=E]` (OLMo-core adds
`,eta=...` and separates the prefix with tabs) followed by indented `name=value` lines
until the next non-indented line.

Steps are the trainer's global step as printed (done; mode "done"). Values use
thousands separators, `1.234B` suffixes and Python reprs; `train/CrossEntropyLoss` /
`train/CE loss` -> `loss`, `optim/total_grad_norm` / `optim/total grad norm` ->
`grad_norm`, `optim/LR*` -> `lr` (the first group), `optim/step skipped` ->
`skipped_iters`, `throughput/total_tokens` -> `consumed_tokens`. Indented value lines
before the first header (the tail of a record cut by the excerpt) are ignored.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    named_values,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "olmo"
HEADER = r"\[step=(\d+)(?:/(\d+))?,epoch=(\d+)"
VALUE = r"^(?:\s{2,}|\t)(?P<k>[^=\s][^=]*?)=(?P<v>\S+)\s*$"


def sniff(sample: SniffSample) -> float:
    if sniff_share(sample, HEADER) and sniff_share(sample, VALUE):
        return 0.95
    return 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    f = lines.with_columns(
        step_int(text.str.extract(HEADER, 1)).alias("_hstep"),
        text.str.extract(HEADER, 3).cast(pl.Float64, strict=False).alias("_epoch"),
        text.str.extract_groups(VALUE).alias("_kv"),
    )
    is_val = pl.col("_kv").struct.field("k").is_not_null()
    # a block starts at every line that is not an indented value line
    f = f.with_columns((~is_val).cum_sum().alias("_block"))
    heads = f.filter(pl.col("_hstep").is_not_null())
    block_head = heads.select("_block", pl.col("line").alias("_hline"), pl.col("_hstep").alias("step"))
    vals = f.filter(is_val).join(block_head, on="_block", how="inner")
    pairs = vals.select(
        pl.col("_hline").alias("line"),
        pl.col("_kv").struct.field("k").str.strip_chars().alias("k"),
        pl.col("_kv").struct.field("v").alias("v"),
    )
    k = pl.col("k").str.to_lowercase()
    pairs = pairs.with_columns(
        pl.when(k.str.starts_with("optim/lr"))
        .then(pl.lit("lr"))
        .when(k == "optim/step skipped")
        .then(pl.lit("skipped_iters"))
        .otherwise(pl.col("k"))
        .alias("k")
    )
    values = named_values(pairs).select("line", "name", "value")
    epochs = heads.select("line", pl.lit("epoch").alias("name"), pl.col("_epoch").alias("value"))
    values = pl.concat([values, epochs.filter(pl.col("value").is_not_null())])
    records = heads.select("line", pl.col("_hstep").alias("step"), "prefix_rank", extract_time(text).alias("time"))
    return text_result(src.name, lines, records, values, None, mode="done")
