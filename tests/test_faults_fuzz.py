"""Inputs the fuzzer (benchmarks/fuzz.py) found (issue 14), each reproduced with a small input made here and holding
its fix; the faults of the fault/fuzz probe itself are in tests/test_faults.py."""

from __future__ import annotations

import json
import time

import polars as pl
import pytest
from _fault_helpers import ROOT, diagnosed, write_lines

from spikeforensics.ingest import ingest_paths, parse_file

# -- 9. inputs the fuzzer (benchmarks/fuzz.py) found ------------------------------------------------


@pytest.mark.parametrize("lr", ["-0.0001", "nan"])
def test_negative_or_nan_learning_rate_does_not_break_attribution(tmp_path, runner, lr):
    # fuzz seed 14 input 301: a real log with its numbers made negative; the warmup end was
    # looked up as the first LR >= 0.99 x the largest, which no negative LR is
    lines = []
    for i in range(1, 81):
        loss = 9.0 if i == 50 else 2.0 - i * 0.005
        lines.append(f"{{'loss': {loss}, 'grad_norm': 1.0, 'learning_rate': {lr}, 'epoch': {i / 100}}}")
        lines.append(f" {i}/80 [00:01<00:01,  1.00it/s]")
    path = write_lines(tmp_path / "train.log", lines)
    report = diagnosed(runner, path, tmp_path)
    assert report["verdict"]["status"] in ("degraded", "unstable")


@pytest.mark.parametrize("garbled", ["9223372036854775807", "1e309"])
def test_a_garbled_skipped_iterations_counter_does_not_break_the_loss_scale_detector(tmp_path, runner, garbled):
    # fuzz seed 14 input 361: a Megatron counter jumping by inf or 2^63 was cast to Int64 strictly
    lines = [
        f" iteration {i:8d}/     100 | consumed samples: {i * 8:10d} | lm loss: {3 - i * 0.01:.6E} | "
        f"loss scale: 1024.0 | grad norm: 1.000 | number of skipped iterations: "
        f"{garbled if i == 30 else '0'} | number of nan iterations:   0 |"
        for i in range(1, 61)
    ]
    path = write_lines(tmp_path / "train.log", lines)
    report = diagnosed(runner, path, tmp_path)
    assert "skipped_iters" in report["verdict"]["coverage"]["signals"]


def test_oscillation_after_a_flat_loss_is_described_without_a_ratio(tmp_path, runner):
    # fuzz seed 14 input 541: duplicated lines made the loss flat (usual noise 0), so the ratio
    # to the usual noise was None and formatting it crashed the detector. (300 oscillating records:
    # with 100, the flat records' zero volatility counted as "3x the usual" and made up the stretch; a
    # swing must be >= oscillation.min_vol now, and 100 such records never fill a 100-record window)
    lines = [
        f"iter {i}: loss {2.0 if i < 300 else (1.0 if i % 2 else 4.0):.4f}, time 100.00ms, mfu 10.00%"
        for i in range(600)
    ]
    path = write_lines(tmp_path / "train.log", lines)
    report = diagnosed(runner, path, tmp_path)
    kinds = {k for inc in report["incidents"] for k in inc["kinds"]}
    assert "loss_oscillation" in kinds


@pytest.mark.parametrize("name", ["metrics.jsonl", "batches.jsonl"])
def test_a_deeply_nested_json_record_costs_its_line(tmp_path, store, name):
    # fuzz seed 14 inputs 633 and 665: one record nested 1,000 deep (9 kB) took polars' schema
    # inference past 2 GB; 512 levels took 32 s and 1.8 GB
    if name == "metrics.jsonl":
        rows = [json.dumps({"step": s, "loss": 3 - s * 0.01}) for s in range(20)]
    else:
        rows = [json.dumps({"step": s, "sample_ids": [f"a{s}", f"b{s}"]}) for s in range(20)]
    rows[7] = '{"step": 7, "loss": ' + '{"loss":' * 1000 + "1" + "}" * 1001
    path = write_lines(tmp_path / name, rows)
    start = time.monotonic()
    ingest_paths([path], "r", store)
    assert time.monotonic() - start < 30  # a hang guard, not a speed target
    table = "metrics" if name == "metrics.jsonl" else "batches"
    assert sorted(set(store.table("r", table).get_column("step").to_list())) == [s for s in range(20) if s != 7]
    src = store.sources("r").row(0, named=True)
    assert src["unparsed"] == 1 and json.loads(src["unparsed_examples"])[0][0] == 8


