"""mlx-lm / mlx-examples LoRA and full fine-tuning (`mlx_lm.lora`, mlx-vlm trainers):

    Iter 10: Train loss 2.363, Learning Rate 1.000e-05, It/sec 1.022, Tokens/sec 88.083, Trained Tokens 862, Peak mem 9.707 GB
    Iter 10: Train loss 3.608, It/sec 0.015, Tokens/sec 1.425          # 2023 builds: no LR, no tokens, no memory
    Iter 1: Val loss 2.480, Val took 0.732s                           # eval record (eval_loss, val_time_s)
    Iter 100: Saved adapter weights to checkpoints/100_adapters.npz.  # checkpoint_save event (text_events)

Step = the `Iter N` counter (iterations done; mode "done"). `Learning Rate` -> `lr`,
`Tokens/sec` -> `tokens_per_s`, `Trained Tokens` -> `consumed_tokens`, `It/sec` ->
`it_per_s`, `Peak mem X GB` -> `peak_mem_gb`. Lines may sit anywhere in a file (after
tqdm bars, HF dict echoes, launcher prefixes); only these lines are claimed.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import grammar_records
from spikeforensics.ingest.base import ParseResult, SniffSample, SourceFile, prepared_lines, sniff_tiers, text_result

NAME = "mlx_lm"
# numbers without thousands separators: `Trained Tokens 3290, Peak mem ...` (the comma is a separator)
N = r"(?:[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf))"
TRAIN = (
    rf"\bIter (?P<step>\d+): Train loss (?P<loss>{N})(?:, Learning Rate (?P<lr>{N}))?(?:, It/sec (?P<its>{N}))?"
    rf"(?:, Tokens/sec (?P<tps>{N}))?(?:, Trained Tokens (?P<tok>{N}))?(?:, Peak mem (?P<mem>{N}) GB)?"
)
VAL = rf"\bIter (?P<step>\d+): Val loss (?P<val>{N})(?:, Val took (?P<vt>{N})s)?"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(sample, [(r"\bIter \d+: Train loss [-+\d.naNinf]", 0.9), (r"\bIter \d+: Val loss ", 0.7)])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    cand = lines.filter(pl.col("text").str.contains("Iter ", literal=True))
    r1, v1, cand = grammar_records(
        cand,
        TRAIN,
        {
            "loss": "loss",
            "lr": "lr",
            "its": "it_per_s",
            "tps": "tokens_per_s",
            "tok": "consumed_tokens",
            "mem": "peak_mem_gb",
        },
    )
    r2, v2, cand = grammar_records(cand, VAL, {"val": "eval_loss", "vt": "val_time_s"}, kind="eval")
    unparsed = cand.filter(pl.col("text").str.contains(r"\bIter \d+: (?:Train|Val) loss"))
    return text_result(src.name, lines, pl.concat([r1, r2]), pl.concat([v1, v2]), unparsed, mode="done")
