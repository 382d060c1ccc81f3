"""What sample_logs/real/fresh61 first needed: a TensorFlow 1 loop printing its metrics with a zero-padded format,
whose NaN reads `00nan` (`f"{x:05.2f}"` of NaN; the run looked healthy, its 236 NaN epochs unread), and a Lightning
`metrics.csv` whose quoted per-time-bin columns (`"train/se3_vf_loss t=[0.00,0.25)"`) were taken for nvidia-smi's
bracketed units (unreadable)."""

from __future__ import annotations

import polars as pl
from _ingest_helpers import REAL

from spikeforensics import api
from spikeforensics.ingest._fields import to_float

FRESH = REAL / "fresh61"


def _run(paths, tmp_path, run_id: str):
    api.ingest([str(p) for p in paths], run_id=run_id, store=tmp_path)
    return api.load_run(run_id, tmp_path)


def test_zero_padded_nan_and_inf_are_non_finite():
    tokens = pl.Series(["00nan", "-000inf", "00000inf", "0.5", "nan.0", "007"])
    values = pl.select(to_float(pl.lit(tokens))).to_series().to_list()
    assert str(values[0]) == "nan" and values[1:4] == [float("-inf"), float("inf"), 0.5]
    assert str(values[4]) == "nan" and values[5] == 7.0


def test_tf1_loop_zero_padded_nan_epochs_are_read(tmp_path):
    case = FRESH / "tf1-ntfcell-traffic-flow-rnn-sudden-nan-epoch80-315-records"
    run = _run([case / "train.log"], tmp_path, "ntf")
    loss = run.series("loss")
    assert loss.filter(~pl.col("value").is_finite()).height >= 230
    d = api.diagnose(run)
    assert d["verdict"]["status"] == "unstable"
    [inc] = [i for i in d["incidents"] if i["kind"] == "nonfinite"]
    assert abs(inc["first_nonfinite_step"] - 80) <= 1


def test_csv_columns_with_brackets_inside_their_names_are_metrics(tmp_path):
    case = FRESH / "lightning-se3-flow-matching-rna-backbone-303-records-healthy"
    run = _run([case / "metrics.csv"], tmp_path, "rna")
    assert run.series("loss").height == 303
    # nvidia-smi's own query output keeps its units at the end of a column
    smi = tmp_path / "smi.csv"
    smi.write_text(
        "timestamp, name, utilization.gpu [%], memory.used [MiB]\n2024/01/01 00:00:00.000, A100, 50 %, 100 MiB\n"
    )
    from spikeforensics.ingest import csv_metrics
    from spikeforensics.ingest.base import SniffSample

    text = smi.read_text()
    assert csv_metrics.sniff(SniffSample(smi, text, text.splitlines())) == 0.0


def test_a_held_out_loss_that_never_changes_means_the_weights_never_did(tmp_path):
    """cadence-gemma (W&B capture): the training loss moves with its batches for 1,000 records, the eval loss
    prints the same number at all of them: the optimizer was built over a state dict, not the model's parameters
    (its next commit, `Fix param optim.`)."""
    case = (
        FRESH / "custom-recurrentgemma-vlm-projector-negative-softmax-loss-optimizer-not-bound-no-learning-1000-records"
    )
    run = _run(list(case.glob("*.log")), tmp_path, "cg")
    d = api.diagnose(run)
    [inc] = d["incidents"]
    assert inc["kind"] == "no_progress" and inc["root_cause"] == "model_bug"


def test_a_held_out_loss_that_moves_is_no_frozen_model():
    import numpy as np

    from spikeforensics.detect import stall
    from spikeforensics.params import Params
    from spikeforensics.rundata import RunData

    n = 40
    rows = {"step": list(range(n)) * 2, "name": ["loss"] * n + ["eval_loss"] * n}
    train = list(2 + np.sin(np.arange(n)))
    for held, found in (([0.7] * n, True), ([0.7 + i / 1000 for i in range(n)], False)):
        metrics = pl.DataFrame(
            {**rows, "value": train + held, "record": list(range(n)) + [None] * n, "source": "t", "attempt": 0},
            schema_overrides={"record": pl.Int64},
        )
        causes = [f.facts.get("cause") for f in stall.detect(RunData.from_frames(metrics=metrics), Params())]
        assert ("heldout_constant" in causes) is found
