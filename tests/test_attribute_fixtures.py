"""Attribution and sample tracing on the labelled tune fixtures (real runs of a tiny GPT with
injected faults; see tools/README.md). Only the `tune` set is used here.

Each labelled incident's best matching prediction must carry the labelled root cause, a hardware
fault must never be blamed on data, and a data incident's first five sample IDs must be labelled
ones. The same runs with the per-sample losses dropped from the manifest (as some real manifests
have none) must still be attributed, with samples ranked from recurrence and step membership.
"""

from __future__ import annotations

import dataclasses
import json

import polars as pl
import pytest
from conftest import TUNE  # noqa: E402
from conftest import load_tune_run as load

from spikeforensics import evaluate
from spikeforensics.attribute import diagnose_run
from spikeforensics.params import Params
from spikeforensics.rundata import RunData

RUNS = sorted(p.parent.name for p in TUNE.glob("*/ground_truth.json")) if TUNE.exists() else []
LABELLED = [r for r in RUNS if not json.loads((TUNE / r / "ground_truth.json").read_text()).get("healthy")]


@pytest.fixture(scope="module")
def store(tune_store):
    return tune_store


def score(run: RunData, name: str) -> evaluate.RunScore:
    truth = json.loads((TUNE / name / "ground_truth.json").read_text())
    return evaluate.score_run(diagnose_run(run, Params()), truth, run=name)


def without_sample_losses(run: RunData) -> RunData:
    return dataclasses.replace(
        run, batches=run.batches.with_columns(pl.lit(None, dtype=pl.Float64).alias("sample_loss"))
    )


@pytest.mark.skipif(not LABELLED, reason="no tune fixtures")
@pytest.mark.parametrize("name", LABELLED)
def test_root_cause_and_samples(store, name):
    s = score(load(store, name), name)
    for t in s.truths:
        assert t.detected, (name, t.kind)
        assert t.pred_root_cause == t.root_cause, (name, t.kind, t.pred_root_cause)
        if t.sample_recall is not None:
            assert t.sample_recall == 1.0, (name, t.step_start)


@pytest.mark.skipif("data_recurring" not in RUNS, reason="no tune fixtures")
def test_recurring_sample_found_without_sample_losses(store):
    s = score(without_sample_losses(load(store, "data_recurring")), "data_recurring")
    assert [t.pred_root_cause for t in s.truths] == ["data_outlier"] * 3
    assert [t.sample_recall for t in s.truths] == [1.0, 1.0, 1.0]


@pytest.mark.skipif("data_outlier_clip" not in RUNS, reason="no tune fixtures")
def test_one_off_outlier_without_sample_losses_ranks_the_peak_step_first(store):
    run = without_sample_losses(load(store, "data_outlier_clip"))
    diagnosis = diagnose_run(run, Params())
    inc = diagnosis["incidents"][0]
    assert inc["root_cause"] == "data_outlier" and inc["features"]["has_sample_losses"] is False
    assert {s["step"] for s in inc["samples"][:5]} == {inc["peak_step"]}


@pytest.mark.skipif("nan_resume_no_recurrence" not in RUNS, reason="no tune fixtures")
def test_nan_sample_clean_on_replay_is_not_data(store):
    run = load(store, "nan_resume_no_recurrence")
    inc = diagnose_run(run, Params())["incidents"][0]
    assert inc["features"]["sample_loss_nonfinite"] is True and inc["features"]["sample_replay_recurred"] is False
    assert inc["root_cause"] == "hardware_fault" and inc["label_scores"].get("data_outlier", 0) == 0
    # without the kernel log and telemetry the replay alone must still keep it off data
    bare = dataclasses.replace(run, events=run.events.clear(), telemetry=run.telemetry.clear())
    assert diagnose_run(bare, Params())["incidents"][0]["root_cause"] not in ("data_outlier", "data_drift")
