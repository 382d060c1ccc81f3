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

A file of at least `STREAM_MIN_BYTES` is read in chunks (`parse_chunks`), so memory does not
grow with the log, and gives the tables of a whole read: what a segment's step needs from the
lines before it is carried from chunk to chunk (`_Carry`: the last bar total, the last training
counter and its segment, the last loss dict's segment, the record and counter numbering), what
it needs from the whole file (the training bar's totals, whether any dict carries a training
signal) is read first in a quicker pass over the file (`_file_facts`), and events wait for the
lines they look forward to (`_event_window`). A smaller file is read whole, and the lines HF
does not read are offered to the other grammars (`_mixing`); a streamed file is not mixed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest import _tables as T
from spikeforensics.ingest._event_window import EventWindow
from spikeforensics.ingest._fields import normalise_name
from spikeforensics.ingest.base import (
    STEP_OUT_OF_RANGE,
    ParseResult,
    RecordState,
    SniffSample,
    SourceFile,
    number_records,
    prefetched,
    prepare,
    prepared_lines,
    records_to_metrics,
    step_int,
)

NAME = "hf_trainer"
# A file this big is streamed: a whole read peaks at ~10x the file (306 MB at 16 MB, 678 MB at
# 64 MB, past 10 GB at 2.57 GB: seed 15's input 488 of the fuzz benchmark), so a whole read stays
# well under issue 14's 500 MB bound; a smaller file keeps its mixing with the other grammars.
STREAM_MIN_BYTES = 16 << 20
# Bytes read per chunk when streaming: ~120k lines of a tqdm-heavy log. Ingest of the 2.57 GB
# fuzz input peaks at 452 MB with 8 MiB (521 MB with 16 MiB, 671 MB with 32 MiB: the next chunk is
# prepared while one is parsed and the one before is written), under issue 14's 500 MB bound.
CHUNK_BYTES = 8 << 20

# a dict repr: `{'key': value, ...}` (no nested braces in what the Trainer prints)
DICT_RE = r"\{'[^{}']+':\s*[^{}]*\}"
# keys that make a dict an HF log record
HF_KEYS_RE = r"'(?:loss|learning_rate|grad_norm|eval_loss|train_runtime|train_loss|epoch)':"
# ... also under a W&B-style `train/` section (zett's JAX loop: `{'train/learning_rate': np.float32(...),
# 'train/loss': ...}`), unless the dict holds a held-out section too: that is an evaluation's summary (AlgoPerf's
# `{'train/loss': ..., 'validation/loss': ...}`), no training record
SECTION_KEYS_RE = r"'train/(?:loss|learning_rate|grad_norm)':"
HELDOUT_SECTION_RE = r"'(?:validation|valid|val|eval|test)/"
# tqdm counter `1318/36234 [11:37<...`
TQDM_RE = r"(\d+)/(\d+) \[(?:\d|\?)"
# a counter right before a loop's own dict (`Epoch 44: {`, `step 200 - {`, `Iter [3/10]: {`): its number
PREFIX_COUNTER_RE = r"(?i)\b(?:epoch|step|iter|iteration)\s*[:=#]?\s*\[?\s*(\d+)(?:\s*/\s*\d+)?\s*\]?\s*[:,|-]?\s*$"
# ... whose words name a held-out pass (`Val Epoch 1: {`, `Evaluation at step 200: {`)
PREFIX_EVAL_RE = r"(?i)\b(?:val|valid|validation|eval|evaluation|test|testing)\b"


def sniff(sample: SniffSample) -> float:
    hits = sum(1 for ln in sample.lines if "{'" in ln and _is_hf_dict(ln))
    if hits == 0:
        return 0.0
    return 0.95 if hits >= 2 or len(sample.lines) <= 5 else 0.8


def _is_hf_dict(line: str) -> bool:
    import re

    m = re.search(DICT_RE, line)
    if not m:
        return False
    found = m.group(0)
    return bool(
        re.search(HF_KEYS_RE, found) or (re.search(SECTION_KEYS_RE, found) and not re.search(HELDOUT_SECTION_RE, found))
    )


def _record_keys(found: pl.Expr) -> pl.Expr:
    """The dict text `found` holds the keys of a log record (`_is_hf_dict`, as an expression)."""
    section = found.str.contains(SECTION_KEYS_RE) & ~found.str.contains(HELDOUT_SECTION_RE)
    return found.str.contains(HF_KEYS_RE) | section


def to_json(expr: pl.Expr, texts: pl.Series | None = None) -> pl.Expr:
    """A Python dict repr as JSON text (strings quoted with `"`, None/True/False, wrappers). With `texts` (the
    values `expr` will be applied to), a rewrite whose marker none of them holds is left out, and without a `"` or a
    backslash in any, every `'` is a string's quote and a literal swap replaces the quoting regex (a chunk of
    58,000 Trainer dicts: 105 -> 17 ms)."""

    def has(marker: str) -> bool:
        return texts is None or bool(texts.str.contains(marker, literal=True).any())

    if has("**"):  # markdown bold of a pasted log: 'loss': **4.7581**
        expr = expr.str.replace_all(r"\*\*([^*]*)\*\*", "$1")
    if has("("):
        expr = expr.str.replace_all(r"(?:np\.)?(?:float|int|bfloat|half)\d*\(([^()]*)\)", "$1")
        expr = expr.str.replace_all(r"tensor\(([^(),]+)(?:,[^()]*)?\)", "$1")
    if has('"') or has("\\"):
        expr = expr.str.replace_all(r"'((?:[^'\\]|\\.)*)'", '"$1"')
    else:
        expr = expr.str.replace_all("'", '"', literal=True)
    for word, value in (("None", "null"), ("True", "true"), ("False", "false")):
        if has(word):
            expr = expr.str.replace_all(rf"([:\[,]\s*){word}\b", "${1}" + value)
    return expr


@dataclass
class _Carry:
    """What a chunk's segments need from the chunks before them (one whole read: nothing)."""

    segs: int = 0  # segments numbered so far
    total: int | None = None  # total M of the last tqdm counter (of any bar)
    counter: int | None = None  # N of the last training-bar counter ...
    counter_seg: int | None = None  # ... and its segment
    loss_seg: int | None = None  # segment of the last loss dict
    records: RecordState = field(default_factory=RecordState)  # numbering of the metrics' records
    counters: RecordState = field(default_factory=RecordState)  # numbering of the counters (events' attempts)
    masked: int = 0  # records with HF's masked NaN loss (the note)


@dataclass
class _Facts:
    """What a chunk needs from the whole file: the training bar's totals (`totals`) and whether
    any dict carries a training signal (`signal`, for `T.classify_rows`)."""

    totals: pl.Series
    signal: bool
    prefix_counted: bool = False  # the loss dicts are stepped by the counter before them (`_prefix_counted`)


def parse(src: SourceFile) -> ParseResult:
    """The whole file (or the lines a mix hands over) as one chunk."""
    carry = _Carry()
    result = _parse_chunk(prepared_lines(src), src.name, carry, None, EventWindow(), last=True)
    _note_nan_masking(carry.masked, result)
    return result


def parse_chunks(src: SourceFile, chunk_bytes: int = CHUNK_BYTES) -> Iterator[ParseResult]:
    """One ParseResult per chunk of the file (metrics with `rank` = prefix rank, as the ingest
    driver expects of a streaming parser), then one with the events held to the end and the notes."""
    facts = _file_facts(src, chunk_bytes)
    carry, window = _Carry(), EventWindow()
    for lines in prefetched(_prepared_chunks(src, chunk_bytes)):
        yield _parse_chunk(lines, src.name, carry, facts, window)
    out = ParseResult()
    _note_nan_masking(carry.masked, out)
    if window.lines is not None:
        out.add("events", _finish_events(window.feed(window.lines.clear(), window.records.clear(), last=True)))
    yield out


def _prepared_chunks(src: SourceFile, chunk_bytes: int) -> Iterator[pl.DataFrame]:
    """`prepared_lines` of the file, chunk by chunk."""
    return map(prepare, src.iter_line_chunks(chunk_bytes))


def _file_facts(src: SourceFile, chunk_bytes: int) -> _Facts:
    """The training bar's totals and whether a dict carries a training signal, over the whole
    file (read without `src.tap`: the driver hashes the reading pass)."""
    loss, every, keys, prefixed = [], [], [], []
    total = None
    for lines in prefetched(_prepared_chunks(dataclasses.replace(src, tap=None), chunk_bytes)):
        segs = _marked(lines.with_row_index("seg").with_columns(pl.col("seg").cast(pl.Int64)))
        found, total = _loss_totals(segs, total)
        loss.append(found.unique())
        every.append(segs.get_column("_allm").drop_nulls().unique())
        names = segs.select(pl.col("dict").str.extract_all(r"'[^']+':").explode().str.strip_chars("':").unique())
        keys.append(names.to_series().drop_nulls())
        prefixed.append(segs.filter(pl.col("dict").str.contains("'loss':")).select("prefix_step", "prefix_eval"))
    totals = pl.concat(loss).unique()
    bars = pl.concat(every)
    return _Facts(
        totals=totals if totals.len() else bars.unique(),
        signal=T.has_signal(pl.concat(keys).unique().to_list()),
        # (a file with no progress bar: its dicts have no tqdm step)
        prefix_counted=bars.len() == 0 and _counted_by_prefix(pl.concat(prefixed)),
    )


def _parse_chunk(
    lines: pl.DataFrame, source: str, carry: _Carry, facts: _Facts | None, window: EventWindow, last: bool = False
) -> ParseResult:
    """The tables of one chunk of prepared lines (`facts` None: the chunk is the whole file)."""
    result = ParseResult()
    lines = lines.with_row_index("seg", offset=carry.segs).with_columns(pl.col("seg").cast(pl.Int64))
    carry.segs += lines.height
    segs = segments_with_steps(lines, carry, None if facts is None else facts.totals)
    dicts = segs.filter(pl.col("dict").is_not_null())
    objects, bad = T.json_objects(
        dicts.select(pl.col("seg").alias("line"), to_json(pl.col("dict"), dicts.get_column("dict")).alias("text")),
    )
    if bad.height:
        phys = bad.join(dicts.select(pl.col("seg").alias("line"), pl.col("line").alias("_p"), "dict"), on="line")
        T.unparsed(result, phys.select(pl.col("_p").alias("line"), pl.col("dict").alias("text")))
    T.unparsed(result, segs.filter(pl.col("broken").is_not_null()).select("line", pl.col("broken").alias("text")))
    if objects.height:
        result.add("metrics", _metrics(objects, dicts, source, result, carry, facts))
    result.add("events", _events(lines, segs, carry, window, last))
    return result


def segments_with_steps(
    lines: pl.DataFrame, carry: _Carry | None = None, train_m: pl.Series | None = None
) -> pl.DataFrame:
    """Per segment: the HF dict (if any), the tqdm counter before it, and the step.

    Columns: line, seg, prefix_rank, dict, broken (text of a cut-short dict), counter (N of the last training-bar counter
    in the segment), step (the dict's step per CONTRACT.md). `carry` (updated) holds what the segments before
    `lines` left; `train_m` the training bar's totals (None: those of `lines`, a whole file)."""
    carry = carry if carry is not None else _Carry()
    segs = _marked(lines)
    totals, last_total = _loss_totals(segs, carry.total)
    if train_m is None:
        train_m = totals if totals.len() else segs.get_column("_allm").drop_nulls()  # no loss dict yet: any bar counts
    carry.total = last_total
    train_m = train_m.unique().implode()
    in_train = {w: pl.col(f"_{w}m").is_in(train_m) for w in ("pre", "all")}
    pre_n = pl.when(in_train["pre"]).then(pl.col("_pren"))
    all_n = pl.when(in_train["all"]).then(pl.col("_alln"))
    # a bar printed before the previous loss dict is not this loss dict's counter (a data-loading bar
    # `7/7` followed by nine dicts and no training bar must not make them one record)
    seg = pl.col("seg")
    bar_seg = pl.when(all_n.is_not_null()).then(seg).shift(1, fill_value=carry.counter_seg).forward_fill()
    loss_dict = pl.col("dict").fill_null("").str.contains("'loss':")
    prev_dict_seg = pl.when(loss_dict).then(seg).shift(1, fill_value=carry.loss_seg).forward_fill()
    fresh = ~loss_dict | prev_dict_seg.is_null() | (bar_seg > prev_dict_seg)  # an eval dict takes the last train step
    step = pl.coalesce(pre_n, pl.when(fresh).then(all_n.shift(1, fill_value=carry.counter).forward_fill()))
    out = segs.select(
        "line",
        "seg",
        "prefix_rank",
        "dict",
        "broken",
        all_n.alias("counter"),
        step.alias("step"),
        "prefix_step",
        "prefix_eval",
        loss_dict.alias("_loss"),
    )
    counters = out.filter(pl.col("counter").is_not_null())
    if counters.height:
        carry.counter, carry.counter_seg = counters.select(pl.col("counter", "seg").last()).row(0)
    losses = out.filter(pl.col("_loss"))
    if losses.height:
        carry.loss_seg = losses.get_column("seg")[-1]
    return out.drop("_loss")


def _marked(lines: pl.DataFrame) -> pl.DataFrame:
    """Per segment (`seg`, in order), no look at other segments: the HF dict (`dict`), a cut-short one
    (`broken`), and the tqdm counters (`N/M`) before the dict (`_pren`, `_prem`) and last in the segment
    (`_alln`, `_allm`)."""
    text = pl.col("text")
    # regexes run only on the few segments a cheap literal test keeps, each once (a captured
    # column, not an expression repeated in every branch that uses it)
    # (the whole match, group 0: a capture group would cost 2.5x as much on these long matches)
    cand = lines.filter(text.str.contains("{'", literal=True)).select(
        "seg", "text", text.str.extract(DICT_RE, 0).alias("_found")
    )
    # a dict that is the value of another dict's key (`{'train': {'log_interval': 200, 'learning_rate': 0.0001, ...}`,
    # a config dump) is no Trainer record: the Trainer prints flat dicts. What comes before the dict is the text
    # before its first literal occurrence (an earlier occurrence would have been the first match).
    before = pl.col("text").str.split(pl.col("_found")).list.first()
    # (a quoted key and its colon, or a brace: `Epoch 44: {'loss': ...}` is a counter's colon, not a key's)
    before = before.str.strip_chars_end()
    nested = before.str.tail(2).is_in(["':", '":']) | before.str.ends_with("{")
    cand = cand.with_columns(
        (pl.col("_found").is_not_null() & _record_keys(pl.col("_found")) & ~nested).alias("_is_dict")
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
    # a loop's own print of its dict after a counter (`Epoch 44: {'loss': 13.77}`, `Val Epoch 1: {'loss': ...}`)
    before_dict = pl.when(pl.col("dict").is_not_null()).then(pl.col("_pre_text"))
    cand = cand.with_columns(
        step_int(before_dict.str.extract(PREFIX_COUNTER_RE, 1).cast(pl.Float64, strict=False)).alias("prefix_step"),
        before_dict.str.contains(PREFIX_EVAL_RE).alias("prefix_eval"),
    )
    segs = (
        lines.select("line", "seg", "prefix_rank")
        .join(cand.drop("_pre_text"), on="seg", how="left")
        .join(bars, on="seg", how="left")
        .sort("seg")
    )
    # `_pre` / `_all` are TQDM_RE matches, `N/M [.`: cut at the slash and the space (no second regex pass)
    halves = {w: pl.col(f"_{w}").str.split_exact("/", 1) for w in ("pre", "all")}
    return segs.with_columns(
        *[halves[w].struct.field("field_0").alias(f"_{w}n") for w in halves],
        *[halves[w].struct.field("field_1").str.split(" ").list.first().alias(f"_{w}m") for w in halves],
    ).with_columns(*[step_int(pl.col(c)).alias(c) for c in ("_pren", "_prem", "_alln", "_allm")])


def _loss_totals(segs: pl.DataFrame, total: int | None) -> tuple[pl.Series, int | None]:
    """The totals of the bar last seen before each loss-carrying dict of `segs` (`_marked`; `total`:
    the last bar total before them), and the last bar total of `segs`."""
    before = pl.coalesce(pl.col("_prem"), pl.col("_allm").shift(1, fill_value=total).forward_fill())
    loss_dict = pl.col("dict").fill_null("").str.contains("'loss':")
    found = segs.select(pl.when(loss_dict).then(before)).to_series().drop_nulls()
    seen = segs.get_column("_allm").drop_nulls()
    return found, (seen[-1] if seen.len() else total)


def _metrics(
    objects: pl.DataFrame, dicts: pl.DataFrame, source: str, result: ParseResult, carry: _Carry, facts: _Facts | None
) -> pl.DataFrame:
    cols = [c for c in objects.columns if c != "line"]
    frame = objects.rename({"line": "seg"}).join(
        dicts.select("seg", "line", "step", "prefix_rank", "prefix_step", "prefix_eval"), on="seg"
    )
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
    frame = _dict_counted(frame, cols)
    frame, cols = _prefix_counted(frame, cols, None if facts is None else facts.prefix_counted)
    wide = frame.select(
        pl.col("seg").alias("line"), "step", "prefix_rank", *[T.numeric(frame, c).alias(c) for c in cols]
    )
    cols = T.drop_empty_columns(wide, cols)
    signal = None if facts is None else facts.signal
    wide = wide.with_columns(T.classify_rows(wide, cols, file_signal=signal).alias("record_kind")).filter(
        pl.col("record_kind").is_not_null()
    )
    wide, names = T.canonical_wide(wide, cols, ["line", "step", "prefix_rank"])
    # a streamed file keeps the prefix rank: the ingest driver applies the one-rank rule after the last chunk
    metrics = records_to_metrics(wide, source, names, carry.records, multi_rank=True if facts else None)
    result.records += metrics.get_column("line").n_unique()
    carry.masked += _nan_masked(wide)
    # segment ordinal -> physical line
    back = frame.select(pl.col("seg").alias("line"), pl.col("line").alias("_phys"))
    metrics = metrics.join(back, on="line", how="left").with_columns(pl.col("_phys").alias("line")).drop("_phys")
    return schema.conform("metrics", metrics)


# a counter the dicts carry themselves (TRL's PPO/RLOO trainers: `'episode': 100`; loops that log `'step': N`)
DICT_COUNTERS = ("global_step", "step", "episode", "iteration", "iter")


def _dict_counted(frame: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    """The dicts' own counter as the step of each dict that prints it as a whole number: a W&B capture of TRL's
    PPOTrainer kept the first progress bar (`1/500`) of 500 dicts `'episode': 1 .. 500`, and a bar counts its own
    updates while the dicts count theirs. Decided per dict, not per chunk, so a streamed file reads the same."""
    names = {normalise_name(c): c for c in cols}
    counter = next((names[n] for n in DICT_COUNTERS if n in names), None)
    if counter is None or frame.height == 0:
        return frame
    value = T.numeric(frame, counter)
    whole = value.is_not_null() & (value == value.round(0))
    return frame.with_columns(pl.when(whole).then(step_int(value)).otherwise(pl.col("step")).alias("step"))


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


def _counted_by_prefix(loss_dicts: pl.DataFrame) -> bool:
    """Every loss dict (`prefix_step`, `prefix_eval`) has a counter before it, rising over the training ones."""
    train = loss_dicts.filter(~pl.col("prefix_eval").fill_null(False)).get_column("prefix_step")
    return (
        loss_dicts.get_column("prefix_step").null_count() == 0
        and train.len() >= 2
        and bool((train.diff().drop_nulls() > 0).all())
    )


def _prefix_counted(
    frame: pl.DataFrame, cols: list[str], decided: bool | None = None
) -> tuple[pl.DataFrame, list[str]]:
    """A loop's own dicts printed after a counter (`Epoch 44: {'loss': 13.77}`, `Train Epoch 1: {...}` and
    `Val Epoch 1: {...}`) with no progress bar or step key to count them: the counter before the dict is the step
    when every loss dict has one, rising over the training dicts; a dict whose prefix names a validation, evaluation
    or test pass is an evaluation record (its keys take the `eval_` prefix). `decided`: the file's answer from the
    facts pass (a streamed chunk holds a part of the file's dicts), None: decided on `frame`, the whole file."""
    if frame.get_column("step").drop_nulls().len() or (decided is None and "loss" not in cols):
        return frame, cols
    counted = decided if decided is not None else _counted_by_prefix(frame.filter(pl.col("loss").is_not_null()))
    if not counted:
        return frame, cols
    frame = frame.with_columns(pl.col("prefix_step").alias("step"))
    held_out = pl.col("prefix_eval").fill_null(False)
    if not frame.select(held_out.any()).item():
        return frame, cols
    plain = [c for c in cols if not T.is_eval_name(c)]
    # (into an eval column the dicts already have, where it is empty)
    frame = frame.with_columns(
        *[
            pl.coalesce(
                *([pl.col(f"eval_{c}")] if f"eval_{c}" in cols else []), pl.when(held_out).then(pl.col(c))
            ).alias(f"eval_{c}")
            for c in plain
        ],
        *[pl.when(~held_out).then(pl.col(c)).alias(c) for c in plain],
    )
    return frame, cols + [f"eval_{c}" for c in plain if f"eval_{c}" not in cols]


def _nan_masked(wide: pl.DataFrame) -> int:
    """Train records that print loss 0.0 with a non-finite grad norm (HF's masked NaN loss)."""
    if not {"loss", "grad_norm"} <= set(wide.columns):
        return 0
    return wide.filter(
        (pl.col("record_kind") == "train") & (pl.col("loss") == 0.0) & ~pl.col("grad_norm").is_finite()
    ).height


def _note_nan_masking(masked: int, result: ParseResult) -> None:
    if masked:
        result.notes.append(
            f"{masked} step record(s) print loss 0.0 with a non-finite grad_norm: the HF Trainer masks a "
            "NaN loss (or every label was masked); loss kept as printed"
        )


def _events(
    lines: pl.DataFrame, segs: pl.DataFrame, carry: _Carry, window: EventWindow, last: bool
) -> pl.DataFrame | None:
    """Events of any stdout, with steps from the training-bar counters (`window`: the lines and
    counters held from the chunks before, for the events that look forward)."""
    # order inside a segment: a bar is printed before the message glued after it, so
    # counters sit at 2*seg and event text at 2*seg + 1
    ev_lines = lines.select((pl.col("seg") * 2 + 1).alias("line"), "text", "prefix_rank", pl.col("line").alias("_phys"))
    counters = segs.filter(pl.col("counter").is_not_null() & (pl.col("counter") != STEP_OUT_OF_RANGE)).select(
        (pl.col("seg") * 2).alias("line"),
        pl.col("counter").alias("step"),
        "prefix_rank",
        pl.lit("train").alias("record_kind"),
    )
    counters = number_records(counters, carry.counters)  # a redrawn counter is one record (its first drawing)
    return _finish_events(window.feed(ev_lines, counters, last))


def _finish_events(events: pl.DataFrame) -> pl.DataFrame | None:
    """Events from `EventWindow.feed` on their physical lines, in the events table's columns."""
    if events.height == 0:
        return None
    return schema.conform("events", events.with_columns(pl.col("_phys").alias("line")).drop("_phys"))
