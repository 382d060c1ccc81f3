"""OpenNMT-py training logs (`spikeforensics/ingest/opennmt.py`): the real fresh2 console
capture (a README with the shell script and the model dump around the log), the variants
`Statistics.output` / `BertStatistics.output` (OpenNMT/OpenNMT-py onmt/utils/statistics.py) and
`ReportMgr._report_step` print, and near-miss lines that must not be claimed."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
from _ingest_helpers import ingest, train_steps, value, write

from spikeforensics.ingest import detect_format

CASE = (
    Path(__file__).resolve().parents[1]
    / "sample_logs"
    / "real"
    / "fresh2"
    / "opennmt-py-yoruba-adr-transformer-console-healthy-19k"
)


def test_real_yoruba_adr_console(store):
    path = CASE / "yoruba_adr_models_README.txt"
    assert detect_format(path)[0] == "opennmt"
    metrics, events, outcome = ingest(store, path)
    assert outcome.format == "opennmt" and outcome.unparsed == 0
    steps = train_steps(metrics)
    assert len(steps) == 381 and steps[0] == 50 and steps[-1] == 19050  # FACTS
    assert steps == list(range(50, 19051, 50))
    assert value(metrics, 50, "loss") == 9.34  # xent
    assert value(metrics, 50, "ppl") == 11344.46 and value(metrics, 50, "acc") == 2.15
    assert value(metrics, 50, "lr") == 0.00001 and value(metrics, 50, "tokens_per_s") == 11089
    assert value(metrics, 19050, "loss") == 0.04
    assert not metrics.filter(pl.col("name") == "loss").get_column("value").is_nan().any()
    # each validation (perplexity + accuracy lines) is one eval record at the step before it
    assert value(metrics, 500, "eval_ppl", record=False) == 500.32
    assert value(metrics, 500, "eval_acc", record=False) == 12.0461
    evals = metrics.filter(pl.col("record").is_null())
    assert evals.get_column("line").n_unique() == 38
    assert events.filter(pl.col("kind") == "checkpoint_save").get_column("step").head(2).to_list() == [500, 1000]


def test_opennmt_variants(tmp_path, store):
    text = (
        "[2023-05-02 10:00:00,000 INFO] Step 100/50000; acc: 45.2; ppl: 30.1; xent: 3.4; lr: 0.00070; "
        "sents:  123456; bsz: 1800/2000/64; 25000/27000 tok/s;    300 sec\n"
        "[2023-05-02 10:00:01,000 INFO] Train perplexity: 31.2\n"
        "[2023-05-02 10:00:01,000 INFO] Train accuracy: 44.9\n"
        "[2023-05-02 10:00:01,000 INFO] Validation perplexity: 33.5\n"
        "[2023-05-02 10:00:01,000 INFO] Validation accuracy: 41.25\n"
        "[2023-05-02 10:01:00,000 INFO] Step 150; acc(token):  55.10; ppl: 12.34; xent: 2.51; lr: 0.00010; "
        "900/950 tok/s;     60 sec\n"
        "Step 200/1000; acc:  12.00; ppl:   nan; xent:  nan; lr: 1.00000e-03; 100/120 tok/s;     20 sec\n"
        "Step 250/1000; acc(mlm/nx):  12.00/  5.00; total ppl: 3.30; xent: 1.19; lr: 0.00100; 100/120 tok/s;  20 sec\n"
        "[2023-05-02 10:03:00,000 INFO] Step 300/1000; acc: 50.0; ppl: inf; xent: 1e+02; lr: 0.00100; aux: 0.125; "
        "100/120 tok/s;  20 sec\n"
    )
    path = write(tmp_path, "train.log", text)
    assert detect_format(path)[0] == "opennmt"
    metrics, events, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert train_steps(metrics) == [100, 150, 200, 250, 300]
    assert value(metrics, 100, "loss") == 3.4 and value(metrics, 100, "sents") == 123456
    assert metrics.filter(pl.col("name") == "bsz").height == 0
    assert value(metrics, 100, "tokens_per_s") == 27000
    assert value(metrics, 100, "eval_ppl", record=False) == 33.5
    assert value(metrics, 100, "eval_acc", record=False) == 41.25
    assert metrics.filter(pl.col("name").str.contains("train_")).height == 0  # Train perplexity: no record
    assert value(metrics, 150, "acc") == 55.1 and value(metrics, 150, "loss") == 2.51
    assert math.isnan(value(metrics, 200, "loss")) and math.isnan(value(metrics, 200, "ppl"))
    assert events.filter(pl.col("kind") == "nan").get_column("step").to_list() == [200]
    assert value(metrics, 250, "acc") == 12.0 and value(metrics, 250, "ppl") == 3.3
    assert value(metrics, 300, "loss") == 100.0 and math.isinf(value(metrics, 300, "ppl"))
    assert value(metrics, 300, "aux") == 0.125


def test_opennmt_epoch_form(tmp_path, store):
    # 2017-18 releases: `Statistics.output(epoch, batch, n_batches, start)`
    text = (
        "Epoch  3,    50/  200; acc:  12.34; ppl: 345.67; xent: 5.85; lr: 1.00000; 1234/ 2345 tok/s;     12 sec\n"
        "Epoch  3,   100/  200; acc:  13.00; ppl: 300.00; xent: 5.70; lr: 1.00000; 1234/ 2345 tok/s;     24 sec\n"
        "Epoch  4,    50/  200; acc:  20.00; ppl: 100.00; xent: 4.61; lr: 0.50000; 1234/ 2345 tok/s;     36 sec\n"
    )
    path = write(tmp_path, "old.log", text)
    assert detect_format(path)[0] == "opennmt"
    metrics, _, _ = ingest(store, path)
    assert train_steps(metrics) == [50, 100, 250]  # (epoch - 3) * 200 + batch
    assert value(metrics, 250, "loss") == 4.61 and value(metrics, 250, "lr") == 0.5


def test_opennmt_does_not_claim_near_misses(tmp_path):
    # OpenNMT-tf: `Step = N ; ...` with `Loss = x`
    tf = "".join(
        f"2020-01-01 10:00:0{i}.000000: I runner.py:310] Step = {i * 100} ; steps/s = 2.5, source words/s = 12345,"
        f" target words/s = 12000 ; Learning rate = 0.0001 ; Loss = 9.{i}\n"
        for i in range(1, 6)
    )
    assert detect_format(write(tmp_path, "tf.log", tf))[0] != "opennmt"
    # a generic loop `Step 5, loss 2.3` (no `;` after the counter, no acc/ppl)
    loop = "".join(f"Step {i}, loss {2.0 - i / 100}, lr 0.001\n" for i in range(20))
    assert detect_format(write(tmp_path, "loop.log", loop))[0] != "opennmt"
    # Marian's line is Marian's
    marian = "[2020-09-05 20:22:04] Ep. 1 : Up. 100 : Sen. 46,750 : Cost 314.00448608 : Time 35.20s : 5532.88 words/s\n"
    assert detect_format(write(tmp_path, "m.log", marian * 3))[0] == "marian"
