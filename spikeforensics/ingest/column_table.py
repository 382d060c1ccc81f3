"""Column tables printed to stdout: a header line of metric names, then rows of values.

    Ultralytics YOLO (the header is printed again before every epoch; the row is a tqdm bar):
          Epoch    GPU_mem   box_loss   seg_loss   cls_loss   dfl_loss  Instances       Size
          1/100      2.37G      1.234      2.345      3.456      1.111         16        640: 100%|###| 1/1 [...]
    YOLOv5 (2020-21) and YOLOv7, whose loss columns are bare names (`total` is their sum, the loss):
         Epoch   gpu_mem       box       obj       cls     total    labels  img_size
         0/299     18.7G       nan     2.028       nan       nan       521       768:   6%|###8   | 15/234 [...]
    DeePMD-kit `lcurve.out` (a `#` header; `rmse_trn` / `rmse_val` are its loss on training / validation data):
        #  step      rmse_val    rmse_trn    rmse_e_val  rmse_e_trn    rmse_f_val  rmse_f_trn         lr
             100      2.10e+00    2.44e+00      2.73e-02    2.44e-02      6.64e-02    7.71e-02    1.0e-03
    OpenAI Spinning Up `progress.txt` (tab-separated; `LossQ` -> `loss_q`, `LossPi` -> `loss_pi`):
        Epoch	AverageEpRet	StdEpRet	...	LossPi	LossQ	Time
    CatBoost `catboost_info/learn_error.tsv` / `test_error.tsv` (tab-separated, every metric by its CatBoost name;
    the objective is the loss, the first objective name of the header: `MultiClass` here; `test_error.tsv` holds
    the eval set's values):
        iter	Accuracy	MultiClass
        0	0.7179479451	2.6956357
    fastai (`fit`, console or a notebook table copied as text):
        epoch     train_loss  valid_loss  accuracy  time
        0         2.331       2.125       0.312     00:10
    Keras-style or custom loops that print an aligned table the same way.
    YOLOv5's `results.txt` before v6 (no header: a fixed layout of 15 columns, read as `RESULTS_TXT_NAMES`):
             0/499     4.69G      0.12   0.03458   0.03086    0.1854        60       640 0.0007451   0.06832 ...

A header is a line of three or more names, one of them holding `loss`; a row is a line whose
first token is a counter (`3` or `3/100`) under such a header. The i-th token of the row is the
value of the i-th name (extra tokens, such as a trailing progress bar, are ignored). When a header
has more names than its rows have values and the extra names are the `loss` of `train loss` /
`valid loss` (an HTML table flattened by a copy), those pairs are joined (`train_loss`).
The step is the first column when it is a counter (`epoch`, `step`, `iter`, ...: `1/100` -> 1),
else the row's position; a row drawn as a tqdm bar of batch i/n inside epoch E is step (E - e0) * n + i
(YOLO redraws the bar with the epoch's running-mean losses every batch). Names go through the alias table (`train_loss` -> `loss`,
`valid_loss` -> `eval_loss`); a table whose only losses are parts (`box_loss`, `cls_loss`) keeps
them under their own names (`RunData.resolve` reads one of them as the loss).
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    named_values,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "column_table"
NAME_TOKEN = r"[A-Za-z_][\w./()-]*"
# (a header commented out with `#`, as `numpy.savetxt` and DeePMD-kit's `lcurve.out` write it, is a header)
HEADER = rf"^\s*(?:#\s*)?{NAME_TOKEN}(?:\s+{NAME_TOKEN}){{2,}}\s*$"
ROW = r"^\s*\d+(?:/\d+)?\s+\S+\s+\S"
# ... or a CatBoost row, which may hold one metric only (`test_error.tsv` of an objective alone: `0<TAB>0.6851`)
CATBOOST_ROW = r"^\s*\d+\t\S"
COUNTERS = ("epoch", "step", "iter", "iteration", "it", "global_step", "steps", "epochs")
STEP_COUNTERS = ("global_step", "step", "steps", "iteration", "iter", "it")  # preferred over an epoch column
# a header that holds a loss (`box_loss`, `train_loss`), or YOLOv5/YOLOv7's, whose loss columns have bare
# names: `Epoch gpu_mem box obj cls total labels img_size` (`total` is the sum of the three: the loss)
# CatBoost's objectives (catboost/private/libs/options/enums.h ELossFunction, the trainable ones), the loss column
# of its `learn_error.tsv` under an `iter` header
CATBOOST_OBJECTIVES = (
    "Logloss", "CrossEntropy", "MultiClass", "MultiClassOneVsAll", "RMSE", "MAE", "Quantile", "MAPE", "Poisson",
    "Huber", "Lq", "Expectile", "Tweedie", "LogLinQuantile", "RMSEWithUncertainty", "MultiRMSE", "MultiLogloss",
    "MultiCrossEntropy", "YetiRank", "YetiRankPairwise", "PairLogit", "PairLogitPairwise", "QueryRMSE",
    "QuerySoftMax", "QueryCrossEntropy", "LogCosh", "Cox", "SurvivalAft", "Focal",
)  # fmt: skip
CATBOOST_HEADER = rf"^\s*iter\t(?:[^\t]+\t)*(?:{'|'.join(CATBOOST_OBJECTIVES)})(?:\t|$)"
LOSSY_HEADER = rf"(?i)loss|\bgpu_mem\s+box\s|\brmse_trn\b|(?-i:{CATBOOST_HEADER})"
YOLO_LOSS_NAMES = {"box": "box_loss", "obj": "obj_loss", "cls": "cls_loss", "total": "loss"}
# the tqdm bar a row is drawn with (`... 768:   6%|###8    | 15/234 [00:23<04:56, 1.36s/it]`): the batch i of n
# within the row's epoch
TQDM_COUNT = r"\d+%\|[^|]*\|\s*(\d+)/(\d+)\s*\["
# YOLOv5's `results.txt` before v6 (and Ultralytics YOLOv3's), one headerless row per epoch: `E/last  mem  box  obj  cls
# total  labels  img_size  P  R  mAP@.5  mAP@.5:.95  val_box  val_obj  val_cls` (`train.py` writes `'%10s' * 2 + '%10.4g'
# * 13`; YOLOv3 has GIoU for box and F1 for mAP@.5:.95): read under these names
NUM = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+|nan|inf)"
RESULTS_TXT_ROW = rf"^\s*\d+/\d+\s+\S+(?:\s+{NUM}){{13}}\s*$"
RESULTS_TXT_NAMES = [
    "epoch", "gpu_mem", "box_loss", "obj_loss", "cls_loss", "loss", "labels", "img_size", "precision", "recall",
    "mAP_0.5", "mAP_0.5:0.95", "val_box_loss", "val_obj_loss", "val_cls_loss",
]  # fmt: skip
MAX_GAP = 200  # lines between a header and its first row, or two rows (tqdm redraws, validation lines in between)
CONFIDENCE = 0.5
CATBOOST_CONFIDENCE = 0.9


def sniff(sample: SniffSample) -> float:
    if sniff_share(sample, RESULTS_TXT_ROW) >= 3:
        return CONFIDENCE
    headers = sniff_share(sample, HEADER + r"|(?i:^.*loss.*$)")  # cheap gate first
    if not headers:
        return 0.0
    lines = pl.Series(sample.lines, dtype=pl.String)
    is_header = (lines.str.contains(HEADER) & lines.str.contains(LOSSY_HEADER)) | lines.str.contains(CATBOOST_HEADER)
    is_row = lines.str.contains(ROW) | lines.str.contains(CATBOOST_ROW)
    if not is_header.any() or not is_row.any():
        return 0.0
    first_header = int(is_header.arg_true()[0])
    if not bool(is_row.slice(first_header + 1).any()):
        return 0.0
    # CatBoost's own file names its objective (an `iter<TAB>Logloss` pair is also a `step: value`-like row shape)
    return CATBOOST_CONFIDENCE if bool(lines.str.contains(CATBOOST_HEADER).any()) else CONFIDENCE


def _header_names(tokens: pl.Expr, values: pl.Expr) -> pl.Expr:
    """The header's names, `X loss` pairs joined when the header is longer than its rows."""
    joined = tokens.list.join(" ").str.replace_all(
        r"(?i)\b(train|valid|val|eval|test|training|validation) loss\b", "${1}_loss"
    )
    return pl.when(tokens.list.len() > values.list.len()).then(joined.str.extract_all(r"\S+")).otherwise(tokens)


