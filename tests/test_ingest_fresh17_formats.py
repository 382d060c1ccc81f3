"""Readers first met in sample_logs/real/fresh17: the 2017 CycleGAN `loss_log.txt` (no `data:` time) and
ComboGAN's per-domain lists, YOLACT's stdout and its `Moving average ignored` warning, a per-batch `loss: x`
log whose epoch line repeats a batch (ColorNet), and a record's counter a few lines above its loss (a
TensorFlow loop's block)."""

from __future__ import annotations

import math

import pytest
from _ingest_helpers import ingest, real_case, series, train_steps, value, write


def real(store, name):
    return real_case(store, "fresh17", name)


def test_cyclegan_2017_lines_without_data_time(store):
    name = "pytorch-cyclegan-2017-homeservergan-ct-mri-loss-log-db-saturation-phase-healthy-200-epochs"
    metrics, _, f, facts = real(store, name)
    assert f.format == "cyclegan" and len(train_steps(metrics)) == facts["step_records"] == 2642
    first = train_steps(metrics)[0]
    assert value(metrics, first, "loss_d_a") == 0.281 and value(metrics, first, "loss_cyc_b") == 2.123


def test_combogan_lists_one_value_per_domain(store):
    metrics, _, f, facts = real(store, "combogan-weather-refuelling-4-domain-loss-log-relaunch-healthy-60-epochs")
    assert f.format == "cyclegan" and len(train_steps(metrics)) == facts["step_records"] == 623
    # `D: 0.111, 0.105, 0.111, 0.130 | G: 0.146, ...`: domain i (from 1) of each loss
    assert [series(metrics, f"loss_d_{i}")[0][1] for i in (1, 2, 3, 4)] == [0.111, 0.105, 0.111, 0.130]
    assert series(metrics, "loss_cyc_4")[0][1] == 0.042 and f.unparsed == 0


def test_yolact_lines_and_the_moving_average_warning(tmp_path, store):
    metrics, _, f, facts = real(
        store, "yolact-56-coco-finetune-bs32-iters-0-60-healthy-inf-warnings-hedged-bad-detection"
    )
    assert f.format == "yolact" and train_steps(metrics) == [0, 10, 20, 30, 40, 50, 60] == list(range(0, 61, 10))
    assert len(train_steps(metrics)) == facts["step_records"]
    assert value(metrics, 10, "loss") == 6.076 and value(metrics, 10, "loss_box") == 1.347
    assert value(metrics, 10, "loss_semantic") == 0.451 and value(metrics, 10, "iter_time_s") == 1.314
    lines = [
        "[  2]   12340 || B: 0.912 | C: 1.104 | M: 1.390 | I: 0.201 | T: 3.607 || ETA: 2 days, 1:02:03 || timer: 0.901",
        "Warning: Moving average ignored a value of inf",
        "[  2]   12350 || B: 0.910 | C: 1.101 | M: 1.388 | I: 0.200 | T: 3.599 || ETA: 2 days, 1:01:53 || timer: 0.899",
    ]
    metrics, events, f = ingest(store, write(tmp_path, "train.out", "\n".join(lines) + "\n"), run="y")
    assert f.format == "yolact" and value(metrics, 12340, "loss_mask_iou") == 0.201
    nan = events.filter(events["kind"] == "nan")
    assert nan.height == 1 and '"skipped": true' in nan.item(0, "detail") and '"value": "inf"' in nan.item(0, "detail")


def test_per_batch_loss_lines_with_an_epoch_line_repeating_a_batch(store):
    metrics, _, f, facts = real(
        store, "custom-colornet-siggraph17-colorization-per-batch-loss-500-epochs-healthy-105500"
    )
    loss = series(metrics, "loss")
    assert len(loss) == facts["step_records"] == 105500 and f.unparsed == 0
    assert loss[0] == (None, pytest.approx(0.283438444)) and loss[1][1] == pytest.approx(0.172508761)


