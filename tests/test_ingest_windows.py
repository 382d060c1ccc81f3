"""Big text logs read in windows (`ingest/_windows.py`): a grammar that parses a whole file at once parses each
window after the file's head and the lines before the window; only the window's own rows are kept, numbered on
from the window before. The rows are those of a whole-file read (real logs of several grammars cut into three
and into seven windows), a resume or a repeated step at a window's edge included, and the driver stores the same
tables either way. A line longer than any window is held only as far as the grammars read it."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from spikeforensics import api
from spikeforensics.ingest import _finish, _windows, base, detect_format, ingest_paths, parsers
from spikeforensics.ingest._mixing import mix
from spikeforensics.ingest.base import SourceFile
from spikeforensics.store import Store

REAL = Path(__file__).parent.parent / "sample_logs" / "real"

# real logs whose grammar reads a whole file, one or two per family of grammar state: epoch headers above their
# batches (mmengine, Keras), a table under one header line (column_table), steps counted inside epochs
# (generic_steps, metriclogger), multi-line records (coqui_trainer), resumes inside the file (sockeye), a log
# that mixes grammars (stdout_events)
LOGS = [
    "fresh31/sockeye-parabank-rnn-paraphrase-890k-updates-5-launches-2-resumes-healthy/log",
    "fresh28/deepmd-kit-ti-se-e2-a-lcurve-4m-steps-exp-lr-decay-prefactor-shift-healthy/lcurve.out",
    "dev/lerobot-train-log-gradnorm-healthy-23k/train_log.txt",
]


def _whole(path: Path):
    src = SourceFile(path=path, name=path.name)
    fmt, _ = detect_format(path)
    result, _ = mix(fmt, src, parsers()[fmt].parse(src), parsers())
    return _finish(result, path.name)


def _windowed(path: Path, window_bytes: int):
    fmt, _ = detect_format(path)
    src = SourceFile(path=path, name=path.name)
    parts = [_finish(p, path.name) for p in _windows.parse_windows(parsers()[fmt], src, parsers(), [], window_bytes)]
    return parts


def _table(parts, name: str) -> pl.DataFrame | None:
    frames = [p.tables[name] for p in parts if name in p.tables and p.tables[name].height]
    return pl.concat(frames, how="diagonal_relaxed") if frames else None


def _assert_same(path: Path, window_bytes: int) -> None:
    whole = _whole(path)
    parts = _windowed(path, window_bytes)
    assert len(parts) >= 2, "the file must span several windows"
    assert sum(p.records for p in parts) == whole.records
    assert sum(p.unparsed for p in parts) == whole.unparsed
    for name in ("metrics", "events"):
        a, b = whole.tables.get(name), _table(parts, name)
        if a is None or a.height == 0:
            assert b is None, name
            continue
        cols = [c for c in a.columns if c != "detail"]
        fill = [pl.col(c).fill_nan(-7.0) for c, t in a.schema.items() if t.is_float() and c in cols]
        a = a.select(cols).with_columns(fill).sort(cols, nulls_last=True)
        b = b.select(cols).with_columns(fill).sort(cols, nulls_last=True)
        assert a.equals(b, null_equal=True), (path.name, window_bytes, name)


@pytest.mark.parametrize("rel", LOGS)
@pytest.mark.parametrize("pieces", [3, 7])
def test_a_real_log_read_in_windows_gives_the_whole_file_rows(rel, pieces):
    path = REAL / rel
    _assert_same(path, path.stat().st_size // pieces + 1)


def _log(path: Path, steps: list[int], repeat_at: int | None = None) -> Path:
    lines = ["config: lr=0.001 batch=32", "starting training"]
    for i, step in enumerate(steps):
        lines.append(f"step {step} | loss {2.0 / (1 + i * 0.01):.4f} | lr 0.001")
        if i == repeat_at:  # the same step printed twice: one record
            lines.append(f"step {step} | loss {2.0 / (1 + i * 0.01):.4f} | lr 0.001")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_resume_or_a_repeated_step_at_every_window_edge_numbers_as_a_whole_read(tmp_path):
    """Windows cut everywhere around a resume (the step goes back: a new attempt) and a step printed twice
    (one record): records, steps and attempts as a whole-file read gives them."""
    steps = list(range(1, 301)) + list(range(250, 401))
    path = _log(tmp_path / "train.log", steps, repeat_at=120)
    whole = _whole(path).tables["metrics"]
    assert whole.get_column("attempt").max() == 1
    line_bytes = len("step 100 | loss 1.0000 | lr 0.001\n")
    for window in (line_bytes * 7 + 3, line_bytes * 31, line_bytes * 100 + 11):
        _assert_same(path, window)


def test_the_driver_stores_the_same_tables_from_windows(tmp_path, monkeypatch):
    """`ingest` of a file at least WINDOW_MIN_BYTES big reads it in windows; exported tables and the source's
    counts equal those of a whole read (a real mmengine-style log, windows of ~1/5 of it)."""
    path = REAL / LOGS[0]
    whole_store = Store(tmp_path / "whole")
    ingest_paths([path], "r", whole_store)
    monkeypatch.setattr(_windows, "WINDOW_MIN_BYTES", 1024)
    monkeypatch.setattr(_windows, "WINDOW_BYTES", path.stat().st_size // 5)
    windowed_store = Store(tmp_path / "windows")
    report = ingest_paths([path], "r", windowed_store)
    (outcome,) = report.files
    assert outcome.status == "ingested"
    for table in ("metrics", "events"):
        a = api.export("r", table, whole_store)
        b = api.export("r", table, windowed_store)
        keys = [c for c in a.columns if c != "detail"]  # (rows in another order: a grammar's order of names)
        assert a.height and a.sort(keys, nulls_last=True).equals(b.sort(keys, nulls_last=True)), table
    a, b = (api.load_run("r", s).sources for s in (whole_store, windowed_store))
    assert a.select("records", "unparsed", "format").equals(b.select("records", "unparsed", "format"))


def test_a_line_longer_than_a_chunk_is_held_only_to_its_cut(tmp_path, monkeypatch):
    """A 300 kB line read in 4 kB chunks: the chunks hold its first MAX_LINE_BYTES + 1 bytes (what `prepare` cuts
    it to), the lines after it keep their numbers, and the driver's tap sees every byte (the hash)."""
    monkeypatch.setattr(base, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "long.log"
    path.write_bytes(b"step 1 loss 2.0\n" + b"x" * 300_000 + b"\nstep 2 loss 1.9\n" + b"y" * 5000)
    seen = []
    src = SourceFile(path=path, name=path.name, tap=seen.append)
    lines = pl.concat(list(src.iter_line_chunks(4096)))
    assert lines.get_column("line").to_list() == [1, 2, 3, 4]
    assert lines.get_column("text").str.len_bytes().to_list() == [15, 1001, 15, 1001]
    assert lines.item(2, "text") == "step 2 loss 1.9"
    assert sum(len(b) for b in seen) == path.stat().st_size


def test_progress_is_the_first_window_then_at_most_every_few_seconds(tmp_path, monkeypatch):
    import spikeforensics.ingest as ingest

    path = REAL / LOGS[0]
    monkeypatch.setattr(ingest, "PROGRESS_MIN_BYTES", 0)
    monkeypatch.setattr(_windows, "WINDOW_MIN_BYTES", 1024)
    monkeypatch.setattr(_windows, "WINDOW_BYTES", path.stat().st_size // 6)
    for every, expected in ((3600.0, 1), (0.0, 7)):  # six windows and the tail
        monkeypatch.setattr(ingest, "PROGRESS_EVERY_S", every)
        said: list[str] = []
        ingest_paths([path], "r", Store(tmp_path / str(every)), progress=said.append)
        assert len([m for m in said if m.endswith("records parsed")]) == expected, said
