"""HuggingFace `Trainer` stdout (also TRL, axolotl, LLaMA-Factory, sentence-transformers).

Records are the Python dict reprs `ProgressCallback`/`PrinterCallback` print, found
anywhere in a line (tqdm redraws, `\\r` and pasted `^M` split a physical line into
segments first):

    {'loss': 0.2051, 'grad_norm': nan, 'learning_rate': 9.77e-06, 'epoch': 0.53}
    {'loss': '0.91', 'grad_norm': '0.8618', ...}          # 2025-26 versions: quoted values
    {'eval_loss': ..., 'eval_runtime': ..., 'epoch': ...}  # eval record (record null)
    {'train_runtime': ..., 'train_loss': ..., ...}         # summary (record null)

Each dict is turned into JSON with polars string expressions (quotes, None/True/False,
`nan`/`inf`, `np.float64(x)`/`tensor(x)` wrappers) and decoded in one vectorized pass.

Step (CONTRACT.md): N of the last tqdm `N/M [` counter printed before the dict in the
file, else null. Only counters of the training bar count: its total M is the one seen
before the loss-carrying dicts, so an evaluation bar (another total) does not give an
eval dict its own counter.

Events (DeepSpeed overflows, checkpoint saves, resumes, OOM, NCCL, tracebacks) come
from `text_events.extract_events`; their steps are attached from the tqdm counters
(`N/M` means N steps done, so an overflow after it belongs to step N+1).

HF masks a NaN loss: the collapse signature `'loss': 0.0, 'grad_norm': nan` is kept as
printed (loss 0.0, grad_norm NaN -> a `nan` event) and reported in the notes.
"""

from __future__ import annotations

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest import _tables as T
from spikeforensics.ingest._fields import normalise_name
from spikeforensics.ingest.base import (
    STEP_OUT_OF_RANGE,
    ParseResult,
    SniffSample,
    SourceFile,
    prepared_lines,
    records_to_metrics,
    step_int,
)

NAME = "hf_trainer"

# a dict repr: `{'key': value, ...}` (no nested braces in what the Trainer prints)
DICT_RE = r"\{'[^{}']+':\s*[^{}]*\}"
# keys that make a dict an HF log record
HF_KEYS_RE = r"'(?:loss|learning_rate|grad_norm|eval_loss|train_runtime|train_loss|epoch)':"
# tqdm counter `1318/36234 [11:37<...`
TQDM_RE = r"(\d+)/(\d+) \[(?:\d|\?)"


def sniff(sample: SniffSample) -> float:
    hits = sum(1 for ln in sample.lines if "{'" in ln and _is_hf_dict(ln))
    if hits == 0:
        return 0.0
    return 0.95 if hits >= 2 or len(sample.lines) <= 5 else 0.8


def _is_hf_dict(line: str) -> bool:
    import re

    m = re.search(DICT_RE, line)
    return bool(m and re.search(HF_KEYS_RE, m.group(0)))


def to_json(expr: pl.Expr) -> pl.Expr:
    """A Python dict repr as JSON text (strings quoted with `"`, None/True/False, wrappers)."""
    return (
        expr.str.replace_all(r"\*\*([^*]*)\*\*", "$1")  # markdown bold of a pasted log: 'loss': **4.7581**
        .str.replace_all(r"(?:np\.)?(?:float|int|bfloat|half)\d*\(([^()]*)\)", "$1")
        .str.replace_all(r"tensor\(([^(),]+)(?:,[^()]*)?\)", "$1")
        .str.replace_all(r"'((?:[^'\\]|\\.)*)'", '"$1"')
        .str.replace_all(r"([:\[,]\s*)None\b", "${1}null")
        .str.replace_all(r"([:\[,]\s*)True\b", "${1}true")
        .str.replace_all(r"([:\[,]\s*)False\b", "${1}false")
    )


def parse(src: SourceFile) -> ParseResult:
    result = ParseResult()
    lines = prepared_lines(src).with_row_index("seg").with_columns(pl.col("seg").cast(pl.Int64))
    segs = segments_with_steps(lines)
    dicts = segs.filter(pl.col("dict").is_not_null())
    objects, bad = T.json_objects(
        dicts.select(pl.col("seg").alias("line"), to_json(pl.col("dict")).alias("text")),
    )
    if bad.height:
        phys = bad.join(dicts.select(pl.col("seg").alias("line"), pl.col("line").alias("_p"), "dict"), on="line")
        T.unparsed(result, phys.select(pl.col("_p").alias("line"), pl.col("dict").alias("text")))
    T.unparsed(result, segs.filter(pl.col("broken").is_not_null()).select("line", pl.col("broken").alias("text")))
    if objects.height:
        metrics = _metrics(objects, dicts, src.name, result)
        result.add("metrics", metrics)
    result.add("events", _events(lines, segs))
    return result


