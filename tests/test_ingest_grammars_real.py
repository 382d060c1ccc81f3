"""The record grammars added for real logs (MetricLogger, detectron2, insightface, wav2letter,
mlx-lm, litgpt, tqdm postfixes, custom loops, mmcv iteration runners, fairseq json behind a
prefix) and the event wordings added to text_events, on verbatim excerpts under
tests/data/real (provenance in its README), read back through the store."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from spikeforensics import api
from spikeforensics.ingest import detect_format, ingest_paths, parse_file
from spikeforensics.store import Store

REAL = Path(__file__).parent / "data" / "real"


def exported(tmp_path, rel, table):
    store = Store(tmp_path / "store")
    report = ingest_paths([REAL / rel], "r", store)
    assert report.ok, report.as_dict()
    return api.export("r", table, store=store)


def series(metrics, name):
    rows = metrics.filter((pl.col("name") == name) & pl.col("record").is_not_null()).sort("line")
    return list(zip(rows.get_column("step").to_list(), rows.get_column("value").to_list()))


def events(rel, fmt=None):
    path = REAL / rel
    fmt = fmt or detect_format(path)[0]
    ev = parse_file(path, fmt).tables.get("events")
    assert ev is not None, rel
    return [(r["line"], r["step"], r["kind"], json.loads(r["detail"])) for r in ev.sort("line").iter_rows(named=True)]


@pytest.mark.parametrize(
    "rel, fmt",
    [
        ("metriclogger/deit_76_mpi_prefixed_epoch2.log", "metriclogger"),
        ("metriclogger/dino_69_epoch_of_total.log", "metriclogger"),
        ("metriclogger/llama2_accessory_48_closs_epoch_boundary.log", "metriclogger"),
        ("detectron2/d2go_524_iter19_99.log", "detectron2"),
        ("insightface/insightface_1996_fp16_grad_scale.log", "insightface"),
        ("insightface/insightface_1430_no_learning_rate.log", "insightface"),
        ("wav2letter/wav2letter_728_epoch_summaries.log", "wav2letter"),
        ("mlx_lm/mlx_examples_557_lora_with_saves.log", "mlx_lm"),
        ("mlx_lm/mlx_lm_pr330_peak_mem.log", "mlx_lm"),
        ("litgpt/litgpt_689_iter_step_flat_loss.log", "litgpt"),
        ("litgpt/litgpt_1224_epoch_iter_step.log", "litgpt"),
        ("colossalai/colossalai_1400_epoch_tqdm_and_summary.log", "tqdm_postfix"),
        ("fairseq/metaseq_507_json_slurm_prefix.log", "fairseq"),
    ],
)
def test_format_detected(rel, fmt):
    assert detect_format(REAL / rel)[0] == fmt


def test_metriclogger_current_value_and_global_step(tmp_path):
    m = exported(tmp_path, "metriclogger/deit_76_mpi_prefixed_epoch2.log", "metrics")
    # Epoch: [2] [ 150/1251] -> 2 * 1251 + 150; the current value, not the (running average)
    assert series(m, "loss")[:2] == [(2652, 6.8610), (2662, 6.8604)]
    assert series(m, "step_time_ms")[0] == (2652, pytest.approx(1055.2))
    assert series(m, "max_mem_mb")[0] == (2652, 8249.0)
    d = exported(tmp_path / "d", "metriclogger/dino_69_epoch_of_total.log", "metrics")
    assert series(d, "lr")[0] == (2240, 0.000089)  # not the (0.000045) average


def test_metriclogger_closs_and_epoch_boundary(tmp_path):
    m = exported(tmp_path, "metriclogger/llama2_accessory_48_closs_epoch_boundary.log", "metrics")
    loss = series(m, "loss")
    # `Averaged stats:` / `Total time:` are not records; epoch 1 continues the counter
    assert [s for s, _ in loss] == [1480, 1490, 1500, 1504, 1514, 1524, 1534]
    assert loss[0][1] == 1.08 and loss[3][1] == 1.0072
    assert series(m, "grad_norm") == [(1480, 0.4995), (1490, 0.4995), (1500, 0.4995)]


def test_detectron2_total_loss(tmp_path):
    m = exported(tmp_path, "detectron2/d2go_524_iter19_99.log", "metrics")
    assert series(m, "loss") == [(19, 1.36), (39, 1.353), (59, 1.329), (79, 1.295), (99, 1.301)]
    assert series(m, "lr")[0] == (19, 3.8077e-06)
    assert series(m, "max_mem_mb")[0] == (19, 433.0)
    assert series(m, "loss_cls")[0] == (19, 0.6522)


def test_insightface_global_step_and_grad_scale(tmp_path):
    m = exported(tmp_path, "insightface/insightface_1996_fp16_grad_scale.log", "metrics")
    assert series(m, "loss")[:2] == [(320, 43.9404), (330, 43.9225)]
    assert series(m, "loss_scale")[0] == (320, 131072.0)
    assert series(m, "lr")[0] == (320, 0.1)
    old = exported(tmp_path / "o", "insightface/insightface_1430_no_learning_rate.log", "metrics")
    assert [s for s, _ in series(old, "loss")] == list(range(1250, 1601, 50))
    assert series(old, "lr") == []


def test_wav2letter_nupdates(tmp_path):
    m = exported(tmp_path, "wav2letter/wav2letter_728_epoch_summaries.log", "metrics")
    assert series(m, "loss") == [(6960891, 256.12402), (6996047, 256.17794)]
    assert series(m, "lr")[0] == (6960891, 0.000015)
    assert series(m, "train_wer")[0] == (6960891, 175.16)
    assert series(m, "runtime") == []


def test_mlx_lm_train_val_and_save(tmp_path):
    m = exported(tmp_path, "mlx_lm/mlx_examples_557_lora_with_saves.log", "metrics")
    assert series(m, "loss")[:2] == [(10, 2.363), (20, 1.508)]
    assert series(m, "consumed_tokens")[0] == (10, 862.0)
    ev = m.filter(pl.col("name") == "eval_loss")
    assert ev.height == 1 and ev.item(0, "record") is None and ev.item(0, "value") == 2.48
    e = exported(tmp_path, "mlx_lm/mlx_examples_557_lora_with_saves.log", "events")
    assert e.filter(pl.col("kind") == "checkpoint_save").get_column("step").to_list() == [100]
    mem = exported(tmp_path / "p", "mlx_lm/mlx_lm_pr330_peak_mem.log", "metrics")
    assert series(mem, "peak_mem_gb")[-1] == (50, 10.588)


def test_litgpt_iter_is_the_step(tmp_path):
    m = exported(tmp_path, "litgpt/litgpt_689_iter_step_flat_loss.log", "metrics")
    assert [s for s, _ in series(m, "loss")] == list(range(76, 86))
    assert series(m, "optimizer_step")[:3] == [(76, 38.0), (77, 39.0), (78, 39.0)]
    n = exported(tmp_path / "n", "litgpt/litgpt_1224_epoch_iter_step.log", "metrics")
    assert series(n, "loss")[0] == (46, 3.724) and series(n, "step_time_ms")[0] == (46, 45.73)
    assert series(n, "eval_loss") == []  # `val: n/a`


def test_tqdm_postfix_colossalai(tmp_path):
    m = exported(tmp_path, "colossalai/colossalai_1400_epoch_tqdm_and_summary.log", "metrics")
    assert series(m, "loss") == [(6, 107.0)]  # [Epoch 5 / Train] 1/1 -> 5 * 1 + 1
    assert series(m, "lr") == [(6, 0.00015)]


def test_fairseq_json_behind_a_prefix(tmp_path):
    m = exported(tmp_path, "fairseq/metaseq_507_json_slurm_prefix.log", "metrics")
    assert series(m, "loss") == [(1, 15.878), (2, 15.864)]
    assert series(m, "grad_norm") == [(1, 16.981), (2, 16.783)]


def test_custom_loop_wordings(tmp_path):
    path = tmp_path / "custom.log"
    # the wordings of issue 11 (hand-written: no public paste of this exact print was found)
    path.write_text(
        "Step 12 | Loss: 2.31 | LR: 3e-4 | GradNorm: 0.64\n"
        "Step 13 | Loss: 2.30 | LR: 3e-4 | GradNorm: 0.61\n"
        "[step 120] loss=2.3 grad_norm=1.5\n"
    )
    assert detect_format(path)[0] == "generic_steps"
    m = parse_file(path, "generic_steps").tables["metrics"]
    assert series(m, "grad_norm") == [(12, 0.64), (13, 0.61), (120, 1.5)]
    assert series(m, "lr") == [(12, 0.0003), (13, 0.0003)]


def test_fastprogress_bar_comment_is_the_loss(tmp_path):
    # fastprogress prints `{pct}% [{n}/{total} {elapsed}<{remaining} {comment}]`; fastai's fit puts
    # the smoothed training loss in the comment (console: after the bar's blocks, redrawn with CR)
    path = tmp_path / "fit.log"
    path.write_text(
        "epoch     train_loss  valid_loss  accuracy  time\n"
        "0         2.331       2.125       0.312     00:10\n"
        " |████------| 40.00% [40/100 00:04<00:06 2.1034]\r |██████----| 60.00% [60/100 00:06<00:04 2.0519]\n"
        "71.39% [6930/9707 3:56:27<1:34:45 nan]\n"
        "45.00% [45/100 00:12<00:15]\n"  # no comment: a bar, not a record
        " 45%|####5     | 45/100 [00:12<00:15,  3.61it/s]\n"  # tqdm without a loss: not claimed
    )
    store = Store(tmp_path / "store")
    report = ingest_paths([path], "r", store)
    assert report.ok and report.files[0].format == "column_table+tqdm_postfix"
    m = api.export("r", "metrics", store=store)
    loss = series(m, "loss")
    assert loss[:2] == [(0, 2.331), (60, 2.0519)]  # the line's last redraw
    assert loss[2][0] == 6930 and loss[2][1] != loss[2][1] and len(loss) == 3  # nan


def test_fairseq_older_overflow_wordings():
    ev = events("fairseq/fairseq_515_warning_overflow_2019.log")
    ovf = [(line, d["new_scale"]) for line, _, kind, d in ev if kind == "overflow"]
    assert ovf == [(1, 0.0625), (4, 0.03125), (6, 0.015625), (7, 0.0078125), (8, 0.00390625)]
    # num_updates 290 printed before line 4: that overflow skipped update 291
    assert [s for _, s, k, _ in ev if k == "overflow"][1] == 291
    ev = events("fairseq/neuralspeech_45_note_overflow_between_inner.log")
    assert [(line, step, kind, d["new_scale"]) for line, step, kind, d in ev] == [(3, 1901, "overflow", 32.0)]
    ev = events("fairseq/fairseq_2404_note_overflow_train_inner.log")
    assert ev[0][2] == "overflow" and ev[0][3]["new_scale"] == 1024.0


def test_apex_min_scale_ecc_nan_stop(tmp_path):
    apex = events("events/apex_318_gradient_overflow_skipping_step.log", "stdout_events")
    assert [k for _, _, k, _ in apex] == ["overflow"] * 4
    assert apex[0][3]["new_scale"] == 8.165126103939127e-202
    floor = events("events/firefly_68_min_loss_scale.log", "stdout_events")
    assert floor[0][2] == "overflow" and floor[0][3]["at_floor"] is True and floor[0][3]["fatal"] is True
    ecc = events("events/kohya_1434_ecc_nccl_watchdog.log")
    assert [(line, k, d["uncorrectable"]) for line, _, k, d in ecc if k == "ecc"] == [
        (3, "ecc", True),
        (8, "ecc", True),
    ]
    d2 = events("detectron2/detectron2_838_floating_point_error.log")
    nan = [(s, d) for _, s, k, d in d2 if k == "nan"]
    assert nan[0][0] == 2137 and nan[0][1]["stopped"] is True
    assert any(k == "error" and d["exception"] == "FloatingPointError" for _, _, k, d in d2)  # the traceback


def test_mae_loss_is_nan_and_user_skip():
    from spikeforensics.ingest.base import lines_from_bytes, split_segments, strip_prefixes
    from spikeforensics.ingest.text_events import extract_events

    # MAE engine_pretrain.py / DeiT engine.py print `Loss is {}, stopping training`
    text = (
        "Loss is nan, stopping training\n"
        "skipping step due to inf/nan\n"
        "UserWarning: Detected call of `lr_scheduler.step()` before `optimizer.step()`.\n"
    )
    ev = extract_events(strip_prefixes(split_segments(lines_from_bytes(text.encode()))))
    kinds = ev.get_column("kind").to_list()
    assert kinds == ["nan", "skipped_step"]
    assert json.loads(ev.item(0, "detail"))["stopped"] is True


def test_dev_ecc_crash_log_has_uncorrectable_ecc(tmp_path):
    dev = (
        Path(__file__).parent.parent
        / "sample_logs"
        / "real"
        / "dev"
        / "megatron-deepspeed-tr1-13b-ecc-uncorrectable-crash"
    )
    ev = parse_file(dev / "chronicles_excerpt.log", "megatron").tables["events"]
    ecc = ev.filter(pl.col("kind") == "ecc")
    assert ecc.height >= 1 and json.loads(ecc.item(0, "detail"))["uncorrectable"] is True
    assert ecc.item(0, "step") == 43680  # after the last iteration line


def test_run_facts_precision_and_device():
    pose = events("events/pose_16_deepspeed_fp16_true_cmdline.log", "stdout_events")
    assert [(k, d["mode"]) for _, _, k, d in pose] == [("precision", "fp16")]
    smi = events("events/mxnet_15738_nvidia_smi_q_v100.log", "stdout_events")
    assert [(k, d["name"], d["bf16_supported"]) for _, _, k, d in smi] == [("device", "Tesla V100-SXM2-16GB", False)]
    pl16 = events("events/lightning_1844_using_16bit.log", "stdout_events")
    assert [d["mode"] for _, _, k, d in pl16 if k == "precision"] == ["amp-fp16"]
    apex = events("events/dle_543_apex_o2_cast_float16.log", "stdout_events")
    assert [d["mode"] for _, _, k, d in apex] == ["fp16"]


def test_run_facts_once_per_file_and_wordings():
    from spikeforensics.ingest.base import lines_from_bytes, split_segments, strip_prefixes
    from spikeforensics.ingest.text_events import extract_events

    text = "\n".join(
        [
            "Namespace(fp16=True, fp16_init_scale=128, lr=[0.0005])",  # fairseq args
            "fp16=True",  # the same fact again: no second event
            "TrainingArguments(bf16=False, fp16=False, output_dir='out')",  # nothing enabled
            "Using bfloat16 Automatic Mixed Precision (AMP)",
            "  params_dtype .................................... torch.float16",
            '  "bf16": {"enabled": true},',
            "|   0  Tesla T4            Off  | 00000000:00:04.0 Off |                    0 |",
            "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1234)",
            "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-5678)",
        ]
    )
    ev = extract_events(strip_prefixes(split_segments(lines_from_bytes(text.encode()))))
    got = [(r["kind"], json.loads(r["detail"])) for r in ev.iter_rows(named=True)]
    assert [d["mode"] for k, d in got if k == "precision"] == ["fp16", "amp-bf16", "bf16"]
    assert [(d["name"], d.get("bf16_supported")) for k, d in got if k == "device"] == [
        ("Tesla T4", False),
        ("NVIDIA A100-SXM4-80GB", True),
    ]
