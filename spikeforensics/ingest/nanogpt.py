"""nanoGPT family stdout: nanoGPT `iter N: loss X, time Tms[, mfu M%]`, llama2.c
`N | loss X | lr Y | Tms | mfu M%`, modded-nanogpt `step:N/M train_loss:X train_time:Tms
step_avg:Sms`, and the eval lines `step N: train loss X, val loss Y` /
`step:N/M val_loss:X ...` (eval records: `eval_loss`, record null).

Steps are `iter_num` as printed (the iteration that just finished; mode "done").
`mfu -100.00%` is nanoGPT's "not measured yet" sentinel, not an MFU: dropped. A
`loss nan` line is a NaN row (and a `nan` event, added by the driver).
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    captured_values,
    extract_time,
    prepared_lines,
    sniff_tiers,
    step_int,
    text_result,
)

NAME = "nanogpt"
N = rf"(?:{NUM_TOKEN})"
NANOGPT = rf"\biter (?P<step>\d+): loss (?P<loss>{N}), time (?P<time>{N})\s*ms(?:, mfu (?P<mfu>{N})%)?"
LLAMA2C = rf"^\s*(?P<step>\d+) \| loss (?P<loss>{N}) \| lr (?P<lr>{N}) \| (?P<time>{N})\s*ms(?: \| mfu (?P<mfu>{N})%)?"
MODDED = rf"\bstep:(?P<step>\d+)/\d+ (?P<which>train|val)_loss:(?P<loss>{N})(?: train_time:(?P<ttime>{N})ms)?(?: step_avg:(?P<time>{N})ms)?"
EVAL = rf"\bstep (?P<step>\d+): train loss (?P<train>{N}), val loss (?P<val>{N})"
LOOKS_LIKE = r"\biter \d+:|\bstep \d+: train loss|\bstep:\d+/\d+ (?:train|val)_loss"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(
        sample,
        [
            (r"\biter \d+: loss |\bstep:\d+/\d+ (?:train|val)_loss:", 0.9),
            (r"^\s*\d+ \| loss \S+ \| lr \S+ \| \S+ms", 0.85),
            (r"\bstep \d+: train loss \S+, val loss ", 0.8),
        ],
    )


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains(r"iter |loss|\| lr "))
    recs, vals = [], []
    for pattern, kind, cols in (
        (NANOGPT, "train", {"loss": "loss", "time": "step_time_ms", "mfu": "mfu"}),
        (LLAMA2C, "train", {"loss": "loss", "lr": "lr", "time": "step_time_ms", "mfu": "mfu"}),
        (EVAL, "eval", {"val": "eval_loss", "train": "eval_train_loss"}),
    ):
        g = (
            cand.with_columns(text.str.extract_groups(pattern).alias("_g"))
            .unnest("_g")
            .filter(pl.col("step").is_not_null())
        )
        cand = cand.join(g.select("line"), on="line", how="anti")
        recs.append(
            g.select(
                "line",
                step_int(pl.col("step")),
                "prefix_rank",
                pl.lit(kind).alias("record_kind"),
                extract_time(text).alias("time"),
            )
        )
        vals.append(captured_values(g, cols))
    g = cand.with_columns(text.str.extract_groups(MODDED).alias("_g")).unnest("_g").filter(pl.col("step").is_not_null())
    cand = cand.join(g.select("line"), on="line", how="anti")
    kind = pl.when(pl.col("which") == "val").then(pl.lit("eval")).otherwise(pl.lit("train"))
    recs.append(
        g.select(
            "line", step_int(pl.col("step")), "prefix_rank", kind.alias("record_kind"), extract_time(text).alias("time")
        )
    )
    g = g.with_columns(
        pl.when(pl.col("which") == "val").then(pl.col("loss")).alias("val"),
        pl.when(pl.col("which") == "train").then(pl.col("loss")).alias("train"),
    )
    vals.append(
        captured_values(g, {"train": "loss", "val": "eval_loss", "ttime": "train_time_ms", "time": "step_avg_ms"})
    )
    values = pl.concat(vals)
    # nanoGPT prints `mfu -100.00%` until the running MFU is measured: not a value
    values = values.filter(~((pl.col("name") == "mfu") & (pl.col("value") < 0)))
    records = pl.concat(recs)
    unparsed = cand.filter(text.str.contains(LOOKS_LIKE))
    return text_result(src.name, lines, records, values, unparsed, mode="done")
