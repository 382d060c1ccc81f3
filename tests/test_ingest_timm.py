"""timm `train.py` / `validate.py` stdout (`spikeforensics/ingest/timm.py`): the real dev cases
as the driver ingests them, the variants `train_one_epoch` / `validate` print
(huggingface/pytorch-image-models train.py, 2019-22 `.format` and 2023+ f-string forms, and
copies that add or drop meters), and near-miss lines of other frameworks that must not be
claimed."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from _ingest_helpers import ingest, train_steps, write

from spikeforensics.ingest import detect_format

DEV = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "dev"
VITAE = DEV / "timm-vitae-small-mlp-imagenet-43-epochs-healthy"
HPU = DEV / "timm-optimum-habana-resnet50-hpu-readme-two-epochs"


def value(metrics, step, name, record=True, which=0):
    rows = metrics.filter((pl.col("step") == step) & (pl.col("name") == name))
    rows = rows.filter(pl.col("record").is_not_null() if record else pl.col("record").is_null()).sort("line")
    assert rows.height > which, (step, name, rows)
    if record:
        assert rows.height == 1, (step, name, rows)
    return rows.item(which, "value")


def test_real_vitae_timm_0_4_12_log(store):
    path = VITAE / "mlp.log"
    assert detect_format(path)[0] == "timm"
    metrics, events, outcome = ingest(store, path)
    assert outcome.format == "timm" and outcome.unparsed == 0
    steps = train_steps(metrics)
    assert len(steps) == 8611  # FACTS step_records
    assert steps[0] == 0 and steps[-1] == 42 * 10009 + 6300  # FACTS first_step / last_step
    assert steps == sorted(set(steps))
    assert 10008 in steps and 10009 in steps  # last batch of epoch 0, then epoch 1 batch 0
    assert value(metrics, 0, "loss") == pytest.approx(6.948947)  # the current value, not (6.9489)
    assert value(metrics, 0, "lr") == pytest.approx(1e-6)
    assert value(metrics, 0, "step_time_ms") == pytest.approx(21288.0)
    assert value(metrics, 0, "data_time") == pytest.approx(16.386)
    assert value(metrics, 10009, "loss") == pytest.approx(6.803717)
    # after epoch 0: `Test: [   0/390]` and `Test (EMA): [   0/390]` lines, eval records at the last train step
    assert value(metrics, 10008, "eval_loss", record=False) == pytest.approx(6.2366)
    assert value(metrics, 10008, "eval_acc5", record=False) == pytest.approx(17.9688)
    assert value(metrics, 10008, "eval_ema_loss", record=False) == pytest.approx(6.9458)
    assert metrics.filter(pl.col("name") == "eval_loss").height == 378
    assert metrics.filter(pl.col("name") == "eval_ema_loss").height == 378
    assert events.filter(pl.col("kind") == "nan").height == 0  # FACTS: no first_nonfinite_step


def test_real_optimum_habana_new_format(store):
    path = HPU / "readme_lazy_mode_output.log"
    assert detect_format(path)[0] == "timm"
    metrics, _, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert train_steps(metrics) == [0, 50, 73, 123]  # FACTS: 4 records, epoch * 73 + batch
    assert value(metrics, 123, "loss") == pytest.approx(3.23)
    assert value(metrics, 73, "lr") == pytest.approx(1.001e-2)
    assert value(metrics, 123, "eval_loss", record=False, which=1) == pytest.approx(1.462)
    assert value(metrics, 123, "eval_acc1", record=False, which=1) == pytest.approx(63.529)


# 2019-21 `.format` print: `Loss: {loss.val:>9.6f} ({loss.avg:>6.4f})`, so nan is `      nan (   nan)`
OLD = (
    "Scheduled epochs: 450\n"
    "Train: 0 [   0/5004 (  0%)]  Loss:  6.926911 (6.9269)  Time: 23.170s,    5.52/s  (23.170s,    5.52/s)"
    "  LR: 1.000e-06  Data: 8.405 (8.405)\n"
    "Train: 0 [5003/5004 (100%)]  Loss:  6.101 (6.5000)  Time: 0.214s, 1197.18/s  (0.608s,  421.14/s)"
    "  LR: 1.000e-06  Data: 0.013 (0.402)\n"
    "Test: [   0/195]  Time: 1.000 (1.000)  Loss:  6.0000 (6.0000)  Acc@1:  1.0000 ( 1.0000)  Acc@5:  5.0000 ( 5.0000)\n"
    "Test: [ 195/195]  Time: 0.100 (0.200)  Loss:  5.5000 (5.9000)  Acc@1:  2.0000 ( 1.5000)  Acc@5:  6.0000 ( 5.5000)\n"
    "Train: 1 [   0/5004 (  0%)]  Loss:  5.900000 (5.9000)  Time: 0.214s, 1197.18/s  (0.608s,  421.14/s)"
    "  LR: 2.133e-02  Data: 0.013 (0.402)\n"
    "Train: 1 [  50/5004 (  1%)]  Loss:       nan (   nan)  Time: 0.214s, 1197.18/s  (0.608s,  421.14/s)"
    "  LR: 2.133e-02  Data: 0.013 (0.402)\n"
    "Train: 1 [ 100/5004 (  2%)]  Loss:       inf (   nan)  Time: 0.214s, 1197.18/s  (0.608s,  421.14/s)"
    "  LR: 2.133e-02  Data: 0.013 (0.402)\n"
    "*** Best metric: 1.5 (epoch 0)\n"
)


def test_timm_old_format_with_nan(tmp_path, store):
    path = write(tmp_path, "train.log", OLD)
    assert detect_format(path)[0] == "timm"
    metrics, events, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert train_steps(metrics) == [0, 5003, 5004, 5054, 5104]
    assert math.isnan(value(metrics, 5054, "loss")) and math.isinf(value(metrics, 5104, "loss"))
    assert value(metrics, 5003, "eval_loss", record=False, which=1) == pytest.approx(5.5)
    nan = events.filter(pl.col("kind") == "nan")
    assert nan.get_column("step").min() == 5054


def test_timm_new_format_scientific_prefix_resume_and_ema(tmp_path, store):
    # 2023+ f-string: `Loss: {loss_now:#.3g} ({loss_avg:#.3g})`, `(update_idx + 1)` percentage,
    # a copy's logger timestamp prefix, a run resumed at epoch 40 (the loop variable keeps counting)
    text = (
        "2024-03-01 10:00:00,123 - train - INFO - Train: 40 [   0/1251 (  0%)]  Loss: 3.45 (3.45)"
        "  Time: 1.234s,  829.89/s  (1.234s,  829.89/s)  LR: 1.234e-03  Data: 0.567 (0.567)\n"
        "2024-03-01 10:01:00,123 - train - INFO - Train: 40 [  50/1251 (  4%)]  Loss: 1.23e+04 (2.47e+02)"
        "  Time: 0.300s, 3413.33/s  (0.320s, 3200.00/s)  LR: 1.234e-03  Data: 0.001 (0.012)\n"
        "2024-03-01 10:02:00,123 - train - INFO - Train: 40 [1250/1251 (100%)]  Loss: nan (nan)"
        "  Time: 0.300s, 3413.33/s  (0.320s, 3200.00/s)  LR: 1.234e-03  Data: 0.001 (0.012)\n"
        "2024-03-01 10:03:00,123 - train - INFO - Test: [   0/48]  Time: 4.404s (4.404s,   58.13/s)"
        "  Loss:  0.5665 (0.5665)  Acc@1:  89.453 ( 89.453)  Acc@5:  98.047 ( 98.047)\n"
        "2024-03-01 10:04:00,123 - train - INFO - Test (EMA): [  48/48]  Time: 0.404s (1.404s,   58.13/s)"
        "  Loss:  0.6000 (0.6100)  Acc@1:  88.000 ( 88.000)  Acc@5:  98.000 ( 98.000)\n"
    )
    path = write(tmp_path, "train.log", text)
    assert detect_format(path)[0] == "timm"
    metrics, events, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert train_steps(metrics) == [40 * 1251, 40 * 1251 + 50, 40 * 1251 + 1250]
    assert value(metrics, 40 * 1251 + 50, "loss") == pytest.approx(12300.0)
    assert math.isnan(value(metrics, 40 * 1251 + 1250, "loss"))
    last = 40 * 1251 + 1250
    assert value(metrics, last, "eval_loss", record=False) == pytest.approx(0.5665)
    assert value(metrics, last, "eval_step_time_ms", record=False) == pytest.approx(4404.0)
    assert value(metrics, last, "eval_ema_loss", record=False) == pytest.approx(0.6)
    assert metrics.filter(pl.col("step") == 40 * 1251).get_column("time").drop_nulls().len() > 0
    assert events.filter(pl.col("kind") == "nan").get_column("step").min() == last


def test_timm_copies_with_extra_or_fewer_meters(tmp_path, store):
    text = (
        # distillation copy: KD-Loss and Prec@1 meters
        "Train: 0 [   0/100 (  0%)]  Loss:  2.500000 (2.5000)  KD-Loss:  1.250000 (1.2500)"
        "  Prec@1:  10.0000 ( 10.0000)  Prec@5:  50.0000 ( 50.0000)  Time: 0.500s,  256.00/s"
        "  (0.500s,  256.00/s)  LR: 1.000e-03  Data: 0.100 (0.100)\n"
        # a copy that appends the grad norm and an elapsed/ETA field
        "Train: 0 [  10/100 ( 11%)]  Loss: 2.40 (2.45)  Grad Norm: nan (3.21)  LR: 1.000e-03"
        "  Data: 0.100 (0.100)  Elapsed/ETA: 10.0s / 90.0s\n"
        # the `losses_info` copy: Loss, per-component losses, LR only, single spaces
        "Train: 0 [  20/100 ( 20%)]  Loss: 2.300 (2.40)  Loss_gt: 2.000 (2.10) LR: 1.000e-03\n"
        # multi-word loss names
        "Train: 0 [  30/100 ( 30%)]  Loss dec noun:  0.500000  Loss bbox:  0.250000  Loss:  2.200000 (2.3000)"
        "  LR: 1.000e-03\n"
    )
    path = write(tmp_path, "train.log", text)
    assert detect_format(path)[0] == "timm"
    metrics, events, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert train_steps(metrics) == [0, 10, 20, 30]
    assert value(metrics, 0, "kd_loss") == pytest.approx(1.25)
    assert value(metrics, 0, "prec1") == pytest.approx(10.0) and value(metrics, 0, "loss") == pytest.approx(2.5)
    assert math.isnan(value(metrics, 10, "grad_norm"))
    assert metrics.filter(pl.col("name").str.contains("eta|elapsed")).height == 0
    assert value(metrics, 20, "loss") == pytest.approx(2.3) and value(metrics, 20, "lr") == pytest.approx(1e-3)
    assert value(metrics, 30, "loss") == pytest.approx(2.2)
    assert value(metrics, 30, "loss_dec_noun") == pytest.approx(0.5)
    assert events.filter(pl.col("kind") == "nan").get_column("step").min() == 10


def test_timm_does_not_claim_near_misses(tmp_path):
    # MetricLogger (DeiT / MAE): `Epoch: [e]  [i/n]` with lower-case meters
    ml = "".join(
        f"Epoch: [0]  [{i:4d}/1251]  eta: 0:20:52  lr: 0.000201  loss: 6.8610 (6.8841)  time: 1.0552  data: 0.0035\n"
        for i in range(0, 500, 100)
    )
    assert detect_format(write(tmp_path, "ml.log", ml))[0] != "timm"
    # PyTorch ImageNet example ProgressMeter
    pm = "".join(
        f"Epoch: [0][{i:4d}/5005]\tTime  0.352 ( 0.421)\tData  0.001 ( 0.070)\tLoss 6.9012e+00 (6.9079e+00)\n"
        for i in range(0, 500, 100)
    )
    assert detect_format(write(tmp_path, "pm.log", pm))[0] != "timm"
    # mmengine
    mm = "".join(
        f"10/30 22:18:02 - mmengine - INFO - Epoch(train) [1][{i}/735]  lr: 1.98e-04  eta: 2:44:49"
        f"  time: 2.8874  data_time: 0.0042  memory: 10762  loss: 2.5128\n"
        for i in range(50, 300, 50)
    )
    assert detect_format(write(tmp_path, "mm.log", mm))[0] != "timm"
    # a prose line with `Train:` and a bracket, no meters
    prose = "Train: 3 [see notes/5]\nTrain: 0 [10/20] done\n"
    assert detect_format(write(tmp_path, "prose.log", prose))[0] != "timm"
