"""Ingest: files -> parsers (one module per format family) -> the run store.

Parser modules are discovered in this package: any module with `NAME`, `sniff` and
`parse` (see `base.py`). The format of a file is the parser whose `sniff` is most
confident on its head; `--format` forces one.

A parser of logs that can be huge may also expose `parse_chunks(src) -> Iterator[ParseResult]`:
one result per chunk of the file, in file order (numbering carried across chunks). The
driver then writes each chunk into the store's staging files as it comes (one Parquet row
group per chunk), so memory does not grow with the log (only for files of at least the
parser's `STREAM_MIN_BYTES`, if it sets one: a smaller file is read whole, and mixed). Such a parser leaves `rank` in
`metrics` as the prefix rank; the driver applies the contract's rule after the last chunk
(a source in which a single rank prints values is global: rank null). A big text log read by a
grammar without `parse_chunks` goes the same way in windows (`_windows.py`).

The file's SHA-256 and line count are taken from the blocks the parser reads
(`SourceFile.tap`), so a file is read once; it is hashed up front only when the run
already holds a source of the same size (then it may be unchanged: nothing to parse).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import pkgutil
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest import encoded
from spikeforensics.ingest._mixing import is_line_grammar, mix, record_like_sample, sniff_scores
from spikeforensics.ingest._windows import parse_windows, windowed
from spikeforensics.ingest.base import (
    CR_HEAD_BYTES,
    MAX_STEP,
    SNIFF_LINES,
    ParseResult,
    SniffSample,
    SourceFile,
    lines_from_bytes,
    lone_cr_endings,
    nan_events,
    split_segments,
    strip_prefixes,
)
from spikeforensics.store import SourceRecord, Staging, Store, StoreError, validate_run_id

PROGRESS_MIN_BYTES = 64 << 20  # files at least this big report progress per parsed chunk
PROGRESS_EVERY_S = 2.0  # ... at most this often
SNIFF_BYTES = 64 << 10
WIDE_SNIFF_BYTES = 8 << 20  # how far the second look goes when the head decides nothing
OUTCOME_EXAMPLES = 5  # unparsed lines shown to the user
MANIFEST_EXAMPLES = 20  # unparsed lines kept in the sources manifest
MIN_CONFIDENCE = 0.3
# what a person wrote about a run (the labelled sets' ground truth, the real-log corpus's facts):
# not run output, so a folder's copy is passed over (given by name it is still tried)
LABEL_FILES = frozenset({"ground_truth.json", "FACTS.toml"})
_NOT_PARSERS = {"base", "aliases", "encoded"}


class IngestError(Exception):
    """A file that cannot be used; the message is one line naming the file."""


@dataclass
class FileOutcome:
    path: str
    source: str
    status: str  # "ingested", "unchanged", "skipped", "failed"
    format: str | None = None
    rows: dict[str, int] = field(default_factory=dict)
    records: int = 0
    unparsed: int = 0
    unparsed_examples: list[tuple[int, str]] = field(default_factory=list)
    message: str = ""
    steps: tuple[int | None, int | None] = (None, None)
    ranks: list[int] = field(default_factory=list)
    events: dict[str, int] = field(default_factory=dict)


@dataclass
class IngestReport:
    run_id: str
    store: str
    files: list[FileOutcome]

    @property
    def ok(self) -> bool:
        return any(f.status in ("ingested", "unchanged") for f in self.files)

    def as_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "store": self.store,
            "files": [f.__dict__ | {"unparsed_examples": [list(x) for x in f.unparsed_examples]} for f in self.files],
        }


_PARSERS: dict[str, ModuleType] | None = None


def parsers() -> dict[str, ModuleType]:
    global _PARSERS
    if _PARSERS is None:
        found = {}
        for info in pkgutil.iter_modules(__path__):
            if info.name in _NOT_PARSERS or info.name.startswith("_"):
                continue
            mod = importlib.import_module(f"{__name__}.{info.name}")
            for sub in getattr(mod, "PARSERS", [mod]):
                if all(hasattr(sub, a) for a in ("NAME", "sniff", "parse")):
                    found[sub.NAME] = sub
        _PARSERS = dict(sorted(found.items()))
    return _PARSERS


def format_names() -> list[str]:
    return list(parsers())


def sniff_sample(path: Path) -> SniffSample:
    with open(path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    text = head.decode("utf-8", errors="replace")
    lines = strip_prefixes(split_segments(lines_from_bytes(head))).get_column("text").head(SNIFF_LINES).to_list()
    return SniffSample(path=path, text=text, lines=lines)


def detect_format(path: Path) -> tuple[str | None, float]:
    """The parser that sniffs most sure on the file's head; when none is sure enough on a
    text file (a log that opens with the script's source, a config dump or `nvidia-smi`
    output), the sniffers look again at the record-like lines of the first `WIDE_SNIFF_BYTES`."""
    sample = sniff_sample(path)
    binary = "\x00" in sample.text[:4096] and path.suffix.lower() not in (".npz", ".parquet")
    # binary: only parsers of binary formats get a say
    candidates = {n: p for n, p in parsers().items() if getattr(p, "BINARY", False)} if binary else parsers()
    best, score = _best_sniff(sample, candidates)
    if score < MIN_CONFIDENCE and not binary:
        wide = _wide_sample(path)
        if wide is not None:
            best, score = _best_sniff(wide, {n: p for n, p in candidates.items() if is_line_grammar(n)})
    return (best, score) if score >= MIN_CONFIDENCE else (None, score)


def _best_sniff(sample: SniffSample, candidates: dict[str, ModuleType]) -> tuple[str | None, float]:
    best, score = None, 0.0
    for s, name in sniff_scores(sample, candidates):
        if s > score:
            best, score = name, s
    return best, score


def _wide_sample(path: Path) -> SniffSample | None:
    """The record-like lines (a digit and a word records print) of the file's first
    `WIDE_SNIFF_BYTES`, as a sniff sample; None when there are none."""
    with open(path, "rb") as fh:
        data = fh.read(WIDE_SNIFF_BYTES)
    small = len(data) <= SNIFF_BYTES
    # (cut at the last line end of either kind: a CR console after a long first line has no LF past that line)
    cut = len(data) if small else max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
    lines = strip_prefixes(split_segments(lines_from_bytes(data[:cut] if cut > 0 else data)))
    if small and lines.height <= SNIFF_LINES:
        return None  # the head sample already saw all of it (a small file of many lines: its first lines only)
    sample = record_like_sample(path, lines, SNIFF_LINES)
    return sample if sample.lines else None


def expand_paths(
    paths: list[str | Path], follow_symlinks: bool = False, skipped: list[tuple[Path, str, str]] | None = None
) -> list[tuple[Path, str, bool]]:
    """(file, source name, came_from_folder) for every file under the given paths.

    A folder is not left through symlinks: a file or folder symlink inside it whose target
    lies outside it is not followed (listed in `skipped` as (path, source, why)) unless
    `follow_symlinks`; symlinked folders are not descended into either way unless
    `follow_symlinks` (then each real folder once). Paths given directly are used as given."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            for f in _walk(p, follow_symlinks, skipped):
                rel = f.relative_to(p)
                if not any(part.startswith(".") for part in rel.parts) and f.name not in LABEL_FILES:
                    out.append((f, rel.as_posix(), True))
        elif p.exists():
            out.append((p, p.name, False))
        else:
            raise IngestError(f"{p}: no such file or folder")
    return out


