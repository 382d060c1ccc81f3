"""What sample_logs/real/fresh42 to fresh44 first needed: MLPerf Training result logs (`:::MLLOG {json}` lines among
a shell trace and the stack's own output) were taken for JSON-lines metrics and rejected, because a record with a
key called `value` collided with the long table's own `value` column; NVIDIA's 1-based in-epoch counter that
reaches its total was no epoch counter; AlgoPerf's runner logs counted evaluation blocks as training records,
a run that died on an optimizer's NaN error was healthy, and a grad norm rising 8x while the loss kept falling
(no LR printed) was a drift warning."""

from __future__ import annotations

import json

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


ALGOPERF = REAL / "fresh44"
OGBG = ALGOPERF / "algoperf-v06-jax-ogbg-nadamw-baseline-healthy-562-records" / "ogbg_jax_03-07-2025-16-24-31.log"
CONFORMER = (
    ALGOPERF
    / "algoperf-v06-pytorch-conformer-shampoo-sgd-grafting-lr-4-2-loss-rebounds-step21-nan-factor-crash"
    / "librispeech_conformer_pytorch_03-16-2025-17-14-24.log"
)
RESNET = (
    ALGOPERF
    / "algoperf-v06-pytorch-imagenet-resnet-shampoo-sgd-grafting-lr-4-2-healthy-295-records"
    / "imagenet_resnet_pytorch_03-14-2025-21-38-10.log"
)


def test_algoperf_writer_lines_are_the_records_and_eval_blocks_are_eval_records():
    """562 `logging_writer.py:48] [N] global_step=N, grad_norm=G, loss=L` lines; the 50 evaluation blocks
    (`Time since start: ..., Step: N, {...}` and their logging_writer twin with `train/loss=`) are eval records."""
    assert detect_format(OGBG)[0] == "algoperf"
    result = parse_file(OGBG, "algoperf")
    loss = _train(result)
    assert loss.height == 562 and loss.get_column("step").to_list() == list(range(0, 56101, 100))
    assert _train(result, "grad_norm").height == 562
    evals = result.tables["metrics"].filter(pl.col("name") == "eval_loss")
    assert evals.height == 50 and evals.get_column("record").null_count() == 50


def test_a_submissions_own_print_of_the_logged_step_is_no_second_record(tmp_path):
    """Shampoo's `submission.py:265] 0) loss = 6.923, grad_norm = 0.606` repeats the writer line of its step:
    295 records (steps 0..100, then every 500), not 423."""
    api.ingest([str(RESNET)], run_id="resnet", store=tmp_path)
    run = api.load_run("resnet", tmp_path)
    loss = run.metrics.filter((pl.col("name") == "loss") & pl.col("record").is_not_null())
    assert loss.height == 295 and loss.get_column("step").n_unique() == 295
    assert api.diagnose(run)["verdict"]["status"] == "healthy"


def test_a_run_that_dies_on_an_exception_naming_nan_is_stopped_on_a_nonfinite_value(tmp_path):
    """8 ranks raise `ValueError: Encountered nan values in bias-corrected factor matrix ...` after the last
    record (step 500): training stopped on a non-finite value, though no printed loss is NaN. The 8 `No module
    named 'wandb'` tracebacks the run went on after are no such thing."""
    api.ingest([str(CONFORMER)], run_id="conformer", store=tmp_path)
    run = api.load_run("conformer", tmp_path)
    diagnosis = api.diagnose(run)
    assert diagnosis["verdict"]["status"] == "unstable"
    stops = [i for i in diagnosis["incidents"] if i["kind"] == "nonfinite" and i["severity"] == "critical"]
    assert stops and stops[0]["step_start"] == 500 and "nan values" in stops[0]["evidence"][0]["note"]


def test_a_caught_traceback_naming_nan_before_more_records_stops_nothing(tmp_path):
    lines = [f"step {i} loss {2.0 - i / 100:.3f}" for i in range(1, 41)]
    lines[20:20] = ["Traceback (most recent call last):", '  File "x.py", line 3, in <module>',
                    "ValueError: Input contains NaN, infinity or a value too large"]  # fmt: skip
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    api.ingest([str(path)], run_id="caught", store=tmp_path)
    assert api.diagnose(api.load_run("caught", tmp_path))["verdict"]["status"] == "healthy"
    path.write_text("\n".join(lines[:20] + lines[23:] + lines[20:23]) + "\n")
    api.ingest([str(path)], run_id="died", store=tmp_path)
    assert api.diagnose(api.load_run("died", tmp_path))["verdict"]["status"] == "unstable"