def test_an_epoch_line_with_its_own_value_stays_a_record(tmp_path, store):
    # the counted line does not repeat the batch before it: it is no echo, and the file keeps its counters
    lines = []
    for epoch in range(1, 4):
        lines += [f"loss: {1.0 / epoch + i / 100:.4f}" for i in range(4)]
        lines.append(f"Train Epoch:{epoch}\tPercent:[0/640 (0%)]\tLoss:{9.0 + epoch:.4f}")
    metrics, _, f = ingest(store, write(tmp_path, "loss_log.txt", "\n".join(lines) + "\n"))
    assert 10.0 in [v for _, v in series(metrics, "loss")]


def test_counter_a_few_lines_above_its_loss(store):
    metrics, _, f, facts = real(store, "tensorflow-57893-mirroredstrategy-pcie-acs-nan-from-iter1")
    loss = series(metrics, "averaged_loss")
    assert f.format == "generic_steps" and [s for s, _ in loss] == [0, 1, 2, 3] == list(range(facts["step_records"]))
    assert loss[0][1] == pytest.approx(2.320328712463379) and math.isnan(loss[1][1])


def test_a_loss_line_after_another_loss_line_takes_no_counter_from_above(tmp_path, store):
    # `iteration=N`, a note, `loss = x`: a second loss value in a block is not that iteration's (a loss value
    # closes the block), so it gets no counter from above
    blocks = [f"iteration={i}\n\tnote: ok\n\tloss = {2.0 - i / 10}\n" for i in range(10)]
    blocks[5] += "\tloss = 9.9\n"
    metrics, _, f = ingest(store, write(tmp_path, "out.log", "\n".join(blocks)))
    loss = series(metrics, "loss")
    assert [s for s, _ in loss] == list(range(10)) and 9.9 not in [v for _, v in loss]


def test_headerless_numeric_rows_without_a_counter(store):
    metrics, _, f, facts = real(store, "custom-ddqn-loadbalancer-target-sync-sawtooth-every-50-healthy-8000")
    loss = series(metrics, "loss")
    # `16.84,-210.47`: no header, no counter: step-less records, the first value `loss`, the second `column_2`
    assert f.format == "headerless_table" and len(loss) == facts["step_records"] == 8000
    assert loss[0] == (None, 16.84) and series(metrics, "column_2")[0] == (None, -210.47)


def test_headerless_rows_with_a_rising_integer_counter(store):
    metrics, _, f, facts = real_case(store, "fresh10", "timm-t2t-vit-26-summary-csv-train-loss-nan-epoch209")
    loss = series(metrics, "loss")
    # timm's summary.csv pasted without its header, inside backticks: epoch, train_loss, eval_loss, top1, top5
    assert f.format == "headerless_table" and [s for s, _ in loss] == list(range(200, 214))
    assert len(loss) == facts["step_records"] and loss[0][1] == pytest.approx(4.4025687376658125)
    assert math.isnan(dict(loss)[209]) and series(metrics, "column_5")[0][1] == pytest.approx(24.43999983520508)


@pytest.mark.parametrize(
    "text",
    [
        "".join(f"{i},{i * 0.5}\n" for i in range(3)),  # too few rows
        "".join(f"{i},{i * 0.5}{',1' * (i % 2)}\n" for i in range(8)),  # ragged rows
        "".join(f"{i} apples {i * 0.5}\n" for i in range(8)),  # a word on every row
    ],
)
def test_no_bare_table(tmp_path, store, text):
    from spikeforensics.ingest import IngestError

    with pytest.raises(IngestError):
        ingest(store, write(tmp_path, "rows.txt", text))


def test_an_epoch_header_line_counts_the_loss_lines_under_it(store):
    name = "attention-is-all-you-need-pytorch-5-masked-softmax-minus-inf-loss-nan-from-epoch0"
    metrics, _, f, facts = real(store, name)
    # `[ Epoch 0 ]`, `  - (Training)   loss:      nan, accuracy: 3.7 %`, `  - (Validation) loss: ...`
    assert [s for s, _ in series(metrics, "loss")] == [0, 1, 2, 3, 4]
    assert [s for s, _ in series(metrics, "eval_loss", train=False)] == [0, 1, 2, 3, 4]


