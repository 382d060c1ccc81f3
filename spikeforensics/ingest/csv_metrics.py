"""Metric tables in CSV: Lightning `CSVLogger` `metrics.csv`, W&B CSV exports, any step CSV.

- Lightning: sorted, sparse columns (`epoch`, `step`, `train_loss_step`,
  `train_loss_epoch`, `val_loss`, ...); a row with only `val*` values is an eval record,
  a row with only epoch aggregates (`*_epoch`, `epoch_time`) is a summary record. A
  resumed run writes a new `version_N/metrics.csv` whose first row is the resumed step.
- W&B export: `_step`, `_runtime`, `_timestamp` plus metric keys (`train/loss`, ...);
  the step is `train/global_step` when present (W&B's `_step` is its own counter).
- generic: a `step` (or `global_step`, `iteration`, `iter`) column and metric columns.
- per-epoch tables: an `epoch` column alone (Keras `CSVLogger`), or no counter at all but an elapsed-time
  column beside a loss (SchNetPack's `log.csv`: `Time,Learning rate,Train loss,...`): each row an epoch.

Empty cells are no value (no row); `nan`/`inf` are values.

Streaming: a file without a quote character is read in chunks of `CHUNK_BYTES`
(`parse_chunks`: each chunk read under the file's header, record numbering carried, the
last run of logger rows held back until the next chunk shows whether it goes on), so memory
does not grow with the file. A file with quotes is read whole: a quoted cell may span lines
(then rows are numbered, not lined) and an unbalanced quote is found by its row.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest import _tables as T
from spikeforensics.ingest.aliases import METRIC_ALIASES
from spikeforensics.ingest.base import (
    _META,
    ParseResult,
    RecordState,
    SniffSample,
    SourceFile,
    metrics_from_long,
    normalise_name,
    unpivot_values,
)
from spikeforensics.ingest.jsonl_metrics import IGNORE_KEYS, RANK_KEYS, TIME_KEYS, _norm, step_column

NAME = "csv_metrics"

# Bytes of the file parsed at once. A CSV of short numeric cells makes ~8 metric rows per 10 bytes (a 16 MB chunk of
# a Keras CSVLogger table: 1.3M rows, ~28 MB of memory per MB of chunk with the chunk before it and the one after
# it in flight: 616 MB for a 285 MB file); at 4 MB, 330 MB, as fast.
CHUNK_BYTES = 4 << 20
# Cells parsed at once (rows x the header's width): a 1.4 MB text log read as CSV under a fuzzed 500-name header was
# 42,935 rows of 500 cells, 776 MB (fuzz seed 18's input 978); in slices of 1M cells 240 MB (4M: 386 MB). A 4 MiB
# chunk of a 100-column export is ~500k cells: one slice.
MAX_CELLS = 1 << 20
QUOTE_SCAN_BYTES = 16 << 20  # block size of the scan for a quote character
# a CSV counted by `epoch` alone has several rows per epoch when at least this share of its consecutive rows
# repeat the epoch (a per-batch table repeats it on all but one row per epoch); a per-epoch table repeats it
# never, and an epoch going back (a run appended to the file) is a reset, not a repeat
APPENDED_RUN_REPEATS = 0.5


def sniff(sample: SniffSample) -> float:
    if T.file_kind(sample.path) != "csv":
        return 0.0
    cols = T.sample_columns(sample)
    if not cols or len(cols) < 2:
        return 0.0
    from spikeforensics.ingest import batches, layers, telemetry

    if layers.looks_like_layers(cols) or layers.looks_like_global_grads(cols) or batches.looks_like_batches(cols):
        return 0.0
    # nvidia-smi query output: a query field with its unit (`memory.used [MiB]`, `utilization.gpu [%]`; a bracket
    # inside another name is no unit: a flow-matching loss per time bin, `train/se3_vf_loss t=[0.00,0.25)`)
    smi_field = [c for c in cols if "[" in c and re.fullmatch(telemetry.SMI_HEADER_FIELD, c)]
    if smi_field or any(normalise_name(c) in ("index", "pci_bus_id", "uuid") for c in cols):
        return 0.0
    if counter_columns(cols) is None and not row_counted(cols):
        return 0.0
    norm = [normalise_name(c) for c in cols]
    if step_column(cols) is None and not any(schema.is_loss_name(n) for n in norm):
        return 0.0  # an `epoch` column alone makes a training table only beside a loss
    known = [n for n in norm if _known_metric(n)]
    return 0.85 if known else 0.4


@dataclass
class _FileState:
    header: pl.DataFrame | None = None  # (line, text) of the header row
    records: RecordState = field(default_factory=RecordState)
    held: pl.DataFrame | None = None  # the last run of logger rows, not yet merged
    names: dict[str, None] = field(default_factory=dict)
    # a file counting batches inside epochs (no step column): its first epoch and batches per epoch
    # a CSV counted by `epoch` alone: several rows per epoch (True: steps are the row count), None: undecided
    rows_per_epoch: bool | None = None
    rows_seen: int = 0  # rows of such a file numbered so far (across chunks)
    # the columns the last training row filled (None: no training row yet), for a blank row after a chunk cut
    train_filled: dict[str, bool] | None = None


def has_quotes(path: Path) -> bool:
    with open(path, "rb") as fh:
        while block := fh.read(QUOTE_SCAN_BYTES):
            if b'"' in block:
                return True
    return False


def parse_chunks(src: SourceFile, chunk_bytes: int | None = None) -> Iterator[ParseResult]:
    """One ParseResult per chunk (metrics with `rank` = prefix rank: the driver applies the
    one-rank rule after the last chunk); a file with quotes is read whole, then cut between rows like the others."""
    state = _FileState()
    if src.only_lines is not None or has_quotes(src.path):
        # a quoted cell may hold line breaks: the file is read as one run of lines, cut only between rows
        chunks = _bounded(iter([src.lines()]), quoted=True)
    else:
        chunks = _bounded(src.iter_line_chunks(chunk_bytes or CHUNK_BYTES))
    for lines in chunks:
        result = ParseResult()
        result.add("metrics", _chunk_metrics(lines, src, result, state, last=False))
        yield result
    result = ParseResult()
    result.add("metrics", _chunk_metrics(None, src, result, state, last=True))
    yield result


def _bounded(chunks: Iterator[pl.DataFrame], quoted: bool = False) -> Iterator[pl.DataFrame]:
    """The chunks of lines, each cut into slices of at most MAX_CELLS // (the header's width) rows: a row is read
    padded to the header's width, so a wide header over short rows (a log whose first line is 500 names) costs
    rows x width cells however few bytes the rows hold. `quoted`: a cut only before a line that starts outside
    a quoted cell (an even count of quote characters before it), so a cell holding line breaks stays whole."""
    width = None
    for lines in chunks:
        if width is None:
            first = lines.filter(pl.col("text").str.strip_chars() != "").head(1)
            if first.height:
                width = first.item(0, "text").count(",") + 1
        rows = max(1, MAX_CELLS // (width or 1))
        # a CR inside a line is a row break to the CSV reader (a console's redraws): rows, not lines, are counted
        read_rows = (pl.col("text").str.count_matches("\r", literal=True) + 1).cum_sum()
        if lines.select(read_rows.last()).item() <= rows:
            yield lines
            continue
        part_of = (read_rows - 1) // rows
        if quoted:  # a line inside a quoted cell stays in the part of the line that opened the cell
            quotes_before = pl.col("text").str.count_matches('"', literal=True).cum_sum().shift(1, fill_value=0)
            part_of = pl.when(quotes_before % 2 == 0).then(part_of).forward_fill()
        part = lines.with_columns(part_of.alias("_part"))
        yield from (p.drop("_part") for p in part.partition_by("_part", maintain_order=True))


def parse(src: SourceFile, chunk_bytes: int | None = None) -> ParseResult:
    """The whole file at once: the chunks of `parse_chunks` concatenated (tests, notebooks;
    `ingest` streams them instead)."""
    return T.whole_file(parse_chunks(src, chunk_bytes))


def _chunk_metrics(
    lines: pl.DataFrame | None, src: SourceFile, result: ParseResult, state: _FileState, last: bool
) -> pl.DataFrame | None:
    """Metrics rows of one chunk of lines (None with `last`: flush the held-back rows)."""
    wide = state.held
    state.held = None
    metric_cols: list[str] = list(state.names)
    if lines is not None:
        lines = lines.filter(pl.col("text").str.strip_chars() != "")
        if state.header is None:
            if lines.height == 0:
                return None
            state.header = lines.head(1)
        else:
            lines = pl.concat([state.header, lines])
        chunk = _chunk_wide(T.csv_from_lines(lines, result), src, result, state)
        if chunk is not None:
            fresh, metric_cols = chunk
            state.names.update(dict.fromkeys(metric_cols))
            wide = fresh if wide is None else pl.concat([wide, fresh], how="diagonal_relaxed")
    if wide is None or wide.height == 0:
        return None
    metric_cols = [c for c in state.names if c in wide.columns]
    if not last:  # the last run of rows may go on in the next chunk
        key = [pl.col("step"), pl.col("record_kind"), pl.col("prefix_rank")]
        new = pl.any_horizontal([k.ne_missing(k.shift(1)) for k in key]) | (pl.int_range(pl.len()) == 0)
        start = wide.select(pl.arg_where(new)).to_series()[-1]
        state.held, wide = wide.slice(start), wide.slice(0, start)
        if wide.height == 0:
            return None
    wide = _merge_logger_rows(wide, metric_cols)
    synthetic = wide.get_column("line").null_count() > 0
    if synthetic:  # quoted multi-line cells (a file read whole): keep file order with row numbers, report no line
        wide = wide.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("line"))
    wide, names = T.canonical_wide(wide, metric_cols, ["line", "step", "prefix_rank", "time"])
    values = unpivot_values(
        wide.select("line", *[pl.col(c).cast(pl.Float64, strict=False) for c in names if c in wide.columns])
    )
    records = wide.select([c for c in wide.columns if c in _META])
    # record by record (a file's chunks then concatenate in file order), metrics by name
    metrics = metrics_from_long(records, values, src.name, state.records, multi_rank=True).sort("line", "name")
    result.records += metrics.get_column("line").n_unique()
    if synthetic:
        metrics = metrics.with_columns(pl.lit(None, dtype=pl.Int64).alias("line"))
    return metrics


def counter_columns(cols: list[str]) -> str | None:
    """The step column of a CSV's header: a step column (`step_column`), else its `epoch` column (Keras'
    `CSVLogger` `epoch,loss,val_loss`, NequIP's `epoch, batch, loss, ...`: see `_epoch_steps`). None: no counter."""
    found = step_column(cols)
    if found is not None:
        return found
    if cols and cols[0].strip() in ("", "Unnamed: 0"):  # pandas' `to_csv` index (a history frame: its row number)
        return cols[0]
    return next((c for c in cols if _norm(c) == "epoch"), None)


