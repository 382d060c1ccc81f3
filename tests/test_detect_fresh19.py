"""Judgements first needed on sample_logs/real/fresh19: a per-batch loss whose counter restarts every epoch
(an attempt per epoch, each too short for a band on its own) and whose own noise passes a 1.3x band on half
its records: a one-batch bump there is judged on the whole run and on the run's own noise."""

from __future__ import annotations

import numpy as np
from _detect_synth import run_from
from _ingest_helpers import real_case

from spikeforensics import api
from spikeforensics.detect import hard_spike
from spikeforensics.params import Params


def per_epoch_batches(epochs: int = 30, per_epoch: int = 44, seed: int = 5) -> dict:
    """A converged per-batch classification loss near 0.002 with a heavy multiplicative tail, printed every 100
    iterations with a step that restarts each epoch (VinVL's `Epoch: [E], step: [S]`)."""
    rng = np.random.default_rng(seed)
    n = epochs * per_epoch
    loss = 0.002 * np.exp(rng.standard_t(3, n) * 0.3)
    step = np.tile(np.arange(100, 100 * (per_epoch + 1), 100), epochs)
    attempt = np.repeat(np.arange(epochs, dtype=np.int32), per_epoch)
    return {"step": step, "loss": loss, "attempt": attempt}


def test_a_hard_batch_on_an_epoch_restarting_heavy_tailed_loss_is_a_note():
    cols = per_epoch_batches()
    at = 20 * 44 + 10  # epoch 20, its 11th record: 15x the run's median, back at once
    cols["loss"][at] = 0.03
    cols["loss"][at + 1] = 0.004  # the next batch: 2x the median, above a 1.3x band, ordinary for this run
    run = run_from({"step": cols["step"], "loss": cols["loss"]}, attempt=cols["attempt"])
    hit = [f for f in hard_spike.detect(run, Params()) if f.attempt == 20 and f.step_start <= 1100 <= f.step_end]
    assert [f.severity for f in hit] == ["info"] and hit[0].facts.get("loss_bump")


def test_the_same_bump_on_a_calm_loss_stays_an_incident():
    cols = per_epoch_batches()
    rng = np.random.default_rng(1)
    calm = 0.002 * np.exp(rng.normal(0, 0.05, cols["loss"].size))
    at = 20 * 44 + 10
    calm[at] = 0.03
    run = run_from({"step": cols["step"], "loss": calm}, attempt=cols["attempt"])
    hit = [f for f in hard_spike.detect(run, Params()) if f.attempt == 20 and f.step_start <= 1100 <= f.step_end]
    assert [f.severity for f in hit] == ["critical"]


def test_paddleseg_encnet_80k_iterations_is_healthy(store):
    real_case(store, "fresh19", "paddleseg-encnet-cityscapes-r101-80k-iters-healthy-4gpu")
    assert api.diagnose(api.load_run("r", store))["verdict"]["status"] == "healthy"


def test_a_hard_batch_echoed_by_the_next_record_is_a_note_on_a_heavy_tail():
    cols = per_epoch_batches()
    at = 20 * 44 + 10
    cols["loss"][at], cols["loss"][at + 1], cols["loss"][at + 2] = 0.02, 0.008, 0.002  # 10x, 4x, then back
    run = run_from({"step": cols["step"], "loss": cols["loss"]}, attempt=cols["attempt"])
    hit = [f for f in hard_spike.detect(run, Params()) if f.attempt == 20 and f.step_start <= 1100 <= f.step_end]
    assert hit and all(f.severity == "info" for f in hit)


def test_an_lr_decayed_to_the_last_digit_of_its_print_is_no_stall():
    from spikeforensics.detect import stall

    n = 300
    step = np.arange(1, n + 1)
    lr = np.round(2e-5 * (1 - step / (n - 20)).clip(0), 6)  # linear to 0, printed with 6 decimals: ..., 1e-06, 0.0
    loss = np.linspace(0.010, 0.011, n)  # not falling
    assert (lr == 0).sum() >= 20 and lr[lr > 0].min() == 1e-06
    assert stall.detect(run_from({"step": step, "loss": loss, "lr": lr}), Params()) == []
    frozen = np.where(step > 150, 0.0, 2e-5)  # an LR that drops from its peak straight to 0 is a stall
    assert [f.kind for f in stall.detect(run_from({"step": step, "loss": loss, "lr": frozen}), Params())] == [
        "no_progress"
    ]


def test_vinvl_batch_loss_30_epochs_is_healthy(store):
    real_case(store, "fresh19", "custom-vinvl-paddle-coco-retrieval-30-epochs-batch-loss-heavy-tail-healthy-132k")
    assert api.diagnose(api.load_run("r", store))["verdict"]["status"] == "healthy"


def test_a_loss_collapsing_four_orders_in_a_few_records_is_no_progress():
    from spikeforensics.detect import stall

    # OLMo#692 from scratch: 12.18, then 1.8e-06, then 0.0 (and it stays there)
    olmo = run_from({"step": np.arange(1, 4), "loss": np.array([12.18, 1.8e-06, 0.0])})
    found = stall.detect(olmo, Params())
    assert [(f.kind, f.severity, f.facts["cause"], f.step_start) for f in found] == [
        ("no_progress", "warning", "loss_collapse", 2)
    ]
    # a fine-tune memorising its data falls as far, over hundreds of records: no collapse
    slow = run_from({"step": np.arange(1, 401), "loss": 2.0 * np.exp(-np.linspace(0, 11, 400))})
    assert stall.detect(slow, Params()) == []
    # a collapse that comes back up is no stuck loss either
    back = run_from({"step": np.arange(1, 8), "loss": np.array([12.2, 1e-6, 0.0, 8.1, 7.5, 7.2, 7.0])})
    assert stall.detect(back, Params()) == []
