"""Shared machinery for parsers: the file and result types, prepared lines, turning a
parser's wide per-record frame into the canonical long `metrics` table, attaching steps
to events, and assembling a text parser's result.

A parser module (one per format family) exposes:

    NAME: str                                   # format id, e.g. "megatron"
    def sniff(sample: SniffSample) -> float     # 0..1, how sure it is the file is this format
    def parse(src: SourceFile) -> ParseResult   # the tables it found

Everything per-line is done with polars expressions; no Python loop per line.

Line splitting and prefix stripping live in `_lines.py`, number parsing and the key/value
field splitters in `_fields.py`; both are re-exported here, where the parsers import them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest._fields import (  # noqa: F401 (re-exported: parsers import these from base)
    NUM_TOKEN,
    captured_values,
    find_pairs,
    json_safe,
    named_values,
    normalise_name,
    normalise_name_expr,
    parse_numbers,
    split_colon_fields,
    split_fields,
    to_float,
)
from spikeforensics.ingest._lines import (  # noqa: F401 (re-exported: parsers import these from base)
    ANSI_RE,
    CR_DECISION_BYTES,
    CR_HEAD_BYTES,
    PREFIX_RE,
    lines_from_bytes,
    lone_cr_endings,
    split_segments,
    strip_controls,
    strip_prefixes,
    to_lf,
)

SNIFF_LINES = 400


# Steps (and the other integer counters read from inputs: ranks, token counts, numel) are
# bounded by 2^53 - 1 (JavaScript's MAX_SAFE_INTEGER): every integer up to it is exact in a
# float64, so a step survives float columns, JSON and the report's charts unchanged, and a
# step read through a float (JSONL, CSV) that rounded past it is caught; no training run
# comes near it (10^6 steps a day for 25,000 years). A printed step beyond it (or one that
# does not fit Int64 at all) is not a step: its record is an unparsed line, never a failed file.
MAX_STEP = 2**53 - 1
# A physical line longer than this is cut to its first MAX_LINE_CHARS characters before the line
# grammars see it: no framework prints a record of 1 MiB (the longest real ones, HF dicts with many
# metrics or a one-line config dump, are a few tens of kB), and a grammar that splits a line into
# fields would otherwise hold a row per field (a 16 MB line of `|` made 16M fields, 1.3 GB).
MAX_LINE_BYTES = 1 << 20
MAX_LINE_CHARS = 1 << 20
# What `step_int` gives for a step that was printed but is out of range: `text_result`
# (and `drop_out_of_range_steps`, the driver's net for every table) turn such rows into
# unparsed lines. Never stored: every kept step is within +-MAX_STEP.
STEP_OUT_OF_RANGE = -(2**63)


def step_int(expr: pl.Expr) -> pl.Expr:
    """A captured step (digits as text, or a number) as Int64: null stays null, a value
    beyond +-`MAX_STEP` (or too big for Int64) becomes `STEP_OUT_OF_RANGE`."""
    value = expr.cast(pl.Int64, strict=False)
    bad = expr.is_not_null() & (value.is_null() | (value > MAX_STEP) | (value < -MAX_STEP))
    return pl.when(~bad).then(value).otherwise(pl.lit(STEP_OUT_OF_RANGE, dtype=pl.Int64))  # keeps expr's name


def bounded_int(expr: pl.Expr) -> pl.Expr:
    """An integer hint (a step named in an event's text) as Int64, null when out of range."""
    value = expr.cast(pl.Int64, strict=False)
    return pl.when((value <= MAX_STEP) & (value >= -MAX_STEP)).then(value)


@dataclass
class SniffSample:
    """The head of a file, as parsers see it when guessing the format."""

    path: Path
    text: str  # first ~64 KiB decoded with replacement, prefixes and ANSI kept
    lines: list[str]  # the same, split into lines (\n and \r), stripped of prefixes/ANSI

    @property
    def suffix(self) -> str:
        return self.path.suffix.lower()


@dataclass
class ParseResult:
    """What a parser found in one file. Frames may carry a subset of the table's columns."""

    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    records: int = 0  # training-step (and eval) records recognised
    unparsed: int = 0  # lines that looked like records but could not be parsed
    unparsed_examples: list[tuple[int, str]] = field(default_factory=list)  # (line, text)
    notes: list[str] = field(default_factory=list)  # warnings for the user
    # the unparsed lines' numbers, where the parser knows them (line grammars, through
    # `text_result`): lets the driver take back a line another grammar of the file reads
    unparsed_lines: pl.Series | None = None
    # the lines a multi-line record's body spans beyond the line its metrics are numbered by (Coqui's
    # `| > loss: 2.3` lines under a `--> STEP` header): read, so never offered to another grammar
    body_lines: pl.Series | None = None
    # the lines of the `records` counted, where the parser knows them (`text_result`): a window of a big file
    # counts the records of its own lines (`_windows.py`)
    record_lines: pl.Series | None = None

    def add(self, table: str, frame: pl.DataFrame | None) -> None:
        if frame is None or frame.height == 0:
            return
        if table in self.tables:
            self.tables[table] = pl.concat([self.tables[table], frame], how="diagonal_relaxed")
        else:
            self.tables[table] = frame

    @property
    def total_rows(self) -> int:
        return sum(f.height for f in self.tables.values())


@dataclass
class SourceFile:
    """A file being ingested: its path, the name it is stored under, and line access."""

    path: Path
    name: str  # `source` column value: the file name as ingested
    year: int | None = None  # for syslog times without a year
    # sees every block read through `read_bytes`/`iter_line_chunks`, in order (the driver
    # hashes and counts lines as the parser reads, so the file is read once)
    tap: Callable[[bytes], None] | None = field(default=None, repr=False, compare=False)
    # When set, the parser sees only these prepared lines (`line`, `text`, `prefix_rank`):
    # the driver hands a line grammar the lines no other grammar of the file claimed.
    only_lines: pl.DataFrame | None = field(default=None, repr=False, compare=False)
    # `only_lines` is a window of the whole file (`_windows.py`), not the lines other grammars left:
    # a grammar that decides on the whole file's lines decides on the window's
    window: bool = False
    # `prepared_lines` keeps what it computed, so the driver reuses it without re-reading
    _prepared: pl.DataFrame | None = field(default=None, repr=False, compare=False)

    def read_bytes(self) -> bytes:
        data = self.path.read_bytes()
        if self.tap:
            self.tap(data)
        return data

    def lines(self) -> pl.DataFrame:
        """All physical lines as (line: 1-based Int64, text: String), bad UTF-8 replaced."""
        if self.only_lines is not None:
            return self.only_lines.select("line", "text")
        return lines_from_bytes(self.read_bytes())

    def iter_line_chunks(self, chunk_bytes: int = 32 << 20) -> Iterator[pl.DataFrame]:
        """The same as `lines()`, in chunks cut at newlines, for files too big to hold twice.
        Whether the file breaks its lines at CRs is decided on its head (`lone_cr_endings`). A line
        longer than a chunk and than MAX_LINE_BYTES is held only as far as `prepare` keeps it."""
        offset = 0
        tail = b""
        held_cr = b""  # a CR file's block ending in CR: its LF may open the next block (one CRLF, one line end)
        skipping = False  # the line being read is past MAX_LINE_BYTES: its rest is dropped up to its end
        with open(self.path, "rb") as fh:
            cr_file = lone_cr_endings(fh.read(CR_HEAD_BYTES))
            fh.seek(0)
            while True:
                block = fh.read(chunk_bytes)
                if not block:
                    break
                if self.tap:
                    self.tap(block)
                if cr_file:
                    block, held_cr = held_cr + block, b""
                    if block.endswith(b"\r"):
                        block, held_cr = block[:-1], b"\r"
                    block = to_lf(block)
                if skipping:
                    end = block.find(b"\n")
                    if end < 0:
                        continue
                    block, skipping = block[end:], False
                block = tail + block
                cut = block.rfind(b"\n")
                if cut < 0:
                    tail = block
                    if len(tail) > MAX_LINE_BYTES:  # keep the head `prepare` cuts the line to, not the whole line
                        tail, skipping = tail[: MAX_LINE_BYTES + 1], True
                    continue
                tail = block[cut + 1 :]
                frame = lines_from_bytes(block[: cut + 1], first_line=offset + 1, lone_cr=False)
                offset += frame.height
                yield frame
        if held_cr:
            tail += b"\n"
        if tail:
            yield lines_from_bytes(tail, first_line=offset + 1, lone_cr=False)


def prepared_lines(src: SourceFile) -> pl.DataFrame:
    """lines() -> split on CR -> prefixes stripped: (line, text, prefix_rank); computed once
    per `SourceFile` (a restricted `SourceFile` returns its `only_lines` as they are)."""
    if src.only_lines is not None:
        return src.only_lines
    if src._prepared is None:
        src._prepared = prepare(src.lines())
    return src._prepared


def prepare(lines: pl.DataFrame) -> pl.DataFrame:
    """Physical lines (`line`, `text`; a whole file or a chunk of it) as `prepared_lines` gives them:
    cut to MAX_LINE_CHARS, split on CR, prefixes stripped."""
    if lines.height and lines.select(pl.col("text").str.len_bytes().max()).item() > MAX_LINE_BYTES:
        lines = lines.with_columns(pl.col("text").str.slice(0, MAX_LINE_CHARS))
    return strip_prefixes(split_segments(lines))


def prefetched(items: Iterator[pl.DataFrame]) -> Iterator[pl.DataFrame]:
    """The items of `items`, the next one made in a background thread while the current
    one is parsed (reading and splitting lines overlaps parsing)."""
    with ThreadPoolExecutor(max_workers=1) as reader:
        future = reader.submit(next, items, None)
        while (item := future.result()) is not None:
            future = reader.submit(next, items, None)
            yield item


# ---------------------------------------------------------------------------
# Times and event details


# `2023-04-28 06:51:29,903`, `2024-08-06T09:59:26.181`, `2023-03-22 09:30:39`
# a year of four digits not inside a longer number (`1000...0000-03-09` is no year 0), from year 1
TIME_ISO_RE = (
    r"(?:^|\D)((?:[1-9]\d{3}|0[1-9]\d{2}|00[1-9]\d|000[1-9])-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?)"
)
# `01/17/2024 13:47:27` (nanotron)
TIME_US_RE = r"(?:^|\D)(\d{2}/\d{2}/[1-9]\d{3} \d{2}:\d{2}:\d{2})"


def iso_time(expr: pl.Expr) -> pl.Expr:
    """`extract_time` of a string that is already one `TIME_ISO_RE` capture (the line is
    not searched again): the same value, parsed once."""
    iso = expr.str.replace(",", ".", literal=True).str.replace("T", " ", literal=True)
    return iso.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us").cast(schema.TIME)


def extract_time(expr: pl.Expr) -> pl.Expr:
    """The first wall-clock time with a year found in a line (null if none)."""
    iso = expr.str.extract(TIME_ISO_RE, 1).str.replace(",", ".").str.replace("T", " ")
    us = expr.str.extract(TIME_US_RE, 1)
    return pl.coalesce(
        iso.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us"),
        us.str.to_datetime("%m/%d/%Y %H:%M:%S", strict=False, time_unit="us"),
    ).cast(schema.TIME)


def detail_expr(
    ints: dict[str, pl.Expr] | None = None,
    floats: dict[str, pl.Expr] | None = None,
    strings: dict[str, pl.Expr] | None = None,
    bools: dict[str, pl.Expr] | None = None,
) -> pl.Expr:
    """A JSON object per row, built from expressions (the vectorised `detail_json`).

    Null fields are left out; non-finite floats are written as the strings
    "nan"/"inf"/"-inf"; keys are sorted, as `detail_json` does."""
    pieces: dict[str, pl.Expr] = {}
    for key, e in (ints or {}).items():
        pieces[key] = e.cast(pl.Int64, strict=False).cast(pl.String)
    for key, e in (floats or {}).items():
        f = e.cast(pl.Float64, strict=False)
        pieces[key] = (
            pl.when(f.is_nan())
            .then(pl.lit('"nan"'))
            .when(f == float("inf"))
            .then(pl.lit('"inf"'))
            .when(f == float("-inf"))
            .then(pl.lit('"-inf"'))
            .otherwise(f.cast(pl.String))
        )
    for key, e in (strings or {}).items():
        escaped = (
            e.cast(pl.String)
            .str.replace_all("\\", "\\\\", literal=True)
            .str.replace_all('"', '\\"', literal=True)
            .str.replace_all(r"[\x00-\x1f]", " ")
        )
        pieces[key] = pl.concat_str(pl.lit('"'), escaped, pl.lit('"'))
    for key, e in (bools or {}).items():
        pieces[key] = pl.when(e).then(pl.lit("true")).when(~e).then(pl.lit("false"))
    items = [pl.when(v.is_not_null()).then(pl.concat_str(pl.lit(f'"{k}": '), v)) for k, v in sorted(pieces.items())]
    if not items:
        return pl.lit("{}")
    return pl.concat_str(pl.lit("{"), pl.concat_list(items).list.drop_nulls().list.join(", "), pl.lit("}"))


# ---------------------------------------------------------------------------
# From per-record frames to the canonical long metrics table

_META = {"line", "step", "prefix_rank", "time", "record_kind", "record", "attempt", "rank"}


@dataclass
class RecordState:
    """What numbering needs to carry from one chunk of a source to the next (streaming
    parsers); a parser that handles a whole file at once never sees it."""

    records: int = 0  # train records numbered so far
    last_step: dict[int, int | None] = field(default_factory=dict)  # stream -> last step seen
    attempt: dict[int, int] = field(default_factory=dict)  # stream -> current attempt
    ranks: set[int] = field(default_factory=set)  # prefix ranks that printed train records


def _with_meta(frame: pl.DataFrame) -> pl.DataFrame:
    for col, dtype in (("step", pl.Int64), ("prefix_rank", pl.Int32), ("time", schema.TIME)):
        if col not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=dtype).alias(col))
    if "record_kind" not in frame.columns:
        frame = frame.with_columns(pl.lit("train").alias("record_kind"))
    return frame.with_columns(
        pl.col("step").cast(pl.Int64, strict=False), pl.col("prefix_rank").cast(pl.Int32, strict=False)
    )