def test_a_grad_norm_rising_while_the_loss_keeps_falling_with_no_lr_printed_is_a_note(tmp_path):
    """AlgoPerf's OGBG baseline: the grad norm goes 0.026 -> 0.21 over 40,000 steps while the loss falls 0.035 ->
    0.020; the same rise under a flat loss stays a warning (tests/test_detect_* cover the LR-printed case)."""
    api.ingest([str(OGBG)], run_id="ogbg", store=tmp_path)
    diagnosis = api.diagnose(api.load_run("ogbg", tmp_path))
    assert diagnosis["verdict"]["status"] == "healthy"
    assert not [i for i in diagnosis["incidents"] if i["kind"] == "soft_drift"]
    notes = [n for n in diagnosis["notes"] if n["kind"] == "soft_drift"]
    assert notes and "loss fell to 0.5" in notes[0]["summary"]
    n = 600
    rows = [f"step {i * 100} loss {0.05:.4f} grad_norm {0.03 if i < n // 2 else 0.2:.4f}" for i in range(n)]
    flat = tmp_path / "flat.log"
    flat.write_text("\n".join(rows) + "\n")
    api.ingest([str(flat)], run_id="flat", store=tmp_path)
    flat_drift = [i for i in api.diagnose(api.load_run("flat", tmp_path))["incidents"] if i["kind"] == "soft_drift"]
    assert any(i["severity"] == "warning" for i in flat_drift)


LENOVO = REAL / "fresh44" / "mlperf-v11-lenovo-maskrcnn-loss-freezes-iter3700-bbox-0-aborted" / "result_4.txt"


def test_a_loss_printed_unchanged_on_the_last_records_is_no_longer_updated(tmp_path):
    """NVIDIA's MLPerf Mask R-CNN updates its loss meter only on a finite loss: `loss: 0.7799 (0.9819)` on the
    727 records from iteration 3700 to the end (the run aborts, its box AP 0) is a run that stopped learning."""
    api.ingest([str(LENOVO)], run_id="frozen", store=tmp_path)
    diagnosis = api.diagnose(api.load_run("frozen", tmp_path))
    assert diagnosis["verdict"]["status"] != "healthy"
    frozen = [i for i in diagnosis["incidents"] if i["kind"] == "no_progress"]
    assert frozen and frozen[0]["step_start"] == 3700 and frozen[0]["step_end"] == 40000


def test_a_converged_loss_that_repeats_by_rounding_is_not_frozen(tmp_path):
    """A loss printed with 2 decimals that has converged repeats 0.01 on its last records, and on the records before
    them too: the print does not resolve its noise, nothing froze."""
    values = [round(1.0 / (1 + i), 2) for i in range(60)] + [0.01] * 40
    path = tmp_path / "train.log"
    path.write_text("\n".join(f"step {i} loss {v:.2f}" for i, v in enumerate(values)) + "\n")
    api.ingest([str(path)], run_id="rounded", store=tmp_path)
    incidents = api.diagnose(api.load_run("rounded", tmp_path))["incidents"]
    assert not [i for i in incidents if i["kind"] == "no_progress"]


FRESH45 = REAL / "fresh45"


def test_an_mllog_step_printed_as_a_float_is_a_step():
    """NeMo's Llama 3.1 405B prints `"metadata": {..., "step": 448.0}` on its 618 `reduced_train_loss` records."""
    log = FRESH45 / "mlperf-v50-nvidia-gb200-nemo-llama31-405b-healthy-618" / "result_0.txt"
    loss = _train(parse_file(log, "mlperf_log"))
    assert loss.height == 618 and loss.get_column("step").min() == 448 and loss.get_column("step").max() == 276864


