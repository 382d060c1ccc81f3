"""The library entry points. Every CLI command is a few lines over one of these.

from spikeforensics import api
report = api.ingest(["train.log", "grads.csv"], run_id="r1")
diagnosis = api.diagnose("r1")
paths = api.write_reports(diagnosis, "r1")
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from spikeforensics.store import Store, StoreError, validate_run_id


class UnknownRunError(StoreError):
    pass


class RunConflictError(ValueError):
    """`diagnose PATH --run X` where run X already holds other sources (and no `--append`)."""


def run_for_paths(
    paths: list[str | os.PathLike],
    run_id: str | None = None,
    store: str | os.PathLike | Store | None = None,
    append: bool = False,
    follow_symlinks: bool = False,
) -> tuple[str, str | None]:
    """The run that `diagnose PATH` ingests into, and a note when it is not the obvious one.

    CONTRACT.md: `diagnose PATH` never adds files to a run that already holds other sources.
    A run that holds nothing, or exactly these files (same content), is used as it is; with
    `append` any run is. Otherwise a run named after the path gets a fresh name (`train-2`,
    `train-3`, ...), and a run named with `--run` is refused (RunConflictError)."""
    from spikeforensics.ingest import expand_paths, file_sha256
    from spikeforensics.store import run_id_from_path

    st = open_store(store)
    explicit = run_id is not None
    base = validate_run_id(run_id if explicit else run_id_from_path(paths[0]))
    if append:
        return base, None
    shas: set[str] | None = None

    def holds_only_these(rid: str) -> bool:
        nonlocal shas
        if not st.has_run(rid):
            return True
        held = set(st.sources(rid).get_column("sha256").to_list())
        if not held:
            return True
        if shas is None:
            shas = {file_sha256(f) for f, _, _ in expand_paths(list(paths), follow_symlinks)}
        return held == shas

    if holds_only_these(base):
        return base, None
    if explicit:
        raise RunConflictError(
            f"run {base!r} already holds other sources; diagnose it with --run {base} alone, "
            f"add these files to it with --append, or pick another --run"
        )
    for k in range(2, 1000):
        candidate = validate_run_id(f"{base[:120]}-{k}")
        if holds_only_these(candidate):
            return (
                candidate,
                f"run {base!r} already holds other sources: ingesting into run {candidate!r} (use --append to add to {base!r})",
            )
    raise RunConflictError(f"no free run name after {base}-999; pick one with --run")


def open_store(store: str | os.PathLike | Store | None = None) -> Store:
    return store if isinstance(store, Store) else Store(store)


def ingest(
    paths: list[str | os.PathLike],
    run_id: str | None = None,
    store: str | os.PathLike | Store | None = None,
    fmt: str | None = None,
    progress: Callable[[str], None] | None = None,
    aliases: str | os.PathLike | None = None,
    follow_symlinks: bool = False,
):
    """Ingest files/folders into a run; returns an `IngestReport`. See `spikeforensics.ingest`.
    `aliases`: a TOML file extending the alias tables for this ingest only (else
    $SPIKEFORENSICS_ALIASES). `follow_symlinks`: follow symlinks that lead out of a folder."""
    from spikeforensics.ingest import ingest_paths
    from spikeforensics.ingest.aliases import user_aliases
    from spikeforensics.store import run_id_from_path

    run_id = validate_run_id(run_id or run_id_from_path(paths[0]))
    with user_aliases(aliases):
        return ingest_paths(
            list(paths), run_id, open_store(store), fmt=fmt, progress=progress, follow_symlinks=follow_symlinks
        )


@dataclass
class RunSummary:
    run_id: str
    sources: int
    formats: list[str]
    records: int
    unparsed: int
    first_step: int | None
    last_step: int | None
    ingested_at: str


def runs(store: str | os.PathLike | Store | None = None) -> list[RunSummary]:
    st = open_store(store)
    out = []
    for run_id in st.runs():
        src = st.sources(run_id)
        first, last = (
            st.scan(run_id, "metrics")
            .filter(pl.col("record").is_not_null())
            .select(pl.col("step").min().alias("first"), pl.col("step").max().alias("last"))
            .collect()
            .row(0)
        )
        out.append(
            RunSummary(
                run_id=run_id,
                sources=src.height,
                formats=sorted(set(src.get_column("format").to_list())),
                records=int(src.get_column("records").sum()),
                unparsed=int(src.get_column("unparsed").sum()),
                first_step=first,
                last_step=last,
                ingested_at=str(src.get_column("ingested_at").max()),
            )
        )
    return out


def load_run(run_id: str, store: str | os.PathLike | Store | None = None):
    from spikeforensics.rundata import RunData

    st = open_store(store)
    if not st.has_run(validate_run_id(run_id)):
        known = ", ".join(st.runs()) or "none"
        raise UnknownRunError(f"unknown run {run_id!r} in store {st.root} (runs: {known})")
    return RunData.load(st, run_id)


def export(run_id: str, table: str, store: str | os.PathLike | Store | None = None) -> pl.DataFrame:
    from spikeforensics.export import EXPORT_TABLES, export_frame

    if table not in EXPORT_TABLES:
        raise ValueError(f"unknown table {table!r}; one of {', '.join(EXPORT_TABLES)}")
    st = open_store(store)
    if not st.has_run(validate_run_id(run_id)):
        raise UnknownRunError(f"unknown run {run_id!r} in store {st.root}")
    frame = st.sources(run_id) if table == "sources" else st.table(run_id, table)
    return export_frame(table, frame)


def _as_run(run, store):
    from spikeforensics.rundata import RunData

    return run if isinstance(run, RunData) else load_run(run, store)


def diagnose(
    run,
    store: str | os.PathLike | Store | None = None,
    params=None,
    rule_dirs: list[str | os.PathLike] | None = None,
) -> dict:
    """Detect, group and attribute the incidents of a run (a run id or a loaded
    `RunData`): the diagnosis.json dict."""
    from spikeforensics.attribute import diagnose_run
    from spikeforensics.params import Params

    run = _as_run(run, store)
    return diagnose_run(run, params or Params.load(), rule_dirs=[Path(d) for d in rule_dirs or []])


def default_report_paths(
    run_id: str,
    store: str | os.PathLike | Store | None = None,
    out: str | os.PathLike | None = None,
    json_path: str | os.PathLike | None = None,
):
    st = open_store(store)
    html = Path(out) if out else st.run_dir(run_id) / "report.html"
    js = Path(json_path) if json_path else html.with_suffix(".json")  # X.html -> X.json (CONTRACT.md)
    return html, js, html.with_suffix(".md")


def write_reports(
    diagnosis: dict,
    run,
    store: str | os.PathLike | Store | None = None,
    out: str | os.PathLike | None = None,
    json_path: str | os.PathLike | None = None,
    max_points: int = 2000,
) -> dict[str, Path]:
    """Write X.html, X.json, X.skiplist.json (beside the JSON) and X.md for a
    run (id or `RunData`); return their paths."""
    from spikeforensics.report import write_reports as _write

    run = _as_run(run, store)
    run_id = run.run_id
    html, js, md = default_report_paths(run_id, store, out, json_path)
    return _write(diagnosis, run, html_path=html, json_path=js, md_path=md, max_points=max_points)
