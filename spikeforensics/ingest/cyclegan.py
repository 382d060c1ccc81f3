"""`loss_log.txt` of junyanz/pytorch-CycleGAN-and-pix2pix (`util/visualizer.py`, `print_current_losses`),
also written by the many repos built on its trainer (pix2pix, CUT, AttentionGAN, ...); the same line goes
to stdout:

    ================ Training Loss (Wed Oct 30 10:43:06 2024) ================
    (epoch: 1, iters: 100, time: 2.416, data: 9.430) D_A: 0.540 G_A: 0.433 cycle_A: 2.246 idt_A: 1.263 ...
    (epoch: 2, iters: 64, time: 1.602, data: 0.002) D_A: 0.248 G_A: ...

Printing code: `'(epoch: %d, iters: %d, time: %.3f, data: %.3f) ' % (epoch, iters, t_comp, t_data)`, then
`'%s: %.3f ' % (k, v)` for each of the model's `loss_names`. A header line opens each launch (`train.py`
writes it when the visualizer starts), so a relaunch shows as the counter going back (a new `attempt`).

The step: `iters` is the samples seen in this epoch (`epoch_iter`, restarting each epoch), and a line is
printed when the run's total sample count is a multiple of `print_freq`. So `iters` grows by `print_freq`
inside an epoch, and the total keeps that rhythm across an epoch end: the epoch size is
n = last iters + print_freq - first iters of the next epoch (1300 + 100 - 64 = 1336). When every epoch end
of the file gives the same n, the step is the run's sample count (E - e0) * n + iters (e0 = 0 when an epoch
0 is printed, else 1); otherwise `iters` as printed (each epoch a new attempt, as for other per-epoch
counters). Values are stored as the model's attributes name them (`D_A` -> `loss_D_A`): a `D_*` beside a
`G_*` is a GAN's pair, judged without a ratio scale (`RunData.loss_without_ratio`). `time` and `data` are
seconds per sample of compute and loading, not training metrics.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._fields import find_pairs, parse_numbers
from spikeforensics.ingest._grammar_helpers import empty_values
from spikeforensics.ingest.base import (
    MAX_STEP,
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "cyclegan"
NUM = r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
# (the trainer's 2017 versions print no `data:` time: `(epoch: 1, iters: 100, time: 0.746) D_A: 0.281 ...`)
LINE = rf"^\(epoch: (?P<epoch>\d+), iters: (?P<iters>\d+), time: {NUM}(?:, data: {NUM})?\)(?P<body>.*)$"
PAIR = rf"(?P<k>[A-Za-z_]\w*): (?P<v>{NUM_TOKEN})(?:\s|$)"
# one value per domain (ComboGAN's `print_current_errors`: `D: 0.111, 0.105, 0.111, 0.130 | G: ... | Cyc: ... |`,
# a list per loss over its N domains): `D` of domain i (from 1) is stored as `loss_d_i`
LIST_PAIR = rf"(?P<k>[A-Za-z_]\w*): (?P<v>{NUM_TOKEN}(?:,\s*{NUM_TOKEN})+)"


def sniff(sample: SniffSample) -> float:
    hits = sniff_share(sample, r"^\(epoch: \d+, iters: \d+, time: [-+\d.]")
    return 0.9 if hits >= min(2, max(1, len(sample.lines))) else 0.0


def epoch_size(epoch: pl.Series, iters: pl.Series) -> int | None:
    """The samples per epoch that every epoch end of the file agrees on (see the module doc), or None.
    `print_freq` is the commonest rise of `iters` between two lines of one epoch."""
    frame = pl.DataFrame({"e": epoch, "i": iters}).with_columns(
        pl.col("e").shift(-1).alias("next_e"), pl.col("i").shift(-1).alias("next_i")
    )
    rises = frame.filter(pl.col("next_e") == pl.col("e")).select(pl.col("next_i") - pl.col("i")).to_series()
    rises = rises.filter(rises > 0)
    if rises.len() == 0:
        return None
    freq = int(rises.mode().min())
    ends = frame.filter(pl.col("next_e") == pl.col("e") + 1).select(pl.col("i") + freq - pl.col("next_i")).to_series()
    sizes = ends.unique()
    if sizes.len() != 1 or sizes[0] <= 0:
        return None
    return int(sizes[0])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    hit = (
        lines.with_columns(pl.col("text").str.extract_groups(LINE).alias("_g"))
        .unnest("_g")
        .filter(pl.col("epoch").is_not_null())
        .with_columns(pl.col("epoch").cast(pl.Int64, strict=False), pl.col("iters").cast(pl.Int64, strict=False))
    )
    if hit.height == 0:
        return text_result(src.name, lines, lines.head(0).select("line"), empty_values())
    n = epoch_size(hit.get_column("epoch"), hit.get_column("iters"))
    e0 = 0 if (hit.get_column("epoch") == 0).any() else 1
    sample = (pl.col("epoch") - e0).cast(pl.Float64) * (n or 0) + pl.col("iters").cast(pl.Float64)
    step = (
        pl.when(pl.lit(n is not None) & (sample <= MAX_STEP))
        .then(sample.round(0))
        .otherwise(pl.when(pl.lit(n is None)).then(pl.col("iters").cast(pl.Float64)).otherwise(pl.lit(float("inf"))))
    )
    records = hit.select(
        "line",
        step_int(step).alias("step"),
        "prefix_rank",
        pl.lit("train").alias("record_kind"),
        pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
    )
    body = hit.select("line", pl.col("body").alias("text"))
    listed = (
        find_pairs(body, LIST_PAIR)
        .with_columns(pl.col("v").str.split(","))
        .with_columns(pl.int_ranges(1, pl.col("v").list.len() + 1).alias("_i"))
        .explode("v", "_i")
        .select("line", (pl.col("k") + "_" + pl.col("_i").cast(pl.String)).alias("k"), pl.col("v").str.strip_chars())
    )
    # (a list's first value also matches a single pair, `D: 1,` of `D: 1, 2`: the list's reading wins)
    single = find_pairs(body, PAIR).select("line", "k", "v")
    pairs = pl.concat(
        [
            single.join(listed.select("line", pl.col("k").str.replace(r"_\d+$", "")), on=["line", "k"], how="anti"),
            listed,
        ]
    )
    values = parse_numbers(
        pairs.with_columns(("loss_" + pl.col("k")).str.to_lowercase().alias("name")), raw="v", out="value"
    )
    values = values.filter(pl.col("value").is_not_null()).select("line", "name", "value")
    epochs = hit.select("line", pl.lit("epoch").alias("name"), pl.col("epoch").cast(pl.Float64).alias("value"))
    return text_result(src.name, lines, records, pl.concat([values, epochs]), mode="done")
