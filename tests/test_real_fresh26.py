"""What sample_logs/real/fresh26 (bug reproductions, YOLO results tables, a Keras CSVLogger) first needed: YOLOv5's
headerless `results.txt`, a signed loss that climbs by 150x tenth after tenth, and a held-out loss that measures
other data than training does (an unshuffled Keras `validation_split`)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import polars as pl
from _detect_synth import metrics_frame, run_from
from _ingest_helpers import real_case, series

from spikeforensics import api
from spikeforensics.detect import heldout, signed_jump
from spikeforensics.ingest import parse_file
from spikeforensics.params import Params
from spikeforensics.rundata import RunData

REAL = Path(__file__).resolve().parents[1] / "sample_logs" / "real"
RESULTS_TXT = "yolov5-results-txt-player-detection-500-epochs-healthy"
CSVLOGGER = "keras-csvlogger-ecg-resnet-bce-negative-loss-runaway-70-epochs"
UNSHUFFLED = "keras-bugrepro-so56103207-unshuffled-validation-split-val-acc-zero-val-loss-climbs"


def diagnose(tmp_path, name):
    folder = REAL / "fresh26" / name
    facts = tomllib.loads((folder / "FACTS.toml").read_text())
    api.ingest([folder / f for f in facts["files"]], run_id="r", store=tmp_path)
    return api.diagnose(api.load_run("r", tmp_path)), facts


def test_yolov5_results_txt_without_a_header(store):
    metrics, _, f, facts = real_case(store, "fresh26", RESULTS_TXT)
    loss = series(metrics, "loss")
    assert f.format == "column_table" and len(loss) == facts["step_records"] == 500
    assert loss[0] == (0, 0.1854) and loss[-1][0] == 499  # `total`, the sum of box, obj and cls
    assert series(metrics, "box_loss")[0] == (0, 0.12)


def test_a_line_of_15_numbers_is_no_results_txt_without_its_epoch_fraction(tmp_path):
    path = tmp_path / "results.txt"
    path.write_text("\n".join(" ".join(str(i + k) for k in range(15)) for i in range(5)) + "\n")
    assert parse_file(path, "column_table").tables.get("metrics") is None


def test_a_signed_loss_climbing_tenth_after_tenth_is_a_model_bug(tmp_path):
    d, facts = diagnose(tmp_path, CSVLOGGER)
    (inc,) = d["incidents"]
    assert not facts["healthy"] and inc["kind"] == "divergence" and inc["root_cause"] == "model_bug"


def test_a_signed_objective_that_crosses_zero_does_not_climb():
    # an NLL from +3 to -40 (settling): its magnitude dips where it crosses zero, no runaway
    rng = np.random.default_rng(4)
    nll = -40 + 43 * np.exp(-np.arange(300) / 50) + rng.normal(0, 0.1, 300)
    run = run_from({"step": np.arange(300), "loss": nll})
    assert not [f for f in signed_jump.detect(run, Params()) if f.facts.get("cause") == "signed_runaway"]


def test_a_held_out_set_unlike_the_training_data_is_data_drift(tmp_path):
    d, facts = diagnose(tmp_path, UNSHUFFLED)
    assert d["verdict"]["root_cause"] == "data_drift"
    (inc,) = [i for i in d["incidents"] if i["kind"] == "divergence"]
    assert inc["root_cause"] == "data_drift" and inc["severity"] == "warning"
    # the per-batch running means wander inside an epoch whose mean does not rise: notes (detect/epoch_restarts.py)
    assert not [i for i in d["incidents"] if i["kind"] == "soft_drift"]
    assert any(n["kind"] == "soft_drift" and "running mean that restarts" in n["summary"] for n in d["notes"])


def _run_with_evals(evals: np.ndarray) -> RunData:
    """A training loss falling 1.0 -> 0.05 over 400 steps and an evaluation every 40 steps (record null)."""
    train = metrics_frame({"step": np.arange(400), "loss": np.geomspace(1.0, 0.05, 400)})
    steps = np.arange(0, 400, 40)
    rows = pl.DataFrame(
        {
            "source": "train.log",
            "line": 1000 + np.arange(steps.size),
            "step": steps,
            "record": pl.Series([None] * steps.size, dtype=pl.Int64),
            "attempt": pl.Series([0] * steps.size, dtype=pl.Int32),
            "rank": pl.Series([None] * steps.size, dtype=pl.Int32),
            "name": "eval_loss",
            "value": np.asarray(evals, dtype=float),
        }
    )
    return RunData.from_frames(metrics=pl.concat([train, rows], how="diagonal_relaxed"))


def test_overfitting_and_a_steady_gap_are_no_mismatch():
    def found(evals):
        return heldout.detect_mismatch(_run_with_evals(evals), Params())

    assert found(np.r_[np.linspace(1.0, 0.6, 5), np.linspace(0.6, 2.0, 5)]) == []  # overfitting: starts near train
    assert found(np.full(10, 6.0)) == []  # far from the start, but flat: another unit, not a climb
    (mismatch,) = found(np.linspace(8.0, 50.0, 10))
    assert mismatch.facts["cause"] == "heldout_mismatch"