def _counter_index() -> pl.Expr:
    """Which column holds the step: a step or iteration column wherever it sits (3D-ResNets' `train_batch.log`:
    `epoch<TAB>batch<TAB>iter<TAB>loss<TAB>...`, `iter` the global one), else the first column."""
    steplike = pl.col("_names").list.eval(pl.element().str.to_lowercase().is_in(STEP_COUNTERS))
    return pl.when(steplike.list.any()).then(steplike.list.arg_max()).otherwise(0).cast(pl.Int64)


def _counter(rows: pl.DataFrame) -> pl.Expr:
    """The row's step: the value of its step column (`_cidx`, see `_counter_index`; `3`, `3/100` -> 3). A row
    drawn as a tqdm bar within an epoch (`0/299 ... 15/234 [...]`: YOLO prints one redraw per batch) is batch i of
    n in epoch E: (E - e0) * n + i, e0 = 0 when the file prints an epoch 0, else 1 (as `generic_steps` composes
    `Batch i/n`)."""
    first = pl.col("_vals").list.get(pl.col("_cidx")).str.extract(r"^(\d+)", 1).cast(pl.Float64, strict=False)
    i = pl.col("text").str.extract(TQDM_COUNT, 1).cast(pl.Float64, strict=False)
    n = pl.col("text").str.extract(TQDM_COUNT, 2).cast(pl.Float64, strict=False)
    e0 = 0.0 if rows.select(((first == 0) & i.is_not_null()).any()).item() else 1.0
    return step_int(pl.when(i.is_not_null() & n.is_not_null()).then((first - e0) * n + i).otherwise(first))


