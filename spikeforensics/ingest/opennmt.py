"""OpenNMT-py training logs (the PyTorch OpenNMT; OpenNMT-tf has its own reader).

The training line is `Statistics.output` in `OpenNMT/OpenNMT-py:onmt/utils/statistics.py`,
printed every `-report_every` steps through `onmt.utils.logging.logger`
(`[%(asctime)s %(levelname)s] `):

    logger.info(("Step %s; acc: %6.2f; ppl: %5.2f; xent: %4.2f; " +
                 "lr: %7.5f; %3.0f/%3.0f tok/s; %6.0f sec") % (step_fmt, ...))   # step_fmt "%2d" or "%2d/%5d"

    [2020-02-09 07:29:37,814 INFO] Step 50/100000; acc:   2.15; ppl: 11344.46; xent: 9.34; lr: 0.00001; 10559/11089 tok/s;     35 sec
    [2023-05-02 10:00:00,000 INFO] Step 1000/50000; acc: 45.2; ppl: 30.1; xent: 3.4; lr: 0.00070; sents:  123456; bsz: 1800/2000/64; 25000/27000 tok/s;    300 sec
    [2021-01-01 00:00:00,000 INFO] Step 100; acc(token):  55.10; ppl: 12.34; xent: 2.51; lr: 0.00010; 900/950 tok/s;     60 sec   # BertStatistics
    Step 200/1000; acc:  12.00; ppl: nan; xent: nan; lr: 0.00100; 100/120 tok/s;     20 sec             # a ReportMgr that print()s

Later releases add fields between `lr` and the speeds (`sents`, `bsz: s/t/n`, `aux`); the
fields are read by name, so any of them may be missing or new. The 2017-18 releases print
per epoch: `Epoch  3,   50/ 1200; acc:  12.34; ppl: 345.67; xent: 5.85; lr: 1.00000; ...`
(`Statistics.output(epoch, batch, n_batches, start)`); there step = (epoch - e0) * n_batches +
batch, e0 the first epoch in the file, as metriclogger.py/mmengine.py count it.

-> a training record: step = N of `Step N[/M]` (the step just done), `loss` = `xent` (mean
cross-entropy per target token; `ppl` = exp(xent), kept as `ppl`), `acc` (token accuracy, %),
`lr`, `sents`, `aux`, `tokens_per_s` = the target tokens/s (the second number of `s/t tok/s`).

Validation (`ReportMgr._report_step`, `OpenNMT/OpenNMT-py:onmt/utils/report_manager.py`):

    [2020-02-09 07:33:27,536 INFO] Validation perplexity: 500.32
    [2020-02-09 07:33:27,536 INFO] Validation accuracy: 12.0461

-> one eval record per validation (the run of `Validation ...` lines after a training record),
at the step of the training record before it: `eval_ppl`, `eval_acc` (and `eval_xent` ->
`eval_loss` where a fork prints it). `Train perplexity/accuracy` (the same interval's averages
again) are not records. `Saving checkpoint F_step_N.pt` and the other events come from the
shared extractor.
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
    step_int,
    text_result,
)

NAME = "opennmt"
STEP = r"\bStep\s+(?P<step>\d+)(?:/\s*\d+)?;"
EPOCH = r"\bEpoch\s+(?P<epoch>\d+),\s+(?P<i>\d+)/\s*(?P<n>\d+);"
HEAD = rf"(?:{STEP}|{EPOCH})\s+(?:acc|total ppl|ppl)\b"
VALID = rf"\bValidation (?P<vk>perplexity|accuracy|xent|loss):\s+(?P<vv>{NUM_TOKEN})"
# `name: value` (value = first number: `acc(mlm/nx): 12.00/ 5.00` keeps 12.00)
PAIR = rf"(?:^|;)\s*(?P<k>[A-Za-z][\w()/ ]*?):\s*(?P<v>{NUM_TOKEN})"
TOKS = rf"(?:^|;)\s*(?:{NUM_TOKEN}/\s*)*(?P<tps>{NUM_TOKEN})\s+tok(?:/\s*{NUM_TOKEN}\s+sent)?/s"
NAMES = {
    "xent": "loss",
    "acc": "acc",
    "acc_token": "acc",
    "acc_sent": "acc_sent",
    "acc_mlm_nx": "acc",
    "ppl": "ppl",
    "total_ppl": "ppl",
}
VALID_NAMES = {"perplexity": "eval_ppl", "accuracy": "eval_acc", "xent": "eval_loss", "loss": "eval_loss"}


def sniff(sample: SniffSample) -> float:
    # (a `Validation loss:` inside another loop's training line is not OpenNMT's: its own opens the message)
    return sniff_tiers(sample, [(rf"{HEAD}.*\bxent:", 0.9), (rf"{HEAD}.*\btok/s", 0.7), (rf"(?:^|\]\s*){VALID}", 0.4)])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains(r"\b(?:Step|Epoch)\s+\d") | text.str.contains("Validation ", literal=True))
    g = (
        cand.with_columns(text.str.extract_groups(HEAD).alias("_g"), text.str.extract_groups(VALID).alias("_v"))
        .unnest("_g", "_v")
        .filter(pl.col("step").is_not_null() | pl.col("epoch").is_not_null() | pl.col("vv").is_not_null())
        .sort("line")
    )
    g = g.with_columns((pl.col("step").is_not_null() | pl.col("epoch").is_not_null()).alias("_is_train"))
    is_train = pl.col("_is_train")
    epoch, i, n = (pl.col(c).cast(pl.Int64, strict=False) for c in ("epoch", "i", "n"))
    e0 = epoch.drop_nulls().first()
    g = g.with_columns(
        pl.coalesce(step_int(pl.col("step")), (epoch - e0) * n + i).alias("step"),
        pl.when(is_train).then(pl.col("line")).alias("_train_line"),
    ).with_columns(pl.col("step").forward_fill(), pl.col("_train_line").forward_fill().fill_null(0))
    train = g.filter(is_train)
    # a run of Validation lines after one training record is one eval record (its first line)
    valid = g.filter(~is_train).with_columns(pl.col("line").min().over("_train_line").alias("_rec"))
    time = extract_time(text).alias("time")
    records = pl.concat(
        [
            train.select("line", "step", "prefix_rank", time, pl.lit("train").alias("record_kind")),
            valid.filter(pl.col("line") == pl.col("_rec")).select(
                "line", "step", "prefix_rank", time, pl.lit("eval").alias("record_kind")
            ),
        ]
    ).sort("line")
    body = text.str.replace(r"^.*?\b(?:Step\s+\d+(?:/\s*\d+)?|Epoch\s+\d+,\s+\d+/\s*\d+);", ";")
    bodies = train.select("line", body.alias("text"))
    pairs = find_pairs(bodies, PAIR).with_columns(
        pl.col("k").str.strip_chars().str.to_lowercase().str.replace_all(r"[^a-z0-9]+", "_").str.strip_chars("_")
    )
    pairs = pairs.filter(pl.col("k") != "bsz").with_columns(pl.col("k").replace(NAMES))  # bsz: s/t/n sizes
    values = named_values(pairs).select("line", "name", "value")
    toks = bodies.with_columns(text.str.extract(TOKS, 1).alias("v")).filter(pl.col("v").is_not_null())
    toks = named_values(toks.select("line", pl.lit("tokens_per_s").alias("k"), "v")).select("line", "name", "value")
    vals = named_values(
        valid.select(
            pl.col("_rec").alias("line"), pl.col("vk").replace_strict(VALID_NAMES).alias("k"), pl.col("vv").alias("v")
        )
    ).select("line", "name", "value")
    values = pl.concat([values, toks, vals])
    unparsed = train.join(values.select("line").unique(), on="line", how="anti").select("line", "text")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