def test_a_long_number_before_a_date_is_no_year_zero(tmp_path, runner):
    # fuzz seed 14 input 1594: a huge number glued before a Megatron timestamp made `0000-03-09 ...`
    # a time of year 0, which polars holds and Python's datetime cannot (attribution crashed)
    lines = [
        f"[{'1' + '0' * 40 if i == 40 else ''}2026-03-09 14:02:{i % 60:02d}.75] iteration {i:8d}/     100 | "
        f"consumed samples: {i * 8:10d} | lm loss: {9.0 if i == 50 else 3 - i * 0.01:.6E} | grad norm: 1.000 |"
        for i in range(1, 81)
    ]
    path = write_lines(tmp_path / "train.log", lines)
    report = diagnosed(runner, path, tmp_path)
    assert report["verdict"]["status"] == "unstable"


def test_records_sharing_a_physical_line_are_not_multiplied(tmp_path, store):
    # fuzz seed 14 input 1830: a Megatron log whose line breaks became lone CRs, with a few LFs left
    # (2 LFs, 800 CRs): read as an LF file, each physical line held 400 records as CR segments, and
    # joining records to values by line made 2.4 million metric rows from a 240 kB file
    src = (ROOT / "sample_logs" / "holdout" / "layer_dominates_clip" / "train.log").read_bytes()
    body = src.replace(b"\r\n", b"\n").rstrip(b"\n").replace(b"\n", b"\r")
    path = tmp_path / "train.log"
    path.write_bytes(body + b"\n" + body + b"\n")
    assert ingest_paths([path], "r", store).ok
    m = parse_file(path, "megatron").tables["metrics"]
    assert m.select("line", "name").is_duplicated().sum() == 0  # at most one record per physical line
    assert m.height < 10_000


def test_an_incident_that_runs_to_a_garbled_step_is_not_enumerated(tmp_path, runner):
    # fuzz seed 16 input 50: one bit flip made a layer dump's step 23,593,320 among steps 0-360; an incident
    # running to it was enumerated step by step for the "outside every incident" sets (23.6M rows: diagnose
    # 1.16 GB, 16 s). The windows stay intervals now (`merged_windows`), whatever they span
    from spikeforensics.attribute.context import merged_windows, outside_windows

    w = merged_windows([(0, 23_593_320), (5, 9), (23_593_321, 23_593_400), (30_000_000, 30_000_001)])
    assert w.rows() == [(0, 23_593_400), (30_000_000, 30_000_001)]  # overlapping and touching ones merged
    frame = pl.DataFrame({"step": [None, 3, 23_593_401, 30_000_001, 29_999_999]}, schema={"step": pl.Int64})
    assert outside_windows(frame, w).get_column("step").to_list() == [None, 23_593_401, 29_999_999]
    seed = ROOT / "sample_logs" / "holdout" / "fp16_overflow_storm"
    dump = pl.read_parquet(seed / "grad_stats.parquet")
    dump = dump.with_columns(
        pl.when(pl.int_range(pl.len()) == 100).then(23_593_320).otherwise(pl.col("step")).alias("step")
    )
    run_dir = tmp_path / "in"
    run_dir.mkdir()
    dump.write_parquet(run_dir / "grad_stats.parquet")
    (run_dir / "train.log").write_bytes((seed / "train.log").read_bytes())
    report = diagnosed(runner, run_dir, tmp_path)
    assert report["verdict"]["status"] in ("unstable", "degraded")


def test_a_signed_loss_without_step_numbers_is_judged_by_record(tmp_path):
    """Fuzz seed 17's input 530 (a wandb console log of a GAN's losses, no step printed, numbers and NaN mutated):
    the signed-jump detector read the steps of a step-less log as they are (null) and crashed on the jump it found
    (exit 4); it now takes the record index, as the other detectors do (`robust.prepare`)."""
    import numpy as np

    from spikeforensics.detect import signed_jump
    from spikeforensics.params import Params
    from spikeforensics.rundata import RunData

    rng = np.random.default_rng(530)
    values = list(-1.0 + 0.02 * rng.standard_normal(200))
    values[120] = 25.0  # a jump far past the signed loss's range
    metrics = pl.DataFrame(
        {
            "source": ["output.log"] * 200,
            "line": list(range(1, 201)),
            "step": pl.Series([None] * 200, dtype=pl.Int64),
            "record": list(range(200)),
            "attempt": [0] * 200,
            "name": ["loss"] * 200,
            "value": values,
        }
    )
    run = RunData.from_frames(metrics=metrics)
    assert run.loss_without_ratio() == "signed"
    found = signed_jump.detect(run, Params())
    assert [f.peak_step for f in found] == [120]  # the record index stands for the step


