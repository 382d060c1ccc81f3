"""MosaicML Composer `ConsoleLogger` blocks (LLM Foundry `train.py`, LLM-Shearing, any
Composer `Trainer` with `log_to_console=True` / `console_log_interval`):

    [batch=10/4800]:
    \t Train time/batch: 9
    \t Train loss/train/total: 7.6431
    \t Train lr-DecoupledAdamW/group0: 0.0000
    \t Train l2_norm/grad/global: 1.2345
    [epoch=1][batch=5/5]:                                  # max_duration in epochs
    [token=2048000/8000000000]:                            # max_duration in tokens (samples, iterations)
    [Eval batch=11/11] Eval on eval data:                  # eval block (eval record)
    \t Eval metrics/eval/LanguageCrossEntropy: 2.3456

Printing code: mosaicml/composer `composer/loggers/console_logger.py`
(`ConsoleLogger.log_to_console`: `log_str = f'{progress}' + (':' if len(data) > 0 else '')`
then `log_str += f'\\n\\t {prefix}{data_name}: {data_str}'` per metric, printed in one
`_log_to_console` call; `_get_progress_string`: `[epoch={cur_epoch + 1}][batch={b}/{n}]` when
`max_duration` is in epochs (`[batch={b}]` without a dataloader length), else
`[{unit.name.lower()}={value}/{max}]`; `_get_eval_progress_string`:
`[Eval batch={k}/{n}] Eval on {label} data`; prefixes `'Train '` (batch_end/epoch_end/
iteration_end/fit_end) and `'Eval '` (eval_end). Before 2023 the eval block was headed by the
training progress string (`[batch=N/M]:` then `Eval ...` lines): the prefix, not the header,
makes a block an eval record. Values: `composer/loggers/logger.py` `format_log_data_value`
(float `f'{data:.4f}'` -> `nan`, `inf`, `-inf`; int `str(data)`; one-element tensors as their
item; strings quoted, `None`, lists, images: not numbers, no row).

Records: one per block header with at least one numeric value. **Step** = N of `[batch=N/M]`
(Composer's `timestamp.batch`, batches trained); `[epoch=E][batch=B/n]` -> (E - 1) * n + B
(Composer prints the epoch 1-based since 2022-11); other units (`[token=...]`, `[sample=...]`, or an epoch
form without a length) -> the block's `time/batch` + 1 (metrics are logged before the batch
counter moves: `[batch=10/20]` prints `time/batch: 9`), else null. An eval block headed by
`[Eval batch=...]` takes the step of the train block before it. Names: `loss/train/total`
(`loss/train` before Composer 0.11) -> `loss`, `l2_norm/grad/global` (OptimizerMonitor;
`grad_l2_norm/step` of the old GradMonitor) -> `grad_norm`, `lr-<Optimizer>/group0`
(LRMonitor) -> `lr`, `throughput/tokens_per_sec` -> `tokens_per_s`; others normalised
(`metrics/train/LanguageCrossEntropy` -> `metrics_train_languagecrossentropy`). Eval names:
`eval_` + the name without `metrics/` (`eval_eval_languageperplexity`), and
`metrics/<label>/LanguageCrossEntropy` also as `eval_loss`. Each value row keeps its own line.
The 2022 one-line forms are read too (the console output of `ProgressBarLogger`, same
repository, `composer/loggers/progress_bar_logger.py` before the ConsoleLogger split of 2022-11:
`log_str = f'{training_progress}: {data_name}: {data_str}'`, one metric a line, epoch 0-based
`[epoch={int(timestamp.epoch)}]`; before 2022-08 `f'[{log_level.name}]{training_progress}: {data_str}'`
with the whole mapping `{ "loss/train": 2.3, }`, and before 2022-07 `[BATCH][batch={batch}]: ...`):
consecutive lines with the same progress string are one record; step as above with
e0 = 0 when an epoch 0 is printed; `metrics/eval/...` names there are eval values.
Launcher prefixes (`0: ` of srun) and tabs expanded to spaces in pastes are accepted; a
`Train .../...: v` line before any header is counted as unparsed.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.aliases import canonical_metric
from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    find_pairs,
    normalise_name,
    parse_numbers,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "composer"

UNIT = r"batch|token|sample|iteration|epoch|second"
HEAD = rf"^\s*(?:\[epoch=(?P<epoch>\d+)\])?\[(?P<unit>{UNIT})=(?P<n>\d+)(?:/(?P<total>\d+))?\]:?\s*$"
EVAL_HEAD = r"^\s*\[Eval batch=(?P<eb>\d+)(?:/\d+)?\] Eval on (?P<label>.+?) data:?\s*$"
METRIC = r"^\s*(?P<prefix>Train|Eval) (?P<k>\S(?:[^:]*\S)?): (?P<v>.*?)\s*$"
# what only Composer prints: a header line, and a metric line with a slash name
SNIFF_HEAD = rf"^\s*(?:\[epoch=\d+\])?\[(?:{UNIT})=\d+(?:/\d+)?\]:\s*$|^\s*\[Eval batch=\d+/\d+\] Eval on "
SNIFF_METRIC = r"^\s*(?:Train|Eval) [\w.-]+/[\w./-]+: "
# the one-line forms of 2022 (ProgressBarLogger's console output): `[epoch=0][batch=16/7662]: loss/train/total: 7.1`
# (Aug-Nov 2022) and `[BATCH][batch=16/7662]: { "loss/train": 2.3, }` (log levels, before Aug 2022)
PROG = rf"(?:\[epoch=\d+\])?\[(?:{UNIT})=\d+(?:/\d+)?\]"
INLINE = rf"^\s*(?:\[(?:FIT|EPOCH|BATCH|MICROBATCH|VERBOSE)\])?(?P<prog>{PROG}): (?P<rest>\S.*?)\s*$"
SNIFF_INLINE = rf"^\s*(?:\[(?:FIT|EPOCH|BATCH)\])?{PROG}: (?:\{{ \"[\w.-]+/[\w./-]+\": |[\w.-]+/[\w./-]+: )"
MAP_PAIR = r'"(?P<k>[^"]+)": (?P<v>[^,\s{}\[\]]+),'
SINGLE_PAIR = r"^(?P<k>[\w.-]+/\S*?|[\w.-]+): (?P<v>\S+)$"
EVAL_NAME_RE = r"^(?:metrics|loss)/(?:eval|val|valid|validation|test)\b"

TRAIN_NAMES = {
    "loss_train_total": "loss",
    "loss_train": "loss",
    "l2_norm_grad_global": "grad_norm",
    "grad_l2_norm_step": "grad_norm",
    "throughput_tokens_per_sec": "tokens_per_s",
}
LR_RE = r"^lr-.+/group0$"
EVAL_LOSS_RE = r"^metrics/[^/]+/LanguageCrossEntropy$"


def sniff(sample: SniffSample) -> float:
    if sniff_share(sample, SNIFF_METRIC) and sniff_share(sample, SNIFF_HEAD):
        return 0.95
    return 0.9 if sniff_share(sample, SNIFF_INLINE) else 0.0


def _names(keys: list[str], eval_block: bool) -> dict[str, str]:
    out = {}
    for k in keys:
        if eval_block:
            out[k] = "eval_" + normalise_name(k.removeprefix("metrics/"))
        else:
            norm = normalise_name(k)
            out[k] = TRAIN_NAMES.get(norm) or canonical_metric(k)
    return out


def _values(metric: pl.DataFrame) -> pl.DataFrame:
    """(`_hdr`, `_src`, `name`, `value`) of the metric lines, names mapped per block kind."""
    keys = metric.get_column("k").unique().to_list()
    train_map, eval_map = _names(keys, False), _names(keys, True)
    is_eval = pl.col("prefix") == "Eval"
    name = (
        pl.when(is_eval)
        .then(pl.col("k").replace_strict(eval_map, return_dtype=pl.String))
        .when(pl.col("k").str.contains(LR_RE))
        .then(pl.lit("lr"))
        .otherwise(pl.col("k").replace_strict(train_map, return_dtype=pl.String))
    )
    vals = parse_numbers(metric.with_columns(name.alias("name")), raw="v", out="value")
    extra = vals.filter(is_eval & pl.col("k").str.contains(EVAL_LOSS_RE)).with_columns(
        pl.lit("eval_loss").alias("name")
    )
    both = pl.concat([extra, vals]).sort("_hdr", "line", maintain_order=True)
    both = both.filter(pl.col("value").is_not_null() & (pl.col("name") != ""))
    return both.select("_hdr", pl.col("line").alias("_src"), "name", "value").unique(
        ["_hdr", "name"], keep="first", maintain_order=True
    )


def _block_rows(lines: pl.DataFrame) -> pl.DataFrame:
    """Rows of the block form (2022-11 on): heads and `Train/Eval name: value` lines."""
    text = pl.col("text")
    kind = (
        pl.when(text.str.contains("=", literal=True) & text.str.contains(HEAD))
        .then(pl.lit("head"))
        .when(text.str.contains("[Eval batch=", literal=True) & text.str.contains(EVAL_HEAD))
        .then(pl.lit("ehead"))
        .when(
            (text.str.contains("Train ", literal=True) | text.str.contains("Eval ", literal=True))
            & text.str.contains(METRIC)
        )
        .then(pl.lit("metric"))
    )
    rows = lines.with_columns(kind.alias("_kind")).filter(pl.col("_kind").is_not_null())
    rows = rows.with_columns(text.str.extract_groups(METRIC).alias("_g")).unnest("_g")
    return rows.select(
        "line", "prefix_rank", "_kind", pl.lit(0).alias("_sub"), text.alias("_htext"), "prefix", "k", "v", "text"
    )


def _inline_rows(lines: pl.DataFrame) -> pl.DataFrame:
    """Rows of the one-line forms (2022): a head row where the progress string changes, then
    one metric row per `name: value` (or per `"name": value,` of a `{ ... }` mapping)."""
    text = pl.col("text")
    hit = lines.filter(text.str.contains("]: ", literal=True) & text.str.contains(INLINE)).with_columns(
        text.str.extract_groups(INLINE).alias("_g")
    )
    hit = hit.unnest("_g")
    if hit.height == 0:
        return pl.DataFrame()
    stream = pl.col("prefix_rank").fill_null(-1)
    hit = hit.sort("line").with_columns(
        (pl.col("prog") != pl.col("prog").shift(1).over(stream)).fill_null(True).alias("_new")
    )
    heads = hit.filter(pl.col("_new")).select(
        "line",
        "prefix_rank",
        pl.lit("head").alias("_kind"),
        pl.lit(0).alias("_sub"),
        (pl.col("prog") + ":").alias("_htext"),
        "text",
    )
    mapping = hit.filter(pl.col("rest").str.starts_with("{"))
    pairs = find_pairs(mapping.select("line", "prefix_rank", pl.col("rest").alias("text")), MAP_PAIR)
    single = hit.filter(~pl.col("rest").str.starts_with("{")).with_columns(
        pl.col("rest").str.extract_groups(SINGLE_PAIR).alias("_p")
    )
    single = single.unnest("_p").filter(pl.col("k").is_not_null())
    metrics = pl.concat(
        [pairs.select("line", "prefix_rank", "k", "v"), single.select("line", "prefix_rank", "k", "v")]
    ).join(lines.select("line", "text"), on="line", how="left")
    is_eval = pl.col("k").str.contains(EVAL_NAME_RE)
    metrics = metrics.select(
        "line",
        "prefix_rank",
        pl.lit("metric").alias("_kind"),
        pl.lit(1).alias("_sub"),
        pl.lit(None, dtype=pl.String).alias("_htext"),
        pl.when(is_eval).then(pl.lit("Eval")).otherwise(pl.lit("Train")).alias("prefix"),
        "k",
        "v",
        "text",
    )
    return pl.concat([heads, metrics], how="diagonal_relaxed")


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    block_rows = _block_rows(lines)
    parts = [p for p in (block_rows, _inline_rows(lines)) if p.height] or [block_rows]
    cand = pl.concat(parts, how="diagonal_relaxed").sort("line", "_sub")
    stream = pl.col("prefix_rank").fill_null(-1)
    cand = cand.with_columns(
        pl.when(pl.col("_kind") != "metric").then(pl.col("line")).forward_fill().over(stream).alias("_hdr")
    )
    metric = cand.filter(pl.col("_kind") == "metric")
    orphans = metric.filter(pl.col("_hdr").is_null() & pl.col("k").str.contains("/", literal=True))
    metric = metric.filter(pl.col("_hdr").is_not_null())
    vals = (
        _values(metric)
        if metric.height
        else pl.DataFrame(schema={"_hdr": pl.Int64, "_src": pl.Int64, "name": pl.String, "value": pl.Float64})
    )
    block_kind = metric.group_by("_hdr").agg(pl.col("prefix").first().alias("_prefix"))
    time_batch = (
        metric.filter((pl.col("prefix") == "Train") & (pl.col("k") == "time/batch"))
        .group_by("_hdr")
        .agg(pl.col("v").first().cast(pl.Int64, strict=False).alias("_tb"))
    )
    heads = (
        cand.filter(pl.col("_kind") != "metric")
        .with_columns(pl.col("_htext").str.extract_groups(HEAD).alias("_h"))
        .unnest("_h")
        .join(block_kind, left_on="line", right_on="_hdr", how="left")
        .join(time_batch, left_on="line", right_on="_hdr", how="left")
    )
    epoch, n, total = (pl.col(c).cast(pl.Int64, strict=False) for c in ("epoch", "n", "total"))
    # Composer prints the epoch 1-based since 2022-11 (0-based before): e0 = 0 when an epoch 0 is printed
    e0 = 0 if heads.select((epoch == 0).any()).item() else 1
    own = (
        pl.when((pl.col("unit") == "batch") & epoch.is_null())
        .then(step_int(pl.col("n")))
        .when((pl.col("unit") == "batch") & total.is_not_null())
        .then(step_int((epoch - e0) * total + n))
        .otherwise(pl.col("_tb") + 1)
    )
    is_train = (pl.col("_kind") == "head") & (pl.col("_prefix") != "Eval")
    train_step = pl.when(is_train).then(own).forward_fill().over(stream)
    heads = heads.sort("line").with_columns(
        pl.when(pl.col("_kind") == "head").then(own).otherwise(train_step).alias("step"),
        pl.when(is_train).then(pl.lit("train")).otherwise(pl.lit("eval")).alias("record_kind"),
    )
    records = heads.filter(pl.col("_prefix").is_not_null()).select(
        "line", "step", "prefix_rank", "record_kind", extract_time(text).alias("time")
    )
    values = vals.select(pl.col("_hdr").alias("line"), "name", "value")
    out = text_result(src.name, lines, records, values, orphans.select("line", "text"), mode="done")
    metrics = out.tables.get("metrics")
    if metrics is not None and metrics.height:  # each value row keeps the line that printed it
        src_lines = vals.select(pl.col("_hdr").alias("line"), "name", "_src")
        metrics = metrics.join(src_lines, on=["line", "name"], how="left", maintain_order="left")
        out.tables["metrics"] = metrics.with_columns(pl.coalesce("_src", "line").alias("line")).drop("_src")
    return out
