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
    return 2.0**l2


def test_healthy_fp16_scale_with_calibration_is_quiet():
    c = curves(5000, seed=1)
    c["loss_scale"] = healthy_scale(5000)
    assert loss_scale.detect(run_from(c), Params()) == []


def test_collapse_to_the_floor_is_critical():
    c = curves(4000, seed=2)
    scale = healthy_scale(4000)
    for s in range(3000, 3200, 10):  # 20 halvings: 2^17 -> the floor of 1
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
            scale[2000 + 50 * k :] /= 2
        c["loss_scale"] = scale
        assert [f.severity for f in loss_scale.detect(run_from(c), Params())] == expect


def test_overflow_events_only_build_the_scale_and_the_storm():
    rows = []
    scale = 65536.0
    for k, step in enumerate(range(1000, 1300, 20)):  # 15 overflows in 300 steps
        rows.append(
            {
                "source": "ds.log",
                "line": k + 1,
                "step": step,
                "attempt": 0,
                "rank": None,
                "kind": "overflow",
                "time": None,
                "detail": json.dumps({"old_scale": scale, "new_scale": max(scale / 2, 1)}),
            }
        )
        scale = max(scale / 2, 1)
    run = run_from(curves(2000, seed=4), events=pl.DataFrame(rows))
    found = loss_scale.detect(run, Params())
    kinds = {f.summary.split(":")[0].split(" ")[0] for f in found}
    assert any(f.facts.get("source") == "overflow events" for f in found)  # collapse from events
    assert any("overflow_skips" in f.facts for f in found)  # and the storm
    assert all(f.kind == "loss_scale_collapse" for f in found) and kinds


def simulate_scaler(
    n: int, seed: int, bursts_every: float = 15000.0, collapse_at: int | None = None, growth_interval: int = 1000
) -> tuple[np.ndarray, np.ndarray]:
    """(scale per step, overflow-skipped per step) from a dynamic scaler's update rule (Megatron / DeepSpeed /
    GradScaler: halve on an overflow, which skips the step; double after `growth_interval` clean steps) on a
    random overflow process. A step overflows when the scaled gradient leaves the fp16 range: its chance grows
    with the scale (x2 per doubling, 1 in 3,000 steps at 2^16) and is certain during bursts of 4-7 steps of
    huge gradients (a bad batch, a loss spike; one per `bursts_every` steps on average). From `collapse_at`
    on, the gradients are 256x larger for good: the scale the run can hold is 2^8 lower."""
    rng = np.random.default_rng(seed)
    scale = np.empty(n)
    skipped = np.zeros(n, bool)
    s, clean, burst = 65536.0, 0, 0
    for i in range(n):
        if burst == 0 and rng.random() < 1 / bursts_every:
            burst = int(rng.integers(4, 8))
        grow = 256.0 if collapse_at is not None and i >= collapse_at else 1.0
        p = 1.0 if burst else min(1.0, s * grow / 65536.0 / 3000.0)
        burst = max(0, burst - 1)
        if rng.random() < p:
            s, clean, skipped[i] = max(1.0, s / 2), 0, True
        else:
            clean += 1
            if clean == growth_interval:
                s, clean = min(s * 2, 2.0**24), 0
        scale[i] = s
    return scale, skipped


def old_rule_dips(scale: np.ndarray, window: int = 2000, halvings: int = 4) -> int:
    """Steps where the scale is >= `halvings` below its trailing maximum (the collapse test before issue 12)."""
    l2 = pl.Series(np.log2(scale))
    return int(((l2.rolling_max(window, min_samples=1) - l2) >= halvings).sum())


def _overflow_events(scale: np.ndarray, skipped: np.ndarray) -> pl.DataFrame:
    idx = np.flatnonzero(skipped)
    old = np.where(idx > 0, scale[np.maximum(idx - 1, 0)], 65536.0)
    return pl.DataFrame(
        {
            "source": "ds.log",
            "line": idx + 1,
            "step": idx + 1,
            "attempt": np.zeros(len(idx), np.int32),
            "rank": pl.Series([None] * len(idx), dtype=pl.Int32),
            "kind": "overflow",
            "time": None,
            "detail": [json.dumps({"old_scale": float(o), "new_scale": float(s)}) for o, s in zip(old, scale[idx])],
        }
    )


def test_recovering_scaler_dips_are_no_collapse():
    """A healthy scaler falls 4-7 halvings at a burst of overflows and grows back: no collapse, from the
    printed scale (Megatron) or from the overflow events alone (DeepSpeed)."""
    for seed in (5, 6):
        scale, skipped = simulate_scaler(120_000, seed)
        assert old_rule_dips(scale) > 0  # the dips the old test called collapses are there
        assert scale[-20_000:].max() >= 32768  # and the scaler regrew from each
        c = curves(120_000, seed=seed)
        c["loss_scale"] = scale
        assert [f.summary for f in loss_scale.detect(run_from(c), Params()) if "halvings" in f.facts] == []
        events_only = run_from(curves(120_000, seed=seed), events=_overflow_events(scale, skipped))
        assert [f.summary for f in loss_scale.detect(events_only, Params()) if "halvings" in f.facts] == []


def test_scale_that_falls_and_stays_down_is_a_collapse():
    """The same scaler when the gradients grow 256x for good: the scale falls about 8 halvings and cycles there,
    never regaining its level. A collapse, found at the fall (both from the printed scale and from events)."""
    scale, skipped = simulate_scaler(40_000, 7, bursts_every=1e12, collapse_at=20_000)
    c = curves(40_000, seed=7)
    c["loss_scale"] = scale
    for run in (run_from(c), run_from(curves(40_000, seed=7), events=_overflow_events(scale, skipped))):
        found = [f for f in loss_scale.detect(run, Params()) if "halvings" in f.facts]
        assert len(found) == 1 and found[0].severity == "warning"
        assert 20_000 <= found[0].step_start <= 20_100 and found[0].facts["halvings"] >= 4


def test_a_scale_printed_rounded_is_read_as_its_power_of_two_and_fairseqs_floor_is_its_own():
    # fairseq prints `loss_scale=0.062` for 2^-4 and `0.004` for 2^-8: four halvings, not 3.95
    c = curves(3000, seed=7)
    printed = np.full(3000, 0.062)
    printed[1500:] = 0.031
    printed[1600:] = 0.004
    c["loss_scale"] = printed
    [f] = loss_scale.detect(run_from(c), Params())
    assert f.facts["min_scale"] == 2.0**-8 and f.facts["halvings"] == 4.0
    # a scaler that halves on below 1 (fairseq, to 1e-4) has not hit "the minimum" at 2^-8
    assert f.severity == "warning" and f.facts["at_floor"] is False and "(the minimum)" not in f.summary


def test_fairseq_overflow_storm_below_one_is_a_collapse(tmp_path):
    # fairseq#515 (lightconv fp16): the scale goes 0.0625 -> 0.0039 in 300 updates, never regrows,
    # while the loss keeps falling. A scale below 1 has halved past any calibration, and the logged steps
    # are nearly all overflow-skipped: the events alone convict the run (detect/events.py)
    from tests.test_real_corpus_cases import run_case

    run, d, facts = run_case(tmp_path, "fairseq-515-lightconv-overflow-scale-collapse-loss-falling")
    assert not facts["healthy"] and d["verdict"]["status"] == "unstable"
    inc = d["incidents"][0]
    assert inc["kind"] == "loss_scale_collapse" and inc["root_cause"] == "fp16_overflow"
