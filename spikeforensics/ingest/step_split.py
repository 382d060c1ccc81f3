""" "step split value" metric files: Karpathy's build-nanogpt `log/log.txt` and its forks.

Writer: `karpathy/build-nanogpt:train_gpt2.py`, which appends to `log/log.txt`:

    f.write(f"{step} val {val_loss_accum.item():.4f}\\n")      # every 250 steps
    f.write(f"{step} hella {acc_norm:.4f}\\n")                  # HellaSwag, every 250 steps
    f.write(f"{step} train {loss_accum.item():.6f}\\n")         # every step

so the file reads

    0 val 10.9519
    0 hella 0.2487
    0 train 10.955011
    1 train 10.935991

Forks append `name value` pairs to the train line
(`12 train 3.512345 lr 6.0000e-04 norm 0.3123 dt 812.33 tok/sec 645123.45 gpu_mem 31.20`).

A `train` line is a training-step record: step as printed, `loss`, and the pairs through the
alias table (`norm` -> `grad_norm`, `lr`). A `val` / `valid` / `eval` / `test` line is an eval
record with `eval_loss`; any other split (`hella`) is an eval record whose value is named
`eval_<split>` (`eval_hella`). A line that starts like a record but whose value is not a
number is an unparsed line.

The sniffer is strict, so that a random whitespace table is not claimed: nearly every
non-blank line of the head must have this exact shape, and some of them must be `train` lines.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    find_pairs,
    named_values,
    parse_numbers,
    prepared_lines,
    step_int,
    text_result,
)

NAME = "step_split"
SPLITS = r"train|val|valid|eval|test|hella|hellaswag"
KEY = r"[A-Za-z_][\w./-]*"
LINE = rf"^\s*(?P<step>\d+) (?P<split>{SPLITS}) (?P<v>{NUM_TOKEN})(?P<rest>(?: {KEY} {NUM_TOKEN})*)\s*$"
# what a record line looks like before its value is checked (an unparsed line when the value is not a number)
LOOSE = rf"^\s*\d+ (?:{SPLITS}) \S+"
PAIR = rf"(?P<k>{KEY}) (?P<v>{NUM_TOKEN})(?:\s|$)"
EVAL_LOSS = ("val", "valid", "eval", "test")
CONFIDENCE = 0.6
MIN_SHARE = 0.9  # of the head's non-blank lines


def sniff(sample: SniffSample) -> float:
    lines = pl.Series(sample.lines, dtype=pl.String)
    lines = lines.filter(lines.str.contains(r"\S"))
    if lines.len() < 2:
        return 0.0
    full = lines.str.contains(LINE)
    trains = lines.str.contains(rf"^\s*\d+ train {NUM_TOKEN}")
    if full.sum() >= MIN_SHARE * lines.len() and trains.sum() >= 1:
        return CONFIDENCE
    return 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains(LOOSE))
    g = cand.with_columns(text.str.extract_groups(LINE).alias("_g")).unnest("_g").filter(pl.col("step").is_not_null())
    split = pl.col("split")
    is_train = split == "train"
    records = g.select(
        "line",
        step_int(pl.col("step")).alias("step"),
        "prefix_rank",
        pl.when(is_train).then(pl.lit("train")).otherwise(pl.lit("eval")).alias("record_kind"),
    )
    name = (
        pl.when(is_train)
        .then(pl.lit("loss"))
        .when(split.is_in(list(EVAL_LOSS)))
        .then(pl.lit("eval_loss"))
        .otherwise(pl.concat_str(pl.lit("eval_"), split))
    )
    main = parse_numbers(g.select("line", name.alias("name"), pl.col("v").alias("raw"))).select("line", "name", "value")
    extra = g.filter(is_train & (pl.col("rest") != "")).select("line", pl.col("rest").alias("text"))
    values = [main]
    if extra.height:
        pairs = find_pairs(extra, PAIR)
        values.append(named_values(pairs).select("line", "name", "value"))
    values = pl.concat(values).filter(pl.col("value").is_not_null())
    unparsed = cand.join(g.select("line"), on="line", how="anti")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
