"""Streaming ingest (a parser's `parse_chunks`, written chunk by chunk into the store)
gives exactly the store a whole-file parse gives: same export, same manifest."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pyarrow.parquet as pq
import pytest

from spikeforensics import export, ingest
from spikeforensics.ingest import ingest_paths, megatron
from spikeforensics.store import Store

REAL_MEGATRON = [
    "megatron/bigscience_tr8_104b_exp1_glitch_with_validation.log",
    "megatron/bigscience_tr8_104b_exp2_glitch.log",
    "megatron/bigscience_tr8b_104b_optimizer_reset_samples_tflops.log",
    "megatron/bigscience_tr8b_104b_wrapped_and_elided.log",
    "megatron/epfllm_megatron_llm_33_nan_onset.log",
    "nanotron/nanotron_pr23_iteration_lines.log",
]


def megatron_log(prefixes: list[str], steps: int = 60) -> str:
    """A Megatron stdout printed by the ranks in `prefixes` (one record line each per
    step), with a NaN grad norm, a loss-scale drop, an overflow message, a validation
    block, a checkpoint save and a resume (the step counter going back)."""
    out = []
    scale = 65536.0
    order = list(range(1, steps + 1)) + list(range(40, steps + 1))  # resume from step 40
    for n, step in enumerate(order):
        if n == 30:
            out.append(
                "[2024-05-01 12:00:00,000] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! "
                "Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"
            )
            scale = 32768.0
        grad = "nan" if step == 17 else f"{0.5 + step / 100:.3f}"
        for p in prefixes:
            out.append(
                f"{p}[2024-05-01 12:{step // 60:02d}:{step % 60:02d}] iteration {step:8d}/{steps:8d} | "
                f"consumed samples: {step * 64:10d} | learning rate: {3e-4:.6E} | lm loss: {2 + 1 / step:.6E} | "
                f"loss scale: {scale:.1f} | grad norm: {grad} | number of skipped iterations: {int(n == 30)} | "
                f"number of nan iterations: 0 |"
            )
        if step == 20:
            out += [
                "-" * 60,
                f" validation loss at iteration {step} | lm loss value: 2.5E+00 | lm loss PPL: 1.2E+01 |",
                "-" * 60,
            ]
        if step == 25:
            out.append(f"{prefixes[0]}saving checkpoint at iteration      25 to /ckpt")
    return "\n".join(out) + "\n"


def store_export(store: Store, run: str) -> dict[str, list[dict]]:
    tables = {}
    for table in ("metrics", "events", "sources"):
        frame = export.export_frame(table, store.table(run, table))
        if table == "sources":
            frame = frame.drop("ingested_at", "path")
        tables[table] = json.loads(json.dumps(frame.to_dicts(), default=str).replace("NaN", '"nan"'))
    return tables


def both_paths(tmp_path, monkeypatch, log, chunk_bytes: int):
    """Export of `log` ingested whole (no `parse_chunks`) and streamed in small chunks."""
    whole = Store(tmp_path / "whole")
    with monkeypatch.context() as m:
        m.setitem(
            ingest.parsers(), "megatron", SimpleNamespace(NAME="megatron", sniff=megatron.sniff, parse=megatron.parse)
        )
        ingest_paths([log], "r", whole, fmt="megatron")
    streamed = Store(tmp_path / "streamed")
    with monkeypatch.context() as m:
        m.setattr(megatron, "parse_chunks", functools.partial(megatron.parse_chunks, chunk_bytes=chunk_bytes))
        report = ingest_paths([log], "r", streamed, fmt="megatron")
    assert not any((streamed.root / ".tmp").iterdir())
    return store_export(whole, "r"), store_export(streamed, "r"), report.files[0]


@pytest.mark.parametrize(
    "prefixes, ranks",
    [(["[rank0]: ", "[rank1]: "], [0, 1]), (["[rank3]: "], []), ([""], [])],
    ids=["two-ranks", "one-prefixed-rank", "no-prefix"],
)
def test_streaming_equals_whole_file_on_synthetic_megatron(tmp_path, monkeypatch, prefixes, ranks):
    log = tmp_path / "train.log"
    log.write_text(megatron_log(prefixes))
    whole, streamed, outcome = both_paths(tmp_path, monkeypatch, log, chunk_bytes=1500)
    assert streamed == whole
    assert outcome.ranks == ranks
    assert len(whole["metrics"]) > 500
    # one Parquet row group per chunk: the chunks were never concatenated
    (stored,) = (tmp_path / "streamed" / "tables" / "metrics" / "run=r").glob("*.parquet")
    assert pq.ParquetFile(stored).num_row_groups >= 10
    metrics = pl.DataFrame(streamed["metrics"])
    train = metrics.filter(pl.col("record").is_not_null())
    assert sorted(train.get_column("rank").unique().to_list(), key=str) == (ranks or [None])
    assert metrics.get_column("attempt").max() == 1  # the resume, across chunks
    assert train.get_column("record").n_unique() == (60 + 21) * (1 if len(prefixes) == 1 else 2)
    events = pl.DataFrame(streamed["events"])
    nan = events.filter((pl.col("kind") == "nan") & (pl.col("step") == 17))
    assert nan.height == len(prefixes)  # derived from each rank's NaN grad norm ...
    assert sorted(nan.get_column("rank").to_list(), key=str) == (ranks or [None])  # ... with the metrics' rank
    save = events.filter(pl.col("kind") == "checkpoint_save")
    # text events keep the prefix's rank whatever the metrics rule says
    assert save.get_column("rank").to_list() == [3 if prefixes == ["[rank3]: "] else (0 if ranks else None)]
    assert set(events.get_column("kind")) >= {"overflow", "nan", "checkpoint_save"}


@pytest.mark.parametrize("name", REAL_MEGATRON)
def test_streaming_equals_whole_file_on_real_excerpts(tmp_path, monkeypatch, real, name):
    whole, streamed, _ = both_paths(tmp_path, monkeypatch, real / name, chunk_bytes=300)
    assert streamed["metrics"] and streamed == whole


def test_hash_and_line_count_come_from_the_parse_pass(tmp_path, store, real, monkeypatch):
    """The file is read once: no separate hashing pass when the run holds no source of
    that size; the manifest still has the right SHA-256 and line count."""
    import hashlib

    log = real / REAL_MEGATRON[0]
    calls = []
    monkeypatch.setattr(ingest, "_sha256", lambda p: calls.append(p) or (_ for _ in ()).throw(AssertionError))
    ingest_paths([log], "r", store)
    assert calls == []
    row = store.sources("r").row(0, named=True)
    data = log.read_bytes()
    assert row["sha256"] == hashlib.sha256(data).hexdigest()
    assert row["lines"] == data.count(b"\n") + (not data.endswith(b"\n"))
    monkeypatch.undo()
    assert ingest_paths([log], "r", store).files[0].status == "unchanged"


def test_streaming_ingest_is_atomic(tmp_path, store, monkeypatch):
    """A crash between the data files and the manifest, or a parser error after some
    chunks were staged, leaves the store as it was and no staging files behind."""
    import os

    first = tmp_path / "first.log"
    first.write_text(megatron_log(["[rank0]: ", "[rank1]: "], steps=20))
    ingest_paths([first], "r", store)
    before = store.table("r", "metrics")
    second = tmp_path / "second.log"
    second.write_text(megatron_log(["[rank0]: ", "[rank1]: "]))
    real_replace = os.replace
    calls = {"n": 0}

    def crashing_replace(src, dst):
        calls["n"] += 1
        if calls["n"] == 2:  # metrics moved, events not yet, manifest not yet
            raise KeyboardInterrupt
        return real_replace(src, dst)

    with monkeypatch.context() as m:
        m.setattr(os, "replace", crashing_replace)
        with pytest.raises(KeyboardInterrupt):
            ingest_paths([second], "r", store)
    assert store.sources("r").height == 1 and store.table("r", "metrics").equals(before)
    assert not any((store.root / ".tmp").iterdir())

    original = megatron.parse_chunks

    def failing_chunks(src, chunk_bytes=1500):
        for n, part in enumerate(original(src, chunk_bytes)):
            if n == 3:
                raise ValueError("parser bug")
            yield part

    with monkeypatch.context() as m:
        m.setattr(megatron, "parse_chunks", failing_chunks)
        with pytest.raises(ingest.IngestError, match="parser bug"):
            ingest_paths([second], "r", store)
    assert store.sources("r").height == 1 and store.table("r", "metrics").equals(before)
    assert not any((store.root / ".tmp").iterdir())


# --- a per-layer CSV dump is read in chunks, whatever its line endings (issue 14, fuzz seed 16 input 255) ---


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_a_layer_csv_read_in_chunks_gives_the_rows_of_a_whole_read(tmp_path, ending):
    from spikeforensics.ingest import layers
    from spikeforensics.ingest.base import SourceFile

    original = Path(__file__).parents[1] / "sample_logs" / "holdout" / "layer_explode_hidden" / "grads.csv"
    rows = original.read_text().splitlines()
    dump = tmp_path / "grads.csv"
    dump.write_bytes(ending.join(rows).encode() + ending.encode())
    whole = layers.parse(SourceFile(path=original, name="grads.csv"))
    chunked = layers.parse(SourceFile(path=dump, name="grads.csv"), chunk_bytes=4096)  # ~100 chunks
    assert chunked.records == whole.records == whole.tables["layers"].select("step", "rank").unique().height
    assert chunked.tables["layers"].drop("line").equals(whole.tables["layers"].drop("line"))
    parts = list(layers.parse_chunks(SourceFile(path=dump, name="grads.csv"), chunk_bytes=4096))
    assert len(parts) > 50 and sum(p.records for p in parts) == whole.records
