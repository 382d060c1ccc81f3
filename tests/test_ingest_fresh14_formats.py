"""Readers first met in sample_logs/real/fresh14: LAVIS's MetricLogger (`Train: data epoch: [e]`), the MONAI
research-contributions trainers' `Epoch e/N i/n loss:`, DeepXDE's `loss.dat` and GPUMD-NEP's `loss.out`
(loss_columns), SchNetPack's per-epoch `log.csv` without a counter, and a Markdown pipe table of training
metrics (HF Trainer's notebook table, pasted)."""

from __future__ import annotations

import math

import pytest
from _ingest_helpers import ingest, real_case, series, train_steps, value, write

from spikeforensics import api


def real(store, name):
    return real_case(store, "fresh14", name)


def test_lavis_metric_logger_lines_and_their_epoch_averages(store):
    metrics, _, f, facts = real(store, "lavis-blitext-blip2-stage1-qformer-pretrain-coco-healthy-10-epochs")
    steps = train_steps(metrics)
    # `Train: data epoch: [0]  [  50/4498]  eta: ...  lr: 0.000002  loss: 15.5648  time: 3.5467 ...`
    assert f.format == "metriclogger" and len(steps) == facts["step_records"] == 910
    assert steps[0] == 0 and steps[-1] == facts["last_step"] and value(metrics, 50, "loss") == pytest.approx(15.5648)
    # the `[INFO] Averaged stats: lr: 0.0000  loss: 7.9345` epoch means are no step records
    assert f.unparsed == 0 and 7.9345 not in [v for _, v in series(metrics, "loss")]


def test_monai_trainer_epoch_and_batch_fractions(store):
    metrics, _, f, facts = real(
        store, "swin-unetr-research-contributions-306-brats21-running-avg-loss-epochs-31-35-healthy"
    )
    steps = train_steps(metrics)
    # `Epoch 31/300 200/1000 loss: 0.2830 time 1.49s`: the batch within the epoch; no epoch 0 is printed, so the
    # epoch counts from 1 (the FACTS read it 0-based: one epoch of steps apart)
    assert len(steps) == facts["step_records"] == 22 and steps == sorted(steps)
    assert steps[1] - steps[0] == 200 and value(metrics, steps[0], "loss") == pytest.approx(0.283)
    # `Final training  31/299 loss: 0.2942 time 1477.11s` closes the epoch: no record
    assert 0.2942 not in [v for _, v in series(metrics, "loss")]


def test_deepxde_loss_dat_sums_its_terms(store):
    metrics, _, f, facts = real(store, "deepxde-ns2d-channel-flow-loss-dat-adam-10k-then-lbfgs-healthy-13000-steps")
    steps = train_steps(metrics)
    # 19 columns: the step, 9 training terms, 9 test terms; step 10000 written twice (L-BFGS's start) is one record
    assert f.format == "loss_columns" and len(steps) == facts["step_records"] == 14 and steps[-1] == 13000
    terms = [value(metrics, 0, f"loss_term_{j}") for j in range(1, 10)]
    assert value(metrics, 0, "loss") == pytest.approx(sum(terms)) and terms[0] == pytest.approx(
        3.996483981609344482e-02
    )
    assert value(metrics, 0, "eval_loss") == pytest.approx(
        sum(value(metrics, 0, f"eval_loss_term_{j}") for j in range(1, 10))
    )


def test_deepxde_metric_column_and_a_nan_term(tmp_path, store):
    rows = "# step, loss_train, loss_test, metrics_test\n" + "".join(
        f"{s:.18e} {a:.18e} {b:.18e} {a * 2:.18e} {b * 2:.18e} {0.5:.18e}\n"
        for s, a, b in [(0, 1.0, 0.5), (1000, 0.5, 0.25), (2000, 0.25, 0.125)]
    )
    rows += f"{3000:.18e} nan {0.1:.18e} nan {0.2:.18e} {0.5:.18e}\n"
    metrics, _, f = ingest(store, write(tmp_path, "loss.dat", rows))
    # 6 columns: k = 2 terms each side and m = 1 metric
    assert (
        f.format == "loss_columns"
        and value(metrics, 1000, "loss") == 0.75
        and value(metrics, 1000, "eval_metric_1") == 0.5
    )
    assert math.isnan(value(metrics, 3000, "loss"))


