"""Formats first met in the fresh real-log set (sample_logs/real/fresh): Keras `fit` progress
output, darknet YOLO training stdout, build-nanogpt `log.txt` ("step split value"), WaveGlow's
"N: value" prints and the bracketed `[N]` counter of custom loops (generic_steps). Each: the real
case file as the driver ingests it, lines built from the framework's printing code (the
variants), and similar-looking files that must not be claimed."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from spikeforensics.ingest import detect_format, ingest_paths

FRESH = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "fresh"


def ingest(store, path, run="r"):
    report = ingest_paths([path], run, store)
    assert report.ok, report.as_dict()
    return store.table(run, "metrics"), store.table(run, "events"), report.files[0]


def train(metrics):
    return metrics.filter(pl.col("record").is_not_null())


def value(metrics, step, name, record=True):
    rows = metrics.filter((pl.col("step") == step) & (pl.col("name") == name))
    rows = rows.filter(pl.col("record").is_not_null() if record else pl.col("record").is_null())
    assert rows.height == 1, (step, name, rows)
    return rows.item(0, "value")


def records(metrics):
    return train(metrics).select("record", "step").unique().sort("record").get_column("step").to_list()


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


# ---------------------------------------------------------------------------
# Keras


def test_keras_real_end_of_epoch_lines(store):
    path = FRESH / "keras-imc-denoise-11-lr1-nan-from-epoch1" / "imc_denoise_11_description.log"
    assert detect_format(path)[0] == "keras"
    metrics, events, outcome = ingest(store, path)
    assert outcome.format == "keras" and outcome.unparsed == 0
    assert records(metrics) == [1, 2, 3]
    for step in (1, 2, 3):
        assert math.isnan(value(metrics, step, "loss"))
        assert math.isnan(value(metrics, step, "eval_loss"))  # val_loss on the same line
    assert value(metrics, 1, "step_time_ms") == 7000.0 and value(metrics, 2, "step_time_ms") == 582.0
    saves = events.filter(pl.col("kind") == "checkpoint_save").sort("line")
    assert saves.get_column("step").to_list() == [1, 2, 3]  # `Epoch 0000k: saving model to ...`
    assert events.filter(pl.col("kind") == "nan").get_column("step").to_list() == [1, 2, 3]


KERAS2 = (
    "Train on 15816 samples, validate on 2792 samples\n"
    "Epoch 1/3\n"
    # a terminal/file: redraws joined by backspaces and \r on one physical line (Progbar.update)
    "   32/15816 [..............................] - ETA: 5:00 - loss: 0.7123 - mae: 0.5100\b\b\b\b\r"
    " 6400/15816 [===========>..................] - ETA: 30s - loss: 0.5123 - mae: 4.1000e-04\b\b\b\r"
    "15816/15816 [==============================] - 72s 5ms/sample - loss: 0.4000 - mae: 0.3000 - val_loss: 0.4500 - val_mae: 0.3500\n"
    "\n"
    "Epoch 00001: val_loss improved from inf to 0.45000, saving model to /tmp/w.hdf5\n"
    "Epoch 2/3\n"
    "124/124 [==============================] - 70s 564ms/step - loss: 0.3000 - mae: 0.2500 - val_loss: 0.4000 - val_mae: 0.3000 - lr: 1.0000e-04\n"
    "Epoch 3/3\n"
    " 64/124 [==============>...............] - ETA: 30s - loss: nan - mae: nan\n"
    # model.evaluate after the run: another target, an eval record
    "10/10 [==============================] - 1s 5ms/step - loss: 0.3100 - mae: 0.2600\n"
)

KERAS3 = (
    "Epoch 1/2\n"
    "\x1b[1m 1/50\x1b[0m \x1b[37m━━━━━━━━━━━━━━━━━━━━\x1b[0m \x1b[1m1:23\x1b[0m 2s/step - accuracy: 0.1000 - loss: 2.3000\b\b\b\b\r"
    "\x1b[1m25/50\x1b[0m \x1b[32m━━━━━━━━━━\x1b[0m\x1b[37m━━━━━━━━━━\x1b[0m \x1b[1m10s\x1b[0m 400ms/step - accuracy: 0.3000 - loss: 1.9000\b\b\r"
    "\x1b[1m50/50\x1b[0m \x1b[32m━━━━━━━━━━━━━━━━━━━━\x1b[0m\x1b[37m\x1b[0m \x1b[1m21s\x1b[0m 420ms/step - accuracy: 0.4000 - loss: 1.7000 - val_accuracy: 0.5000 - val_loss: 1.5000 - learning_rate: 1.0000e-03\n"
    "Epoch 2/2\n"
    "50/50 - 20s - 400ms/step - accuracy: 0.6000 - loss: 1.2000 - val_accuracy: 0.6500 - val_loss: 1.1000\n"  # verbose=2
)


def test_keras2_redraws_partial_epoch_and_evaluate(tmp_path, store):
    path = write(tmp_path, "fit.log", KERAS2)
    assert detect_format(path)[0] == "keras"
    metrics, events, _ = ingest(store, path)
    assert records(metrics) == [1, 2, 3]
    assert value(metrics, 1, "loss") == 0.4 and value(metrics, 1, "eval_loss") == 0.45  # the finished bar, not a redraw
    assert value(metrics, 1, "val_mae") == 0.35
    assert value(metrics, 2, "lr") == 1e-4 and value(metrics, 2, "step_time_ms") == 564.0
    assert math.isnan(value(metrics, 3, "loss"))  # epoch 3 died: its last redraw stands for it
    assert value(metrics, 3, "eval_loss", record=False) == 0.31  # model.evaluate
    assert events.filter(pl.col("kind") == "checkpoint_save").get_column("step").to_list() == [1]


def test_keras3_bars_ansi_and_verbose2(tmp_path, store):
    path = write(tmp_path, "fit3.log", KERAS3)
    assert detect_format(path)[0] == "keras"
    metrics, _, _ = ingest(store, path)
    assert records(metrics) == [1, 2]
    assert value(metrics, 1, "loss") == 1.7 and value(metrics, 1, "accuracy") == 0.4
    assert value(metrics, 1, "lr") == 1e-3 and value(metrics, 1, "step_time_ms") == 420.0
    assert value(metrics, 2, "loss") == 1.2 and value(metrics, 2, "eval_loss") == 1.1


def test_keras_verbose2_old_and_unknown_target(tmp_path, store):
    text = (
        "Epoch 1/2\n - 72s - loss: 0.5000 - val_loss: 0.6000\n"
        "Epoch 2/2\n     12/Unknown 5s 130ms/step - loss: 0.5200\r     37/Unknown 9s 120ms/step - loss: 0.4100\n"
    )
    metrics, _, _ = ingest(store, write(tmp_path, "v2.log", text))
    assert records(metrics) == [1, 2]
    assert value(metrics, 1, "eval_loss") == 0.6 and value(metrics, 2, "loss") == 0.41


def test_keras_does_not_claim_tqdm_epochs_or_prose(tmp_path):
    tqdm = "Epoch 1/10\n" + "".join(
        f"Epoch 1: 100%|██████████| 40/40 [00:0{i}<00:00,  2.05it/s, loss={0.5 - i / 100:.3f}]\n" for i in range(5)
    )
    assert detect_format(write(tmp_path, "tqdm.log", tqdm))[0] != "keras"
    prose = "Epoch 1/2 of the plan\n3/4 cups - flour: 200 g - sugar: 50 g\n1/2 - note: 3 items\n"
    assert detect_format(write(tmp_path, "recipe.txt", prose))[0] is None


# ---------------------------------------------------------------------------
# darknet


def test_darknet_real_nan_iteration(store):
    path = FRESH / "darknet-2789-rtx2080ti-defective-nan-avg-loss" / "darknet_2789_description_chunk.log"
    assert detect_format(path)[0] == "darknet"
    metrics, events, outcome = ingest(store, path)
    assert outcome.format == "darknet" and outcome.unparsed == 0
    assert records(metrics) == [28]  # the `Region Avg IOU` layer lines are no records
    assert math.isnan(value(metrics, 28, "loss")) and math.isnan(value(metrics, 28, "avg_loss"))
    assert value(metrics, 28, "lr") == 0.0 and value(metrics, 28, "consumed_samples") == 1792
    assert events.filter(pl.col("kind") == "nan").get_column("step").to_list() == [28]


def test_darknet_real_cuda_error_crash(store):
    path = FRESH / "darknet-5547-cuda-illegal-instruction-hardware-crash" / "darknet_5547_description.log"
    metrics, events, outcome = ingest(store, path)
    assert outcome.status == "ingested" and train(metrics).height == 0
    errors = events.filter(pl.col("kind") == "error")
    assert errors.height == 3  # `CUDA status Error: file: ...` and two `CUDA Error: an illegal instruction ...`
    assert all('"reason": "cuda_error"' in d for d in errors.get_column("detail").to_list())
    assert "illegal instruction" in errors.sort("line").item(1, "detail")


def test_cuda_error_lines_alone_are_an_events_file(tmp_path, store):
    path = write(
        tmp_path,
        "crash.log",
        " CUDA Error: an illegal memory access was encountered\n"
        "CUDA Error: an illegal memory access was encountered: Resource temporarily unavailable\n",
    )
    _, events, outcome = ingest(store, path)
    assert outcome.status == "ingested"
    assert events.filter(pl.col("kind") == "error").height == 2
    oom = write(tmp_path, "oom.log", " CUDA Error: out of memory\n")
    _, events, _ = ingest(store, oom, run="oom")
    assert events.get_column("kind").to_list() == ["oom"]


DARKNET_VARIANTS = (
    # AlexeyAB detector.c, 2019-2023 (MSVC prints NaN as -nan(ind))
    "\n 100: 612.345703, 650.123413 avg loss, 0.000001 rate, 4.531224 seconds, 6400 images, 12.345678 hours left\n"
    "Loaded: 0.000040 seconds\n"
    "v3 (iou loss, Normalizer: (iou: 0.07, cls: 1.00) Region 161 Avg (IOU: 0.32), count: 13, class_loss = 30.5, iou_loss = 7.0, total_loss = 37.5\n"
    "\n 101: -nan(ind), -nan(ind) avg loss, 0.000001 rate, 4.531224 seconds, 6464 images, 12.345678 hours left\n"
    " (next mAP calculation at 102 iterations) \n"
    " 102: 1.#QNAN0, 1.#INF00 avg loss, 0.000001 rate, 4.5 seconds, 6528 images, 12.3 hours left\n"
    "\n mean_average_precision (mAP@0.50) = 0.812345 \n"
)


def test_darknet_variants_from_the_printing_code(tmp_path, store):
    path = write(tmp_path, "train.log", DARKNET_VARIANTS)
    assert detect_format(path)[0] == "darknet"
    metrics, _, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    assert records(metrics) == [100, 101, 102]
    assert value(metrics, 100, "avg_loss") == pytest.approx(650.123413)
    assert value(metrics, 100, "step_time_ms") == pytest.approx(4531.224)
    assert math.isnan(value(metrics, 101, "loss")) and math.isnan(value(metrics, 102, "loss"))
    assert value(metrics, 102, "avg_loss") == math.inf
    assert value(metrics, 102, "eval_map", record=False) == pytest.approx(0.812345)


@pytest.mark.parametrize(
    "line, step, loss, extra",
    [
        (
            "1200: 2.301212, 2.287713 avg, 0.100000 rate, 0.412311 seconds, 76800 images",
            1200,
            2.301212,
            ("consumed_samples", 76800),
        ),  # pjreddie detector.c
        (
            "1200, 3.840: 2.301212, 2.287713 avg, 0.100000 rate, 0.412311 seconds, 153600 images",
            1200,
            2.301212,
            ("epoch", 3.84),
        ),  # classifier.c
        ("55: 4.1, 4.3 avg, 0.001000 rate, 0.2 seconds, 0.013 epochs", 55, 4.1, ("epoch", 0.013)),  # rnn.c
        (
            "5989: loss=0.444, avg loss=0.329, rate=0.000026, 64.424 milliseconds, 383296 images, time remaining=7 seconds",
            5989,
            0.444,
            ("step_time_ms", 64.424),
        ),  # hank-ai/darknet V3
    ],
)
def test_darknet_record_shapes(tmp_path, store, line, step, loss, extra):
    metrics, _, _ = ingest(
        store, write(tmp_path, "d.log", line + "\n" + line.replace(str(step), str(step + 1), 1) + "\n")
    )
    assert records(metrics) == [step, step + 1]
    assert value(metrics, step, "loss") == pytest.approx(loss)
    assert value(metrics, step, extra[0]) == pytest.approx(extra[1])


def test_darknet_does_not_claim_lookalikes(tmp_path):
    text = "1: 0.5, 0.3 average, 2 rates\n2: apples, 3 avg, 4 rate\nitem 3: 5 seconds, 6 images\n"
    assert detect_format(write(tmp_path, "notes.txt", text))[0] is None


# ---------------------------------------------------------------------------
# build-nanogpt log.txt ("step split value")


def test_buildnanogpt_log_txt_real(store):
    path = FRESH / "buildnanogpt-agndm-2p5-epoch-log-txt-healthy-56k" / "log.txt"
    assert detect_format(path)[0] == "step_split"
    metrics, _, outcome = ingest(store, path)
    assert outcome.unparsed == 0
    steps = records(metrics)
    assert len(steps) == 56047 and steps[0] == 0 and steps[-1] == 56046
    assert value(metrics, 0, "loss") == pytest.approx(10.955011)
    assert value(metrics, 0, "eval_loss", record=False) == pytest.approx(10.9519)
    assert value(metrics, 0, "eval_hella", record=False) == pytest.approx(0.2487)
    assert value(metrics, 250, "eval_loss", record=False) == pytest.approx(6.5893)


def test_step_split_variants(tmp_path, store):
    text = (
        "0 val 10.9519\n0 hella 0.2487\n0 train 10.955011\n1 train nan\n"
        "2 train 3.512345 lr 6.0000e-04 norm 0.3123 dt 812.33 tok/sec 645123.45\n3 train 1e+05\n4 train oops\n"
        + "".join(f"{i} train 3.0\n" for i in range(5, 15))
    )
    metrics, events, outcome = ingest(store, write(tmp_path, "log.txt", text))
    assert records(metrics) == [0, 1, 2, 3, *range(5, 15)]
    assert math.isnan(value(metrics, 1, "loss"))
    assert value(metrics, 2, "lr") == 6e-4 and value(metrics, 2, "grad_norm") == 0.3123
    assert value(metrics, 3, "loss") == 1e5
    assert outcome.unparsed == 1  # `4 train oops`: the line, not the file
    assert events.filter(pl.col("kind") == "nan").get_column("step").to_list() == [1]


def test_step_split_does_not_claim_other_tables(tmp_path):
    random_table = "".join(f"{i} foo {i * 0.5}\n" for i in range(50))
    assert detect_format(write(tmp_path, "a.txt", random_table))[0] != "step_split"
    mostly_other = "step 1 loss 2.0\n" * 30 + "0 train 3.0\n"
    assert detect_format(write(tmp_path, "b.txt", mostly_other))[0] != "step_split"


# ---------------------------------------------------------------------------
# WaveGlow "N: value"


def test_waveglow_real(store):
    path = FRESH / "waveglow-38-one-step-40490-then-no-recovery" / "waveglow_38_description.log"
    assert detect_format(path)[0] == "step_colon"
    metrics, _, outcome = ingest(store, path)
    steps = records(metrics)
    assert len(steps) == 32 and steps[0] == 123873 and steps[-1] == 123904
    assert value(metrics, 123892, "loss") == pytest.approx(40490.1796875)
    assert value(metrics, 123873, "loss") == pytest.approx(-5.480178833)


def test_step_colon_variants(tmp_path, store):
    text = "Epoch: 0\n1:\t-4.123456789\n2:\tnan\n3:\t-4.2,\t-4.0\n4:\t-4.3\n"
    metrics, _, _ = ingest(store, write(tmp_path, "train.log", text))
    assert records(metrics) == [1, 2, 3, 4]
    assert math.isnan(value(metrics, 2, "loss"))
    assert value(metrics, 3, "eval_loss") == -4.0


def test_step_colon_never_steals(tmp_path):
    # a generic loop log with a few `N: value` lines keeps its own parser
    text = "".join(f"step {i} | loss {2.0 - i / 100}\n" for i in range(20)) + "1: 0.5\n2: 0.6\n3: 0.7\n"
    assert detect_format(write(tmp_path, "loop.log", text))[0] == "generic_steps"
    # a numbered list among prose is not claimed
    text = "Results\n1: 0.5\n2: 0.6\n3: 0.7\nrun on 4 GPUs, batch 32, seed 1234\nlr 3e-4, wd 0.1, 10 epochs\n"
    assert detect_format(write(tmp_path, "notes.txt", text))[0] is None


# ---------------------------------------------------------------------------
# generic_steps: a bracketed counter at the line start


def test_convmesh_bracket_counter_real(store):
    path = FRESH / "convmesh-8-gan-loss-nan-from-first-update-torch17" / "convmesh_8_description.log"
    assert detect_format(path)[0] == "generic_steps"
    metrics, _, _ = ingest(store, path)
    assert records(metrics) == [0, 10]  # `[10] ` survives the log-viewer prefix stripper
    assert math.isnan(value(metrics, 0, "g_loss")) and value(metrics, 0, "d_fake_loss") == 0.0
    assert math.isnan(value(metrics, 10, "d_real_loss"))


def test_bracket_counter_variants_and_viewer_numbers(tmp_path, store):
    text = (
        "> [120] epoch 1, 120/186, g_loss 1.5 d_fake_loss 0.7\n> [130] epoch 1, 130/186, g_loss 1.4 d_fake_loss 0.6\n"
    )
    metrics, _, _ = ingest(store, write(tmp_path, "quoted.log", text))
    assert records(metrics) == [120, 130]
    # log-viewer line numbers in front of HF dicts are no counters
    hf = "".join(
        f"[{80746 + i}] {{'loss': {1.0 + i / 10}, 'learning_rate': 1e-05, 'epoch': 0.{i}}}\n" for i in range(3)
    )
    path = write(tmp_path, "viewer.log", hf)
    assert detect_format(path)[0] == "hf_trainer"
    metrics, _, _ = ingest(store, path, run="hf")
    assert not set(records(metrics)) & {80746, 80747, 80748}


def test_short_counters_the_prefix_stripper_takes_for_ranks(tmp_path, store):
    # `%d: ` at the line start with up to 4 digits looks like an `srun --label` rank prefix
    metrics, _, _ = ingest(store, write(tmp_path, "wg.log", "".join(f"{i}: -4.{i}\n" for i in range(998, 1003))))
    assert records(metrics) == [998, 999, 1000, 1001, 1002]
    assert train(metrics).get_column("rank").null_count() == 5
    metrics, _, _ = ingest(
        store, write(tmp_path, "dn.log", "7: 612.3, 650.1 avg, 0.001 rate, 4.5 seconds, 448 images\n"), run="dn"
    )
    assert records(metrics) == [7] and value(metrics, 7, "loss") == pytest.approx(612.3)


def test_tacotron2_train_and_validation_lines(tmp_path, store):
    text = (
        "Epoch: 0\n"
        "Train loss 1000 0.512345 Grad Norm 0.876543 1.23s/it\n"
        "Validation loss 1000:  0.534567  \n"
        "Saving model and optimizer state at iteration 1000 to outdir/checkpoint_1000\n"
        "Train loss 1001 nan Grad Norm nan 1.20s/it\n"
        "Train loss 1002 0.509876 Grad Norm 0.812345 D Grad Norm 0.100000 1.20s/it\n"
    )
    path = write(tmp_path, "taco.log", text)
    assert detect_format(path)[0] == "step_colon"
    metrics, events, outcome = ingest(store, path)
    assert records(metrics) == [1000, 1001, 1002] and outcome.unparsed == 0
    assert value(metrics, 1000, "grad_norm") == 0.876543 and value(metrics, 1000, "step_time_ms") == pytest.approx(1230)
    assert value(metrics, 1000, "eval_loss", record=False) == 0.534567
    assert math.isnan(value(metrics, 1001, "loss")) and value(metrics, 1002, "d_grad_norm") == 0.1
    assert events.filter(pl.col("kind") == "checkpoint_save").get_column("step").to_list() == [1000]


def test_waveglow_resume_line_is_an_event(tmp_path, store):
    text = "Loaded checkpoint 'checkpoints/waveglow_120000' (iteration 120000)\n" + "".join(
        f"{i}:\t-5.{i}\n" for i in range(120001, 120006)
    )
    metrics, events, _ = ingest(store, write(tmp_path, "wg.log", text))
    resume = events.filter(pl.col("kind") == "resume")
    assert resume.get_column("step").to_list() == [120000]
    assert "checkpoints/waveglow_120000" in resume.item(0, "detail")


def test_keras_without_headers_reads_every_finished_bar(tmp_path, store):
    text = (
        "124/124 [==============================] - 72s 582ms/step - loss: 0.5000 - val_loss: 0.6000\n"
        "124/124 [==============================] - 70s 570ms/step - loss: nan - val_loss: nan\n"
    )
    metrics, _, _ = ingest(store, write(tmp_path, "nohdr.log", text))
    assert records(metrics) == [None, None]
    assert math.isnan(train(metrics).filter((pl.col("record") == 1) & (pl.col("name") == "loss")).item(0, "value"))
