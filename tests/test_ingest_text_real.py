"""Every real text-log excerpt of the Megatron, DeepSpeed, llm.c, torchtitan, fairseq,
OLMo, mmengine, nanotron, nanoGPT families (tests/data/real = shared/formats/real)
ingests with the values its README lists, read back through the store."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest

from spikeforensics.ingest import detect_format, ingest_paths


def ingest(store, path, run="r"):
    report = ingest_paths([path], run, store)
    assert report.ok, report.as_dict()
    return store.table(run, "metrics"), store.table(run, "events"), report.files[0]


def value(metrics, step, name, record=True):
    rows = metrics.filter((pl.col("step") == step) & (pl.col("name") == name))
    rows = rows.filter(pl.col("record").is_not_null() if record else pl.col("record").is_null())
    assert rows.height == 1, (step, name, rows)
    return rows.item(0, "value")


def steps(metrics, name):
    return metrics.filter(pl.col("name") == name).sort("line").get_column("step").to_list()


@pytest.mark.parametrize(
    "rel, fmt",
    [
        ("megatron/bigscience_tr8_104b_exp1_glitch_with_validation.log", "megatron"),
        ("megatron/bigscience_tr8_104b_exp2_glitch.log", "megatron"),
        ("megatron/bigscience_tr8b_104b_wrapped_and_elided.log", "megatron"),
        ("megatron/bigscience_tr8b_104b_optimizer_reset_samples_tflops.log", "megatron"),
        ("megatron/epfllm_megatron_llm_33_nan_onset.log", "megatron"),
        ("nanotron/nanotron_pr23_iteration_lines.log", "megatron"),
        ("deepspeed/deepspeed_931_hysteresis_epoch_start.log", "deepspeed"),
        ("deepspeed/deepspeed_1825_step_skipped_lines_ipython_noise.log", "deepspeed"),
        ("llmc/llmc_main_log_steps0_260_with_val_eval.log", "llmc"),
        ("llmc/llmc_main_log_norm_spike_s8650_8800.log", "llmc"),
        ("torchtitan/torchtitan_pr1287_gc_profiler_interleaved.log", "torchtitan"),
        ("fairseq/fairseq_514_epoch_summaries.log", "fairseq"),
        ("fairseq/fairseq_301_legacy_2018_running_avg.log", "fairseq"),
        ("olmo/olmo_692_multiline_loss_collapse.log", "olmo"),
        ("mmengine/xtuner_187_gradnorm_nan.log", "mmengine"),
        ("nanogpt/nanogpt_215_fp16_nan_after_checkpoint_md_quoted.log", "nanogpt"),
        ("nanogpt/nanogpt_110_early_format_no_mfu.log", "nanogpt"),
        ("hardware/llamafactory_6269_nccl_watchdog_reduce_scatter.log", "stdout_events"),
    ],
)
def test_sniffed_as_its_own_format(real, rel, fmt):
    assert detect_format(real / rel)[0] == fmt


def test_bigscience_exp1_spike_and_validation(real, store):
    m, ev, out = ingest(store, real / "megatron/bigscience_tr8_104b_exp1_glitch_with_validation.log")
    assert steps(m, "loss") == [7000, 7010, 7220]
    assert value(m, 7010, "loss") == pytest.approx(11.42026)
    assert value(m, 7010, "grad_norm") == pytest.approx(219645.978)
    assert value(m, 7000, "grad_norm") == pytest.approx(98258.265)
    assert value(m, 7000, "loss_scale") == 2048.0
    assert value(m, 7010, "consumed_samples") == 261872
    assert value(m, 7010, "step_time_ms") == pytest.approx(19904.0)
    assert value(m, 7000, "lr") == pytest.approx(6e-5)
    assert value(m, 7000, "skipped_iters") == 0 and value(m, 7000, "nan_iters") == 0
    assert value(m, 7000, "num_zeros") == 0
    # validation block: an eval record (record null), not a train loss
    assert value(m, 7000, "eval_loss", record=False) == pytest.approx(7.1742)
    assert m.filter(pl.col("name") == "eval_loss").get_column("record").null_count() == 1
    assert m.filter(pl.col("record").is_not_null()).get_column("record").unique().sort().to_list() == [0, 1, 2]
    assert m.get_column("rank").null_count() == m.height
    assert out.unparsed == 0


def test_bigscience_exp2_glitch(real, store):
    m, _, _ = ingest(store, real / "megatron/bigscience_tr8_104b_exp2_glitch.log")
    assert steps(m, "loss") == [6900, 6910, 6920, 6930, 6940]
    assert value(m, 6900, "loss") == pytest.approx(6.365808)
    assert value(m, 6940, "loss") == pytest.approx(10.23865)
    assert value(m, 6930, "grad_norm") == pytest.approx(283384.130)
    assert value(m, 6940, "grad_norm") == pytest.approx(42359.376)


def test_bigscience_wrapped_line_is_joined(real, store):
    m, ev, out = ingest(store, real / "megatron/bigscience_tr8b_104b_wrapped_and_elided.log")
    assert steps(m, "loss") == [13251, 14000]
    # the fields cut by the terminal wrap are read back whole
    assert value(m, 13251, "lr") == pytest.approx(5.996e-5)
    assert value(m, 13251, "skipped_iters") == 0
    assert value(m, 13251, "nan_iters") == 0
    assert value(m, 13251, "loss") == pytest.approx(2.924229)
    assert value(m, 13251, "consumed_tokens") == 4779704320
    assert value(m, 14000, "loss_scale") == 4096.0
    assert out.unparsed == 0
    # loss scale 524288 -> 4096 between the two records: 7 halvings, one overflow event
    ovf = ev.filter(pl.col("kind") == "overflow")
    assert ovf.height == 1 and ovf.item(0, "step") == 14000
    detail = json.loads(ovf.item(0, "detail"))
    assert (detail["old_scale"], detail["new_scale"], detail["halvings"]) == (524288.0, 4096.0, 7)


def test_bigscience_tokens_samples_tflops(real, store):
    m, _, _ = ingest(store, real / "megatron/bigscience_tr8b_104b_optimizer_reset_samples_tflops.log")
    assert value(m, 16800, "consumed_tokens") == 15552937984
    assert value(m, 16801, "consumed_samples") == 7596256
    assert value(m, 16800, "samples_per_second") == pytest.approx(0.005)
    assert value(m, 16801, "tflops") == pytest.approx(33.85)
    assert value(m, 16801, "grad_norm") == pytest.approx(226760.401)


def test_epfllm_nan_onset(real, store):
    m, ev, _ = ingest(store, real / "megatron/epfllm_megatron_llm_33_nan_onset.log")
    assert steps(m, "loss") == [3383, 3384]
    assert value(m, 3383, "loss") == pytest.approx(0.7334521)
    assert value(m, 3384, "loss") == pytest.approx(0.7072597)
    assert value(m, 3384, "grad_norm") == pytest.approx(0.741)
    assert value(m, 3384, "loss_scale") == 1.0
    assert ev.height == 0


def test_nanotron_suffixes(real, store):
    m, _, _ = ingest(store, real / "nanotron/nanotron_pr23_iteration_lines.log")
    assert steps(m, "loss") == [991, 992, 993]
    assert value(m, 991, "consumed_tokens") == 634_000
    assert value(m, 991, "tokens_per_s") == pytest.approx(14_200)
    assert value(m, 991, "hd_total_memory_tb") == pytest.approx(312e9)
    assert value(m, 992, "grad_norm") == pytest.approx(0.507)
    assert value(m, 993, "lr") == pytest.approx(1e-5)
    assert value(m, 992, "step_time_ms") == pytest.approx(41.2)
    assert m.get_column("time").drop_nulls().dt.year().unique().to_list() == [2024]


def test_deepspeed_hysteresis_and_overflows(real, store):
    _, ev, _ = ingest(store, real / "deepspeed/deepspeed_931_hysteresis_epoch_start.log")
    assert ev.get_column("kind").to_list() == ["hysteresis", "overflow", "overflow", "overflow"]
    scales = [(json.loads(d)["old_scale"], json.loads(d)["new_scale"]) for d in ev.get_column("detail")]
    assert scales == [(65536, 65536), (65536, 32768), (32768, 16384), (16384, 8192)]
    assert ev.get_column("time").dt.year().to_list() == [2023] * 4


def test_deepspeed_progress_lines(real, store):
    m, _, _ = ingest(store, real / "deepspeed/deepspeed_1825_step_skipped_lines_ipython_noise.log")
    assert steps(m, "lr") == [40, 50, 60]
    assert value(m, 40, "lr") == pytest.approx(5e-5)
    assert value(m, 60, "skipped_total") == 2
    assert [value(m, s, "skipped_iters") for s in (40, 50, 60)] == [2, 0, 0]
    assert value(m, 50, "samplespersec") == pytest.approx(83.73838805358588)


def test_llmc_mainlog_first_steps(real, store):
    m, _, _ = ingest(store, real / "llmc/llmc_main_log_steps0_260_with_val_eval.log")
    # s is 0-based and stored as printed
    assert steps(m, "loss")[:3] == [0, 1, 2]
    assert value(m, 0, "loss") == pytest.approx(11.0116)
    assert value(m, 0, "grad_norm") == pytest.approx(14.96)
    assert value(m, 0, "eval_loss", record=False) == pytest.approx(11.0095)
    assert value(m, 250, "eval_loss", record=False) == pytest.approx(6.1565)
    assert value(m, 250, "hellaswag_acc", record=False) == pytest.approx(0.2437)
    assert m.filter(pl.col("name") == "loss").height == 259


def test_llmc_norm_spike(real, store):
    m, _, _ = ingest(store, real / "llmc/llmc_main_log_norm_spike_s8650_8800.log")
    assert value(m, 8715, "grad_norm") == pytest.approx(4.29)
    assert value(m, 8714, "grad_norm") == pytest.approx(0.28)
    assert value(m, 8715, "loss") == pytest.approx(3.5416)
    assert value(m, 8750, "eval_loss", record=False) == pytest.approx(3.4244)


def test_torchtitan_steps(real, store):
    m, _, _ = ingest(store, real / "torchtitan/torchtitan_pr1287_gc_profiler_interleaved.log")
    assert steps(m, "loss") == [200, 210, 220, 230, 240, 250]
    assert value(m, 200, "loss") == pytest.approx(6.1384)
    assert value(m, 210, "tokens_per_s") == 5593
    assert value(m, 200, "mfu") == pytest.approx(34.29)
    assert value(m, 200, "memory_gib") == pytest.approx(49.66)
    assert value(m, 200, "memory_pct") == pytest.approx(52.28)
    assert m.filter(pl.col("name") == "grad_norm").height == 0  # not printed before 2025
    assert m.get_column("rank").null_count() == m.height  # one rank prints: global


def test_fairseq_summaries_and_valid(real, store):
    m, _, _ = ingest(store, real / "fairseq/fairseq_514_epoch_summaries.log")
    assert value(m, 22897, "loss") == pytest.approx(6.220)
    assert value(m, 25634, "grad_norm") == pytest.approx(1.279)
    assert value(m, 23897, "lr") == pytest.approx(0.000204564)
    assert value(m, 21896, "eval_loss", record=False) == pytest.approx(6.43844)
    assert value(m, 24633, "eval_loss", record=False) == pytest.approx(6.37204)
    train = m.filter(pl.col("record").is_not_null() & (pl.col("name") == "loss")).sort("line")
    # the excerpt opens with epoch 8's summary and no inner line of epoch 8: that summary is the
    # only record of the epoch, so a training record; epoch 9's summary repeats its inner lines
    assert train.get_column("step").to_list() == [21896, 22897, 23897, 25634]
    assert value(m, 21896, "loss") == pytest.approx(6.326)
    assert value(m, 24633, "loss", record=False) == pytest.approx(6.233)


def test_fairseq_legacy_running_average(real, store):
    m, _, _ = ingest(store, real / "fairseq/fairseq_301_legacy_2018_running_avg.log")
    train = m.filter(pl.col("record").is_not_null() & (pl.col("name") == "loss")).sort("line")
    assert train.get_column("value").to_list()[:3] == [1.27, 1.28, 0.91]  # not the (1.50) average
    assert train.height == 10
    gn = m.filter(pl.col("record").is_not_null() & (pl.col("name") == "grad_norm")).sort("line")
    assert gn.item(0, "value") == pytest.approx(2.1427)
    assert m.filter(pl.col("name") == "eval_loss").item(0, "value") == pytest.approx(1.94)
    assert m.filter(pl.col("name") == "clip").item(0, "value") == 100


def test_olmo_multiline_collapse(real, store):
    m, ev, _ = ingest(store, real / "olmo/olmo_692_multiline_loss_collapse.log")
    assert steps(m, "loss") == [1, 2, 3]
    assert value(m, 1, "loss") == pytest.approx(12.18)
    assert value(m, 2, "loss") == pytest.approx(1.7872662283480167e-06)
    assert value(m, 3, "loss") == 0.0
    assert value(m, 1, "grad_norm") == pytest.approx(231.7)
    assert value(m, 3, "grad_norm") == pytest.approx(7.725906669975302e-08)
    assert value(m, 1, "train_perplexity") == 195153
    assert value(m, 2, "consumed_tokens") == 2097152
    # the orphan tail before the first header is not attributed to step 1
    assert value(m, 1, "system_peak_gpu_memory_mb") == 46911


def test_mmengine_gradnorm_nan(real, store):
    m, ev, _ = ingest(store, real / "mmengine/xtuner_187_gradnorm_nan.log")
    assert steps(m, "loss") == [200, 210, 220, 230, 240, 250]
    assert value(m, 240, "loss") == pytest.approx(2.5128)
    assert value(m, 230, "grad_norm") == pytest.approx(2.5099)
    assert math.isnan(value(m, 240, "grad_norm"))
    assert value(m, 200, "lr") == pytest.approx(1.9870e-4)
    nan = ev.filter(pl.col("kind") == "nan")
    assert nan.get_column("step").to_list() == [240, 250]


def test_nanogpt_nan_after_checkpoint(real, store):
    m, ev, _ = ingest(store, real / "nanogpt/nanogpt_215_fp16_nan_after_checkpoint_md_quoted.log")
    loss = m.filter((pl.col("name") == "loss") & pl.col("record").is_not_null()).sort("line")
    assert loss.get_column("step").to_list() == list(range(2920, 3070, 10))
    assert value(m, 3000, "loss") == pytest.approx(4.2490)
    assert math.isnan(value(m, 3010, "loss"))
    assert value(m, 3000, "eval_loss", record=False) == pytest.approx(4.0427)
    assert value(m, 2920, "mfu") == pytest.approx(15.34)
    nan = ev.filter(pl.col("kind") == "nan")
    assert nan.get_column("step").to_list() == [3010, 3020, 3030, 3040, 3050, 3060]
    save = ev.filter(pl.col("kind") == "checkpoint_save")
    assert save.height == 1 and save.item(0, "step") == 3000  # the eval just before it
    assert m.get_column("time").min().isoformat() == "2023-03-22T09:30:39"


def test_nanogpt_early_format(real, store):
    m, _, _ = ingest(store, real / "nanogpt/nanogpt_110_early_format_no_mfu.log")
    assert steps(m, "loss") == list(range(1631, 1642))
    assert value(m, 1641, "step_time_ms") == pytest.approx(567.31)
    assert m.filter(pl.col("name") == "mfu").height == 0


def test_nccl_watchdog_events(real, store):
    report = ingest_paths([real / "hardware/llamafactory_6269_nccl_watchdog_reduce_scatter.log"], "r", store)
    assert report.ok
    ev = store.table("r", "events").sort("line")
    assert ev.get_column("kind").to_list() == ["nccl_timeout"] * 3
    assert ev.get_column("rank").to_list() == [0, 4, 3]
    d = [json.loads(x) for x in ev.get_column("detail")]
    assert [x["seq"] for x in d] == [7753] * 3
    assert {x["op"] for x in d} == {"_REDUCE_SCATTER_BASE"}
    assert [x["timeout_ms"] for x in d] == [600000] * 3
    assert [x.get("last_completed") for x in d] == [7752, 7752, None]  # rank 3's line is cut off
