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
from spikeforensics.ingest import IngestError, ingest_paths, megatron
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


# --- an HF Trainer stdout is read in chunks when big (issue 14, fuzz seed 15 input 488) ---


def hf_log(steps: int = 40) -> str:
    """An HF Trainer stdout: a training bar redrawn with CRs before each dict, an eval bar of
    another total with its eval dict, a DeepSpeed overflow after a counter, a checkpoint save,
    a traceback whose exception line comes 12 lines later, a resume (the counter going back)
    and the closing summary dict."""
    out = ["***** Running training *****", "  Total optimization steps = 40"]
    order = list(range(1, steps + 1)) + list(range(30, steps + 1))  # resumed from step 30
    for n, step in enumerate(order):
        if n == steps:
            out.append("Resuming training from checkpoint-30")
        bar = "\r".join(f"{step * 100 // steps:3d}%|##| {step}/{steps} [00:{s:02d}<00:10, 1.5it/s]" for s in (1, 2))
        out.append(bar)
        if step == 7:
            out.append("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768")
        grad = "nan" if step == 17 else f"{0.5 + step / 100}"
        out.append(
            f"{{'loss': {2 + 1 / step!r}, 'grad_norm': {grad}, 'learning_rate': {1e-4 * step!r}, 'epoch': {step / 40}}}"
        )
        if step % 10 == 0:
            out.append("\r".join(f" {k}/5 [00:0{k}<00:00, 3.1it/s]" for k in range(1, 6)))
            out.append(f"{{'eval_loss': {2.5 - step / 100}, 'eval_runtime': 1.2, 'epoch': {step / 40}}}")
            out.append(f"Saving model checkpoint to out/checkpoint-{step}")
        if step == 23:
            out += ["Traceback (most recent call last):"]
            out += [f'  File "train.py", line {k}, in step' for k in range(10)]
            out += ["RuntimeError: a recoverable hiccup"]
    out.append("{'train_runtime': 60.5, 'train_samples_per_second': 10.6, 'train_loss': 2.1, 'epoch': 1.0}")
    return "\n".join(out) + "\n"


def hf_paths(tmp_path, monkeypatch, log: Path, chunk_bytes: int):
    """Export of `log` ingested whole (a small file) and streamed in chunks of `chunk_bytes`."""
    from spikeforensics.ingest import hf_trainer

    whole = Store(tmp_path / "whole")
    ingest_paths([log], "r", whole, fmt="hf_trainer")
    streamed = Store(tmp_path / "streamed")
    with monkeypatch.context() as m:
        m.setattr(hf_trainer, "STREAM_MIN_BYTES", 0)
        m.setattr(hf_trainer, "parse_chunks", functools.partial(hf_trainer.parse_chunks, chunk_bytes=chunk_bytes))
        report = ingest_paths([log], "r", streamed, fmt="hf_trainer")
    assert not any((streamed.root / ".tmp").iterdir())
    return sorted_export(whole), sorted_export(streamed), report.files[0]


def sorted_export(store: Store) -> dict[str, list[dict]]:
    tables = store_export(store, "r")
    key = functools.partial(json.dumps, sort_keys=True, default=str)
    return {t: sorted(rows, key=key) for t, rows in tables.items()}


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"], ids=["LF", "CRLF", "CR"])
def test_hf_streaming_equals_whole_file_on_synthetic_stdout(tmp_path, monkeypatch, ending):
    log = tmp_path / "stdout.log"
    log.write_bytes(hf_log().replace("\n", ending).encode())
    whole, streamed, outcome = hf_paths(tmp_path, monkeypatch, log, chunk_bytes=300)
    assert streamed == whole
    (stored,) = (tmp_path / "streamed" / "tables" / "metrics" / "run=r").glob("*.parquet")
    assert pq.ParquetFile(stored).num_row_groups >= 10  # one per chunk: streamed, not concatenated
    metrics = pl.DataFrame(streamed["metrics"])
    assert metrics.get_column("attempt").max() == 1  # the resume, across chunks
    train = metrics.filter(pl.col("record").is_not_null() & (pl.col("name") == "loss")).sort("line")
    assert train.get_column("step").to_list()[:3] == [1, 2, 3] and train.height == 40 + 11
    events = pl.DataFrame(streamed["events"]).select("step", "kind", "detail")
    assert events.filter(pl.col("kind") == "overflow").get_column("step").to_list() == [8]  # after counter 7
    (error,) = events.filter(pl.col("kind") == "error").iter_rows(named=True)
    assert error["step"] == 23 and "a recoverable hiccup" in error["detail"]  # its exception line read
    assert events.filter(pl.col("kind") == "resume").get_column("step").to_list() == [30]  # the next counter
    assert outcome.records == whole_records(whole)


