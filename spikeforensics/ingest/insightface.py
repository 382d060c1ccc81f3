"""insightface `arcface_torch` (partial FC) training prints:

    Training: 2022-05-05 03:05:53,162-Speed 727.03 samples/sec   Loss 43.9404   LearningRate 0.1000   Epoch: 0   Global Step: 320   Fp16 Grad Scale: 131072   Required: 453 hours
    Training: 2021-06-01 16:22:55,751-Speed 219.17 samples/sec   Loss 2.3655   Epoch: 0   Global Step: 14550   Required: 102 hours   # 2021: no LR / scale

Step = `Global Step` (optimizer steps done; mode "done"). `Loss` -> `loss` (`nan` is a NaN
row), `LearningRate` -> `lr`, `Fp16 Grad Scale` -> `loss_scale` (the torch GradScaler scale),
`Speed` -> `samples_per_s`, `Epoch` -> `epoch`. The older MXNet recognition logs
(`Epoch[0] Batch [720-740]\tSpeed: ... acc=...`, `lr-batch-epoch: 0.1 999 0`) print no loss
and are not read.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import grammar_records
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    prepared_lines,
    sniff_tiers,
    text_result,
)

NAME = "insightface"
N = rf"(?:{NUM_TOKEN})"
LINE = (
    rf"\bSpeed (?P<speed>{N}) samples/sec\s+Loss (?P<loss>{N})(?:\s+LearningRate (?P<lr>{N}))?\s+"
    rf"Epoch: (?P<epoch>\d+)\s+Global Step: (?P<step>\d+)(?:\s+Fp16 Grad Scale: (?P<scale>{N}))?"
)


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(sample, [(r"\bSpeed \S+ samples/sec\s+Loss \S+.*\bGlobal Step: \d+", 0.9)])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    cand = lines.filter(pl.col("text").str.contains("Global Step:", literal=True))
    recs, vals, rest = grammar_records(
        cand, LINE, {"loss": "loss", "lr": "lr", "epoch": "epoch", "scale": "loss_scale", "speed": "samples_per_s"}
    )
    unparsed = rest.filter(pl.col("text").str.contains(r"\bLoss \S+.*Global Step: \d+"))
    return text_result(src.name, lines, recs, vals, unparsed, mode="done")