def segments_with_steps(lines: pl.DataFrame) -> pl.DataFrame:
    """Per segment: the HF dict (if any), the tqdm counter before it, and the step.

    Columns: line, seg, prefix_rank, dict, broken (text of a cut-short dict), counter (N of the last training-bar counter
    in the segment), step (the dict's step per CONTRACT.md)."""
    text = pl.col("text")
    # regexes run only on the few segments a cheap literal test keeps, each once (a captured
    # column, not an expression repeated in every branch that uses it)
    cand = lines.filter(text.str.contains("{'", literal=True)).select(
        "seg", "text", text.str.extract(f"({DICT_RE})", 1).alias("_found")
    )
    # a dict that is the value of another dict's key (`{'train': {'log_interval': 200, 'learning_rate': 0.0001, ...}`,
    # a config dump) is no Trainer record: the Trainer prints flat dicts
    nested = pl.col("text").str.extract(rf"(\S?)\s*{DICT_RE}", 1).is_in([":", "{"])
    cand = cand.with_columns(
        (pl.col("_found").is_not_null() & pl.col("_found").str.contains(HF_KEYS_RE) & ~nested).alias("_is_dict")
    )
    is_dict = pl.col("_is_dict")
    cand = cand.select(
        "seg",
        pl.when(is_dict).then(pl.col("_found")).alias("dict"),
        # a dict cut short (truncated line, wrapped paste): reported as unparsed
        pl.when(~is_dict & text.str.contains(r"\{" + HF_KEYS_RE)).then(text).alias("broken"),
        pl.when(is_dict).then(text.str.split("{'").list.first()).otherwise(text).alias("_pre_text"),
    )
    bars = lines.filter(text.str.contains(" [", literal=True) & text.str.contains("/", literal=True))
    bars = bars.join(cand.select("seg", "_pre_text"), on="seg", how="left").select(
        "seg",
        pl.coalesce("_pre_text", "text").str.extract_all(TQDM_RE).list.last().alias("_pre"),
        text.str.extract_all(TQDM_RE).list.last().alias("_all"),
    )
    segs = (
        lines.select("line", "seg", "prefix_rank")
        .join(cand.drop("_pre_text"), on="seg", how="left")
        .join(bars, on="seg", how="left")
        .sort("seg")
    )
    segs = segs.with_columns(
        *[
            pl.col(f"_{w}").str.extract(TQDM_RE, i).alias(f"_{w}{n}")
            for w in ("pre", "all")
            for i, n in ((1, "n"), (2, "m"))
        ]
    ).with_columns(*[step_int(pl.col(c)).alias(c) for c in ("_pren", "_prem", "_alln", "_allm")])
    # totals of the training bar: the bar total last seen before each loss-carrying dict
    segs = segs.with_columns(pl.coalesce(pl.col("_prem"), pl.col("_allm").shift(1).forward_fill()).alias("_before"))
    totals = segs.filter(pl.col("dict").fill_null("").str.contains("'loss':")).get_column("_before").drop_nulls()
    if totals.len() == 0:  # no loss dict yet: any bar counts
        totals = segs.get_column("_allm").drop_nulls()
    train_m = totals.unique().implode()
    in_train = {w: pl.col(f"_{w}m").is_in(train_m) for w in ("pre", "all")}
    pre_n = pl.when(in_train["pre"]).then(pl.col("_pren"))
    all_n = pl.when(in_train["all"]).then(pl.col("_alln"))
    # a bar printed before the previous loss dict is not this loss dict's counter (a data-loading bar
    # `7/7` followed by nine dicts and no training bar must not make them one record)
    seg = pl.col("seg")
    bar_seg = pl.when(all_n.is_not_null()).then(seg).shift(1).forward_fill()
    loss_dict = pl.col("dict").fill_null("").str.contains("'loss':")
    prev_dict_seg = pl.when(loss_dict).then(seg).shift(1).forward_fill()
    fresh = ~loss_dict | prev_dict_seg.is_null() | (bar_seg > prev_dict_seg)  # an eval dict takes the last train step
    step = pl.coalesce(pre_n, pl.when(fresh).then(all_n.shift(1).forward_fill()))
    return segs.select("line", "seg", "prefix_rank", "dict", "broken", all_n.alias("counter"), step.alias("step"))


