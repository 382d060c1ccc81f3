"""Shared helpers of the reader tests (tests/test_ingest_<format>.py): ingest one file through the
driver into the test store, and read back records and values."""

from __future__ import annotations

import tomllib
from pathlib import Path

import polars as pl

from spikeforensics.ingest import ingest_paths


def ingest(store, path, run="r"):
    """(metrics, events, file outcome) of one file ingested as run `run`; the ingest must succeed."""
    report = ingest_paths([path], run, store)
    assert report.ok, report.as_dict()
    return store.table(run, "metrics"), store.table(run, "events"), report.files[0]


def train_steps(metrics):
    """The step of each training-step record, in record order."""
    train = metrics.filter(pl.col("record").is_not_null())
    return train.select("record", "step").unique().sort("record").get_column("step").to_list()


def value(metrics, step, name, record=True):
    """The one value of `name` at `step` in a training record (`record=False`: an eval/summary record)."""
    rows = metrics.filter((pl.col("step") == step) & (pl.col("name") == name))
    rows = rows.filter(pl.col("record").is_not_null() if record else pl.col("record").is_null())
    assert rows.height == 1, (step, name, rows)
    return rows.item(0, "value")


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def series(metrics, name, train=True):
    """(step, value) pairs of `name` in file order, from training records (`train=False`: the others)."""
    rows = metrics.filter(pl.col("name") == name)
    rows = rows.filter(pl.col("record").is_not_null() if train else pl.col("record").is_null())
    return list(zip(*rows.sort("line").select("step", "value").to_dict(as_series=False).values()))


REAL = Path(__file__).resolve().parents[1] / "sample_logs" / "real"


def real_case(store, split, name):
    """(metrics, events, file outcome, facts) of the first file of a real-corpus case, ingested as run `r`."""
    folder = REAL / split / name
    facts = tomllib.loads((folder / "FACTS.toml").read_text())
    metrics, events, f = ingest(store, folder / facts["files"][0])
    return metrics, events, f, facts