# an elapsed-time column beside a loss, with no counter at all: a table written once per epoch (SchNetPack's
# `CSVHook`, `log.csv`: `Time,Learning rate,Train loss,Validation loss,MAE_...`), so each row is an epoch
ELAPSED_COLUMNS = ("time", "elapsed", "elapsed_time", "wall_time", "time_s")


def row_counted(cols: list[str]) -> bool:
    """A CSV with no step or epoch column whose rows are epochs: a loss column beside an elapsed-time column, or
    beside nothing but metric names (Keras' `history.history` written out as a table: AutoTrainer's `log.csv`,
    `val_loss,val_accuracy,loss,accuracy`). Its step is the row count, 1, 2, ... across the file."""
    norm = [_norm(c) for c in cols]
    if not any(schema.is_loss_name(n) for n in norm):
        return False
    # (a header of names, not a text line cut at its commas: `valid_evaluation: loss=1.83, acc=0.76`)
    names = all(re.fullmatch(r"[A-Za-z_][\w/ .-]*", c.strip()) for c in cols)
    return any(n in ELAPSED_COLUMNS for n in norm) or (names and all(_metric_name(n) for n in norm))


def _known_metric(norm: str) -> bool:
    """A (normalised) column name the alias table knows, directly or as a Lightning `*_step` stem."""
    return norm in METRIC_ALIASES or T.metric_target(norm, "train") in METRIC_ALIASES.values()


