"""Readers and judgements first met in sample_logs/real/fresh13: GluonTS's trainer log (gluonts), nolearn's
epoch table with and without its header (nolearn), two custom-loop shapes of the catch-all grammar
(`Loss at step N : x`, makemore's bare `i/n: x`) also inside notebooks, and a loss printed as a running
mean that restarts each epoch."""

from __future__ import annotations

import math

import polars as pl
import pytest
from _ingest_helpers import ingest, real_case, series, train_steps, value, write

from spikeforensics import api
from spikeforensics.detect import epoch_restarts
from spikeforensics.params import Params


def real(store, name):
    return real_case(store, "fresh13", name)


def alarms(store, run="r"):
    diagnosis = api.diagnose(api.load_run(run, store))
    return diagnosis, [i for i in diagnosis["incidents"] if i["severity"] in ("warning", "critical")]


def test_gluonts_epoch_metrics_and_the_last_epochs_bar(store):
    metrics, _, f, facts = real(store, "gluonts-833-deepar-negbin-epochs-1-5-finite-before-reported-nan")
    assert f.format == "gluonts" and train_steps(metrics) == [1, 2, 3, 4, 5] and facts["step_records"] == 5
    # `Epoch[0] Evaluation metric 'epoch_loss'=0.347671` is epoch 1's record; `Epoch[1] Learning rate is 0.0001`
    assert value(metrics, 1, "loss") == pytest.approx(0.347671) and value(metrics, 2, "lr") == 1e-4
    assert value(metrics, 1, "epoch_time_s") == pytest.approx(1353.823)
    # the log ends after epoch 5's bar (`epoch=5/100, avg_epoch_loss=0.273`): the bar stands for that epoch
    assert value(metrics, 5, "loss") == pytest.approx(0.273)
    assert f.unparsed == 0


def test_gluonts_validation_metric_is_an_eval_record(tmp_path, store):
    text = "".join(
        f"INFO:gluonts.trainer:Epoch[{e}] Learning rate is 0.001\n"
        f"INFO:gluonts.trainer:Epoch[{e}] Elapsed time 10.5 seconds\n"
        f"INFO:gluonts.trainer:Epoch[{e}] Evaluation metric 'epoch_loss'={3.0 - e * 0.1:.6f}\n"
        f"INFO:gluonts.trainer:Epoch[{e}] Evaluation metric 'validation_epoch_loss'={3.2 - e * 0.1:.6f}\n"
        for e in range(3)
    )
    metrics, _, f = ingest(store, write(tmp_path, "gluonts.log", text))
    assert f.format == "gluonts" and train_steps(metrics) == [1, 2, 3]
    assert series(metrics, "eval_loss", train=False) == [(1, 3.2), (2, pytest.approx(3.1)), (3, pytest.approx(3.0))]


def test_nolearn_headerless_paste_by_its_ratio_column(store):
    metrics, _, f, facts = real(store, "nolearn-lasagne-241-nesterov-loss-nan-from-epoch12")
    steps = train_steps(metrics)
    assert f.format == "nolearn" and steps == list(range(facts["first_step"], facts["last_step"] + 1))
    # `      4       0.43941       0.41642      1.05520      0.62473  427.18s`
    assert value(metrics, 4, "loss") == pytest.approx(0.43941) and value(metrics, 4, "eval_loss") == 0.41642
    assert value(metrics, 4, "eval_acc") == 0.62473 and value(metrics, 4, "epoch_time_s") == 427.18
    assert math.isnan(value(metrics, facts["first_nonfinite_step"], "loss"))
    diagnosis, found = alarms(store)
    assert diagnosis["verdict"]["status"] == "unstable" and found[0]["step_start"] == 12


def test_nolearn_table_with_its_header(tmp_path, store):
    head = "  epoch    train loss    valid loss    train/val    valid acc  dur\n"
    rule = "-------  ------------  ------------  -----------  -----------  -----\n"
    rows = "".join(
        f"{e:7d}  {1.0 / e:12.5f}  {1.1 / e:12.5f}  {1.0 / 1.1:11.5f}  {0.5 + e / 100:11.5f}  1.2s\n"
        for e in range(1, 6)
    )
    metrics, _, f = ingest(
        store, write(tmp_path, "nolearn.log", "# Neural Network with 1000 learnable parameters\n" + head + rule + rows)
    )
    assert f.format == "nolearn" and train_steps(metrics) == [1, 2, 3, 4, 5]
    assert value(metrics, 2, "loss") == 0.5 and value(metrics, 2, "eval_loss") == 0.55


