"""Many isolated grad-norm blips (issue 12): one grouped pattern with its count, steps, size and the
loss's answer, not one incident per blip; blips the loss answers stay incidents of their own.
A scaled-down `benchmarks/many_blips.py` (which runs the 1,000,000-step Megatron log)."""

from __future__ import annotations

import numpy as np
from _detect_synth import curves, run_from

from spikeforensics import detect as det
from spikeforensics.attribute import diagnose_run
from spikeforensics.detect import hard_spike
from spikeforensics.params import Params


def blip_run(n: int, blips: int, moving: int = 0, seed: int = 7, size: float = 50.0):
    """A clean run of n steps with `blips` single-step grad-norm blips (size x) at random steps at least
    100 apart; the first `moving` of them (in a random order) make the loss jump 2.5x and decay."""
    c = curves(n, seed=seed)
    rng = np.random.default_rng(seed)
    slots = rng.choice(np.arange(1, (n - 600) // 100), blips, replace=False) * 100 + 500 + rng.integers(0, 50, blips)
    for i in slots:
        c["grad_norm"][i] *= size
    moved = sorted(int(i) for i in slots[:moving])
    for i in moved:
        c["loss"][i : i + 40] *= 1 + 1.5 * np.exp(-np.arange(40) / 5.0)
    steps = lambda idx: sorted(int(c["step"][i]) for i in idx)  # noqa: E731
    return run_from(c), steps(slots), steps(moved)


def pattern_notes(notes):
    return [f for f in notes if f.facts.get("blip_pattern")]


def test_thirty_quiet_blips_on_a_long_run_are_one_note_with_their_count_and_steps():
    run, steps, _ = blip_run(20_000, 30)
    incidents, notes = det.detect_incidents(run, Params())
    assert incidents == []
    [group] = pattern_notes(notes)
    p = group.facts["blip_pattern"]
    assert group.severity == "info" and group.kind == "hard_spike"
    assert p["count"] == 30 and p["steps"] == steps and (p["first_step"], p["last_step"]) == (steps[0], steps[-1])
    assert 30 <= p["median_ratio"] <= p["max_ratio"] and p["loss_moved"] == 0
    # the thirty blips are not listed one by one as well
    assert [f for f in notes if f.kind == "hard_spike" and f is not group] == []


def test_blips_the_loss_answers_stay_incidents_beside_the_grouped_quiet_ones():
    run, steps, moved = blip_run(20_000, 30, moving=3)
    incidents, notes = det.detect_incidents(run, Params())
    hit = [s for s in moved if any(i.step_start - 2 <= s <= i.step_end + 2 for i in incidents)]
    assert hit == moved and len(incidents) == 3
    [group] = pattern_notes(notes)
    assert group.facts["blip_pattern"]["count"] == 27 and group.facts["blip_pattern"]["steps"] == sorted(
        set(steps) - set(moved)
    )


def test_ten_quiet_blips_on_a_short_run_are_one_note_a_lone_one_keeps_its_severity():
    run, steps, _ = blip_run(2_000, 10, seed=3)
    incidents, notes = det.detect_incidents(run, Params())
    assert incidents == []
    [group] = pattern_notes(notes)
    assert group.facts["blip_pattern"]["count"] == 10 and group.facts["blip_pattern"]["steps"] == steps
    lone, [step], _ = blip_run(2_000, 1, seed=3)
    incidents, _ = det.detect_incidents(lone, Params())
    assert [(i.peak_step, i.severity) for i in incidents] == [(step, "critical")]


def test_the_pattern_is_one_note_of_the_diagnosis_with_a_capped_step_list():
    params = Params()
    params.set("blips.steps_listed", 8)
    run, steps, _ = blip_run(20_000, 30)
    diagnosis = diagnose_run(run, params)
    assert diagnosis["verdict"]["status"] == "healthy" and diagnosis["incidents"] == []
    [note] = [n for n in diagnosis["notes"] if n["kind"] == "hard_spike"]
    assert note["severity"] == "info" and note["pattern"]["count"] == 30
    assert note["pattern"]["steps"] == steps[:8] and note["pattern"]["last_step"] == steps[-1]
    assert "30 isolated grad-norm blips" in note["summary"]


def test_one_noisy_loss_record_after_a_blip_is_no_answer_a_lasting_rise_is():
    c = curves(20_000, seed=5)
    c["grad_norm"][10_000] *= 50
    c["loss"][10_001] *= 1.09  # one record ~4 sigma up (loss noise 2%), back on the next: chance, not an answer
    incidents, notes = det.detect_incidents(run_from(c), Params())
    assert incidents == [] and [(f.peak_step, f.severity) for f in notes if f.kind == "hard_spike"] == [
        (10_001, "info")
    ]
    c["loss"][10_002:10_004] *= 1.09  # the loss stays up for three records: the update did damage
    incidents, _ = det.detect_incidents(run_from(c), Params())
    assert [(i.peak_step, i.severity) for i in incidents] == [(10_001, "critical")]


def test_spikes_that_come_often_are_the_lr_pattern_not_blips():
    # six grad-only 7x spikes every 20 records, the loss untouched: too frequent for a heavy tail (one warning)
    c = curves(3000, seed=13, grad_noise=0.25)
    for s in range(1400, 1520, 20):
        c["grad_norm"][s] = 0.4 * 7
    warn = [f for f in hard_spike.detect(run_from(c), Params()) if f.severity != "info"]
    assert [(f.step_start, f.step_end, f.facts.get("blip_pattern", {}).get("count")) for f in warn] == [(1401, 1501, 6)]
