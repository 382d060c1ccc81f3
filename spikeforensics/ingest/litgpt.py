"""lit-gpt / litgpt finetune and pretrain prints:

    iter 1151 step 144: loss 1.7019, iter time: 1106.53ms (optimizer.step)      # 2023 lit-gpt
    iter 76 step 38: loss 10.8259, iter time: 197.87ms
    iter 15 step 1: loss 2.0308, train time: 1489.61ms (optimizer.step)         # 2023 lit-gpt FSDP finetune
    iter 20: loss 1.2345, time: 151.42ms                                        # lit-llama
    [rank: 0] iter 34 step 35: iter time: 3372.20ms (optimizer.step)            # no loss printed
    Epoch 1 | iter 46 step 1 | loss train: 3.724, val: n/a | iter time: 45.73 ms  # litgpt 2024+
    iter 600: val loss 1.7123, val time: 1234.56ms                              # eval record

Step = `iter N`, the micro-batch iteration as printed (every line is its own record; the
optimizer step `step M` repeats over gradient-accumulation iterations and is kept as the
metric `optimizer_step`). `iter time` -> `step_time_ms`, `loss train` -> `loss`, a numeric
`val:` -> `eval_loss` on the same record. Mode "done".
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

NAME = "litgpt"
N = rf"(?:{NUM_TOKEN})"
OLD = (
    rf"\biter (?P<step>\d+)(?: step (?P<opt>\d+))?: (?:loss (?P<loss>{N}), )?(?:iter |train )?time: (?P<time>{N})\s*ms"
)
NEW = (
    rf"\bEpoch (?P<epoch>\d+) \| iter (?P<step>\d+) step (?P<opt>\d+) \| loss train: (?P<loss>{N}), "
    rf"val: (?:(?P<val>{N})|\S+?) \| iter time: (?P<time>{N})\s*ms"
)
VAL = rf"\biter (?P<step>\d+): val loss (?P<val>{N})(?:, val time: (?P<vt>{N})\s*ms)?"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(
        sample,
        [
            (
                r"\biter \d+(?: step \d+)?: (?:loss \S+, )?(?:iter |train )?time: |\| iter \d+ step \d+ \| loss train: ",
                0.9,
            )
        ],
    )


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    cand = lines.filter(pl.col("text").str.contains("iter ", literal=True))
    cols = {"loss": "loss", "time": "step_time_ms", "opt": "optimizer_step"}
    r1, v1, cand = grammar_records(cand, NEW, cols | {"epoch": "epoch", "val": "eval_loss"})
    r2, v2, cand = grammar_records(cand, OLD, cols)
    r3, v3, cand = grammar_records(cand, VAL, {"val": "eval_loss", "vt": "val_time_ms"}, kind="eval")
    unparsed = cand.filter(pl.col("text").str.contains(r"\biter \d+ step \d+|\biter \d+: loss "))
    return text_result(src.name, lines, pl.concat([r1, r2, r3]), pl.concat([v1, v2, v3]), unparsed, mode="done")
