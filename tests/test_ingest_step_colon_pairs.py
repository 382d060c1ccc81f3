"""Bare "step value" prints (`spikeforensics/ingest/step_colon.py`): YANMTT's `print(ctr, lv)`
(prajdabre/yanmtt pretrain_nmt.py / train_nmt.py) and any `print(step, loss)` loop. The real
fresh2 case, the variants numpy/Python floats print, and files of other shapes that must not be
claimed (the pair is claimed only when nearly every line with a digit has it)."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from _ingest_helpers import ingest, train_steps, write

from spikeforensics.ingest import detect_format

CASE = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "fresh2" / "yanmtt-7-bart-pretrain-fp16-nan-76980"


def value(metrics, step, name="loss"):
    rows = metrics.filter((pl.col("step") == step) & (pl.col("name") == name) & pl.col("record").is_not_null())
    assert rows.height == 1, (step, name, rows)
    return rows.item(0, "value")


def test_real_yanmtt_7(store):
    path = CASE / "yanmtt_7_description.log"
    assert detect_format(path)[0] == "step_colon"
    metrics, events, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert train_steps(metrics) == list(range(76930, 77011, 10))  # FACTS: 9 records
    assert value(metrics, 76930) == pytest.approx(2.6496577)
    assert value(metrics, 76970) == pytest.approx(2.6265104)
    assert all(math.isnan(value(metrics, s)) for s in (76980, 76990, 77000, 77010))
    assert events.filter(pl.col("kind") == "nan").get_column("step").min() == 76980  # FACTS first_nonfinite_step
    assert set(metrics.get_column("name").unique()) == {"loss"}


def test_pair_variants(tmp_path, store):
    # numpy float32 / Python float reprs: exponents, nan, inf, negatives; a tab separator; padding
    text = (
        "Training from scratch\n"
        "0 10.93412\n"
        "10 1.2345e-05\n"
        "20\t-0.5\n"
        "  30 nan\n"
        "40 inf\n"
        "50 -inf\n"
        "60 3.0\n"
        "Saving the model\n"
        "70 .25\n"
    )
    path = write(tmp_path, "out.log", text)
    assert detect_format(path)[0] == "step_colon"
    metrics, _, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert train_steps(metrics) == [0, 10, 20, 30, 40, 50, 60, 70]
    assert value(metrics, 10) == pytest.approx(1.2345e-05) and value(metrics, 20) == -0.5
    assert math.isnan(value(metrics, 30)) and value(metrics, 40) == math.inf and value(metrics, 50) == -math.inf
    assert value(metrics, 70) == 0.25


def test_pair_resume_and_bad_value(tmp_path, store):
    text = "100 2.5\n110 2.4\n120 2.3\n100 2.6\n110 2.45\n120 2.3x\n"
    metrics, _, outcome = ingest(store, write(tmp_path, "resumed.log", text))
    train = metrics.filter(pl.col("record").is_not_null())
    assert train.get_column("attempt").to_list() == [0, 0, 0, 1, 1]  # the counter went back: a new attempt
    assert outcome.unparsed == 1  # `2.3x` looks like a record but is not one


def test_waveglow_shape_still_read(tmp_path, store):
    metrics, _, _ = ingest(store, write(tmp_path, "wg.log", "".join(f"{i}:\t-5.{i}\n" for i in range(12000, 12005))))
    assert train_steps(metrics) == list(range(12000, 12005))


def test_pairs_do_not_claim_other_files(tmp_path):
    # integer pairs are a data table (`wc -l`, an index), not a loss print
    ints = "".join(f"{i} {i * 7}\n" for i in range(50))
    assert detect_format(write(tmp_path, "ints.txt", ints))[0] is None
    # three columns are not the pair shape
    table = "".join(f"{i} {i * 0.5} {i * 0.25}\n" for i in range(50))
    assert detect_format(write(tmp_path, "table.txt", table))[0] != "step_colon"
    # a few pairs among prose and other numbers: the share condition fails
    notes = "run 1 on 4 GPUs, batch 32, seed 1234\n1 0.5\n2 0.6\n3 0.7\nlr 3e-4, wd 0.1, 10 epochs\nbest at 2\n"
    assert detect_format(write(tmp_path, "notes.txt", notes))[0] is None
    # a generic loop log with some bare pairs keeps its own parser
    loop = "".join(f"step {i} | loss {2.0 - i / 100}\n" for i in range(20)) + "1 0.5\n2 0.6\n3 0.7\n"
    assert detect_format(write(tmp_path, "loop.log", loop))[0] == "generic_steps"
    # build-nanogpt's `step split value` keeps step_split
    nano = "".join(f"{i} train {10.9 - i / 100:.6f}\n" for i in range(20))
    assert detect_format(write(tmp_path, "log.txt", nano))[0] == "step_split"
