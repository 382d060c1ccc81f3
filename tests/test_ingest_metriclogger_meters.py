"""The ProgressMeter / AverageMeter print of the PyTorch ImageNet example and its copies
(`Epoch: [0][ 10/5005]\\tTime 0.352 (0.421)\\t...\\tLoss 6.9e+00 (6.9e+00)`, `>> Train: [1][108/90000]`,
`Test: [ 10/196]`), read by `metriclogger`: the real sightseq case, lines built from the printing
code (pytorch/examples imagenet/main.py old and new, cnnimageretrieval-pytorch / sightseq main.py),
and near-miss lines of other frameworks that must not be claimed."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from _ingest_helpers import ingest, series, write
from _ingest_helpers import train_steps as steps

from spikeforensics.ingest import detect_format, metriclogger, parse_file

FRESH2 = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "fresh2"


# ---------------------------------------------------------------------------
# the real case


def test_sightseq_real_inf_then_nan(store):
    path = FRESH2 / "sightseq-13-crnn-inf-then-nan-tall-image-sample" / "sightseq_13_description.log"
    assert detect_format(path)[0] == "metriclogger"
    metrics, events, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert steps(metrics) == [108, 109, 110]  # FACTS: 3 records, epoch 1 = (1 - 1) * 90000 + i
    loss = series(metrics, "loss")
    assert loss[0] == (108, 30.0584)  # the current value, not the (31.5477) average
    assert loss[1] == (109, math.inf) and loss[2][0] == 110 and math.isnan(loss[2][1])
    assert series(metrics, "step_time_ms")[0] == (108, pytest.approx(348.0))
    assert series(metrics, "data_time")[0] == (108, 0.003)
    nan = events.filter(pl.col("kind") == "nan").sort("line")
    assert nan.get_column("step").to_list()[0] == 109  # FACTS first_nonfinite_step


# ---------------------------------------------------------------------------
# pytorch/examples imagenet/main.py: ProgressMeter (2019+) and the direct print (2017-19)

NEW = (
    "=> creating model 'resnet18'\n"
    "Epoch: [0][   1/5005]\tTime  3.412 ( 3.412)\tData  2.101 ( 2.101)\tLoss 6.9078e+00 (6.9078e+00)"
    "\tAcc@1   0.00 (  0.00)\tAcc@5   0.39 (  0.39)\n"
    "Epoch: [0][  11/5005]\tTime  0.352 ( 0.620)\tData  0.001 ( 0.192)\tLoss 6.9012e+00 (6.9050e+00)"
    "\tAcc@1   0.39 (  0.10)\tAcc@5   1.17 (  0.50)\n"
    "Test: [  1/196]\tTime  2.000 ( 2.000)\tLoss 1.2000e+00 (1.2000e+00)\tAcc@1  70.00 ( 70.00)\tAcc@5  90.00 ( 90.00)\n"
    "Test: [ 11/196]\tTime  0.201 ( 0.380)\tLoss 1.3000e+00 (1.2500e+00)\tAcc@1  72.00 ( 71.00)\tAcc@5  91.00 ( 90.50)\n"
    " *   Acc@1 72.000 Acc@5 91.000\n"
    "Epoch: [1][   1/5005]\tTime  1.000 ( 1.000)\tData  0.500 ( 0.500)\tLoss 5.1000e+00 (5.1000e+00)"
    "\tAcc@1  10.00 ( 10.00)\tAcc@5  30.00 ( 30.00)\n"
)


def test_progressmeter_current_version(tmp_path, store):
    path = write(tmp_path, "imagenet.log", NEW)
    assert detect_format(path)[0] == "metriclogger"
    metrics, _, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    # `Epoch: [e]` is the 0-based loop variable: e * 5005 + the printed batch (i + 1)
    assert steps(metrics) == [1, 11, 5006]
    assert series(metrics, "loss") == [(1, 6.9078), (11, 6.9012), (5006, 5.1)]
    assert series(metrics, "acc1")[1] == (11, 0.39) and series(metrics, "acc5")[0] == (1, 0.39)
    assert series(metrics, "step_time_ms")[0] == (1, pytest.approx(3412.0))
    # `Test:` lines: eval records with the step of the train record before; ` * Acc@1` is no record
    assert series(metrics, "eval_loss", train=False) == [(11, 1.2), (11, 1.3)]
    assert series(metrics, "eval_acc1", train=False)[0] == (11, 70.0)
    assert metrics.filter(pl.col("line") == 6).height == 0


OLD = (
    "Epoch: [0][0/5005]\tTime 10.210 (10.210)\tData 9.100 (9.100)\tLoss 6.9310 (6.9310)"
    "\tPrec@1 0.000 (0.000)\tPrec@5 0.391 (0.391)\n"
    "Epoch: [0][10/5005]\tTime 0.352 (1.421)\tData 0.001 (0.830)\tLoss 6.9012 (6.9079)"
    "\tPrec@1 0.000 (0.036)\tPrec@5 0.781 (0.462)\n"
    "Epoch: [0][20/5005]\tLR: 0.10000000\tTime 0.350 (0.900)\tData 0.001 (0.400)\tLoss nan (nan)"
    "\tPrec@1 0.000 (0.020)\tPrec@5 0.000 (0.300)\n"
    "Test: [0/196]\tTime 2.000 (2.000)\tLoss -nan (-nan)\tPrec@1 0.000 (0.000)\tPrec@5 0.000 (0.000)\n"
    " * Prec@1 0.000 Prec@5 0.000\n"
)


def test_direct_print_2017_with_nan_and_lr(tmp_path, store):
    path = write(tmp_path, "old.log", OLD)
    assert detect_format(path)[0] == "metriclogger"
    metrics, events, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert steps(metrics) == [0, 10, 20]  # the old print passes `i` (0-based)
    loss = series(metrics, "loss")
    assert loss[:2] == [(0, 6.931), (10, 6.9012)] and math.isnan(loss[2][1])
    assert series(metrics, "lr") == [(20, 0.1)]  # `LR: 0.1` without an average
    assert series(metrics, "prec1")[1] == (10, 0.0)
    assert math.isnan(series(metrics, "eval_loss", train=False)[0][1])
    assert events.filter(pl.col("kind") == "nan").get_column("step").to_list() == [20]


# ---------------------------------------------------------------------------
# copies with their own prefix: cnnimageretrieval-pytorch / sightseq (`>> Train:`, epoch + 1)

COPIES = (
    ">> Creating directory if it does not exist:\n"
    "images/0001.jpg\n"
    "\r>> Train: [  1][  1/2000]\tTime  1.234 ( 1.234)\tData  0.500 ( 0.500)\tLoss 0.8123 (0.8123)\n"
    ">> Train: [  1][ 20/2000]\tTime  0.234 ( 0.284)\tData  0.001 ( 0.025)\tLoss 0.7000 (0.7600)\n"
    ">> Val: [1][10/100]\tTime 0.100 (0.120)\tAccu 0.910\n"
    ">> Train: [2][1/2000]\tTime 0.200 (0.200)\tData 0.001 (0.001)\tLoss INF (INF)\tgpu memory usage 12.00%\n"
)


def test_train_prefix_copies_epoch_plus_one(tmp_path, store):
    path = write(tmp_path, "retrieval.log", COPIES)
    assert detect_format(path)[0] == "metriclogger"
    metrics, _, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert steps(metrics) == [1, 20, 2001]  # (e - 1) * 2000 + i
    assert series(metrics, "loss")[:2] == [(1, 0.8123), (20, 0.7)]
    assert series(metrics, "loss")[2] == (2001, math.inf)
    assert series(metrics, "gpu_memory_usage") == [(2001, 12.0)]
    # `>> Val: [e][i/n]` is validation: an eval record, not a step
    assert series(metrics, "eval_accu", train=False) == [(20, 0.91)]


def test_colon_variant_and_epoch_zero_prefix(tmp_path):
    text = (
        "2024-01-01 12:00:00,123 - INFO - Train: [0][10/500]\tTime: 2.512 (0.251)\tData: 0.100 (0.010)"
        "\tUps: 3.981\tAccuracy: 0.5000 (0.4500)\tLoss: 0.7000 (0.7500)\n"
        "2024-01-01 12:00:09,123 - INFO - Train: [1][10/500]\tTime: 2.000 (0.200)\tData: 0.100 (0.010)"
        "\tUps: 4.000\tAccuracy: 0.5500 (0.5000)\tLoss: 0.6000 (0.6500)\n"
    )
    path = write(tmp_path, "colon.log", text)
    assert detect_format(path)[0] == "metriclogger"
    metrics = parse_file(path, "metriclogger").tables["metrics"]
    # a copy that prints epoch 0: e0 = 0
    assert steps(metrics) == [10, 510]
    assert series(metrics, "loss") == [(10, 0.7), (510, 0.6)]
    assert series(metrics, "ups")[0] == (10, 3.981)


# ---------------------------------------------------------------------------
# near misses: not claimed


@pytest.mark.parametrize(
    "line, owner",
    [
        # mmcv 1.x: `Epoch [e][i/n]` with `key: value,` fields and no running averages
        (
            "2021-03-01 10:00:00,000 - mmdet - INFO - Epoch [7][5850/32025]\tlr: 7.146e-04, eta: 1 day, 2:00:00, "
            "time: 1.072, data_time: 0.021, memory: 6349, loss: 31.4201, grad_norm: 3637.0292",
            "mmengine",
        ),
        (
            "10/30 22:18:02 - mmengine - INFO - Epoch(train) [1][240/735]  lr: 1.98e-04  eta: 2:44:49  "
            "time: 2.8874  data_time: 0.0042  memory: 10762  loss: 2.5128  grad_norm: nan",
            "mmengine",
        ),
        # fairseq 2018: running average in parentheses, but no bracketed counter
        (
            "| epoch 010:   2000 / 8223 loss=1.27 (1.50), nll_loss=0.5 (0.6), ppl=1.41, wps=9000, num_updates=22897",
            "fairseq",
        ),
    ],
)
def test_near_misses_not_claimed(tmp_path, line, owner):
    path = write(tmp_path, "other.log", (line + "\n") * 5)
    assert detect_format(path)[0] == owner
    got = parse_file(path, "metriclogger")
    assert got.records == 0 and "metrics" not in got.tables


def test_sniff_ignores_bare_counters():
    from spikeforensics.ingest.base import SniffSample

    lines = ["[1][2/3] starting", "Test: [1/10] done", "loss 0.5 (0.6)"]
    assert metriclogger.sniff(SniffSample(Path("x.log"), "\n".join(lines), lines)) == 0.0


def test_batch_time_meter_and_logger_prefix(tmp_path):
    text = (
        "[2024-05-01 09:00:00] INFO Epoch: [2][100/391]\tBatch Time 0.120 (0.130)\tLoss 1.2345 (1.3000)"
        "\tAcc@1 55.000 (50.000)\n"
        "[2024-05-01 09:00:12] INFO Epoch: [2][200/391]\tBatch Time 0.110 (0.125)\tLoss 1.1000 (1.2000)"
        "\tAcc@1 56.000 (52.000)\n"
    )
    path = write(tmp_path, "bt.log", text)
    assert detect_format(path)[0] == "metriclogger"
    metrics = parse_file(path, "metriclogger").tables["metrics"]
    assert steps(metrics) == [882, 982]  # 2 * 391 + i
    assert series(metrics, "step_time_ms")[0] == (882, pytest.approx(120.0))
    assert series(metrics, "loss") == [(882, 1.2345), (982, 1.1)]


def test_epoch_prefix_without_colon_is_zero_based(tmp_path):
    text = "Epoch [3][10/100]\tTime 0.300 (0.310)\tLoss 2.0000 (2.1000)\nEpoch [3][20/100]\tTime 0.300 (0.310)\tLoss 1.9000 (2.0000)\n"
    path = write(tmp_path, "ep.log", text)
    assert detect_format(path)[0] == "metriclogger"
    assert steps(parse_file(path, "metriclogger").tables["metrics"]) == [310, 320]
