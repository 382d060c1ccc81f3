"""MosaicML Composer `ConsoleLogger` blocks (LLM Foundry train.py, LLM-Shearing, ...): the real
corpus files as the driver ingests them, blocks built from the printing code
(mosaicml/composer composer/loggers/console_logger.py `log_to_console`: header
`[{unit}={n}/{max}]:` or `[epoch={e}][batch={b}/{n}]:`, then `\\t {prefix}{name}: {value}` with
`format_log_data_value`'s `{:.4f}` floats), and look-alikes that must not be claimed."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
from _ingest_helpers import ingest, value, write

from spikeforensics.ingest import detect_format

DEV = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "dev"


def train(metrics):
    return metrics.filter(pl.col("record").is_not_null())


def records(metrics):
    return train(metrics).select("record", "step").unique().sort("record").get_column("step").to_list()


def block(header, pairs, prefix="Train", indent="\t "):
    return header + "".join(f"\n{indent}{prefix} {k}: {v}" for k, v in pairs) + "\n"


# ---------------------------------------------------------------------------
# real corpus files


def test_real_dyna_profile_three_blocks(store):
    path = DEV / "composer-dyna-moe-profile-20-batches-healthy" / "profile"
    assert detect_format(path)[0] == "composer"
    metrics, _, outcome = ingest(store, path)
    assert outcome.format == "composer" and outcome.unparsed == 0
    assert records(metrics) == [1, 10, 20]  # FACTS: step_records 3, first 1, last 20
    assert [value(metrics, s, "loss") for s in (1, 10, 20)] == [0.0053, 0.0053, 0.0051]
    assert value(metrics, 10, "grad_norm") == 0.0022 and value(metrics, 20, "grad_norm") == 0.0015
    assert value(metrics, 20, "lr") == 0.0001 and value(metrics, 20, "tokens_per_s") == 222.2194
    assert value(metrics, 10, "time_batch") == 9.0
    assert value(metrics, 1, "metrics_train_languagecrossentropy") == 10.9476
    assert metrics.filter(pl.col("name") == "grad_norm").height == 2  # block 1 prints none
    # each value keeps the line that printed it (the loss of block 1 is line 44)
    assert metrics.filter((pl.col("step") == 1) & (pl.col("name") == "loss")).item(0, "line") == 44
    assert not train(metrics).get_column("value").is_nan().any()


def test_real_llm_shearing_paste_spaces_for_tab(store):
    path = DEV / "composer-llm-shearing-15-pruning-block-nan-question" / "issue_15_paste.log"
    assert detect_format(path)[0] == "composer"
    metrics, _, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert records(metrics) == [3108]  # FACTS: one record, step 3108
    assert value(metrics, 3108, "time_batch") == 3107.0
    assert value(metrics, 3108, "metrics_train_target_hidden_sparsity") == 0.375
    assert metrics.filter(pl.col("name").is_in(["loss", "grad_norm"])).height == 0  # cut before them


# ---------------------------------------------------------------------------
# variants from the printing code


def test_batch_blocks_nan_inf_and_eval_block(store, tmp_path):
    text = (
        "******************************\nConfig:\nrun_name: llm\n******************************\n"
        + block(
            "[batch=1/4800]:",
            [("time/batch", 0), ("loss/train/total", "11.2345"), ("lr-DecoupledAdamW/group0", "0.0000")],
        )
        + block(
            "[batch=10/4800]:", [("time/batch", 9), ("loss/train/total", "7.6431"), ("l2_norm/grad/global", "1.2345")]
        )
        + block("[batch=20/4800]:", [("time/batch", 19), ("loss/train/total", "nan"), ("l2_norm/grad/global", "inf")])
        + "[Eval batch=1/11] Eval on eval data\n[Eval batch=6/11] Eval on eval data\n"
        + block(
            "[Eval batch=11/11] Eval on eval data:",
            [("metrics/eval/LanguageCrossEntropy", "2.3456"), ("metrics/eval/LanguagePerplexity", "10.4412")],
            prefix="Eval",
        )
        + block("[batch=30/4800]:", [("time/batch", 29), ("loss/train/total", "-inf"), ("lr-AdamW/group0", "0.0006")])
    )
    path = write(tmp_path, "llmfoundry.log", text)
    assert detect_format(path)[0] == "composer"
    metrics, events, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert records(metrics) == [1, 10, 20, 30]
    assert math.isnan(value(metrics, 20, "loss")) and math.isinf(value(metrics, 20, "grad_norm"))
    assert value(metrics, 30, "loss") == float("-inf") and value(metrics, 30, "lr") == 0.0006
    # the eval block is an eval record with the step of the train block before it
    assert value(metrics, 20, "eval_loss", record=False) == 2.3456
    assert value(metrics, 20, "eval_eval_languageperplexity", record=False) == 10.4412
    nan_steps = events.filter(pl.col("kind") == "nan").get_column("step").to_list()
    assert nan_steps and min(nan_steps) == 20


def test_epoch_form_steps_across_epochs(store, tmp_path):
    text = "".join(
        block(
            f"[epoch={e}][batch={b}/5]:",
            [("time/batch", (e - 1) * 5 + b - 1), ("loss/train/total", f"{3 - 0.1 * b:.4f}")],
        )
        for e, b in [(1, 1), (1, 5), (2, 2), (2, 5), (3, 1)]
    )
    path = write(tmp_path, "epochs.log", text)
    metrics, _, outcome = ingest(store, path)
    assert outcome.format == "composer"
    assert records(metrics) == [1, 5, 7, 10, 11]  # (epoch - 1) * n + batch


def test_token_duration_uses_time_batch_and_srun_prefix(store, tmp_path):
    text = "".join(
        "\n".join(
            "0: " + ln
            for ln in block(
                f"[token={t}/8000000]:", [("time/batch", tb), ("loss/train/total", v)], indent="      "
            ).splitlines()
        )
        + "\n"
        for t, tb, v in [(2048, 0, "10.9"), (20480, 9, "8.7"), (40960, 19, "1.2e+03")]
    )
    path = write(tmp_path, "tokens.log", text)
    metrics, _, outcome = ingest(store, path)
    assert outcome.format == "composer" and outcome.unparsed == 0
    assert records(metrics) == [1, 10, 20]  # time/batch + 1: batches trained
    assert value(metrics, 20, "loss") == 1200.0


def test_old_style_eval_block_under_train_header(store, tmp_path):
    # before `[Eval batch=...]` existed the eval block reused the training progress string
    text = block("[epoch=1][batch=100/100]:", [("loss/train", "2.5000"), ("grad_l2_norm/step", "0.9000")]) + block(
        "[epoch=1][batch=100/100]:", [("metrics/eval/Accuracy", "0.8100")], prefix="Eval"
    )
    path = write(tmp_path, "old.log", text)
    metrics, _, _ = ingest(store, path)
    assert records(metrics) == [100]
    assert value(metrics, 100, "loss") == 2.5 and value(metrics, 100, "grad_norm") == 0.9
    assert value(metrics, 100, "eval_eval_accuracy", record=False) == 0.81


def test_orphan_metric_lines_are_unparsed(store, tmp_path):
    text = "\t Train loss/train/total: 3.0000\n" + block("[batch=2/10]:", [("loss/train/total", "2.9000")])
    path = write(tmp_path, "orphan.log", text)
    metrics, _, outcome = ingest(store, path)
    assert records(metrics) == [2] and outcome.unparsed == 1


# ---------------------------------------------------------------------------
# look-alikes that are not Composer console blocks


def test_near_misses_not_claimed(tmp_path):
    plain = write(
        tmp_path, "plain.log", "".join(f"Epoch {i}\nTrain loss: {1.0 / i:.4f}\nTrain acc: 0.5\n" for i in range(1, 20))
    )
    assert detect_format(plain)[0] != "composer"
    keras = write(
        tmp_path,
        "keras.log",
        "".join(
            f"Epoch {i}/10\n100/100 [==============================] - 5s 50ms/step - loss: 0.5\n" for i in range(1, 9)
        ),
    )
    assert detect_format(keras)[0] != "composer"
    mmdet = write(
        tmp_path,
        "mmdet.log",
        "".join(
            f"2024-01-01 00:00:0{i} - mmdet - INFO - Epoch [1][{i * 50}/7330]\tlr: 2.0e-02, loss: 1.2\n"
            for i in range(1, 9)
        ),
    )
    assert detect_format(mmdet)[0] != "composer"


def test_2022_one_metric_per_line_form(store, tmp_path):
    # ProgressBarLogger.log_to_console, 2022-08..11: f'{training_progress}: {data_name}: {data_str}', epoch 0-based
    rows = []
    for e, b, loss in [(0, 16, "7.1000"), (0, 32, "nan"), (1, 16, "6.0000")]:
        rows += [
            f"[epoch={e}][batch={b}/100]: loss/train/total: {loss}",
            f"[epoch={e}][batch={b}/100]: lr-DecoupledAdamW/group0: 0.0002",
            f"[epoch={e}][batch={b}/100]: wall_clock/train: 17.1000",
        ]
    rows.append("[epoch=1][batch=16/100]: metrics/eval/LanguageCrossEntropy: 2.5000")
    path = write(tmp_path, "c2022.log", "\n".join(rows) + "\n")
    assert detect_format(path)[0] == "composer"
    metrics, events, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert records(metrics) == [16, 32, 116]  # e0 = 0: epoch * n + batch
    assert math.isnan(value(metrics, 32, "loss")) and value(metrics, 116, "lr") == 0.0002
    assert value(metrics, 116, "eval_loss") == 2.5  # an eval value on the train record's line run
    assert min(events.filter(pl.col("kind") == "nan").get_column("step").to_list()) == 32


def test_2022_log_level_mapping_form(store, tmp_path):
    # before 2022-08: f'[{log_level.name}]{training_progress}: {data_str}' with format_log_data_value of a dict
    text = (
        '[FIT][batch=1/3000]: { "trainer/algorithms": [], }\n'
        '[BATCH][batch=1/3000]: { "loss/train": 9.8000, "lr-DecoupledAdamW/group0": 0.0001, }\n'
        '[BATCH][batch=2/3000]: { "loss/train": 9.5000, }\n'
        '[BATCH][batch=2/3000]: { "grad_l2_norm/step": 1.2000, }\n'
        '[BATCH][batch=3/3000]: { "loss/train": inf, "grad_l2_norm/step": nan, }\n'
    )
    path = write(tmp_path, "c0_8.log", text)
    assert detect_format(path)[0] == "composer"
    metrics, _, _ = ingest(store, path)
    assert records(metrics) == [1, 2, 3]
    assert value(metrics, 1, "loss") == 9.8 and value(metrics, 2, "grad_norm") == 1.2
    assert math.isinf(value(metrics, 3, "loss")) and math.isnan(value(metrics, 3, "grad_norm"))


def test_parse_of_a_file_without_blocks_reads_nothing(tmp_path):
    from spikeforensics.ingest import composer
    from spikeforensics.ingest.base import SourceFile

    path = write(tmp_path, "hf.log", "{'loss': 0.2051, 'grad_norm': nan, 'learning_rate': 9.77e-06, 'epoch': 0.53}\n")
    result = composer.parse(SourceFile(path=path, name="hf.log"))
    assert result.records == 0 and result.unparsed == 0
