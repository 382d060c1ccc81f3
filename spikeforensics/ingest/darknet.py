"""Darknet YOLO training stdout: pjreddie/darknet, AlexeyAB/darknet and hank-ai/darknet.

One iteration record per line, printed after the iteration's update (`get_current_batch` /
`get_current_iteration`: the iterations done). The printing code:

    AlexeyAB/darknet src/detector.c train_detector (2019-2023):
      printf("\\n %d: %f, %f avg loss, %f rate, %lf seconds, %d images, %f hours left\\n", iteration, loss, avg_loss, get_current_rate(net), ..., iteration*imgs, avg_time);
      (2018-19 builds: the same without `, %f hours left`)
    pjreddie/darknet examples/detector.c, yolo.c, coco.c, ...:
      printf("%ld: %f, %f avg, %f rate, %lf seconds, %d images\\n", get_current_batch(net), loss, avg_loss, ...);
    pjreddie/darknet examples/classifier.c (and AlexeyAB src/classifier.c, with `, %f hours left`):
      printf("%ld, %.3f: %f, %f avg, %f rate, %lf seconds, %ld images\\n", get_current_batch(net), (float)(*net->seen)/N, loss, avg_loss, ...);
    pjreddie/darknet examples/rnn.c: printf("%d: %f, %f avg, %f rate, %lf seconds, %f epochs\\n", ...)
    hank-ai/darknet src-lib/detector.cpp (Darknet V2/V3, 2023-):
      "5989: loss=0.444, avg loss=0.329, rate=0.000026, 64.424 milliseconds, 383296 images, time remaining=7 seconds"

so the lines read

     28: -nan, -nan avg loss, 0.000000 rate, 0.797576 seconds, 1792 images
     8001: 0.595442, 0.595442 avg loss, 0.001300 rate, 13.209250 seconds, 512064 images, 12.345 hours left
    1200, 3.840: 2.301212, 2.287713 avg, 0.100000 rate, 0.412311 seconds, 153600 images
    5989: loss=0.444, avg loss=0.329, rate=0.000026, 64.424 milliseconds, 383296 images, time remaining=7 seconds

Step = the iteration; values `loss` (the iteration's loss), `avg_loss` (darknet's running average,
0.9 * avg + 0.1 * loss), `lr` (`rate`), `step_time_ms` (the seconds or milliseconds), `consumed_samples`
(`images`), `epoch` (the classifier's `%.3f` epoch fraction). C printf's NaN/Inf spellings are
read (`-nan`, `nan`, `inf`, MSVC's `-nan(ind)`, `1.#QNAN0`, `1.#INF00`).

Not step records: the per-subdivision layer lines (`Region Avg IOU: nan, Class: nan, Obj: -nan,
...`, `v3 (iou loss, Normalizer: ...) Region 161 Avg (IOU: ...), ..., total_loss = 30721.574219`),
`Loaded: 0.000000 seconds`, ` Tensor Cores are disabled until the first 3000 iterations are reached.`
An mAP line (` mean_average_precision (mAP@0.50) = 0.812345`, AlexeyAB `-map`) is an eval record
(`eval_map`) at the step of the iteration printed before it. Darknet's CUDA failures
(`CUDA status Error: file: ...dark_cuda.c : cuda_push_array() : line: 469 ...`, ` CUDA Error: an
illegal instruction was encountered`) are `error` events (text_events CUDA_ERROR); a file that
shows darknet's layer lines but no iteration line is still claimed, for those events.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import CNUM, c_number
from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    captured_values,
    prepared_lines,
    sniff_tiers,
    step_int,
    text_result,
)

NAME = "darknet"
# a C printf number, MSVC spellings included
CLASSIC = (
    rf"^\s*(?:(?P<step>\d+)(?:,\s*(?P<epoch>{CNUM}))?:\s+)?(?P<loss>{CNUM}),\s+(?P<avg>{CNUM}) avg(?: loss)?,\s+"
    rf"(?P<lr>{CNUM}) rate,\s+(?P<sec>{CNUM}) seconds,\s+(?P<count>{CNUM}) (?P<unit>images|epochs)\b"
)
HANK = (
    rf"^\s*(?:(?P<step>\d+):\s+)?loss=(?P<loss>{CNUM}),\s+avg loss=(?P<avg>{CNUM}),\s+rate=(?P<lr>{CNUM}),\s+"
    rf"(?P<t>{CNUM}) (?P<tu>milliseconds|seconds|microseconds)(?:,\s+(?P<count>\d+) images)?"
)
MAP = rf"mean_average_precision \(mAP@[\d.]+\) = (?P<map>{CNUM})"
# darknet's own lines that are not records: enough to say the file is darknet's
DIAGNOSTIC = (
    r"Region Avg IOU: |^\s*v3 \((?:iou|mse|giou|diou|ciou) loss|Region \d+ Avg \(IOU: |CUDA status Error: file: |"
    r"Tensor Cores are disabled until|\(next mAP calculation at \d+|^\s*Loaded: [\d.]+ seconds"
)


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(
        sample,
        [
            (r"^\s*(?:\d+(?:, [\d.]+)?: )?\S+, \S+ avg(?: loss)?, \S+ rate, \S+ seconds, \S+ (?:images|epochs)", 0.8),
            (r"^\s*(?:\d+: )?loss=\S+, avg loss=\S+, rate=\S+, ", 0.8),
            (DIAGNOSTIC, 0.55),
        ],
    )


def _step_and_rank(frame: pl.DataFrame) -> pl.DataFrame:
    """The iteration: as printed; or, for `%d: ` at the line start with up to 4 digits (pjreddie,
    hank-ai print no leading space), the number the launcher-prefix stripper took for an
    `srun --label` rank: then it is the step, and no rank."""
    from_prefix = pl.col("step").is_null() & pl.col("prefix_rank").is_not_null()
    return frame.with_columns(
        step_int(pl.coalesce(pl.col("step"), pl.col("prefix_rank").cast(pl.String))).alias("step"),
        pl.when(from_prefix).then(None).otherwise(pl.col("prefix_rank")).cast(pl.Int32).alias("prefix_rank"),
    ).filter(pl.col("step").is_not_null())


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains(" avg", literal=True))
    recs, vals = [], []
    classic = (
        cand.with_columns(text.str.extract_groups(CLASSIC).alias("_g"))
        .unnest("_g")
        .filter(pl.col("loss").is_not_null())
    )
    classic = _step_and_rank(classic)
    if classic.height:
        classic = classic.with_columns(
            *[c_number(pl.col(c)) for c in ("loss", "avg", "lr", "epoch")],
            (pl.col("sec").cast(pl.Float64, strict=False) * 1000).cast(pl.String).alias("ms"),
            pl.when(pl.col("unit") == "images").then(pl.col("count")).alias("images"),
            pl.when(pl.col("unit") == "epochs").then(pl.col("count")).alias("epochs"),
        ).with_columns(pl.coalesce("epoch", "epochs").alias("epoch"))
        recs.append(classic.select("line", "step", "prefix_rank"))
        vals.append(
            captured_values(
                classic,
                {
                    "loss": "loss",
                    "avg": "avg_loss",
                    "lr": "lr",
                    "ms": "step_time_ms",
                    "images": "consumed_samples",
                    "epoch": "epoch",
                },
            )
        )
    rest = cand.join(classic.select("line"), on="line", how="anti") if classic.height else cand
    hank = _step_and_rank(
        rest.with_columns(text.str.extract_groups(HANK).alias("_g")).unnest("_g").filter(pl.col("loss").is_not_null())
    )
    if hank.height:
        scale = (
            pl.when(pl.col("tu") == "seconds")
            .then(1000.0)
            .when(pl.col("tu") == "microseconds")
            .then(0.001)
            .otherwise(1.0)
        )
        hank = hank.with_columns(
            *[c_number(pl.col(c)) for c in ("loss", "avg", "lr")],
            (pl.col("t").cast(pl.Float64, strict=False) * scale).cast(pl.String).alias("ms"),
        )
        recs.append(hank.select("line", "step", "prefix_rank"))
        vals.append(
            captured_values(
                hank, {"loss": "loss", "avg": "avg_loss", "lr": "lr", "ms": "step_time_ms", "count": "consumed_samples"}
            )
        )
    records = (
        pl.concat(recs) if recs else pl.DataFrame(schema={"line": pl.Int64, "step": pl.Int64, "prefix_rank": pl.Int32})
    )
    records = records.with_columns(pl.lit("train").alias("record_kind")).sort("line")
    # mAP lines: eval records at the step of the iteration line before them
    maps = (
        lines.filter(text.str.contains("mean_average_precision", literal=True))
        .with_columns(c_number(text.str.extract(MAP, 1).alias("map")))
        .filter(pl.col("map").is_not_null())
    )
    if maps.height and records.height:
        maps = maps.sort("line").join_asof(
            records.select(pl.col("line").alias("_rl"), pl.col("step").alias("_rs")).sort("_rl"),
            left_on="line",
            right_on="_rl",
            strategy="backward",
        )
        records = pl.concat(
            [
                records,
                maps.select("line", pl.col("_rs").alias("step"), "prefix_rank", pl.lit("eval").alias("record_kind")),
            ],
            how="diagonal_relaxed",
        ).sort("line")
        vals.append(captured_values(maps, {"map": "eval_map"}))
    values = (
        pl.concat(vals) if vals else pl.DataFrame(schema={"line": pl.Int64, "name": pl.String, "value": pl.Float64})
    )
    # a line that starts like an iteration record (`N: x, y avg`) but did not parse
    looks = cand.filter(text.str.contains(r"^\s*(?:\d+(?:,\s*\S+)?:\s+)?\S+, \S+ avg\b|avg loss=")).join(
        records.select("line"), on="line", how="anti"
    )
    return text_result(src.name, lines, records, values, looks, mode="done")
