"""What sample_logs/real/fresh42 first needed: MLPerf Training result logs (`:::MLLOG {json}` lines among a
shell trace and the stack's own output) were taken for JSON-lines metrics and rejected, because a record with a
key called `value` collided with the long table's own `value` column."""

from __future__ import annotations

import polars as pl
from _ingest_helpers import REAL

from spikeforensics import api
from spikeforensics.ingest import detect_format, parse_file

HUGECTR = REAL / "fresh42" / "mlperf-v40-hugectr-dlrm-dcnv2-dell-xe9640-fp16-healthy-1123" / "result_0.txt"
NEMO_SD = REAL / "fresh42" / "mlperf-v40-nemo-stable-diffusion-fujitsu-gx2560m7-healthy-120" / "result_0.txt"


def _train(result, name: str = "loss") -> pl.DataFrame:
    return result.tables["metrics"].filter((pl.col("name") == name) & pl.col("record").is_not_null()).sort("line")


def test_mlperf_tracked_stats_lines_are_the_training_records():
    """NeMo's stable diffusion prints 120 `tracked_stats` dicts (throughput, loss, lr) at step_num 100..12000;
    the 120 `block_start`/`block_stop` lines and the hyper-parameter keys are no records."""
    assert detect_format(NEMO_SD)[0] == "mlperf_log"
    result = parse_file(NEMO_SD, "mlperf_log")
    loss = _train(result)
    assert loss.height == 120
    assert loss.get_column("step").to_list() == list(range(100, 12001, 100))
    assert abs(loss.get_column("value")[0] - 1.1177679331582582) < 1e-12
    assert _train(result, "lr").height == 120
    assert loss.get_column("time").null_count() == 0


def test_mlperf_log_with_the_stacks_own_step_lines(tmp_path):
    """HugeCTR's DLRM prints its losses as `[HCTR]... Iter: 100 Time(100 iters): 0.58s Loss: 0.1322 lr:0.004`
    beside MLLOG lines whose only `tracked_stats` is a throughput at an epoch fraction: all 1,123 losses are read,
    and the healthy run is called healthy."""
    report = api.ingest([str(HUGECTR)], run_id="dlrm", store=tmp_path)
    run = api.load_run("dlrm", tmp_path)
    loss = run.metrics.filter((pl.col("name") == "loss") & pl.col("record").is_not_null())
    assert loss.height == 1123 and loss.get_column("step").min() == 100 and loss.get_column("step").max() == 112300
    assert report.files[0].format.startswith("mlperf_log")
    assert api.diagnose(run)["verdict"]["status"] == "healthy"


def test_a_metric_called_value_or_name_is_kept(tmp_path):
    lines = [f'{{"step": {i}, "loss": {2.0 - i / 10}, "value": 5, "name": {i}}}' for i in range(1, 4)]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")
    metrics = parse_file(path, "jsonl_metrics").tables["metrics"]
    assert sorted(metrics.get_column("name").unique().to_list()) == ["loss", "name", "value"]
    assert metrics.filter(pl.col("name") == "value").get_column("value").to_list() == [5.0, 5.0, 5.0]
    csv = tmp_path / "m.csv"
    csv.write_text("step,loss,value\n1,2.0,5\n2,1.9,6\n")
    got = parse_file(csv, "csv_metrics").tables["metrics"].filter(pl.col("name") == "value")
    assert got.get_column("value").to_list() == [5.0, 6.0]


RNNT = REAL / "fresh43" / "mlperf-v31-xfusion-l40-rnnt-loss-explodes-epoch42-collapses-aborted" / "result_2.txt"


def test_a_one_based_in_epoch_counter_that_reaches_its_total_is_composed_with_the_epoch(tmp_path):
    """NVIDIA's MLPerf RNN-T prints `epoch 42 | iter 136/136 | loss 27.3 | ... | lrate 6.55e-03` every 10 global
    iterations: the 1-based counter restarts each epoch and reaches its total, so the step is (E - 1) * 136 + I
    (10 .. 10880, one record per line), `lrate` is the LR, and the divergence at step 5560 is found there."""
    api.ingest([str(RNNT)], run_id="rnnt", store=tmp_path)
    run = api.load_run("rnnt", tmp_path)
    loss = run.metrics.filter((pl.col("name") == "loss") & pl.col("record").is_not_null()).sort("line")
    steps = loss.get_column("step")
    assert loss.height == 1088 and steps.min() == 10 and steps.max() == 10880 and steps.is_sorted()
    assert run.metrics.filter(pl.col("name") == "lr").height == 1088
    real = [i for i in api.diagnose(run)["incidents"] if i["severity"] in ("warning", "critical")]
    assert any(i["step_start"] - 10 <= 5560 <= i["step_end"] + 10 and i["kind"] == "divergence" for i in real)


def test_an_in_epoch_total_printed_one_apart_numbers_no_two_records_alike(tmp_path):
    lines = []
    for epoch in range(3):
        for i in range(1, 6):
            lines.append(f"Epoch {epoch} iteration {i:04d}/{5 if i % 2 else 6:04d}: training loss {2.0 - epoch / 10}")
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    loss = _train(parse_file(path, "generic_steps"))
    assert loss.height == 15 and loss.get_column("step").n_unique() == 15 and loss.get_column("step").is_sorted()
