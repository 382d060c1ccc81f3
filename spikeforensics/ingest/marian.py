"""Marian NMT (`marian-nmt/marian`, `marian-nmt/marian-dev`, C++) training logs.

The display line is `Scheduler::update` in `src/training/scheduler.h` (marian-dev), printed every
`--disp-freq` updates (and for the first `--disp-first` ones) through spdlog, which puts
`[YYYY-MM-DD HH:MM:SS] ` in front:

    LOG(info, "Ep. {} : Up. {} : Sen. {} : {} : Time {:.2f}s : {:.2f} words/s : gNorm {:.4f}", ...)
    LOG(info, "Ep. {} : Up. {} : Sen. {} : {} : Time {:.2f}s : {:.2f} words/s : gNorm {:.4f} : L.r. {:.4e}", ...)  # --lr-report

    [2020-09-05 20:22:04] Ep. 1 : Up. 100 : Sen. 46,750 : Cost 314.00448608 : Time 35.20s : 5532.88 words/s : gNorm 20126.2366
    [2020-09-05 20:22:42] Ep. 1 : Up. 300 : Sen. 137,255 : Cost nan : Time 17.18s : nan words/s : gNorm 41172.8250
    [2021-03-01 10:00:00] Ep. 1.250 : Up. 2500 : Sen. 1,234,567 : Cost 2.34567890 * 1,234,567 @ 12,345 after 98,765,432 : Time 50.12s : 24567.89 words/s : gNorm 0.8123 : L.r. 3.0000e-04

The `{}` after `Sen.` is `formatLoss`: `Cost X` for every `--cost-type`, followed for `ce-sum` with
`--disp-label-counts` by ` * labels [@ batch-labels] after total-labels`. Older releases
(`marian-nmt/marian:src/training/scheduler.h`, 1.x) print no `gNorm` and a plain sample count:
`Ep. 1 : Up. 500 : Sen. 25000 : Cost 123.45 : Time 50.12s : 12345.67 words/s [: L.r. 3.0000e-04]`.
`Ep.` is a logical epoch (`--logical-epoch`: fractional, 3 decimals).

-> a training record: step = `Up.` (updates done), `loss` = the number after `Cost` (the cost
type's mean over the display interval), `grad_norm` = `gNorm` (marian-dev prints
`gradientNormAvg`, an exponential average over `--gradient-norm-average-window` updates, not the
last update's norm), `lr` = `L.r.`, `tokens_per_s` = words/s (target labels per second),
`epoch`, `sentences` (`Sen.`, samples seen in this epoch), `interval_time_s` (`Time`, seconds
since the previous display line). `nan`/`-nan`/`inf` as {fmt} and iostreams print them.

Validation (`Scheduler::validate`), through the `[valid]` logger (in the main log and in
`--valid-log`):

    [2020-09-06 01:00:00] [valid] Ep. 1 : Up. 5000 : ce-mean-words : 2.345 : new best
    [2020-09-06 02:00:00] [valid] Ep. 2 : Up. 10000 : bleu : 23.45 : stalled 1 times (last best: 24.1)
    [2018-01-01 10:00:00] [valid] 5000 : cross-entropy : 123.45 : new best          # 1.x: no Ep./Up.

-> an eval record per validator line: `ce-mean-words` is `eval_loss` (and `cross-entropy` /
`ce-mean` / `ce-sum` when the file has no `ce-mean-words` validator); the others keep their
name as `eval_<type>` (`eval_perplexity`, `eval_bleu`, `eval_translation`, ...).

Events: `Saving model weights and runtime parameters to F` is a `checkpoint_save`; fp16
cost scaling (`GraphGroup::decreaseCostScaleFactor`, debug level) `Seen NaN/Inf after N gradient
updates. Reduced cost-scaling factor to X` is an `overflow` (the update is skipped) with
`new_scale` X and `old_scale` X * 2 (the default multiplier; none in the `to minimum X` form,
where the factor may not have changed); other events come from the shared
extractor.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._event_frames import _ret
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    captured_values,
    detail_expr,
    extract_time,
    normalise_name,
    prepared_lines,
    sniff_tiers,
    step_int,
    text_result,
)

NAME = "marian"
TRAIN = (
    r"\bEp\. (?P<ep>\d+(?:\.\d+)?) : Up\. (?P<step>\d+) : Sen\. (?P<sen>[\d,]+) : "
    rf"Cost (?P<cost>{NUM_TOKEN})(?P<rest>.*)$"
)
TIME = rf" : Time (?P<time>{NUM_TOKEN})s\b"
WPS = rf" : (?P<wps>{NUM_TOKEN}) words/s\b"
GNORM = rf" : gNorm (?P<gn>{NUM_TOKEN})"
LR = rf" : L\.r\. (?P<lr>{NUM_TOKEN})"
VALID = (
    r"\[valid\] (?:Ep\. \d+(?:\.\d+)? : Up\. (?P<vstep>\d+)|(?P<vstep_old>\d+)) : "
    rf"(?P<vtype>[A-Za-z][\w-]*) : (?P<vval>{NUM_TOKEN}) : (?:new best|stalled)"
)
LOOSE = r"\bEp\. [\d.]+ : Up\. \d|\[valid\] "
SAVE = r"Saving model weights and runtime parameters to (?P<path>\S+)"
COST_SCALE = rf"Seen NaN(?:/Inf)? .*?[Rr]educed cost-scaling factor to (?P<min>minimum )?(?P<scale>{NUM_TOKEN})"
CE_TYPES = ("cross-entropy", "ce-mean", "ce-sum")
COST_SCALE_MULTIPLIER = 2.0  # marian's default --cost-scaling multiplier


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(sample, [(TRAIN, 0.9), (VALID, 0.6)])


def _eval_names(types: list[str]) -> dict[str, str]:
    has_words = "ce-mean-words" in types
    names = {}
    for t in types:
        if t == "ce-mean-words" or (t in CE_TYPES and not has_words):
            names[t] = "eval_loss"
        else:
            names[t] = "eval_" + normalise_name(t)
    return names


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains(LOOSE))
    g = (
        cand.with_columns(text.str.extract_groups(TRAIN).alias("_g"))
        .unnest("_g")
        .filter(pl.col("step").is_not_null())
        .with_columns(
            pl.col("rest").str.extract_groups(TIME).alias("_t"),
            pl.col("rest").str.extract_groups(WPS).alias("_w"),
            pl.col("rest").str.extract_groups(GNORM).alias("_n"),
            pl.col("rest").str.extract_groups(LR).alias("_l"),
            pl.col("sen").str.replace_all(",", "").alias("sen"),
        )
        .unnest("_t", "_w", "_n", "_l")
    )
    time = extract_time(text).alias("time")
    records = g.select(
        "line", step_int(pl.col("step")).alias("step"), "prefix_rank", time, pl.lit("train").alias("record_kind")
    )
    values = captured_values(
        g,
        {
            "cost": "loss",
            "gn": "grad_norm",
            "lr": "lr",
            "wps": "tokens_per_s",
            "ep": "epoch",
            "sen": "sentences",
            "time": "interval_time_s",
        },
    )
    v = cand.with_columns(text.str.extract_groups(VALID).alias("_g")).unnest("_g").filter(pl.col("vval").is_not_null())
    if v.height:
        names = _eval_names(v.get_column("vtype").unique(maintain_order=True).to_list())
        v = v.with_columns(pl.coalesce("vstep", "vstep_old").alias("vstep"))
        records = pl.concat(
            [
                records,
                v.select(
                    "line",
                    step_int(pl.col("vstep")).alias("step"),
                    "prefix_rank",
                    time,
                    pl.lit("eval").alias("record_kind"),
                ),
            ]
        ).sort("line")
        ev = captured_values(v.select("line", "vval"), {"vval": "eval"})
        ev = ev.join(v.select("line", pl.col("vtype").replace_strict(names).alias("_n")), on="line").select(
            "line", pl.col("_n").alias("name"), "value"
        )
        values = pl.concat([values, ev])
    unparsed = cand.join(records.select("line"), on="line", how="anti").select("line", "text")
    return text_result(src.name, lines, records, values, unparsed, mode="done", extra_events=_events(lines))


def _events(lines: pl.DataFrame) -> pl.DataFrame | None:
    text = pl.col("text")
    hits = lines.filter(
        text.str.contains("Saving model weights", literal=True) | text.str.contains("cost-scaling factor", literal=True)
    )
    if hits.height == 0:
        return None
    hits = hits.with_columns(
        text.str.extract(SAVE, 1).alias("_path"),
        text.str.extract(COST_SCALE, 2).alias("_sc"),
        text.str.extract(COST_SCALE, 1).is_null().alias("_halved"),
    )
    scale = pl.col("_sc").cast(pl.Float64, strict=False)
    saves = hits.filter(pl.col("_path").is_not_null())
    ovf = hits.filter(scale.is_not_null())
    frames = [
        _ret(saves, "checkpoint_save", lambda: detail_expr(strings={"path": pl.col("_path")})),
        _ret(
            ovf,
            "overflow",
            lambda: detail_expr(
                floats={
                    "new_scale": scale,
                    "old_scale": pl.when(pl.col("_halved")).then(scale * COST_SCALE_MULTIPLIER),
                },
                strings={"source_format": pl.lit("marian")},
            ),
        ),
    ]
    return pl.concat(frames)
