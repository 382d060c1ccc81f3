"""The library entry points. Every CLI command is a few lines over one of these.

    from spikeforensics import api
    report = api.ingest(["train.log", "grads.csv"], run_id="r1")
    diagnosis = api.diagnose("r1")
    paths = api.write_reports(diagnosis, "r1")
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import polars as pl

from spikeforensics.store import Store, StoreError, validate_run_id


class UnknownRunError(StoreError):
    pass


def open_store(store: str | os.PathLike | Store | None = None) -> Store:
    return store if isinstance(store, Store) else Store(store)


def ingest(
    paths: list[str | os.PathLike],
    run_id: str | None = None,
    store: str | os.PathLike | Store | None = None,
    fmt: str | None = None,
    progress: Callable[[str], None] | None = None,
):
    """Ingest files/folders into a run; returns an `IngestReport`. See `spikeforensics.ingest`."""
    from spikeforensics.ingest import ingest_paths
    from spikeforensics.store import run_id_from_path

    run_id = validate_run_id(run_id or run_id_from_path(paths[0]))
    return ingest_paths(list(paths), run_id, open_store(store), fmt=fmt, progress=progress)


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
            st.scan(run_id, "metrics").filter(pl.col("record").is_not_null())
            .select(pl.col("step").min().alias("first"), pl.col("step").max().alias("last")).collect().row(0)
        )
        out.append(RunSummary(
            run_id=run_id,
            sources=src.height,
            formats=sorted(set(src.get_column("format").to_list())),
            records=int(src.get_column("records").sum()),
            unparsed=int(src.get_column("unparsed").sum()),
            first_step=first,
            last_step=last,
            ingested_at=str(src.get_column("ingested_at").max()),
        ))
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


def default_report_paths(run_id: str, store: str | os.PathLike | Store | None = None,
                         out: str | os.PathLike | None = None, json_path: str | os.PathLike | None = None):
    st = open_store(store)
    html = Path(out) if out else st.run_dir(run_id) / "report.html"
    js = Path(json_path) if json_path else html.with_name("diagnosis.json")
    return html, js, html.with_suffix(".md")


def write_reports(
    diagnosis: dict,
    run,
    store: str | os.PathLike | Store | None = None,
    out: str | os.PathLike | None = None,
    json_path: str | os.PathLike | None = None,
    max_points: int = 2000,
) -> dict[str, Path]:
    """Write report.html, diagnosis.json, skiplist.json (beside the JSON) and report.md for a
    run (id or `RunData`); return their paths."""
    from spikeforensics.report import write_reports as _write

    run = _as_run(run, store)
    run_id = run.run_id
    html, js, md = default_report_paths(run_id, store, out, json_path)
    return _write(diagnosis, run, html_path=html, json_path=js, md_path=md, max_points=max_points)
