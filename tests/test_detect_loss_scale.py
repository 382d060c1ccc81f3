"""Loss-scale detector: collapse, floor, overflow storms; calibration halvings and healthy cycling are quiet."""

import json

import numpy as np
import polars as pl
from _detect_synth import curves, run_from

from spikeforensics.detect import loss_scale
from spikeforensics.params import Params


def healthy_scale(n: int) -> np.ndarray:
    """GradScaler-like: 2^32 halving to 2^16 in the first 16 steps, then +1 every 1000 steps, -1 at rare overflows."""
    l2 = np.full(n, 16.0)
    l2[:16] = 32 - np.arange(16)
    for s in range(1000, n, 1000):
        l2[s:] += 1
    for s in range(1500, n, 1000):
        l2[s:] -= 1
    return 2.0 ** l2


def test_healthy_fp16_scale_with_calibration_is_quiet():
    c = curves(5000, seed=1)
    c["loss_scale"] = healthy_scale(5000)
    assert loss_scale.detect(run_from(c), Params()) == []


def test_collapse_to_the_floor_is_critical():
    c = curves(4000, seed=2)
    scale = healthy_scale(4000)
    for s in range(3000, 3200, 10):   # 20 halvings: 2^17 -> the floor of 1
        scale[s:] = max(scale[s] / 2, 1.0)
    c["loss_scale"] = scale
    found = loss_scale.detect(run_from(c), Params())
    assert len(found) == 1
    f = found[0]
    assert f.kind == "loss_scale_collapse" and f.severity == "critical" and f.facts["at_floor"]
    assert 3020 <= f.step_start <= 3060 and f.facts["min_scale"] == 1.0


def test_four_halvings_is_a_warning_three_is_not():
    for halvings, expect in ((3, []), (5, ["warning"])):
        c = curves(3000, seed=3)
        scale = np.full(3000, 65536.0)
        for k in range(halvings):
            scale[2000 + 50 * k:] /= 2
        c["loss_scale"] = scale
        assert [f.severity for f in loss_scale.detect(run_from(c), Params())] == expect


def test_overflow_events_only_build_the_scale_and_the_storm():
    rows = []
    scale = 65536.0
    for k, step in enumerate(range(1000, 1300, 20)):   # 15 overflows in 300 steps
        rows.append({"source": "ds.log", "line": k + 1, "step": step, "attempt": 0, "rank": None, "kind": "overflow",
                     "time": None, "detail": json.dumps({"old_scale": scale, "new_scale": max(scale / 2, 1)})})
        scale = max(scale / 2, 1)
    run = run_from(curves(2000, seed=4), events=pl.DataFrame(rows))
    found = loss_scale.detect(run, Params())
    kinds = {f.summary.split(":")[0].split(" ")[0] for f in found}
    assert any(f.facts.get("source") == "overflow events" for f in found)       # collapse from events
    assert any("overflow_skips" in f.facts for f in found)                      # and the storm
    assert all(f.kind == "loss_scale_collapse" for f in found) and kinds
