"""The VITS trainer's log (jaywalnut310/vits `train.py`) and the many TTS / voice-conversion repos built on
it (so-vits-svc, Bert-VITS2, MB-iSTFT-VITS, ...), through `utils.get_logger` (`time<TAB>model<TAB>INFO<TAB>msg`):

    2023-03-26 21:08:35,152	32k	INFO	Train Epoch: 1 [0%]
    2023-03-26 21:08:35,153	32k	INFO	[2.2431, 2.6726, 13.9076, 41.0335, 13.5840, 0, 0.0001]

Printing code, every `log_interval` steps: `logger.info('Train Epoch: {} [{:.0f}%]'.format(epoch, ...))`, then
`logger.info([x.item() for x in losses] + [global_step, lr])`: the list carries no names. Its last two
elements are the global step and the LR; the ones before are the losses in the trainer's order: VITS and
Bert-VITS2 `[loss_disc, loss_gen, loss_fm, loss_mel, loss_dur, loss_kl]` (6), so-vits-svc
`[loss_disc, loss_gen, loss_fm, loss_mel, loss_kl]` (5); another count keeps positional names
(`loss_1`, ...). The list line is the training-step record (step = its global step), the epoch of the
`Train Epoch` line before it a metric. The discriminator's loss beside the generator's is a GAN's pair,
judged without a ratio scale (`RunData.loss_without_ratio`).
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import empty_values
from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "vits"
HEAD = r"Train Epoch: (\d+) \[\d+%\]\s*$"
NUM = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf)"
LIST = rf"\[\s*{NUM}(?:\s*,\s*{NUM}){{3,}}\s*\]\s*$"
NAMES = {
    6: ["loss_disc", "loss_gen", "loss_fm", "loss_mel", "loss_dur", "loss_kl"],
    5: ["loss_disc", "loss_gen", "loss_fm", "loss_mel", "loss_kl"],
}
MAX_GAP = 2  # lines from the `Train Epoch` line to its list


def sniff(sample: SniffSample) -> float:
    heads, lists = sniff_share(sample, HEAD), sniff_share(sample, r"(?:^|\s)" + LIST)
    return 0.9 if heads and lists and min(heads, lists) >= min(2, max(1, len(sample.lines) // 2)) else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src).sort("line")
    text = pl.col("text")
    marked = lines.with_columns(
        text.str.extract(HEAD, 1).cast(pl.Int64, strict=False).alias("_epoch"),
        pl.when(text.str.contains(HEAD)).then(pl.col("line")).alias("_head"),
        text.str.extract(r"(\[[^\[\]]*\])\s*$", 1).alias("_list"),
    ).with_columns(pl.col("_epoch").forward_fill(), pl.col("_head").forward_fill())
    hit = (
        marked.filter(
            text.str.contains(r"(?:^|\s)" + LIST)
            & pl.col("_head").is_not_null()
            & (pl.col("line") - pl.col("_head") <= MAX_GAP)
        ).filter(pl.col("line") == pl.col("line").min().over("_head"))  # the first list after its head
    ).with_columns(
        pl.col("_list").str.strip_chars("[] ").str.split(",").list.eval(pl.element().str.strip_chars()).alias("_v")
    )
    if hit.height == 0:
        return text_result(src.name, lines, lines.head(0).select("line"), empty_values())
    n = hit.get_column("_v").list.len()
    hit = hit.with_columns(n.alias("_n"))
    records = hit.select(
        "line",
        step_int(pl.col("_v").list.get(-2).cast(pl.Float64, strict=False)).alias("step"),
        "prefix_rank",
        pl.lit("train").alias("record_kind"),
        extract_time(text).alias("time"),
    )
    long = (
        hit.select("line", "_n", "_v", pl.int_ranges(pl.col("_v").list.len()).alias("_i"))
        .explode("_v", "_i")
        .with_columns(pl.col("_v").cast(pl.Float64, strict=False).alias("value"))
    )
    losses = pl.col("_n") - 2
    positional = pl.lit("loss_") + (pl.col("_i") + 1).cast(pl.String)
    named = pl.lit(None, dtype=pl.String)
    for count, names in NAMES.items():
        named = (
            pl.when(pl.col("_n") - 2 == count)
            .then(pl.col("_i").replace_strict(dict(enumerate(names)), default=None, return_dtype=pl.String))
            .otherwise(named)
        )
    name = (
        pl.when(pl.col("_i") == pl.col("_n") - 1)
        .then(pl.lit("lr"))
        .when(pl.col("_i") < losses)
        .then(pl.coalesce(named, positional))
    )
    values = long.with_columns(name.alias("name")).filter(pl.col("name").is_not_null()).select("line", "name", "value")
    epochs = hit.select("line", pl.lit("epoch").alias("name"), pl.col("_epoch").cast(pl.Float64).alias("value"))
    return text_result(src.name, lines, records, pl.concat([values, epochs]), mode="done")
