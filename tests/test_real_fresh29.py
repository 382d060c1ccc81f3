"""What sample_logs/real/fresh29 (llm.c, PyMARL, Keras under sacred, TensorFlow capsule nets, TRL GRPO, Megatron-LM,
FastSpeech2, GPUMD, YOLOv7, MAE) first needed: a grad-norm spike's width taken at its core, so a one-record blip
whose norm then relaxes over a few records is still one record (`blips.core_width`)."""

from __future__ import annotations

import numpy as np
from _detect_synth import run_from
from _ingest_helpers import REAL

from spikeforensics import api
from spikeforensics.detect import blips, hard_spike
from spikeforensics.params import Params

P = Params.load()
LLMC = "llm-c-gpt2-124m-fineweb-bf16-a100-full-19560-steps-nanz-tokens-grad-norm-blips-healthy"


def _run_with_grad_event(event: list[float], n: int = 6000):
    rng = np.random.default_rng(11)
    steps = np.arange(1, n + 1)
    loss = 3.3 * (1 + 0.01 * rng.standard_normal(n))
    grad = 0.28 * (1 + 0.03 * rng.standard_normal(n))
    at = n // 2
    grad[at : at + len(event)] = 0.28 * np.asarray(event)
    return run_from({"step": steps, "loss": loss, "grad_norm": grad}), at + 1


def test_a_blip_whose_norm_relaxes_is_one_record_wide():
    run, at = _run_with_grad_event([11.8, 1.6, 1.8, 1.5, 1.3, 1.3, 1.2])
    spikes = [f for f in hard_spike.detect(run, P) if f.step_start <= at <= f.step_end]
    assert spikes and blips.core_width(spikes[0], run) == 1
    assert spikes[0].step_end - spikes[0].step_start + 1 > P.blips.max_width  # the flagged span is wider
    assert all(f.severity == "info" for f in spikes)  # a long run's quiet blip: a note


def test_a_grad_norm_plateau_keeps_its_width():
    run, at = _run_with_grad_event([6.0, 5.5, 6.2, 5.8, 6.1, 5.9, 6.0])
    spikes = [f for f in hard_spike.detect(run, P) if f.step_start <= at <= f.step_end]
    assert spikes and blips.core_width(spikes[0], run) >= 7  # every record at 5.5-6.2x: all core


def test_llmc_healthy_run_with_a_relaxing_blip_is_healthy(tmp_path):
    case = REAL / "fresh29" / LLMC
    api.ingest([str(p) for p in case.glob("*.log")], run_id="r", store=tmp_path)
    diagnosis = api.diagnose(api.load_run("r", tmp_path))
    assert diagnosis["verdict"]["status"] == "healthy"
    assert any("10959" in n["summary"] or "blip" in n["summary"] for n in diagnosis["notes"])
