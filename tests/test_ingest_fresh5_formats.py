"""Readers first met in sample_logs/real/fresh5: the YOLOv2 region-loss print (region_loss), PySlowFast
`json_stats` (json_stats), Coqui's trainer blocks (coqui_trainer), ESPnet2 reports (espnet2), RSL-RL
iteration blocks (rsl_rl) and PaddleDetection's quoted numbers (generic_steps). Each: the real case as
the driver ingests it (records and steps as its FACTS.toml counts them), and what the reader must not
take."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import polars as pl
import pytest
from _ingest_helpers import ingest, real_case, train_steps, value, write

from spikeforensics.ingest import IngestError, ingest_paths

FRESH5 = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "fresh5"


def train(metrics):
    return metrics.filter(pl.col("record").is_not_null())


def real(store, name):
    return real_case(store, "fresh5", name)


def test_region_loss_prints_take_the_images_seen_counter_not_a_rank(store):
    metrics, _, f, facts = real(store, "pytorch-yolo2-87-voc-xy-loss-1692-wh-nan-lr-too-high")
    steps = train_steps(metrics)
    assert f.format == "region_loss" and len(steps) == facts["step_records"] == 4
    assert (steps[0], steps[-1]) == (facts["first_step"], facts["last_step"]) == (9856, 9904)
    assert metrics.get_column("rank").null_count() == metrics.height  # `9856: ` is the counter, not srun's rank
    assert value(metrics, 9856, "loss_x") == pytest.approx(1692.913574) and math.isnan(value(metrics, 9856, "loss"))
    assert value(metrics, 9856, "ngt") == 39 and value(metrics, 9856, "proposals") == 0


def test_json_stats_lines_after_config_dumps_of_many_launches(store):
    # 13 launches append to one stdout.log: the first 6,600 lines are config dumps and aborted starts
    metrics, _, f, facts = real(store, "pyslowfast-edowhite-meccano-stdout-healthy-6320-iters")
    steps = train_steps(metrics)
    assert f.format == "json_stats" and len(steps) == facts["step_records"] == 631
    assert max(steps) == facts["last_step"] == 6314  # epoch 20/20, iter 310/316: 19 * 316 + 310
    first = metrics.filter((pl.col("record") == 0) & (pl.col("name") == "grad_norm"))
    assert first.item(0, "step") == 10 and first.item(0, "value") == pytest.approx(6.47215)
    assert train(metrics).get_column("attempt").n_unique() == 2  # launch 12 (epoch 1/2) and launch 13 (1/20)
    evals = metrics.filter(pl.col("record").is_null() & pl.col("name").str.starts_with("eval_"))
    assert evals.height > 0  # val_epoch lines


def test_coqui_trainer_blocks_are_one_record_each_with_their_fields(store):
    metrics, _, f, facts = real(store, "coqui-tts-vits-finetune-trainer-log-healthy-6125-steps")
    steps = train_steps(metrics)
    assert f.format == "coqui_trainer" and len(steps) == facts["step_records"] == 246
    assert (steps[0], steps[-1]) == (facts["first_step"], facts["last_step"])
    assert value(metrics, 1000025, "loss_disc") == pytest.approx(3.01874)  # the value, not the (average)
    names = set(metrics.get_column("name").unique().to_list())
    assert {"loss_0", "loss_1", "grad_norm_0", "loss_scale"} <= names and "amp_scaler" not in names


def test_espnet2_reports_and_intervals_without_an_optimizer_step(store):
    metrics, events, f, facts = real(
        store, "espnet2-3104-librispeech-transformer-lm-amp-grad-nan-steps-skipped-lr-frozen"
    )
    assert f.format == "espnet2" and train_steps(metrics) == list(range(1020, 7141, 1020))
    assert value(metrics, 1020, "lr") == pytest.approx(5.13e-05)
    skipped = events.filter(pl.col("kind") == "skipped_step").get_column("step").to_list()
    assert skipped == [6120, 7140]  # optim_step_time=nan: no update ran in those intervals


def test_espnet2_skipped_updates_to_the_end_are_no_progress(tmp_path):
    from spikeforensics import api

    folder = FRESH5 / "espnet2-3104-librispeech-transformer-lm-amp-grad-nan-steps-skipped-lr-frozen"
    facts = tomllib.loads((folder / "FACTS.toml").read_text())
    api.ingest([folder / facts["files"][0]], run_id="r", store=tmp_path)
    d = api.diagnose(api.load_run("r", tmp_path))
    [inc] = [i for i in d["incidents"] if i["severity"] != "info"]
    assert inc["kind"] == "no_progress" and (inc["step_start"], inc["step_end"]) == (6120, 7140)
    assert inc["root_cause"] == facts["stated_label"] == "fp16_overflow"


def test_rsl_rl_iteration_blocks(store):
    metrics, _, f, facts = real(store, "rsl-rl-isaaclab-1999-go2-rough-ppo-value-loss-inf-iter8391-no-action-clip")
    assert f.format == "rsl_rl" and train_steps(metrics) == [facts["first_step"]] == [8391]
    assert math.isinf(value(metrics, 8391, "value_function_loss")) and value(metrics, 8391, "surrogate_loss") == 0.0
    assert "computation" not in {n.lower() for n in metrics.get_column("name").to_list()}  # prose, not a metric


def test_paddledetection_numbers_printed_as_strings(store):
    metrics, _, f, facts = real(store, "paddledetection-5337-ssdlite-mobilenet-loss-nan-iter20-batch4-lr")
    assert train_steps(metrics) == [0, 20, 40, 60] and len(train_steps(metrics)) == facts["step_records"]
    assert value(metrics, 0, "loss") == pytest.approx(24.061707) and math.isnan(value(metrics, 20, "loss"))


def test_readers_do_not_take_look_alikes(store, tmp_path):
    # a `name: value` block without a `Learning iteration` header, a `nGT` word in prose
    text = "Value function loss: 0.3\nSurrogate loss: 0.1\nwe count nGT boxes per image\n"
    with pytest.raises(IngestError, match="not a recognised training log"):
        ingest_paths([write(tmp_path, "x.log", text)], "r", store)


def test_paddle_overflow_lines_and_a_scale_below_one_convict_the_run(store, tmp_path):
    # PaddleNLP: `optimizer not run, scale_before: 0.25, scale_after: 0.125` before each of the 2 records; a
    # scale of 0.0625 has halved ~19 times from Paddle's 32768: every step overflowed, not a calibration
    metrics, events, _, facts = real(
        store, "paddlenlp-7537-llama2-lora-v100-every-step-overflow-loss-scale-0p0625-step19"
    )
    ovf = events.filter(pl.col("kind") == "overflow")
    assert ovf.height == 2 and '"new_scale": 0.0625' in ovf.get_column("detail").to_list()[-1]
    from spikeforensics import api

    folder = FRESH5 / "paddlenlp-7537-llama2-lora-v100-every-step-overflow-loss-scale-0p0625-step19"
    api.ingest([folder / facts["files"][0]], run_id="r", store=tmp_path)
    d = api.diagnose(api.load_run("r", tmp_path))
    assert d["verdict"]["status"] == "unstable" and d["incidents"][0]["kind"] == "loss_scale_collapse"


def test_mmengine_scalars_json_validation_rows_are_not_training_records(store):
    # `{"accuracy/top1": 43.1, "data_time": 0.09, "time": 0.12, "step": 1}` between the train rows (its `step`
    # the epoch): a quality metric without a loss, LR or grad norm, in a file whose train rows have them
    metrics, _, f, facts = real(store, "mmpretrain-openmmlab-camp-resnet50-fruit30-scalars-json-healthy-59-epochs")
    steps = train_steps(metrics)
    assert f.format == "jsonl_metrics" and len(steps) == facts["step_records"] == 59
    assert steps == sorted(steps) and train(metrics).get_column("attempt").unique().to_list() == [0]
    evals = metrics.filter(pl.col("record").is_null() & pl.col("name").str.contains("accuracy"))
    assert evals.height == 59


def test_train_dev_epoch_summaries_of_funcwj_trainers(store, tmp_path):
    # uPIT (sample_logs/real/fresh4): the one epoch summary, NaN for train and dev
    folder = FRESH5.parent / "fresh4" / "upit-5-epoch1-train-dev-loss-nan-disturb-std-default"
    facts = tomllib.loads((folder / "FACTS.toml").read_text())
    metrics, _, f = ingest(store, folder / facts["files"][0])
    assert f.format == "train_dev_epochs" and train_steps(metrics) == [2500]
    assert len(train_steps(metrics)) == facts["step_records"] and math.isnan(value(metrics, 2500, "loss"))
    # conv-tasnet's newer wording, with the LR and negative SI-SNR losses
    text = "".join(
        f"2019-10-10 10:0{e}:00 [trainer.py:300 - INFO ] Loss(time/N, lr={1e-3:.3e}) - Epoch {e:2d}: "
        f"train = {-10 - e:.4f}({10.5:.2f}m/2500) | dev = {-11 - e:.4f}({1.2:.2f}m/625)\n"
        for e in (1, 2, 3)
    )
    metrics, _, f = ingest(store, write(tmp_path, "train.log", text), run="c")
    assert train_steps(metrics) == [2500, 5000, 7500] and value(metrics, 5000, "loss") == -12.0
    assert value(metrics, 5000, "eval_loss") == -13.0 and value(metrics, 5000, "lr") == pytest.approx(1e-3)
