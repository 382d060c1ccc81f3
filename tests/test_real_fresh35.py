"""What sample_logs/real/fresh35 first needed: a loop that prints its own metrics dict after a counter
(`Epoch 44: {'loss': 13.77}`) was taken for a config dump (a dict after a colon is another dict's value) and read
nothing; the counter before the dict is the step, and a prefix naming a validation pass makes an eval record."""

from __future__ import annotations

import polars as pl
from _ingest_helpers import REAL

from spikeforensics import api
from spikeforensics.ingest import detect_format, parse_file

TITANS = REAL / "fresh35" / "custom-titans-mac-small-toy-run-loss-spikes-epoch44-and-56-recovers"


def test_a_dict_printed_after_an_epoch_counter_is_a_record_of_that_epoch(tmp_path):
    """A Titans toy run's Python logging, `<time> - titans_training - INFO - Epoch N: {'loss': X}` for epochs 0-99:
    100 records stepped by the epoch, the spikes at epochs 44 (13.8) and 56 (20.2) in them; the run is unstable
    from the 56 spike on."""
    log = next(TITANS.glob("*.log"))
    assert detect_format(log)[0] == "hf_trainer"
    store = tmp_path / "store"
    api.ingest([log], run_id="ti", store=store)
    loss = api.export("ti", "metrics", store).filter(pl.col("name") == "loss").sort("step")
    assert loss.get_column("step").to_list() == list(range(100))
    by_step = dict(zip(loss.get_column("step"), loss.get_column("value")))
    assert round(by_step[44], 3) == 13.772 and round(by_step[56], 3) == 20.242
    diagnosis = api.diagnose("ti", store=store)
    assert diagnosis["verdict"]["status"] == "unstable"
    assert any(i["step_start"] <= 56 <= i["step_end"] for i in diagnosis["incidents"])


def test_train_and_val_dicts_after_their_counters_are_train_and_eval_records(tmp_path):
    """`Train Epoch 1: {...}` / `Val Epoch 1: {...}` (a loop's logger, no progress bar): the epoch is the step of
    both, the validation dict's keys are eval metrics; a config dump's nested dict stays no record."""
    log = tmp_path / "train.log"
    lines = ["config: {'train': {'log_interval': 200, 'learning_rate': 0.0001}}"]
    for e in range(1, 6):
        lines.append(f"2026-01-08 02:05:0{e},503 - __main__ - INFO - Train Epoch {e}: {{'loss': {5.0 / e:.3f}, 'mae': 2.5}}")
        lines.append(f"2026-01-08 02:05:0{e},503 - __main__ - INFO - Val Epoch {e}: {{'loss': {6.0 / e:.3f}, 'mae': 3.1}}")
    log.write_text("\n".join(lines) + "\n")
    metrics = parse_file(log, "hf_trainer").tables["metrics"]
    loss = metrics.filter(pl.col("name") == "loss").sort("step")
    assert loss.get_column("step").to_list() == [1, 2, 3, 4, 5]
    assert loss.get_column("value").to_list() == [5.0, 2.5, 1.667, 1.25, 1.0]
    held_out = metrics.filter(pl.col("name") == "eval_loss").sort("step")
    assert held_out.get_column("step").to_list() == [1, 2, 3, 4, 5] and held_out.get_column("value")[0] == 6.0
    assert metrics.filter(pl.col("name") == "lr").height == 0  # the config's learning_rate is no record