def _catboost_eval_file(file_name: str) -> bool:
    return file_name.lower().startswith("test_error")


def _objective_is_loss(file_name: str) -> pl.Expr:
    """In a CatBoost header, its first objective name is the loss (`eval_loss` in `test_error.tsv`, the eval set's)."""
    first = pl.element().is_in(CATBOOST_OBJECTIVES) & (pl.element().is_in(CATBOOST_OBJECTIVES).cum_sum() == 1)
    loss = "eval_loss" if _catboost_eval_file(file_name) else "loss"
    return pl.when(first).then(pl.lit(loss)).otherwise(pl.element())


def _cells(text: pl.Expr) -> pl.Expr:
    """A line's cells: tab-separated when it holds a tab (Spinning Up's `Time Steps` and `AVG Time Per Epoch` are
    one column each), else whitespace-separated."""
    by_tab = (
        text.str.strip_chars()
        .str.split("\t")
        .list.eval(pl.element().str.strip_chars())
        .list.eval(pl.element().filter(pl.element() != ""))
    )
    return pl.when(text.str.contains("\t")).then(by_tab).otherwise(text.str.extract_all(r"\S+"))


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    names = _cells(text.str.replace(r"^\s*#", ""))  # (a `#`-commented header's names)
    headers = lines.filter(
        (text.str.contains(HEADER) & text.str.contains(LOSSY_HEADER)) | text.str.contains(CATBOOST_HEADER)
    ).select(
        pl.col("line").alias("_hline"),
        pl.when(text.str.contains(CATBOOST_HEADER))
        .then(names.list.eval(_objective_is_loss(src.path.name)))
        .when(text.str.contains(r"(?i)loss"))
        .then(names)
        .otherwise(names.list.eval(pl.element().replace(YOLO_LOSS_NAMES)))
        .alias("_names"),
    )
    if headers.height == 0 and lines.select(text.str.contains(RESULTS_TXT_ROW).sum()).item() >= 3:
        headers = pl.DataFrame(  # YOLOv5's `results.txt`: no header line, a fixed layout (above the first row)
            {"_hline": [0], "_names": [RESULTS_TXT_NAMES]},
            schema={"_hline": lines.schema["line"], "_names": pl.List(pl.String)},
        )
    if headers.height == 0:
        return ParseResult()
    rows = (
        lines.filter(text.str.contains(ROW) | text.str.contains(CATBOOST_ROW))
        .sort("line")
        .join_asof(headers.sort("_hline"), left_on="line", right_on="_hline", strategy="backward")
    )
    # a row belongs to the header above it while the rows keep coming: at most MAX_GAP lines after the header
    # or the row before (a 1,000-row `lcurve.out` under one header; tqdm redraws between YOLO's rows)
    gap = (pl.col("line") - pl.col("line").shift(1).over("_hline")).fill_null(pl.col("line") - pl.col("_hline"))
    rows = rows.filter(pl.col("_hline").is_not_null()).filter(((gap > MAX_GAP).cum_sum().over("_hline")) == 0)
    tokens = _cells(text)
    rows = rows.with_columns(tokens.alias("_vals")).with_columns(
        _header_names(pl.col("_names"), pl.col("_vals")).alias("_names")
    )
    rows = rows.filter(pl.col("_vals").list.len() >= pl.col("_names").list.len())
    if rows.height == 0:
        return ParseResult()
    rows = rows.with_columns(pl.col("_vals").list.head(pl.col("_names").list.len()))
    rows = rows.with_columns(_counter_index().alias("_cidx"))
    first_name = pl.col("_names").list.get(pl.col("_cidx")).str.to_lowercase()
    counter = _counter(rows)
    records = rows.select(
        "line",
        "prefix_rank",
        extract_time(text).alias("time"),
        pl.when(first_name.is_in(list(COUNTERS))).then(counter).alias("step"),
        # (CatBoost's `test_error.tsv` is the eval set's, every row an eval record)
        pl.when(pl.lit(_catboost_eval_file(src.path.name)) & text.str.contains(CATBOOST_ROW))
        .then(pl.lit("eval"))
        .otherwise(pl.lit("train"))
        .alias("record_kind"),
    )
    pairs = rows.select("line", pl.col("_names").alias("k"), pl.col("_vals").alias("v")).explode("k", "v")
    pairs = pairs.filter(~pl.col("k").str.to_lowercase().is_in(list(COUNTERS)))
    pairs = pairs.with_columns(pl.col("v").str.strip_chars_end(":,"))
    values = named_values(pairs, eval_rows=pl.col("k").str.contains(r"(?i)^(?:valid|val|eval|test)")).select(
        "line", "name", "value"
    )
    return text_result(src.name, lines, records, values, None, mode="done")
