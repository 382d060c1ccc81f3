"""Readers first met in sample_logs/real/fresh6: CatBoost's verbose lines (catboost), YOLOv5/YOLOv7's
bare-named loss table (column_table), a loop that logs once per epoch (generic_steps `Epoch N/M`) and
nested JSON metrics, StyleGAN's {num, mean, std} summaries (jsonl_metrics). Each: the real case as the
driver ingests it (records and steps as its FACTS.toml counts them), the format's other shapes, and
what the reader must not take."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest
from _ingest_helpers import ingest, real_case, train_steps, value, write

from spikeforensics.ingest import _tables as T

real = real_case  # (store, split, name) -> metrics, events, file outcome, facts


def test_catboost_paste_without_tabs_takes_its_iteration_back_from_the_rank_prefix(store):
    metrics, _, f, facts = real(store, "fresh6", "catboost-274-classifier-learn-nan-from-iter65-l2-reg-too-small")
    steps = train_steps(metrics)
    assert f.format == "catboost" and len(steps) == facts["step_records"] == 8
    assert (steps[0], steps[-1]) == (facts["first_step"], facts["last_step"]) == (61, 68)
    assert metrics.get_column("rank").null_count() == metrics.height  # `61: ` is the iteration, not srun's rank
    assert value(metrics, 64, "loss") == pytest.approx(0.1191390175) and math.isnan(value(metrics, 65, "loss"))


def test_catboost_current_and_old_lines_with_a_test_set(tmp_path, store):
    path = write(
        tmp_path,
        "catboost.log",
        "Learning rate set to 0.03\n"
        "0:\tlearn: 0.6851236\ttest: 0.6849507\tbest: 0.6849507 (0)\ttotal: 58.5ms\tremaining: 58.4s\n"
        "1:\tlearn: 0.6773481\ttest: 0.6772000\tbest: 0.6772000 (1)\ttotal: 110ms\tremaining: 54.7s\n"
        "12000:\tlearn: 0.1012\ttest: 0.1301\tbest: 0.1290 (11800)\ttotal: 2h\tremaining: 1m\n"
        "bestTest = 0.1290\n",
    )
    metrics, _, f = ingest(store, path)
    assert f.format == "catboost" and train_steps(metrics) == [0, 1, 12000]
    assert value(metrics, 1, "loss") == pytest.approx(0.6773481)
    assert value(metrics, 12000, "eval_loss") == pytest.approx(0.1301)


def test_yolov7_table_rows_are_batches_of_the_epoch_with_bare_loss_names(store):
    metrics, events, f, facts = real(store, "fresh6", "yolov7-251-e6e-box-cls-total-nan-batch15-ciou-bug")
    assert f.format == "column_table" and train_steps(metrics) == [1, 15] and facts["step_records"] == 2
    assert value(metrics, 1, "loss") == pytest.approx(3.139) and value(metrics, 1, "box_loss") == pytest.approx(0.1126)
    assert math.isnan(value(metrics, 15, "loss")) and value(metrics, 15, "obj_loss") == pytest.approx(2.028)


def test_ultralytics_rows_keep_their_epoch_step(store):
    # YOLOv8 `1/100 ... 100%|###| 1/1`: epoch 1 of a 1-batch epoch is step 1, as before
    metrics, _, f, facts = real(store, "dev", "ultralytics-1149-yolov8seg-gtx1660ti-nan-epoch1")
    assert f.format == "column_table" and train_steps(metrics) == [facts["first_step"]] == [1]


def test_a_loop_that_logs_once_per_epoch_takes_the_epoch_as_its_step(store):
    metrics, _, f, facts = real(store, "fresh6", "qlearning4k-13-keras-dqn-epoch-loss-spike-6e21-epoch144-recovers")
    assert f.format == "generic_steps" and train_steps(metrics) == list(range(143, 149))
    assert len(train_steps(metrics)) == facts["step_records"]
    assert value(metrics, 144, "loss") == pytest.approx(6.051275231349243e21)


def test_an_epoch_summary_beside_iteration_lines_is_no_record(tmp_path, store):
    # PaddleClas: `[Train][Epoch 1/400][Iter: 0/25]...` are the records; `[Epoch 1/400][Avg]` sums an epoch up
    lines = [f"[Train][Epoch 1/400][Iter: {i}/25]lr: 0.001, CELoss: 6.9, loss: 6.9{i}" for i in range(0, 25, 10)]
    lines.append("[Train][Epoch 1/400][Avg]CELoss: 6.92425, loss: 6.92425")
    metrics, _, f = ingest(store, write(tmp_path, "train.log", "\n".join(lines) + "\n"))
    assert train_steps(metrics) == [0, 10, 20]


def test_stylegan_stats_summaries_read_as_their_means(store):
    metrics, _, f, facts = real(store, "fresh6", "stylegan3-phytoplankton-stats-jsonl-healthy-751-ticks-3000kimg")
    steps = train_steps(metrics)
    assert f.format == "jsonl_metrics" and len(steps) == facts["step_records"] == 751 and steps[-1] == 750
    assert value(metrics, 0, "loss_g_loss") == pytest.approx(6.573058605194092)


def test_nested_objects_flatten_to_key_paths_and_summaries_to_their_mean():
    rows = [
        {"step": 1, "train": {"loss": 2.5, "acc": {"top1": 0.1}}, "Loss/D": {"num": 8, "mean": 1.1, "std": 0.07}},
        {"step": 2, "train": {"loss": 2.4, "acc": {"top1": 0.2}}, "Loss/D": {"num": 8, "mean": 1.0, "std": 0.05}},
    ]
    lines = pl.DataFrame({"line": [1, 2], "text": [json.dumps(r) for r in rows]})
    objects, bad = T.json_objects(lines)
    flat = T.flatten_structs(objects)
    assert bad.height == 0
    assert set(flat.columns) == {"line", "step", "train/loss", "train/acc/top1", "Loss/D"}
    assert flat.get_column("train/loss").to_list() == [2.5, 2.4] and flat.get_column("Loss/D").to_list() == [1.1, 1.0]


def test_llamafactory_writer_lagging_three_intervals_is_not_a_resume(store):
    # fresh5: two writers append to trainer_log.jsonl; from line 203 the second lags 1-3 logging intervals
    # (3810, 3820, 3800, 3810, 3830); the one real resume is at line 1047 (5240 -> 5010)
    metrics, _, f, facts = real(store, "fresh5", "llamafactory-qwen25-3b-sft-acereason-trainer-log-healthy-6566-steps")
    loss = metrics.filter((pl.col("name") == "loss") & pl.col("record").is_not_null())
    per = loss.group_by("attempt").agg(pl.len(), pl.col("step").min().alias("lo"), pl.col("line").min().alias("l0"))
    assert per.sort("attempt").rows() == [(0, 524, 10, 1), (1, 156, 5010, 1047)]
    # every step once per attempt, the first writer's value
    assert loss.filter(pl.col("attempt") == 0).get_column("step").is_unique().all()


def test_step_less_loss_lines_beside_deepspeed_progress_lines_are_records(store):
    # fresh4 RWKV-7 reward model: the script's `Epoch 0, Loss: 1.01, Positive Score: ...` has no counter and
    # stands beside DeepSpeed's `step=10, skipped=0, lr=[...]` and `global_step=10` timer lines; a traceback
    # quoting `loss.backward()` ends the file
    metrics, _, f, facts = real(store, "fresh4", "rwkv7-reward-model-deepspeed-wandb-output-healthy-11380-steps")
    loss = metrics.filter((pl.col("name") == "loss") & pl.col("record").is_not_null())
    assert loss.height == 11381 and loss.get_column("step").null_count() == loss.height
    records = metrics.filter(pl.col("record").is_not_null()).select("source", "record").unique().height
    assert records == facts["step_records"] == 12519  # 11,381 script lines + 1,138 DeepSpeed lines


def test_a_few_loss_prints_among_counted_loss_lines_are_not_step_less_records(tmp_path, store):
    # a file whose loss lines have a counter: a stray `loss: 0.5` print without one is no record
    lines = [f"step {i} | loss: {2.0 - i / 100:.3f}" for i in range(1, 30)] + ["final loss: 0.5"] * 3
    metrics, _, f = ingest(store, write(tmp_path, "train.log", "\n".join(lines) + "\n"))
    assert train_steps(metrics) == list(range(1, 30))
