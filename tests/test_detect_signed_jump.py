"""Catastrophic jumps of a signed objective (detect/signed_jump.py): on hand-made series and on
real logs whose loss takes negative values."""

from __future__ import annotations

import numpy as np

from spikeforensics.detect import signed_jump
from spikeforensics.params import Params
from spikeforensics.report.markdown import render_markdown
from spikeforensics.rundata import RunData
from tests.attribute_synth import metric_rows
from tests.test_real_corpus_cases import run_case


def run_of(values):
    return RunData.from_frames(metrics=metric_rows("loss", range(len(values)), values))


def test_a_value_far_past_the_range_of_a_signed_loss_is_a_jump():
    rng = np.random.default_rng(0)
    nll = list(-5.4 + 0.2 * rng.standard_normal(300))
    nll[200] = 40490.0  # WaveGlow's shape: one record of +4e4 in an NLL around -5.4
    [f] = signed_jump.detect(run_of(nll), Params())
    assert f.peak_step == 200 and f.severity == "critical" and f.facts["signed_loss"] is True
    assert f.facts["recovery"] == "fast"  # the next records are back inside the range


def test_heavy_tailed_rl_losses_and_positive_losses_are_left_alone():
    rng = np.random.default_rng(1)
    # a PPO actor loss: signed and heavier-tailed than a normal (Student t, 4 degrees of freedom;
    # the clipped objective with normalised advantages is bounded), 5,000 records
    ppo = list(0.05 * rng.standard_t(4, 5000))
    assert signed_jump.detect(run_of(ppo), Params()) == []
    # a loss that is never negative is the other detectors' job, whatever it does
    assert signed_jump.detect(run_of([2.0] * 50 + [4e4] + [2.0] * 50), Params()) == []


def test_waveglow_nll_jump_is_found_and_a_ppo_log_stays_inconclusive(tmp_path):
    # NVIDIA/waveglow#38: NLL about -5.4, then `123892: 40490.179687500`, then -3.5 .. -1.1: never back
    run, d, facts = run_case(tmp_path, "waveglow-38-one-step-40490-then-no-recovery")
    assert d["verdict"]["status"] == "unstable"
    inc = d["incidents"][0]
    assert inc["peak_step"] == 123892 and inc["kind"] == "hard_spike"
    assert inc["features"]["recovery"] == "never"
    # no grad norm: no clip recommendation, said in words (not an empty bold)
    md = render_markdown(d)
    assert "Recommended clip threshold: **none**" in md and "past the range of the 19 records before" in md
    # DeepSpeed-Chat PPO (act_loss -0.3 .. 0.3, healthy): nothing past its range, still not judged healthy
    run, d, facts = run_case(tmp_path / "b", "deepspeed-chat-step3-rlhf-opt13b-two-engine-overflows")
    assert d["verdict"]["status"] == "inconclusive" and not d["incidents"]
