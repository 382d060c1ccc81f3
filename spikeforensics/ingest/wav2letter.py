"""wav2letter / flashlight ASR `Train` progress lines (one per `--reportiters` or epoch):

    epoch:      199 | nupdates:      6960891 | lr: 0.000015 | lrcriterion: 0.000015 | runtime: 03:50:03 | bch(ms): 392.63 | ... | loss:  256.12402 | train-TER: 105.42 | train-WER: 175.16 | dev-clean-loss:  150.81605 | dev-clean-TER: 79.23 | ...

Older builds print no `nupdates` (`epoch:        4 | lr: 1.600000 | lrcriterion: 0.000000 | ...`):
those records have no step (an epoch prints several).

Step = `nupdates` (optimizer updates done; mode "done"). Fields are `name: value` between
`|`; `loss` -> `loss`, `lr` -> `lr`; the other names are normalised (`bch(ms)` ->
`bch_ms`, `train-TER` -> `train_ter`, `dev-clean-loss` -> `dev_clean_loss`: the
validation figures stay on the train record, as printed); `runtime` (`HH:MM:SS`) is
not a number and is dropped.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    named_values,
    prepared_lines,
    sniff_tiers,
    split_colon_fields,
    step_int,
    text_result,
)

NAME = "wav2letter"
HEAD = r"\bepoch:\s+\d+\s+\|\s+nupdates:\s+(\d+)\s+\|"
# older builds print no `nupdates`: `epoch:        4 | lr: 1.600000 | lrcriterion: ... | loss:    3.33602 | ...`
OLD_HEAD = r"\bepoch:\s+\d+\s+\|\s+lr:\s+\S+\s+\|\s+lrcriterion:"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(sample, [(HEAD, 0.9), (OLD_HEAD, 0.85)])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    # step = `nupdates`; the older lines without it are records without a step (numbered in order:
    # an epoch prints several, so the epoch is no step)
    rec = lines.filter(text.str.contains(HEAD) | text.str.contains(OLD_HEAD)).with_columns(
        step_int(text.str.extract(HEAD, 1)).alias("step")
    )
    kv = split_colon_fields(rec.select("line", text.str.replace(r"^.*?\bepoch:", "epoch:")), "|")
    kv = kv.with_columns(pl.col("k").str.strip_chars()).filter(~pl.col("k").is_in(["nupdates", "runtime"]))
    values = named_values(kv).select("line", "name", "value")
    records = rec.select("line", "step", "prefix_rank", pl.lit("train").alias("record_kind"))
    return text_result(src.name, lines, records, values, None, mode="done")