def _walk(folder: Path, follow_symlinks: bool, skipped: list | None) -> list[Path]:
    """The regular files under `folder`, sorted (see `expand_paths` for symlinks)."""
    top = folder.resolve()
    seen = {top}
    found = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=follow_symlinks):
        here = Path(dirpath)
        if follow_symlinks:  # each real folder once (a symlink loop ends here)
            keep = []
            for d in dirnames:
                real = (here / d).resolve()
                if real not in seen:
                    seen.add(real)
                    keep.append(d)
            dirnames[:] = keep
        else:
            for d in dirnames:
                link = here / d
                if link.is_symlink() and not _inside(link.resolve(), top) and skipped is not None:
                    skipped.append(
                        (
                            link,
                            link.relative_to(folder).as_posix(),
                            f"a symlink to a folder outside {folder}; not followed (--follow-symlinks to allow)",
                        )
                    )
        for name in filenames:
            f = here / name
            if f.is_symlink() and not follow_symlinks and not _inside(f.resolve(), top):
                if skipped is not None and not name.startswith("."):
                    skipped.append(
                        (
                            f,
                            f.relative_to(folder).as_posix(),
                            f"a symlink to a file outside {folder}; not followed (--follow-symlinks to allow)",
                        )
                    )
                continue
            if f.is_file():
                found.append(f)
    return sorted(found)


