"""Readers first needed on sample_logs/real/fresh21: a TSV whose step column is not the first (3D-ResNets'
`train_batch.log`), DCGAN-tensorflow's counter in an open bracket, and Knover's evaluation section."""

from __future__ import annotations

from _ingest_helpers import real_case, series, train_steps


def real(store, name):
    return real_case(store, "fresh21", name)


def test_tsv_with_an_iter_column_after_the_epoch(store):
    metrics, _, f, facts = real(store, "efficient-3dcnns-kinetics-resnet50-epochs-42-43-per-iter-healthy-5959")
    steps = train_steps(metrics)
    assert f.format == "column_table" and len(steps) == facts["step_records"] == 5959
    assert steps[0] == facts["first_step"] == 216891 and steps[-1] == facts["last_step"]
    assert series(metrics, "loss")[0] == (216891, 1.5619412660598755)


def test_dcgan_tensorflow_open_bracket_counter(store):
    metrics, _, f, facts = real(store, "dcgan-tensorflow-imagenet-32622-iters-d-loss-drift-late-g-loss-spikes")
    steps = train_steps(metrics)
    assert f.format == "generic_steps" and len(steps) == facts["step_records"] == 32622
    assert steps[:3] == [1, 2, 3] and series(metrics, "d_loss")[0] == (1, 7.66344833)


def test_knover_evaluation_section_is_no_training(store):
    metrics, _, f, facts = real(store, "knover-luge-dialogue-unified-transformer-12l-1000-step-warmup-healthy")
    assert f.format == "generic_steps" and train_steps(metrics) == list(range(1, 1001))
    assert len(train_steps(metrics)) == facts["step_records"]
    evals = series(metrics, "eval_loss", train=False)
    assert len(evals) == 15483 and evals[0][1] == 4.0102