def _metric_name(norm: str) -> bool:
    """A column name that is a metric: known to the alias table, an evaluation's, or a quality metric's."""
    return _known_metric(norm) or T.is_eval_name(norm) or bool(re.search(T.QUALITY_METRIC, norm))


def _row_steps(frame: pl.DataFrame, state: _FileState) -> pl.Expr:
    first = state.rows_seen + 1
    state.rows_seen += frame.height
    return pl.int_range(first, first + frame.height, dtype=pl.Int64)


def _epoch_steps(frame: pl.DataFrame, epoch_col: str, state: _FileState) -> pl.Expr:
    """The step of a CSV counted by its `epoch` column alone. One row per epoch (the epochs of the file's first
    chunk strictly rising: Keras' `CSVLogger`, a per-epoch table): the epoch. Several rows per epoch (a per-batch
    table such as NequIP's `metrics_batch_train.csv`, with or without a batch column; one epoch of batches in a
    run that crashed in it): the run's row count, 1, 2, ... across the file (rows are batches in order), the
    epoch kept as a metric. Decided once, on the file's first chunk: several rows per epoch when at least
    APPENDED_RUN_REPEATS of consecutive rows repeat the epoch (a run appended to a per-epoch file starts again at
    its first epoch: a reset, kept as printed, a new attempt)."""
    epoch = T.numeric(frame, epoch_col)
    if state.rows_per_epoch is None:
        seen = frame.select(epoch.alias("e")).drop_nulls().get_column("e")
        # (an epoch going back now and then is a run appended to the file, Keras' `CSVLogger(append=True)`: its rows
        # are still one per epoch, a new attempt from the reset; several rows per epoch repeat the epoch row after row)
        steps = seen.diff().drop_nulls()
        state.rows_per_epoch = bool(steps.len()) and float((steps == 0).mean()) >= APPENDED_RUN_REPEATS
    if not state.rows_per_epoch:
        return epoch
    return _row_steps(frame, state)