def test_a_line_of_70000_digits_is_read_in_linear_time(tmp_path):
    """Fuzz seed 17's inputs 679 and 1685: a log with one line of 70,000 (or a million) `1`s hung ingest for minutes
    (162 s for a 71 kB file): the number patterns matched by Python's `re` (`\\d+\\.?\\d*`) could split a digit run
    in as many ways as it has digits, and a sniffer's `fullmatch` backtracked through all of them. The patterns are
    unambiguous now (`\\d+(?:\\.\\d*)?`, the same numbers). A hang test (a generous bound, not a speed target)."""
    import subprocess
    import sys

    path = tmp_path / "loss.out"
    rows = [f"{i} 0.5{i} 0.01 0.02 0.3 0.4" for i in range(1, 6)]
    path.write_text("\n".join([*rows[:3], "1" * 70_000, *rows[3:]]) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "spikeforensics", "ingest", str(path), "--run", "r", "--store", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr


def test_one_json_record_of_500_keys_is_decoded_typed_and_long_form_keeps_only_its_cells(tmp_path, monkeypatch):
    """Fuzz seed 18's input 199: a 1.5 MB JSONL whose 5,000 records print 5 keys, and one record 500 (a key first
    seen after the rows the schema is inferred from). The keys were decoded as text for every row and the wide
    frame went to long form whole (2.7M mostly-null rows, 413 MB to ingest): now the schema comes from every row
    (typed values) and long form keeps the cells that hold a value, column by column. The rows are the same."""
    from spikeforensics.ingest import base

    lines = [json.dumps({"step": i, "loss": 2.0 - i * 1e-4, "lr": 1e-3}) for i in range(1, 301)]
    wide_record = {"step": 301, "loss": 1.9, **{f"k{j}": 0.5 + j for j in range(500)}}
    lines.insert(150, json.dumps(wide_record))
    path = write_lines(tmp_path / "metrics.jsonl", lines)
    dense = parse_file(path, "jsonl_metrics").tables["metrics"]
    monkeypatch.setattr(base, "SPARSE_CELLS", 100)
    sparse = parse_file(path, "jsonl_metrics").tables["metrics"]
    assert dense.sort("line", "name").equals(sparse.sort("line", "name"))
    assert dense.height == 300 * 2 + 1 + 500  # loss and lr of 300 records; the wide one: loss and its 500 keys
    k7 = dense.filter(pl.col("name") == "k7")
    assert k7.height == 1 and k7.item(0, "value") == 7.5 and k7.item(0, "step") == 301


def test_a_wide_csv_header_over_short_rows_is_read_in_slices_with_the_same_rows(tmp_path, monkeypatch):
    """Fuzz seed 18's input 978: a text log under a 500-name CSV header (its lone CRs row breaks to the CSV
    reader) is read as rows x 500 cells, 776 MB for 1.4 MB. Chunks are cut into slices of at most MAX_CELLS cells
    (rows counted with the CRs inside lines); a real Lightning-style CSV gives the same rows through slices of a
    few rows as read whole, the header carried to every slice."""
    from spikeforensics.ingest import csv_metrics

    header = "epoch,step,train_loss,val_loss," + ",".join(f"extra_{j}" for j in range(40))
    rows = [header]
    for i in range(1, 400):
        rows.append(f"{i // 50},{i},{2.0 - i * 1e-3:.4f},," + "," * 39)
        if i % 50 == 0:
            rows.append(f"{i // 50},{i},,{1.5 - i * 1e-3:.4f}," + "," * 39)
    rows.insert(100, "7,7\r8,8")  # a line holding a CR: two CSV rows
    path = write_lines(tmp_path / "metrics.csv", rows)
    whole = parse_file(path, "csv_metrics").tables["metrics"]
    monkeypatch.setattr(csv_metrics, "MAX_CELLS", 44 * 7)  # 7 rows a slice
    sliced = parse_file(path, "csv_metrics").tables["metrics"]
    assert whole.height > 400 and whole.sort("line", "name").equals(sliced.sort("line", "name"))
    lines = pl.DataFrame({"line": range(1, 6), "text": ["a,b,c", "1,2,3", "4\r5\r6", "7,8,9", "1,1,1"]})
    monkeypatch.setattr(csv_metrics, "MAX_CELLS", 9)  # 3 rows of 3 cells a slice
    parts = [p.get_column("line").to_list() for p in csv_metrics._bounded(iter([lines]))]
    # rows counted with line 3's CRs (rows 1-2 | 3-6 | 7); counting lines would give [[1, 2, 3], [4, 5]]
    assert parts == [[1, 2], [3, 4], [5]]


def test_an_error_naming_columns_cuts_each_name_and_stays_one_short_line(tmp_path, runner):
    """Fuzz seed 18's input 1498: a CSV forced as `csv_metrics` whose one column name is a 1.4 MB run of nested
    JSON: the "CSV without a step column (found: ...)" error quoted it whole (1.4 MB of stderr). Names are cut to
    40 characters, at most 12 shown, control characters dropped."""
    from spikeforensics.cli import cli

    path = tmp_path / "measurements.csv"
    path.write_text('{"loss":' * 50_000 + ",\x1b[31mred\n1,2\n")
    result = runner.invoke(cli, ["ingest", str(path), "--format", "csv_metrics", "--store", str(tmp_path / "s")])
    assert result.exit_code == 1
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("spikeforensics: error")]
    assert str(path) in line and "CSV without a step column" in line and len(line) < 400
    assert "\x1b" not in line
