"""Readers first met in sample_logs/real/fresh9: nnU-Net's epoch blocks (nnunet), NCRF++'s instance lines
(ncrfpp), and three custom-loop shapes of the catch-all grammar: a loss printed per word before its counter
(XNMT), a loop printing once per epoch with `|x|` norms (simple-nmt), and a record printed over two lines
(torchcv). Each: the real case as the driver ingests it (records and steps as its FACTS.toml counts them), the
format's other shapes, and what must not be taken."""

from __future__ import annotations

import polars as pl
import pytest
from _ingest_helpers import ingest, real_case, series, train_steps, value, write


def real(store, name):
    return real_case(store, "fresh9", name)


# -- nnunet -------------------------------------------------------------------------------------------------


def test_nnunet_v2_epoch_blocks_one_record_per_epoch(store):
    metrics, _, f, facts = real(store, "nnunet-2140-v2-first-3-epochs-loss-falling-dice-zero")
    assert f.format == "nnunet" and train_steps(metrics) == [0, 1, 2]
    assert len(train_steps(metrics)) == facts["step_records"]
    assert series(metrics, "loss") == [(0, 0.7088), (1, 0.4043), (2, 0.357)]
    assert value(metrics, 1, "lr") == pytest.approx(0.00999)
    # `val_loss 0.4628` is an eval record of its epoch, not a training one
    assert series(metrics, "eval_loss", train=False) == [(0, 0.4628), (1, 0.3847), (2, 0.3453)]


def test_nnunet_v1_epoch_line_without_prefix_and_lr_after_the_loss(tmp_path, store):
    text = "\n".join(
        [
            "2021-03-02 10:00:00.000000: Using splits from existing split file",
            "",
            "epoch:  0 ",
            "2021-03-02 10:02:00.000000: train loss : -0.2345 ",
            "2021-03-02 10:02:10.000000: validation loss: -0.3456 ",
            "2021-03-02 10:02:10.100000: Average global foreground Dice: [0.61, 0.42]",
            "2021-03-02 10:02:10.200000: lr: 0.00991",
            "",
            "epoch:  1 ",
            "2021-03-02 10:04:00.000000: train loss : nan ",
            "2021-03-02 10:04:10.000000: validation loss: nan ",
            "2021-03-02 10:04:10.200000: lr: 0.00982",
        ]
    )
    metrics, _, f = ingest(store, write(tmp_path, "training_log_2021_3_2_10_00_00.txt", text))
    assert f.format == "nnunet" and train_steps(metrics) == [0, 1]
    assert value(metrics, 0, "loss") == pytest.approx(-0.2345) and value(metrics, 0, "lr") == pytest.approx(0.00991)
    assert metrics.filter((pl.col("name") == "loss") & (pl.col("step") == 1)).get_column("value").is_nan().all()
    assert series(metrics, "eval_loss", train=False)[0] == (0, pytest.approx(-0.3456))


# -- ncrfpp -------------------------------------------------------------------------------------------------


def test_ncrfpp_instance_counter_restarts_each_epoch_and_summaries_are_no_records(store):
    metrics, _, f, facts = real(store, "ncrfpp-error-overflow-wordcnn-charcnn-sgd-lr0008-loss-explosion-epoch1")
    steps = train_steps(metrics)
    assert f.format == "ncrfpp" and len(steps) == facts["step_records"] == 25
    assert steps[0] == facts["first_step"] and steps[-1] == facts["last_step"] and steps[-2] == 46991
    assert metrics.get_column("attempt").max() == 1  # epoch 1 counts from 500 again
    last = metrics.filter((pl.col("name") == "loss") & (pl.col("attempt") == 1)).get_column("value").to_list()
    assert last == [pytest.approx(2.9253162709906552e16)]
    # the `training finished ... total loss` and `totalloss:` lines summarise the records: not read as records
    assert not metrics.filter((pl.col("value") - 8953630.858570099).abs() < 1).height
    assert series(metrics, "lr")[0][1] == pytest.approx(0.008) and series(metrics, "acc")[0][1] == pytest.approx(0.5038)


# -- custom loops (generic_steps) ---------------------------------------------------------------------------


def test_xnmt_per_word_loss_before_its_step_counter(store):
    metrics, _, f, facts = real(store, "xnmt-error-overflow-asean-baseline-en-th-healthy-10586-steps")
    steps = train_steps(metrics)
    assert f.format == "generic_steps" and len(steps) == facts["step_records"] == 503
    assert steps[0] == facts["first_step"] and steps[-1] == facts["last_step"]
    # `train_loss/word=8.596564 (steps=23, ...)`: the per-word loss is the training loss
    assert value(metrics, 23, "loss") == pytest.approx(8.596564)


def test_simple_nmt_once_per_epoch_with_norms_in_bars(store):
    metrics, _, f, facts = real(store, "simple-nmt-error-overflow-seq2seq-mybk-30-epochs-healthy")
    assert f.format == "generic_steps" and train_steps(metrics) == list(range(1, 31))
    assert len(train_steps(metrics)) == facts["step_records"]
    # `Epoch 1 - |param|=6.01e+02 |g_param|=3.32e+05 loss=4.9263e+00 ppl=137.87`
    assert value(metrics, 1, "grad_norm") == pytest.approx(3.32e5) and value(metrics, 1, "param_norm") == 601
    assert value(metrics, 1, "loss") == pytest.approx(4.9263)
    # the `Validation - loss=...` line after it is that epoch's eval record
    assert series(metrics, "eval_loss", train=False)[0] == (1, pytest.approx(4.0864))