def number_records(
    frame: pl.DataFrame, state: RecordState | None = None, merged: list[pl.DataFrame] | None = None
) -> pl.DataFrame:
    """Apply the contract's record rules to one row per record (`line`, `step`,
    `prefix_rank`, `record_kind`, ...); returns the kept rows with `record`, `attempt`.

    - consecutive train rows of one stream (same prefix rank) with the same step are one
      record, the first line's values (unless `step_approx` says the counter is rounded); with
      `merged` (a list), the frame (`line`, `_into`) of those later lines and the line of the record
      they belong to is appended to it, so a caller can keep the names the first line does not print;
    - `record` numbers train records 0.. in file order; eval/summary rows get null;
    - `attempt` goes up each time the step counter goes back within a stream; eval and
      summary rows take the attempt of the train record before them.
    `state` (updated in place) carries the numbering across chunks of one source.
    """
    state = state if state is not None else RecordState()
    # the attempt of the last train record before this chunk: eval and summary rows that open the chunk take it
    # (read before this chunk's records move it on)
    carried = max(state.attempt.values(), default=0)
    frame = _with_meta(frame).sort("line").with_columns(pl.col("prefix_rank").fill_null(-1).alias("_stream"))
    is_train = pl.col("record_kind") == "train"
    seed = pl.DataFrame(
        {
            "_stream": list(state.last_step),
            "_seed_step": list(state.last_step.values()),
            "_seed_attempt": [state.attempt.get(k, 0) for k in state.last_step],
        },
        schema={"_stream": pl.Int32, "_seed_step": pl.Int64, "_seed_attempt": pl.Int32},
    )
    train = frame.filter(is_train).join(seed, on="_stream", how="left", maintain_order="left")
    first = pl.int_range(pl.len()).over("_stream") == 0
    prev = pl.when(first).then(pl.col("_seed_step")).otherwise(pl.col("step").shift(1).over("_stream"))
    train = train.with_columns(prev.alias("_prev"))
    same = pl.col("step") == pl.col("_prev")
    if "step_approx" in train.columns:  # a rounded counter (`1K`) repeats without the record repeating
        same = same & ~pl.col("step_approx").fill_null(False)
    keep = pl.col("step").is_null() | pl.col("_prev").is_null() | ~same
    if merged is not None:
        into = train.select(
            "line",
            keep.alias("_keep"),
            pl.when(keep).then(pl.col("line")).forward_fill().over("_stream").alias("_into"),
        )
        into = into.filter(~pl.col("_keep") & pl.col("_into").is_not_null()).select("line", "_into")
        if into.height:
            merged.append(into)
    train = train.filter(keep)
    went_back = (pl.col("step") < pl.col("_prev")).fill_null(False).cast(pl.Int32)
    train = train.with_columns(
        (pl.int_range(pl.len(), dtype=pl.Int64) + state.records).alias("record"),
        (went_back.cum_sum().over("_stream") + pl.col("_seed_attempt").fill_null(0)).cast(pl.Int32).alias("attempt"),
    )
    if train.height:
        last = train.group_by("_stream").agg(pl.col("step").last(), pl.col("attempt").last())
        for stream, step, attempt in last.iter_rows():
            state.last_step[stream] = step
            state.attempt[stream] = attempt
        state.records += train.height
        state.ranks.update(train.get_column("prefix_rank").drop_nulls().unique().to_list())
    other = frame.filter(~is_train).with_columns(
        pl.lit(None, dtype=pl.Int64).alias("record"), pl.lit(None, dtype=pl.Int32).alias("attempt")
    )
    both = pl.concat([train.drop("_seed_step", "_seed_attempt", "_prev"), other], how="diagonal_relaxed").sort("line")
    return both.with_columns(pl.col("attempt").forward_fill().fill_null(carried)).drop("_stream")