def _metrics(objects: pl.DataFrame, dicts: pl.DataFrame, source: str, result: ParseResult) -> pl.DataFrame:
    cols = [c for c in objects.columns if c != "line"]
    frame = objects.rename({"line": "seg"}).join(dicts.select("seg", "line", "step", "prefix_rank"), on="seg")
    out_of_range = (pl.col("step") == STEP_OUT_OF_RANGE).fill_null(False)
    bad = frame.filter(out_of_range)
    if bad.height:  # a tqdm counter no run reaches: that dict is an unparsed line, not a failed file
        T.unparsed(result, bad.select("line", pl.lit("step counter out of range").alias("text")))
        frame = frame.filter(~out_of_range)
    # ms-swift prints its dicts through the HF logger with its own progress string,
    # `'global_step/max_steps': '5/2169'`: N is the step, ahead of any tqdm counter
    progress = [c for c in cols if normalise_name(c) == "global_step_max_steps"]
    if progress:
        done = pl.col(progress[0]).cast(pl.String).str.extract(r"^\s*(\d+)\s*/", 1).cast(pl.Float64, strict=False)
        frame = frame.with_columns(pl.coalesce(step_int(done), pl.col("step")).alias("step"))
    frame = _epoch_counted(frame, cols)
    wide = frame.select(
        pl.col("seg").alias("line"), "step", "prefix_rank", *[T.numeric(frame, c).alias(c) for c in cols]
    )
    cols = T.drop_empty_columns(wide, cols)
    wide = wide.with_columns(T.classify_rows(wide, cols).alias("record_kind")).filter(
        pl.col("record_kind").is_not_null()
    )
    wide, names = T.canonical_wide(wide, cols, ["line", "step", "prefix_rank"])
    metrics = records_to_metrics(wide, source, names)
    result.records += metrics.get_column("line").n_unique()
    _note_nan_masking(wide, result)
    # segment ordinal -> physical line
    back = frame.select(pl.col("seg").alias("line"), pl.col("line").alias("_phys"))
    metrics = metrics.join(back, on="line", how="left").with_columns(pl.col("_phys").alias("line")).drop("_phys")
    return schema.conform("metrics", metrics)


def _epoch_counted(frame: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    """A loop's own per-epoch dicts in the Trainer's style (`{'Epoch': 1, 'loss': 3.18, 'valid_loss': 2.46}`) with no
    progress bar to count them: an epoch key that is a whole number on every loss dict, rising, is the step. The
    Trainer's own `'epoch': 0.53` is a fraction of the epoch, no counter."""
    epoch = next((c for c in cols if normalise_name(c) == "epoch"), None)
    if epoch is None or "loss" not in cols or frame.get_column("step").drop_nulls().len():
        return frame
    loss_dicts = frame.filter(pl.col("loss").is_not_null())
    values = loss_dicts.select(T.numeric(loss_dicts, epoch)).to_series().drop_nulls()
    if values.len() < 2 or not (values == values.round(0)).all() or not (values.diff().drop_nulls() > 0).all():
        return frame
    return frame.with_columns(step_int(T.numeric(frame, epoch)).alias("step"))


def _note_nan_masking(wide: pl.DataFrame, result: ParseResult) -> None:
    if not {"loss", "grad_norm"} <= set(wide.columns):
        return
    masked = wide.filter(
        (pl.col("record_kind") == "train") & (pl.col("loss") == 0.0) & ~pl.col("grad_norm").is_finite()
    ).height
    if masked:
        result.notes.append(
            f"{masked} step record(s) print loss 0.0 with a non-finite grad_norm: the HF Trainer masks a "
            "NaN loss (or every label was masked); loss kept as printed"
        )


def _events(lines: pl.DataFrame, segs: pl.DataFrame) -> pl.DataFrame | None:
    """Events of any stdout, with steps from the tqdm counters (guarded import)."""
    try:
        from spikeforensics.ingest.base import attach_steps
        from spikeforensics.ingest.text_events import extract_events
    except ImportError:  # the shared event extractor is not available in this build
        return None
    # order inside a segment: a bar is printed before the message glued after it, so
    # counters sit at 2*seg and event text at 2*seg + 1
    ev_lines = lines.select((pl.col("seg") * 2 + 1).alias("line"), "text", "prefix_rank")
    events = extract_events(ev_lines)
    if events.height == 0:
        return None
    counters = segs.filter(pl.col("counter").is_not_null() & (pl.col("counter") != STEP_OUT_OF_RANGE)).select(
        (pl.col("seg") * 2).alias("line"),
        pl.col("counter").alias("step"),
        "prefix_rank",
        pl.lit("train").alias("record_kind"),
    )
    events = attach_steps(events, counters, mode="done")
    back = lines.select((pl.col("seg") * 2 + 1).alias("line"), pl.col("line").alias("_phys"))
    events = events.join(back, on="line", how="left").with_columns(pl.col("_phys").alias("line")).drop("_phys")
    return schema.conform("events", events)