def test_simple_nmt_running_best_of_inf_is_no_nonfinite_value(store):
    from spikeforensics import api

    real(store, "simple-nmt-error-overflow-seq2seq-mybk-30-epochs-healthy")
    diagnosis = api.diagnose(api.load_run("r", store))
    assert not [i for i in diagnosis["incidents"] if i["kind"] == "nonfinite"]


def test_one_epoch_summary_line_does_not_end_a_file_of_stepless_loss_lines(tmp_path, store):
    # NCRF++-like: step-less loss lines, and one `Epoch: 0 ... total loss` summary among them
    text = "".join(f"  Instance: {i * 500}; loss: {10 - i * 0.1:.2f}; acc: 0.5\n" for i in range(1, 6))
    text += "Epoch: 0 training finished. Time: 78.25s,  total loss: 45.0\n"
    metrics, _, f = ingest(store, write(tmp_path, "tagger.log", text))
    assert f.format == "generic_steps" and len(train_steps(metrics)) == 6


def test_torchcv_record_over_two_lines_takes_the_counter_of_the_line_before(store):
    metrics, _, f, facts = real(store, "torchcv-8-yolov3-iter3300-3500-before-nan")
    assert f.format == "generic_steps" and train_steps(metrics) == [3300, 3400, 3500]
    assert len(train_steps(metrics)) == facts["step_records"]
    # `Learning rate = [0.001, 0.01]<TAB>Loss = 213.22541809 (ave = 149.97146935)` under `Train Iteration: 3300`
    assert value(metrics, 3300, "loss") == pytest.approx(213.22541809) and value(metrics, 3300, "lr") == 0.001


def test_a_loss_line_that_only_sometimes_follows_a_counter_line_stays_stepless(store):
    # RWKV's `Epoch 0, Loss: 0.98, ...` per batch; one in ten follows DeepSpeed's `global_step=N` timer line
    metrics, _, f, facts = real_case(
        store, "fresh4", "rwkv7-reward-model-deepspeed-every-step-skipped-loss-flat-10500-steps"
    )
    losses = series(metrics, "loss")
    assert f.format == "deepspeed+generic_steps" and len(train_steps(metrics)) == facts["step_records"]
    assert len(losses) == 10501 and {s for s, _ in losses} == {None}


def test_internlm_domain_loss_of_an_empty_domain_is_no_nan_loss(store):
    from spikeforensics import api

    metrics, _, _, _ = real(store, "internlm-7b-demo-doc-healthy-6-steps-domain-loss-nan-fields")
    assert metrics.filter(pl.col("name") == "loss_cn").get_column("value").is_nan().all()
    diagnosis = api.diagnose(api.load_run("r", store))
    assert diagnosis["verdict"]["status"] == "healthy"


def test_the_headline_is_the_first_incident_in_run_order_not_the_lowest_step(store):
    # NCRF++ restarts its counter each epoch: the explosion at epoch 0's instance 46991 comes before
    # epoch 1's instance 500, whose step number is lower
    from spikeforensics import api

    real(store, "ncrfpp-error-overflow-wordcnn-charcnn-sgd-lr0008-loss-explosion-epoch1")
    diagnosis = api.diagnose(api.load_run("r", store))
    real_incidents = [i for i in diagnosis["incidents"] if i["severity"] != "info"]
    assert [(i["id"], i["attempt"], i["peak_step"]) for i in real_incidents][:2] == [
        ("inc-1", 0, 46991),
        ("inc-2", 1, 500),
    ]
    assert "step 46991" in diagnosis["verdict"]["summary"]


def test_a_fraction_in_brackets_opening_the_line_is_the_step(store):
    metrics, _, f, facts = real(
        store, "deep-text-recognition-benchmark-66-ctc-train-loss-nan-from-iter38-pytorch-ctcloss-bug"
    )
    steps = train_steps(metrics)
    # `[38/300000] lr: 0.1 0.1 single_train_elapsed_time: 0.22594 train_loss: nan`, after an options block
    assert f.format == "generic_steps" and steps == list(range(38, 47)) and len(steps) == facts["step_records"]
    assert value(metrics, 45, "loss") == pytest.approx(8.42399) and value(metrics, 45, "lr") == pytest.approx(0.1)


def test_the_counter_in_brackets_after_the_epoch_is_the_step(store):
    metrics, _, f, facts = real(store, "e2e-mlt-53-ocr-ctc-loss-nan-from-iter4500-japanese-crops")
    steps = train_steps(metrics)
    # `epoch 0[500], loss: 54.610, lr: 0.00010`
    assert f.format == "generic_steps" and steps[:3] == [0, 500, 1000] and len(steps) == facts["step_records"]
    assert facts["first_nonfinite_step"] in steps and value(metrics, 500, "loss") == pytest.approx(54.61)
