"""What sample_logs/real/fresh31 (nnU-Net, chemprop, AllenNLP, YOLOX, Sockeye, mmdetection, Spinning Up, a Lightning
PINN) first needed: AllenNLP's per-epoch `Training | Validation` table, chemprop's step-less `Loss = x, PNorm = y,
GNorm = z, lr_0 = w` lines, Sockeye 1.18's speedometer with tokens/sec and updates/sec, a tab-separated table whose
column names hold spaces, and a supervised loss that goes negative judged in part rather than not at all."""

from __future__ import annotations

import polars as pl
from _ingest_helpers import REAL, ingest

from spikeforensics import api
from spikeforensics.ingest import detect_format

CASES = {
    "allennlp": "allennlp-names-tagger-char-lstm-93-epochs-patience-stop-healthy",
    "chemprop": "chemprop-nf10k-rejection-mpnn-fold0-model0-120-epochs-gnorm-blips-healthy",
    "sockeye": "sockeye-parabank-rnn-paraphrase-890k-updates-5-launches-2-resumes-healthy",
    "spinningup": "spinningup-ddpg-inverteddoublependulum-progress-txt-q-loss-climbs-every-epoch-to-7e10",
    "nnunet": "nnunet-v1-refuge-2d-fold4-800-epochs-poly-lr-negative-dice-ce-healthy",
}


def _case(key: str):
    return REAL / "fresh31" / CASES[key]


def _names(metrics: pl.DataFrame) -> dict[str, int]:
    return dict(metrics.group_by("name").len().iter_rows())


def test_allennlp_epoch_tables_are_records_with_their_validation_column(tmp_path, store):
    metrics, _, f = ingest(store, _case("allennlp") / "stdout.log")
    assert f.format == "allennlp"
    names = _names(metrics)
    assert names["loss"] == names["val_loss"] == 93 and names["accuracy"] == 93
    assert "val_cpu_memory_MB" not in names  # `N/A`: no value
    steps = metrics.filter(pl.col("name") == "loss").sort("line").get_column("step").to_list()
    assert steps == list(range(93))  # the epoch of the `Epoch N/999` line before each table
    # AllenNLP 1.x/2.x print the same table through their console logger
    text = "\n".join(
        [
            "2021-03-01 10:00:00,000 - INFO - allennlp.training.gradient_descent_trainer - Epoch 0/9",
            "2021-03-01 10:05:00,000 - INFO - allennlp.training.callbacks.console_logger -"
            "                        Training |  Validation",
            "2021-03-01 10:05:00,000 - INFO - allennlp.training.callbacks.console_logger - loss"
            "               |     0.693  |     0.690",
            "2021-03-01 10:05:00,000 - INFO - allennlp.training.callbacks.console_logger - worker_0_memory_MB"
            " |  1203.000  |       N/A",
            "2021-03-01 10:05:01,000 - INFO - allennlp.training.gradient_descent_trainer - Epoch 1/9",
            "2021-03-01 10:10:00,000 - INFO - allennlp.training.callbacks.console_logger -"
            "                        Training |  Validation",
            "2021-03-01 10:10:00,000 - INFO - allennlp.training.callbacks.console_logger - loss"
            "               |     0.512  |     0.530",
        ]
    )
    path = tmp_path / "out.log"
    path.write_text(text + "\n")
    metrics, _, f = ingest(store, path, run="r2")
    assert f.format == "allennlp"
    loss = metrics.filter(pl.col("name") == "loss").sort("step")
    assert loss.get_column("step").to_list() == [0, 1] and loss.get_column("value").to_list() == [0.693, 0.512]


def test_chemprop_loss_lines_without_a_counter_are_step_records(tmp_path, store):
    metrics, _, f = ingest(store, _case("chemprop") / "verbose.log")
    assert f.format == "generic_steps"
    names = _names(metrics)
    assert names["loss"] == names["grad_norm"] == names["lr"] == 1908  # `GNorm` and `lr_0` by their aliases
    # a bare `loss = 0.5` (a printed script or config) is no record: only as the first of `name = value` pairs
    path = tmp_path / "script.log"
    path.write_text("loss = 0.5\nloss = 1.0\nloss = 2.0\nweight = 3\n")
    assert detect_format(path)[0] != "generic_steps"


def test_sockeye_118_speedometer_with_tokens_and_updates_per_second(tmp_path, store):
    metrics, _, f = ingest(store, _case("sockeye") / "log")
    assert f.format == "sockeye"
    names = _names(metrics)
    # every `Epoch[E] Batch [N]` line (17,816), but the one a resume reprints at the step the log stopped at, which
    # is one record with the line before it (CONTRACT.md: consecutive lines of the same step); the later resume
    # goes back (184500 -> 184050): a second attempt
    assert names["loss"] == names["tokens_per_s"] == 17815
    assert metrics.filter(pl.col("name") == "loss").get_column("attempt").n_unique() == 2


def test_a_tab_separated_table_whose_names_hold_spaces(tmp_path, store):
    metrics, _, f = ingest(store, _case("spinningup") / "progress.txt")
    assert f.format == "column_table"
    names = _names(metrics)
    assert names["loss_q"] == 200  # `Time Steps` and `AVG Time Per Epoch` are one column each
    diagnosis = api.diagnose(api.load_run("r", store))
    assert diagnosis["verdict"]["status"] == "unstable"  # LossQ 3 -> 7e10 while the returns stay at the maximum


def test_a_supervised_loss_that_goes_negative_is_judged_in_part(tmp_path):
    """nnU-Net's Dice + cross-entropy falls from -0.48 to -0.96: no ratio scale, but its non-finite values, a
    runaway and jumps far past its range are judged (`limited`), so a clean run is healthy, not inconclusive. An
    RL objective or a short excerpt stays `unjudged` (tests/test_detect_signed_jump.py)."""
    api.ingest([str(p) for p in _case("nnunet").glob("training_log_*.txt")], run_id="r", store=tmp_path)
    diagnosis = api.diagnose(api.load_run("r", tmp_path))
    coverage = diagnosis["verdict"]["coverage"]
    assert diagnosis["verdict"]["status"] == "healthy"
    assert "loss" in coverage["limited"] and not coverage["unjudged"]
