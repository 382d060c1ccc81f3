"""mlx-lm / mlx-examples LoRA and full fine-tuning (`mlx_lm.lora`, mlx-vlm trainers):

    Iter 10: Train loss 2.363, Learning Rate 1.000e-05, It/sec 1.022, Tokens/sec 88.083, Trained Tokens 862, Peak mem 9.707 GB
    Iter 10: Train loss 3.608, It/sec 0.015, Tokens/sec 1.425          # 2023 builds: no LR, no tokens, no memory
    Iter 1: Val loss 2.480, Val took 0.732s                           # eval record (eval_loss, val_time_s)
    Iter 100: Saved adapter weights to checkpoints/100_adapters.npz.  # checkpoint_save event (text_events)

    Iter 30: Train loss 1.4008, LR 1.450e-06, grad_norm 5044.074,     skipped 0   # a patched trainer's fields

Step = the `Iter N` counter (iterations done; mode "done"). Every `, Name value` after the loss is read:
`Learning Rate` -> `lr`, `Tokens/sec` -> `tokens_per_s`, `Trained Tokens` -> `consumed_tokens`, `It/sec` ->
`it_per_s`, `Peak mem X GB` -> `peak_mem_gb`; any other name (a fork's or a patched trainer's `LR`,
`grad_norm`, `skipped`) through the alias table. Lines may sit anywhere in a file (after
tqdm bars, HF dict echoes, launcher prefixes); only these lines are claimed. A guard's
`Iter 40: SKIPPED non-finite batch (loss 1.23, norm nan)` is a skipped step (text_events), no record.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import grammar_records
from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    find_pairs,
    named_values,
    prepared_lines,
    sniff_tiers,
    text_result,
)

NAME = "mlx_lm"
# numbers without thousands separators: `Trained Tokens 3290, Peak mem ...` (the comma is a separator)
N = r"(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf))"
TRAIN = rf"\bIter (?P<step>\d+): Train loss (?P<loss>{N})(?P<rest>(?:,\s*[A-Za-z][^,]*)*)"
# `, Learning Rate 1.000e-05`, `, Peak mem 9.707 GB`, `, grad_norm 5044.074`: a name of words, then its number
FIELD = rf",\s*(?P<k>[A-Za-z][\w/ ]*?)\s+(?P<v>{N})"
FIELDS = {
    "learning rate": "lr",
    "it/sec": "it_per_s",
    "tokens/sec": "tokens_per_s",
    "trained tokens": "consumed_tokens",
    "peak mem": "peak_mem_gb",
}
VAL = rf"\bIter (?P<step>\d+): Val loss (?P<val>{N})(?:, Val took (?P<vt>{N})s)?"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(sample, [(r"\bIter \d+: Train loss [-+\d.naNinf]", 0.9), (r"\bIter \d+: Val loss ", 0.7)])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    cand = lines.filter(pl.col("text").str.contains("Iter ", literal=True))
    hit = cand.with_columns(pl.col("text").str.extract(TRAIN, 0).alias("_train"))
    r1, v1, cand = grammar_records(cand, TRAIN, {"loss": "loss"})
    fields = find_pairs(
        hit.filter(pl.col("_train").is_not_null()).select("line", pl.col("_train").str.extract(TRAIN, 3).alias("text")),
        FIELD,
    ).with_columns(pl.col("k").str.strip_chars().str.to_lowercase().replace(FIELDS))
    v1 = pl.concat([v1, named_values(fields).select(v1.columns)])
    r2, v2, cand = grammar_records(cand, VAL, {"val": "eval_loss", "vt": "val_time_s"}, kind="eval")
    unparsed = cand.filter(pl.col("text").str.contains(r"\bIter \d+: (?:Train|Val) loss"))
    return text_result(src.name, lines, pl.concat([r1, r2]), pl.concat([v1, v2]), unparsed, mode="done")
