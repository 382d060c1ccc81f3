"""Custom-loop shapes of the generic reader (generic_steps) first met in sample_logs/real/fresh2, and
pytorch-kaldi's per-epoch results (pytorch_kaldi): `train_batch_loss[ N ]:` (crnn-pytorch),
`valid_evaluation: loss=...` (eval records without a counter), `Epoch E/N | Batch i/n | Train Loss`
(the `Batch` counter), PaddleSlim's `Total iter: ..., loss: [x]` (one-element arrays), the
`avg loss so far is X` phrase (prednet-paddle) and pytorch-kaldi's `ep=N tr=[...] loss= ...` line and
stdout summary. Each: the real case as the driver ingests it, variants the printing code can print,
and lines the readers must not claim."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import polars as pl
import pytest
from _ingest_helpers import value, write

from spikeforensics.ingest import detect_format, generic_steps, ingest_paths
from spikeforensics.ingest.base import SniffSample, SourceFile

FRESH2 = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "fresh2"


def ingest(store, path, run="r"):
    report = ingest_paths([path], run, store)
    assert report.ok, report.as_dict()
    return store.table(run, "metrics"), report.files[0]


def train(metrics):
    return metrics.filter(pl.col("record").is_not_null())


def records(metrics):
    return train(metrics).select("record", "step").unique().sort("record").get_column("step").to_list()


def first_nonfinite(metrics):
    bad = train(metrics).filter((pl.col("name") == "loss") & ~pl.col("value").is_finite())
    return bad.get_column("step").min()


def sniff_text(tmp_path, text):
    path = write(tmp_path, "s.log", text)
    return generic_steps.sniff(SniffSample(path, text, text.splitlines()))


def parse_text(tmp_path, text, name="g.log"):
    return generic_steps.parse(SourceFile(write(tmp_path, name, text), name))


def case(name):
    folder = FRESH2 / name
    facts = tomllib.loads((folder / "FACTS.toml").read_text())
    return folder / facts["files"][0], facts


# ---------------------------------------------------------------------------
# the real cases


REAL = [
    ("crnn-pytorch-7-batch-loss-nan-6590-no-grad-clip", "generic_steps"),
    ("lightning-fengshenbang-222-t5-fp16-loss-nan-from-batch0", "generic_steps"),
    ("paddleslim-1582-loss-nan-from-iter10-lower-lr", "generic_steps"),
    ("pytorch-kaldi-112-epoch23-loss-nan-enable-grad-clip", "pytorch_kaldi"),
]


@pytest.mark.parametrize("name,fmt", REAL)
def test_real_case_records_steps_and_first_nan(store, name, fmt):
    path, facts = case(name)
    assert detect_format(path)[0] == fmt
    metrics, outcome = ingest(store, path)
    assert outcome.format == fmt and outcome.unparsed == 0
    steps = records(metrics)
    assert len(steps) == facts["step_records"]
    assert steps[0] == facts["first_step"] and steps[-1] == facts["last_step"]
    assert first_nonfinite(metrics) == facts["first_nonfinite_step"]


def test_crnn_values_and_eval_record(store):
    metrics, _ = ingest(store, case("crnn-pytorch-7-batch-loss-nan-6590-no-grad-clip")[0])
    assert value(metrics, 6510, "loss") == pytest.approx(1.5743603706359863)
    assert math.isnan(value(metrics, 6590, "loss"))
    # the evaluation line opens the paste: an eval record before any train record (no step)
    ev = metrics.filter(pl.col("name") == "eval_loss")
    assert ev.height == 1 and ev.item(0, "record") is None and ev.item(0, "step") is None
    assert ev.item(0, "value") == pytest.approx(1.832921710359357)
    assert metrics.filter(pl.col("name") == "eval_acc").item(0, "value") == pytest.approx(0.7594752661693344)


def test_fengshenbang_two_word_keys(store):
    metrics, _ = ingest(store, case("lightning-fengshenbang-222-t5-fp16-loss-nan-from-batch0")[0])
    assert records(metrics) == [0, 100, 200, 300]
    assert value(metrics, 200, "lr") == pytest.approx(4e-08) and value(metrics, 200, "epoch") == 0.0


def test_paddleslim_array_values(store):
    metrics, _ = ingest(store, case("paddleslim-1582-loss-nan-from-iter10-lower-lr")[0])
    assert value(metrics, 0, "loss") == pytest.approx(10.000229)
    assert all(math.isnan(value(metrics, s, "loss")) for s in (10, 20, 30, 40, 50))
    assert train(metrics).get_column("time").drop_nulls().len() > 0  # the logger's asctime


def test_prednet_is_phrases_and_restarting_step(store):
    path, facts = case("paddle-prednet-kitti-train-log-healthy-150-epochs")
    assert detect_format(path)[0] == "generic_steps"
    metrics, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    t = train(metrics)
    assert t.get_column("record").n_unique() == facts["step_records"] == 750
    # the printed Step restarts every epoch (the epoch length is not printed): stored as printed,
    # each epoch a new attempt, the epoch kept as a metric
    first = t.filter(pl.col("record") < 6).unique("record").sort("record")
    assert first.get_column("step").to_list() == [25, 50, 75, 100, 125, 25]
    assert first.get_column("attempt").to_list() == [0, 0, 0, 0, 0, 1]
    loss = t.filter(pl.col("name") == "loss").sort("record")
    assert loss.height == 750 and loss.item(0, "value") == pytest.approx(0.10979227721691132)
    epochs = t.filter(pl.col("name") == "epoch").get_column("value")
    assert epochs.min() == 0 and epochs.max() == 149
    # `Epoch E, val loss is V, val mse is M.`: an eval record at the step of the record before it
    ev = metrics.filter(pl.col("name") == "eval_loss").sort("line")
    assert ev.height == 150 and ev.get_column("record").null_count() == 150
    assert ev.item(0, "step") == 125 and ev.item(0, "value") == pytest.approx(0.0477195605635643)
    assert metrics.filter(pl.col("name") == "eval_mse").height == 150


def test_pytorch_kaldi_real_values(store):
    metrics, _ = ingest(store, case("pytorch-kaldi-112-epoch23-loss-nan-enable-grad-clip")[0])
    assert value(metrics, 22, "loss") == 0.671 and value(metrics, 22, "err") == 0.214
    assert value(metrics, 22, "eval_loss") == 0.693 and value(metrics, 23, "eval_err") == 0.911
    assert math.isnan(value(metrics, 23, "eval_loss"))
    assert value(metrics, 23, "lr") == 3.125e-06 and value(metrics, 23, "lr_architecture2") == 3.125e-06
    assert value(metrics, 22, "epoch_time_s") == 17255


# ---------------------------------------------------------------------------
# variants the printing code can print


def test_loss_index_variants(tmp_path, store):
    text = (
        "epoch: 1\n"
        "train_batch_loss[10]: 2.5\n"  # the f-string fork
        "train_batch_loss[ 20 ]:  1.5e-03\n"
        "valid_evaluation: loss=2.25, acc=0.5\n"  # after train_batch_loss[20]: its step
        "2024-01-02 10:00:00,123 - INFO - train_batch_loss[ 30 ]:  inf\n"
        "train_batch_loss[ 40 ]:  -nan\n"
        "train_loss:  1.9\n"  # the epoch mean: no counter, not a record
    )
    path = write(tmp_path, "crnn.log", text)
    assert detect_format(path)[0] == "generic_steps"
    metrics, outcome = ingest(store, path)
    assert records(metrics) == [10, 20, 30, 40] and outcome.unparsed == 0
    assert value(metrics, 20, "loss") == 1.5e-03 and value(metrics, 30, "loss") == math.inf
    assert math.isnan(value(metrics, 40, "loss"))
    assert value(metrics, 20, "eval_loss", record=False) == 2.25


def test_batch_counter_variants(tmp_path):
    # 1-based epochs (no epoch 0 printed): (E - 1) * n + i
    text = "".join(
        f"Epoch {e}/3 | Batch {b}/100 | Train Loss {2.0 - e / 10} | Learning Rate 1e-4\n"
        for e in (1, 2)
        for b in (0, 50)
    )
    m = parse_text(tmp_path, text).tables["metrics"]
    assert m.filter(pl.col("name") == "loss").get_column("step").to_list() == [0, 50, 100, 150]
    # 0-based epochs, bracketed counters
    text = "Epoch [0/2] Batch [10/20] loss: 1.5\nEpoch [1/2] Batch [10/20] loss: 1.4\n"
    m = parse_text(tmp_path, text).tables["metrics"]
    assert m.filter(pl.col("name") == "loss").get_column("step").to_list() == [10, 30]
    # no total: the batch as printed (TF tutorial `Epoch {e} Batch {b} Loss {l:.4f}`)
    text = "Epoch 1 Batch 0 Loss 4.5\nEpoch 1 Batch 100 Loss 3.2\nEpoch 1 Batch 200 Loss nan\n"
    m = parse_text(tmp_path, text).tables["metrics"]
    assert m.filter(pl.col("name") == "loss").get_column("step").to_list() == [0, 100, 200]
    # a `step`/`iter` counter on the line wins over `batch`
    text = "Total iter: 120, epoch: 1, batch: 20, loss: [2.5]\nTotal iter: 130, epoch: 1, batch: 30, loss: [2.4]\n"
    m = parse_text(tmp_path, text).tables["metrics"]
    assert m.filter(pl.col("name") == "loss").get_column("step").to_list() == [120, 130]


def test_paddleslim_logger_variants(tmp_path):
    # compressor.py: `"Total iter: {}, epoch: {}, batch: {}, loss: {} "` then `'{}: {} '` per loss name
    text = (
        "2023-01-05 10:00:00,001-INFO: Total iter: 0, epoch: 0, batch: 0, loss: [12.5] distill_loss: [0.25] \n"
        "2023-01-05 10:00:01,001-INFO: Total iter: 10, epoch: 0, batch: 10, loss: [1.e-05] \n"
        "2023-01-05 10:00:02,001-INFO: Total iter: 20, epoch: 0, batch: 20, loss: [-inf]\n"
        "2023-01-05 10:00:03,001-INFO: Total iter: 30, epoch: 0, batch: 30, loss: 3.5 \n"
    )
    assert sniff_text(tmp_path, text) == generic_steps.MAX_CONFIDENCE
    m = parse_text(tmp_path, text).tables["metrics"]
    loss = m.filter(pl.col("name") == "loss").sort("step")
    assert loss.get_column("value").to_list() == [12.5, 1e-05, -math.inf, 3.5]
    assert m.filter(pl.col("name") == "distill_loss").item(0, "value") == 0.25


def test_is_phrase_variants(tmp_path):
    text = (
        "Epoch 3, Step 25, total used time 1.5 (s), avg loss so far is 0.25\n"
        "Epoch 3, Step 50, total used time 3.0 (s), avg loss so far is nan\n"
        "Epoch 3, val loss is 0.5, val mse is 0.125.\n"
        "Epoch 3, test mse is 0.1.\n"  # no loss: no record
        "step 60: running loss is 2.5e-01\n"
        "Loss is nan, stopping training\n"  # no counter, no evaluation: not a record
    )
    r = parse_text(tmp_path, text)
    m = r.tables["metrics"]
    assert r.unparsed == 0
    loss = m.filter((pl.col("name") == "loss") & pl.col("record").is_not_null()).sort("line")
    assert loss.get_column("step").to_list() == [25, 50, 60]
    assert math.isnan(loss.item(1, "value")) and loss.item(2, "value") == 0.25
    ev = m.filter(pl.col("record").is_null())
    assert ev.filter(pl.col("name") == "eval_loss").item(0, "step") == 50
    assert ev.filter(pl.col("name") == "eval_mse").item(0, "value") == 0.125
    assert "far_is" not in m.get_column("name").to_list()


def test_pytorch_kaldi_res_variants(tmp_path, store):
    # 2018 utils.py: `'ep=%s' % format(ep, "03d")`, `'lr_%s=%f '`; two training and validation sets
    text = (
        "ep=000 tr=['TIMIT_tr'] loss=3.398 err=0.721 valid=TIMIT_dev loss=2.268 err=0.591 "
        "lr_architecture1=0.080000 time(s)=86\n"
        "ep=001 tr=['TIMIT_tr', 'TIMIT_extra'] loss=2.137 err=0.570 valid=TIMIT_dev loss=1.990 err=0.541 "
        "valid=TIMIT_test loss=2.001 err=0.550 lr_architecture1=0.080000 lr_architecture2=0.040000 time(s)=87\n"
    )
    path = write(tmp_path, "res.res", text)
    assert detect_format(path)[0] == "pytorch_kaldi"
    metrics, _ = ingest(store, path)
    assert records(metrics) == [0, 1]
    assert value(metrics, 1, "loss") == 2.137 and value(metrics, 1, "eval_loss") == 1.990
    assert value(metrics, 1, "eval_timit_test_loss") == 2.001 and value(metrics, 1, "eval_timit_test_err") == 0.550
    assert value(metrics, 1, "lr") == 0.08 and value(metrics, 1, "lr_architecture2") == 0.04


def test_pytorch_kaldi_stdout_summary(tmp_path, store):
    block = (
        "------------------------------ Epoch {e:02d} / 23 ------------------------------\n"
        "Training train_clean_100 chunk = 1 / 50\n"
        " \n"
        "----- Summary epoch {e:02d} / 23\n"
        "Training on ['train_clean_100']\n"
        "Loss = {tl} | err = 0.214 \n"
        "-----\n"
        "Validating on dev_clean\n"
        "Loss = {vl} | err = 0.212 \n"
        "-----\n"
        "Learning rate on architecture1 = 6.25e-06 \n"
        "-----\n"
        "Elapsed time (s) = 17255\n"
    )
    text = block.format(e=22, tl="0.671", vl="0.693") + block.format(e=23, tl="nan", vl="nan")
    path = write(tmp_path, "stdout.log", text)
    assert detect_format(path)[0] == "pytorch_kaldi"
    metrics, outcome = ingest(store, path)
    assert records(metrics) == [22, 23] and outcome.unparsed == 0
    assert value(metrics, 22, "loss") == 0.671 and value(metrics, 22, "lr") == 6.25e-06
    assert value(metrics, 22, "eval_loss", record=False) == 0.693
    assert math.isnan(value(metrics, 23, "loss")) and math.isnan(value(metrics, 23, "eval_loss", record=False))


# ---------------------------------------------------------------------------
# what is not claimed


def test_generic_sniffer_stays_unsure(tmp_path):
    for name, _ in REAL[:3]:
        path, _ = case(name)
        text = path.read_text()
        assert generic_steps.sniff(SniffSample(path, text, text.splitlines())) <= generic_steps.MAX_CONFIDENCE


@pytest.mark.parametrize(
    "text,fmt",
    [
        # MetricLogger, mmengine, Keras, insightface, pytorch-kaldi lines keep their readers
        (
            "Epoch: [2]  [ 150/1251]  eta: 0:20:52  lr: 0.000201  loss: 6.8610 (6.8841)  time: 1.0552\n" * 3,
            "metriclogger",
        ),
        (
            "Epoch(train) [1][240/735]  lr: 1.98e-04  eta: 2:44:49  time: 2.8874  loss: 2.5128  grad_norm: nan\n" * 3,
            "mmengine",
        ),
        ("Epoch 1/50\n124/124 [==============================] - 909s 7s/step - loss: nan - val_loss: nan\n", "keras"),
        (
            "ep=22 tr=['train_clean_100'] loss=0.671 err=0.214 valid=dev_clean loss=0.693 err=0.212\n" * 2,
            "pytorch_kaldi",
        ),
    ],
)
def test_other_formats_keep_their_reader(tmp_path, text, fmt):
    assert detect_format(write(tmp_path, "other.log", text))[0] == fmt


def test_near_misses_are_not_records(tmp_path):
    text = (
        "batch_size: 32, loss: 2.3\n"  # `batch_size` is no counter
        "Batch size 64 | Train Loss 2.1\n"
        "Validation loss decreased (inf --> 0.512300).  Saving model ...\n"  # EarlyStopping print
        "loss[0] 2.5\n"  # an index without the colon
        "ep=22 loss=0.5 err=0.2\n"  # no `tr=[...]`: neither pytorch-kaldi nor a generic counter
    )
    r = parse_text(tmp_path, text)
    assert r.records == 0 and r.unparsed == 0
    assert detect_format(write(tmp_path, "near.log", text))[0] is None


def test_pytorch_kaldi_needs_its_block(tmp_path):
    from spikeforensics.ingest import pytorch_kaldi

    # `Loss = | err =` lines outside a summary block, and a block without `Training on`, are no records
    text = "Loss = 0.5 | err = 0.1\n----- Summary epoch 001 / 002\n-----\nLoss = 0.4 | err = 0.1\n"
    r = pytorch_kaldi.parse(SourceFile(write(tmp_path, "pk.log", text), "pk.log"))
    assert r.records == 0


def test_list_values_give_their_first_element(tmp_path):
    # a list per parameter group (`lr=[5e-05, 5e-05]`) gives its first element, as before
    text = "step 5 loss=[2.5] lr=[5e-05, 5e-05]\nstep 6 loss=[nan] lr=[5e-05, 5e-05]\n"
    m = parse_text(tmp_path, text).tables["metrics"]
    assert m.filter(pl.col("name") == "lr").get_column("value").to_list() == [5e-05, 5e-05]
    assert m.filter(pl.col("name") == "loss").get_column("step").to_list() == [5, 6]


def test_a_glog_prefix_is_no_key_value_pair(store, tmp_path):
    # Caffe / PaddlePaddle through glog: `I0712 12:10:37.058244  3123 solver.cpp:228] Iteration 0, loss = 2.46876`
    text = "".join(
        f"I0712 12:10:{s:02d}.058244  3123 solver.cpp:228] Iteration {s * 20}, loss = {2.4 - s / 100:.5f}\n"
        f"I0712 12:10:{s:02d}.058358  3123 sgd_solver.cpp:106] Iteration {s * 20}, lr = 0.01\n"
        for s in range(10)
    )
    metrics, _ = ingest(store, write(tmp_path, "caffe.log", text))
    assert records(metrics) == [s * 20 for s in range(10)]
    names = set(metrics.get_column("name").unique())
    assert "loss" in names and not any("cpp" in n for n in names)


def test_a_loss_printed_before_its_counter_is_a_record(store, tmp_path):
    # `loss = 2.31, step = 100, lr = 0.001` (a custom loop printing a sorted dict); the counter after the loss
    text = "".join(f"loss = {2.3 - i / 100:.4f}, step = {i * 10}, lr = 0.001\n" for i in range(30))
    path = write(tmp_path, "sorted.log", text)
    assert detect_format(path)[0] == "generic_steps"
    metrics, _ = ingest(store, path)
    assert records(metrics) == [i * 10 for i in range(30)] and value(metrics, 290, "loss") == pytest.approx(2.01)


def test_a_per_epoch_iter_counter_with_its_total_is_composed_with_the_epoch(store):
    # Flair's ModelTrainer: `epoch 3 - iter 12/47 - loss 2.1` (every line written twice by two handlers);
    # the iter counter restarts each epoch: step = (E - 1) * 47 + i, one attempt
    folder = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "fresh5"
    case = folder / "flair-b659-sequence-tagger-ner-training-log-healthy-137-epochs"
    facts = tomllib.loads((case / "FACTS.toml").read_text())
    metrics, f = ingest(store, case / facts["files"][0])
    steps = records(metrics)
    assert len(steps) == facts["step_records"] == 1644
    assert (steps[0], steps[-1]) == (facts["first_step"], facts["last_step"]) == (0, 6436)
    assert steps == sorted(steps) and train(metrics).get_column("attempt").unique().to_list() == [0]


def test_a_global_counter_printed_with_the_runs_total_is_kept(store, tmp_path):
    text = "".join(f"Epoch {1 + s // 100} Step {s}/300 loss {2.0 - s / 1000:.3f}\n" for s in range(0, 300, 20))
    metrics, _ = ingest(store, write(tmp_path, "g.log", text))
    assert records(metrics) == list(range(0, 300, 20))
