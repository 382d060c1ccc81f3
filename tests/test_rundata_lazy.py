"""Issues 14/16: a big run's long metrics table stays a lazy scan of the store's Parquet files, with the same
diagnosis as the eager table; the cached series hold their constant columns as constants, not a buffer per row."""

from __future__ import annotations

import json

import polars as pl
import pytest
from conftest import SAMPLE_LOGS, load_tune_run

from spikeforensics import api, rundata
from spikeforensics.attribute import diagnose_run
from spikeforensics.params import Params

TUNE_CASES = ["nan_recurs_after_resume", "hardware_fault_ddp", "fp16_overflow_storm", "data_outlier_clip"]
REAL_CASES = [
    "deepspeed-chat-dpo-opt350m-grad-overflow-8-ranks",
    "hf-trainer-timemoe-71-intermittent-gradnorm-nan",
    "lightning-opal-v2-version0-metrics-lr-rows-5400",
]


def _both(monkeypatch, store, run_id):
    eager = rundata.RunData.load(store, run_id)
    monkeypatch.setattr(rundata, "EAGER_METRIC_ROWS", 0)
    lazy = rundata.RunData.load(store, run_id)
    monkeypatch.undo()
    return eager, lazy


def _same_diagnosis(eager, lazy):
    assert isinstance(eager.metrics, pl.DataFrame)
    assert isinstance(lazy.metrics, pl.LazyFrame)  # the long table is not held in memory
    assert lazy.metric_rows() == eager.metrics.height > 0
    assert lazy.metric_names() == eager.metric_names() and lazy.ranks() == eager.ranks()
    for name in ("loss", "grad_norm", "lr"):
        assert lazy.series(name).equals(eager.series(name))
    params = Params.load()
    a, b = diagnose_run(eager, params), diagnose_run(lazy, params)
    assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


@pytest.mark.parametrize("name", TUNE_CASES)
def test_lazy_metrics_diagnose_as_eager_tune(tune_store, monkeypatch, name):
    load_tune_run(tune_store, name)
    _same_diagnosis(*_both(monkeypatch, tune_store, name))


@pytest.mark.parametrize("case", REAL_CASES)
def test_lazy_metrics_diagnose_as_eager_real(store, monkeypatch, case):
    files = sorted(f for f in (SAMPLE_LOGS / "real" / "dev" / case).iterdir() if f.name != "FACTS.toml")
    api.ingest([str(f) for f in files], run_id="r", store=store)
    _same_diagnosis(*_both(monkeypatch, store, "r"))


def test_small_runs_stay_eager(tune_store):
    run = load_tune_run(tune_store, "clean")
    assert isinstance(run.metrics, pl.DataFrame) and run.metric_rows() == run.metrics.height


def test_series_hold_constant_columns_as_constants(tune_store):
    run = load_tune_run(tune_store, "clean")
    loss = run.series("loss")
    held = loss.estimated_size()  # first: a column taken out with get_column stays materialised
    # every column materialised: the source (a string a row) and the single attempt (4 bytes) come back
    full = pl.DataFrame([loss.get_column(c) for c in loss.columns])
    assert loss.height > 100 and full.equals(loss) and full.get_column("source").n_unique() == 1
    assert full.estimated_size() - held >= 10 * loss.height