def _chunk_wide(
    frame: pl.DataFrame, src: SourceFile, result: ParseResult, state: _FileState
) -> tuple[pl.DataFrame, list[str]] | None:
    """One row per record of a chunk read as CSV (bad steps counted as unparsed), and its metric columns."""
    cols = [c for c in frame.columns if c != "line"]
    step_col = counter_columns(cols)
    if step_col is None and not row_counted(cols):
        raise T.ingest_error(f"{src.path}: CSV without a step column (found: {T.shown_names(cols)})")
    if step_col is None:  # one row per epoch, counted (see `row_counted`)
        loss_col = next(c for c in cols if schema.is_loss_name(_norm(c)))
        frame = frame.filter(pl.col(loss_col).is_null() | (pl.col(loss_col) != loss_col))  # repeated headers
        frame = frame.with_columns(_row_steps(frame, state).alias("_counted"))
    else:
        frame = frame.filter(pl.col(step_col).is_null() | (pl.col(step_col) != step_col))  # repeated headers
    time_col = next((c for c in cols if c in TIME_KEYS), None)
    rank_col = next((c for c in cols if _norm(c) in RANK_KEYS), None)
    skip = {step_col, time_col, rank_col}
    metric_cols = [
        c
        for c in cols
        if c not in skip and not c.startswith("_") and _norm(c) not in IGNORE_KEYS and _norm(c) not in ("step",)
    ]
    # a column empty on every row of the chunk gives no value (a fuzzed or runaway header of thousands of names over
    # short rows), unless a blank row may owe it a NaN (`_blank_rows_as_nan`: filled on the last training row)
    carried = state.train_filled or {}
    metric_cols = [c for c in metric_cols if frame.get_column(c).null_count() < frame.height or carried.get(c)]
    if step_col is None:
        step = T.integer(frame, "_counted")
    elif _norm(step_col) == "epoch":
        # the epoch stays a metric (a record stands for an epoch, or a batch in it); a batch-in-epoch counter is none
        metric_cols = [c for c in metric_cols if _norm(c) not in ("batch", "batch_idx", "batch_index")] + [step_col]
        frame = frame.with_columns(_epoch_steps(frame, step_col, state).alias("_counted"))
        step = T.integer(frame, "_counted")
    else:
        step = T.integer(frame, step_col)
    wide = frame.select(
        "line",
        step.alias("step"),
        (T.integer(frame, rank_col).cast(pl.Int32) if rank_col else pl.lit(None, dtype=pl.Int32)).alias("prefix_rank"),
        (
            pl.from_epoch((T.numeric(frame, time_col) * 1e6).cast(pl.Int64, strict=False), time_unit="us")
            if time_col
            else pl.lit(None, dtype=schema.TIME)
        ).alias("time"),
        *[e.alias(c) for c, e in zip(metric_cols, T.numerics(frame, metric_cols))],
    )
    bad = wide.with_row_index("_i").filter(pl.col("step").is_null()).get_column("_i")
    if bad.len():
        raw = frame[bad.to_list()].select("line", *cols)
        # the text rebuilt for the shown examples only (a row of a header thousands of columns wide is that long)
        text = pl.concat_str([pl.col(c).fill_null("") for c in cols], separator=",")
        shown = raw.head(T.UNPARSED_EXAMPLES).select("line", text.alias("text"))
        rest = raw.slice(T.UNPARSED_EXAMPLES).select("line", pl.lit(None, pl.String).alias("text"))
        T.unparsed(result, pl.concat([shown, rest]))
    wide = wide.filter(pl.col("step").is_not_null())
    wide = _blank_rows_as_nan(
        wide.with_columns(T.classify_rows(wide, metric_cols).alias("record_kind")), metric_cols, state
    )
    wide = wide.filter(pl.col("record_kind").is_not_null())
    return (wide, metric_cols) if wide.height else None


