"""The LR-is-zero stall (detect/stall.py) on hand-made runs and the real Lightning log it comes from."""

from __future__ import annotations

import numpy as np
from _detect_synth import curves, run_from

from spikeforensics.detect import stall
from spikeforensics.params import Params


def test_lr_stuck_at_zero_with_a_flat_loss_is_no_progress():
    c = curves(40)
    c["lr"] = np.zeros(40)
    c["loss"] = np.full(40, 10.9)
    found = stall.detect(run_from(c), Params())
    assert [(f.kind, f.severity, f.facts["cause"], f.facts["lr_zero_records"]) for f in found] == [
        ("no_progress", "warning", "lr_zero", 40)
    ]


def test_a_warmup_from_zero_and_a_rounded_small_lr_are_not_a_stall():
    c = curves(300)
    c["lr"][:1] = 0.0  # a warmup that starts at 0 prints 0 once
    assert stall.detect(run_from(c), Params()) == []
    c["lr"] = np.zeros(300)  # printed as 0 (rounded), but the loss keeps falling: the weights move
    assert stall.detect(run_from(c), Params()) == []


def test_two_zero_records_are_not_enough():
    c = curves(40)
    c["lr"][5:7] = 0.0
    c["loss"] = np.full(40, 3.0)
    # (a loss that never moves is a finding of its own, `loss_constant`; the LR stretch is none)
    assert [f.facts["cause"] for f in stall.detect(run_from(c), Params())] == ["loss_constant"]


def test_a_schedule_that_decays_to_zero_at_the_end_is_not_a_stall():
    # llm.c's default decays the LR to 0: its last steps print lr:0.000000 and the loss stops falling
    c = curves(2000)
    c["lr"][-100:] = 0.0  # the cosine is at 0.7% of its peak just before
    c["loss"][-100:] = c["loss"][-101]
    assert stall.detect(run_from(c), Params()) == []
    # the same zeros in the middle of the run, the LR back up after them: the weights stood still
    c = curves(2000)
    c["lr"][1000:1300] = 0.0
    c["loss"][1000:1300] = c["loss"][999]
    assert [f.kind for f in stall.detect(run_from(c), Params())] == ["no_progress"]


def test_a_loss_printed_as_exactly_zero_on_every_record_is_no_progress(tmp_path):
    # ChatGLM-6B LoRA in 8-bit on a V100 (sample_logs/real/fresh5): `{'loss': 0.0, 'learning_rate': ...}` on all
    # 6 records, a masked non-finite loss; a run whose loss falls to 0 at its end keeps its healthy verdict
    import tomllib
    from pathlib import Path

    from spikeforensics import api

    folder = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "fresh5"
    folder = folder / "hf-trainer-chatglm-tuning-24-chatglm6b-lora-int8-v100-loss-zero-every-record"
    facts = tomllib.loads((folder / "FACTS.toml").read_text())
    api.ingest([folder / facts["files"][0]], run_id="r", store=tmp_path)
    d = api.diagnose(api.load_run("r", tmp_path))
    [inc] = d["incidents"]
    assert inc["kind"] == "no_progress" and inc["severity"] == "warning" and d["verdict"]["status"] == "degraded"
    assert facts["stated_label"] in [inc["root_cause"]] + [a["root_cause"] for a in inc["alternatives"]]
    c = curves(300, seed=2)
    c["loss"][-5:] = 0.0
    assert not [f for f in stall.detect(run_from(c), Params()) if f.facts.get("cause") == "loss_zero"]
