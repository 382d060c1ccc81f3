"""Readers first met in sample_logs/real/fresh8: BasicSR's `MessageLogger` (basicsr), EDSR-PyTorch's trainer
(edsr), EESEN's CTC progress (eesen), Deeplearning4j's score listeners (dl4j), RL `progress.csv` counters and
per-epoch CSVs without a step column (csv_metrics), tqdm bars without a total (tqdm_postfix), a console saved with
its progress-bar redraws (CR line ends), and a loop printing its detached loss tensor (torch_print). Each: the real
case as the driver ingests it (records and steps as its FACTS.toml counts them), the format's other shapes, and
what must not be taken."""

from __future__ import annotations

import math

import polars as pl
import pytest
from _ingest_helpers import ingest, real_case, series, train_steps, value, write

from spikeforensics.ingest import csv_metrics, detect_format
from spikeforensics.ingest.base import SourceFile, lines_from_bytes, lone_cr_endings


def real(store, name):
    return real_case(store, "fresh8", name)


# -- basicsr ------------------------------------------------------------------------------------------


def test_basicsr_gan_loss_is_the_sum_of_the_generator_terms(store):
    metrics, _, f, facts = real(store, "gfpgan-270-basicsr-loss-explodes-to-1e27-iter25378")
    assert f.format == "basicsr" and train_steps(metrics) == [25377, 25378, 25379] == list(
        range(facts["first_step"], facts["last_step"] + 1)
    )
    # every `l_*` but the discriminator's `l_d`: 0.0078 + 0.0619 + 0.0677 + 0.0547 + 0.0621 + 0.0681 + 0.0758 + 0.0768 + 0 + 0.7679
    assert value(metrics, 25377, "loss") == pytest.approx(1.2428, abs=1e-4)
    assert value(metrics, 25377, "loss_d") == pytest.approx(0.1073)
    assert value(metrics, 25377, "fake_score") == pytest.approx(-2.4317)
    assert value(metrics, 25379, "loss") > 1e27 and value(metrics, 25378, "lr") == pytest.approx(2e-4)


def test_basicsr_single_term_thousands_separators_and_validation_records(store):
    metrics, _, f, facts = real(store, "retinexformer-6-basicsr-author-log-healthy-500-3000-iters")
    assert f.format == "basicsr" and train_steps(metrics) == [500, 1000, 1500, 2000, 2500, 3000]
    assert len(train_steps(metrics)) == facts["step_records"]
    assert value(metrics, 1000, "loss") == value(metrics, 1000, "loss_pix") == pytest.approx(0.10709)
    assert value(metrics, 1000, "epoch") == 16
    # `Validation ValSet,\t\t # psnr: 19.6031` after iteration 1,000: an eval record at that step
    assert series(metrics, "eval_psnr", train=False) == [(1000, 19.6031), (2000, 20.3321), (3000, 20.7048)]


def test_basicsr_mmsr_head_a_logged_total_and_the_metric_lines_under_validation(tmp_path, store):
    text = "\n".join(
        [
            "19-03-02 10:11:12.345 - INFO: <epoch:  0, iter:     100, lr:1.000e-04> l_g_pix: 1.0e-02 l_g_total: 5.0e-02 l_d_real: 0.7",
            "2024-01-01 10:00:00,000 INFO: [ESRGA..][epoch:  1, iter:     200, lr:(1.000e-04,1.000e-04,)] [eta: 1:00:00, "
            "time (data): 0.5 (0.1)] l_g_pix: nan l_g_percep: 1.5 l_d_real: 0.7 out_d_real: 3.1",
            "2024-01-01 10:01:00,000 INFO: Validation Set5",
            "\t # psnr: 27.1234\tBest: 27.1234 @ 200 iter",
            "\t # ssim: 0.8123\tBest: 0.8123 @ 200 iter",
            "2024-01-01 10:02:00,000 INFO: [ESRGA..][epoch:  1, iter:     300, lr:(1.000e-04,)] l_g_pix: 2.0e-02",
            "\t # psnr: 99.0",  # not under a Validation line: not an eval
        ]
    )
    metrics, _, f = ingest(store, write(tmp_path, "train_esrgan.log", text + "\n"))
    assert f.format == "basicsr" and train_steps(metrics) == [100, 200, 300]
    assert value(metrics, 100, "loss") == pytest.approx(0.05)  # the logged total, not the sum
    assert math.isnan(value(metrics, 200, "loss"))  # a NaN term makes the sum NaN
    assert value(metrics, 200, "out_d_real") == pytest.approx(3.1)
    assert series(metrics, "eval_psnr", train=False) == [(200, 27.1234)]
    assert series(metrics, "eval_ssim", train=False) == [(200, 0.8123)]


# -- edsr -----------------------------------------------------------------------------------------------