def _inside(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (what the store identifies a source by)."""
    return _sha256(path)[0]


def _sha256(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    return h.hexdigest(), size


def _count_lines(path: Path) -> int:
    count = _ReadOnce()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            count.lines_in(block)
    return count.lines()


class _ReadOnce:
    """SHA-256, size and line count of a file, from the blocks a parser reads through
    `SourceFile.tap`. Only valid when the parser read the whole file exactly once, in
    order (`digest` checks the size); otherwise the driver reads the file again."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.size = 0
        self.newlines = 0
        self.crs = 0
        self.crlfs = 0
        self.head = b""  # the file's first CR_HEAD_BYTES: whether its CRs end lines (`lone_cr_endings`)
        self.last = b"\n"

    def __call__(self, block: bytes) -> None:
        self.hash.update(block)
        self.size += len(block)
        self.lines_in(block)

    def lines_in(self, block: bytes) -> None:
        if not block:
            return
        if len(self.head) < CR_HEAD_BYTES:
            self.head += block[: CR_HEAD_BYTES - len(self.head)]
        self.newlines += block.count(b"\n")
        if b"\r" in block:  # (most files have none: one search instead of two counts)
            self.crs += block.count(b"\r")
            self.crlfs += block.count(b"\r\n")
        self.crlfs += self.last == b"\r" and block[:1] == b"\n"
        self.last = block[-1:]

    def lines(self) -> int:
        """Lines as `lines_from_bytes` splits them: at LFs, or at every line end of a CR file."""
        if lone_cr_endings(self.head):
            ends = self.newlines + self.crs - self.crlfs
            return ends + (0 if self.last in (b"\n", b"\r") else 1)
        return self.newlines + (0 if self.last == b"\n" else 1)

    def digest(self, path: Path, size: int) -> tuple[str, int]:
        """(sha256, lines) of the file, re-reading it if the parser did not read it once."""
        if self.size == size:
            return self.hash.hexdigest(), self.lines()
        return _sha256(path)[0], _count_lines(path)


def _run_year(store: Store, run_id: str) -> int | None:
    if not store.has_run(run_id):
        return None
    first = store.scan(run_id, "metrics").select(pl.col("time").min()).collect().item()
    return int(first.year) if first is not None else None


def ingest_paths(
    paths: list[str | Path],
    run_id: str,
    store: Store,
    fmt: str | None = None,
    progress: Callable[[str], None] | None = None,
    follow_symlinks: bool = False,
) -> IngestReport:
    """Ingest files and folders into `run_id`. Raises IngestError when the one file given has nothing
    usable, or none of several has; otherwise a file that has nothing usable (given directly or inside a
    folder) is skipped with a message (so are symlinks leading out of a folder, unless `follow_symlinks`)."""
    validate_run_id(run_id)
    if fmt is not None and fmt not in parsers():
        raise IngestError(f"unknown format {fmt!r}; known: {', '.join(format_names())}")
    skipped: list[tuple[Path, str, str]] = []
    files = expand_paths(paths, follow_symlinks, skipped)
    codecs = {path: encoded.codec_of(path) for path, _, _ in files}
    # encoded files are read from a decoded copy in a staging folder (removed on exit, swept after a crash)
    with store.staging() if any(codecs.values()) else contextlib.nullcontext() as scratch:
        planned = []
        for path, source, in_folder in files:
            data = path
            if codecs[path]:
                try:
                    data = encoded.decompress_to(path, scratch.folder / "inputs" / str(len(planned)))
                except encoded.DecompressionError as exc:
                    if not in_folder:
                        raise IngestError(str(exc)) from None
                    skipped.append((path, source, str(exc).removeprefix(f"{path}: ")))
                    continue
            name, _ = (fmt, 1.0) if fmt else detect_format(data)
            planned.append((path, data, source, in_folder, name))
        # Files whose times may lack a year (syslog) go last, so they can take the run's year.
        planned.sort(key=lambda x: bool(x[4] and getattr(parsers()[x[4]], "NEEDS_YEAR", False)))
        outcomes = []
        for path, data, source, in_folder, name in planned:
            if progress:
                progress(f"{path}: {name or 'unknown format'}")
            needs_year = bool(name and getattr(parsers()[name], "NEEDS_YEAR", False))
            year = _run_year(store, run_id) if needs_year else None
            outcome = _ingest_file(path, source, name, run_id, store, year, progress, mixing=fmt is None, data=data)
            if outcome.status == "failed" and not in_folder and len(files) == 1:
                raise IngestError(outcome.message)
            outcomes.append(outcome)
        # several files given: one that cannot be used (an aborted launch's log with no record, a file of
        # another kind picked up by a glob) is skipped with its message, as in a folder; none usable is an error
        if len(files) > 1 and not any(o.status != "failed" for o in outcomes):
            raise IngestError(next(o.message for o in outcomes if o.status == "failed"))
    outcomes += [
        FileOutcome(path=str(f), source=source, status="failed", message=f"{f}: {why}") for f, source, why in skipped
    ]
    return IngestReport(run_id=run_id, store=str(store.root), files=outcomes)


def parse_file(path: Path, fmt: str, source: str | None = None, year: int | None = None) -> ParseResult:
    """Parse one file with a named parser, without touching the store (tests, notebooks)."""
    result = parsers()[fmt].parse(SourceFile(path=Path(path), name=source or Path(path).name, year=year))
    return _finish(result, source or Path(path).name)


RANKED_SIDE_TABLES = ("batches", "layers")  # tables whose rows take a per-rank file's rank
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])rank[_-]?(\d{1,5})(?![0-9])", re.IGNORECASE)


