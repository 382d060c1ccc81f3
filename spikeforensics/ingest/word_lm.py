"""The pipe-separated progress prints of the PyTorch word-level language-model example, AWD-LSTM
and the many LM codes and course exercises copied from these two:

    | epoch   1 |   100/ 2826 batches | lr 20.00 | ms/batch 181.56 | loss  6.92 | ppl  1009.16
    | epoch   1 |   200/  663 batches | lr 30.00000 | ms/batch 118.12 | loss  7.23 | ppl  1382.24 | bpc   10.433
    | epoch   3 |   400/ 1327 batches | lr 3.00000e+01 | ms/batch 60.02 | loss   nan | ppl      nan
    | end of epoch   1 | time: 650.53s | valid loss  5.38 | valid ppl   216.95 | valid bpc    7.765   # eval
    | End of training | test loss  4.01 | test ppl    55.03                                        # eval

Printing code: pytorch/examples `word_language_model/main.py` (`train()`:
`'| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch {:5.2f} | loss {:5.2f} | ppl {:8.2f}'`
every `log_interval` batches, the batch index `batch` 0-based with `batch > 0`, the total
`len(train_data) // args.bptt`; after each epoch `'| end of epoch {:3d} | time: {:5.2f}s | valid loss
{:5.2f} | valid ppl {:8.2f}'`; after training `'| End of training | test loss {:5.2f} | test ppl
{:8.2f}'`), and salesforce/awd-lstm-lm `main.py` (the same with `lr {:05.5f}` (or `{:05.5e}` in forks),
`| bpc {:8.3f}` and `| valid bpc` / `| test bpc`; `pointer.py`: `| End of pointer | test loss ...`).
`cur_loss` is the mean loss over the logging interval; `nan`/`inf` print as such.

Step = (epoch - e0) * n_batches + batch, the epoch's length being the printed total: the batch
counter restarts every epoch (`range(1, args.epochs + 1)`: e0 = 1; a copy that counts epochs
from 0 gets e0 = 0). `ms/batch` -> `step_time_ms`, `epoch` kept as a metric; `ppl`, `bpc` keep their
names. `end of epoch` lines are eval records (`valid loss` -> `eval_loss`, `valid ppl` -> `eval_ppl`)
and `End of training` the test evaluation (`eval_test_loss`, ...), both with the step of the train
record before them; the epoch wall time (`time: 650.53s`) is not a metric.

fairseq's 2018 `| epoch 001 | loss 7.2 | ...` summaries (no `N/ M batches` counter, read by
`fairseq`) are not this format.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    named_values,
    prepared_lines,
    sniff_tiers,
    split_fields,
    step_int,
    text_result,
)

NAME = "word_lm"
TRAIN = r"\|\s*epoch\s+(?P<epoch>\d+)\s*\|\s*(?P<batch>\d+)\s*/\s*(?P<n>\d+)\s+batches\s*\|"
END_OF_EPOCH = r"\|\s*end of epoch\s+\d+\s*\|"
END_OF_RUN = r"\|\s*End of \w+\s*\|"
FIELD = rf"^\s*(?P<k>[A-Za-z_][\w/ ]*?)\s+(?P<v>{NUM_TOKEN})\s*$"
# fields that are counters or headings, not metrics
NOT_METRICS = ["end of epoch", "time"]


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(
        sample,
        [
            (rf"{TRAIN}.*\|\s*(?:lr|loss)\s", 0.9),
            (rf"{END_OF_EPOCH}.*\|\s*valid (?:loss|ppl)\s", 0.5),
        ],
    )


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains("|", literal=True) & text.str.contains(r"(?i)\bepoch\b|End of \w+\s*\|"))
    g = cand.with_columns(text.str.extract_groups(TRAIN).alias("_t")).unnest("_t")
    is_train = pl.col("batch").is_not_null()
    is_eval = ~is_train & text.str.contains(rf"{END_OF_EPOCH}|{END_OF_RUN}")
    rec = g.filter(is_train | is_eval)
    epoch, batch, n = (pl.col(c).cast(pl.Int64, strict=False) for c in ("epoch", "batch", "n"))
    e0 = rec.select(pl.min_horizontal(epoch.min(), pl.lit(1))).item() if rec.height else 1
    rec = (
        rec.with_columns(
            pl.when(is_train).then(step_int((epoch - e0) * n + batch)).alias("step"),
            pl.when(is_train).then(pl.lit("train")).otherwise(pl.lit("eval")).alias("record_kind"),
            extract_time(text).alias("time"),
        )
        .sort("line")
        .with_columns(pl.col("step").forward_fill())  # eval lines: the step of the train record before
    )
    # the counter field (`  100/ 2826 batches`) and `time: 650.53s` do not match FIELD
    pairs = split_fields(rec.select("line", "text", "record_kind"), "|", FIELD).with_columns(
        pl.col("k").str.strip_chars()
    )
    pairs = pairs.filter(~pl.col("k").is_in(NOT_METRICS)).with_columns(
        pl.col("k").replace({"ms/batch": "step_time_ms"})
    )
    pairs = pairs.filter((pl.col("k") != "epoch") | (pl.col("record_kind") == "train"))
    values = named_values(pairs, eval_rows=pl.col("record_kind") == "eval").select("line", "name", "value")
    records = rec.select("line", "step", "prefix_rank", "record_kind", "time")
    unparsed = rec.join(values.select("line").unique(), on="line", how="anti")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
