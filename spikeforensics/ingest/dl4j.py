"""Deeplearning4j's training listeners (the JVM's logging through SLF4J/logback):

    06:38:16.402 [main] INFO org.deeplearning4j.optimize.listeners.ScoreIterationListener - Score at iteration 0 is 1.6235184989295723
    ... PerformanceListener - ETL: 0 ms; iteration 500; iteration time: 27 ms; samples/sec: 1185.185; batches/sec: 37.037; score: 0.5213;

`ScoreIterationListener` prints the model's score (the minibatch loss plus regularisation) every N
iterations; `PerformanceListener` the same score with timings (`samples/sec` only with `reportSample`). Step: the iteration (DL4J's counter over
the whole fit, not reset per epoch); `score` -> `loss`. The logback time has no date: `time` stays null.
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

NAME = "dl4j"
SCORE = rf"\bScore at iteration (?P<step>\d+) is (?P<loss>{NUM_TOKEN})"
PERFORMANCE = (
    rf"\biteration (?P<step>\d+); iteration time: (?P<ms>{NUM_TOKEN}) ms;(?:.*?\bsamples/sec: (?P<sps>{NUM_TOKEN});)?"
    rf".*?\bscore: (?P<loss>{NUM_TOKEN})"
)


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(sample, [(SCORE, 0.9), (r"\biteration \d+; iteration time: \S+ ms;.*\bscore: ", 0.9)])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    cand = lines.filter(pl.col("text").str.contains(r"\bScore at iteration|; iteration time: "))
    recs, vals, rest = grammar_records(cand, SCORE, {"loss": "loss"})
    recs2, vals2, rest = grammar_records(
        rest, PERFORMANCE, {"loss": "loss", "ms": "step_time_ms", "sps": "samples_per_s"}
    )
    records = pl.concat([recs, recs2]).with_columns(pl.lit(None, dtype=recs.schema["time"]).alias("time"))
    return text_result(src.name, lines, records, pl.concat([vals, vals2]), rest, mode="done")