def rank_from_name(name: str) -> int | None:
    """The rank a per-rank file's name gives (`batches_rank3.jsonl`, `grads-rank_12.csv`), if exactly one."""
    found = {int(m) for m in _RANK_IN_NAME.findall(Path(name).name)}
    return found.pop() if len(found) == 1 else None


def _finish(result: ParseResult, source: str) -> ParseResult:
    """Conform every table, stamp the source, and add `nan` events from step records."""
    drop_out_of_range_steps(result)
    result.tables, _ = _finish_tables(result.tables, source)
    return result


def drop_out_of_range_steps(result: ParseResult) -> None:
    """The driver's net under every parser: rows whose step is beyond +-`MAX_STEP` (a
    binary record's raw counter, a computed step) are dropped and counted as unparsed
    lines, so no stored step is out of range (the parsers turn most such lines into
    unparsed lines themselves, with their text)."""
    for table, frame in list(result.tables.items()):
        if "step" not in frame.columns or frame.height == 0 or not frame.schema["step"].is_numeric():
            continue
        oob = ((pl.col("step") > MAX_STEP) | (pl.col("step") < -MAX_STEP)).fill_null(False)
        bad = frame.filter(oob)
        if bad.height == 0:
            continue
        result.tables[table] = frame.filter(~oob)
        lines = bad.get_column("line").unique() if "line" in bad.columns else pl.Series([None])
        result.unparsed += lines.len()
        room = MANIFEST_EXAMPLES - len(result.unparsed_examples)
        result.unparsed_examples += [
            (int(x) if x is not None else 0, f"step out of range in {table}")
            for x in lines.head(max(room, 0)).to_list()
        ]


def _finish_tables(tables: dict[str, pl.DataFrame], source: str) -> tuple[dict[str, pl.DataFrame], pl.Series]:
    """`_finish` on a set of tables (a whole file, or one chunk of it). Also returns the
    row positions, in the events table, of the `nan` events it derived from metrics."""
    out = {t: schema.conform(t, f.with_columns(pl.lit(source).alias("source"))) for t, f in tables.items()}
    file_rank = rank_from_name(source)
    if file_rank is not None:  # per-rank side files (`batches_rank3.jsonl`) without a rank column
        for t in RANKED_SIDE_TABLES:
            if t in out and "rank" in out[t].columns:
                out[t] = out[t].with_columns(pl.col("rank").fill_null(pl.lit(file_rank, pl.Int32)))
    derived = pl.Series("derived", [], dtype=pl.UInt32)
    nans = nan_events(out["metrics"]) if "metrics" in out else schema.empty("events")
    if nans.height:
        if "events" not in out:
            out["events"] = nans
            derived = pl.Series("derived", range(nans.height), dtype=pl.UInt32)
        else:
            both = pl.concat(
                [
                    out["events"].with_columns(pl.lit(False).alias("_derived")),
                    nans.with_columns(pl.lit(True).alias("_derived")),
                ]
            ).sort("line", nulls_last=True, maintain_order=True)
            derived = both.select(pl.arg_where("_derived")).to_series().cast(pl.UInt32)
            out["events"] = both.drop("_derived")
    return out, derived


