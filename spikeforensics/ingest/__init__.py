"""Ingest: files -> parsers (one module per format family) -> the run store.

Parser modules are discovered in this package: any module with `NAME`, `sniff` and
`parse` (see `base.py`). The format of a file is the parser whose `sniff` is most
confident on its head; `--format` forces one.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest.base import (
    SNIFF_LINES,
    ParseResult,
    SniffSample,
    SourceFile,
    nan_events,
    split_segments,
    strip_prefixes,
    lines_from_bytes,
)
from spikeforensics.store import SourceRecord, Store, validate_run_id

SNIFF_BYTES = 64 << 10
MIN_CONFIDENCE = 0.3
_NOT_PARSERS = {"base", "aliases"}


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
    sample = sniff_sample(path)
    if "\x00" in sample.text[:4096] and path.suffix.lower() not in (".npz", ".parquet"):
        # binary: only parsers of binary formats get a say
        candidates = {n: p for n, p in parsers().items() if getattr(p, "BINARY", False)}
    else:
        candidates = parsers()
    best, score = None, 0.0
    for name, parser in candidates.items():
        try:
            s = float(parser.sniff(sample))
        except Exception:  # a sniffer must never break ingest of an unrelated file
            s = 0.0
        if s > score:
            best, score = name, s
    return (best, score) if score >= MIN_CONFIDENCE else (None, score)


def expand_paths(paths: list[str | Path]) -> list[tuple[Path, str, bool]]:
    """(file, source name, came_from_folder) for every file under the given paths."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            for f in sorted(p.rglob("*")):
                rel = f.relative_to(p)
                if f.is_file() and not any(part.startswith(".") for part in rel.parts):
                    out.append((f, rel.as_posix(), True))
        elif p.exists():
            out.append((p, p.name, False))
        else:
            raise IngestError(f"{p}: no such file or folder")
    return out


def _sha256(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    return h.hexdigest(), size


def _count_lines(path: Path) -> int:
    n = 0
    last = b"\n"
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (0 if last == b"\n" else 1)


def _run_year(store: Store, run_id: str) -> int | None:
    if not store.has_run(run_id):
        return None
    times = store.table(run_id, "metrics").get_column("time").drop_nulls()
    return int(times.min().year) if times.len() else None


def ingest_paths(
    paths: list[str | Path],
    run_id: str,
    store: Store,
    fmt: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> IngestReport:
    """Ingest files and folders into `run_id`. Raises IngestError for a file given
    directly that has nothing usable; files inside a folder are skipped with a message."""
    validate_run_id(run_id)
    if fmt is not None and fmt not in parsers():
        raise IngestError(f"unknown format {fmt!r}; known: {', '.join(format_names())}")
    files = expand_paths(paths)
    planned = []
    for path, source, in_folder in files:
        name, _ = (fmt, 1.0) if fmt else detect_format(path)
        planned.append((path, source, in_folder, name))
    # Files whose times may lack a year (syslog) go last, so they can take the run's year.
    planned.sort(key=lambda x: bool(x[3] and getattr(parsers()[x[3]], "NEEDS_YEAR", False)))
    outcomes = []
    year = _run_year(store, run_id)
    for path, source, in_folder, name in planned:
        if progress:
            progress(f"{path}: {name or 'unknown format'}")
        outcome = _ingest_file(path, source, name, run_id, store, year)
        if outcome.status == "failed" and not in_folder:
            raise IngestError(outcome.message)
        if year is None and outcome.status == "ingested":
            year = _run_year(store, run_id)
        outcomes.append(outcome)
    return IngestReport(run_id=run_id, store=str(store.root), files=outcomes)


def parse_file(path: Path, fmt: str, source: str | None = None, year: int | None = None) -> ParseResult:
    """Parse one file with a named parser, without touching the store (tests, notebooks)."""
    result = parsers()[fmt].parse(SourceFile(path=Path(path), name=source or Path(path).name, year=year))
    return _finish(result, source or Path(path).name)


def _finish(result: ParseResult, source: str) -> ParseResult:
    """Conform every table, stamp the source, and add `nan` events from step records."""
    tables = {}
    for table, frame in result.tables.items():
        frame = frame.with_columns(pl.lit(source).alias("source"))
        tables[table] = schema.conform(table, frame)
    if "metrics" in tables:
        nans = nan_events(tables["metrics"])
        if nans.height:
            existing = tables.get("events")
            tables["events"] = nans if existing is None else pl.concat([existing, nans]).sort("line", nulls_last=True)
    result.tables = tables
    return result


def _ingest_file(path: Path, source: str, fmt: str | None, run_id: str, store: Store, year: int | None) -> FileOutcome:
    outcome = FileOutcome(path=str(path), source=source, status="failed", format=fmt)
    try:
        sha, size = _sha256(path)
    except OSError as exc:
        outcome.message = f"{path}: cannot read: {exc.strerror or exc}"
        return outcome
    if size == 0:
        outcome.message = f"{path}: empty file"
        return outcome
    if fmt is None:
        outcome.message = f"{path}: not a recognised training log, metrics, gradient, batch or telemetry file"
        return outcome
    if store.has_source(run_id, sha):
        outcome.status = "unchanged"
        outcome.message = f"{path}: already ingested into run {run_id} (same content); nothing to do"
        return outcome
    try:
        result = _finish(parsers()[fmt].parse(SourceFile(path=path, name=source, year=year)), source)
    except IngestError as exc:
        outcome.message = str(exc)
        return outcome
    except Exception as exc:  # a parser bug must not become a traceback for the user
        outcome.message = f"{path}: could not be parsed as {fmt}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return outcome
    outcome.records = result.records
    outcome.unparsed = result.unparsed
    outcome.unparsed_examples = result.unparsed_examples[:5]
    if result.total_rows == 0:
        where = ""
        if result.unparsed_examples:
            line, text = result.unparsed_examples[0]
            where = f" (first unparsed line {line}: {text[:80]!r})"
        outcome.message = f"{path}: no usable records found as {fmt}{where}"
        return outcome
    record = SourceRecord(
        source=source, path=str(path.resolve()), sha256=sha, bytes=size, lines=_count_lines(path),
        format=fmt, records=result.records, unparsed=result.unparsed,
        unparsed_examples=json.dumps([list(x) for x in result.unparsed_examples[:20]]),
    )
    store.write_source(run_id, record, result.tables)
    outcome.status = "ingested"
    outcome.rows = {t: f.height for t, f in result.tables.items()}
    outcome.message = "; ".join(result.notes)
    metrics = result.tables.get("metrics")
    if metrics is not None and metrics.height:
        steps = metrics.get_column("step").drop_nulls()
        if steps.len():
            outcome.steps = (int(steps.min()), int(steps.max()))
        outcome.ranks = sorted(metrics.get_column("rank").drop_nulls().unique().to_list())
    events = result.tables.get("events")
    if events is not None and events.height:
        outcome.events = dict(events.group_by("kind").len().sort("kind").iter_rows())
    return outcome
