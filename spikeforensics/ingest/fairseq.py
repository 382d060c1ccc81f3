"""fairseq / metaseq progress output (`--log-format simple`, `json`, and the 2018 legacy):

- inner lines `| epoch 009:   1000 / 2737 loss=6.220, nll_loss=5.070, ..., num_updates=22897, ...`
  (2020+: behind `DATE | INFO | train_inner | `; 2018: `| epoch 010  2000 / 8223 loss=1.27 (1.50), ...`
  where the parenthesis is the running average, ignored);
- end-of-epoch summaries `| epoch 008 | loss 6.326 | ... | num_updates 21896 | ...` (summary
  records, record null; in a file without inner lines they are the training records);
- validation `| epoch 008 | valid on 'valid' subset | valid_loss 6.43 | ... | num_updates 21896`
  (eval records: `eval_loss` ...);
- json lines `{"epoch": 1, "update": 0.45, "loss": "11.521", ..., "num_updates": "445"}`, also behind a
  logger prefix (`... | train_inner | {...}`, metaseq `slurm_procid 0 : ... | train_inner | {...}`);
  `| train | {...}` lines are the epoch summaries (summary records).

Step = `num_updates` (optimizer updates, done; mode "done"); the 2018 format prints none: an
inner line's step is then (epoch - 1) x updates per epoch + its `i / n` counter. `gnorm` -> `grad_norm`, `clip=100%` -> `clip` 100.
Overflow notes and `Loaded checkpoint ... (epoch 5 @ 21896 updates)` are events.
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
    sniff_tiers,
    split_fields,
    step_int,
    text_result,
)

NAME = "fairseq"
N = rf"(?:{NUM_TOKEN})"
INNER = r"\bepoch \d+:?\s+\d+ / \d+ \w+="
INNER_COUNT = r"\bepoch 0*(\d+):?\s+(\d+) / (\d+)"
VALID = r"\| valid on '[^']*' subset \|"
SUMMARY = r"\|\s*epoch \d+ \|"
# json lines at the start of a line or behind a logger prefix (`... | train_inner | {...}`,
# metaseq's `slurm_procid 0 : ... | train_inner | {...}`); `| train | {...}` is the epoch summary
# ... and behind fairseq-hydra-train's `[2020-12-19 17:52:20,233][train_inner][INFO] - {...}` (`[train]`: the summary)
JSON = r'(?:^\s*|\|\s*|\]\s*-\s*)\{"epoch": \d+.*"(?:loss|valid_loss|train_loss)": '
JSON_SUMMARY = r'\|\s*train\s*\|\s*\{"epoch"|\[train\]\[\w+\]\s*-\s*\{"epoch"'
PAIR_EQ = rf"(?P<k>[A-Za-z_][\w]*)=(?P<v>{N})"
PAIR_JSON = rf'"(?P<k>[A-Za-z_][\w]*)": "?(?P<v>{N})"?'
FIELD_SP = rf"^\s*(?P<k>[A-Za-z_/][\w/ ]*?)\s+(?P<v>{N})\s*$"
# the epoch a line belongs to: `epoch 008 |`, `epoch 009:  99 / 367`, `{"epoch": 9, ...`
EPOCH = r'\bepoch"?:?\s*0*(\d+)\b'
NOT_METRICS = ["num_updates", "train_num_updates", "epoch", "update", "best"]


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(
        sample,
        [
            (rf"\bepoch \d+:?\s+\d+ / \d+ loss=|{VALID}", 0.9),
            (
                r"\|\s*epoch \d+ \| (?:train )?loss |(?:^\s*|\| (?:train_inner|train|valid) \| "
                r'|\[(?:train_inner|train|valid)\]\[\w+\] - )\{"epoch": .*"num_updates": ',
                0.85,
            ),
        ],
    )


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains("epoch"))
    kind = (
        pl.when(text.str.contains(INNER))
        .then(pl.lit("train"))
        .when(text.str.contains(VALID))
        .then(pl.lit("eval"))
        .when(text.str.contains(SUMMARY))
        .then(pl.lit("summary"))
        .when(text.str.contains(JSON))
        .then(pl.lit("json"))
    )
    cand = cand.with_columns(kind.alias("_kind")).filter(pl.col("_kind").is_not_null())
    inner = cand.filter(pl.col("_kind") == "train")
    # drop the running average `(1.50)` of the 2018 format before pairing
    inner_text = text.str.replace(r"^.*?\bepoch \d+:?\s+\d+ / \d+", "").str.replace_all(r"\s\([^)]*\)", "")
    p1 = find_pairs(inner.select("line", inner_text.alias("text"), "_kind"), PAIR_EQ)
    piped = cand.filter(pl.col("_kind").is_in(["eval", "summary"]))
    p2 = split_fields(piped.select("line", "text", "_kind"), "|", FIELD_SP)
    js = cand.filter(pl.col("_kind") == "json")
    p3 = find_pairs(
        js.select("line", "text", "_kind", text.str.contains(JSON_SUMMARY).alias("_summary")), PAIR_JSON
    ).with_columns(
        pl.when(pl.col("k").str.starts_with("valid_"))
        .then(pl.lit("eval"))
        .when(pl.col("_summary"))
        .then(pl.lit("summary"))
        .otherwise(pl.lit("train"))
        .alias("_kind")
    )
    pairs = pl.concat([p1, p2, p3.drop("_summary")], how="diagonal_relaxed")
    steps = (
        # (a `| train |` json summary names it `train_num_updates`)
        pairs.filter(pl.col("k").is_in(["num_updates", "train_num_updates"]))
        .select("line", step_int(pl.col("v").str.replace_all(",", "").cast(pl.Float64, strict=False)).alias("step"))
        .unique("line")
    )
    # the 2018 format prints no `num_updates`: an inner line's step is its place in the run,
    # (epoch - e0) x updates per epoch + the update within the epoch (e0 = 1: fairseq counts epochs from 1;
    # 0 when the file prints an epoch 0), as the batch counters of other formats are read
    frac = inner.select(
        "line",
        *[
            text.str.extract(INNER_COUNT, i).cast(pl.Float64, strict=False).alias(c)
            for i, c in ((1, "_e"), (2, "_i"), (3, "_n"))
        ],
    )
    if frac.height:
        e0 = 0.0 if frac.select((pl.col("_e") == 0).any()).item() else 1.0
        composed = frac.select("line", step_int((pl.col("_e") - e0) * pl.col("_n") + pl.col("_i")).alias("_composed"))
        steps = (
            composed.join(steps, on="line", how="left")
            .select("line", pl.coalesce("step", "_composed").alias("step"))
            .vstack(steps.join(composed, on="line", how="anti"))
        )
    # a json line is eval when any of its keys is `valid_*` (its `epoch` key alone says nothing)
    rank = pl.col("_kind").replace_strict({"eval": 0, "summary": 1, "train": 2}, default=3, return_dtype=pl.Int8)
    kinds = pairs.group_by("line").agg(pl.col("_kind").sort_by(rank).first().alias("record_kind"))
    kinds = kinds.join(
        cand.select("line", text.str.extract(EPOCH, 1).cast(pl.Int64, strict=False).alias("_epoch")),
        on="line",
        how="left",
    )
    # an epoch summary is a training record, one per logging interval (an epoch), when no inner
    # line of its epoch is in the file (inner lines off, or an excerpt that starts at the summary);
    # an epoch summary with no epoch number follows the whole file
    inner_epochs = kinds.filter(pl.col("record_kind") == "train").get_column("_epoch")
    alone = pl.col("_epoch").is_not_null() & ~pl.col("_epoch").is_in(inner_epochs.drop_nulls().implode())
    if inner_epochs.len() == 0:
        alone = pl.lit(True)
    kinds = kinds.with_columns(
        pl.when((pl.col("record_kind") == "summary") & alone)
        .then(pl.lit("train"))
        .otherwise(pl.col("record_kind"))
        .alias("record_kind")
    ).drop("_epoch")
    values = named_values(pairs.filter(~pl.col("k").is_in(NOT_METRICS)), eval_rows=pl.col("_kind") == "eval").select(
        "line", "name", "value"
    )
    records = (
        cand.select("line", "prefix_rank", extract_time(text).alias("time"))
        .join(kinds, on="line")
        .join(steps, on="line", how="left")
    )
    unparsed = cand.join(records.select("line"), on="line", how="anti")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