@dataclass
class _Parsed:
    """What the driver keeps of a parse besides the tables: counts and summaries."""

    records: int = 0
    unparsed: int = 0
    examples: list[tuple[int, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    steps: tuple[int | None, int | None] = (None, None)
    ranks: set[int] = field(default_factory=set)
    events: Counter = field(default_factory=Counter)
    grammars: list[str] = field(default_factory=list)  # formats that read records, the primary first

    def add(self, part: ParseResult, tables: dict[str, pl.DataFrame]) -> None:
        """Count one parse result (a file, or one chunk of it) and its finished tables."""
        self.records += part.records
        self.unparsed += part.unparsed
        self.examples += part.unparsed_examples[: MANIFEST_EXAMPLES - len(self.examples)]
        self.notes += [n for n in part.notes if n not in self.notes]
        metrics = tables.get("metrics")
        if metrics is not None and metrics.height:
            lo, hi = metrics.select(pl.col("step").min().alias("lo"), pl.col("step").max().alias("hi")).row(0)
            if lo is not None:
                old_lo, old_hi = self.steps
                self.steps = (lo if old_lo is None else min(lo, old_lo), hi if old_hi is None else max(hi, old_hi))
            self.ranks.update(metrics.get_column("rank").drop_nulls().unique().to_list())
        events = tables.get("events")
        if events is not None and events.height:
            self.events.update(dict(events.group_by("kind").len().iter_rows()))


def _parse_whole(parser: ModuleType, src: SourceFile, stage: Staging, mixing: bool = False) -> _Parsed:
    """Parse a whole file; a text log's lines that its format did not read are offered to
    the other line grammars when `mixing` (see `_mixing.py`)."""
    result = parser.parse(src)
    grammars = [parser.NAME]
    if mixing and (is_line_grammar(parser.NAME) or parser.NAME == "stdout_events"):
        result, grammars = mix(parser.NAME, src, result, parsers())
    result = _finish(result, src.name)
    parsed = _Parsed(grammars=grammars)
    parsed.add(result, result.tables)
    for table, frame in result.tables.items():
        stage.append(table, frame)
    return parsed


def _parse_streaming(
    parts: Iterator[ParseResult], src: SourceFile, stage: Staging, on_chunk: Callable[[int], None] | None = None
) -> _Parsed:
    """Write each chunk's tables as they come (`parser.parse_chunks`, or a grammar's windows:
    `_windows.py`; chunk k is written in a background thread while chunk k + 1 is parsed); then
    apply the one-rank rule (see the module docstring), rewriting the staged metrics only when
    exactly one rank printed values (and the `nan` events derived from them, which take the
    metrics' rank)."""
    parsed = _Parsed()
    derived: list[pl.Series] = []  # positions of derived `nan` events in the staged events
    events_rows = 0
    with ThreadPoolExecutor(max_workers=1) as writer:
        pending = None
        for part in parts:
            drop_out_of_range_steps(part)
            tables, nans = _finish_tables(part.tables, src.name)
            parsed.add(part, tables)
            if nans.len():
                derived.append(nans + events_rows)
            events_rows += tables["events"].height if "events" in tables else 0
            if pending is not None:
                pending.result()
            pending = writer.submit(_append_all, stage, tables)
            if on_chunk:
                on_chunk(parsed.records)
        if pending is not None:
            pending.result()
    if parsed.unparsed and not parsed.notes:
        parsed.notes.append(f"{parsed.unparsed} record-like line(s) could not be parsed")
    if len(parsed.ranks) == 1:
        parsed.ranks = set()
        no_rank = pl.lit(None, dtype=pl.Int32).alias("rank")
        stage.rewrite("metrics", lambda frame, first: frame.with_columns(no_rank))
        if derived:
            positions = pl.concat(derived)
            row = pl.int_range(pl.len(), dtype=pl.UInt32)
            stage.rewrite(
                "events",
                lambda frame, first: frame.with_columns(
                    pl.when((row + first).is_in(positions.implode()))
                    .then(no_rank)
                    .otherwise(pl.col("rank"))
                    .alias("rank")
                ),
            )
    return parsed


def _chunk_progress(progress: Callable[[str], None], path: Path) -> Callable[[int], None]:
    """Report the records parsed after a chunk: the first chunk, then at most every PROGRESS_EVERY_S seconds (a
    1.8 GB log read in 4 MiB windows is 450 chunks; the summary line gives the total)."""
    last: list[float] = []

    def report(records: int) -> None:
        now = time.monotonic()
        if not last or now - last[0] >= PROGRESS_EVERY_S:
            last[:] = [now]
            progress(f"{path}: {records:,} records parsed")

    return report


def _append_all(stage: Staging, tables: dict[str, pl.DataFrame]) -> None:
    for table, frame in tables.items():
        stage.append(table, frame)


def _ingest_file(
    path: Path,
    source: str,
    fmt: str | None,
    run_id: str,
    store: Store,
    year: int | None,
    progress: Callable[[str], None] | None = None,
    mixing: bool = False,
    data: Path | None = None,
) -> FileOutcome:
    """Ingest one file; `data` is what is read (a compressed file's decompressed copy), `path` what the user gave
    and the store records."""
    data = data or path
    outcome = FileOutcome(path=str(path), source=source, status="failed", format=fmt)
    try:
        size = data.stat().st_size
    except OSError as exc:
        outcome.message = f"{path}: cannot read: {exc.strerror or exc}"
        return outcome
    if size == 0:
        outcome.message = f"{path}: empty file"
        return outcome
    if fmt is None:
        outcome.message = f"{path}: not a recognised training log, metrics, gradient, batch or telemetry file"
        return outcome
    if store.has_source_of_size(run_id, size) and store.has_source(run_id, _sha256(data)[0]):
        outcome.status = "unchanged"
        outcome.message = f"{path}: already ingested into run {run_id} (same content); nothing to do"
        return outcome
    parser = parsers()[fmt]
    read = _ReadOnce()
    src = SourceFile(path=data, name=source, year=year, tap=read)
    with store.staging() as stage:
        try:
            big = progress is not None and size >= PROGRESS_MIN_BYTES
            on_chunk = _chunk_progress(progress, path) if big else None
            if hasattr(parser, "parse_chunks") and size >= getattr(parser, "STREAM_MIN_BYTES", 0):
                parsed = _parse_streaming(parser.parse_chunks(src), src, stage, on_chunk)
            elif windowed(parser, size):
                read_by: list[str] = []
                windows = parse_windows(parser, src, parsers() if mixing else None, read_by)
                parsed = _parse_streaming(windows, src, stage, on_chunk)
                parsed.grammars = read_by
            else:
                parsed = _parse_whole(parser, src, stage, mixing=mixing)
        except IngestError as exc:
            text = str(exc).replace(str(data), str(path))  # (a parser names what it read: the decompressed copy)
            outcome.message = text if text.startswith(str(path)) else f"{path}: {text}"
            return outcome
        except StoreError:  # the store, not this input: the caller reports it
            raise
        except OSError as exc:
            outcome.message = f"{path}: cannot read: {exc.strerror or exc}"
            return outcome
        except Exception as exc:  # a parser bug must not become a traceback for the user
            first = str(exc).splitlines()[0] if str(exc) else ""
            outcome.message = f"{path}: could not be parsed as {fmt}: {type(exc).__name__}: {first}"
            return outcome
        outcome.records = parsed.records
        outcome.unparsed = parsed.unparsed
        outcome.unparsed_examples = parsed.examples[:OUTCOME_EXAMPLES]
        if not any(stage.rows.values()):
            where = ""
            if parsed.examples:
                line, text = parsed.examples[0]
                where = f" (first unparsed line {line}: {text[:80]!r})"
            outcome.message = f"{path}: no usable records found as {fmt}{where}"
            return outcome
        sha, lines = read.digest(data, size)
        if len(parsed.grammars) > 1:  # a text log that mixes grammars: all of them, the primary first
            fmt = outcome.format = "+".join(parsed.grammars)
        record = SourceRecord(
            source=source,
            path=str(path.resolve()),
            sha256=sha,
            bytes=size,
            lines=lines,
            format=fmt,
            records=parsed.records,
            unparsed=parsed.unparsed,
            unparsed_examples=json.dumps([list(x) for x in parsed.examples]),
        )
        store.write_source(run_id, record, stage)
        outcome.rows = {t: n for t, n in stage.rows.items() if n}
    outcome.status = "ingested"
    outcome.message = "; ".join(parsed.notes)
    outcome.steps = parsed.steps
    outcome.ranks = sorted(parsed.ranks)
    outcome.events = dict(sorted(parsed.events.items()))
    return outcome
