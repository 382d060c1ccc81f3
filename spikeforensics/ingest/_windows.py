"""Reading a big text log in windows, for the grammars that parse a whole file at once.

Megatron's and HF Trainer's grammars stream (`parse_chunks`, numbering carried from chunk to
chunk). The other ~60 line grammars take the whole file's lines in one frame and use about
ten times the file's size in memory; a log of a few hundred MB (a long run with a record per
step, or a console saved with its redraws) would need gigabytes. A file of at least
`WINDOW_MIN_BYTES` read by such a grammar is therefore cut into windows of `WINDOW_BYTES` at
line ends, and the grammar parses each window as a file of its own (through
`SourceFile.only_lines`, as the mix offers lines to a second grammar), so memory stays flat in
the file's length.

Each window is parsed with context in front of it: the file's first `HEAD_LINES` lines (a
grammar's header: column names, a config block it reads the schedule from) and the
`OVERLAP_LINES` lines just before the window (an epoch header, the first lines of a record
the window cuts). Rows read from the context lines are dropped (they belong to the window
before), so each line is read into the store once. Then the window's numbering is carried on
from the window before, per stream (prefix rank), as `base.number_records` does inside a
file: `record` goes on from the last record (a record cut by the window edge, the same step
on both sides, stays one record), and `attempt` goes up where the step goes back across the
edge.

What a window cannot see: a grammar's state older than the overlap (a header printed once,
thousands of lines before, that is not in the file's head), and a multi-line record longer
than the overlap. Both cost at most the records at the window's edge; measured on the
real-log corpus with tiny windows in `tests/test_ingest_windows.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType

import polars as pl

from spikeforensics.ingest._mixing import is_line_grammar, mix
from spikeforensics.ingest.base import ParseResult, SourceFile, prepare

# A file at least this big is read in windows by a grammar that has no `parse_chunks`: below it, a whole read
# peaks at 10-20x the file (a 15.4 MB generic_steps log of fuzz seed 19: 307 MB) and the grammar sees every line
# at once. (The largest real log of the corpus is 3.8 MB.)
WINDOW_MIN_BYTES = 8 << 20
# The bytes of one window (cut at a line end): ~50k lines of a typical log. A 52 MB generic_steps log (fuzz seed 18's
# input 525): 8 MiB windows 359 MB / 68 s, 4 MiB 301 MB / 56 s (the window and the one being written in flight).
WINDOW_BYTES = 4 << 20
# Context given with every window: the file's first lines, and the lines just before the window.
HEAD_LINES = 200
OVERLAP_LINES = 200
# ... each cut to this many characters: context gives a grammar its state (headers), its own rows are dropped, and a
# file of megabyte lines would otherwise parse every window's bytes three times
CONTEXT_LINE_CHARS = 1 << 16
# Text formats that are not line grammars but read text lines, and so can be windowed.
WINDOWED_TEXT_FORMATS = frozenset({"kernel", "stdout_events"})
# A line grammar that parses the file as one document (a JSON document): never windowed.
DOCUMENT_FORMATS = frozenset({"json_doc"})
# The note a grammar writes about its unparsed lines (the driver writes one for the whole file).
_UNPARSED_NOTE = r"^\d+ record-like line\(s\) could not be parsed$"


def windowed(parser: ModuleType, size: int) -> bool:
    """Whether a file of `size` bytes read by `parser` is read in windows."""
    name = parser.NAME
    if hasattr(parser, "parse_chunks") or name in DOCUMENT_FORMATS:
        return False
    return size >= WINDOW_MIN_BYTES and (is_line_grammar(name) or name in WINDOWED_TEXT_FORMATS)


@dataclass
class _Carry:
    """Numbering carried from one window to the next, per stream (the prefix rank, -1 for none)."""

    next_record: int = 0
    last: dict[int, tuple[int | None, int, int]] = field(default_factory=dict)  # stream -> (step, attempt, record)


def parse_windows(
    parser: ModuleType,
    src: SourceFile,
    grammars: dict[str, ModuleType] | None = None,
    read_by: list[str] | None = None,
    window_bytes: int | None = None,
) -> Iterator[ParseResult]:
    """One result per window of `src`, in file order, each holding only the rows of its own lines,
    numbered on from the window before. With `grammars`, each window's unread lines are offered
    to the other line grammars (the mix); the names of the grammars that read records are added
    to `read_by`, the primary first."""
    head: pl.DataFrame | None = None
    before = None  # the last OVERLAP_LINES prepared lines of the window before
    carry = _Carry()
    chosen: list[str] | None = None  # the grammars of the mix, once the first window chose them
    read_by = [] if read_by is None else read_by
    if parser.NAME not in read_by:
        read_by.append(parser.NAME)
    for chunk in src.iter_line_chunks(window_bytes or WINDOW_BYTES):
        if chunk.height == 0:
            continue
        first_line = chunk.item(0, "line")
        lines = prepare(chunk)
        overlap_first = before.get_column("line").min() if before is not None and before.height else None
        if head is None:
            head = lines.filter(pl.col("line") < first_line + HEAD_LINES)
            context = lines.head(0)
        else:
            context = _context(head, before)
        window = SourceFile(
            path=src.path, name=src.name, year=src.year, only_lines=pl.concat([context, lines]), window=True
        )
        result = parser.parse(window)
        if grammars is not None:
            # the grammars that join the mix are chosen on the first window (as the driver's wide sniff sees a
            # file's first 8 MB), then given every later window's rest lines: a sniff per window would pick
            # whatever grammar a window's few leftover lines suit
            result, names = mix(parser.NAME, window, result, grammars, chosen=chosen)
            chosen = names[1:] if chosen is None else chosen
            read_by.extend(n for n in names if n not in read_by)
        yield _own_rows(result, first_line, overlap_first, carry)
        before = lines.tail(OVERLAP_LINES)


def _context(head: pl.DataFrame, before: pl.DataFrame) -> pl.DataFrame:
    """The lines a window is parsed after: the file's head, then the lines just before the window, each
    cut to CONTEXT_LINE_CHARS. The head's lines are numbered as if they came right before the others (a
    grammar that ends a table at a gap of lines, or joins a record's lines by adjacency, sees no gap);
    every context line is numbered below the window's first line, so none of its rows is kept."""
    first = before.get_column("line").min() if before.height else None
    if first is None:
        context = head
    else:
        head = head.filter(pl.col("line") < first)
        n = head.get_column("line").n_unique()
        renumber = (pl.col("line").rank("dense") - 1 - n + first).cast(pl.Int64)
        context = pl.concat([head.with_columns(renumber.alias("line")), before])
    return context.with_columns(pl.col("text").str.slice(0, CONTEXT_LINE_CHARS))


