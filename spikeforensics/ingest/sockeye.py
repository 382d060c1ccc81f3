"""AWS Sockeye (neural machine translation) training logs.

Sockeye 2/3 (PyTorch) log through `logging` with the format `[%(asctime)s:%(levelname)s:%(name)s:%(funcName)s]`;
the training speedometer (`sockeye/training.py`, `Speedometer.__call__`) prints every `--update-interval`-th
batch group:

    [2023-11-21:13:52:54:INFO:sockeye.training:__call__] E=0 B=50	s/sec=309.73 tok/sec=4673.93 u/sec=0.45	ppl=1457.873261

Sockeye 1 (MXNet) printed the same speedometer as

    [INFO:sockeye.callback] Epoch[0] Batch [50]	Speed: 1025.55 samples/sec	perplexity=1060.906348

(from 1.18 also `... samples/sec 1820.19 tokens/sec 0.35 updates/sec	perplexity=...`)

-> a training record: step = `B` / `Batch [N]` (batches done, counted over the whole run, not per
epoch), `epoch` = `E`, the metrics by name (`ppl`/`perplexity` -> `ppl`, and `loss` = ln(ppl): the
training perplexity is exp of the mean token cross-entropy, so its log is the loss the detectors
judge; a `nan`/`inf` perplexity is a non-finite loss), `samples_per_s`, `tokens_per_s`,
`updates_per_s`.

Per checkpoint, `Checkpoint [n]\tValidation-ppl=...\tValidation-bleu=...` (`_evaluate`) is an eval record at
the step of the training record before it (`eval_ppl`, `eval_loss` = ln(eval_ppl), `eval_bleu`, ...), and
`Checkpoint [n]\tLearning-rate=L` (`_adjust_learning_rate`) sets `lr` on that same eval record's step (a
plateau-reduce scheduler changes the LR only at checkpoints). `Checkpoint [n]\tTrain-ppl=...` repeats the
window's average: not a record. Checkpoint saves come from the shared event extractor.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.ingest._grammar_helpers import empty_values, grammar_records
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    prepared_lines,
    sniff_tiers,
    text_result,
)

NAME = "sockeye"
N = rf"(?:{NUM_TOKEN})"
SPEED3 = (
    rf"\bE=(?P<epoch>\d+) B=(?P<step>\d+)\s+s/sec=(?P<sps>{N}) tok/sec=(?P<tps>{N}) u/sec=(?P<ups>{N})"
    rf"\s+(?:ppl|perplexity)=(?P<ppl>{N})"
)
SPEED1 = (
    rf"\bEpoch\[(?P<epoch>\d+)\] Batch \[(?P<step>\d+)\]\s+Speed: (?P<sps>{N}) samples/sec"
    rf"(?:\s+(?P<tps>{N}) tokens/sec)?(?:\s+(?P<ups>{N}) updates/sec)?\s+(?:ppl|perplexity)=(?P<ppl>{N})"
)
CKPT = r"\bCheckpoint \[(?P<ckpt>\d+)\]\s+"
VALID = rf"{CKPT}Validation-(?:ppl|perplexity)=(?P<vppl>{N})"
VALID_FIELD = rf"Validation-(?P<k>[a-z0-9-]+)=(?P<v>{N})"
LR = rf"{CKPT}Learning-rate=(?P<lr>{N})"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(sample, [(rf"\bE=\d+ B=\d+\s+s/sec=|{SPEED1}|sockeye\.training:", 0.9)])


def _with_log(values: pl.DataFrame, source: str, target: str) -> pl.DataFrame:
    """Add `target` = ln(`source`) rows (a perplexity's log is the cross-entropy loss; non-positive -> NaN)."""
    ppl = values.filter(pl.col("name") == source)
    logged = ppl.with_columns(
        pl.lit(target).alias("name"),
        pl.when(pl.col("value") > 0).then(pl.col("value").log()).otherwise(pl.lit(math.nan)).alias("value"),
    )
    return pl.concat([values, logged])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    cand = lines.filter(pl.col("text").str.contains(r"B=\d|Batch \[|Checkpoint \["))
    cols = {"epoch": "epoch", "ppl": "ppl", "sps": "samples_per_s", "tps": "tokens_per_s", "ups": "updates_per_s"}
    r1, v1, cand = grammar_records(cand, SPEED3, cols)
    r2, v2, cand = grammar_records(cand, SPEED1, cols)
    train = pl.concat([r1, r2]).sort("line")
    values = _with_log(pl.concat([v1, v2]), "ppl", "loss")
    # validation: one eval record per checkpoint, at the step of the training record before it
    evals, ev_values, cand = grammar_records(cand, VALID, {"vppl": "eval_ppl"}, kind="eval", step_group="ckpt")
    lr_rec, lr_values, cand = grammar_records(cand, LR, {"lr": "lr"}, kind="eval", step_group="ckpt")
    extra = []
    if evals.height:
        fields = (
            lines.join(evals.select("line"), on="line", how="semi")
            .with_columns(pl.col("text").str.extract_all(VALID_FIELD).alias("_f"))
            .explode("_f")
            .with_columns(pl.col("_f").str.extract_groups(VALID_FIELD).alias("_g"))
            .unnest("_g")
            .filter(pl.col("k").is_not_null() & ~pl.col("k").is_in(["ppl", "perplexity"]))
            .select(
                "line",
                ("eval_" + pl.col("k").str.replace_all("-", "_")).alias("name"),
                pl.col("v").cast(pl.Float64, strict=False).alias("value"),
            )
        )
        extra = [_with_log(ev_values, "eval_ppl", "eval_loss"), fields]
    if lr_rec.height:
        extra.append(lr_values)
    checkpoints = pl.concat([evals, lr_rec]).sort("line")
    if checkpoints.height and train.height:
        # the step of the training record before each checkpoint line (null before the first)
        checkpoints = checkpoints.drop("step").join_asof(
            train.select("line", "step").sort("line"), on="line", strategy="backward"
        )
    else:
        checkpoints = checkpoints.with_columns(pl.lit(None, dtype=pl.Int64).alias("step"))
    records = pl.concat([train, checkpoints.select(train.columns)]) if checkpoints.height else train
    all_values = pl.concat([values, *extra]) if extra else values
    if all_values.height == 0:
        all_values = empty_values()
    unparsed = cand.filter(pl.col("text").str.contains(r"\bE=\d+ B=\d+|Epoch\[\d+\] Batch \["))
    return text_result(src.name, lines, records, all_values, unparsed, mode="done")
