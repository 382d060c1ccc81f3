"""timm (huggingface/pytorch-image-models) `train.py` / `validate.py` stdout, and the many
projects that copy its `train_one_epoch` (T2T-ViT, ViTAE, DeiT forks, ...).

The printing code, `train_one_epoch` in huggingface/pytorch-image-models `train.py`:
2023 on (gradient accumulation, `updates_per_epoch`):

    _logger.info(
        f'Train: {epoch} [{update_idx:>4d}/{updates_per_epoch} '
        f'({100. * (update_idx + 1) / updates_per_epoch:>3.0f}%)]  '
        f'Loss: {loss_now:#.3g} ({loss_avg:#.3g})  '
        f'Time: {update_time_m.val:.3f}s, {update_sample_count / update_time_m.val:>7.2f}/s  '
        f'({update_time_m.avg:.3f}s, {update_sample_count / update_time_m.avg:>7.2f}/s)  '
        f'LR: {lr:.3e}  '
        f'Data: {data_time_m.val:.3f} ({data_time_m.avg:.3f})')

2019-22: `'Train: {} [{:>4d}/{} ({:>3.0f}%)]  Loss: {loss.val:>9.6f} ({loss.avg:>6.4f})  '` (later
`{loss.val:#.4g} ({loss.avg:#.3g})`) `'Time: ... LR: {lr:.3e}  Data: ...'.format(epoch, batch_idx,
len(loader), 100. * batch_idx / last_idx, ...)`; `validate()` prints
`'{0}: [{1:>4d}/{2}]  Time: {batch_time.val:.3f} ({batch_time.avg:.3f})  Loss: {loss.val:>7.4f}
({loss.avg:>6.4f})  Acc@1: ... Acc@5: ...'` with `log_name = 'Test' + log_suffix` (`Test (EMA)`),
newer versions `Time: 4.404s (4.404s,   58.13/s)`:

    Train: 0 [   0/10009 (  0%)]  Loss:  6.948947 (6.9489)  Time: 21.288s,    6.01/s  (21.288s,    6.01/s)  LR: 1.000e-06  Data: 16.386 (16.386)
    Train: 3 [2200/5004 ( 44%)]  Loss: 6.86 (6.86)  Time: 0.243s, 1054.51/s  (0.608s,  421.36/s)  LR: 6.227e-02  Data: 0.019 (0.396)
    Train: 1 [ 400/5004 (  8%)]  Loss:       nan (   nan)  ...                               # non-finite loss
    Test: [   0/390]  Time: 13.265 (13.265)  Loss:  6.2366 (6.2366)  Acc@1:  0.0000 ( 0.0000)  Acc@5: ...   # eval record
    Test (EMA): [ 390/390]  Time: 0.967 (1.645)  Loss:  6.6281 (6.9489)  Acc@1: ...        # eval record, EMA model

Copies add meters (`KD-Loss: ...`, `Loss dec noun: ...`, `Prec@1: ...`, `Grad Norm: ...`, `LR1: ...`)
or drop some (`Loss: ... LR: ...` only); every `Name: value` is read, a `(average)` and the
`, 1054.51/s` rate are ignored. Value = the current (last batch / update) value printed first.
**Step = epoch * n + i**: `epoch` is the 0-based loop variable (`range(start_epoch, num_epochs)`,
so a resumed run keeps counting), `i` the batch (update) index within the epoch and `n`
`len(loader)` (`updates_per_epoch`): timm's own `num_updates = epoch * updates_per_epoch` before the
epoch's updates, as metriclogger.py does for `Epoch: [e] [i/n]`.
`Time` (s) -> `step_time_ms`, `Data` -> `data_time`, `Acc@1` -> `acc1`. `Test:` lines are eval
records (`eval_loss`, `eval_acc1`; `Test (EMA):` -> `eval_ema_loss`, ...) with the step of the train
record before them; the ` * Acc@1 ...` summary and `Current checkpoints:` are not records.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import scale_metric
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
    step_int,
    text_result,
)

NAME = "timm"
# `Train: 3 [2200/5004 ( 44%)]`: the percentage is optional for copies that drop it
TRAIN = r"\bTrain:\s*(?P<epoch>\d+)\s*\[\s*(?P<i>\d+)\s*/\s*(?P<n>\d+)\s*(?:\(\s*[-+\d.]+\s*%\s*\))?\s*\]"
# `Test: [   0/390]`, `Test (EMA): [ 390/390]`, `Validation: [...]`
EVAL = r"\b(?:Test|Val|Valid|Validation|Eval)(?P<suffix>\s*\([^)]*\))?:\s*\[\s*(?P<ti>\d+)\s*/\s*(?P<tn>\d+)\s*\]"
# `Name: value` (one or a few words, `Acc@1`, `KD-Loss`); a `s` unit may follow the value
PAIR = (
    rf"(?P<k>[A-Za-z][\w@./-]*(?: [A-Za-z0-9][\w@./-]*)*):\s+(?P<v>{NUM_TOKEN})s?"
    r"(?:[\s,(]|$)"
)


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(
        sample,
        [
            (rf"{TRAIN}\s+\S[^:]*:\s+{NUM_TOKEN}", 0.92),
            (rf"{EVAL}\s+Time:\s+{NUM_TOKEN}s?\s+\(.*\bLoss:\s+{NUM_TOKEN}\s+\(.*\bAcc@1:", 0.45),
        ],
    )


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains("Train:", literal=True) | text.str.contains(r":\s*\[\s*\d+\s*/"))
    g = cand.with_columns(
        text.str.extract_groups(TRAIN).alias("_t"),
        text.str.extract_groups(EVAL).alias("_e"),
    ).unnest("_t", "_e")
    epoch, i, n = (pl.col(c).cast(pl.Int64, strict=False) for c in ("epoch", "i", "n"))
    is_train = pl.col("i").is_not_null()
    is_eval = ~is_train & pl.col("ti").is_not_null()
    rec = (
        g.filter(is_train | is_eval)
        .with_columns(
            pl.when(is_train).then(step_int(epoch * n + i)).alias("step"),
            pl.when(is_train).then(pl.lit("train")).otherwise(pl.lit("eval")).alias("record_kind"),
            # `Test (EMA)` evaluates the EMA weights: its names get an `ema ` prefix
            pl.col("suffix").str.contains("(?i)ema").fill_null(False).alias("_ema"),
        )
        .sort("line")
    )
    # eval lines: the step of the train record before them
    rec = rec.with_columns(pl.col("step").forward_fill())
    body = rec.select("line", text.str.replace(TRAIN, "").str.replace(EVAL, "").alias("text"), "record_kind", "_ema")
    pairs = find_pairs(body, PAIR)
    pairs = pairs.with_columns(pl.col("k").str.strip_chars().str.to_lowercase().str.replace_all("@", "", literal=True))
    # the elapsed/ETA a copy appends is no metric
    pairs = pairs.filter(~pl.col("k").str.contains(r"\beta\b|elapsed"))
    pairs = pairs.with_columns(
        pl.col("k").replace({"data": "data_time"}),
    ).with_columns(pl.when(pl.col("_ema")).then(pl.lit("ema ") + pl.col("k")).otherwise(pl.col("k")).alias("k"))
    values = named_values(pairs, eval_rows=pl.col("record_kind") == "eval").select("line", "name", "value")
    values = scale_metric(values, "time", "step_time_ms", 1000.0)
    values = scale_metric(values, "eval_time", "eval_step_time_ms", 1000.0)
    values = scale_metric(values, "eval_ema_time", "eval_ema_step_time_ms", 1000.0)
    # a copy's logger may put a timestamp before the line (`2024-03-01 10:00:00,123 - train - INFO - `)
    records = rec.select("line", "step", "prefix_rank", "record_kind", extract_time(text).alias("time"))
    unparsed = rec.join(values.select("line").unique(), on="line", how="anti")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
