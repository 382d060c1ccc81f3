"""A loss trained towards 0 (detect/converged.py): its late relative wobbles are notes, its real rises are not.
First met in sample_logs/real/fresh22 (GE2E speaker verification, 4.0 -> 0.005 over 58,035 steps: 60
warnings on a healthy run)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
from _detect_synth import run_from

from spikeforensics import api
from spikeforensics import detect as det
from spikeforensics.params import Params

REAL = Path(__file__).resolve().parents[1] / "sample_logs" / "real"


def test_a_healthy_loss_converging_to_zero_with_3_to_5x_batches_is_healthy(tmp_path):
    folder = REAL / "fresh22" / "tensorflow-ti-sv-ge2e-speaker-verification-58035-steps-healthy"
    facts = tomllib.loads((folder / "FACTS.toml").read_text())
    api.ingest([folder / f for f in facts["files"]], run_id="r", store=tmp_path)
    d = api.diagnose(api.load_run("r", tmp_path))
    assert facts["healthy"] and d["verdict"]["status"] == "healthy"
    quieted = [n for n in d["notes"] if "converged" in n.get("summary", "")]
    assert len(quieted) >= 10  # the bumps are still reported, as notes


def converging(n: int = 6000, seed: int = 1):
    """A loss from 4 towards 0.01 with heavy multiplicative per-batch noise (no grad norm logged)."""
    rng = np.random.default_rng(seed)
    step = np.arange(1, n + 1)
    loss = (4.0 * np.exp(-step / 500.0) + 0.01) * np.exp(rng.normal(0, 0.25, n))
    return {"step": step, "loss": loss}


def incidents_at(cols, lo, hi):
    incidents, notes = det.detect_incidents(run_from(cols), Params())
    return [i for i in incidents if i.step_start <= hi and i.step_end >= lo], notes


def test_a_few_hundredths_on_a_converged_loss_is_a_note_a_climb_towards_the_start_is_not():
    cols = converging()
    cols["loss"][4000:4010] = 0.06  # 6x its level for 10 records: 1.2% of the loss it started from
    hits, notes = incidents_at(cols, 4000, 4010)
    assert not hits
    assert [f for f in notes if f.facts.get("converged_loss") and f.step_start <= 4010 and f.step_end >= 4000]
    cols = converging()
    cols["loss"][4000:4010] = 0.6  # 60x: 15% of the starting loss, the run losing what it learnt
    hits, _ = incidents_at(cols, 4000, 4010)
    assert hits


def test_the_same_bump_on_a_loss_that_has_not_converged_keeps_its_severity():
    cols = converging()
    cols["loss"] = cols["loss"] + 1.0  # the same noise shape on a floor at 25% of the start (an LLM-like loss)
    cols["loss"][4000:4010] *= 3.0
    hits, _ = incidents_at(cols, 4000, 4010)
    assert hits
