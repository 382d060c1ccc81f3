"""HF Trainer stdout beyond the real excerpts: quoted values, TRL keys, eval/summary
dicts, an eval bar, DeepSpeed overflows glued after tqdm bars, cut-short dicts."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest

from spikeforensics.ingest import detect_format, ingest_paths, parse_file
from spikeforensics.store import Store


def bar(n: int, m: int = 100) -> str:
    return f"  {n}%|█         | {n}/{m} [00:{n:02d}<01:00,  1.50it/s]"


OVF = "[2023-06-07 22:16:0{i},018] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {b}"


@pytest.fixture()
def hf_log(tmp_path):
    rows = [
        "***** Running training *****",
        "\r".join([bar(1), bar(2)]) + OVF.format(i=0, a=65536, b=32768),
        "\r".join(
            [
                bar(3),
                bar(4),
                " " * 40,
                "{'loss': '0.91', 'grad_norm': '0.8618', 'learning_rate': '3.094e-07', 'epoch': '0.6623', "
                "'rewards/chosen': -0.5, 'num_tokens': 1024.0}",
            ]
        ),
        bar(5),
        OVF.format(i=2, a=32768, b=16384),
        OVF.format(i=3, a=16384, b=8192),
        bar(8),
        "{'loss': nan, 'grad_norm': inf, 'learning_rate': 1e-05, 'epoch': 0.7}",
        "  50%|█████     | 25/50 [00:05<00:05,  5.0it/s]",
        "{'eval_loss': 1.25, 'eval_runtime': 10.0, 'eval_samples_per_second': 5.0, 'epoch': 0.7}",
        "{'loss': 1.5, 'grad_norm': np.float64(2.5), 'learning_rate': 1e-05, 'epoch': 0.8",
        bar(10),
        "{'loss': 1.4, 'grad_norm': np.float64(2.0), 'learning_rate': 1e-05, 'epoch': 0.9}   ",
        "{'train_runtime': 100.0, 'train_samples_per_second': 2.0, 'train_steps_per_second': 0.1, "
        "'train_loss': 1.6, 'epoch': 1.0}",
    ]
    path = tmp_path / "stdout.log"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_hf_records_steps_and_kinds(hf_log):
    assert detect_format(hf_log)[0] == "hf_trainer"
    r = parse_file(hf_log, "hf_trainer")
    m = r.tables["metrics"]
    loss = m.filter(pl.col("name") == "loss").sort("line")
    assert loss.get_column("step").to_list() == [4, 8, 10]
    assert loss.get_column("record").to_list() == [0, 1, 2]
    assert loss.item(0, "value") == 0.91 and math.isnan(loss.item(1, "value"))
    first = dict(m.filter(pl.col("line") == 3).select("name", "value").iter_rows())
    assert first == {
        "loss": 0.91,
        "grad_norm": 0.8618,
        "lr": 3.094e-07,
        "epoch": 0.6623,
        "rewards_chosen": -0.5,
        "num_tokens": 1024.0,
    }
    # the eval dict takes the training bar's counter, not the eval bar's 25/50
    ev = m.filter(pl.col("name") == "eval_loss")
    assert ev.item(0, "step") == 8 and ev.item(0, "record") is None
    summary = m.filter(pl.col("line") == 14)
    assert summary.get_column("record").null_count() == summary.height
    assert "train_loss" in set(summary.get_column("name")) and "loss" not in set(summary.get_column("name"))
    assert m.filter((pl.col("line") == 13) & (pl.col("name") == "grad_norm")).item(0, "value") == 2.0
    # the dict cut short is reported with its line, not silently dropped
    assert r.unparsed == 1 and r.unparsed_examples[0][0] == 11


def test_hf_overflow_events_get_tqdm_steps(hf_log, tmp_path):
    store = Store(tmp_path / "s")
    ingest_paths([hf_log], "r", store)
    ev = store.table("r", "events")
    ovf = ev.filter(pl.col("kind") == "overflow").sort("line")
    # `2/100` then an overflow: it belongs to step 3; `5/100` then two: steps 6 and 7
    assert ovf.get_column("step").to_list() == [3, 6, 7]
    assert ovf.get_column("line").to_list() == [2, 5, 6]
    assert json.loads(ovf.item(0, "detail"))["new_scale"] == 32768
    nan = ev.filter(pl.col("kind") == "nan")
    assert nan.get_column("step").to_list() == [8]


@pytest.mark.parametrize("chunk_bytes", [60, 200])
def test_hf_steps_and_overflows_read_in_chunks(hf_log, chunk_bytes):
    """The same log read in chunks (`parse_chunks`, as a file of 16 MiB or more is): the training bar's
    total comes from the first pass over the file, so the eval dict still takes counter 8, and the
    overflows after a counter go on counting across a cut."""
    from spikeforensics.ingest import hf_trainer
    from spikeforensics.ingest.base import SourceFile

    parts = list(hf_trainer.parse_chunks(SourceFile(path=hf_log, name=hf_log.name), chunk_bytes=chunk_bytes))
    assert len(parts) > 3
    metrics = pl.concat([p.tables["metrics"] for p in parts if "metrics" in p.tables])
    assert metrics.filter(pl.col("name") == "loss").sort("line").get_column("step").to_list() == [4, 8, 10]
    assert metrics.filter(pl.col("name") == "eval_loss").get_column("step").to_list() == [8]
    events = pl.concat([p.tables["events"] for p in parts if "events" in p.tables])
    assert events.filter(pl.col("kind") == "overflow").sort("line").get_column("step").to_list() == [3, 6, 7]
    assert sum(p.unparsed for p in parts) == 1


def test_hf_nan_masking_note(tmp_path):
    path = tmp_path / "masked.log"
    path.write_text("{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.5}\r\n", encoding="utf-8")
    r = parse_file(path, "hf_trainer")
    assert any("NaN loss" in n for n in r.notes)
    assert r.tables["metrics"].filter(pl.col("name") == "loss").item(0, "value") == 0.0


def test_hf_resume_bar_goes_back_new_attempt(tmp_path):
    rows = [
        bar(9),
        "{'loss': 1.0, 'learning_rate': 1e-05, 'epoch': 0.1}",
        bar(10),
        "{'loss': 1.1, 'learning_rate': 1e-05, 'epoch': 0.1}",
        "Continuing training from checkpoint, will skip to saved global_step",
        bar(6),
        "{'loss': 1.2, 'learning_rate': 1e-05, 'epoch': 0.1}",
    ]
    path = tmp_path / "resume.log"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    r = parse_file(path, "hf_trainer")
    loss = r.tables["metrics"].filter(pl.col("name") == "loss").sort("line")
    assert loss.get_column("step").to_list() == [9, 10, 6]
    assert loss.get_column("attempt").to_list() == [0, 0, 1]
    res = r.tables["events"].filter(pl.col("kind") == "resume")
    assert res.height == 1 and res.item(0, "step") == 6
