"""ESPnet2's trainer reports (`espnet2/train/trainer.py`, `reporter.py`): one line per logging
interval of means over its batches.

    [host] 2021-03-01 12:00:00,123 (trainer:672) INFO: 1epoch:train:1-1020batch: iter_time=0.002,
        forward_time=0.112, loss=6.474, backward_time=0.487, optim_step_time=0.097, optim0_lr0=5.130e-05,
        train_time=1.857
    ... INFO: 12epoch:train:4001-4100batch: iter_time=..., loss_ctc=45.2, loss_att=30.1, acc=0.82, loss=34.6,
        grad_norm=85.3, clip=100.000, loss_scale=65536.000, optim_step_time=..., optim0_lr0=...

Printing code: `Trainer.train_one_epoch` logs `reporter.log_message(-log_interval)` every
`log_interval` batches: `{epoch}epoch:train:{start}-{end}batch: ` then the interval means as
`key=value` (`reporter.py` `log_message`, 4 significant digits). The step is the interval's last
batch, which restarts every epoch (each epoch is then an attempt of its own); `optim0_lr0` is the
learning rate (`lr`); `grad_norm`, `clip` and `loss_scale` are printed when the model has them.

`optim_step_time` is averaged over the optimizer steps actually taken: `nan` says that no update ran
in the interval, which is what the trainer does when the grad norm is not finite (`The grad norm is
nan. Skipping updating the model.`, the scheduler not stepped either): a `skipped_step` event at the
interval's step. The per-epoch summaries (`N epoch results: [train] ... [valid] ...`) are not records.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    find_pairs,
    named_values,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "espnet2"
LINE = r"\b(\d+)epoch:train:(\d+)-(\d+)batch:\s*"
PAIR = rf"(?P<k>[A-Za-z_][\w/.-]*)=(?P<v>{NUM_TOKEN})(?:,|\s|$)"
RENAME = {"optim0_lr0": "lr"}


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, LINE + r".*\bloss\w*=") else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    rec = lines.filter(text.str.contains(LINE)).with_columns(
        step_int(text.str.extract(LINE, 3)).alias("step"),
        text.str.extract(LINE, 1).cast(pl.Float64, strict=False).alias("_epoch"),
        extract_time(text).alias("time"),
        pl.lit("train").alias("record_kind"),
    )
    body = rec.select("line", text.str.replace(rf"^.*?{LINE}", "").alias("text"))
    pairs = find_pairs(body, PAIR).with_columns(pl.col("k").replace(RENAME))
    values = named_values(pairs, eval_rows=pl.lit(False)).select("line", "name", "value")
    values = pl.concat(
        [values, rec.select("line", pl.lit("epoch").alias("name"), pl.col("_epoch").alias("value"))],
        how="vertical_relaxed",
    )
    skipped = (
        values.filter((pl.col("name") == "optim_step_time") & pl.col("value").is_nan())
        .join(rec.select("line", "step", pl.col("prefix_rank").alias("rank"), "time"), on="line")
        .select(
            "line",
            "step",
            "rank",
            pl.lit("skipped_step").alias("kind"),
            "time",
            pl.lit('{"reason": "optim_step_time nan: no optimizer step ran in the logging interval"}').alias("detail"),
        )
    )
    records = rec.select("line", "step", "prefix_rank", "record_kind", "time")
    return text_result(src.name, lines, records, values, mode="done", extra_events=skipped if skipped.height else None)
