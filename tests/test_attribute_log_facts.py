"""Run-level facts from what a log prints (attribute/log_facts.py), on hand-made frames
and on real logs of the corpus (sample_logs/real/dev)."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from spikeforensics import api
from spikeforensics.attribute.log_facts import FACTS, log_facts
from spikeforensics.params import Params
from spikeforensics.rundata import RunData
from tests.attribute_synth import metric_rows

DEV = Path(__file__).parents[1] / "sample_logs" / "real" / "dev"
P = Params.load()


def run_of(loss=None, grad=None, scale=None, events=None, first_step=1, lr=None):
    frames = []
    for name, values in (("loss", loss), ("grad_norm", grad), ("loss_scale", scale), ("lr", lr)):
        if values is not None:
            frames.append(metric_rows(name, range(first_step, first_step + len(values)), values))
    ev = None
    if events:
        ev = pl.DataFrame(
            [
                {
                    "source": "train.log",
                    "line": i,
                    "step": None,
                    "rank": None,
                    "attempt": 0,
                    "kind": k,
                    "time": None,
                    "detail": d,
                }
                for i, (k, d) in enumerate(events)
            ],
            schema_overrides={"step": pl.Int64, "rank": pl.Int32, "attempt": pl.Int32, "time": pl.Datetime("us")},
        )
    return RunData.from_frames(metrics=pl.concat(frames) if frames else None, events=ev)


def test_every_fact_is_documented():
    facts = log_facts(run_of(loss=[2.0, 1.9]), P)
    assert set(facts) == set(FACTS)


def test_nan_from_the_first_updates_only_when_the_log_starts_at_the_start():
    loss = [2.3, math.nan, math.nan] + [2.0] * 20
    assert log_facts(run_of(loss=loss), P)["nan_at_start"]
    assert not log_facts(run_of(loss=loss, first_step=7000), P)["nan_at_start"]  # an excerpt from step 7000
    late = [2.3] * 30 + [math.nan]
    assert not log_facts(run_of(loss=late), P)["nan_at_start"]


def test_precision_inferred_from_loss_scale_declared_from_events():
    assert log_facts(run_of(loss=[2.0] * 5, scale=[65536.0] * 5), P)["precision"] == "fp16"
    assert log_facts(run_of(loss=[2.0] * 5), P)["precision"] == ""
    declared = log_facts(run_of(loss=[2.0] * 5, events=[("precision", '{"mode": "bf16"}')]), P)
    assert declared["precision"] == "bf16" and declared["precision_declared"]


def test_loss_scale_floor_from_series_or_overflow_detail():
    assert log_facts(run_of(loss=[2.0] * 4, scale=[8.0, 4.0, 2.0, 1.0]), P)["loss_scale_floor"]
    assert not log_facts(run_of(loss=[2.0] * 4, scale=[8.0, 4.0, 2.0, 2.0]), P)["loss_scale_floor"]
    ev = [("overflow", '{"old_scale": 2.0, "new_scale": 1.0, "source_format": "deepspeed"}')]
    assert log_facts(run_of(loss=[2.0] * 4, events=ev), P)["loss_scale_floor"]  # DeepSpeed's minimum is 1
    fairseq = [("overflow", '{"new_scale": 1.0, "source_format": "fairseq"}')]
    assert not log_facts(run_of(loss=[2.0] * 4, events=fairseq), P)["loss_scale_floor"]  # fairseq halves on to 1e-4
    stuck = [("overflow", '{"old_scale": 1.0, "new_scale": 1.0}')]
    assert log_facts(run_of(loss=[2.0] * 4, events=stuck), P)["loss_scale_floor"]  # a halving that could not happen


def test_skipped_nonfinite_updates_recover():
    loss = [5.6, 5.3, math.nan, 5.7, 5.6, math.nan, 5.1, 5.5]
    f = log_facts(run_of(loss=loss), P)
    assert f["nonfinite_episodes"] == 2 and f["nonfinite_recovers"]
    dies = [5.6, 5.3, math.nan, math.nan, math.nan]
    f = log_facts(run_of(loss=dies), P)
    assert f["nonfinite_episodes"] == 1 and not f["nonfinite_recovers"]


def test_masked_zero_loss_and_explosion_and_astronomical_norm():
    assert log_facts(run_of(loss=[3.8, 0.0, 0.0, 0.0]), P)["loss_zero_collapse"]
    assert not log_facts(run_of(loss=[0.0, 0.0]), P)["loss_zero_collapse"]  # nothing says it is masked
    assert log_facts(run_of(loss=[0.0, 0.0, 0.0]), P)[
        "loss_zero_collapse"
    ]  # every record of a log: no model trains at 0
    assert log_facts(run_of(loss=[0.0, 0.0], grad=[math.nan, math.nan]), P)["loss_zero_collapse"]
    f = log_facts(run_of(loss=[5.6, 5.3, 153318.95, 5.7], grad=[1.0, 2.0, 3e12, 1.0]), P)
    assert f["loss_explodes"] and f["grad_norm_astronomical"] and f["loss_max_ratio"] > 1e4


@pytest.mark.skipif(not (DEV / "hf-trainer-gemma-pytorch-24-loss-nan").is_dir(), reason="corpus case absent")
def test_real_intermittent_nan_log(tmp_path):
    # a Gemma fine-tune (HF-style dicts): loss alternating between ~5 and nan, one 153318 blow-up
    api.ingest([DEV / "hf-trainer-gemma-pytorch-24-loss-nan"], run_id="g", store=tmp_path)
    f = log_facts(api.load_run("g", tmp_path), P)
    assert f["nonfinite_recovers"] and f["nonfinite_episodes"] >= 5 and f["loss_explodes"]


def test_a_nan_out_of_a_flat_loss_has_no_build_up():
    nan = float("nan")
    # litgpt#291's shape: noisy but level micro-batch losses, then NaN on the record after the first update
    flat = log_facts(run_of(loss=[0.53, 1.55, 2.33, 1.14, 1.30, 3.67, 1.13, 1.12, nan, nan]), P)
    assert flat["nan_without_rise"] is True
    # an LR-driven divergence climbs first: the last finite loss is far above its median before
    climb = log_facts(run_of(loss=[2.0, 1.9, 1.8, 1.9, 3.5, 9.0, 40.0, nan]), P)
    assert climb["nan_without_rise"] is False
    # a grad norm that climbs while the loss stays level is a build-up too
    both = log_facts(run_of(loss=[2.0, 1.9, 1.8, 1.9, 1.9, nan], grad=[1.0, 1.1, 0.9, 1.0, 30.0, nan]), P)
    assert both["nan_without_rise"] is False
    # too few finite records before the NaN to call anything absent; no NaN at all
    assert log_facts(run_of(loss=[2.0, 1.9, nan]), P)["nan_without_rise"] is False
    assert log_facts(run_of(loss=[2.0, 1.9, 1.8, 1.7]), P)["nan_without_rise"] is False


def test_a_nonfinite_grad_norm_beside_a_finite_loss_that_goes_on_is_a_skipped_update():
    nan = float("nan")
    # xtuner#187's shape: grad_norm nan on the last two records, the loss finite and falling
    assert (
        log_facts(run_of(loss=[2.75, 2.62, 2.67, 2.77, 2.51, 2.46], grad=[3.06, 2.76, 2.76, 2.51, nan, nan]), P)[
            "grad_nonfinite_skipped"
        ]
        is True
    )
    # the loss goes NaN too: an applied bad update, not a skip
    assert log_facts(run_of(loss=[2.7, 2.6, nan, nan], grad=[3.0, 2.8, nan, nan]), P)["grad_nonfinite_skipped"] is False
    # the NaN grad norm is the last thing the log prints: nothing shows the run went on
    assert log_facts(run_of(loss=[2.7, 2.6, 2.5], grad=[3.0, 2.8, nan]), P)["grad_nonfinite_skipped"] is False


def test_a_nan_before_the_learning_rate_could_move_the_weights():
    # NaN in the loss of step 1 (the initial weights' forward pass, or one update) of a counter that
    # moves within an epoch; a counter of epochs (Keras, fastai) says nothing about updates
    by_update = run_of(loss=[math.nan, math.nan, math.nan], lr=None)
    epoch = metric_rows("epoch", [1, 2, 3], [0.0, 0.01, 0.02])
    by_update = RunData.from_frames(metrics=pl.concat([by_update.metrics, epoch]))
    assert log_facts(by_update, P)["nan_before_lr_acts"]
    assert not log_facts(run_of(loss=[math.nan, math.nan, math.nan]), P)["nan_before_lr_acts"]
    # NaN at step 5 of a warm-up at 1e-8 (the LR summed over the updates is ~5e-8)
    warm = dict(loss=[2.1, 2.0, 2.0, 2.1, math.nan], lr=[1e-8, 2e-8, 3e-8, 4e-8, 5e-8])
    assert log_facts(run_of(**warm), P)["nan_before_lr_acts"]
    # the same NaN after five updates at 1e-3: the LR has moved the weights
    moved = dict(loss=[2.1, 2.0, 2.0, 2.1, math.nan], lr=[1e-3] * 5)
    assert not log_facts(run_of(**moved), P)["nan_before_lr_acts"]
    # without an LR series only step <= first_update_steps says it
    assert not log_facts(run_of(loss=[2.1, 2.0, math.nan]), P)["nan_before_lr_acts"]
    # an excerpt from step 7000 does not start at the start of training
    assert not log_facts(run_of(loss=[math.nan] * 3, first_step=7000), P)["nan_before_lr_acts"]
    # the budget is a parameter
    loose = Params.load()
    loose.set("attribution.negligible_lr_budget", 1e-2)
    assert log_facts(run_of(**moved), loose)["nan_before_lr_acts"]


def test_batches_rejected_by_a_loss_check_are_counted_and_say_nothing_about_precision():
    rejected = '{"metric": "loss", "reason": "invalid_loss", "value": 250000064.0, "skipped": true}'
    facts = log_facts(run_of(loss=[2.0, 1.9], events=[("skipped_step", rejected)] * 3), P)
    assert facts["losses_rejected"] == 3
    assert not facts["fp16"] and facts["precision"] == ""  # a sanity check skips batches in any precision
    overflow = '{"old_scale": 65536.0, "new_scale": 32768.0}'
    assert log_facts(run_of(loss=[2.0, 1.9], events=[("overflow", overflow)]), P)["fp16"]


def terms_run(terms: dict, steps):
    return RunData.from_frames(metrics=pl.concat([metric_rows(n, steps, v) for n, v in terms.items()]))


def test_a_log_non_finite_from_its_first_record_at_the_start_never_was_finite():
    nan = math.nan
    # printed every 100 steps from step 100 (gluoncv's `[Batch 99]` ...): the first record is one interval in
    assert log_facts(terms_run({"loss": [nan, nan, nan]}, [100, 200, 300]), P)["nan_never_finite"]
    assert log_facts(terms_run({"loss": [nan, nan]}, [1, 2]), P)["nan_never_finite"]
    # an excerpt from step 7000 has no start; a finite first record is a climb the log shows; a recovery
    assert not log_facts(terms_run({"loss": [nan, nan, nan]}, [7000, 7100, 7200]), P)["nan_never_finite"]
    assert not log_facts(terms_run({"loss": [2.3, nan, nan]}, [0, 100, 200]), P)["nan_never_finite"]
    assert not log_facts(terms_run({"loss": [nan, 2.1, 2.0]}, [0, 100, 200]), P)["nan_never_finite"]


def test_a_nan_confined_to_some_terms_needs_a_finite_non_zero_loss_term_beside_it():
    nan = math.nan
    steps = [323, 324, 325]
    # PyTorch-YOLOv3 #13: x, y ... NaN, `conf` finite on every record: the shared weights are intact
    yolo = {"loss": [nan] * 3, "x": [nan] * 3, "cls": [nan] * 3, "conf": [0.755, 0.76, 0.761]}
    facts = log_facts(terms_run(yolo, steps), P)
    assert facts["nonfinite_confined"] and facts["nonfinite_component"] == "cls, x"
    # a term printed as 0 (an empty selection) or an accuracy (argmax of NaN logits) says nothing of the weights
    zero = {"loss": [nan] * 3, "loss_box": [nan] * 3, "loss_entry": [0.0] * 3}
    assert not log_facts(terms_run(zero, steps), P)["nonfinite_confined"]
    acc = {"loss": [nan] * 3, "loss_box": [nan] * 3, "acc": [0.1] * 3}
    assert not log_facts(terms_run(acc, steps), P)["nonfinite_confined"]
