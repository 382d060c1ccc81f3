"""Readers first needed on sample_logs/real/fresh22: fairseq-hydra-train's `[time][train_inner][INFO] - {...}`
lines, and WeTTS's `Epoch 1 [TRAIN] progress 10/2754 loss ...` beside its `[CV]` validation lines."""

from __future__ import annotations

import math

from _ingest_helpers import real_case, series, train_steps


def real(store, name):
    return real_case(store, "fresh22", name)


def test_fairseq_hydra_json_lines(store):
    metrics, events, f, facts = real(store, "fairseq-wav2vec2-ctc-finetune-hydra-log-9600-updates-healthy")
    steps = train_steps(metrics)
    assert f.format == "fairseq" and len(steps) == facts["step_records"] == 103
    assert steps[0] == 85 and steps[-1] == facts["last_step"] == 9600
    # the first inner line (`"num_updates": "200"`) and the first epoch summary (`"train_num_updates": "85"`)
    assert dict(series(metrics, "loss"))[200] == 844.186 and dict(series(metrics, "loss"))[85] == 887.379
    assert events.filter(events["kind"] == "overflow").height == facts["overflow_count"] == 16


def test_wetts_progress_fraction_and_cv_lines(store):
    name = "wetts-251-prosody-polyphone-tinybert-intermittent-nan-loss-train-record-20"
    metrics, _, f, facts = real(store, name)
    loss = series(metrics, "loss")
    assert f.format == "generic_steps" and len(loss) == facts["step_records"] == 3
    # `Epoch 1 ... progress 20/2754`: batch 20 of 2754 in epoch 1 after an epoch 0, (1 - 0) * 2754 + 20
    assert [s for s, _ in loss] == [2754, 2764, 2774] and math.isnan(loss[2][1])
    assert len(series(metrics, "eval_loss", train=False)) == 6