def metrics_from_long(
    records: pl.DataFrame,
    values: pl.DataFrame,
    source: str,
    state: RecordState | None = None,
    multi_rank: bool | None = None,
    wide: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The `metrics` table from one row per record (`line`, `step`, `prefix_rank`, `time`,
    `record_kind`) and its values in long form (`line`, `name`, `value`; a name twice in
    one record keeps the first). `multi_rank` None decides from these records (keep the
    prefix rank only when several ranks print records); streaming parsers pass True and
    null the rank afterwards if the whole file turns out single-rank.

    `wide` (optional) holds more values one row per record: `line` plus one Float64 column
    per canonical metric name, in the order the record prints them (null: no value). Its
    records must not also have values in `values`. It goes to long form after the join
    with the (few) records, so the many value rows are never joined or deduplicated."""
    if records.height == 0:
        return schema.empty("metrics")
    if records.get_column("line").is_duplicated().any():
        # several records on one physical line (CR-separated segments: redraws, or a file mixing lone
        # CR and LF endings): the line keeps one record (its first; its values are the line's first
        # per name), never the product of the line's records and values (a 220 kB fuzz mutant with
        # 665 such records made 803,250 rows)
        records = records.unique("line", keep="first", maintain_order=True)
        if wide is not None and wide.height:
            wide = wide.unique("line", keep="first", maintain_order=True)
    merges: list[pl.DataFrame] = []
    kept = number_records(records, state, merges)
    if multi_rank is None:
        multi_rank = kept.filter(pl.col("record_kind") == "train").get_column("prefix_rank").drop_nulls().n_unique() > 1
    rank = pl.col("prefix_rank") if multi_rank else pl.lit(None, dtype=pl.Int32)
    kept = kept.select("line", "step", "record", "attempt", rank.cast(pl.Int32).alias("rank"), "time")
    vals = values.select("line", pl.col("name").cast(pl.String), pl.col("value").cast(pl.Float64, strict=False)).filter(
        pl.col("value").is_not_null()
    )
    if merges:
        # a later line of a record (the same step printed again) adds the names its first line does not print
        # (a DeepSpeed step line with the LR, then the trainer's own line with that step's loss); a name both
        # print keeps the first line's value (below)
        vals = (
            vals.with_row_index("_order")
            .join(pl.concat(merges), on="line", how="left")
            .with_columns(pl.coalesce("_into", "line").alias("line"))
            .sort("line", "_order")
            .drop("_into", "_order")
        )
    # a name twice in one record keeps the first: dedupe on an integer key (names are few)
    codes = {n: i for i, n in enumerate(vals.get_column("name").unique().to_list())}
    key = pl.col("line") * max(len(codes), 1) + pl.col("name").replace_strict(codes, return_dtype=pl.Int64)
    if vals.height:
        vals = vals.with_columns(key.alias("_key"))
        if vals.get_column("_key").n_unique() < vals.height:  # rare; the filter is the slow part
            vals = vals.filter(pl.col("_key").is_first_distinct())
        vals = vals.drop("_key")
    long = kept.join(vals, on="line", how="inner", maintain_order="right")
    if wide is not None and wide.height and wide.width > 1:
        names = [c for c in wide.columns if c != "line"]
        # unpivot (column by column, cheap) then a stable sort by line: record by record,
        # fields in the record's order, as the long values come
        from_wide = (
            kept.join(wide.cast({n: pl.Float64 for n in names}), on="line", how="inner", maintain_order="left")
            .unpivot(index=kept.columns, on=names, variable_name="name", value_name="value")
            .filter(pl.col("value").is_not_null())
            .sort("line", maintain_order=True)
        )
        long = pl.concat([long, from_wide]).sort("line", maintain_order=True) if long.height else from_wide
    return schema.conform("metrics", long.with_columns(pl.lit(source).alias("source")))


# A wide frame with more cells than this goes to long form column by column, keeping only the cells that hold a
# value: one JSON record of 500 keys among 5,000 records of 5 made 2.7M mostly-null rows (+200 MB).
SPARSE_CELLS = 1 << 20


def unpivot_values(wide: pl.DataFrame) -> pl.DataFrame:
    """(`line`, `name`, `value`) of every column of `wide` but `line`, as `unpivot` orders them. The long
    columns take private names first: a metric a log calls `value` or `name` (MLPerf's `"value": 5`, a
    JSONL record's `"name": ...`) would otherwise collide with them."""
    return wide.unpivot(index="line", variable_name="__sf_name", value_name="__sf_value").rename(
        {"__sf_name": "name", "__sf_value": "value"}
    )


def long_values(wide: pl.DataFrame, names: list[str]) -> pl.DataFrame:
    """(`line`, `name`, `value`) of the cells of `names` in `wide`, as Float64, column after column (the order of
    `unpivot`); null cells are dropped when the frame is big (`metrics_from_long` drops them anyway)."""
    if wide.height * len(names) <= SPARSE_CELLS:
        return unpivot_values(wide.select("line", *[pl.col(c).cast(pl.Float64, strict=False) for c in names]))
    parts = [
        wide.select("line", pl.lit(c).alias("name"), pl.col(c).cast(pl.Float64, strict=False).alias("value")).filter(
            pl.col("value").is_not_null()
        )
        for c in names
    ]
    return (
        pl.concat(parts)
        if parts
        else pl.DataFrame(schema={"line": wide.schema["line"], "name": pl.String, "value": pl.Float64})
    )


def records_to_metrics(
    wide: pl.DataFrame,
    source: str,
    value_columns: list[str] | None = None,
    state: RecordState | None = None,
    multi_rank: bool | None = None,
) -> pl.DataFrame:
    """Turn one row per record into the `metrics` table (one row per record x metric).

    `wide` has `line` and optionally `step` (Int64), `prefix_rank` (Int32), `time`,
    `record_kind` ("train" default, "eval", "summary"), plus one Float64 column per
    metric (canonical names). Record rules: see `number_records`. `rank` is the prefix
    rank only when more than one rank prints values in the source (`multi_rank`: see
    `metrics_from_long`); a metric a record
    does not carry produces no row (NaN does produce a row).
    """
    if wide.height == 0:
        return schema.empty("metrics")
    if value_columns is None:
        value_columns = [c for c in wide.columns if c not in _META]
    present = set(wide.columns)
    value_columns = [c for c in value_columns if c in present]
    values = long_values(wide, value_columns)
    records = wide.select([c for c in wide.columns if c in _META])
    return metrics_from_long(records, values, source, state, multi_rank)


# ---------------------------------------------------------------------------
# Events: attach a step and attempt

# Events that stand for one skipped optimizer step (fp16 overflow, hysteresis, llm.c
# z-score guard, Megatron bad grad norm).
SKIP_KIND = "skipped_step"
OVERFLOW_KINDS = ("overflow", "hysteresis", SKIP_KIND)


def attach_steps(events: pl.DataFrame, wide_records: pl.DataFrame, mode: str = "done") -> pl.DataFrame:
    """Give each event the step and attempt of the nearest preceding train record.

    `events` has `line` and optionally `step` (a step the event's own text names, e.g.
    `loading checkpoint ... at iteration N`; kept when present). `wide_records` has
    `line`, `step` and optionally `prefix_rank`, `record_kind`, `attempt`.

    `mode` says what the format's step counter means:
    - "done": the record for step N is printed after step N finished (Megatron,
      DeepSpeed, HF tqdm, nanoGPT, llm.c, torchtitan ...). An overflow/hysteresis/skip
      message after it belongs to a later step: the k-th such message after record N gets N + k
      (each message is one skipped step; the counters count skipped steps too).
    - "current": the step counter names the step in progress; events take it as is.
    A resume event takes the step and attempt of the first record after it (where
    training continues) unless its text names the step. Other events take the
    preceding record's step; events before any record keep a null step, attempt 0.
    """
    if events.height == 0:
        return events
    ev = events
    if "step" not in ev.columns:
        ev = ev.with_columns(pl.lit(None, dtype=pl.Int64).alias("step"))
    ev = ev.with_columns(bounded_int(pl.col("step")).alias("_hint"), pl.col("line").cast(pl.Int64))
    recs = _with_meta(wide_records) if wide_records.height else _with_meta(pl.DataFrame(schema={"line": pl.Int64}))
    recs = recs.filter((pl.col("record_kind") == "train") & pl.col("step").is_not_null())
    if "attempt" not in recs.columns:
        recs = number_records(recs, RecordState())
    recs = recs.select(
        pl.col("line").cast(pl.Int64).alias("_rline"),
        pl.col("step").alias("_rstep"),
        pl.col("attempt").cast(pl.Int32).alias("_rattempt"),
    ).sort("_rline")
    ev = ev.sort("line")
    back = ev.join_asof(recs, left_on="line", right_on="_rline", strategy="backward", allow_exact_matches=False)
    fwd = (
        ev.select("line")
        .with_row_index("_i")
        .join_asof(
            recs.rename({"_rline": "_nline", "_rstep": "_nstep", "_rattempt": "_nattempt"}),
            left_on="line",
            right_on="_nline",
            strategy="forward",
        )
    )
    out = pl.concat([back, fwd.drop("line", "_i")], how="horizontal")
    is_ovf = pl.col("kind").is_in(list(OVERFLOW_KINDS))
    nth = (pl.int_range(pl.len()).over(pl.col("_rline").fill_null(-1), is_ovf) + 1).cast(pl.Int64)
    bump = pl.when(is_ovf & (pl.lit(mode) == "done")).then(nth).otherwise(0)
    is_resume = pl.col("kind") == "resume"
    step = (
        pl.when(pl.col("_hint").is_not_null())
        .then(pl.col("_hint"))
        .when(is_resume)
        .then(pl.col("_nstep"))
        .otherwise(pl.col("_rstep") + bump)
    )
    attempt = pl.when(is_resume).then(pl.coalesce("_nattempt", "_rattempt")).otherwise(pl.col("_rattempt"))
    return out.with_columns(step.alias("step"), attempt.fill_null(0).cast(pl.Int32).alias("attempt")).drop(
        "_hint", "_rline", "_rstep", "_rattempt", "_nline", "_nstep", "_nattempt"
    )


def nan_detail(extra: str = "") -> pl.Expr:
    """A `nan` event's detail from a metrics-like frame's `name` and `value`; `extra` adds JSON fields
    (`', "repeated_step": true'`)."""
    return pl.concat_str(
        pl.lit('{"metric": "'),
        pl.col("name"),
        pl.lit('", "value": "'),
        pl.col("value").cast(pl.String).str.to_lowercase(),
        pl.lit('"' + extra + "}"),
    )


def nan_events(metrics: pl.DataFrame) -> pl.DataFrame:
    """`nan` events for step records whose loss or grad norm is non-finite."""
    bad = metrics.filter(
        pl.col("record").is_not_null() & pl.col("name").is_in(["loss", "grad_norm"]) & ~pl.col("value").is_finite()
    )
    if bad.height == 0:
        return schema.empty("events")
    detail = nan_detail()
    out = bad.group_by("source", "line", "step", "attempt", "rank", "time", maintain_order=True).agg(
        detail.first().alias("detail")
    )
    return schema.conform("events", out.with_columns(pl.lit("nan").alias("kind")))


def detail_json(**fields) -> str:
    """Serialise an event's `detail` object (non-finite floats as strings)."""

    def clean(v):
        if isinstance(v, float) and v != v:
            return "nan"
        if isinstance(v, float) and v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
        return v

    return json.dumps({k: clean(v) for k, v in fields.items() if v is not None}, sort_keys=True)


def text_result(
    source: str,
    lines: pl.DataFrame,
    records: pl.DataFrame,
    values: pl.DataFrame,
    unparsed: pl.DataFrame | None = None,
    mode: str = "done",
    extra_events: pl.DataFrame | None = None,
    max_examples: int = 5,
) -> ParseResult:
    """Assemble a text parser's result: metrics from records + long values, events
    from the shared text patterns (`text_events.extract_events`) with steps attached
    from the records (`attach_steps`, `mode`), unparsed count and examples."""
    from spikeforensics.ingest.text_events import extract_events

    out = ParseResult()
    if "step" in records.columns:
        out_of_range = pl.col("step") == STEP_OUT_OF_RANGE
        bad = records.filter(out_of_range.fill_null(False)).select("line")
        if bad.height:  # a step no run reaches: the line is unparsed, the rest of the file stays
            records = records.filter(~out_of_range.fill_null(False))
            bad = bad.join(lines.select("line", "text").unique("line"), on="line", how="left")
            unparsed = (
                bad if unparsed is None else pl.concat([unparsed.select("line", "text"), bad.select("line", "text")])
            )
    records = records.join(values.select("line").unique(), on="line", how="semi")
    metrics = metrics_from_long(records, values, source)
    out.add("metrics", metrics)
    out.records = records.height
    out.record_lines = records.get_column("line")
    recs = step_records(metrics)
    events = extract_events(lines.select("line", "text", "prefix_rank"))
    if extra_events is not None and extra_events.height:
        events = pl.concat([events, extra_events.select(events.columns).cast(events.schema)])
    if events.height:
        out.add("events", attach_steps(events, recs, mode=mode).sort("line"))
    if unparsed is not None and unparsed.height:
        unparsed = unparsed.select("line", "text").unique("line").sort("line")
        out.unparsed = unparsed.height
        out.unparsed_lines = unparsed.get_column("line")
        out.unparsed_examples = list(unparsed.head(max_examples).iter_rows())
        out.notes.append(f"{out.unparsed} record-like line(s) could not be parsed")
    return out


def step_records(metrics: pl.DataFrame) -> pl.DataFrame:
    """One row per record that has a step (train, eval, summary): `line`, `step`,
    `attempt` - what `attach_steps` needs. Eval lines count: a checkpoint saved right
    after an eval takes the eval's step."""
    return metrics.filter(pl.col("step").is_not_null()).select("line", "step", "attempt").unique("line").sort("line")


def sniff_share(sample: SniffSample, pattern: str) -> int:
    """How many of the sample's lines match `pattern` (sniffers' building block)."""
    if not sample.lines:
        return 0
    return int(pl.Series(sample.lines, dtype=pl.String).str.contains(pattern).sum())


def sniff_tiers(sample: SniffSample, tiers: list[tuple[str, float]]) -> float:
    """The confidence of the first (pattern, confidence) whose pattern some line matches, else 0:
    a format's sure signature first, its weaker variants after."""
    return next((conf for pattern, conf in tiers if sniff_share(sample, pattern)), 0.0)