def whole_records(tables: dict) -> int:
    return pl.DataFrame(tables["metrics"]).get_column("line").n_unique()


def test_hf_dict_takes_its_step_from_a_counter_in_the_chunk_before(tmp_path, monkeypatch):
    """The training bar's counters fill a chunk before the first dict comes: the dict in the next
    chunk still takes the last counter as its step, and the bar's total (learnt from that dict)
    makes the first chunk's counters training counters (the event between them takes one)."""
    from spikeforensics.ingest import hf_trainer
    from spikeforensics.ingest.base import SourceFile

    bar = "\r".join(f" {k}/10 [00:{k:02d}<00:10, 1.1it/s]" for k in range(1, 8))
    log = tmp_path / "stdout.log"
    text = bar + "\nSaving model checkpoint to out/checkpoint-7\n" + bar + "\n{'loss': 1.5, 'learning_rate': 0.1}\n"
    log.write_text(text)
    parts = list(hf_trainer.parse_chunks(SourceFile(path=log, name="stdout.log"), chunk_bytes=len(bar) + 60))
    assert sum("metrics" in p.tables for p in parts) == 1 and "metrics" not in parts[0].tables
    (metrics,) = [p.tables["metrics"] for p in parts if "metrics" in p.tables]
    assert metrics.get_column("step").to_list() == [7, 7]
    (save,) = [p.tables["events"] for p in parts if "events" in p.tables]
    assert save.get_column("step").to_list() == [7]
    whole = hf_trainer.parse(SourceFile(path=log, name="stdout.log"))
    assert whole.tables["metrics"].drop("rank").equals(metrics.drop("rank"))


def real_hf_logs() -> list[Path]:
    """Every file of the real-log corpus whose head the HF Trainer sniffer claims (the sniffer only:
    `detect_format` on the whole corpus takes a minute)."""
    from spikeforensics.ingest import hf_trainer, sniff_sample

    root = Path(__file__).parents[1] / "sample_logs" / "real"
    files = [f for f in sorted(root.glob("*/*/*")) if f.is_file() and f.name != "FACTS.toml"]
    return [f for f in files if hf_trainer.sniff(sniff_sample(f)) > 0]


def test_hf_streaming_equals_whole_file_on_every_real_hf_log(tmp_path, monkeypatch):
    logs = real_hf_logs()
    assert len(logs) >= 35
    # and the fixture log the fuzz input 488 was made from (the labelled sets' HF logs: `benchmarks/README.md`)
    logs.append(Path(__file__).parents[1] / "sample_logs" / "holdout" / "data_outlier_clip" / "stdout.log")
    differ, compared = [], 0
    for n, log in enumerate(logs):
        try:
            whole, streamed, _ = hf_paths(tmp_path / str(n), monkeypatch, log, chunk_bytes=4096)
        except IngestError as exc:  # a dict the sniffer liked in a file of another grammar (a config dump)
            assert "no usable records found as hf_trainer" in str(exc)
            continue
        compared += 1
        if streamed != whole:
            differ.append(str(log))
    assert differ == [] and compared >= 35


@pytest.mark.parametrize("chunk_bytes", [300, 700, 1500])
def test_hf_streaming_keeps_a_runs_summary_in_its_own_attempt_when_a_chunk_opens_with_it(
    tmp_path, monkeypatch, chunk_bytes
):
    """A log holding the same run three times (fuzz seed 15's input 488: one HF log copied 20,000 times): the
    summary dict that ends a run belongs to that run's attempt even when a chunk cut falls just before it (it
    took the attempt of the chunk's last record, 66 copies later, on the 2.57 GB input)."""
    log = tmp_path / "stdout.log"
    log.write_text(hf_log() * 3)
    whole, streamed, _ = hf_paths(tmp_path, monkeypatch, log, chunk_bytes=chunk_bytes)
    assert streamed == whole
    summary = pl.DataFrame(streamed["metrics"]).filter(pl.col("name") == "train_runtime").sort("line")
    assert summary.height == 3 and summary.get_column("attempt").n_unique() == 3
