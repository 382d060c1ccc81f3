"""Readers first met in sample_logs/real/fresh15: DARTS's `train NNN <loss %e> <top1> <top5>` log (darts), and
TensorBoard scalars whose tag names its evaluation at the end (`Test loss (avg on test)`, `IoU (avg on test)`)."""

from __future__ import annotations

import pytest
from _ingest_helpers import ingest, real_case, series, train_steps, value, write

from spikeforensics import api
from spikeforensics.ingest._tables import is_eval_name


def real(store, name):
    return real_case(store, "fresh15", name)


def test_darts_train_lines_and_their_epoch(store):
    metrics, _, f, facts = real(store, "darts-asquaredm-nb201-search-wandb-output-cut-epoch11-healthy")
    steps = train_steps(metrics)
    # `05/31 02:32:57 PM train 000 2.345704e+00 6.250000 54.687500` every 50 batches of 0..350: an epoch spans 400
    assert f.format == "darts" and len(steps) == facts["step_records"] == 93
    assert steps[:3] == [0, 50, 100] and 400 in steps and steps == sorted(steps)
    assert value(metrics, 0, "loss") == pytest.approx(2.345704) and value(metrics, 0, "acc1") == 6.25
    assert value(metrics, 0, "lr") == pytest.approx(2.498816e-02) and value(metrics, 400, "epoch") == 1
    # `valid 000 1.711712e+00 28.125000 85.937500`: eval records at the step of the train line before them
    assert series(metrics, "eval_loss", train=False)[0] == (350, pytest.approx(1.711712))
    assert f.unparsed == 0


def test_darts_nan_loss(tmp_path, store):
    lines = ["05/31 02:32:56 PM epoch 0 lr 2.500000e-02"]
    lines += [f"05/31 02:3{i}:00 PM train {i * 50:03d} {2.3 - i * 0.05:e} 10.0 50.0" for i in range(6)]
    lines += ["05/31 02:40:00 PM epoch 1 lr 2.490000e-02", "05/31 02:40:01 PM train 000 nan 10.0 50.0"]
    metrics, _, f = ingest(store, write(tmp_path, "log.txt", "\n".join(lines) + "\n"))
    assert f.format == "darts" and train_steps(metrics)[-1] == 300
    diagnosis = api.diagnose(api.load_run("r", store))
    assert diagnosis["verdict"]["status"] == "unstable" and diagnosis["incidents"][0]["step_start"] == 300


def test_tensorboard_tags_naming_their_test_set_at_the_end_are_eval(store):
    pytest.importorskip("tensorboard")
    metrics, _, f, facts = real(store, "custom-pets-unet-lr2e3-tfevents-early-stopped-epoch17-healthy")
    # `Training loss` at epoch*115, `Test loss (avg on test)` and `IoU (avg on test)` one step later
    assert f.format == "tensorboard" and len(train_steps(metrics)) == facts["step_records"] == 17
    evals = series(metrics, "test_loss_avg_on_test", train=False)
    assert [s for s, _ in evals][:2] == [115, 230] and [s for s, _ in series(metrics, "iou_avg_on_test", train=False)][
        0
    ] == 115


def test_eval_names_by_suffix():
    assert is_eval_name("loss_val") and is_eval_name("IoU (avg on test)") and is_eval_name("acc_valid")
    assert not is_eval_name("latest_loss") and not is_eval_name("interval_loss") and not is_eval_name("loss")


# --- fresh16 (format drift of the mainstream frameworks) ---


def test_dinov2_iteration_header_and_an_average_turned_infinite(store):
    metrics, events, f, facts = real_case(store, "fresh16", "dinov2-492-koleo-loss-inf-global-average-iter1250")
    # `Training  [   1250/2500000]  eta: ...  total_loss: 6.7223 (inf)  ...`: the global iteration is the step
    assert f.format == "metriclogger" and train_steps(metrics) == [1250, 1260, 1270]
    assert value(metrics, 1250, "loss") == pytest.approx(6.7223)  # `total_loss` is the loss
    # the printed median is finite, its global average is not: an inf went into it within that interval
    bad = events.filter(events["kind"] == "nan")
    assert bad.height >= 1 and bad.get_column("step").min() == 1250 and '"in_average": true' in bad.item(0, "detail")
    assert api.diagnose(api.load_run("r", store))["verdict"]["status"] == "unstable"


def test_a_loss_setting_in_a_config_dump_is_no_record(store):
    metrics, _, f, facts = real_case(store, "fresh16", "dinov2-kostakat-mineral-vitb14-log-txt-healthy-warmup-350")
    # `OPTIONS -- DINO -- loss_weight: 1.0`, `koleo_loss_weight: 0.1` in the config echo are settings, not losses
    assert len(train_steps(metrics)) == facts["step_records"] == 36
    assert "loss_weight" not in metrics.get_column("name").to_list()
