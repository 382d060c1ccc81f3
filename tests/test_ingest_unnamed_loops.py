"""Custom loops that print their losses without a step counter or without names (generic_steps): MOERec's
per-epoch `train loss = x` beside an unlabelled validation `loss: y` (sample_logs/real/fresh15), and a GAN loop's
`step: d_loss g_loss` (sample_logs/real/fresh3, whose `0: ` the launcher-prefix stripper took for an srun rank)."""

from __future__ import annotations

import math

import pytest
from _ingest_helpers import ingest, real_case, series, write


def test_train_loss_equals_lines_are_records_and_the_unnamed_loss_is_the_validation(store):
    metrics, _, f, facts = real_case(store, "fresh15", "custom-moerec-wandb-output-374-epochs-healthy")
    train, evals = series(metrics, "loss"), series(metrics, "eval_loss", train=False)
    assert f.format == "generic_steps" and len(train) == facts["step_records"] == 374
    # no counter is printed: step-less records in file order
    assert train[0] == (None, pytest.approx(1.2836737632751465))
    assert len(evals) == 374 and evals[0][1] == pytest.approx(1.4166021347045898)


def test_a_per_batch_unnamed_loss_beside_an_epoch_summary_stays_the_training_loss(tmp_path, store):
    # many more unnamed lines than `train loss` lines: the unnamed ones are the per-batch records, not an evaluation
    lines = []
    for epoch in range(4):
        lines += [f"loss: {2.0 - epoch * 0.1 - i * 0.01:.4f}" for i in range(5)]
        lines.append(f"train loss = {1.9 - epoch * 0.1:.4f}")
    metrics, _, f = ingest(store, write(tmp_path, "out.log", "\n".join(lines) + "\n"))
    assert f.format == "generic_steps"
    assert len(series(metrics, "loss")) == 24 and series(metrics, "eval_loss", train=False) == []


def test_python_source_assignments_are_no_records(tmp_path, store):
    # `loss = 0.0` is what a script's source holds; only a two-word name before `=` reads as a log
    text = "def f():\n    loss = 0.0\n    loss = 0.0\n    loss = 0.0\n    return loss\n"
    from spikeforensics.ingest import IngestError

    with pytest.raises(IngestError):
        ingest(store, write(tmp_path, "train.py.txt", text))


def test_count_colon_unnamed_values(store):
    metrics, _, f, facts = real_case(store, "fresh3", "tensorflow-gan-intro-1-minibatch-eps-inf-nan-from-step0")
    loss = series(metrics, "loss")
    assert f.format == "generic_steps" and len(loss) == facts["step_records"] == 21
    assert [s for s, _ in loss][:3] == [0, 10, 20] and loss[0][1] == math.inf and math.isnan(loss[1][1])
    assert len(series(metrics, "column_2")) == 21


def test_count_colon_values_need_rising_counts(tmp_path, store):
    # per-class scores numbered 0..2 twice (two evaluations) are no training loop
    text = "".join(f"{c}: 0.{5 + c} 0.{6 + c}\n" for _ in range(2) for c in range(3))
    from spikeforensics.ingest import IngestError

    with pytest.raises(IngestError):
        ingest(store, write(tmp_path, "scores.txt", text))
    metrics, _, f = ingest(
        store, write(tmp_path, "gan.log", "".join(f"{i * 5}: {1.3 - i / 50} 0.7\n" for i in range(12)))
    )
    assert f.format == "generic_steps" and [s for s, _ in series(metrics, "loss")] == list(range(0, 60, 5))
