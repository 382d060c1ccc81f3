"""TensorBoard event files (`events.out.tfevents.*`) -> metrics. Optional extra.

Read with tensorboard's streaming event loader (one pass, constant memory), never
the reservoir-sampling `EventAccumulator` (it silently drops points - exactly the
spikes we look for). tensorboard is imported only when such a file is parsed; without
it the file fails with a one-line message naming `pip install 'spikeforensics[tensorboard]'`.

Tags become metric names through the alias table (`train/loss` -> `loss`,
`train/learning_rate` -> `lr`, Megatron `lm loss` -> `loss`, `grad-norm` ->
`grad_norm`, `eval/loss` -> `eval_loss`). Tags plotted against another x-axis
(Megatron `... vs samples`, `... vs tokens`) are skipped: their "step" is not a step.
Consecutive events with the same step form one record (the tags of one step); a record
with only evaluation tags is an eval record (`eval/...`, `val_...`, or a tag that names its evaluation at
the end: `Test loss (avg on test)`, `loss_val`; see `_tables.is_eval_name`). `line` is null (binary file); `time` is
the event's wall time.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest import _tables as T
from spikeforensics.ingest.base import ParseResult, SniffSample, SourceFile, records_to_metrics

NAME = "tensorboard"
BINARY = True
INSTALL_HINT = "pip install 'spikeforensics[tensorboard]'"
SKIP_TAG_RE = r"(?i) vs (samples|tokens|steps)$"


def sniff(sample: SniffSample) -> float:
    head = sample.text[:4096]
    if "brain.Event:" in head:
        return 0.95
    return 0.6 if "tfevents" in sample.path.name and "\x00" in head else 0.0


def _loader(path):
    """The events of the file as stored (`LegacyEventFileLoader`): a `simple_value` scalar is
    read as it is; `EventFileLoader` would first turn every one into a tensor proto (and
    each back through `make_ndarray`), several times the cost."""
    try:
        from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        raise T.ingest_error(f"{path}: reading TensorBoard event files needs tensorboard: {INSTALL_HINT}") from None
    return LegacyEventFileLoader(str(path)), tensor_util


def read_scalars(path) -> pl.DataFrame:
    """(ord, step, wall_time, tag, value) for every scalar in the file, in file order."""
    loader, tensor_util = _loader(path)
    steps, times, tags, values = [], [], [], []
    for event in loader.Load():  # protobuf stream: one Python iteration per event is unavoidable
        if not event.HasField("summary"):
            continue
        for v in event.summary.value:
            kind = v.WhichOneof("value")
            if kind == "simple_value":
                val = float(v.simple_value)
            elif kind == "tensor":
                arr = tensor_util.make_ndarray(v.tensor)
                if arr.size != 1 or arr.dtype.kind not in "fiub":
                    continue
                val = float(arr.reshape(-1)[0])
            else:
                continue
            steps.append(int(event.step))
            times.append(float(event.wall_time))
            tags.append(v.tag)
            values.append(val)
    return pl.DataFrame(
        {"step": steps, "wall_time": times, "tag": tags, "value": values},
        schema={"step": pl.Int64, "wall_time": pl.Float64, "tag": pl.String, "value": pl.Float64},
    ).with_row_index("ord")


def parse(src: SourceFile) -> ParseResult:
    result = ParseResult()
    scalars = read_scalars(src.path).filter(~pl.col("tag").str.contains(SKIP_TAG_RE))
    if scalars.height == 0:
        return result
    rec = (pl.col("step") != pl.col("step").shift(1)).fill_null(True).cum_sum().alias("rec")
    scalars = scalars.with_columns(rec)
    first = scalars.group_by("rec", maintain_order=True).agg(pl.col("step").first(), pl.col("wall_time").first())
    # within one record a tag logged twice keeps its first value
    values = scalars.unique(["rec", "tag"], keep="first", maintain_order=True).pivot(
        on="tag", index="rec", values="value"
    )
    wide = first.join(values, on="rec", how="left").sort("rec")
    tags = [c for c in wide.columns if c not in ("rec", "step", "wall_time")]
    wide = wide.with_columns(
        (pl.col("rec").cast(pl.Int64) + 1).alias("line"),
        pl.from_epoch((pl.col("wall_time") * 1e6).cast(pl.Int64), time_unit="us").alias("time"),
    )
    wide = wide.with_columns(T.classify_rows(wide, tags).alias("record_kind")).filter(
        pl.col("record_kind").is_not_null()
    )
    wide, names = T.canonical_wide(wide, tags, ["line", "step", "time"])
    metrics = records_to_metrics(wide, src.name, names)
    result.records += metrics.get_column("line").n_unique()
    result.add("metrics", metrics.with_columns(pl.lit(None, dtype=pl.Int64).alias("line")))
    return result
