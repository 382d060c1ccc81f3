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