def test_edsr_counter_restarts_each_epoch_with_the_headers_epoch_and_lr(store):
    metrics, events, f, facts = real(store, "edsr-pytorch-21-own-data-l1-nan-from-epoch2")
    steps = train_steps(metrics)
    assert f.format == "edsr" and len(steps) == facts["step_records"] == 24
    assert steps[:8] == list(range(1200, 9601, 1200)) and steps[8] == facts["first_nonfinite_step"]
    epochs = series(metrics, "epoch")
    assert [e for _, e in epochs[::8]] == [1, 2, 43]
    assert metrics.get_column("attempt").max() == 2  # epoch 2 and 43 count from 1200 again
    first = metrics.filter((pl.col("name") == "loss") & (pl.col("attempt") == 0)).sort("line")
    assert first.get_column("value").to_list()[0] == pytest.approx(11.2929)
    nan = metrics.filter((pl.col("name") == "loss") & (pl.col("attempt") > 0)).get_column("value")
    assert nan.is_nan().all() and nan.len() == 16
    assert series(metrics, "lr")[0][1] == pytest.approx(1e-4)


def test_edsr_several_terms_take_the_total(tmp_path, store):
    text = (
        "[Epoch 3]\tLearning rate: 5.00e-5\n"
        "[1600/16000]\t[L1: 0.0123][VGG54: 0.8521][GAN: 0.0046][DIS: 0.6931][Total: 0.8690]\t30.1+0.2s\n"
        "[3200/16000]\t[L1: 0.0120][VGG54: 0.8400][GAN: 0.0050][DIS: 0.6900][Total: 0.8570]\t30.1+0.2s\n"
        "[4800/16000]\t[L1: 0.0119][VGG54: 0.8300][GAN: 0.0050][DIS: 0.6900][Total: 0.8469]\t30.1+0.2s\n"
    )
    metrics, _, f = ingest(store, write(tmp_path, "edsr_log.txt", text))
    assert f.format == "edsr" and train_steps(metrics) == [1600, 3200, 4800]
    assert value(metrics, 1600, "loss") == pytest.approx(0.8690) and value(metrics, 1600, "loss_dis") == pytest.approx(
        0.6931
    )
    assert value(metrics, 3200, "epoch") == 3 and value(metrics, 3200, "lr") == pytest.approx(5e-5)


# -- eesen, dl4j --------------------------------------------------------------------------------------------


def test_eesen_loss_is_the_negative_ctc_log_likelihood(store):
    metrics, _, f, facts = real(store, "eesen-87-ctc-objective-single-spike-1e27-at-205951-seqs-recovers")
    steps = train_steps(metrics)
    assert f.format == "eesen" and len(steps) == facts["step_records"] and steps[0] == facts["first_step"]
    assert value(metrics, 201933, "loss") == pytest.approx(41.6014)
    assert value(metrics, 201933, "ctc_objective") == pytest.approx(-41.6014)
    assert value(metrics, facts["spike_peak_steps"][0], "loss") == pytest.approx(1e27)
    assert value(metrics, 201933, "token_acc") == pytest.approx(59.2475)


def test_dl4j_score_iteration_listener_lines_after_the_jvm_startup(store):
    metrics, _, f, facts = real(store, "dl4j-yelpreview-bilstm-4epoch-healthy-78700")
    steps = train_steps(metrics)
    assert f.format == "dl4j" and len(steps) == facts["step_records"] == 788
    assert (steps[0], steps[-1]) == (facts["first_step"], facts["last_step"])
    assert value(metrics, 0, "loss") == pytest.approx(1.6235184989295723)


def test_dl4j_performance_listener(tmp_path, store):
    text = "".join(
        f"12:00:0{i}.000 [main] INFO org.deeplearning4j.optimize.listeners.PerformanceListener - ETL: 0 ms; "
        f"iteration {i * 10}; iteration time: 27 ms; samples/sec: 1185.185; batches/sec: 37.037; score: {2 - i / 10};\n"
        for i in range(4)
    )
    metrics, _, f = ingest(store, write(tmp_path, "dl4j.log", text))
    assert f.format == "dl4j" and train_steps(metrics) == [0, 10, 20, 30]
    assert value(metrics, 20, "loss") == pytest.approx(1.8) and value(metrics, 20, "samples_per_s") == pytest.approx(
        1185.185
    )


# -- csv_metrics: RL progress.csv, per-epoch and per-batch tables ------------------------------------------


def test_baselines_progress_csv_counts_epochs_and_its_critic_loss_is_a_critic(store):
    from spikeforensics.rundata import RunData

    metrics, _, f, facts = real(store, "openai-baselines-ddpg-drone-static-exp1-healthy-3427-epochs")
    steps = train_steps(metrics)
    assert f.format == "csv_metrics" and len(steps) == facts["step_records"]
    assert (steps[0], steps[-1]) == (facts["first_step"], facts["last_step"])
    run = RunData.load(store, "r")
    assert run.resolve("loss") == "train_loss_critic" and run.loss_is_critic()


