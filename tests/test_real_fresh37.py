"""What sample_logs/real/fresh36 left and fresh37 first needed: an epoch's or the training's closing summary
(`Epoch 1 completed | train_loss=0.0787 | global_step=324`, `Training complete! Final loss: 3.1890`) printed beside
a loop's counted interval lines was read as one more training record."""

from __future__ import annotations

import polars as pl
from _ingest_helpers import REAL

from spikeforensics.ingest import parse_file

P2IGAN = REAL / "fresh36" / "custom-p2igan-rainfall-inpainting-gan-200k-steps-healthy-2000"
BUILD_LLM = REAL / "fresh35" / "gpt2-build-llm-karpathy-full-ft-after-label-offset-fix-2000-steps-healthy"


def _train_loss(result) -> pl.DataFrame:
    return result.tables["metrics"].filter(pl.col("name") == "loss").sort("line")


def _train_records(result) -> int:
    """Training-step records, as CONTRACT.md counts them (an eval record has no `record`)."""
    return result.tables["metrics"].filter(pl.col("record").is_not_null()).get_column("record").n_unique()


def test_an_epoch_closing_summary_beside_counted_interval_lines_is_no_record():
    """P2I-GAN's `Epoch E | step N/200000 | loss=X` every 100 steps are the 2,000 records; its 618
    `Epoch E completed | train_loss=X | global_step=N` epoch means (steps 324, 648, ...) are summaries."""
    result = parse_file(P2IGAN / "train.out", "generic_steps")
    loss = _train_loss(result)
    assert _train_records(result) == 2000 and loss.height == 2000
    assert loss.get_column("step").to_list() == list(range(100, 200001, 100))
    assert round(loss.item(0, "value"), 4) == 0.0789


def test_the_training_closing_line_is_no_record():
    """build_llm's 4 `step N/2000 (x%): train loss X, val loss Y` estimates are the records; `Training complete!
    Final loss: 3.1890` after them is the run's summary and `Final eval - ...` an evaluation."""
    result = parse_file(next(BUILD_LLM.glob("*.txt")), "generic_steps")
    assert _train_records(result) == 4
    assert _train_loss(result).get_column("step").to_list() == [0, 500, 1000, 1500]
    assert "final_loss" not in result.tables["metrics"].get_column("name").to_list()


def test_closing_lines_alone_are_a_once_per_epoch_loop_records(tmp_path):
    """With no other counted loss line, `Epoch N completed | train_loss=X` is the loop's one record per epoch."""
    log = tmp_path / "epochs.log"
    log.write_text("".join(f"Epoch {e} completed | train_loss={1 - e / 10}\n" for e in range(1, 6)))
    result = parse_file(log, "generic_steps")
    assert _train_records(result) == 5
    assert _train_loss(result).get_column("step").to_list() == [1, 2, 3, 4, 5]
