"""What sample_logs/real/fresh33 and fresh34 first needed: Lightning's progress bar pads the floats it shows to five
characters, so a non-finite loss prints as `train_loss=inf.0` / `nan.0` (`-inf.`), and a run whose every loss
is non-finite was refused as a file with no usable record."""

from __future__ import annotations

import math

import polars as pl
from _ingest_helpers import REAL

from spikeforensics import api
from spikeforensics.ingest._fields import to_float
from spikeforensics.report.text import coverage_sentence

HP_VADE = REAL / "fresh33" / "lightning-hp-vade-deconvolution-train-loss-inf-step1-nan-all-4282-steps"


def test_lightning_padded_non_finite_values_parse():
    values = pl.DataFrame({"raw": ["nan.0", "inf.0", "-inf.", "+inf.00", "NaN", "0.279", "info.0", "nan.5"]})
    got = values.select(to_float(pl.col("raw"))).to_series().to_list()
    assert math.isnan(got[0]) and got[1] == math.inf and got[2] == -math.inf and got[3] == math.inf
    assert math.isnan(got[4]) and got[5] == 0.279
    assert got[6] is None and got[7] is None  # not a padded token: no value


def test_lightning_run_with_no_finite_loss_is_read_and_judged_unstable(tmp_path):
    """4,282 bar redraws (`Epoch 0: ... N/4282 [..., v_num=0, train_loss=inf.0]`, CR-separated, most steps drawn
    twice): one record per step, the loss inf at step 1 and NaN from step 2; the run is unstable from step 1."""
    store = tmp_path / "store"
    api.ingest([HP_VADE / "log_train.txt"], run_id="hp", store=store)
    loss = api.export("hp", "metrics", store).filter(pl.col("name") == "loss").sort("step")
    assert loss.height == 4282
    assert loss.get_column("step").to_list() == list(range(1, 4283))
    values = loss.get_column("value")
    assert values[0] == math.inf and values.slice(1).is_nan().all()
    diagnosis = api.diagnose("hp", store=store)
    assert diagnosis["verdict"]["status"] == "unstable"
    first = diagnosis["incidents"][0]
    coverage = diagnosis["verdict"]["coverage"]
    assert coverage["series_nonfinite"]["loss"] == 4282 and "loss" not in coverage["signals"]
    # the summary says the loss was read, not "Not read: loss"
    sentence = coverage_sentence(diagnosis)
    assert "Read, never finite: loss (4,282 records)" in sentence and "Not read: loss" not in sentence
    assert first["kind"] == "nonfinite" and first["step_start"] == 1 and first["first_nonfinite_step"] == 1


PADDLEGAN = REAL / "fresh34" / "paddlegan-fomm-vox-512-from-scratch-18-epochs-healthy-1690"


def test_paddlegan_trainer_lines_are_records_stepped_by_global_iteration(tmp_path):
    """fresh34: PaddleGAN's `Epoch: E/100, iter: I/991 lr: ... perceptual: ... equivariance_value: ...` lines (losses
    named by the model, none of them `loss`) were 'not a recognised training log'. 1,690 records, the step the global
    iteration (E - 1) * 991 + I: 10 .. 16900, three loss terms and the LR each."""
    from spikeforensics.ingest import detect_format

    log = next(PADDLEGAN.glob("*.log"))
    assert detect_format(log)[0] == "paddlegan"
    store = tmp_path / "store"
    api.ingest([log], run_id="pg", store=store)
    metrics = api.export("pg", "metrics", store)
    counts = dict(metrics.group_by("name").len().iter_rows())
    assert counts == {
        "loss_perceptual": 1690,
        "loss_equivariance_value": 1690,
        "loss_equivariance_jacobian": 1690,
        "lr": 1690,
    }
    steps = metrics.filter(pl.col("name") == "lr").get_column("step")
    assert steps.min() == 10 and steps.max() == 16900 and steps.is_sorted() and steps.n_unique() == 1690
    first = metrics.filter(pl.col("step") == 10).select("name", "value").sort("name").rows()
    assert first == [
        ("loss_equivariance_jacobian", 0.633),
        ("loss_equivariance_value", 1.148),
        ("loss_perceptual", 175.116),
        ("lr", 2.0e-4),
    ]


TIMEMIXER = REAL / "fresh34" / "timemixer-gas-well-vali-loss-nan-all-64-epochs-train-finite"


def test_a_validation_loss_nan_at_every_epoch_beside_a_finite_training_loss_is_a_warning(tmp_path):
    """fresh34: a TimeMixer fork's per-epoch CSV (`Epoch,Train_Loss,Vali_Loss,Test_Loss,...`) whose `Vali_Loss` is
    `nan` in all 64 rows while the training and test losses fall: judged healthy, the validation loss not read as
    one. `vali_loss` (the Time-Series-Library family's `Vali Loss`) is `eval_loss`; a held-out NaN beside a finite
    training loss is a warning on the evaluation, and the summary says the series was read but never finite."""
    store = tmp_path / "store"
    api.ingest([TIMEMIXER / "training_loss.csv"], run_id="tm", store=store)
    diagnosis = api.diagnose("tm", store=store)
    assert diagnosis["verdict"]["status"] == "degraded"
    [inc] = diagnosis["incidents"]
    assert inc["kind"] == "nonfinite" and inc["severity"] == "warning" and inc["step_start"] == 1
    assert inc["step_end"] == 64 and inc["features"]["nonfinite_heldout_only"] is True
    assert inc["root_cause"] in ("data_outlier", "model_bug")  # the evaluation's data or code, not the LR
    assert "Read, never finite: eval_loss (64 records)" in coverage_sentence(diagnosis)