def test_six_number_rows_without_the_ratio_are_no_nolearn_table(tmp_path):
    from spikeforensics.ingest import nolearn
    from spikeforensics.ingest.base import SniffSample

    rows = [f"{e:7d}  {1.0 / e:10.5f}  {2.0 / e:10.5f}  {3.0:9.5f}  {0.5:9.5f}  1.2s" for e in range(1, 8)]
    assert nolearn.sniff(SniffSample(tmp_path / "x.log", "\n".join(rows), rows)) == 0.0


def test_loss_named_before_its_step(store):
    metrics, _, f, facts = real(store, "tensorflow-cookbook-129-cbow-lr05-loss-nan-from-step100")
    # `Loss at step 100 : nan` (tensorflow_cookbook's `print('Loss at step {} : {}'.format(i+1, loss_val))`)
    assert f.format == "generic_steps" and train_steps(metrics) == list(range(100, 1001, 100))
    assert all(math.isnan(v) for _, v in series(metrics, "loss"))


def test_notebook_output_loss_at_step_lines(store):
    metrics, _, f, facts = real(store, "tensorflow-cookbook-cbow-notebook-healthy-50000-steps-loss-188-to-9")
    steps = train_steps(metrics)
    assert len(steps) == facts["step_records"] == 500 and steps[0] == 100 and steps[-1] == 50000
    assert value(metrics, 100, "loss") == pytest.approx(187.92308044433594)


def test_bare_fraction_and_value_lines_in_a_small_notebook_of_many_lines(store):
    # makemore part 4: the `      0/ 200000: 3.7805` lines sit past the first 400 lines of a 37 kB notebook
    metrics, _, f, facts = real(store, "pytorch-makemore-part4-manual-backprop-notebook-healthy-200k-steps")
    steps = train_steps(metrics)
    assert f.format == "generic_steps" and len(steps) == facts["step_records"] == 20
    assert steps[0] == 0 and steps[-1] == facts["last_step"] and value(metrics, 0, "loss") == pytest.approx(3.7805)


def test_a_few_bare_fractions_are_no_records(tmp_path, store):
    text = "epoch 1 step 10 loss 2.5\nepoch 1 step 20 loss 2.4\n3/10: 0.5\nepoch 1 step 30 loss 2.3\n"
    metrics, _, _ = ingest(store, write(tmp_path, "mixed.log", text))
    assert train_steps(metrics) == [10, 20, 30]


def test_running_mean_restarting_each_epoch_is_recognised_and_quiet(store):
    # DSFD's `epoch:18 || iter:23190 || Loss:5.6287`: a mean since the epoch began; 5.25 -> 5.63 at the reset
    _, _, _, facts = real(store, "custom-dsfd-anime-face-vgg-36-epochs-running-mean-loss-healthy-46k-iters")
    diagnosis, found = alarms(store)
    assert facts["healthy"] and diagnosis["verdict"]["status"] == "healthy" and not found
    notes = [n for n in diagnosis["notes"] if "running mean that restarts each epoch" in n["summary"]]
    assert [n["step_start"] for n in notes] == [23190, 28340, 34780]  # the epoch-start bumps stay as notes


def _running_mean_run(tmp_path, store, bad_epoch=None, name="rm.log"):
    """A per-epoch running mean of a noisy per-batch loss (20 prints of 50 batches each), optionally one epoch
    whose batches all run 1.6x (the whole epoch's mean lifted: no small sample)."""
    import random

    rng = random.Random(3)
    lines = []
    it = 0
    for epoch in range(12):
        total = 0.0
        for k in range(1, 1001):
            loss = 2.0 * (1.6 if epoch == bad_epoch else 1.0) * math.exp(rng.gauss(0, 0.3))
            total += loss
            it += 1
            if k % 50 == 0:
                lines.append(f"epoch:{epoch} || iter:{it} || Loss:{total / k:.4f}")
    ingest(store, write(tmp_path, name, "\n".join(lines) + "\n"), run=name)
    return alarms(store, run=name)


def test_a_lifted_epoch_mean_is_kept(tmp_path, store):
    params = Params()
    _, clean = _running_mean_run(tmp_path, store)
    assert not clean
    frame = epoch_restarts._epochs(api.load_run("rm.log", store))
    assert frame is not None and epoch_restarts.restarting_mean(frame, params.hard_spike)
    _, found = _running_mean_run(tmp_path, store, bad_epoch=8, name="bad.log")
    assert any(i["step_start"] >= 8000 for i in found)


def test_a_per_batch_loss_is_no_restarting_mean():
    params = Params()
    frame = pl.DataFrame(
        {
            "value": [2.0 + 0.3 * ((i * 7919) % 11 - 5) / 5 for i in range(200)],
            "epoch": [i // 20 for i in range(200)],
        }
    )
    assert not epoch_restarts.restarting_mean(frame, params.hard_spike)
