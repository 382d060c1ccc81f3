"""EESEN (srvk/eesen, Kaldi-based end-to-end CTC speech recognition) `train-ctc-parallel` progress lines:

    VLOG[1](train-ctc-parallel:EvalParallel%28%29:ctc-loss.cc:182) After 62000 sequences (33.1789Hr): Obj(log[Pzx]) = -8.45854   TokenAcc = 97.4986%

Printed every `report_step` sequences (`ctc-loss.cc`, `EvalParallel`): the sequences trained on so far in
this iteration (the step), the hours of audio, the CTC objective over the last report interval and the
running token accuracy. The objective is a log-likelihood (higher is better) and EESEN floors log(0) at
-1e30: `loss` is its negative, so a blow-up reads as the loss jumping to 1e27-1e30; `token_acc` is kept
(percent). The counter restarts with every training iteration (a new attempt).
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

NAME = "eesen"
LINE = (
    rf"\bAfter (?P<step>\d+) sequences \((?P<hours>{NUM_TOKEN})\s*Hr\): Obj\(log\[Pzx\]\) = (?P<obj>{NUM_TOKEN})"
    rf"(?:\s+TokenAcc = (?P<acc>{NUM_TOKEN})%)?"
)


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(sample, [(r"\bAfter \d+ sequences \([^)]*Hr\): Obj\(log\[Pzx\]\) = ", 0.9)])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    cand = lines.filter(pl.col("text").str.contains("Obj(log[Pzx])", literal=True))
    recs, vals, rest = grammar_records(cand, LINE, {"obj": "ctc_objective", "acc": "token_acc"})
    loss = vals.filter(pl.col("name") == "ctc_objective").select("line", pl.lit("loss").alias("name"), -pl.col("value"))
    return text_result(src.name, lines, recs, pl.concat([vals, loss]), rest, mode="done")
