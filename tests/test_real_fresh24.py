"""What sample_logs/real/fresh24 (fault-study artefacts) first needed: a loss that sits at chance, ln K, from the
first record to the last (detect/stall.py `chance_level`), and Keras' history written out as a table without an
epoch column (AutoTrainer's `log.csv`: `val_loss,val_accuracy,loss,accuracy`; pandas' `to_csv` with its index)."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
from _detect_synth import run_from
from _ingest_helpers import real_case, series

from spikeforensics import api
from spikeforensics.detect import stall
from spikeforensics.ingest import parse_file
from spikeforensics.params import Params

REAL = Path(__file__).resolve().parents[1] / "sample_logs" / "real"
CIRCLE = "autotrainer-demo-circle-gradient-vanish-loss-flat-0-693-91-epochs"
SIGMOID = "pytorch-debugnn-wandb-mnist-sigmoid-vanishing-gradient-stuck-loss-2-30-10-epochs"


def diagnose(tmp_path, split, name):
    folder = REAL / split / name
    facts = tomllib.loads((folder / "FACTS.toml").read_text())
    api.ingest([folder / f for f in facts["files"]], run_id="r", store=tmp_path)
    return api.diagnose(api.load_run("r", tmp_path)), facts


def test_keras_history_table_without_an_epoch_column(store):
    metrics, _, f, facts = real_case(store, "fresh24", CIRCLE)
    loss = series(metrics, "loss")
    assert f.format == "csv_metrics" and len(loss) == facts["step_records"] == 91
    assert loss[0] == (1, 0.693695776462555)  # the `loss` column, not the first one (`val_loss`)
    assert series(metrics, "eval_loss")[0][1] == 0.6933254281679789


def test_pandas_index_is_the_row_counter(tmp_path):
    path = tmp_path / "history.csv"
    path.write_text(",loss,accuracy,val_loss,val_accuracy\n0,0.69,0.5,0.68,0.51\n1,0.60,0.6,0.62,0.58\n")
    m = parse_file(path, "csv_metrics").tables["metrics"]
    assert series(m, "loss") == [(0, 0.69), (1, 0.60)]


def test_a_text_line_cut_at_its_commas_is_no_csv_header(store):
    # `valid_evaluation: loss=1.83, acc=0.76` opening a crnn-pytorch log: a line, not a table's header
    metrics, _, f, _ = real_case(store, "fresh2", "crnn-pytorch-7-batch-loss-nan-6590-no-grad-clip")
    assert f.format != "csv_metrics" and len(series(metrics, "loss")) == 15


def test_losses_pinned_at_chance_are_no_progress_blamed_on_vanishing_gradients(tmp_path):
    for name in (CIRCLE, SIGMOID):
        d, facts = diagnose(tmp_path / name, "fresh24", name)
        (inc,) = d["incidents"]
        assert inc["kind"] == "no_progress" and inc["root_cause"] == facts["stated_label"] == "vanishing_gradients"
        assert any("ln " in str(e.get("note", "")) for e in inc["evidence"])


def at(values):
    return run_from({"step": np.arange(1, len(values) + 1), "loss": np.asarray(values, dtype=float)})


def test_chance_needs_the_whole_run_pinned_at_ln_k():
    p = Params()
    rng = np.random.default_rng(0)
    stuck = math.log(10) + rng.normal(0, 0.005, 30)
    (f,) = stall.detect(at(stuck), p)
    assert f.facts["cause"] == "chance_level" and f.facts["chance_classes"] == 10
    # a run that starts at chance and learns: below ln 10 by its last third
    learns = math.log(10) * np.exp(-np.arange(30) / 10) + 0.1
    assert not stall.detect(at(learns), p)
    # a noisy fine-tune whose median happens to pass ln 2 (0.48-1.36): not pinned there
    noisy = [1.3587, 0.4827, 0.5813, 0.7004, 0.6607, 1.0354, 0.6606, 0.6845, 0.8643, 0.8247]
    assert not stall.detect(at(noisy), p)
    # a loss at ln 12 (an LLM's first steps at 2.48): between the class counts, no verdict
    assert not stall.detect(at(math.log(12) + rng.normal(0, 0.01, 30)), p)


def test_a_loops_line_and_its_own_dict_of_the_same_epoch_are_one_record(store):
    # `Epoch: 1 	Training Loss: 3.179975 	Validation Loss: 2.462426`, 5 lines later the loop's own
    # `{'Epoch': 1, 'loss': 3.1799750099401654, 'valid_loss': 2.46242597599331, 'Valid_Accuracy': 39.22}`
    name = "pytorch-ml-daikon-forum84911-efficientnet-cifar100-quarter-trainable-healthy-40-epochs"
    metrics, _, f, facts = real_case(store, "fresh24", name)
    loss = series(metrics, "loss")
    assert f.format == "hf_trainer+generic_steps" and len(loss) == facts["step_records"] == 40
    assert [s for s, _ in loss] == list(range(1, 41)) and loss[0][1] == 3.179975  # the first line's values
    assert "valid_accuracy" in metrics.filter(metrics["step"] == 1).get_column("name").to_list()


def test_a_one_record_training_bump_the_heldout_loss_does_not_show_is_a_note(tmp_path):
    d, facts = diagnose(tmp_path, "fresh24", "pytorch-debugnn-wandb-mnist-relu-fixed-rerun-healthy-10-epochs")
    assert facts["healthy"] and d["verdict"]["status"] == "healthy"
    assert any("held-out loss did not move" in n.get("summary", "") for n in d["notes"])


def test_the_same_bump_with_the_heldout_loss_rising_keeps_its_severity():
    from spikeforensics import detect as det

    step = np.arange(1, 41)
    train = 2.0 * np.exp(-step / 10) + 0.1
    test = 1.8 * np.exp(-step / 12) + 0.12
    train[25] *= 6  # one epoch's last-minibatch loss 6x
    calm = run_from({"step": step, "loss": train, "test_loss": test})
    incidents, notes = det.detect_incidents(calm, Params())
    assert not [i for i in incidents if i.step_start <= 26 <= i.step_end]
    assert [n for n in notes if n.facts.get("heldout_calm")]
    hurt = test.copy()
    hurt[25:28] *= 1.5  # the model measured on held-out data got worse with it
    incidents, _ = det.detect_incidents(run_from({"step": step, "loss": train, "test_loss": hurt}), Params())
    assert [i for i in incidents if i.step_start <= 26 <= i.step_end]