def test_keras_csv_logger_and_a_batch_table_without_a_step_column(tmp_path, store):
    keras = "epoch,accuracy,loss,val_accuracy,val_loss\n0,0.5,1.2,0.55,1.1\n1,0.6,1.0,0.6,1.0\n2,0.7,0.9,0.65,0.95\n"
    metrics, _, f = ingest(store, write(tmp_path, "training.csv", keras))
    assert f.format == "csv_metrics" and train_steps(metrics) == [0, 1, 2]
    assert value(metrics, 1, "loss") == 1.0 and value(metrics, 1, "eval_loss") == 1.0
    assert value(metrics, 2, "epoch") == 2  # kept as a metric: a record stands for a whole epoch
    # an epoch column without any loss beside it is no training table
    assert detect_format(write(tmp_path, "sizes.csv", "epoch,width,height\n1,2,3\n2,2,3\n"))[0] != "csv_metrics"


def test_nequip_batch_table_steps_are_the_runs_batch_count(store):
    metrics, _, f, facts = real(store, "nequip-si-80-configs-fp64-metrics-batch-train-healthy-800-steps")
    steps = train_steps(metrics)
    assert f.format == "csv_metrics" and steps == list(range(facts["first_step"], facts["last_step"] + 1))
    assert value(metrics, 17, "epoch") == 2 and value(metrics, 1, "loss") == pytest.approx(3.0326)


def test_epoch_counted_csvs_one_row_per_epoch_or_the_runs_row_count(tmp_path):
    def steps(text, chunk_bytes=None):
        path = write(tmp_path, "m.csv", text)
        result = csv_metrics.parse(SourceFile(path=path, name=path.name), chunk_bytes=chunk_bytes)
        return result.tables["metrics"].filter(pl.col("name") == "loss").get_column("step").to_list()

    # `batch` here is a batch size: each row is its own epoch, the epoch is the step
    assert steps("epoch,batch,loss\n1,32,2.0\n2,32,1.5\n3,32,1.2\n") == [1, 2, 3]
    # one epoch of batches (a run that crashed in it): every row a record, none merged into the epoch's first
    assert steps("epoch,batch,loss\n" + "".join(f"0,{b},{2 - b / 100}\n" for b in range(50))) == list(range(1, 51))
    # a per-batch table with only `epoch`, read in small chunks: the row count runs across them
    text = "epoch,loss,lr\n" + "".join(f"{e},{2 - b / 100},0.1\n" for e in range(3) for b in range(100))
    assert steps(text, chunk_bytes=512) == steps(text) == list(range(1, 301))


# -- tqdm bars without a total; a console saved with its redraws --------------------------------------------


def test_gluonts_bar_without_a_total_takes_its_postfix_epoch(store):
    metrics, _, f, facts = real(store, "pytorch-ts-39-timegrad-electricity-avg-epoch-loss-rises-then-nan-epoch5")
    steps = train_steps(metrics)
    assert f.format == "tqdm_postfix" and steps == list(range(facts["first_step"], facts["last_step"] + 1))
    assert value(metrics, 0, "avg_epoch_loss") == pytest.approx(0.945)
    assert math.isnan(value(metrics, facts["first_nonfinite_step"], "avg_epoch_loss"))


def test_an_epoch_stepped_bar_saved_with_its_redraws_keeps_each_epochs_last(tmp_path, store):
    # a GluonTS trainer's console saved by nohup: 50 redraws per epoch on one physical line each, the postfix
    # holding the epoch's running loss; the record of epoch e is its last redraw (a NaN late in the epoch shows)
    epochs = []
    for e in range(6):
        redraws = [
            f"{i}it [00:0{i % 10}, 4.3it/s, avg_epoch_loss={1 + i / 100 + e:.3f}, epoch={e}]" for i in range(1, 51)
        ]
        if e == 4:
            redraws[-1] = "50it [00:09, 4.3it/s, avg_epoch_loss=nan, epoch=4]"
        epochs.append("\r".join(redraws))
    path = tmp_path / "gluonts.log"
    path.write_bytes(("\n".join(epochs) + "\n").encode())
    metrics, _, f = ingest(store, path)
    assert f.format == "tqdm_postfix" and train_steps(metrics) == [0, 1, 2, 3, 4, 5]
    assert value(metrics, 0, "avg_epoch_loss") == pytest.approx(1.5) and value(
        metrics, 5, "avg_epoch_loss"
    ) == pytest.approx(6.5)
    assert math.isnan(value(metrics, 4, "avg_epoch_loss"))


