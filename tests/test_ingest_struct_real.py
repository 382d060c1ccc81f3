"""Real excerpts of the structured formats (tests/data/real, README values), read back
through the store: ingest_paths into a tmp Store, then store.table(...)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest

from spikeforensics.ingest import detect_format, ingest_paths
from spikeforensics.store import Store

REAL = Path(__file__).parent / "data" / "real"


def ingest(tmp_path: Path, *rel: str, run: str = "r") -> Store:
    store = Store(tmp_path / "store")
    ingest_paths([REAL / r for r in rel], run, store)
    return store


def loss_rows(store: Store, run: str = "r") -> pl.DataFrame:
    return store.table(run, "metrics").filter(pl.col("name") == "loss").sort("line")


@pytest.mark.parametrize(
    "rel, fmt",
    [
        ("hf_trainer/modernbert_233_gradnorm_nan_loss_zero.log", "hf_trainer"),
        ("hf_trainer/h2ogpt_86_tqdm_caret_M_interleaved.log", "hf_trainer"),
        ("hf_trainer_state/luojiu_7b_trainer_state_pre_grad_norm.json", "hf_trainer_state"),
        ("llamafactory/luojiu_7b_trainer_log_first60_old_schema.jsonl", "jsonl_metrics"),
        ("llamafactory/qwen25_medical_trainer_log_first40_new_schema.jsonl", "jsonl_metrics"),
        ("llamafactory/sft_training_llm_dup_writer_first12.jsonl", "jsonl_metrics"),
        ("llamafactory/sft_training_llm_resume_l1036_1060.jsonl", "jsonl_metrics"),
        ("lightning/slm_training_version0_metrics.csv", "csv_metrics"),
        ("lightning/slm_training_version5_resumed_first80.csv", "csv_metrics"),
        ("hardware/bpytop_26_nvidia_smi_query_gpu.csv", "telemetry"),
        ("hardware/gpud_pr46_dmesg_ctime_xid_md_quoted.log", "kernel"),
        ("hardware/nvsentinel_155_dmesg_fallen_off_bus_multiline.log", "kernel"),
    ],
)
def test_sniffs_as_its_own_format(rel, fmt):
    assert detect_format(REAL / rel)[0] == fmt


def test_other_formats_are_not_claimed_by_struct_parsers():
    mine = {
        "hf_trainer",
        "hf_trainer_state",
        "jsonl_metrics",
        "csv_metrics",
        "layers",
        "batches",
        "telemetry",
        "kernel",
        "tensorboard",
    }
    for sub in ("megatron", "deepspeed", "llmc", "torchtitan", "fairseq", "olmo", "mmengine", "nanotron", "nanogpt"):
        for path in (REAL / sub).iterdir():
            assert detect_format(path)[0] not in mine, path
    assert detect_format(REAL / "hardware/llamafactory_6269_nccl_watchdog_reduce_scatter.log")[0] not in mine


def test_modernbert_nan_grad_norm_and_masked_loss(tmp_path):
    store = ingest(tmp_path, "hf_trainer/modernbert_233_gradnorm_nan_loss_zero.log")
    m = store.table("r", "metrics")
    assert loss_rows(store).get_column("value").to_list() == [0.2051, 0.0, 0.0]
    gn = m.filter(pl.col("name") == "grad_norm").sort("line")
    assert gn.height == 3 and all(math.isnan(v) for v in gn.get_column("value"))
    assert m.get_column("step").null_count() == m.height  # no tqdm counter in the excerpt
    assert loss_rows(store).get_column("record").to_list() == [0, 1, 2]
    lr = m.filter(pl.col("name") == "lr").sort("line").get_column("value").to_list()
    assert lr[0] == pytest.approx(9.774074342405685e-06)
    ev = store.table("r", "events").filter(pl.col("kind") == "nan")
    assert ev.height == 3
    assert json.loads(ev.item(0, "detail"))["metric"] == "grad_norm"


def test_h2ogpt_steps_from_tqdm_counters(tmp_path):
    store = ingest(tmp_path, "hf_trainer/h2ogpt_86_tqdm_caret_M_interleaved.log")
    loss = loss_rows(store)
    assert loss.get_column("step").to_list() == [1318, 1319, 1320, 1321, 1322]
    assert loss.get_column("value").to_list() == [1.5545, 1.3465, 1.3056, 1.0685, 1.0574]
    assert loss.get_column("line").to_list() == [1, 2, 3, 4, 5]
    names = set(store.table("r", "metrics").get_column("name"))
    assert names == {"loss", "lr", "epoch"}  # pre grad_norm era: no grad_norm row


def test_luojiu_trainer_state(tmp_path):
    store = ingest(tmp_path, "hf_trainer_state/luojiu_7b_trainer_state_pre_grad_norm.json")
    m = store.table("r", "metrics")
    loss = m.filter(pl.col("name") == "loss").sort("step")
    assert loss.height == 1742
    assert loss.get_column("step").to_list() == list(range(5, 8711, 5))
    assert loss.get_column("record").to_list() == list(range(1742))
    assert loss.item(0, "value") == 1.7484 and loss.item(-1, "value") == 1.3703
    assert loss.get_column("line").is_sorted() and loss.item(0, "line") == 11
    summary = m.filter(pl.col("record").is_null())
    assert set(summary.get_column("step")) == {8712}
    assert summary.filter(pl.col("name") == "train_loss").item(0, "value") == pytest.approx(1.3936967928547503)
    assert "grad_norm" not in set(m.get_column("name"))
    # the same run's trainer_log.jsonl agrees on the first steps
    store2 = ingest(tmp_path / "b", "llamafactory/luojiu_7b_trainer_log_first60_old_schema.jsonl")
    jl = loss_rows(store2)
    assert jl.get_column("step").to_list() == list(range(5, 301, 5))
    assert jl.get_column("value").to_list() == loss.head(60).get_column("value").to_list()
    assert "eval_loss" not in set(store2.table("r", "metrics").get_column("name"))  # null -> no row


def test_llamafactory_new_schema(tmp_path):
    store = ingest(tmp_path, "llamafactory/qwen25_medical_trainer_log_first40_new_schema.jsonl")
    m = store.table("r", "metrics")
    assert loss_rows(store).get_column("step").to_list() == list(range(10, 401, 10))
    assert loss_rows(store).item(0, "value") == 2.219
    assert set(m.get_column("name")) == {"loss", "lr", "epoch"}
    assert m.filter(pl.col("name") == "epoch").sort("line").item(0, "value") == pytest.approx(0.0044444444444444444)


def test_llamafactory_duplicate_writer_one_record_per_step(tmp_path):
    store = ingest(tmp_path, "llamafactory/sft_training_llm_dup_writer_first12.jsonl")
    loss = loss_rows(store)
    assert loss.get_column("step").to_list() == [10, 20, 30, 40, 50, 60]
    assert loss.item(0, "value") == 0.8548  # first writer's value, not 0.8547
    assert loss.get_column("record").to_list() == list(range(6))
    assert set(loss.get_column("attempt")) == {0}


def test_llamafactory_resume_appends_new_attempt(tmp_path):
    store = ingest(tmp_path, "llamafactory/sft_training_llm_resume_l1036_1060.jsonl")
    loss = loss_rows(store)
    before = loss.filter(pl.col("attempt") == 0)
    after = loss.filter(pl.col("attempt") == 1)
    assert set(loss.get_column("attempt")) == {0, 1}
    assert before.get_column("step").to_list()[-1] == 5240  # interleaved writers are not resumes
    assert set(before.get_column("step")) == {5170, 5180, 5190, 5200, 5210, 5220, 5230, 5240}
    assert after.item(0, "step") == 5010 and after.item(0, "line") == 12
    assert after.get_column("step").to_list() == list(range(5010, 5071, 10))
    # a step written by the second writer is kept once, with the first line's value
    assert before.filter(pl.col("step") == 5200).get_column("value").to_list() == [0.3738]
    assert after.filter(pl.col("step") == 5060).get_column("value").to_list() == [0.3781]


def test_lightning_version0_sparse_and_eval_rows(tmp_path):
    store = ingest(tmp_path, "lightning/slm_training_version0_metrics.csv")
    m = store.table("r", "metrics")
    loss = loss_rows(store)
    assert loss.item(0, "step") == 49 and loss.item(-1, "step") == 140699
    assert loss.item(0, "value") == pytest.approx(7.628580570220947)
    assert loss.get_column("record").to_list() == list(range(loss.height))
    ev = m.filter(pl.col("name") == "eval_loss")
    assert ev.height > 0 and ev.get_column("record").null_count() == ev.height
    last = m.filter(pl.col("line") == 2835)  # the train-epoch aggregate row
    assert last.get_column("record").null_count() == last.height
    assert "train_loss_epoch" in set(last.get_column("name"))
    # the README's mild bump at step 100999 (values as in the file)
    bump = loss.filter(pl.col("step").is_in([100949, 100999])).get_column("value").to_list()
    assert bump == [pytest.approx(3.61720609664917), pytest.approx(4.14514684677124)]


def test_lightning_version5_resume_starts_at_140749(tmp_path):
    store = ingest(tmp_path, "lightning/slm_training_version5_resumed_first80.csv")
    loss = loss_rows(store)
    assert loss.item(0, "step") == 140749 and loss.item(0, "record") == 0
    assert loss.height == 79 and set(loss.get_column("attempt")) == {0}
    assert loss.item(-1, "step") == 144649


def test_nvidia_smi_query_csv(tmp_path):
    store = ingest(tmp_path, "hardware/bpytop_26_nvidia_smi_query_gpu.csv")
    t = store.table("r", "telemetry")
    got = {(g, f): v for g, f, v in t.select("gpu", "field", "value").iter_rows()}
    assert got[(0, "power")] == 106.56 and got[(1, "power")] == 5.68
    assert got[(0, "temperature")] == 60 and got[(1, "temperature")] == 49
    assert got[(0, "memory_used")] == 2856 and got[(1, "fan_speed")] == 29
    assert got[(0, "clock_graphics")] == 1936
    assert set(t.get_column("gpu")) == {0, 1}


def test_gpud_ctime_xids(tmp_path):
    store = ingest(tmp_path, "hardware/gpud_pr46_dmesg_ctime_xid_md_quoted.log")
    ev = store.table("r", "events").filter(pl.col("kind") == "xid").sort("line")
    details = [json.loads(d) for d in ev.get_column("detail")]
    assert [d["code"] for d in details] == [13, 13, 13, 109]
    assert {d["pci"] for d in details} == {"0000:cb:00"}
    assert str(ev.item(0, "time")) == "2024-08-30 11:43:09"
    assert str(ev.item(3, "time")) == "2024-08-30 11:43:14"


def test_nvsentinel_fallen_off_bus(tmp_path):
    store = ingest(tmp_path, "hardware/nvsentinel_155_dmesg_fallen_off_bus_multiline.log")
    ev = store.table("r", "events")
    assert ev.height == 1
    d = json.loads(ev.item(0, "detail"))
    assert ev.item(0, "kind") == "xid" and ev.item(0, "line") == 1
    assert d["code"] == 79 and d["inferred"] is True and d["pci"] == "0000:b3:00"
    assert d["uptime_s"] == pytest.approx(1843.308145)


def test_folder_with_stdout_and_trainer_state_keeps_both_sources(tmp_path):
    store = ingest(tmp_path, "hf_trainer_state", "llamafactory/luojiu_7b_trainer_log_first60_old_schema.jsonl")
    loss = store.table("r", "metrics").filter((pl.col("name") == "loss") & (pl.col("step") == 5))
    assert loss.height == 2 and loss.get_column("source").n_unique() == 2