def _blank_rows_as_nan(wide: pl.DataFrame, metric_cols: list[str], state: _FileState) -> pl.DataFrame:
    """A row that prints a step and no value at all, after training rows, is a training step whose values were
    NaN: pandas' `to_csv` writes NaN as an empty cell (AlgoPerf's `measurements.csv`: `80,inf,6.5e+27,...`, then
    `81,,,,` to the end of the run). It gets NaN in the columns the training row before it filled (carried across
    chunks in `state`)."""
    is_train = pl.col("record_kind").eq_missing("train")
    carried = state.train_filled or {}
    # per column: was it filled on the last training row before this one (forward-filled marker)
    marks = wide.select(
        pl.when(is_train)
        .then(pl.col(c).is_not_null())
        .otherwise(None)
        .forward_fill()
        .fill_null(carried.get(c, False))
        .alias(c)
        for c in metric_cols
    )
    last_train = wide.filter(is_train).tail(1)
    if last_train.height:
        state.train_filled = {c: last_train.item(0, c) is not None for c in metric_cols}
    blank = pl.col("record_kind").is_null()
    if not metric_cols or not wide.select(blank.any()).item():
        return wide
    nan = pl.lit(float("nan"), dtype=pl.Float64)
    after_train = (is_train.cum_sum() > 0) | pl.lit(bool(carried))
    return wide.with_columns(
        *[
            pl.when(blank & after_train & marks.get_column(c)).then(nan).otherwise(pl.col(c)).alias(c)
            for c in metric_cols
        ],
        pl.when(blank & after_train).then(pl.lit("train")).otherwise(pl.col("record_kind")).alias("record_kind"),
    )


def _merge_logger_rows(wide: pl.DataFrame, metric_cols: list[str]) -> pl.DataFrame:
    """Consecutive rows of one step and kind are one record, their values merged (first value of
    each column): Lightning's CSVLogger writes one row per `log` call, so a step's `lr-Adam` and its
    `train/loss` can sit on two rows (a stdout line printed twice keeps its first values, as here)."""
    key = [pl.col("step"), pl.col("record_kind"), pl.col("prefix_rank")]
    new = pl.any_horizontal([k.ne_missing(k.shift(1)) for k in key]) | (pl.int_range(pl.len()) == 0)
    grouped = wide.with_columns(new.cum_sum().alias("_run"))
    if grouped.get_column("_run").n_unique() == wide.height:
        return wide
    others = [c for c in wide.columns if c not in (*metric_cols, "_run")]
    return (
        grouped.group_by("_run", maintain_order=True)
        .agg(*[pl.col(c).first() for c in others], *[pl.col(c).drop_nulls().first() for c in metric_cols])
        .drop("_run")
        .select(wide.columns)
    )