def test_nep_loss_out_by_its_name(tmp_path, store):
    metrics, _, f, facts = real(store, "gpumd-nep-c60-mlip1-loss-out-first-run-200k-generations-healthy")
    assert f.format == "loss_columns" and len(train_steps(metrics)) == facts["step_records"] == 2000
    assert value(metrics, 100, "loss") == pytest.approx(1.2475) and value(metrics, 100, "eval_rmse_force") == 0.24098
    # the same numbers under another file name are no NEP history
    from spikeforensics.ingest import loss_columns
    from spikeforensics.ingest.base import SniffSample

    rows = [
        "100     1.24750    0.01136    0.01313    0.00141      0.24432      0.0      0.00134      0.24098      0.0"
    ] * 4
    assert loss_columns.sniff(SniffSample(tmp_path / "data.out", "\n".join(rows), rows)) == 0.0
    assert loss_columns.sniff(SniffSample(tmp_path / "loss.out", "\n".join(rows), rows)) > 0.5


def test_schnetpack_log_csv_rows_are_epochs(store):
    metrics, _, f, facts = real(store, "schnetpack-c60-nmr-sigma-iso-log-csv-5000-epochs-three-recovering-spikes")
    steps = train_steps(metrics)
    # `Time,Learning rate,Train loss,Validation loss,MAE_sigma_iso,RMSE_sigma_iso`, no counter: row n is epoch n
    assert f.format == "csv_metrics" and steps[:3] == [1, 2, 3] and len(steps) == facts["step_records"]
    assert value(metrics, 1, "loss") == pytest.approx(7188.150451660156) and value(metrics, 1, "lr") == 1e-4
    diagnosis = api.diagnose(api.load_run("r", store))
    assert diagnosis["verdict"]["status"] != "healthy"  # three one-epoch spikes of 50-190x


def test_a_csv_with_neither_counter_nor_elapsed_time_is_still_rejected(tmp_path, store):
    from spikeforensics.ingest import csv_metrics

    assert csv_metrics.row_counted(["Time", "Train loss"]) and not csv_metrics.row_counted(["name", "loss"])


def test_pipe_table_of_a_notebook_trainer(store):
    metrics, _, f, facts = real(store, "trl-open-r1-704-grpo-notebook-table-kl-nan-beta0-loss-finite")
    assert f.format == "pipe_table" and train_steps(metrics) == [1, 2, 3, 4] == list(
        range(1, facts["step_records"] + 1)
    )
    assert value(metrics, 1, "loss") == pytest.approx(-0.2836) and math.isnan(value(metrics, 1, "kl"))
    # `No Log` is no value
    assert value(metrics, 1, "entropy") == 0 and [s for s, _ in series(metrics, "entropy")] == [1]


def test_pipe_table_per_epoch_with_outer_pipes(tmp_path, store):
    text = (
        "| Epoch | Training Loss | Validation Loss | Accuracy |\n|---|---|---|---|\n"
        "| 1 | 0.693100 | 0.612000 | 0.71 |\n| 2 | 0.512000 | 0.598000 | 0.74 |\n| 3 | No log | 0.601000 | 0.75 |\n"
    )
    metrics, _, f = ingest(store, write(tmp_path, "table.md", text))
    assert f.format == "pipe_table" and train_steps(metrics) == [1, 2, 3]
    assert (
        value(metrics, 2, "loss") == 0.512
        and value(metrics, 2, "eval_loss") == 0.598
        and value(metrics, 1, "epoch") == 1
    )


# --- the review's counter-inputs (session 15) ---


def test_a_headered_csv_stays_with_csv_metrics(tmp_path, store):
    # Lightning's `metrics.csv` logging one metric: a header of names, then `epoch,step,value` rows
    text = "epoch,step,train_loss\n0,49,2.512\n0,99,2.301\n1,149,2.110\n1,199,2.0\n"
    metrics, _, f = ingest(store, write(tmp_path, "metrics.csv", text))
    assert (
        f.format == "csv_metrics" and train_steps(metrics) == [49, 99, 149, 199] and value(metrics, 49, "loss") == 2.512
    )