def _own_rows(result: ParseResult, first_line: int, overlap_first: int | None, carry: _Carry) -> ParseResult:
    """`result` without the rows read from the context lines (before `first_line`; the overlap from
    `overlap_first`), renumbered on from `carry`. Rows without a line are kept from the first window only."""
    mine = pl.col("line") >= first_line
    if first_line == 1:
        mine = mine | pl.col("line").is_null()
    mine = mine.fill_null(False)
    metrics = result.tables.get("metrics")
    offsets = _offsets(metrics, first_line, overlap_first, carry) if metrics is not None else None
    for table, frame in list(result.tables.items()):
        if "line" not in frame.columns:
            continue
        if table == "metrics" and result.record_lines is None:  # (else counted below, exactly)
            dropped = frame.filter(~mine).get_column("line").drop_nulls().n_unique()
            result.records = max(0, result.records - dropped)
        frame = frame.filter(mine)
        if offsets is not None and table in ("metrics", "events") and frame.height and "attempt" in frame.columns:
            frame = _shift(frame, offsets)
        result.tables[table] = frame
    if result.record_lines is not None:
        result.record_lines = result.record_lines.filter(result.record_lines >= first_line)
        result.records = result.record_lines.len()
    if result.unparsed_lines is not None:
        result.unparsed_lines = result.unparsed_lines.filter(result.unparsed_lines >= first_line)
        result.unparsed = result.unparsed_lines.len()
    result.unparsed_examples = [(line, text) for line, text in result.unparsed_examples if line >= first_line]
    result.notes = [n for n in result.notes if not re.match(_UNPARSED_NOTE, n)]
    return result


