"""Streaming ingest of JSONL metric files: the file is read in chunks (cut at line ends),
and the rows are those of a whole-file read; bare NaN/Infinity tokens are decoded on the
typed fast path."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import polars as pl
import pytest

from spikeforensics.ingest import _finish, _tables, csv_metrics, detect_format, ingest_paths, jsonl_metrics
from spikeforensics.ingest.base import SourceFile
from spikeforensics.store import Store

ROOT = Path(__file__).parent.parent
WHOLE = 1 << 30  # one chunk: the whole file


def _parse(path: Path, chunk_bytes: int):
    """What the driver stores for `path` read in chunks of `chunk_bytes` (conformed, `nan` events)."""
    return _finish(jsonl_metrics.parse(SourceFile(path=path, name=path.name), chunk_bytes=chunk_bytes), path.name)


def _same(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    """Equal frames, NaN equal to NaN."""
    fix = [pl.col(c).fill_nan(-7.0) for c, t in a.schema.items() if t.is_float()]
    return a.shape == b.shape and a.with_columns(fix).equals(b.with_columns(fix), null_equal=True)


def _assert_chunked_equals_whole(path: Path, sizes: tuple[int, ...]) -> None:
    whole = _parse(path, WHOLE)
    assert whole.tables["metrics"].height > 0
    for size in sizes:
        part = _parse(path, size)
        assert (part.records, part.unparsed) == (whole.records, whole.unparsed), (path, size)
        for table in whole.tables:
            assert _same(part.tables[table], whole.tables[table]), (path, size, table)


def _writers(path: Path, n: int, seed: int, ranks: bool = False) -> None:
    """Metrics lines as interleaved writers, resumes and re-logged steps write them, with
    eval and summary rows, bare non-finite tokens and a few cut-short lines."""
    rng = random.Random(seed)
    steps = {0: 0, 1: 0}
    out = []
    for _ in range(n):
        r = rng.random()
        rank = rng.choice([0, 1]) if ranks else 0
        if r < 0.05:
            steps[rank] = max(0, steps[rank] - rng.randint(1, 30))  # a resume
        elif r < 0.2:
            steps[rank] = max(0, steps[rank] - (r >= 0.15))  # the second writer: same step, or one back
        else:
            steps[rank] += rng.choice([1, 1, 2, 10])
        rec = {"step": steps[rank], "loss": round(rng.random() * 3, 5), "lr": 1e-4, **({"rank": rank} if ranks else {})}
        if r > 0.95:
            rec = {"step": steps[rank], "eval_loss": round(rng.random(), 4)}
        if r > 0.985:
            rec = {"train_runtime": 12.5, "total_flos": 1e12}
        line = json.dumps(rec)
        if "loss" in rec and rng.random() < 0.04:
            line = line.replace(json.dumps(rec["loss"]), rng.choice(["NaN", "Infinity", "-Infinity", "nan"]), 1)
        if rng.random() < 0.02:
            line = line[: len(line) // 2]
        out.append(line)
    path.write_text("\n".join(out) + "\n")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_writers_resumes_and_repeats_across_chunk_cuts(tmp_path, seed):
    path = tmp_path / "metrics.jsonl"
    _writers(path, 160, seed, ranks=seed == 2)
    whole = _parse(path, WHOLE)
    assert whole.unparsed > 0 and whole.tables["metrics"].get_column("attempt").max() > 0
    # two lines a chunk, cut inside lines; and a dozen lines a chunk
    _assert_chunked_equals_whole(path, (97, 700))


def test_a_step_repeated_in_the_next_chunk_is_dropped(tmp_path):
    # the second writer repeats step 3 after the cut: first value kept, no new attempt
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "loss": float(v)} for s, v in [(1, 1), (2, 2), (3, 3), (2, 20), (3, 30), (4, 4), (1, 100)]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for size in (WHOLE, 60, 23):
        m = _parse(path, size).tables["metrics"].filter(pl.col("name") == "loss").sort("line")
        assert m.select("step", "value", "attempt").rows() == [
            (1, 1.0, 0),
            (2, 2.0, 0),
            (3, 3.0, 0),
            (4, 4.0, 0),
            (1, 100.0, 1),
        ], size
        assert m.get_column("record").to_list() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_line_endings_and_cuts_inside_lines(tmp_path, ending):
    rows = [json.dumps({"step": s, "loss": 1.0 + s / 8, "grad_norm": 0.5}) for s in range(1, 41)]
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(ending.join(rows).encode() + ending.encode())
    for size in (WHOLE, 17, 64):
        result = _parse(path, size)
        loss = result.tables["metrics"].filter(pl.col("name") == "loss").sort("line")
        assert loss.get_column("step").to_list() == list(range(1, 41)), (ending, size)
        assert loss.get_column("line").to_list() == list(range(1, 41))
        assert loss.get_column("value").to_list() == [1.0 + s / 8 for s in range(1, 41)]
        assert result.unparsed == 0


def test_nonfinite_tokens_are_values_on_the_typed_path(tmp_path):
    # past the 100 lines polars infers its schema from, in a float and in an integer column
    rows = [{"step": s, "loss": 2.0 + s / 1000, "grad_norm": 0.25, "tokens": 512} for s in range(1, 201)]
    lines = [json.dumps(r) for r in rows]
    tokens = {
        150: ("loss", "NaN"),
        151: ("loss", "Infinity"),
        152: ("grad_norm", "-Infinity"),
        153: ("tokens", "NaN"),
        154: ("loss", "nan"),
        155: ("loss", "-inf"),
    }
    for step, (key, token) in tokens.items():
        lines[step - 1] = lines[step - 1].replace(f'"{key}": {json.dumps(rows[step - 1][key])}', f'"{key}": {token}')
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(lines) + "\n")

    frame = pl.DataFrame(
        {"line": range(1, len(lines) + 1), "text": lines}, schema={"line": pl.Int64, "text": pl.String}
    )
    objects, bad = _tables.json_objects(frame)
    assert bad.height == 0
    assert objects.schema["loss"] == pl.Float64 and objects.schema["grad_norm"] == pl.Float64  # no text fallback

    for size in (WHOLE, 997):
        m = _parse(path, size).tables["metrics"]
        value = dict(((s, n), v) for s, n, v in m.select("step", "name", "value").iter_rows())
        assert math.isnan(value[150, "loss"]) and value[151, "loss"] == math.inf
        assert value[152, "grad_norm"] == -math.inf and math.isnan(value[153, "tokens"])
        assert math.isnan(value[154, "loss"]) and value[155, "loss"] == -math.inf
        assert value[149, "loss"] == 2.149 and value[153, "loss"] == 2.153 and value[156, "tokens"] == 512.0
        assert m.filter(pl.col("value").is_finite().not_()).height == len(tokens)


def test_a_bad_line_in_the_middle_costs_that_line(tmp_path):
    lines = [json.dumps({"step": s, "loss": 1.0}) for s in range(1, 301)]
    lines[149] = '{"step": 150, "loss": 1.0, "oops'  # cut short
    lines[199] = '{"step": 200, "loss": }'  # no value
    lines[249] = '{"step": 250, "deep": ' + "[" * 80 + "]" * 80 + "}"  # nested deeper than MAX_JSON_DEPTH
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(lines) + "\n")
    for size in (WHOLE, 512):
        result = _parse(path, size)
        assert result.unparsed == 3
        assert [line for line, _ in result.unparsed_examples] == [150, 200, 250]
        assert result.unparsed_lines.to_list() == [150, 200, 250]
        steps = result.tables["metrics"].filter(pl.col("name") == "loss").get_column("step").to_list()
        assert steps == [s for s in range(1, 301) if s not in (150, 200, 250)]


def _real_jsonl_logs() -> list[Path]:
    found = sorted((ROOT / "sample_logs" / "real").rglob("*.jsonl")) + sorted(
        (ROOT / "tests" / "data" / "real").rglob("*.jsonl")
    )
    return [p for p in found if detect_format(p)[0] == "jsonl_metrics"]


def test_real_jsonl_logs_read_in_chunks_equal_a_whole_read():
    logs = _real_jsonl_logs()
    assert len(logs) >= 8
    for path in logs:
        size = path.stat().st_size
        _assert_chunked_equals_whole(path, (max(size // 7, 300),))


def test_ingest_streams_through_the_store(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    _writers(path, 200, seed=5, ranks=True)
    single = tmp_path / "single.jsonl"
    _writers(single, 120, seed=6)
    whole = {p.name: _parse(p, WHOLE).tables["metrics"] for p in (path, single)}
    monkeypatch.setattr(jsonl_metrics, "CHUNK_BYTES", 200)
    store = Store(tmp_path / "store")
    report = ingest_paths([path, single], "r", store)
    assert all(f.status == "ingested" for f in report.files)
    stored = store.table("r", "metrics")
    for name, expected in whole.items():
        got = stored.filter(pl.col("source") == name).select(expected.columns).sort("line", "name")
        assert _same(got, expected.sort("line", "name")), name
    assert stored.filter(pl.col("source") == "metrics.jsonl").get_column("rank").drop_nulls().n_unique() == 2
    assert (
        stored.filter(pl.col("source") == "single.jsonl").get_column("rank").null_count()
        == whole["single.jsonl"].height
    )


# ---------------------------------------------------------------------------
# CSV metric files (Lightning CSVLogger, W&B exports): streamed when they hold no quote


def _parse_csv(path: Path, chunk_bytes: int):
    return _finish(csv_metrics.parse(SourceFile(path=path, name=path.name), chunk_bytes=chunk_bytes), path.name)


def test_csv_logger_rows_merged_across_chunk_cuts(tmp_path):
    # Lightning writes a step's lr and its loss on two rows; a resume goes back; a bad step costs its row
    rows = ["epoch,step,lr-Adam,train_loss_step,val_loss"]
    for step in list(range(1, 41)) + list(range(30, 51)):
        rows += [f"0,{step},0.001,,", f"0,{step},,{2 + step / 100},"]
        if step % 10 == 0:
            rows.append(f"0,{step},,,{1 + step / 100}")
    rows.insert(25, "0,oops,,1.0,")
    path = tmp_path / "metrics.csv"
    path.write_text("\n".join(rows) + "\n")
    assert not csv_metrics.has_quotes(path)
    whole = _parse_csv(path, WHOLE)
    loss = whole.tables["metrics"].filter(pl.col("name") == "loss")
    assert loss.height == 61 and loss.get_column("attempt").max() == 1
    assert whole.unparsed == 1 and whole.unparsed_examples[0][0] == 26
    lr = whole.tables["metrics"].filter(pl.col("name") == "lr")  # Lightning's LearningRateMonitor column
    assert lr.select("line").to_series().to_list() == loss.select("line").to_series().to_list()  # one record each
    for size in (31, 200):  # cuts inside lines and between the two rows of a step
        part = _parse_csv(path, size)
        assert (part.records, part.unparsed) == (whole.records, whole.unparsed), size
        assert _same(part.tables["metrics"], whole.tables["metrics"]), size


def test_real_csv_metrics_read_in_chunks_equal_a_whole_read():
    found = sorted((ROOT / "sample_logs" / "real").rglob("*.csv")) + sorted(
        (ROOT / "tests" / "data" / "real").rglob("*.csv")
    )
    logs = [p for p in found if detect_format(p)[0] == "csv_metrics"]
    assert len(logs) >= 4
    for path in logs:
        whole = _parse_csv(path, WHOLE)
        part = _parse_csv(path, max(path.stat().st_size // 7, 200))
        assert (part.records, part.unparsed) == (whole.records, whole.unparsed), path
        assert _same(part.tables["metrics"], whole.tables["metrics"]), path


def test_csv_with_a_quoted_multiline_cell_is_read_whole(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text('step,loss,note\n1,2.5,plain\n2,2.4,"two\nlines"\n3,2.3,x\n')
    result = _parse_csv(path, 16)
    loss = result.tables["metrics"].filter(pl.col("name") == "loss")
    assert loss.get_column("step").to_list() == [1, 2, 3] and loss.get_column("line").null_count() == 3


def test_a_key_first_seen_after_the_inferred_rows_keeps_every_digit():
    """A key that first appears after the rows polars infers the schema from (an HF log's closing
    summary dict) sends the decode to the text fallback: its values keep their exact digits (the
    path matcher rendered 1.0328646898269653 as 1.032864689826965)."""
    lines = [json.dumps({"loss": 1.0328646898269653, "lr": 0.051 * (i + 1)}) for i in range(200)]
    lines.append(json.dumps({"train_loss": 0.1 + 0.2, "lr": None}))
    frame = pl.DataFrame({"line": range(1, 202), "text": lines}, schema={"line": pl.Int64, "text": pl.String})
    objects, bad = _tables.json_objects(frame)
    assert bad.height == 0
    values = objects.select(*[_tables.numeric(objects, c) for c in ("loss", "lr", "train_loss")])
    assert values.get_column("loss").drop_nulls().unique().to_list() == [1.0328646898269653]
    assert values.get_column("lr").head(200).to_list() == [0.051 * (i + 1) for i in range(200)]
    assert values.get_column("train_loss").drop_nulls().to_list() == [0.1 + 0.2]