# An outside review of the session's readers (each input reproduces a fault it found)


def test_a_per_class_table_inside_a_log_is_no_restarted_run(tmp_path, store):
    lines = [f"step {s} loss {3.0 - s / 1000:.3f}" for s in range(100, 1100, 100)]
    lines += [
        "Per-class AP (class: AP50 AP75):",
        "0: 0.512 0.733",
        "1: 0.420 0.610",
        "2: 0.388 0.590",
        "3: 0.301 0.455",
    ]
    metrics, _, f = ingest(store, write(tmp_path, "train.log", "\n".join(lines) + "\n"))
    assert train_steps(metrics) == list(range(100, 1100, 100)) and "column_2" not in metrics["name"].to_list()


def test_a_count_colon_loop_that_resumes_stays_readable(tmp_path, store):
    rows = [f"{i}: {1.38 - i / 1000:.3f}\t0.690" for i in range(0, 500, 10)]
    rows += [f"{i}: {1.10 - i / 2000:.3f}\t0.690" for i in range(300, 600, 10)]
    metrics, _, f = ingest(store, write(tmp_path, "gan.log", "\n".join(rows) + "\n"))
    assert f.format == "generic_steps" and len(series(metrics, "loss")) == 80


def test_a_headerless_table_keeps_its_rows_when_the_tail_differs(tmp_path, store):
    rows = [f"{i},{2.0 - i / 1000:.4f},{0.5 + i / 10000:.4f}" for i in range(1000)]
    tail = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>', "RuntimeError: boom"]
    metrics, _, f = ingest(store, write(tmp_path, "loss_log.csv", "\n".join(rows + tail) + "\n"))
    assert f.format == "headerless_table" and len(series(metrics, "loss")) == 1000 and f.unparsed == 3


def test_a_headerless_table_is_a_log_only_by_its_name(tmp_path, store):
    from spikeforensics.ingest import IngestError

    iris = "".join(f"{5.1 + i / 10:.1f},{3.5 - i / 20:.2f},1.4,0.2\n" for i in range(8))
    with pytest.raises(IngestError):
        ingest(store, write(tmp_path, "iris.csv", iris))
    metrics, _, f = ingest(store, write(tmp_path, "loss_history.csv", iris), run="h")
    assert f.format == "headerless_table"


def test_another_named_loss_term_is_no_validation(tmp_path, store):
    text = "".join(f"train loss: {2.0 - i / 10}\nkl loss: {0.5 - i / 10}\n" for i in range(3))
    metrics, _, f = ingest(store, write(tmp_path, "out.log", text))
    assert [v for _, v in series(metrics, "kl_loss")] == [0.5, 0.4, 0.3]
    assert series(metrics, "eval_kl_loss", train=False) == []


def test_prose_with_a_train_loss_is_no_log(tmp_path, store):
    from spikeforensics.ingest import IngestError

    text = (
        "The train loss = 0.91 at the start of the run.\nAfter a while the train loss = 0.62 as expected.\n"
        "At the end the train loss = 0.55 was reached.\nThen we measured the loss: 0.5 on held-out data.\n"
    )
    with pytest.raises(IngestError):
        ingest(store, write(tmp_path, "notes.txt", text))


def test_cyclegan_list_of_integers_is_read_once(tmp_path, store):
    lines = ["(epoch: 1, iters: 100, time: 0.746) D: 1, 2 | G: 0, 0.5 |"] * 2
    lines[1] = lines[1].replace("iters: 100", "iters: 200")
    metrics, _, f = ingest(store, write(tmp_path, "loss_log.txt", "\n".join(lines) + "\n"))
    assert sorted(set(metrics["name"].to_list()) - {"epoch"}) == ["loss_d_1", "loss_d_2", "loss_g_1", "loss_g_2"]
