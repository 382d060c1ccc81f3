"""`MetricLogger.log_every` lines of the torchvision reference scripts and the Meta
research codebases built on them (MAE, DeiT, DINO, ConvNeXt, BEiT, LLaMA-Adapter,
LLaMA2-Accessory, ...), with or without a `[HH:MM:SS.ffffff]` or MPI prefix:

    Epoch: [2]  [ 150/1251]  eta: 0:20:52  lr: 0.000201  loss: 6.8610 (6.8841)  time: 1.0552  data: 0.0035  max mem: 8249
    Epoch: [0/100]  [2240/2502]  eta: 0:02:44  loss: 5.385776 (7.546279)  lr: 0.000089 (0.000045)  wd: 0.040071 (0.040024)  ...
    [03:23:49.951215] Epoch: [0]  [1480/1504]  lr: 0.000026  closs: 1.0800 (1.1317)  grad_norm: 0.4995 (1.1826)  ...
    Train: data epoch: [0]  [  50/4498]  eta: 4:29:01  lr: 0.000002  loss: 15.5648  time: 3.5467  ...   # LAVIS
    Training  [   1250/2500000]  eta: 40 days, 13:22:08  lr: 0.0006 (0.0003)  ...  total_loss: 6.7223 (inf)  # DINOv2
    Test:  [ 0/50]  eta: 0:00:41  loss: 0.6931 (0.6931)  acc1: 87.5000 (87.5000)  ...   # eval record

Value = the current (smoothed-window) value printed first; the running average in
parentheses is ignored. **Step = epoch * iters_per_epoch + iteration**, from `Epoch: [e]`
(0-based, as the engines print it; DINO's `[e/E]` form too) and `[i/n]`: a global
iteration counter that keeps growing across epochs (the log prints no global counter).
`closs` (LLaMA-Adapter's causal-LM loss) is `loss` in a file that prints no `loss`;
`time` (seconds) -> `step_time_ms`, `data` -> `data_time` (seconds), `max mem` (MB) ->
`max_mem_mb`. `Test:` lines are eval records (names prefixed `eval_`) with the step of the
train record before them. `Averaged stats:` and `Total time:` lines are not records. DINOv2's iteration-based
`Training  [i/n]` header: step = i. A loss whose average in parentheses turns non-finite while its printed value
is finite (`total_loss: 6.7223 (inf)`) gives a `nan` event (`in_average`) at that record: a non-finite value
entered the average, hidden by the printed median.
`Loss is nan, stopping training` is a `nan` event (text_events).

The same family without colons: the `ProgressMeter`/`AverageMeter` print of the PyTorch ImageNet
example (pytorch/examples `imagenet/main.py`: `AverageMeter.__str__` is `'{name} {val<fmt>}
({avg<fmt>})'`, `ProgressMeter.display` joins `prefix + '[{:Nd}/N]'` and the meters with tabs;
2017-19 versions print `'Epoch: [{0}][{1}/{2}]\tTime {batch_time.val:.3f} ({batch_time.avg:.3f})\t'
'Data ...\tLoss {loss.val:.4f} ({loss.avg:.4f})\tPrec@1 ...'` directly), copied with other prefixes
by countless projects (filipradenovic/cnnimageretrieval-pytorch, zhiqwang/sightseq `main.py`:
`'>> Train: [{0}][{1}/{2}]\t' 'Time ... Data ... Loss {loss.val:.4f} ({loss.avg:.4f})'` with
`epoch+1, i+1`, `'>> Val: [{0}][{1}/{2}]'` for validation; colon variants `Loss: 0.7 (0.8)`):

    Epoch: [0][   1/5005]\tTime  3.412 ( 3.412)\tData  2.101 ( 2.101)\tLoss 6.9078e+00 (6.9078e+00)\tAcc@1   0.00 (  0.00)
    Epoch: [0][10/5005]\tTime 0.352 (0.421)\tData 0.001 (0.070)\tLoss 6.9012 (6.9079)\tPrec@1 0.000 (0.098)
    >> Train: [1][109/90000]        Time 0.422 (0.361)      Data 0.003 (0.006)      Loss inf (inf)
    Test: [ 10/196]\tTime  0.201 ( 0.380)\tLoss 1.2e+00 (1.3e+00)\tAcc@1  70.00 ( 72.00)   # eval record
    >> Val: [1][10/100]\tTime 0.100 (0.120)\tAccu 0.910                                   # eval record

A line is read when its `[e][i/n]` (or `Test:`/`Val:` `[i/n]`) counter is followed by at least one
`Name value (average)` meter. Value = the current value, names lower-cased without `@`
(`Acc@1` -> `acc1`, `Prec@1` -> `prec1`), `Time` / `Batch Time` (s) -> `step_time_ms`, `Data` -> `data_time`.
Step: an `Epoch: [e]` / `Epoch [e]` prefix is the 0-based loop variable (e * n + i, as above); other prefixes follow
the `epoch+1` copies: (e - e0) * n + i with e0 = 1, or 0 when the file prints an epoch 0. The
batch counter is taken as printed (`i` in old versions, `i + 1` since 2022). A `Test:`/`Val:`/
`Validation:`/`Eval:` prefix makes an eval record; ` * Acc@1 75.000 Acc@5 92.000` summaries are
not records.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._grammar_helpers import scale_metric
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    detail_expr,
    find_pairs,
    named_values,
    prepared_lines,
    sniff_tiers,
    step_int,
    text_result,
)

NAME = "metriclogger"
# (LAVIS's header is `Train: data epoch: [0]`, lower-case)
# (`Epoch:[0/1] [592/75869]`, no space after the colon: NVIDIA's MLPerf DLRM)
TRAIN = r"\b[Ee]poch:\s*\[(?P<epoch>\d+)(?:/\d+)?\]\s*\[\s*(?P<i>\d+)\s*/\s*(?P<n>\d+)\]"
TEST = r"\bTest:\s*\[\s*(?P<ti>\d+)\s*/\s*(?P<tn>\d+)\]"
# an iteration-based run's header (DINOv2's `log_every(..., header="Training")`: `Training  [   1250/2500000]  eta:
# ...`): the counter is the global iteration
TRAIN_ITER = r"\bTraining\s+\[\s*(?P<gi>\d+)\s*/\s*(?P<gn>\d+)\]\s+eta:"
PAIR = rf"(?P<k>[A-Za-z_][\w./-]*(?: mem)?):\s+(?P<v>{NUM_TOKEN})(?:\s|$)"
# ProgressMeter lines: any prefix word before `[e][i/n]` (`>> Train:`, `Epoch`, `Val:`), or an
# eval prefix before a single `[i/n]`
METER_TRAIN = r"(?:\b(?P<label>[A-Za-z]+)\s*:?\s*)?\[\s*(?P<me>\d+)(?:/\d+)?\]\s*\[\s*(?P<mi>\d+)\s*/\s*(?P<mn>\d+)\]"
METER_EVAL = r"\b(?:Test|Val|Valid|Validation|Eval)\s*:?\s*\[\s*(?P<vi>\d+)\s*/\s*(?P<vn>\d+)\]"
EVAL_LABEL = r"(?i)^(?:test|val|valid|validation|eval|evaluation)$"
# an AverageMeter: `Loss 6.9078e+00 (6.9078e+00)`, `Time  0.352 ( 0.421)`, `Loss: inf (inf)`
METER = rf"[A-Za-z][\w@]*:?\s+{NUM_TOKEN}\s*\(\s*{NUM_TOKEN}\s*\)"
METER_NO_COLON = rf"(?:^|\s)[A-Za-z][\w@]*\s+{NUM_TOKEN}\s*\(\s*{NUM_TOKEN}\s*\)"
# meter style: `Name value` with an optional `(average)`, the name one or a few words
PAIR_METER = (
    rf"(?P<k>[A-Za-z_][\w@%./-]*(?: [A-Za-z_][\w@%./-]*)*):?\s+(?P<v>{NUM_TOKEN})"
    rf"(?:\s*\(\s*{NUM_TOKEN}\s*\))?(?:\s|$)"
)
# everything up to the record's counter: `... Epoch: [e]  [i/n]`, `>> Train: [e][i/n]`, `Test: [i/n]`
HEAD = r"^.*?(?:\[\s*\d+(?:/\d+)?\]\s*)?\[\s*\d+\s*/\s*\d+\]"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(
        sample,
        [
            (rf"{TRAIN}\s+(?:eta: |lr: |loss: )", 0.9),
            (TRAIN_ITER, 0.9),
            (rf"\[\s*\d+(?:/\d+)?\]\s*\[\s*\d+\s*/\s*\d+\]\s+(?:\S.*?\s)?{METER}", 0.85),
            (rf"{TEST}\s+eta: |{METER_EVAL}\s+(?:\S.*?\s)?{METER}", 0.5),
        ],
    )


def _meter_base(rec: pl.DataFrame) -> int:
    """e0 of the ProgressMeter lines not headed `Epoch`: 1 (the `epoch+1` copies), 0 when an
    epoch 0 is printed."""
    other = pl.col("_meter_train") & ~pl.col("label").str.contains("(?i)^epoch$").fill_null(False)
    first = rec.filter(other).get_column("me").cast(pl.Int64, strict=False).min()
    return 0 if first == 0 else 1


# a meter whose current value is finite while its average in parentheses is not (DINOv2 `total_loss: 6.7223 (inf)`,
# `{median} ({global_avg})`): a non-finite value entered the average since the last print, hidden by the median
AVG_NONFINITE = rf"(?P<k>[A-Za-z_][\w@%./-]*):\s+(?P<v>{NUM_TOKEN})\s*\(\s*(?P<avg>[-+]?(?:nan|inf))\s*\)"


def _nonfinite_averages(rec: pl.DataFrame, records: pl.DataFrame) -> pl.DataFrame | None:
    """A `nan` event on the first training record whose loss average turned non-finite while its printed value
    is finite (`detail.in_average`): the step of that record, since the value went in within its interval."""
    train = rec.filter(pl.col("record_kind") == "train").select("line", "text")
    hits = (
        find_pairs(train, AVG_NONFINITE)
        .filter(
            pl.col("k").str.to_lowercase().str.contains("loss")
            & ~pl.col("v").str.to_lowercase().str.contains("nan|inf")
        )
        .sort("line")
        .unique("k", keep="first", maintain_order=True)
    )
    if hits.height == 0:
        return None
    hits = hits.join(records.select("line", "step"), on="line", how="left")
    return hits.select(
        "line",
        "step",
        pl.lit(None, dtype=pl.Int32).alias("rank"),
        pl.lit("nan").alias("kind"),
        pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
        detail_expr(
            strings={
                "metric": pl.col("k").str.to_lowercase(),
                "value": pl.col("avg").str.to_lowercase(),
                "note": pl.lit("the running average turned non-finite while the printed value is finite"),
            },
            bools={"in_average": pl.lit(True)},
        ).alias("detail"),
    )


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(
        text.str.contains(r"poch:\s*\[")
        | text.str.contains("Test:", literal=True)
        | (text.str.contains(r"\]\s*\[\s*\d+\s*/|\[\s*\d+\s*/\s*\d+\]") & text.str.contains(METER))
    )
    g = cand.with_columns(
        text.str.extract_groups(TRAIN).alias("_t"),
        text.str.extract_groups(TEST).alias("_e"),
        text.str.extract_groups(METER_TRAIN).alias("_m"),
        text.str.extract_groups(METER_EVAL).alias("_v"),
        text.str.extract_groups(TRAIN_ITER).alias("_g"),
        text.str.contains(METER).alias("_has_meter"),
    ).unnest("_t", "_e", "_m", "_v", "_g")
    epoch, i, n = (pl.col(c).cast(pl.Int64, strict=False) for c in ("epoch", "i", "n"))
    me, mi, mn = (pl.col(c).cast(pl.Int64, strict=False) for c in ("me", "mi", "mn"))
    is_iter = pl.col("gi").is_not_null() & pl.col("i").is_null()
    is_train = pl.col("i").is_not_null() | is_iter
    meter_line = ~is_train & pl.col("_has_meter")
    meter_eval = meter_line & (
        pl.col("label").str.contains(EVAL_LABEL).fill_null(False)
        | (pl.col("mi").is_null() & pl.col("vi").is_not_null())
    )
    g = g.with_columns(
        (meter_line & pl.col("mi").is_not_null() & ~meter_eval).alias("_meter_train"),
        (pl.col("ti").is_not_null() | meter_eval).alias("_eval"),
    )
    # `Epoch [e]` is the loop variable (0-based), other prefixes the file's e0
    base = pl.when(pl.col("label").str.contains("(?i)^epoch$")).then(0).otherwise(_meter_base(g))
    g = g.filter(is_train | pl.col("_meter_train") | pl.col("_eval"))
    rec = g.with_columns(
        pl.when(is_iter)
        .then(step_int(pl.col("gi").cast(pl.Int64, strict=False)))
        .when(is_train)
        .then(step_int(epoch * n + i))
        .when(pl.col("_meter_train"))
        .then(step_int((me - base) * mn + mi))
        .alias("step"),
        pl.when(is_train | pl.col("_meter_train")).then(pl.lit("train")).otherwise(pl.lit("eval")).alias("record_kind"),
    ).sort("line")
    rec = rec.with_columns(pl.col("step").forward_fill())  # eval lines: step of the train record before
    body = rec.select("line", text.str.replace(HEAD, "").alias("text"), "record_kind")
    meter_style = pl.col("text").str.contains(METER_NO_COLON)
    colon_pairs = find_pairs(body.filter(~meter_style), PAIR).filter(pl.col("k") != "eta")
    meter_pairs = find_pairs(body.filter(meter_style), PAIR_METER).with_columns(
        pl.col("k").str.to_lowercase().str.replace_all("@", "", literal=True).replace({"batch time": "time"})
    )
    pairs = pl.concat([colon_pairs, meter_pairs])
    if pairs.height and not pairs.filter(pl.col("k") == "loss").height:
        pairs = pairs.with_columns(pl.col("k").replace({"closs": "loss"}))
    pairs = pairs.with_columns(pl.col("k").replace({"data": "data_time", "max mem": "max_mem_mb"}))
    values = named_values(pairs, eval_rows=pl.col("record_kind") == "eval").select("line", "name", "value")
    values = scale_metric(values, "time", "step_time_ms", 1000.0)
    values = scale_metric(values, "eval_time", "eval_step_time_ms", 1000.0)
    records = rec.select("line", "step", "prefix_rank", "record_kind")
    unparsed = rec.join(values.select("line").unique(), on="line", how="anti")
    out = text_result(
        src.name, lines, records, values, unparsed, mode="done", extra_events=_nonfinite_averages(rec, records)
    )
    # the epoch's `Averaged stats: lr: 0.0000  loss: 7.9345` (`print("Averaged stats:", metric_logger)`, through a
    # logger in LAVIS) is the epoch's mean, no step's record: read here, so no other grammar takes it for one
    out.body_lines = lines.filter(pl.col("text").str.contains(r"\bAveraged stats:")).get_column("line")
    return out
