"""Readers first met in sample_logs/real/fresh11: CNTK's SGD progress (cntk), Trax's training loop in a
notebook's saved output (trax), and two custom-loop shapes of the catch-all grammar: char-rnn's `N/M (epoch E)`
and Chinese prints with a full-width colon."""

from __future__ import annotations

import math

import pytest
from _ingest_helpers import ingest, real_case, series, train_steps, value, write


def real(store, name):
    return real_case(store, "fresh11", name)


def test_cntk_minibatch_lines_first_field_is_the_criterion(store):
    metrics, _, f, facts = real(store, "cntk-timit-simplenetwork-baseline-25-epochs-healthy-3055")
    steps = train_steps(metrics)
    assert f.format == "cntk" and len(steps) == facts["step_records"] and steps[0] == facts["first_step"]
    # `Epoch[ 1 of 25]-Minibatch[   1-  10]: CrossEntropyWithSoftmax = 5.02329865 * 2560; EvalClassificationError = ...`
    first = series(metrics, "loss")[0]
    assert first == (10, pytest.approx(5.02329865)) and series(metrics, "classification_error")[0][1] == 0.96875
    assert metrics.get_column("attempt").max() == 24  # the minibatch counter restarts in each of the 25 epochs
    lrs = sorted({round(v, 9) for _, v in series(metrics, "lr")})
    assert lrs == [7.8e-05, 0.003125]  # `Starting Epoch 16: learning rate per sample = 0.000078` (as printed)


def test_cntk_final_results_are_eval_records(store):
    metrics, _, f, facts = real(store, "cntk-timit-lstm-truncated-bptt-baseline-3-epochs-healthy-3376")
    assert f.format == "cntk" and len(train_steps(metrics)) == facts["step_records"]
    # `Final Results: Minibatch[1-12249]: cr = 3.84570050 * 122487; perplexity = 46.79; Err = 0.82118919 * 122487`
    assert [round(v, 4) for _, v in series(metrics, "eval_loss", train=False)] == [3.8457, 1.7041, 1.4608]


def test_cntk_python_progress_printer_without_an_epoch(tmp_path, store):
    text = "".join(
        f" Minibatch[{i * 128 + 1:4d}-{(i + 1) * 128:4d}]: loss = {4.6 - i * 0.1:.6f} * 16, metric = {96.9 - i:.2f}% * 16;\n"
        for i in range(4)
    )
    metrics, _, f = ingest(store, write(tmp_path, "cntk_python.log", text))
    assert f.format == "cntk" and train_steps(metrics) == [128, 256, 384, 512]
    assert value(metrics, 256, "loss") == pytest.approx(4.5) and value(metrics, 256, "metric") == pytest.approx(95.9)


def test_trax_notebook_output_train_and_eval_lines(store):
    metrics, _, f, facts = real(store, "trax-nmt-reformer-example-notebook-healthy-5000-steps")
    steps = train_steps(metrics)
    assert f.format == "trax" and len(steps) == facts["step_records"] and steps[:3] == [1, 100, 200]
    assert value(metrics, 1, "loss") == pytest.approx(9.85205269)
    assert series(metrics, "eval_loss", train=False)[0] == (1, pytest.approx(9.71523285))
    assert value(metrics, 100, "step_time_ms") > 0  # `Step    100: Ran 99 train steps in ... secs`


def test_char_rnn_fraction_before_its_epoch_is_the_step(store):
    metrics, _, f, facts = real(store, "torch7-char-rnn-38-lstm-train-loss-nan-from-iter1-blas")
    assert f.format == "generic_steps" and train_steps(metrics) == list(range(1, 7)) == list(
        range(facts["first_step"], facts["last_step"] + 1)
    )
    assert math.isnan(value(metrics, 1, "loss"))


def test_chinese_counter_with_full_width_colons(store):
    metrics, _, f, facts = real(store, "custom-xiaotudui-1-cifar10-tutorial-cnn-zh-print-2-epochs-healthy")
    # `训练次数：100, Loss：1.9817659854888916`
    steps = train_steps(metrics)
    assert f.format == "generic_steps" and steps == list(range(100, 1501, 100)) and len(steps) == facts["step_records"]
    assert value(metrics, 600, "loss") == pytest.approx(2.496931314468384)