def test_an_epoch_header_without_a_space_after_its_colon_and_a_loss_function_field(tmp_path):
    """NVIDIA's MLPerf DLRM prints `Epoch:[0/1] [592/75869]  eta: 0:31:32  loss: 0.1604 ...` (115 records, steps
    592..68080); its SSD `Iteration: 20, Loss function: 20.554, Average Loss: 0.446` (the loss, then an EMA that
    starts at 0 and climbs: read as the loss it is not, the run looked unstable)."""
    dlrm = FRESH45 / "mlperf-v07-nvidia-dgx2h-dlrm-pytorch-healthy-115" / "result_0.txt"
    ssd = FRESH45 / "mlperf-v07-nvidia-dgx1-ssd-pytorch-healthy-308" / "result_0.txt"
    api.ingest([str(dlrm)], run_id="dlrm", store=tmp_path)
    api.ingest([str(ssd)], run_id="ssd", store=tmp_path)
    for run_id, n, first, last in (("dlrm", 115, 592, 68080), ("ssd", 308, 0, 6140)):
        run = api.load_run(run_id, tmp_path)
        loss = run.metrics.filter((pl.col("name") == "loss") & pl.col("record").is_not_null())
        assert (loss.height, loss.get_column("step").min(), loss.get_column("step").max()) == (n, first, last)
        assert api.diagnose(run)["verdict"]["status"] == "healthy"
    ssd_loss = api.load_run("ssd", tmp_path).metrics.filter(pl.col("name") == "loss").sort("step")
    assert ssd_loss.get_column("value")[0] == 23.101


FRESH46 = REAL / "fresh46"


def test_megatron_golden_values_are_series_given_by_their_step_range():
    """Megatron-LM's release-test curves: `{"lm loss": {"start_step": 0, "end_step": 53183, "step_interval": 5,
    "values": [...]}, ...}`: value i at step 5 i (10,637 losses, steps 0..53180)."""
    doc = FRESH46 / "megatron-lm-gpt3-15b-release-golden-values-0p9-53k-steps-healthy" / "golden_values_0.9.0.json"
    assert detect_format(doc)[0] == "json_doc"
    loss = _train(parse_file(doc, "json_doc"))
    assert loss.height == 10637 and loss.get_column("step").to_list() == list(range(0, 53181, 5))


def test_a_golden_value_written_as_a_string_is_a_gap(tmp_path):
    doc = tmp_path / "golden_values_0.11.0.json"
    values = [3.0, 2.9, "nan", 2.8, 2.7]
    doc.write_text('{\n    "lm loss": {\n        "start_step": 10,\n        "end_step": 60,\n        "step_interval": 10,\n'
                   f'        "values": {json.dumps(values)}\n    }}\n}}\n')  # fmt: skip
    loss = _train(parse_file(doc, "json_doc"))
    assert loss.get_column("step").to_list() == [10, 20, 40, 50]
    assert loss.get_column("value").is_nan().sum() == 0


def test_an_epoch_number_then_a_bracketed_fraction_is_composed(tmp_path):
    """A PaddlePaddle CSRA loop prints `Epoch 1[1616/5011]: loss:0.20306, lr:0.00159, ...` every 1,600 samples:
    all 115 records read, steps (E - 1) * 5011 + i."""
    log = FRESH46 / "paddle-csra-voc2007-resnet101-30-epochs-healthy-115" / "train.log"
    loss = _train(parse_file(log, "generic_steps"))
    assert loss.height == 115 and loss.get_column("step").is_sorted()
    assert loss.get_column("step").to_list()[:6] == [16, 1616, 3216, 4816, 5027, 6627]


def test_a_numpy_array_repr_is_its_first_element():
    """PaddleFleetX prints a static-graph fetch as `step:  0 loss_print:  [array([10.948218], dtype=float32)]`:
    302 losses, steps 0..301."""
    log = REAL / "fresh47" / "paddle-fleetx-static-gpt-serial-302-steps-sigterm-healthy" / "workerlog.0"
    metrics = parse_file(log, "generic_steps").tables["metrics"].filter(pl.col("record").is_not_null())
    assert metrics.height == 302 and metrics.get_column("step").to_list() == list(range(302))
    assert metrics.get_column("value")[0] == 10.948218
