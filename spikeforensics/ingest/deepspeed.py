"""DeepSpeed engine logs: progress lines `[Rank 0] step=40, skipped=2, lr=[5e-05],
mom=[[0.9, 0.999]]`, throughput lines (`epoch=E/micro_step=M/global_step=G,
RunningAvgSamplesPerSec=..., CurrSamplesPerSec=..., MemAllocated=..GB, ...` and the old
`0/40, SamplesPerSec=83.48, MemAllocated=0.26GB, ...`), and the fp16 overflow /
hysteresis messages (events, see text_events). DeepSpeed itself prints no loss.

Steps: `step` counts optimizer steps including skipped ones (done steps, mode "done"):
the k-th overflow message after `step=N` is step N + k. `skipped` is cumulative; the
per-interval `skipped_iters` is its increase since the previous progress line (the
first line's value counts from 0), the raw counter is kept as `skipped_total`; in a log with no
overflow message at all, each increase is an `overflow` event (`_counted_skips`). `lr`
is the first parameter group's. Throughput values join the progress record of the
same step printed just before them, else form their own record.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    detail_expr,
    extract_time,
    find_pairs,
    named_values,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "deepspeed"
N = rf"(?:{NUM_TOKEN})"
PROGRESS = rf"\bstep=(?P<step>\d+), skipped=(?P<skipped>\d+), lr=\[(?P<lr>{N})"
TIMER = r"(?:\bglobal_step=(?P<g>\d+)|\b\d+/(?P<o>\d+)), (?:RunningAvg)?SamplesPerSec="
TIMER_PAIR = rf"(?P<k>[A-Za-z]+)=(?P<v>{N})(?:GB)?"


def sniff(sample: SniffSample) -> float:
    other = sniff_share(sample, r"\{'loss'|\biteration\s*:?\s*\d+\s*/|\biter \d+:|\bstep:\s*\d+\s+loss:")
    if sniff_share(sample, r"\bstep=\d+, skipped=\d+, lr=\["):
        return 0.4 if other else 0.9
    if sniff_share(sample, r"OVERFLOW! Rank \d+ Skipping step|SamplesPerSec="):
        return 0.35 if other else 0.7
    return 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains("step=|SamplesPerSec="))
    p = (
        cand.with_columns(text.str.extract_groups(PROGRESS).alias("_g"))
        .unnest("_g")
        .filter(pl.col("step").is_not_null())
    )
    p = p.with_columns(step_int(pl.col("step")), pl.col("skipped").cast(pl.Float64)).sort("line")
    prev = pl.col("skipped").shift(1).over(pl.col("prefix_rank").fill_null(-1))
    p = p.with_columns((pl.col("skipped") - prev.fill_null(0)).clip(lower_bound=0).alias("skipped_iters"))
    records = p.select("line", "step", "prefix_rank", extract_time(text).alias("time"))
    pv = p.select(
        "line",
        pl.col("skipped").alias("skipped_total"),
        "skipped_iters",
        pl.col("lr").cast(pl.Float64, strict=False).alias("lr"),
    ).unpivot(index="line", variable_name="name", value_name="value")
    # throughput lines: values go to the progress record of the same step just before
    t = cand.with_columns(text.str.extract_groups(TIMER).alias("_g")).unnest("_g")
    t = t.with_columns(step_int(pl.coalesce("g", "o")).alias("step")).filter(pl.col("step").is_not_null()).sort("line")
    t = t.join_asof(
        records.select(pl.col("line").alias("_pl"), pl.col("step").alias("_ps")).sort("_pl"),
        left_on="line",
        right_on="_pl",
        strategy="backward",
    )
    t = t.with_columns(
        pl.when(pl.col("_ps") == pl.col("step")).then(pl.col("_pl")).otherwise(pl.col("line")).alias("_target")
    )
    own = t.filter(pl.col("_target") == pl.col("line"))
    records = pl.concat([records, own.select("line", "step", "prefix_rank", extract_time(text).alias("time"))])
    body = text.str.replace(r"^.*?(?:global_step=\d+|\d+/\d+),", "")
    pairs = find_pairs(t.select(pl.col("_target").alias("line"), body.alias("text")), TIMER_PAIR)
    pairs = pairs.filter(~pl.col("k").is_in(["epoch", "micro_step", "global_step"]))
    tv = named_values(pairs).select("line", "name", "value")
    values = pl.concat([pv, tv])
    unparsed = cand.filter(text.str.contains(r"\bstep=\d+, skipped=") & ~text.str.contains(PROGRESS))
    result = text_result(src.name, lines, records, values, unparsed, mode="done")
    return _counted_skips(result, p)


def _counted_skips(result: ParseResult, progress: pl.DataFrame) -> ParseResult:
    """Steps the engine skipped that only its counter shows: with no overflow or skip message anywhere in
    the file (ZeRO's non-finite-gradient check skips silently in bf16), every progress line whose
    `skipped` went up is one `overflow` event at its step (`count` = the increase,
    `inferred_from: skipped_iters`), as Megatron's skipped-iterations counter is read."""
    events = result.tables.get("events")
    if events is not None and events.height and events.filter(pl.col("kind").is_in(["overflow", "hysteresis"])).height:
        return result
    rose = progress.filter(pl.col("skipped_iters") > 0)
    if rose.height == 0:
        return result
    counted = rose.select(
        "line",
        "step",
        pl.col("prefix_rank").alias("rank"),
        extract_time(pl.col("text")).alias("time"),
        pl.lit("overflow").alias("kind"),
        detail_expr(ints={"count": pl.col("skipped_iters")}, strings={"inferred_from": pl.lit("skipped_iters")}).alias(
            "detail"
        ),
    )
    both = [events, counted] if events is not None and events.height else [counted]
    result.tables["events"] = pl.concat(both, how="diagonal_relaxed").sort("line")
    return result
