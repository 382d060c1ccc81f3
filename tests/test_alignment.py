"""Batch manifest <-> log step alignment (spikeforensics/alignment.py), on hand-made frames and on
a labelled run whose manifest was renumbered."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from attribute_synth import metric_rows

from spikeforensics import api
from spikeforensics.alignment import manifest_offset
from spikeforensics.params import Params
from spikeforensics.rundata import RunData

TUNE = Path(__file__).parents[1] / "sample_logs" / "tune"


def _manifest_and_log(n=300, per_step=8, seed=0):
    rng = np.random.default_rng(seed)
    steps = np.repeat(np.arange(1, n + 1), per_step)
    trend = 3.0 * np.exp(-steps / 120) + 2.0
    losses = trend * np.exp(rng.normal(0, 0.15, steps.size))
    manifest = pl.DataFrame({"step": steps, "sample_id": [f"s{i}" for i in range(steps.size)], "sample_loss": losses})
    log = manifest.group_by("step").agg(pl.col("sample_loss").mean().alias("value")).sort("step")
    return manifest, log


@pytest.mark.parametrize("shift", [-2, -1, 1, 2])
def test_a_manifest_counted_off_the_log_is_found(shift):
    manifest, log = _manifest_and_log()
    found = manifest_offset(manifest.with_columns(pl.col("step") - shift), log)
    assert found.offset == shift and found.corr > 0.95 and found.corr_as_written < 0.2
    assert ("behind" if shift > 0 else "ahead of") in found.summary


def test_an_aligned_manifest_stays_as_written():
    manifest, log = _manifest_and_log()
    found = manifest_offset(manifest, log)
    assert found.offset == 0 and found.corr > 0.95
    # the trend alone (no noise in common) must not move it: another draw of the same trend
    other, _ = _manifest_and_log(seed=1)
    found = manifest_offset(other, log)
    assert found is not None and found.offset == 0


def test_nothing_to_check_without_sample_losses_or_with_a_sparse_log():
    manifest, log = _manifest_and_log()
    assert manifest_offset(manifest.with_columns(pl.lit(None, pl.Float64).alias("sample_loss")), log) is None
    assert manifest_offset(manifest, log.filter(pl.col("step") % 10 == 0)) is None  # every 10th step logged
    assert manifest_offset(manifest.filter(pl.col("step") < 10), log) is None  # too few steps


def test_run_data_shifts_the_manifest_it_hands_to_tracing():
    manifest, log = _manifest_and_log()
    metrics = metric_rows("loss", log.get_column("step").to_list(), log.get_column("value").to_list())
    run = RunData.from_frames("r", metrics=metrics, batches=manifest.with_columns(pl.col("step") - 1))
    rows, _ = run.manifest()
    assert rows.get_column("step").min() == 1 and run.manifest_alignment().offset == 1
    from spikeforensics.params import TracingParams

    off = TracingParams(align_max_offset=0)
    assert run.manifest(off)[0].get_column("step").min() == 0 and run.manifest_alignment(off) is None


@pytest.mark.parametrize("shift", [1, -2])
def test_renumbered_manifest_of_a_labelled_run_traces_the_same_samples(tmp_path, shift):
    # a manifest counting `shift` steps ahead of the log (+1: it counts the batch it is about to serve)
    folder = TUNE / "data_outlier_noclip"
    truth = json.loads((folder / "ground_truth.json").read_text())
    culprits = set(truth["incidents"][0]["sample_ids"])
    shifted = tmp_path / "run"
    shifted.mkdir()
    for p in folder.iterdir():
        if p.name != "ground_truth.json" and not p.name.startswith("batches"):
            shutil.copy(p, shifted / p.name)
    (manifest,) = [p for p in folder.iterdir() if p.name.startswith("batches")]
    frame = pl.read_parquet(manifest) if manifest.suffix == ".parquet" else pl.read_ndjson(manifest)
    frame.with_columns(pl.col("step") + shift).write_parquet(shifted / "batches.parquet")
    store = tmp_path / "store"
    api.ingest([shifted], run_id="s", store=store)

    def top5(params=None):
        d = api.diagnose("s", store=store, params=params)
        inc = [i for i in d["incidents"] if i["root_cause"] == "data_outlier"][0]
        return set(inc["sample_ids"][:5]), [n for n in d["notes"] if n["kind"] == "manifest_alignment"]

    found, notes = top5()
    assert found <= culprits and len(found) == 5
    assert len(notes) == 1 and f"{-shift:+d}" in notes[0]["summary"]
    assert all(isinstance(notes[0][k], int) for k in ("step_start", "step_end", "peak_step"))
    # the same run with the check turned off traces the wrong batch
    found, notes = top5(Params.load(overrides=["tracing.align_max_offset=0"]))
    assert not found & culprits and not notes
