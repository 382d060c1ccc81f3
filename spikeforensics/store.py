"""The run store: plain Parquet, hive-partitioned by run, one file per ingested source.

Layout (every file readable by polars, DuckDB or Spark directly):

    <store>/.gitignore                                   ('*': never committed by accident)
    <store>/tables/<table>/run=<RUN_ID>/<sha16>.parquet  one file per source and table
    <store>/tables/sources/run=<RUN_ID>/<sha16>.parquet  the manifest row of that source
    <store>/runs/<RUN_ID>/                               reports written by `diagnose`

e.g. `pl.scan_parquet("<store>/tables/metrics/**/*.parquet", hive_partitioning=True)`.

Writes are atomic per source: data files are written under `<store>/.tmp/`, renamed
into place, and the manifest row is renamed last. Readers only read data files whose
manifest row exists, so an ingest interrupted at any point leaves the store as it
was. The file name is the source's content hash, so ingesting the same file twice is
a no-op, and a new file appends to the run.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
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

    def table(self, run_id: str, table: str) -> pl.DataFrame:
        """One table of a run (committed sources only), in the canonical schema."""
        committed = {s[:16] for s in self.sources(run_id).get_column("sha256").to_list()}
        files = [
            f for f in sorted(self._table_dir(table, run_id).glob("*.parquet")) if f.stem in committed
        ]
        if not files:
            return schema.empty(table)
        return pl.concat([pl.read_parquet(f) for f in files], how="vertical_relaxed")

    # -- writing ---------------------------------------------------------------
    def write_source(self, run_id: str, record: SourceRecord, tables: dict[str, pl.DataFrame]) -> None:
        """Atomically add one source's tables to a run (replacing an earlier copy of it)."""
        validate_run_id(run_id)
        self._ensure_root()
        tmp = self.root / ".tmp" / uuid.uuid4().hex
        tmp.mkdir(parents=True)
        name = f"{record.sha256[:16]}.parquet"
        try:
            staged: list[tuple[Path, Path]] = []
            for table, frame in tables.items():
                if frame.height == 0:
                    continue
                path = tmp / f"{table}-{name}"
                _write_parquet(schema.conform(table, frame), path)
                staged.append((path, self._table_dir(table, run_id) / name))
            manifest = tmp / f"sources-{name}"
            _write_parquet(record.frame(), manifest)
            for src, dst in staged:
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dst)
            dst = self._table_dir("sources", run_id) / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(manifest, dst)  # the commit point
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def delete_run(self, run_id: str) -> None:
        validate_run_id(run_id)
        for table in schema.TABLES:
            shutil.rmtree(self._table_dir(table, run_id), ignore_errors=True)


def _write_parquet(frame: pl.DataFrame, path: Path) -> None:
    arrow = frame.to_arrow()
    meta = dict(arrow.schema.metadata or {})
    meta[b"spikeforensics.schema_version"] = str(schema.SCHEMA_VERSION).encode()
    meta[b"spikeforensics.tool_version"] = __version__.encode()
    pq.write_table(arrow.replace_schema_metadata(meta), path, compression="zstd")
