"""MLCommons AlgoPerf `submission_runner.py` stdout (algorithmic-efficiency; absl log lines, JAX and PyTorch
workloads alike): the metrics logger's training line every `log_every` steps, an evaluation block now and then,
and whatever the submission prints itself.

    I0314 21:40:27.887266 1401... logging_writer.py:48] [0] global_step=0, grad_norm=0.606034, loss=6.92349
    I0314 21:40:27.908714 1401... submission.py:265] 0) loss = 6.923, grad_norm = 0.606
    I0314 21:47:42.718784 1401... submission_runner.py:469] Time since start: 542.02s, 	Step: 1, 	{'train/accuracy':
        0.0011, 'train/loss': 6.9115, 'validation/accuracy': 0.0013, 'validation/loss': 6.9120, ...}
    I0314 21:47:42.727593 1401... logging_writer.py:48] [1] accumulated_eval_time=433.865, ..., global_step=1,
        ..., test/loss=6.91256, ..., train/loss=6.91152, validation/loss=6.91206, ...

A training record is a logging_writer line `[N] global_step=N, ...` whose fields are plain names (`loss`,
`grad_norm`; a workload's own such as `ctc_loss`); its step is N. The evaluation block is an eval record at its
`Step: N`, read from its `validation/*` fields (its `train/*` fields re-evaluate the training set, its `test/*`
fields a test set: neither is the training loss); the logging_writer twin of the block
(`accumulated_eval_time=...`) and the runner's closing `score=` line are claimed, not read again. A submission
that prints its own line for a step the logging_writer line already gave (the Shampoo baselines' `0) loss =
6.923, grad_norm = 0.606`) repeats it: claimed, not a second record.
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

NAME = "algoperf"
WRITER = r"logging_writer\.py:\d+\]\s*\[(\d+)\]\s*"
TRAIN = WRITER + r"global_step=\d+,"
WRITER_EVAL = WRITER + r".*\baccumulated_(?:eval|submission)_time="
WRITER_SCORE = WRITER + r"global_step=\d+, preemption_count=\d+, score="
EVAL = r"submission_runner\.py:\d+\]\s*Time since start:.*?\bStep:\s*(\d+),\s*\{"
# a submission's own print of the step the writer just logged: `0) loss = 6.923, grad_norm = 0.606`
TWIN = r"\]\s*(\d+)\)\s+\w*loss\s*=\s*"
PAIR = rf"(?P<k>[A-Za-z_][\w]*)=(?P<v>{NUM_TOKEN})(?:,|\s|$)"
EVAL_PAIR = rf"'validation/(?P<k>[A-Za-z_][\w]*)':\s*(?P<v>{NUM_TOKEN})\s*[,}}]"
BOOKKEEPING = ("global_step", "preemption_count")


def sniff(sample: SniffSample) -> float:
    return 0.9 if sniff_share(sample, TRAIN) and sniff_share(sample, r"submission_runner\.py:\d+\]") else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    train = text.str.contains(TRAIN) & ~text.str.contains(WRITER_EVAL) & ~text.str.contains(WRITER_SCORE)
    writer_step = step_int(text.str.extract(WRITER, 1))
    train_rows = lines.filter(train).with_columns(writer_step.alias("step"), pl.lit("train").alias("record_kind"))
    eval_rows = lines.filter(text.str.contains(EVAL)).with_columns(
        step_int(text.str.extract(EVAL, 1)).alias("step"), pl.lit("eval").alias("record_kind")
    )
    rec = pl.concat([train_rows, eval_rows]).with_columns(extract_time(text).alias("time")).sort("line")
    records = rec.select("line", "step", "prefix_rank", "record_kind", "time")
    body = pl.col("text").str.replace(r"^.*?\]\s*\[\d+\]\s*", "")
    pairs = find_pairs(train_rows.select("line", body.alias("text")), PAIR).filter(~pl.col("k").is_in(BOOKKEEPING))
    evals = find_pairs(eval_rows.select("line", "text"), EVAL_PAIR)
    values = pl.concat(
        [
            named_values(pairs).select("line", "name", "value"),
            named_values(evals, eval_rows=pl.lit(True)).select("line", "name", "value"),
        ]
    )
    result = text_result(src.name, lines, records, values, mode="done")
    logged = train_rows.get_column("step").implode()
    twins = lines.filter(text.str.contains(TWIN) & step_int(text.str.extract(TWIN, 1)).is_in(logged))
    claimed = lines.filter(text.str.contains(WRITER_EVAL) | text.str.contains(WRITER_SCORE))
    result.body_lines = pl.concat([twins.get_column("line"), claimed.get_column("line")])
    return result
