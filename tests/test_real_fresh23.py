"""What sample_logs/real/fresh23 first needed: AlgoPerf's `measurements.csv` (pandas `to_csv` of a MetricLogger:
`global_step,grad_norm,loss` rows every logged step, evaluation rows of `train/loss`, `validation/loss`,
`test/loss`, `score` between them, NaN written as an empty cell), and a soft-drift early phase counted in steps
as well as records (a log printing every step for 100 steps, then every 500)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from _detect_synth import run_from
from _ingest_helpers import real_case, series

from spikeforensics import api
from spikeforensics.detect import soft_drift
from spikeforensics.ingest import _tables as T
from spikeforensics.params import Params


def real(store, name):
    return real_case(store, "fresh23", name)


IMAGENET = "algoperf-pytorch-imagenet-resnet-adamg-self-tuning-healthy-1094-records"
CRITEO = "algoperf-pytorch-criteo1tb-shampoo-sgd-grafting-lr-4-2-diverges-step74-gradnorm-inf-step80"


def test_algoperf_evaluation_rows_are_not_step_losses(store):
    metrics, _, f, facts = real(store, IMAGENET)
    loss = series(metrics, "loss")
    assert f.format == "csv_metrics" and len(loss) == facts["step_records"] == 1094
    assert loss[0] == (0, 6.916313648223877)
    # the evaluation pass's `train/loss` keeps its own name, off the step records; `validation/loss` is eval_loss
    assert not series(metrics, "loss", train=False)
    assert len(series(metrics, "train_loss", train=False)) == len(series(metrics, "eval_loss", train=False)) == 372


def test_algoperf_healthy_run_is_healthy(tmp_path):
    from _ingest_helpers import REAL

    api.ingest([REAL / "fresh23" / IMAGENET / "measurements.csv"], run_id="r", store=tmp_path)
    d = api.diagnose(api.load_run("r", tmp_path))
    assert d["verdict"]["status"] == "healthy"


def test_rows_printing_only_a_step_after_training_rows_are_nan_steps(store):
    metrics, _, _, facts = real(store, CRITEO)
    loss = dict(series(metrics, "loss"))
    assert len(loss) == facts["step_records"] == 99
    assert loss[80] == 6.55492861050785e27 and all(math.isnan(loss[s]) for s in range(81, 99))
    assert all(math.isnan(v) for s, v in series(metrics, "grad_norm") if s > 80)


def test_a_test_metric_beside_a_steps_own_loss_keeps_the_row_a_training_record():
    # an MAE-style per-epoch dict: the training losses and, on some epochs, a test F1 on the same row
    frame = pl.DataFrame(
        {"train_loss": [0.7, 0.6, 0.4], "test_average_f1": [0.1, None, 0.2], "val_loss": [None, None, None]}
    )
    kinds = frame.select(T.classify_rows(frame, ["train_loss", "test_average_f1", "val_loss"])).to_series()
    assert kinds.to_list() == ["train", "train", "train"]
    # AlgoPerf's shape: the evaluation row prints none of the step rows' signals
    frame = pl.DataFrame(
        {"loss": [6.9, None, 6.8], "train/loss": [None, 6.91, None], "validation/loss": [None, 6.92, None]}
    )
    kinds = frame.select(T.classify_rows(frame, ["loss", "train/loss", "validation/loss"])).to_series()
    assert kinds.to_list() == ["train", "eval", "train"]


def test_the_early_phase_of_a_drift_is_counted_in_steps_too():
    # every step for the first 100 steps, then every 500 to 200,000: the grad norm grows 5x over the first
    # 5,000 steps (~10 records, after 100 records of step-by-step prints), then stays
    step = np.concatenate([np.arange(0, 101), np.arange(500, 200_001, 500)])
    rng = np.random.default_rng(0)
    grad = np.where(step < 5000, 0.7 + 3.8 * step / 5000, 4.5) * np.exp(rng.normal(0, 0.05, step.size))
    loss = (1.0 + 6.0 * np.exp(-step / 20_000)) * np.exp(rng.normal(0, 0.01, step.size))
    run = run_from({"step": step, "loss": loss, "grad_norm": grad})
    found = [f for f in soft_drift.detect(run, Params()) if f.severity != "info"]
    assert not found