def test_console_with_its_bar_redraws_breaks_lines_at_every_cr(store):
    metrics, _, f, facts = real(store, "gaussian-splatting-truck-30k-opacity-reset-spikes")
    steps = train_steps(metrics)
    assert f.format == "tqdm_postfix"
    # every loss value at the counter where it first appears (0, 10, ..., 29990), and the bar's last redraw
    assert steps[0] == facts["first_step"] and abs(len(steps) - facts["step_records"]) <= 1
    assert value(metrics, 10, "loss") == pytest.approx(0.2493386)


def test_cr_line_ends_are_decided_on_the_head_the_same_whole_chunked_and_counted(tmp_path, store):
    redraws = "".join(f"\rbar: {i}/100 [00:01<00:09, 9.9it/s, loss={1 + i / 100:.3f}]" for i in range(100))
    text = ("header line\r\n" + redraws + "\n" + "done\n").encode()
    assert lone_cr_endings(text)
    assert not lone_cr_endings(b"a\nb\rc\n")  # a redraw or two in an LF file: redraws inside lines
    assert not lone_cr_endings(b"a\r\nb\r\n")  # CRLF
    path = tmp_path / "nohup.out"
    path.write_bytes(text)
    whole = lines_from_bytes(text)
    chunked = pl.concat(list(SourceFile(path=path, name="x").iter_line_chunks(chunk_bytes=37)))
    # header (its CRLF one line end), the empty line the first redraw's CR ends, 100 redraws, done
    assert whole.equals(chunked) and whole.height == 103
    metrics, _, f = ingest(store, path)
    assert f.format == "tqdm_postfix" and len(train_steps(metrics)) == 100
    sources = store.sources("r")
    assert sources.get_column("lines").to_list() == [103]
    # the report's re-read of raw lines splits the same way, and nothing past the last line
    from spikeforensics.attribute.raw_lines import _read_spans

    got = _read_spans(path, [(1, 3), (100, 110)])
    assert got[1] == "header line" and got[3].startswith("bar: 0/100") and max(got) == 103
    assert got[103] == "done" and got[102].startswith("bar: 99/100")


# -- torch_print: a detached loss printed alone -----------------------------------------------------------


def test_a_file_of_detached_loss_prints_is_a_loop(tmp_path, store):
    metrics, _, f, facts = real(store, "chatglm-finetune-lora-32-notebook-loss-nan-from-second-step")
    values = series(metrics, "loss")
    assert f.format == "torch_print" and len(values) == facts["step_records"] == 10
    assert values[0][1] == pytest.approx(3.2207) and all(math.isnan(v) for _, v in values[1:])
    # the same prints among other output are not taken: nothing says what the tensor is
    mixed = write(tmp_path, "mixed.log", "tensor(3.2207, device='cuda:0')\nloading weights\ntensor(2.1)\ntensor(1.9)\n")
    assert detect_format(mixed)[0] != "torch_print"
    # the crash's traceback after them does not count against them (sniff and parse agree)
    crashed = (
        "tensor(2.9, device='cuda:0')\n" * 500
        + 'Traceback (most recent call last):\n  File "t.py", line 3\nRuntimeError: x\n'
    )
    metrics, _, f = ingest(store, write(tmp_path, "crashed.log", crashed), run="c")
    assert f.format == "torch_print" and len(series(metrics, "loss")) == 500


def test_raw_lines_of_a_lone_cr_file_are_read_in_small_chunks_up_to_the_last_line_wanted(tmp_path, monkeypatch):
    """The report's raw lines of a lone-CR file come from chunks of `RAW_CHUNK_BYTES` (not ingest's 32 MiB blocks,
    held several times over: 0.3 GB for a 2.6 GB log) and the reading stops after the last line wanted."""
    from spikeforensics.attribute import raw_lines
    from spikeforensics.ingest.base import SourceFile as Source

    text = "".join(f"step {i} loss {1 + i / 1000:.4f}\r" for i in range(1, 2001)).encode()
    path = tmp_path / "cr.log"
    path.write_bytes(text)
    chunks_read = []
    original = Source.iter_line_chunks

    def counted(self, chunk_bytes=32 << 20):
        for chunk in original(self, chunk_bytes):
            chunks_read.append(chunk.height)
            yield chunk

    monkeypatch.setattr(Source, "iter_line_chunks", counted)
    monkeypatch.setattr(raw_lines, "RAW_CHUNK_BYTES", 1024)
    got = raw_lines._read_spans(path, [(1, 2), (99, 101)])
    assert got == {n: f"step {n} loss {1 + n / 1000:.4f}" for n in (1, 2, 99, 100, 101)}
    assert sum(chunks_read) < 200  # ~40 lines a chunk: stopped after line 101, not at line 2,000
    assert raw_lines._read_spans(path, [(1999, 2005)])[2000] == "step 2000 loss 3.0000"
