"""The run store: plain Parquet, hive-partitioned by run, one file per ingested source.

Layout (every file readable by polars, DuckDB or Spark directly):

    <store>/.gitignore                                   ('*': never committed by accident)
    <store>/tables/<table>/run=<RUN_ID>/<sha16>.parquet  one file per source and table
    <store>/tables/sources/run=<RUN_ID>/<sha16>.parquet  the manifest row of that source
    <store>/runs/<RUN_ID>/                               reports written by `diagnose`

e.g. `pl.scan_parquet("<store>/tables/metrics/**/*.parquet", hive_partitioning=True)`.

Writes are atomic per source: data files are written under `<store>/.tmp/` (a
`Staging`, appended to chunk by chunk when a parser streams), renamed into place, and
the manifest row is renamed last. Readers only read data files whose manifest row
exists, so an ingest interrupted at any point leaves the store as it was. The file
name is the source's content hash, so ingesting the same file twice is a no-op, and a
new file appends to the run.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from spikeforensics import __version__, schema

RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
STORE_ENV = "SPIKEFORENSICS_STORE"
DEFAULT_STORE = ".spikeforensics"


class StoreError(Exception):
    """A store problem the user can fix (bad run id, unknown run)."""


def validate_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id) or run_id in (".", ".."):
        raise StoreError(
            f"invalid run id {run_id!r}: use 1-128 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return run_id


def run_id_from_path(path: str | os.PathLike) -> str:
    """Default run id: the stem of a file, the name of a folder, made valid."""
    p = Path(path)
    stem = p.name if p.is_dir() else p.stem
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._")
    return cleaned[:128] or "run"


def resolve_store(store: str | os.PathLike | None) -> Path:
    return Path(store or os.environ.get(STORE_ENV) or DEFAULT_STORE)


@dataclass
class SourceRecord:
    """One manifest row (see schema.TABLES['sources'])."""

    source: str
    path: str
    sha256: str
    bytes: int
    lines: int
    format: str
    records: int
    unparsed: int
    unparsed_examples: str  # JSON list of [line, text]

    def frame(self) -> pl.DataFrame:
        row = dict(self.__dict__)
        row["tool_version"] = __version__
        row["ingested_at"] = datetime.now(timezone.utc).replace(tzinfo=None)
        return schema.conform("sources", pl.DataFrame([row]))


class Store:
    def __init__(self, root: str | os.PathLike | None = None):
        self.root = resolve_store(root)

    # -- paths -----------------------------------------------------------------
    def _table_dir(self, table: str, run_id: str) -> Path:
        return self.root / "tables" / table / f"run={run_id}"

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / validate_run_id(run_id)

    def _ensure_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        ignore = self.root / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# created by spikeforensics: the run store is not for version control\n*\n")

    # -- reading ---------------------------------------------------------------
    def runs(self) -> list[str]:
        base = self.root / "tables" / "sources"
        if not base.is_dir():
            return []
        return sorted(
            d.name.split("=", 1)[1]
            for d in base.iterdir()
            if d.is_dir() and d.name.startswith("run=") and any(d.glob("*.parquet"))
        )

    def has_run(self, run_id: str) -> bool:
        return validate_run_id(run_id) in self.runs()

    def sources(self, run_id: str) -> pl.DataFrame:
        files = sorted(self._table_dir("sources", validate_run_id(run_id)).glob("*.parquet"))
        if not files:
            return schema.empty("sources")
        return pl.concat([pl.read_parquet(f) for f in files], how="vertical_relaxed").sort("ingested_at")

    def has_source(self, run_id: str, sha256: str) -> bool:
        return (self._table_dir("sources", run_id) / f"{sha256[:16]}.parquet").exists()

    def has_source_of_size(self, run_id: str, size: int) -> bool:
        """Whether the run holds a source of this many bytes (only then can a file be
        one it already holds, so only then is it worth hashing before parsing)."""
        if not self._table_dir("sources", run_id).is_dir():
            return False
        return size in self.sources(run_id).get_column("bytes").to_list()

    def _committed_files(self, run_id: str, table: str) -> list[Path]:
        committed = {s[:16] for s in self.sources(run_id).get_column("sha256").to_list()}
        return [f for f in sorted(self._table_dir(table, run_id).glob("*.parquet")) if f.stem in committed]

    def table(self, run_id: str, table: str) -> pl.DataFrame:
        """One table of a run (committed sources only), in the canonical schema."""
        files = self._committed_files(run_id, table)
        if not files:
            return schema.empty(table)
        return pl.concat([pl.read_parquet(f) for f in files], how="vertical_relaxed")

    def scan(self, run_id: str, table: str) -> pl.LazyFrame:
        """`table` as a lazy frame, for queries that need a few columns of a big run."""
        files = self._committed_files(run_id, table)
        if not files:
            return schema.empty(table).lazy()
        return pl.concat([pl.scan_parquet(f) for f in files], how="vertical_relaxed")

    # -- writing ---------------------------------------------------------------
    def staging(self) -> Staging:
        """A fresh staging folder under `<store>/.tmp/` for one source's tables."""
        self._ensure_root()
        return Staging(self.root / ".tmp" / uuid.uuid4().hex)

    def write_source(self, run_id: str, record: SourceRecord, tables: dict[str, pl.DataFrame] | Staging) -> None:
        """Atomically add one source's tables to a run (replacing an earlier copy of it).

        `tables` is either the frames themselves or a `Staging` the caller has filled
        (streaming ingest); either way the data files are renamed into place first and
        the manifest row last (the commit point)."""
        validate_run_id(run_id)
        self._ensure_root()
        if isinstance(tables, Staging):
            self._commit(run_id, record, tables)
            return
        with self.staging() as stage:
            for table, frame in tables.items():
                stage.append(table, frame)
            self._commit(run_id, record, stage)

    def _commit(self, run_id: str, record: SourceRecord, stage: Staging) -> None:
        name = f"{record.sha256[:16]}.parquet"
        staged = stage.finish()
        manifest = stage.folder / "sources.manifest.parquet"
        _write_parquet(record.frame(), manifest)
        for table, src in staged.items():
            dst = self._table_dir(table, run_id) / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        dst = self._table_dir("sources", run_id) / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(manifest, dst)  # the commit point

    def delete_run(self, run_id: str) -> None:
        validate_run_id(run_id)
        for table in schema.TABLES:
            shutil.rmtree(self._table_dir(table, run_id), ignore_errors=True)


