"""Formats first met in the fresh3 real-log set (sample_logs/real/fresh3, session 8): Sockeye's
speedometer and checkpoint lines, Stable-Baselines logger tables, lit-gpt's `train time` print,
PaddleOCR's quoted keys and Turi Create's `Training N/M` progress (generic_steps), and a detection
loop's `losses` (the summed loss dict). Each: the real case file as the driver ingests it, and where
the framework prints variants, lines built from its printing code."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from _ingest_helpers import ingest, train_steps, value, write

from spikeforensics.ingest import detect_format

FRESH3 = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "fresh3"


def case_file(case: str) -> Path:
    folder = FRESH3 / case
    return next(p for p in sorted(folder.iterdir()) if p.name != "FACTS.toml")


# ---------------------------------------------------------------------------
# Sockeye


def test_sockeye_speedometer_and_checkpoints(store):
    path = case_file("sockeye3-signwriting-cleaned-log-healthy-30-checkpoints")
    assert detect_format(path)[0] == "sockeye"
    metrics, _, outcome = ingest(store, path)
    assert outcome.format == "sockeye" and outcome.unparsed == 0
    steps = train_steps(metrics)
    assert len(steps) == 4800 and steps[:3] == [50, 100, 150] and steps[-1] == 240000
    # `E=0 B=50  s/sec=309.73 tok/sec=4673.93 u/sec=0.45  ppl=1457.873261`: loss = ln(ppl)
    assert value(metrics, 50, "ppl") == 1457.873261
    assert value(metrics, 50, "loss") == pytest.approx(math.log(1457.873261))
    assert value(metrics, 50, "tokens_per_s") == 4673.93 and value(metrics, 50, "epoch") == 0
    # checkpoint 1 (after B=8000): validation and the LR at the training record's step, as eval records
    assert value(metrics, 8000, "eval_ppl", record=False) == 149.8561
    assert value(metrics, 8000, "eval_bleu", record=False) == 0.015643
    assert value(metrics, 8000, "lr", record=False) == 0.0001


def test_sockeye1_speedometer_line(store, tmp_path):
    # Sockeye 1 (MXNet) `Speedometer`: 'Epoch[%d] Batch [%d]\tSpeed: %.2f samples/sec\t%s'
    path = write(
        tmp_path,
        "train.log",
        "[INFO:sockeye.callback] Epoch[0] Batch [50]\tSpeed: 1025.55 samples/sec\tperplexity=1060.906348\n"
        "[INFO:sockeye.callback] Epoch[0] Batch [100]\tSpeed: 1100.10 samples/sec\tperplexity=nan\n",
    )
    metrics, _, outcome = ingest(store, path)
    assert outcome.format == "sockeye" and train_steps(metrics) == [50, 100]
    assert value(metrics, 50, "loss") == pytest.approx(math.log(1060.906348))
    assert math.isnan(value(metrics, 100, "loss"))


# ---------------------------------------------------------------------------
# Stable-Baselines


def test_stable_baselines_tables(store):
    path = case_file("stable-baselines-693-ppo2-nan-after-update29-value-loss-3e6")
    assert detect_format(path)[0] == "sb_table"
    metrics, _, outcome = ingest(store, path)
    assert outcome.format == "sb_table" and outcome.unparsed == 0
    assert train_steps(metrics) == [29, 30]  # n_updates
    assert value(metrics, 29, "value_loss") == 3735940.5 and value(metrics, 29, "total_timesteps") == 237568
    assert math.isnan(value(metrics, 30, "value_loss")) and math.isnan(value(metrics, 30, "policy_loss"))


def test_stable_baselines3_sections(store, tmp_path):
    # SB3's HumanOutputFormat: `section/` header rows, indented keys under them
    rows = [
        ("rollout/", ""),
        ("    ep_rew_mean", "-1.2e+03"),
        ("time/", ""),
        ("    iterations", "10"),
        ("    total_timesteps", "20480"),
        ("train/", ""),
        ("    learning_rate", "0.0003"),
        ("    loss", "12.3"),
        ("    n_updates", "90"),
        ("    value_loss", "45.6"),
    ]
    dash = "-" * 41
    block = "\n".join([dash, *(f"| {k:<23} | {v:<11} |" for k, v in rows), dash])
    path = write(tmp_path, "sb3.log", "Using cuda device\n" + block + "\n" + block.replace("| 90 ", "| 100") + "\n")
    metrics, _, outcome = ingest(store, path)
    assert outcome.format == "sb_table"
    assert train_steps(metrics) == [90, 100]
    assert value(metrics, 90, "loss") == 12.3 and value(metrics, 90, "lr") == 0.0003
    assert value(metrics, 90, "ep_rew_mean") == -1200.0 and value(metrics, 90, "value_loss") == 45.6


# ---------------------------------------------------------------------------
# lit-gpt, generic custom loops


def test_litgpt_train_time_print(store):
    path = case_file("litgpt-185-fsdp-finetune-nan-after-first-optimizer-step")
    metrics, _, outcome = ingest(store, path)
    assert outcome.format == "litgpt" and outcome.unparsed == 0
    steps = train_steps(metrics)
    assert len(steps) == 21 and steps[:3] == [0, 1, 2]  # every `iter N` line its own record
    assert value(metrics, 15, "loss") == 2.0308 and value(metrics, 15, "optimizer_step") == 1
    assert math.isnan(value(metrics, 16, "loss"))


def test_paddleocr_quoted_keys(store):
    path = case_file("paddleocr-2794-rec-loss-nan-from-iter2-warmup")
    metrics, _, outcome = ingest(store, path)
    assert outcome.format == "generic_steps" and train_steps(metrics) == [2, 4]
    assert math.isnan(value(metrics, 2, "loss")) and value(metrics, 2, "acc") == 0.0
    assert value(metrics, 4, "lr") == 0.000002


def test_turicreate_training_fraction(store):
    path = case_file("turicreate-552-object-detector-loss-nan-iter4")
    metrics, _, outcome = ingest(store, path)
    assert outcome.format == "generic_steps" and train_steps(metrics) == list(range(1, 13))
    assert value(metrics, 3, "loss") == 6.265 and math.isnan(value(metrics, 4, "loss"))
    assert "training" not in set(metrics.get_column("name"))  # the counter is no metric


def test_summed_losses_are_the_loss(store):
    path = case_file("custom-maskrcnn-benchmark-1347-losses-explode-nan-iter7-lr0025")
    metrics, _, _ = ingest(store, path)
    assert train_steps(metrics) == list(range(1, 11))
    assert value(metrics, 6, "loss") == 1436176.25 and math.isnan(value(metrics, 7, "loss"))


def test_a_loop_that_prints_only_its_losses_gives_stepless_records(store, tmp_path):
    path = case_file("custom-bmn-22-pem-class-loss-nan-batch-size-1")
    assert detect_format(path)[0] == "generic_steps"
    metrics, _, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert train_steps(metrics) == [None] * 4  # no counter printed: records in file order, step null
    loss = metrics.filter(metrics["name"] == "loss").sort("record").get_column("value").to_list()
    assert loss[:2] == [1.883, 1.884] and all(math.isnan(v) for v in loss[2:])
    # three `loss = ...` lines of a script's source are not such a log
    src = write(tmp_path, "train.py", "loss = 0.0\nfor batch in data:\n    total_loss = 0\n    loss = 1\n")
    assert detect_format(src)[0] is None


def test_ms_swift_progress_string_in_python_dicts_is_the_step(store):
    # ms-swift's dicts printed through the HF logger (single quotes, no tqdm counter before them)
    path = case_file("ms-swift-2280-qwen2vl-2node-loss-663-gradnorm-nan-step5")
    metrics, _, outcome = ingest(store, path)
    assert outcome.format == "hf_trainer" and train_steps(metrics) == [1, 5]
    assert value(metrics, 5, "loss") == 663.56591797 and math.isnan(value(metrics, 5, "grad_norm"))