def _stream(frame: pl.DataFrame) -> pl.Expr:
    if "rank" not in frame.columns:
        return pl.lit(-1, dtype=pl.Int32)
    return pl.col("rank").cast(pl.Int32).fill_null(-1)


def _offsets(
    metrics: pl.DataFrame, first_line: int, overlap_first: int | None, carry: _Carry
) -> tuple[pl.DataFrame, int] | None:
    """What carries this window's numbering on from the window before: per stream, the amount added to
    `attempt` (`stream`, `d_attempt`), and the amount added to `record`; `carry` moves on to this
    window's end. The grammar numbered the overlap's records too: its last one is the window before's
    last record (the same lines), so the numbering is anchored there. A stream with no record in the
    overlap goes on from the window before's last step: a step that went back is a new attempt."""
    if metrics.height == 0 or "record" not in metrics.columns:
        return None
    train = metrics.filter(pl.col("record").is_not_null()).with_columns(_stream(metrics).alias("stream")).sort("record")
    if train.height == 0:
        return None
    own = train.filter(pl.col("line") >= first_line)
    overlap = (
        train.filter(pl.col("line").is_between(overlap_first, first_line - 1))
        if overlap_first is not None
        else train.head(0)
    )
    if overlap.height and carry.next_record:
        d_record = carry.next_record - 1 - overlap.get_column("record").max()
    elif own.height:
        d_record = carry.next_record - own.get_column("record").min()
    else:
        return None
    anchors = {r[0]: r[1:] for r in overlap.group_by("stream").agg(pl.col("attempt").last()).iter_rows()}
    firsts = own.group_by("stream", maintain_order=True).agg(pl.col("step").first(), pl.col("attempt").first())
    d_attempts = {}
    for stream, step, attempt in firsts.iter_rows():
        seen = carry.last.get(stream)
        if stream in anchors and seen is not None:
            d_attempts[stream] = seen[1] - (anchors[stream][0] or 0)
        elif seen is not None:
            went_back = step is not None and seen[0] is not None and step < seen[0]
            d_attempts[stream] = seen[1] + int(went_back) - (attempt or 0)
        else:
            d_attempts[stream] = -(attempt or 0)
    for stream, (attempt,) in anchors.items():  # a stream whose records all fell in the overlap (its events follow)
        if stream not in d_attempts and stream in carry.last:
            d_attempts[stream] = carry.last[stream][1] - (attempt or 0)
    if own.height:
        lasts = own.group_by("stream").agg(pl.col("step").last(), pl.col("attempt").last(), pl.col("record").last())
        for stream, step, attempt, record in lasts.iter_rows():
            carry.last[stream] = (step, (attempt or 0) + d_attempts[stream], record + d_record)
        carry.next_record = own.get_column("record").max() + d_record + 1
    frame = pl.DataFrame(
        {"stream": list(d_attempts), "d_attempt": list(d_attempts.values())},
        schema={"stream": pl.Int32, "d_attempt": pl.Int32},
    )
    return frame, d_record


def _shift(frame: pl.DataFrame, offsets: tuple[pl.DataFrame, int]) -> pl.DataFrame:
    """`frame` with `attempt` shifted by its stream's amount (a row of a stream without train
    records, an eval line printed without a rank, takes the first stream's) and `record` by the
    window's."""
    by_stream, d_record = offsets
    default = by_stream.item(0, "d_attempt") if by_stream.height else 0
    shifted = frame.with_columns(_stream(frame).alias("_stream")).join(
        by_stream.rename({"stream": "_stream"}), on="_stream", how="left", maintain_order="left"
    )
    shifted = shifted.with_columns((pl.col("attempt") + pl.col("d_attempt").fill_null(default)).cast(pl.Int32))
    if "record" in frame.columns:
        shifted = shifted.with_columns(pl.col("record") + d_record)
    return shifted.drop("_stream", "d_attempt")