class Staging:
    """One source's tables being written, under `<store>/.tmp/<id>/`: one Parquet file per
    table, appended to frame by frame (one row group per `append`, so a streaming parser's
    chunks never have to be held together). Commit with `Store.write_source`; use as a
    context manager, which removes the folder (and whatever was not committed) on exit."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True)
        self.rows: dict[str, int] = {}  # table -> rows appended so far
        self._writers: dict[str, pq.ParquetWriter] = {}

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc) -> None:
        self._close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _path(self, table: str) -> Path:
        return self.folder / f"{table}.parquet"

    def append(self, table: str, frame: pl.DataFrame) -> None:
        """Add rows to a table (conformed to its schema); empty frames add nothing."""
        if frame.height == 0:
            return
        arrow = _with_metadata(schema.conform(table, frame).to_arrow())
        writer = self._writers.get(table)
        if writer is None:
            writer = self._writers[table] = pq.ParquetWriter(
                self._path(table), arrow.schema, compression="zstd", use_dictionary=_dictionary_columns(table)
            )
        writer.write_table(arrow, row_group_size=arrow.num_rows)
        self.rows[table] = self.rows.get(table, 0) + arrow.num_rows

    def rewrite(self, table: str, fix: Callable[[pl.DataFrame, int], pl.DataFrame]) -> None:
        """Replace every row group of `table` by `fix(rows, index of its first row)`, one row
        group in memory at a time (end-of-file rules a streaming parser can only apply
        after its last chunk)."""
        if not self.rows.get(table):
            return
        self._close(table)
        old = self._path(table).rename(self.folder / f"{table}.old")
        reader = pq.ParquetFile(old)
        self.rows[table] = 0
        first = 0
        for i in range(reader.num_row_groups):
            frame = pl.from_arrow(reader.read_row_group(i))
            self.append(table, fix(frame, first))
            first += frame.height
        reader.close()
        old.unlink()

    def finish(self) -> dict[str, Path]:
        """Close the files; the staged file of every table that has rows."""
        self._close()
        return {t: self._path(t) for t, n in self.rows.items() if n}

    def _close(self, table: str | None = None) -> None:
        for name in [table] if table else list(self._writers):
            writer = self._writers.pop(name, None)
            if writer is not None:
                writer.close()


def _dictionary_columns(table: str) -> list[str]:
    """Dictionary-encode the string columns only (names, kinds, sources repeat; floats
    rarely do, and trying costs a third of the write time)."""
    return [c for c, dtype in schema.TABLES[table].items() if dtype == pl.String]


def _with_metadata(arrow: pa.Table) -> pa.Table:
    meta = dict(arrow.schema.metadata or {})
    meta[b"spikeforensics.schema_version"] = str(schema.SCHEMA_VERSION).encode()
    meta[b"spikeforensics.tool_version"] = __version__.encode()
    return arrow.replace_schema_metadata(meta)


def _write_parquet(frame: pl.DataFrame, path: Path) -> None:
    pq.write_table(_with_metadata(frame.to_arrow()), path, compression="zstd", use_dictionary=_dictionary_columns("sources"))
