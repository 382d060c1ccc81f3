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
    # the range end restarts in each of the 25 epochs: the step runs on (epoch 1 last printed 4390; FACTS: 30761)
    assert (
        steps == sorted(steps) and steps[439] == 4390 + 10 and steps[-1] == pytest.approx(facts["last_step"], abs=250)
    )
    lrs = sorted({round(v, 9) for _, v in series(metrics, "lr")})
    assert lrs == [7.8e-05, 0.003125]  # `Starting Epoch 16: learning rate per sample = 0.000078` (as printed)


def test_cntk_final_results_are_eval_records(store):
    metrics, _, f, facts = real(store, "cntk-timit-lstm-truncated-bptt-baseline-3-epochs-healthy-3376")
    assert f.format == "cntk" and len(train_steps(metrics)) == facts["step_records"]
    # `Final Results: Minibatch[1-12249]: cr = 3.84570050 * 122487; perplexity = 46.79; Err = 0.82118919 * 122487`
    evals = series(metrics, "eval_loss", train=False)
    assert [round(v, 4) for _, v in evals] == [3.8457, 1.7041, 1.4608]
    assert all(step is not None for step, _ in evals)  # at the step of the train record before it


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


def test_cntk_windows_nan_is_the_loss_not_the_next_field(tmp_path, store):
    from spikeforensics import api

    line = "08/16/2016 10:44:04:  Epoch[ 1 of 25]-Minibatch[{a:4d}-{b:4d}]: CrossEntropyWithSoftmax = {x} * 2560; EvalClassificationError = 0.96 * 2560; time = 0.02s"
    vals = ["5.02", "4.90", "-nan(ind)", "1.#QNAN000", "1.#INF0000"]
    text = "".join(line.format(a=i * 10 + 1, b=(i + 1) * 10, x=x) + "\n" for i, x in enumerate(vals))
    metrics, _, f = ingest(store, write(tmp_path, "cntk_win.log", text))
    losses = [v for _, v in series(metrics, "loss")]
    assert f.format == "cntk" and losses[:2] == [5.02, 4.9] and math.isnan(losses[2]) and math.isnan(losses[3])
    assert losses[4] == math.inf
    assert api.diagnose(api.load_run("r", store))["verdict"]["status"] == "unstable"


def test_cntk_each_training_action_takes_its_own_learning_rate(tmp_path, store):
    rec = "Epoch[ {e} of 2]-Minibatch[   1-  10]: ce = {x} * 100; err = 0.5 * 100; time = 0.1s"
    text = "\n".join(
        [
            "Starting Epoch 1: learning rate per sample = 0.100000  effective momentum = 0.9",
            rec.format(e=1, x=5.0),
            "Starting Epoch 2: learning rate per sample = 0.100000  effective momentum = 0.9",
            rec.format(e=2, x=4.0),
            "Starting Epoch 1: learning rate per sample = 0.003125  effective momentum = 0.9",
            rec.format(e=1, x=3.0),
        ]
    )
    metrics, _, _ = ingest(store, write(tmp_path, "cntk_actions.log", text + "\n"))
    # one report per epoch: every epoch's record is kept, the step running on
    assert train_steps(metrics) == [10, 20, 30]
    assert [v for _, v in series(metrics, "lr")] == [0.1, 0.1, 0.003125]


def test_trax_a_rerun_cell_keeps_both_runs_and_the_old_trainer_lib_loss(tmp_path, store):
    def block(step, loss):
        return [
            f"Step {step:6d}: Ran 1 train steps in 0.01 secs",
            f"Step {step:6d}: train CrossEntropyLossWithLogSoftmax |  {loss:.8f}",
        ]

    text = [
        line
        for step, loss in [(1, 2.9), (100, 1.5), (200, 1.2), (1, 3.9), (100, 9.5), (200, 0.2)]
        for line in block(step, loss)
    ]
    metrics, _, f = ingest(store, write(tmp_path, "trax_rerun.txt", "\n".join(text) + "\n"))
    assert f.format == "trax" and [v for _, v in series(metrics, "loss")] == [2.9, 1.5, 1.2, 3.9, 9.5, 0.2]
    old = [
        "Step    500: Ran 500 train steps in 19.21 secs",
        "Step    500: train                   accuracy |  0.14000000",
        "Step    500: train                       loss |  6.30000000",
        "Step    500: eval                        loss |  6.40000000",
        "Step   1000: train                   accuracy |  0.20000000",
        "Step   1000: train                       loss |  5.10000000",
    ]
    metrics, _, f = ingest(store, write(tmp_path, "trax_old.txt", "\n".join(old) + "\n"), run="old")
    assert f.format == "trax" and series(metrics, "loss") == [(500, 6.3), (1000, 5.1)]
    assert value(metrics, 500, "accuracy") == 0.14 and series(metrics, "eval_loss", train=False) == [(500, 6.4)]
