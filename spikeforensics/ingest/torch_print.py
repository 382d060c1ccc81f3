"""A training loop's own `print` of its loss tensor: PyTorch's repr of a scalar tensor that
still carries its autograd node, the most common log of a hand-written loop (and of the
notebooks and issue pastes made from one):

    0 tensor(10.4375, device='cuda:0', dtype=torch.bfloat16,
           grad_fn=<NllLossBackward0>)
    2 tensor(nan, device='cuda:0', dtype=torch.bfloat16, grad_fn=<NllLossBackward0>)
    tensor(2.3012, grad_fn=<NllLossBackward0>)
    epoch 3 tensor(0.6931, grad_fn=<BinaryCrossEntropyWithLogitsBackward0>)

Printing code: `print(i, loss)` / `print(loss)` in the user's loop; PyTorch's `Tensor.__repr__`
prints `tensor(<value>, <device>, <dtype>, grad_fn=<Node>)` and wraps a repr longer than the
line width before `grad_fn=` (the first line above). A tensor is a loss when its autograd node
is a loss function's (`<...Loss...Backward N>`: `NllLossBackward0`, `MseLossBackward0`,
`BinaryCrossEntropy...` counts through its `Loss`-free name only when the word `loss` is on the
line): that node name is what tells the printed number is the loss and not some other tensor.

Step: the integer the line opens with (`print(i, loss)`), or the number after a counter word
(`epoch 3`, `step 10`, `iter 5`). A file whose loss tensors never carry a counter is a loop that
prints only `print(loss)`: each line is a training record with no step (CONTRACT: step null when
the log prints none), in file order; where some lines carry a counter, the bare ones beside them
are the same loss printed again and are not records.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
    to_float,
)

NAME = "torch_print"
VALUE = r"([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf))"
TENSOR = rf"\btensor\(\s*{VALUE}\s*[,)]"
# the autograd node of a loss function; `BinaryCrossEntropyBackward0` and friends have no `Loss`
LOSS_NODE = r"grad_fn=<\w*(?:Loss|CrossEntropy)\w*Backward\d*>"
# the repr cut before `grad_fn=`: the tensor's paren still open at the end of the line
OPEN_TENSOR = rf"{TENSOR.removesuffix('[,)]')},[^)]*$"
CONTINUED_NODE = rf"^\s*{LOSS_NODE}"
# `0 tensor(`, `12: tensor(`, `epoch 3 tensor(`, `step=10, tensor(`
COUNTER = (
    r"^\s*(?:(?i:epoch|step|iter|iteration|batch|it)\s*[:=#]?\s*)?(\d+)\s*[:,=]?\s*(?:(?i:loss)\s*[:=]?\s*)?tensor\("
)
MIN_LINES = 2
# a detached loss printed alone (`print(loss.detach().float())`, `print(loss.data)`): `tensor(3.2207, device='cuda:0')`
# with no autograd node to say what it is. Read only from a file that is such prints (`bare_tensor_file`): the
# loop prints one scalar per iteration, its loss
BARE_TENSOR = rf"^\s*tensor\(\s*{VALUE}\s*(?:,\s*device='[^']*')?(?:,\s*dtype=torch\.\w+)?\s*\)\s*$"
BARE_MIN_LINES = 3
BARE_SHARE = 0.95  # ... (a warning line or two beside them is allowed; a crash's traceback after them is not counted)
TRACEBACK = "Traceback (most recent call last)"


def bare_tensor_file(texts: pl.Series) -> bool:
    """The file is a loop's detached loss prints: before any traceback, at least BARE_MIN_LINES non-blank lines
    and BARE_SHARE of them scalar tensor reprs (`BARE_TENSOR`). The same rule for sniff (the head) and parse."""
    frame = texts.alias("t").to_frame()
    before = frame.filter(pl.col("t").str.contains(TRACEBACK, literal=True).cum_sum() == 0)
    filled = before.filter(pl.col("t").str.contains(r"\S"))
    bare = filled.select(pl.col("t").str.contains(BARE_TENSOR).sum()).item()
    return bare >= BARE_MIN_LINES and bare >= BARE_SHARE * filled.height


def sniff(sample: SniffSample) -> float:
    # a wrapped repr counts only beside whole ones (its `grad_fn` line, which decides, is the next line)
    whole = sniff_share(sample, rf"{TENSOR}.*{LOSS_NODE}")
    wrapped = sniff_share(sample, OPEN_TENSOR)
    if whole >= MIN_LINES or (whole and whole + wrapped >= MIN_LINES + 1):
        return 0.6
    return 0.5 if bare_tensor_file(pl.Series(sample.lines, dtype=pl.String)) else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    # the next physical line, for a repr wrapped before its `grad_fn=` (the continuation is the next line)
    marked = lines.sort("line").with_columns(
        text.shift(-1).alias("_next"), (pl.col("line").shift(-1) == pl.col("line") + 1).alias("_adjacent")
    )
    whole = text.str.contains(rf"{TENSOR}.*{LOSS_NODE}")
    wrapped = (
        text.str.contains(OPEN_TENSOR)
        & pl.col("_adjacent").fill_null(False)
        & pl.col("_next").str.contains(CONTINUED_NODE).fill_null(False)
    )
    if (src.only_lines is None or src.window) and bare_tensor_file(lines.get_column("text")):
        whole = whole | text.str.contains(BARE_TENSOR)  # a file of detached loss prints (see BARE_TENSOR)
    cand = marked.filter(whole | wrapped).with_columns(
        text.str.extract(TENSOR, 1).alias("_v"), text.str.extract(COUNTER, 1).alias("_c")
    )
    counted = cand.filter(pl.col("_c").is_not_null())
    if counted.height:
        rec = counted.with_columns(step_int(pl.col("_c")).alias("step"))
    elif cand.height >= MIN_LINES and (src.only_lines is None or src.window):
        rec = cand.with_columns(pl.lit(None, dtype=pl.Int64).alias("step"))
    else:
        rec = cand.head(0).with_columns(pl.lit(None, dtype=pl.Int64).alias("step"))
    records = rec.select(
        "line", "step", "prefix_rank", extract_time(text).alias("time"), pl.lit("train").alias("record_kind")
    )
    values = rec.select("line", pl.lit("loss").alias("name"), to_float(pl.col("_v")).alias("value"))
    return text_result(src.name, lines, records, values, mode="done")
