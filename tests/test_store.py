"""The run store: atomic, idempotent, appendable, readable as plain Parquet."""

from __future__ import annotations

import os

import polars as pl
import pyarrow.parquet as pq
import pytest

from spikeforensics import schema
from spikeforensics.ingest import IngestError, ingest_paths
from spikeforensics.store import StoreError, run_id_from_path, validate_run_id

LLMC = "llmc/llmc_main_log_norm_spike_s8650_8800.log"


@pytest.mark.parametrize("bad", ["", "..", ".", "a/b", "a b", "-x", "x" * 129, "run\n", "é"])
def test_invalid_run_ids_are_refused(bad):
    with pytest.raises(StoreError):
        validate_run_id(bad)


@pytest.mark.parametrize("good", ["a", "gpt-small-03", "R1.v2_x", "0" * 128])
def test_valid_run_ids(good):
    assert validate_run_id(good) == good


def test_default_run_id_from_path(tmp_path):
    (tmp_path / "my run!").mkdir()
    assert run_id_from_path(tmp_path / "my run!") == "my-run"
    assert run_id_from_path(tmp_path / "train.log") == "train"


def test_ingest_writes_hive_partitioned_parquet_with_schema_version(store, real):
    ingest_paths([real / LLMC], "r1", store)
    files = list((store.root / "tables" / "metrics" / "run=r1").glob("*.parquet"))
    assert len(files) == 1
    meta = pq.read_schema(files[0]).metadata
    assert meta[b"spikeforensics.schema_version"] == str(schema.SCHEMA_VERSION).encode()
    scanned = pl.scan_parquet(
        str(store.root / "tables" / "metrics" / "**" / "*.parquet"), hive_partitioning=True
    ).collect()
    assert set(scanned.get_column("run").unique()) == {"r1"}
    assert (store.root / ".gitignore").read_text().strip().endswith("*")


def test_reingest_is_idempotent_and_new_files_append(store, real):
    ingest_paths([real / LLMC], "r1", store)
    before = store.table("r1", "metrics").height
    again = ingest_paths([real / LLMC], "r1", store)
    assert again.files[0].status == "unchanged"
    assert store.table("r1", "metrics").height == before
    ingest_paths([real / "llmc/llmc_main_log_steps0_260_with_val_eval.log"], "r1", store)
    assert store.table("r1", "metrics").height > before
    assert store.sources("r1").height == 2


def test_crash_mid_write_leaves_store_as_it_was(store, real, monkeypatch):
    ingest_paths([real / LLMC], "r1", store)
    before = store.table("r1", "metrics")
    calls = {"n": 0}
    real_replace = os.replace

    def crashing_replace(src, dst):
        calls["n"] += 1
        if calls["n"] == 2:  # after the first data file moved, before the manifest
            raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crashing_replace)
    with pytest.raises(KeyboardInterrupt):
        ingest_paths([real / "llmc/llmc_main_log_steps0_260_with_val_eval.log"], "r1", store)
    monkeypatch.setattr(os, "replace", real_replace)
    assert store.sources("r1").height == 1
    assert store.table("r1", "metrics").equals(before)
    assert not any((store.root / ".tmp").iterdir())


def test_empty_file_given_directly_is_an_error_naming_it(store, tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(IngestError, match="empty.log"):
        ingest_paths([empty], "r1", store)
    assert store.runs() == []


def test_junk_inside_a_folder_is_skipped_and_the_rest_ingested(store, tmp_path, real):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "junk.bin").write_bytes(bytes(range(256)) * 50)
    (folder / "empty.txt").write_bytes(b"")
    (folder / "main.log").write_bytes((real / LLMC).read_bytes())
    report = ingest_paths([folder], "r1", store)
    status = {f.source: f.status for f in report.files}
    assert status == {"junk.bin": "failed", "empty.txt": "failed", "main.log": "ingested"}
    assert store.table("r1", "metrics").height > 0


def test_large_streamed_inputs_report_progress(store, real, monkeypatch):
    import spikeforensics.ingest as ingest

    monkeypatch.setattr(ingest, "PROGRESS_MIN_BYTES", 0)  # every streamed file counts as large
    messages: list[str] = []
    ingest_paths([real / "megatron/bigscience_tr8_104b_exp2_glitch.log"], "r1", store, progress=messages.append)
    assert any(m.endswith("5 records parsed") for m in messages), messages