def test_pipe_table_step_column_wherever_it_sits(tmp_path, store):
    card = (
        "| Epoch  | Step | Training Loss |\n|:------:|:----:|:-------------:|\n"
        "| 0.2283 | 100  | 0.0321        |\n| 0.4566 | 200  | 0.0254        |\n| 0.6849 | 300  | 0.0211        |\n"
    )
    metrics, _, f = ingest(store, write(tmp_path, "card.md", card))
    # sentence-transformers' model card: the fractional epoch first, the step second
    assert (
        f.format == "pipe_table" and train_steps(metrics) == [100, 200, 300] and value(metrics, 200, "epoch") == 0.4566
    )
    trainer = (
        "| Training Loss | Epoch | Step | Validation Loss |\n|:---:|:---:|:---:|:---:|\n"
        "| No log        | 1.0   | 63   | 0.5123          |\n| 0.6021        | 2.0   | 126  | 0.4421          |\n"
        "| 0.4011        | 3.0   | 189  | 0.4102          |\n"
    )
    metrics, _, f = ingest(store, write(tmp_path, "trainer.md", trainer), run="t")
    assert f.format == "pipe_table" and train_steps(metrics) == [63, 126, 189]
    assert [s for s, _ in series(metrics, "loss")] == [126, 189] and value(metrics, 63, "eval_loss") == 0.5123


def test_a_skipped_nan_batch_in_upstream_mlx_lm_is_a_benign_skip(tmp_path, store):
    # upstream mlx-lm prints no grad norm; a guard's skip line names its iteration
    lines = [
        f"Iter {i}: Train loss {2.0 - i / 1000:.3f}, Learning Rate 1.000e-05, It/sec 0.567" for i in range(10, 400, 10)
    ]
    lines += ["Iter 400: SKIPPED non-finite batch (loss 1.23, norm nan) -- weights untouched"]
    lines += [
        f"Iter {i}: Train loss {2.0 - i / 1000:.3f}, Learning Rate 1.000e-05, It/sec 0.567" for i in range(400, 500, 10)
    ]
    _, events, _ = ingest(store, write(tmp_path, "mlx.log", "\n".join(lines) + "\n"))
    assert events.filter(events["kind"] == "nan").get_column("step").to_list() == [400]
    diagnosis = api.diagnose(api.load_run("r", store))
    assert diagnosis["verdict"]["status"] == "degraded"
    assert [(i["severity"], i["root_cause"]) for i in diagnosis["incidents"]] == [("warning", "fp16_overflow")]


def test_an_out_of_memory_skip_is_no_nonfinite_skip(tmp_path, store):
    lines = [f"step {i} | loss {2.0 - i / 1000:.4f} | lr 0.0003" for i in range(1, 200)]
    lines += ["| WARNING: ran out of memory, skipping batch"] * 10
    lines += [f"step {i} | loss {1.8 - i / 10000:.4f} | lr 0.0003" for i in range(200, 210)]
    _, events, _ = ingest(store, write(tmp_path, "oom.log", "\n".join(lines) + "\n"))
    assert events.filter(events["kind"].is_in(["skipped_step", "nan"])).height == 0


def test_a_loss_stepping_down_each_epoch_keeps_its_spike(tmp_path, store):
    # a smooth per-batch loss that drops at each epoch boundary (repeated data) is no restarting mean: a 4x spike
    # near an epoch's start that recovers within it stays an incident (the review's counter-input)
    import random

    rng = random.Random(5)
    lines = []
    for e in range(10):
        for i in range(40):
            loss = 2.2 * 0.84**e * (1 + rng.uniform(-0.02, 0.02))
            if e == 6 and i in (2, 3):
                loss *= 4.0 if i == 2 else 2.5
            lines.append(
                f"Epoch: [{e}]  [{i * 10:3d}/400]  eta: 0:01:00  lr: 0.000100  loss: {loss:.4f} ({loss:.4f})  "
                "time: 0.5000  data: 0.0010  max mem: 8000"
            )
    ingest(store, write(tmp_path, "stair.log", "\n".join(lines) + "\n"))
    diagnosis = api.diagnose(api.load_run("r", store))
    assert any(i["severity"] == "critical" and i["step_start"] <= 2420 <= i["step_end"] for i in diagnosis["incidents"])
