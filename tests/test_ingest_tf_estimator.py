"""TensorFlow Estimator / MonitoredTrainingSession logs (`tf_estimator`): the real corpus files,
lines built from the printing code (tensorflow/python/training/basic_session_run_hooks.py
LoggingTensorHook / StepCounterHook / NanTensorHook / CheckpointSaverHook, and
tensorflow_estimator/python/estimator/estimator.py `Loss for final step`, `Saving dict for global
step`), and near-miss lines of other frameworks that must not be claimed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
from _ingest_helpers import ingest, write

from spikeforensics.ingest import detect_format

DEV = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "dev"


def records(metrics):
    train = metrics.filter(pl.col("record").is_not_null())
    return train.select("record", "step").unique().sort("record").get_column("step").to_list()


def value(metrics, step, name, kind_record=True):
    rows = metrics.filter((pl.col("step") == step) & (pl.col("name") == name))
    rows = rows.filter(pl.col("record").is_not_null() if kind_record else pl.col("record").is_null())
    assert rows.height == 1, (step, name, rows)
    return rows.item(0, "value")


# ---------------------------------------------------------------------------
# real corpus files


def test_real_estimator_hook_lines_and_user_hook(store):
    path = DEV / "tf-estimator-tensorflow-43014-loss-step-hook-healthy" / "issue_43014_paste.log"
    assert detect_format(path)[0] == "tf_estimator"
    metrics, events, outcome = ingest(store, path)
    assert outcome.format == "tf_estimator" and outcome.unparsed == 0
    # `loss = .., step = 0` and the user's `global_steps = 0, loss = ..` are one record (same step)
    assert records(metrics) == [0, 100]
    assert value(metrics, 0, "loss") == 96.96749
    assert value(metrics, 100, "loss") == 4.264659
    assert value(metrics, 100, "interval_s") == 124.394
    assert value(metrics, 100, "steps_per_s") == 0.803899  # the StepCounterHook line before it
    saves = events.filter(pl.col("kind") == "checkpoint_save")
    assert saves.height == 1 and saves.item(0, "step") == 0
    assert json.loads(saves.item(0, "detail"))["path"].endswith("test_10ep/model.ckpt")


def test_real_glog_prefix_and_model_diverged(store):
    path = DEV / "tf-estimator-models-8549-glog-model-diverged-nan" / "issue_8549_paste.log"
    assert detect_format(path)[0] == "tf_estimator"
    metrics, events, outcome = ingest(store, path)
    assert outcome.format == "tf_estimator" and outcome.unparsed == 0
    assert records(metrics) == [400]
    assert value(metrics, 400, "loss") == 1.3336712
    assert value(metrics, 400, "steps_per_s") == 1.17343
    nan = events.filter(pl.col("kind") == "nan")
    assert nan.height == 1
    detail = json.loads(nan.item(0, "detail"))
    assert detail["stopped"] is True and detail["value"] == "nan" and detail["metric"] == "loss"


def test_real_t2t_hook_every_100_steps_with_checkpoints(store):
    path = DEV / "tf-estimator-t2t-67-transformer-base-steady-loss-healthy" / "issue_67_paste.log"
    assert detect_format(path)[0] == "tf_estimator"
    metrics, events, outcome = ingest(store, path)
    assert outcome.format == "tf_estimator" and outcome.unparsed == 0
    assert records(metrics) == list(range(54901, 55702, 100))
    assert value(metrics, 55401, "loss") == 2.30657
    assert value(metrics, 55701, "steps_per_s") == 0.86269
    saves = events.filter(pl.col("kind") == "checkpoint_save").get_column("step").to_list()
    assert saves == [54877, 55396]


# ---------------------------------------------------------------------------
# variants from the printing code

VARIANTS = """\
INFO:tensorflow:Saving checkpoints for 0 into /tmp/bert/model.ckpt.
INFO:tensorflow:loss = 2.3025851, step = 1
I0712 12:10:37.058244 140 basic_session_run_hooks.py:262] loss = 2.3025851, step = 1
INFO:tensorflow:global_step/sec: 8.1
INFO:tensorflow:examples/sec: 259.2
INFO:tensorflow:loss = 1.9e-01, step = 101 (12.345 sec)
I0712 12:10:49.403244 140 basic_session_run_hooks.py:260] loss = 1.9e-01, step = 101 (12.345 sec)
INFO:tensorflow:global_step = 201, learning_rate = 1e-04, loss = nan (11.002 sec)
INFO:tensorflow:loss = inf, step = 301 (11.100 sec)
INFO:tensorflow:step = 401, loss = -inf
INFO:tensorflow:Saving checkpoints for 401 into /tmp/bert/model.ckpt.
INFO:tensorflow:Saving dict for global step 401: DetectionBoxes_Precision/mAP (large) = 0.23755945, global_step = 401, loss = 0.32, masked_lm_accuracy = 0.61
INFO:tensorflow:Loss for final step: 0.3.
"""


def test_hook_variants(store, tmp_path):
    path = write(tmp_path, "train.log", VARIANTS)
    assert detect_format(path)[0] == "tf_estimator"
    metrics, events, outcome = ingest(store, path)
    assert outcome.format == "tf_estimator" and outcome.unparsed == 0
    # the absl copy of a line is the same record
    assert records(metrics) == [1, 101, 201, 301, 401]
    assert value(metrics, 1, "loss") == 2.3025851
    assert value(metrics, 101, "loss") == 0.19
    assert value(metrics, 101, "steps_per_s") == 8.1
    assert value(metrics, 101, "examples_per_s") == 259.2
    assert value(metrics, 101, "interval_s") == 12.345
    assert math.isnan(value(metrics, 201, "loss"))
    assert value(metrics, 201, "lr") == 1e-4
    assert value(metrics, 301, "loss") == math.inf
    assert value(metrics, 401, "loss") == -math.inf
    # the eval dict: an eval record at its step, eval_ names, global_step is no metric
    assert value(metrics, 401, "eval_loss", kind_record=False) == 0.32
    assert value(metrics, 401, "eval_masked_lm_accuracy", kind_record=False) == 0.61
    evals = metrics.filter(pl.col("step").eq(401) & pl.col("record").is_null())
    assert not evals.get_column("name").str.contains("global_step").any()
    assert evals.filter(pl.col("name").str.contains("map")).height == 1
    # `Loss for final step`: a summary row without a step
    final = metrics.filter(pl.col("step").is_null() & pl.col("record").is_null())
    assert final.select("name", "value").rows() == [("loss", 0.3)]
    saves = events.filter(pl.col("kind") == "checkpoint_save").get_column("step").to_list()
    assert saves == [0, 401]


def test_prefixes_and_quoting(store, tmp_path):
    text = (
        "> INFO:tensorflow:loss = 1.8717, step = 31601 (182.200 sec)\n"  # a quoted issue paste
        "[1,0]<stdout>:INFO:tensorflow:loss = 1.8, step = 31701 (180.000 sec)\n"  # horovod/mpirun tag
        "2019-03-01 10:00:00,123 - tensorflow - INFO - loss = 1.7, step = 31801 (181.000 sec)\n"  # a Formatter
        "I0307 10:00:00.123456 Reloader basic_session_run_hooks.py:249] loss = 1.6, step = 31901 (179.0 sec)\n"
    )
    metrics, _, outcome = ingest(store, write(tmp_path, "prefixed.log", text))
    assert outcome.format == "tf_estimator" and outcome.unparsed == 0
    assert records(metrics) == [31601, 31701, 31801, 31901]
    assert value(metrics, 31901, "loss") == 1.6


def test_model_diverged_after_records(store, tmp_path):
    text = (
        "INFO:tensorflow:loss = 1.8717, step = 31601 (182.200 sec)\n"
        "ERROR:tensorflow:Model diverged with loss = NaN.\n"
        "E0526 15:34:12.011717 140569525946176 basic_session_run_hooks.py:760] Model diverged with loss = NaN.\n"
    )
    metrics, events, _ = ingest(store, write(tmp_path, "t2t.log", text))
    assert records(metrics) == [31601]
    nan = events.filter(pl.col("kind") == "nan")
    assert nan.height == 2  # events are never de-duplicated
    assert nan.get_column("step").to_list() == [31601, 31601]


def test_hook_line_without_step_is_not_a_record(store, tmp_path):
    text = (
        "INFO:tensorflow:loss = 1.0444846, step = 0\n"
        "INFO:tensorflow:cross_entropy = 0.6935922, learning_rate = 1e-04, total_loss = 1.0444846\n"
        "INFO:tensorflow:loss = 0.9, step = 10 (3.000 sec)\n"
    )
    metrics, _, outcome = ingest(store, write(tmp_path, "deeplab.log", text))
    assert outcome.format == "tf_estimator"
    assert records(metrics) == [0, 10]
    assert metrics.filter(pl.col("name") == "total_loss").height == 0


# ---------------------------------------------------------------------------
# near misses: not claimed


def test_near_misses_not_claimed(tmp_path):
    # tf.slim learning.py (`global step N: loss = X (T sec/step)`): another framework's line
    slim = write(
        tmp_path,
        "slim.log",
        "INFO:tensorflow:global step 1: loss = 79.3501 (57.126 sec/step)\n"
        "INFO:tensorflow:global step 2: loss = 72.8609 (17.053 sec/step)\n",
    )
    assert detect_format(slim)[0] != "tf_estimator"
    # OpenNMT-tf runner (`Step = N ; ... ; Loss = X`)
    onmt = write(
        tmp_path,
        "onmt.log",
        "INFO:tensorflow:Step = 435100 ; steps/s = 2.97, source words/s = 12176 ; Learning rate = 1.202480 ; Loss = 185912.781250\n"
        "INFO:tensorflow:Step = 435200 ; steps/s = 2.93, source words/s = 12020 ; Learning rate = 1.202172 ; Loss = 158771.156250\n",
    )
    assert detect_format(onmt)[0] != "tf_estimator"
    # a custom loop printing `step = N, loss = X` without any tf.logging prefix
    plain = write(tmp_path, "plain.log", "step = 1, loss = 2.3\nstep = 2, loss = 2.2\n")
    assert detect_format(plain)[0] != "tf_estimator"
    # Caffe's glog solver lines (a C++ source, `Iteration N, loss = X`)
    caffe = write(
        tmp_path,
        "caffe.log",
        "I0712 12:10:37.058244  3123 solver.cpp:228] Iteration 100, loss = 2.3\n"
        "I0712 12:10:47.058244  3123 solver.cpp:228] Iteration 200, loss = 2.1\n",
    )
    assert detect_format(caffe)[0] != "tf_estimator"
    # only StepCounterHook rates (BERT run_pretraining without a loss hook): nothing to read here
    rates = write(
        tmp_path, "rates.log", "INFO:tensorflow:global_step/sec: 9.84722\nINFO:tensorflow:examples/sec: 315.111\n"
    )
    assert detect_format(rates)[0] != "tf_estimator"
