"""The `| epoch   1 |   100/ 2826 batches | lr 20.00 | ...` prints of the PyTorch word-language-model
example and AWD-LSTM (`word_lm`): the real course-exercise log, lines built from the printing code
(pytorch/examples word_language_model/main.py, salesforce/awd-lstm-lm main.py and its forks), and
fairseq's 2018 pipe summaries, which are not this format."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
from _ingest_helpers import ingest, series, write
from _ingest_helpers import train_steps as steps

from spikeforensics.ingest import detect_format, parse_file, word_lm
from spikeforensics.ingest.base import SniffSample

FRESH2 = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "fresh2"


def test_real_course_exercise_20_epochs(store):
    path = FRESH2 / "pytorch-examples-wordlm-mt-exercise-healthy-20-epochs" / "train_log.txt"
    assert detect_format(path)[0] == "word_lm"
    metrics, events, outcome = ingest(store, path)
    assert outcome.format == "word_lm" and outcome.unparsed == 0
    got = steps(metrics)
    # FACTS: 560 records, (E - 1) * 2826 + B from 100 to 56494
    assert len(got) == 560 and got[0] == 100 and got[-1] == 56494
    assert got[28] == 2826 + 100  # epoch 2 starts after the 2826 batches of epoch 1
    loss = series(metrics, "loss")
    assert loss[0] == (100, 6.92) and loss[-1] == (56494, 4.11)
    assert all(math.isfinite(v) for _, v in loss)
    assert series(metrics, "lr")[0] == (100, 20.0) and series(metrics, "lr")[-1] == (56494, 5.0)
    assert series(metrics, "step_time_ms")[0] == (100, 181.56)
    assert series(metrics, "ppl")[0] == (100, 1009.16)
    assert series(metrics, "epoch")[-1] == (56494, 20.0)
    # 20 end-of-epoch validations + the final test: eval records with the last train step
    evals = series(metrics, "eval_loss", train=False)
    assert len(evals) == 20 and evals[0] == (2800, 4.5) and evals[-1] == (56494, 3.96)
    assert series(metrics, "eval_ppl", train=False)[0] == (2800, 89.88)
    assert series(metrics, "eval_test_loss", train=False) == [(56494, 4.01)]
    assert events.filter(pl.col("kind") == "nan").height == 0


AWD = (
    "Args: Namespace(alpha=2, batch_size=80, bptt=70, data='data/penn', ...)\n"
    "Model total parameters: 24221600\n"
    "| epoch   1 |   200/  663 batches | lr 30.00000 | ms/batch 118.12 | loss  7.23 | ppl  1382.24 | bpc   10.433\n"
    "| epoch   1 |   400/  663 batches | lr 30.00000 | ms/batch 117.01 | loss  6.50 | ppl   665.14 | bpc    9.377\n"
    "-----------------------------------------------------------------------------------------\n"
    "| end of epoch   1 | time: 80.23s | valid loss  5.86 | valid ppl   350.88 | valid bpc    8.455\n"
    "-----------------------------------------------------------------------------------------\n"
    "Saving model (new best validation)\n"
    "| epoch   2 |   200/  663 batches | lr 3.00000e+01 | ms/batch 118.50 | loss   nan | ppl      nan | bpc      nan\n"
    "| epoch   2 |   400/  663 batches | lr 3.00000e+01 | ms/batch 118.50 | loss    inf | ppl      inf | bpc      inf\n"
    "=========================================================================================\n"
    "| End of training | test loss  4.01 | test ppl    55.03 | test bpc    5.786\n"
    "=========================================================================================\n"
)


def test_awd_lstm_bpc_exponent_lr_and_nonfinite(tmp_path, store):
    path = write(tmp_path, "awd.log", AWD)
    assert detect_format(path)[0] == "word_lm"
    metrics, events, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert steps(metrics) == [200, 400, 863, 1063]
    assert series(metrics, "lr") == [(200, 30.0), (400, 30.0), (863, 30.0), (1063, 30.0)]
    assert series(metrics, "bpc")[0] == (200, 10.433)
    loss = series(metrics, "loss")
    assert loss[0] == (200, 7.23) and math.isnan(loss[2][1]) and loss[3] == (1063, math.inf)
    assert series(metrics, "eval_loss", train=False) == [(400, 5.86)]
    assert series(metrics, "eval_bpc", train=False) == [(400, 8.455)]
    assert series(metrics, "eval_test_bpc", train=False) == [(1063, 5.786)]
    assert events.filter(pl.col("kind") == "nan").get_column("step").to_list() == [863, 1063]


def test_logger_prefix_epoch_zero_and_pointer_summary(tmp_path):
    text = (
        "2019-05-01 10:00:00,123 INFO | epoch   0 |   100/  500 batches | lr 0.00100 | ms/batch 50.00 | loss  6.50\n"
        "2019-05-01 10:00:05,123 INFO | epoch   1 |   100/  500 batches | lr 0.00100 | ms/batch 50.00 | loss  6.00\n"
        "| End of pointer | test loss  4.50 | test ppl    90.02\n"
    )
    path = write(tmp_path, "fork.log", text)
    assert detect_format(path)[0] == "word_lm"
    got = parse_file(path, "word_lm")
    metrics = got.tables["metrics"]
    assert steps(metrics) == [100, 600]  # a copy counting epochs from 0: e0 = 0
    assert series(metrics, "loss") == [(100, 6.5), (600, 6.0)]
    assert metrics.filter(pl.col("record").is_not_null()).get_column("time").null_count() == 0
    assert series(metrics, "eval_test_loss", train=False) == [(600, 4.5)]


FAIRSEQ_2018 = (
    "| [en] dictionary: 8848 types\n"
    "| epoch 001:   1000 / 2737 loss=6.220, nll_loss=5.070, ppl=33.59, wps=9000, ups=4.1, num_updates=1000\n"
    "| epoch 001 | loss 7.235 | nll_loss 6.1 | ppl 150.6 | wps 1234 | ups 1.2 | wpb 2000 | bsz 64 | num_updates 2737 "
    "| lr 0.25 | gnorm 1.1 | clip 100% | oom 0 | wall 100 | train_wall 90\n"
    "| epoch 001 | valid on 'valid' subset | valid_loss 6.9 | valid_ppl 120 | num_updates 2737\n"
    "| epoch 002 | loss 6.100 | nll_loss 5.2 | ppl 60.1 | wps 1234 | ups 1.2 | num_updates 5474 | lr 0.25\n"
)


def test_fairseq_2018_summaries_not_claimed(tmp_path):
    path = write(tmp_path, "fairseq.log", FAIRSEQ_2018)
    assert detect_format(path)[0] == "fairseq"
    lines = FAIRSEQ_2018.splitlines()
    assert word_lm.sniff(SniffSample(path, FAIRSEQ_2018, lines)) == 0.0
    got = parse_file(path, "word_lm")
    assert got.records == 0 and "metrics" not in got.tables


def test_other_pipe_tables_not_claimed(tmp_path):
    # a markdown table and a pipe-separated step line of another loop
    text = "| epoch | loss |\n|---|---|\n| 1 | 0.5 |\n| step 100 | loss 2.5 | lr 0.1 |\n"
    lines = text.splitlines()
    assert word_lm.sniff(SniffSample(Path("t.md"), text, lines)) == 0.0
    got = parse_file(write(tmp_path, "t.md", text), "word_lm")
    assert got.records == 0
