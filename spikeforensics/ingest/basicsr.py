"""BasicSR's `MessageLogger` (XPixelGroup/BasicSR `basicsr/utils/logger.py`), the trainer of Real-ESRGAN,
GFPGAN, SwinIR, Restormer, Retinexformer and most image-restoration repos, and its predecessor MMSR
(ESRGAN, EDVR: `<epoch: ..>`):

    2022-09-26 16:29:05,193 INFO: [train..][epoch:  0, iter:  25,377, lr:(2.000e-04,)] [eta: 6 days, 20:47:16, time (data): 0.719 (0.005)] l_g_pix: 0.0078 l_p_8: 0.0619 ... l_d: 0.1073 real_score: 3.7570 fake_score: -2.4317
    2022-12-29 10:43:28,986 INFO: [Retin..][epoch:  8, iter:     500, lr:(2.000e-04,)] [eta: 6:29:14, time (data): 0.141 (0.001)] l_pix: 1.0436e-01
    19-03-02 10:11:12.345 - INFO: <epoch:  0, iter:     200, lr:1.000e-04> l_pix: 5.3187e-02
    2022-12-29 10:44:47,801 INFO: Validation ValSet,		 # psnr: 19.6031

Step: `iter` (the global iteration, printed with a thousands separator), `epoch` and the first of the
`lr:(...)` list (one per optimizer: the generator's first) kept as metrics. Every `name: value` after the
bracket is a metric as named, the `l_*` loss terms as `loss_*` (`l_g_pix` -> `loss_g_pix`). BasicSR
back-propagates the sum of the generator's terms (`l_g_total`, or `l_total` of a plain SR model), each
logged already weighted, and logs the terms alone: `loss` is that sum, the `l_*` terms but the
discriminator's (`l_d`, `l_d_real`, `l_d_fake`), or `l_total` / `l_g_total` where the model logs it.
`real_score`, `fake_score`, `out_d_*` are the discriminator's outputs, kept as metrics.
`Validation <set>` lines and the `# metric: value` lines under them are eval records at the step of the
training record before them (`psnr` -> `eval_psnr`).
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._fields import captured_values, find_pairs, parse_numbers
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    prepared_lines,
    sniff_tiers,
    step_int,
    text_result,
)

NAME = "basicsr"
# BasicSR `[epoch:  0, iter:  25,377, lr:(2.000e-04,1.0e-4,)]`, MMSR `<epoch:  0, iter:     200, lr:1.000e-04>`
HEAD = (
    r"(?:\[|<)epoch:\s*(?P<epoch>\d+), iter:\s*(?P<iter>\d[\d,]*), lr:\s*\(?(?P<lr>[-+\d.eE]+|nan|inf),?[^)\]>]*\)?"
    r"(?:\]|>)(?P<body>.*)$"
)
PAIR = rf"\b(?P<k>[A-Za-z_]\w*): (?P<v>{NUM_TOKEN})"
# the eta/time block after the head: `[eta: 6 days, 20:47:16, time (data): 0.719 (0.005)]`
ETA = r"^\s*\[eta:[^\]]*\]"
VALIDATION = r"\bValidation \S"
# `\t # psnr: 27.1234\tBest: 27.1234 @ 10000 iter` (BasicSR >= 1.3), or on the Validation line itself
EVAL_PAIR = rf"#\s*(?P<k>[A-Za-z_]\w*):\s*(?P<v>{NUM_TOKEN})"
DISCRIMINATOR = r"^l_d(?:_|$)"
TOTALS = ("l_g_total", "l_total")


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(
        sample,
        [
            (r"\[epoch:\s*\d+, iter:\s*\d[\d,]*, lr:\(", 0.9),
            (r"<epoch:\s*\d+, iter:\s*\d[\d,]*, lr:[-+\d.eE]+>", 0.9),
        ],
    )


def _train_values(hit: pl.DataFrame) -> pl.DataFrame:
    body = hit.select("line", pl.col("body").str.replace(ETA, "").alias("text"))
    pairs = find_pairs(body, PAIR)
    terms = parse_numbers(pairs, raw="v", out="value").filter(pl.col("value").is_not_null())
    is_term = pl.col("k").str.starts_with("l_")
    named = terms.select(
        "line",
        pl.when(is_term)
        .then("loss_" + pl.col("k").str.slice(2))
        .otherwise(pl.col("k"))
        .str.to_lowercase()
        .alias("name"),
        "value",
    )
    # the loss: a logged total, else the sum of the generator's terms (NaN when one of them is)
    totals = terms.filter(pl.col("k").is_in(TOTALS)).group_by("line").agg(pl.col("value").first())
    summed = (
        terms.filter(is_term & ~pl.col("k").str.contains(DISCRIMINATOR) & ~pl.col("k").is_in(TOTALS))
        .group_by("line")
        .agg(pl.col("value").sum())
        .join(totals.select("line"), on="line", how="anti")
    )
    loss = pl.concat([totals, summed]).select("line", pl.lit("loss").alias("name"), "value")
    head = captured_values(hit, {"epoch": "epoch", "lr": "lr"})
    return pl.concat([named, loss, head.filter(pl.col("value").is_not_null())])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    g = lines.with_columns(pl.col("text").str.extract_groups(HEAD).alias("_g")).unnest("_g")
    hit = g.filter(pl.col("iter").is_not_null())
    train = hit.select(
        "line",
        step_int(pl.col("iter").str.replace_all(",", "")).alias("step"),
        "prefix_rank",
        pl.lit("train").alias("record_kind"),
        extract_time(pl.col("text")).alias("time"),
    )
    values = [_train_values(hit)]
    records = [train]
    # validation: the `Validation <set>` line and the `# metric: value` lines under it, at the last train step
    is_val = pl.col("text").str.contains(VALIDATION)
    evals = (
        g.select("line", "text", "prefix_rank", step=pl.col("iter").str.replace_all(",", "").forward_fill())
        .with_columns(
            pl.when(is_val).then(pl.col("line")).when(pl.col("text").str.contains(HEAD)).then(-1).alias("_blk")
        )
        .with_columns(pl.col("_blk").forward_fill())
        .filter(pl.col("step").is_not_null() & (pl.col("_blk") > 0) & pl.col("text").str.contains(EVAL_PAIR))
    )
    if evals.height:
        pairs = find_pairs(evals.select("line", "text"), EVAL_PAIR)
        ev = parse_numbers(pairs, raw="v", out="value").filter(pl.col("value").is_not_null())
        values.append(ev.select("line", ("eval_" + pl.col("k").str.to_lowercase()).alias("name"), "value"))
        records.append(
            evals.select(
                "line",
                step_int(pl.col("step")).alias("step"),
                "prefix_rank",
                pl.lit("eval").alias("record_kind"),
                extract_time(pl.col("text")).alias("time"),
            )
        )
    unparsed = lines.join(hit.select("line"), on="line", how="anti").filter(
        pl.col("text").str.contains(r"[\[<]epoch:\s*\d+, iter:")
    )
    return text_result(src.name, lines, pl.concat(records), pl.concat(values), unparsed, mode="done")
