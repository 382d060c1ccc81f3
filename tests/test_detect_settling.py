"""Loss bumps that are not instabilities (first met in sample_logs/real/fresh5): a small bump while the run
settles (detect/settling.py), and grad-norm spikes whose "loss answer" is what a noisy per-example loss does
after any record (detect/loss_answer.py `chance_of_answers`). The real healthy logs, and the synthetic
counterparts that must keep their severity."""

from __future__ import annotations

import tomllib
from pathlib import Path

from _detect_synth import curves, run_from

from spikeforensics import api
from spikeforensics import detect as det
from spikeforensics.params import Params

FRESH5 = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "fresh5"


def diagnose_case(tmp_path, name):
    folder = FRESH5 / name
    facts = tomllib.loads((folder / "FACTS.toml").read_text())
    api.ingest([folder / f for f in facts["files"]], run_id="r", store=tmp_path)
    return api.diagnose(api.load_run("r", tmp_path)), facts


def test_a_small_bump_while_a_healthy_run_settles_is_a_note(tmp_path):
    # MMPose on a 6-iteration dataset: the window-averaged loss goes 0.31 -> 0.42 (its initial level) over
    # records 26-43 of 789, then falls to 0.08
    d, facts = diagnose_case(tmp_path, "mmpose-openmmlab-camp-rtmpose-cpu-train-log-healthy-789-iters")
    assert facts["healthy"] and d["verdict"]["status"] == "healthy"


def bump_run(at: int, size: float, n: int = 2000):
    c = curves(n, seed=3, loss_noise=0.005)
    c["loss"][at : at + 15] *= size
    return run_from(c)


def test_an_early_bump_of_a_hard_spike_size_or_late_one_keeps_its_severity():
    run = bump_run(130, 1.2)  # 1.2x in the first 10% of 2000 records, under the initial loss
    incidents, notes = det.detect_incidents(run, Params())
    assert not [f for f in incidents if f.step_start <= 140 and f.step_end >= 130]
    assert [f for f in notes if f.facts.get("settling_bump")]
    run = bump_run(130, 1.6)  # a hard spike's size: an incident
    incidents, _ = det.detect_incidents(run, Params())
    assert [f for f in incidents if f.step_start <= 140 and f.step_end >= 130]
    run = bump_run(1500, 1.2)  # the same bump after the settling phase: an incident
    incidents, _ = det.detect_incidents(run, Params())
    assert [f for f in incidents if f.step_start <= 1510 and f.step_end >= 1500]


def test_grad_norm_spikes_a_noisy_loss_does_not_answer_beyond_chance_are_the_norms_tail(tmp_path):
    # a TRL SFT run at batch size 1: 4 single-step grad-norm spikes of 7-11x in 2240 steps; its per-example
    # loss rises 10% within 3 records after 36% of all records, so "the loss rose after 2 of them" is chance
    d, facts = diagnose_case(tmp_path, "hf-trainer-deepseek-llm-sft-lora-wannabesuperteur-healthy-2240-steps")
    assert facts["healthy"] and d["verdict"]["status"] == "healthy"


def test_grad_norm_spikes_a_smooth_loss_answers_stay_incidents():
    c = curves(3000, seed=5)
    for i in (800, 1400, 2000, 2600):
        c["grad_norm"][i] *= 8.0
        c["loss"][i + 1 : i + 4] *= 1.5
    incidents, _ = det.detect_incidents(run_from(c), Params())
    assert [f for f in incidents if f.step_start <= c["step"][800] <= f.step_end + 3]
