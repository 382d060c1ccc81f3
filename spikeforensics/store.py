"""The run store: plain Parquet, hive-partitioned by run, one file per ingested source.

Layout (every file readable by polars, DuckDB or Spark directly):

    <store>/.gitignore                                   ('*': never committed by accident)
    <store>/tables/<table>/run=<RUN_ID>/<sha16>.parquet  one file per source and table
    <store>/tables/sources/run=<RUN_ID>/<sha16>.parquet  the manifest row of that source
    <store>/runs/<RUN_ID>/                               reports written by `diagnose`

e.g. `pl.scan_parquet("<store>/tables/metrics/**/*.parquet", hive_partitioning=True)`.

Writes are atomic per source: data files are written under `<store>/.tmp/` (a
`Staging`, appended to chunk by chunk when a parser streams), moved beside their final
place under hidden names (`.<sha16>.parquet.<owner>.pending`, which no `*.parquet` glob
reads), the manifest row is renamed into place (the commit point), then the data files
take their final names. Readers, the direct Parquet read included, never see rows whose
manifest row does not exist; a source committed but not yet renamed whole (a crash
inside those milliseconds) is rolled forward by the next `Store` opened. The file
name is the source's content hash, so ingesting the same file twice is a no-op, and a
new file appends to the run; a file that changed since it was ingested (same path and
source name, e.g. a log that grew) replaces its earlier copy (`_commit`).

Crash leftovers: a staging folder is named `<host>-<pid>-<random>`; every `Store` sweeps
`.tmp/` of folders whose process is gone (same host) or that saw no write for
`STALE_STAGING_S` (another host, or a pid reused); pending data files the same way when
no manifest commits them (rolled forward when one does); data files no manifest row
commits (an older version's commit, or a crash inside a removal); and report temporaries
(`runs/<RUN>/.<name>.<host>-<pid>.tmp`, `temp_path`) of dead processes. A commit that fails removes what it
moved; a staging folder is removed even when closing its files fails (a full disk).

Test hook: `SPIKEFORENSICS_KILL_AT=<point>[:<n>]` kills the process with SIGKILL at the
n-th (default first) pass of a named point (`KILL_POINTS`), to check what a crash there
leaves (`benchmarks/kill_points.py`, tests/test_faults.py). Unset, it costs one dict
lookup per point.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from spikeforensics import __version__, schema

RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
STORE_ENV = "SPIKEFORENSICS_STORE"
DEFAULT_STORE = ".spikeforensics"


# A staging folder whose owner cannot be checked (another host sharing the store, a
# staging folder of an older version, a pid that was reused) is stale after this long
# without a write: a live ingest writes its staging at least once per 32 MB chunk of log,
# i.e. every few seconds, so an hour idle is a dead process, not a slow one.
STALE_STAGING_S = 3600
# A data file no manifest row commits is a crash leftover once it is this old (its ctime).
# Data files take their final names only after their manifest row is in place, and
# removals delete data before the manifest, so no live command ever holds such a file:
# 0 removes it at once (the direct Parquet read must not see it).
ORPHAN_DATA_S = 0
_REPORT_TMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<host>[A-Za-z0-9_.]+)-(?P<pid>\d+)\.tmp$")
PENDING_SUFFIX = ".pending"
KILL_ENV = "SPIKEFORENSICS_KILL_AT"
# the named points of the kill hook, in commit order (see the module docstring)
KILL_POINTS = (
    "staging_append",
    "staging_finished",
    "manifest_staged",
    "data_pending",
    "before_manifest",
    "after_manifest",
    "data_renamed",
    "before_drop",
    "drop_data_removed",
)
_HOST = re.sub(r"[^A-Za-z0-9_.]+", "_", socket.gethostname())[:64] or "host"


def _parse_kill_at(value: str | None) -> tuple[str, int] | None:
    if not value:
        return None
    name, _, nth = value.partition(":")
    return name, int(nth) if nth.isdigit() else 1


_KILL_AT = _parse_kill_at(os.environ.get(KILL_ENV))
_kill_counts: dict[str, int] = {}


def kill_point(name: str) -> None:
    """The test hook: SIGKILL this process at the n-th pass of `name` when $SPIKEFORENSICS_KILL_AT asks."""
    if _KILL_AT is None or _KILL_AT[0] != name:
        return
    _kill_counts[name] = _kill_counts.get(name, 0) + 1
    if _kill_counts[name] == _KILL_AT[1]:
        os.kill(os.getpid(), signal.SIGKILL)


class StoreError(Exception):
    """A store problem the user can fix (bad run id, unknown run, a store that cannot be
    written); the message is one line naming the path."""


def store_os_error(exc: OSError, root: Path, doing: str) -> StoreError:
    """An OSError of the store itself (read-only, no permission, full disk, a file where the
    store folder should be) as a one-line StoreError naming the store path."""
    reasons = {
        errno.EROFS: "the store is on a read-only file system",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.ENOSPC: "no space left on the device",
        errno.EDQUOT: "disk quota exceeded",
        errno.ENOTDIR: "a path in the store is a file, not a folder",
        errno.EEXIST: "a path in the store exists and is not a folder",
    }
    why = reasons.get(exc.errno, exc.strerror or str(exc))
    where = exc.filename or root
    return StoreError(f"store {root}: cannot {doing}: {why} ({where})")


def validate_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id) or run_id in (".", ".."):
        raise StoreError(
            f"invalid run id {run_id!r}: use 1-128 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit"
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
        row["ingested_at"] = datetime.now(UTC).replace(tzinfo=None)
        return schema.conform("sources", pl.DataFrame([row]))


class Store:
    def __init__(self, root: str | os.PathLike | None = None):
        self.root = resolve_store(root)
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"store {self.root}: is a file, not a folder (give --store a folder)")
        self.sweep()

    # -- crash leftovers ---------------------------------------------------------
    def sweep(self) -> None:
        """Remove staging of dead ingests, roll committed pending data forward, remove data
        files no manifest commits and report temporaries of dead processes (see the module
        docstring); never fails (a read-only store is left alone)."""
        try:
            tmp = self.root / ".tmp"
            if tmp.is_dir():
                for folder in tmp.iterdir():
                    if _staging_is_stale(folder):
                        shutil.rmtree(folder, ignore_errors=True)
            self._sweep_tables()
            self._sweep_report_tmp()
        except OSError:
            pass

    def _sweep_tables(self) -> None:
        tables = self.root / "tables"
        if not tables.is_dir():
            return
        now = time.time()
        for table_dir in tables.iterdir():
            if table_dir.name == "sources" or not table_dir.is_dir():
                continue
            for run_dir in table_dir.iterdir():
                manifests = tables / "sources" / run_dir.name
                for f in run_dir.glob(f".*{PENDING_SUFFIX}"):
                    _settle_pending(f, manifests)
                for f in run_dir.glob("*.parquet"):
                    # re-checked per file: a manifest is renamed before its data, so a data
                    # file seen here whose manifest is missing is not a commit in progress
                    if not (manifests / f.name).exists() and now - f.stat().st_ctime >= ORPHAN_DATA_S:
                        f.unlink(missing_ok=True)

    def _sweep_report_tmp(self) -> None:
        """Report temporaries (`temp_path`) of a dead process on this host; of another host
        (or an older version's `.<name>.<pid>.tmp`) after STALE_STAGING_S without a write."""
        runs = self.root / "runs"
        if not runs.is_dir():
            return
        for f in runs.glob("*/.*.tmp"):
            m = _REPORT_TMP_RE.match(f.name)
            dead = m is not None and m["host"] == _HOST and not _pid_alive(int(m["pid"]))
            if dead or time.time() - f.stat().st_mtime > STALE_STAGING_S:
                f.unlink(missing_ok=True)

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
        rows = pl.concat([pl.read_parquet(f) for f in files], how="vertical_relaxed").sort("ingested_at")
        # two copies of one file (a crash between a replacing commit and the removal of the
        # copy it replaces): the newest is the file, and the older copy goes now
        newest = rows.unique(["path", "source"], keep="last", maintain_order=True)
        if newest.height < rows.height:
            kept = set(newest.get_column("sha256").to_list())
            for sha in set(rows.get_column("sha256").to_list()) - kept:
                self._remove_source(run_id, f"{sha[:16]}.parquet")
        return newest

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
        for f in self._table_dir(table, run_id).glob(f".*{PENDING_SUFFIX}"):  # a commit in its last milliseconds
            _settle_pending(f, self._table_dir("sources", run_id))
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
        """A fresh staging folder under `<store>/.tmp/` for one source's tables, named
        after this host and process so a later sweep can tell whether it is stale."""
        try:
            self._ensure_root()
            return Staging(self.root / ".tmp" / f"{_HOST}-{os.getpid()}-{uuid.uuid4().hex}", self.root)
        except OSError as exc:
            raise store_os_error(exc, self.root, "write") from None

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
        """Data files beside their place under hidden pending names, then the manifest row
        (the commit point), then the data files' final names; then the earlier copies of
        the same file (same path and source name, other content: a log that grew or was
        rewritten) are removed, data first. A commit that fails before its manifest removes
        the pending files it moved. Readers see one copy: `sources` keeps the newest of such
        rows, so a crash between the commit and the removal is invisible to the tool, and the
        next read of the run's sources removes the older copy."""
        name = f"{record.sha256[:16]}.parquet"
        manifest_dst = self._table_dir("sources", run_id) / name
        pending: list[tuple[Path, Path]] = []
        try:
            staged = stage.finish()
            kill_point("staging_finished")
            manifest = stage.folder / "sources.manifest.parquet"
            _write_parquet(record.frame(), manifest)
            kill_point("manifest_staged")
            for table, src in staged.items():
                dst = self._table_dir(table, run_id) / name
                dst.parent.mkdir(parents=True, exist_ok=True)
                hidden = dst.with_name(f".{name}.{stage.folder.name}{PENDING_SUFFIX}")
                os.replace(src, hidden)
                pending.append((hidden, dst))
                kill_point("data_pending")
            manifest_dst.parent.mkdir(parents=True, exist_ok=True)
            kill_point("before_manifest")
            os.replace(manifest, manifest_dst)  # the commit point
        except BaseException as exc:
            for hidden, _ in pending:
                try:
                    hidden.unlink(missing_ok=True)
                except OSError:
                    pass
            if isinstance(exc, OSError):
                raise store_os_error(exc, self.root, "write") from None
            raise
        kill_point("after_manifest")
        for hidden, dst in pending:
            try:
                os.replace(hidden, dst)
            except FileNotFoundError:
                if not dst.exists():  # a concurrent reader rolled it forward, else a real loss
                    raise
            except OSError as exc:
                raise store_os_error(exc, self.root, "write") from None
            kill_point("data_renamed")
        kill_point("before_drop")
        self._drop_replaced(run_id, record)

    def _drop_replaced(self, run_id: str, record: SourceRecord) -> None:
        """Remove earlier copies of `record`'s file (same path and source, other sha): data
        first (the tool already reads only the newest copy; the direct read stops seeing
        the old rows at once), the manifest row last."""
        keep = record.sha256[:16]
        for f in self._table_dir("sources", run_id).glob("*.parquet"):
            if f.stem == keep:
                continue
            try:
                row = pl.read_parquet(f, columns=["path", "source"]).row(0)
            except Exception:
                continue
            if row == (record.path, record.source):
                self._remove_source(run_id, f.name)

    def _remove_source(self, run_id: str, name: str) -> None:
        """Remove one source's files: data first, the manifest row last; a read-only store is left as it is."""
        try:
            for table in schema.TABLES:
                if table != "sources":
                    (self._table_dir(table, run_id) / name).unlink(missing_ok=True)
            kill_point("drop_data_removed")
            (self._table_dir("sources", run_id) / name).unlink(missing_ok=True)
        except OSError:
            pass

    def delete_run(self, run_id: str) -> None:
        validate_run_id(run_id)
        for table in sorted(schema.TABLES, key=lambda t: t == "sources"):  # the manifests last
            shutil.rmtree(self._table_dir(table, run_id), ignore_errors=True)


class Staging:
    """One source's tables being written, under `<store>/.tmp/<id>/`: one Parquet file per
    table, appended to frame by frame (one row group per `append`, so a streaming parser's
    chunks never have to be held together). Commit with `Store.write_source`; use as a
    context manager, which removes the folder (and whatever was not committed) on exit."""

    def __init__(self, folder: Path, root: Path | None = None):
        self.folder = folder
        self.root = root if root is not None else folder.parent.parent
        folder.mkdir(parents=True)
        self.rows: dict[str, int] = {}  # table -> rows appended so far
        self._writers: dict[str, pq.ParquetWriter] = {}

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._close()
        except Exception:  # closing fails on a full disk: the folder goes all the same
            self._writers.clear()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _path(self, table: str) -> Path:
        return self.folder / f"{table}.parquet"

    def append(self, table: str, frame: pl.DataFrame) -> None:
        """Add rows to a table (conformed to its schema); empty frames add nothing. A write
        that fails (full disk, ...) is a StoreError naming the store."""
        if frame.height == 0:
            return
        try:
            self._append(table, frame)
        except OSError as exc:
            raise store_os_error(exc, self.root, "write") from None

    def _append(self, table: str, frame: pl.DataFrame) -> None:
        arrow = _with_metadata(schema.conform(table, frame).to_arrow())
        writer = self._writers.get(table)
        if writer is None:
            writer = self._writers[table] = pq.ParquetWriter(
                self._path(table), arrow.schema, compression="zstd", use_dictionary=_dictionary_columns(table)
            )
        writer.write_table(arrow, row_group_size=arrow.num_rows)
        self.rows[table] = self.rows.get(table, 0) + arrow.num_rows
        kill_point("staging_append")

    def rewrite(self, table: str, fix: Callable[[pl.DataFrame, int], pl.DataFrame]) -> None:
        """Replace every row group of `table` by `fix(rows, index of its first row)`, one row
        group in memory at a time (end-of-file rules a streaming parser can only apply
        after its last chunk)."""
        if not self.rows.get(table):
            return
        try:
            self._rewrite(table, fix)
        except OSError as exc:
            raise store_os_error(exc, self.root, "write") from None

    def _rewrite(self, table: str, fix: Callable[[pl.DataFrame, int], pl.DataFrame]) -> None:
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


def temp_path(path: Path) -> Path:
    """Where to write `path` before renaming it into place: hidden, named after this host and
    process, so that a later command can remove it if the process was killed mid-write."""
    return path.with_name(f".{path.name}.{_HOST}-{os.getpid()}.tmp")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process
    return True


def _settle_pending(f: Path, manifests: Path) -> None:
    """A pending data file `.<sha16>.parquet.<staging>.pending`: given its final name when
    its manifest row exists (a commit that was killed, or is in its last milliseconds);
    removed when none does and its staging owner is stale (dead, or idle an hour); else left
    (a live commit before its commit point). Never raises."""
    name = f.name[1:].split(".parquet.", 1)[0] + ".parquet"
    try:
        if (manifests / name).exists():
            os.replace(f, f.with_name(name))
        elif _owner_is_stale(f.name.split(".parquet.", 1)[-1][: -len(PENDING_SUFFIX)], f.stat().st_mtime):
            f.unlink(missing_ok=True)
    except OSError:
        pass


def _owner_is_stale(owner: str, mtime: float) -> bool:
    """Whether the process of a staging name `<host>-<pid>-<random>` is gone (this host), or
    the file saw no write for STALE_STAGING_S (another host)."""
    parts = owner.rsplit("-", 2)
    if len(parts) == 3 and parts[0] == _HOST and parts[1].isdigit() and int(parts[1]) != os.getpid():
        if not _pid_alive(int(parts[1])):
            return True
    return time.time() - mtime > STALE_STAGING_S


def _staging_is_stale(folder: Path) -> bool:
    """Whether a staging folder belongs to no live ingest (see the module docstring)."""
    try:
        newest = max([folder.stat().st_mtime, *(f.stat().st_mtime for f in folder.iterdir())])
    except OSError:
        return False
    idle = time.time() - newest
    parts = folder.name.rsplit("-", 2)
    if len(parts) == 3 and parts[0] == _HOST and parts[1].isdigit():
        pid = int(parts[1])
        if pid == os.getpid():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True  # its process is gone
        except OSError:
            pass  # alive (another user's process): fall back on age
        return idle > 24 * STALE_STAGING_S
    return idle > STALE_STAGING_S


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
    pq.write_table(
        _with_metadata(frame.to_arrow()), path, compression="zstd", use_dictionary=_dictionary_columns("sources")
    )
