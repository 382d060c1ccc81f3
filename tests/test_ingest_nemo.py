"""NVIDIA NeMo's two console forms, as pasted in NeMo threads: NeMo 2's ProgressPrinter
(`Training epoch 0, iteration 120/149 | lr: 3e-05 | ... | reduced_train_loss: 1.233 | ...`, NVIDIA-NeMo
PR #10128 and bionemo-recipes PR #740: no closing pipe) read by the Megatron grammar without counting
its lines as cut, and NeMo 1's Lightning bar (`..., loss=3.1, v_num=, reduced_train_loss=3.090,
global_step=794.0, ...]`, NeMo-Framework-Launcher#55) where Lightning's smoothed bar `loss` gives way
to the logged `reduced_train_loss`."""

from __future__ import annotations

import pytest
from _ingest_helpers import ingest, train_steps, value, write

from spikeforensics.ingest import detect_format


def test_nemo2_progress_printer_lines_are_whole_records(store, tmp_path):
    lines = [
        f"Training epoch 0, iteration {i}/9 | lr: 0.0006 | consumed_samples: {32 * (i + 1)} | global_batch_size: 32 "
        f"| global_step: {i} | reduced_train_loss: {11.02 - i * 0.4:.4g}"
        + (" | train_step_timing in s: 0.03146 | val_loss: 4.106" if i % 2 else "")
        for i in range(10)
    ]
    path = write(tmp_path, "nemo2.log", "\n".join(lines) + "\n")
    assert detect_format(path)[0] == "megatron"
    metrics, _, outcome = ingest(store, path)
    assert outcome.unparsed == 0  # no line is taken for one that lost its tail
    assert train_steps(metrics) == list(range(10))
    assert value(metrics, 9, "loss") == pytest.approx(7.42)  # the last field is kept, not dropped as cut
    assert value(metrics, 9, "eval_loss") == pytest.approx(4.106)


def test_a_megatron_record_without_its_closing_pipe_is_still_cut(store, tmp_path):
    lines = [
        f" iteration {i}/ 100 | consumed samples: {i * 8} | learning rate: 1.0E-04 | lm loss: {3.0 - i / 100:.6E} |"
        for i in range(1, 10)
    ]
    lines.append(" iteration 10/ 100 | consumed samples: 80 | learning rate: 1.0E-04 | lm loss: 2.9")  # pasted, cut
    path = write(tmp_path, "megatron.log", "\n".join(lines) + "\n")
    metrics, _, outcome = ingest(store, path)
    assert outcome.unparsed == 1


def test_lightning_smoothed_bar_loss_gives_way_to_the_logged_loss(store, tmp_path):
    bars = [
        f"Epoch 0:   1%|          | {795 + i}/77225 [9:07:58<878:01:48, 41.36s/it, loss=3.1, v_num=, "
        f"reduced_train_loss={3.09 - i / 100:.3f}, global_step={794 + i}.0, consumed_samples=1.63e+6]"
        for i in range(20)
    ]
    path = write(tmp_path, "nemo1.log", "\n".join(bars) + "\n")
    metrics, _, _ = ingest(store, path)
    assert train_steps(metrics)[:3] == [794, 795, 796]
    assert value(metrics, 800, "loss") == pytest.approx(3.03)  # reduced_train_loss, not the bar's 3.1
    assert value(metrics, 800, "loss_smoothed") == pytest.approx(3.1)
    # a bar with only Lightning's `loss` keeps it as the loss
    alone = write(tmp_path, "pl.log", "\n".join(b.replace("reduced_train_loss", "acc") for b in bars) + "\n")
    metrics, _, _ = ingest(store, alone, run="r2")
    assert value(metrics, 800, "loss") == pytest.approx(3.1)
