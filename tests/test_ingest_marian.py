"""Marian NMT training logs (`spikeforensics/ingest/marian.py`): the real fresh2 case as the
driver ingests it, the variants `Scheduler::update` / `Scheduler::validate` print
(marian-nmt/marian-dev src/training/scheduler.h, and the 1.x marian-nmt/marian one), and
near-miss lines of other frameworks that must not be claimed."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from _ingest_helpers import ingest, train_steps, value, write

from spikeforensics.ingest import detect_format

CASE = (
    Path(__file__).resolve().parents[1]
    / "sample_logs"
    / "real"
    / "fresh2"
    / "marian-699-prenorm-fp16-cost-nan-up300-gnorm-bug"
)


def test_real_marian_699(store):
    path = CASE / "marian_699_comment_2020-09-05.log"
    assert detect_format(path)[0] == "marian"
    metrics, events, outcome = ingest(store, path)
    assert outcome.format == "marian" and outcome.unparsed == 0
    assert train_steps(metrics) == [100, 200, 300, 400]  # FACTS: 4 records, 100..400; [memory] is no record
    assert value(metrics, 100, "loss") == pytest.approx(314.00448608)
    assert value(metrics, 100, "grad_norm") == pytest.approx(20126.2366)
    assert value(metrics, 200, "tokens_per_s") == pytest.approx(3498.78)
    assert value(metrics, 100, "sentences") == 46750
    assert math.isnan(value(metrics, 300, "loss")) and math.isnan(value(metrics, 400, "loss"))
    assert value(metrics, 300, "grad_norm") == pytest.approx(41172.8250)
    nan = events.filter(pl.col("kind") == "nan")
    assert nan.get_column("step").min() == 300  # FACTS first_nonfinite_step
    assert metrics.filter(pl.col("step") == 100).get_column("time").drop_nulls().len() > 0


def test_marian_variants(tmp_path, store):
    text = (
        "[2021-03-01 10:00:00] [marian] Marian v1.10.0\n"
        "[2021-03-01 10:00:01] Training started\n"
        # --lr-report, ce-sum with --disp-label-counts, logical epoch
        "[2021-03-01 10:01:00] Ep. 1.250 : Up. 500 : Sen. 1,234,567 : Cost 2.34567890 * 1,234,567 @ 12,345"
        " after 98,765,432 : Time 50.12s : 24567.89 words/s : gNorm 0.8123 : L.r. 3.0000e-04\n"
        "[2021-03-01 10:01:30] Seen NaN/Inf after 17 gradient updates. Reduced cost-scaling factor to 16384\n"
        "[2021-03-01 10:02:00] Ep. 1.500 : Up. 1000 : Sen. 2,469,134 : Cost -nan : Time 49.00s : inf words/s"
        " : gNorm nan : L.r. 2.1213e-04\n"
        "[2021-03-01 10:02:01] Saving model weights and runtime parameters to model/model.iter1000.npz\n"
        "[2021-03-01 10:02:05] [valid] Ep. 1.500 : Up. 1000 : ce-mean-words : 2.345 : new best\n"
        "[2021-03-01 10:02:06] [valid] Ep. 1.500 : Up. 1000 : perplexity : 10.43 : new best\n"
        "[2021-03-01 10:02:09] [valid] Ep. 1.500 : Up. 1000 : bleu-detok : 23.45 : stalled 1 times (last best: 24.1)\n"
        # 1.x: no gNorm, a plain count, two-decimal cost
        "[2018-01-01 10:00:00] Ep. 2 : Up. 1500 : Sen. 25000 : Cost 123.45 : Time 50.12s : 12345.67 words/s\n"
        "[2018-01-01 10:00:01] Seen NaN/Inf after 3 gradient updates, Reduced cost-scaling factor to minimum 1."
        " Pruning NaNs now.\n"
    )
    path = write(tmp_path, "train.log", text)
    assert detect_format(path)[0] == "marian"
    metrics, events, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert train_steps(metrics) == [500, 1000, 1500]
    assert value(metrics, 500, "loss") == pytest.approx(2.3456789)  # the per-label cost, not the counts
    assert value(metrics, 500, "lr") == pytest.approx(3e-4) and value(metrics, 500, "epoch") == 1.25
    assert value(metrics, 500, "interval_time_s") == pytest.approx(50.12)
    assert math.isnan(value(metrics, 1000, "loss")) and math.isnan(value(metrics, 1000, "grad_norm"))
    assert math.isinf(value(metrics, 1000, "tokens_per_s"))
    assert value(metrics, 1500, "loss") == pytest.approx(123.45)
    assert metrics.filter((pl.col("step") == 1500) & (pl.col("name") == "grad_norm")).height == 0
    assert value(metrics, 1000, "eval_loss", record=False) == pytest.approx(2.345)
    assert value(metrics, 1000, "eval_perplexity", record=False) == pytest.approx(10.43)
    assert value(metrics, 1000, "eval_bleu_detok", record=False) == pytest.approx(23.45)
    saves = events.filter(pl.col("kind") == "checkpoint_save")
    assert saves.get_column("step").to_list() == [1000] and "model.iter1000.npz" in saves.item(0, "detail")
    ovf = events.filter(pl.col("kind") == "overflow").sort("line")
    assert ovf.height == 2 and ovf.item(0, "step") == 501  # the first update after record 500 is skipped
    assert '"new_scale": 16384.0' in ovf.item(0, "detail") and '"old_scale": 32768.0' in ovf.item(0, "detail")
    assert "old_scale" not in ovf.item(1, "detail")  # at the minimum the factor may not have moved


def test_marian_1x_validation_and_cross_entropy(tmp_path, store):
    text = (
        "[2018-01-01 10:00:00] Ep. 1 : Up. 500 : Sen. 25000 : Cost 123.45 : Time 50.12s : 12345.67 words/s"
        " : L.r. 3.0000e-04\n"
        "[2018-01-01 10:00:10] [valid] 500 : cross-entropy : 110.25 : new best\n"
        "[2018-01-01 10:00:20] [valid] 500 : translation : 12.3 : stalled 2 times\n"
    )
    metrics, _, outcome = ingest(store, write(tmp_path, "old.log", text))
    assert outcome.format == "marian" and train_steps(metrics) == [500]
    assert value(metrics, 500, "eval_loss", record=False) == pytest.approx(110.25)  # no ce-mean-words validator
    assert value(metrics, 500, "eval_translation", record=False) == pytest.approx(12.3)


def test_marian_valid_log_alone(tmp_path, store):
    text = "".join(
        f"[2021-03-01 1{i}:00:00] [valid] Ep. {i} : Up. {i * 5000} : ce-mean-words : {3 - i / 10} : new best\n"
        for i in range(1, 4)
    )
    path = write(tmp_path, "valid.log", text)
    assert detect_format(path)[0] == "marian"
    metrics, _, _ = ingest(store, path)
    evals = metrics.filter(pl.col("record").is_null() & (pl.col("name") == "eval_loss"))
    assert evals.get_column("step").to_list() == [5000, 10000, 15000]


def test_marian_does_not_claim_near_misses(tmp_path):
    # fairseq's epoch summary and OpenNMT-tf's step line: colon-separated but not Marian's fields
    fairseq = "".join(
        f"| epoch 00{i} | loss 7.{i} | ppl 150.1 | wps 12000 | ups 3.2 | wpb 4000 | bsz 100 | num_updates {i * 100}\n"
        for i in range(1, 6)
    )
    assert detect_format(write(tmp_path, "fairseq.log", fairseq))[0] != "marian"
    tf = "".join(
        f"INFO:tensorflow:Step = {i * 100} ; steps/s = 2.5, source words/s = 12345 ; Learning rate = 0.0001 ; "
        f"Loss = 9.{i}\n"
        for i in range(1, 6)
    )
    assert detect_format(write(tmp_path, "tf.log", tf))[0] != "marian"
    # a Marian decoder log (translation, not training) has no records
    decode = "".join(f"[2021-03-01 10:00:0{i}] Best translation {i} : das ist ein Test\n" for i in range(5))
    assert detect_format(write(tmp_path, "decode.log", decode))[0] != "marian"
