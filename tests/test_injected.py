"""The injected-fault benchmark's machinery on a real healthy curve: extension, injection, scoring.

A handful of seeded cases on one real log of the corpus (modded-nanogpt, 1,530 per-step losses): the
extension keeps the curve's noise, an injected effect is in units of that noise, a large spike is found
at its step, a NaN burst is a nonfinite incident, and the untouched curve gives no incident.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import injected as inj  # noqa: E402
import injected_curves as ic  # noqa: E402

from spikeforensics.params import Params  # noqa: E402

CASE = ROOT / "sample_logs" / "real" / "dev" / "modded-nanogpt-120424-value-embed-record-healthy"


@pytest.fixture(scope="module")
def curve(tmp_path_factory):
    if not CASE.is_dir():
        pytest.skip("real-log corpus not present")
    c = ic._ingested(CASE, tmp_path_factory.mktemp("curves"))
    assert c is not None and c.has("loss") and c.n >= 1000
    return c


def test_extension_keeps_the_noise_scale_and_short_runs_are_real_slices(curve):
    rng = np.random.default_rng(1)
    real = np.log(curve.values["loss"])
    longer, extended = ic.extend(curve, 20_000, rng)
    assert extended and len(longer["loss"]) == 20_000
    s_real = np.median([ic.local_sigma(real, i) for i in range(300, curve.n - 300, 100)])
    s_ext = np.median([ic.local_sigma(np.log(longer["loss"]), i) for i in range(1000, 19_000, 1000)])
    assert 0.6 < s_ext / s_real < 1.6
    part, extended = ic.extend(curve, 500, rng)
    assert not extended
    start = int(np.flatnonzero(curve.values["loss"] == part["loss"][0])[0])
    assert np.array_equal(part["loss"], curve.values["loss"][start : start + 500])


def test_injected_effect_is_in_units_of_the_local_noise(curve):
    rng = np.random.default_rng(2)
    case, a = inj.make_case(1, curve, "spike", rng, steps=3000, interval=1, fp16=False, at=1500, effect=8.0, width=1)
    clean, _ = ic.extend(curve, 3000, np.random.default_rng(2))
    shift = np.log(a["loss"][1500]) - np.log(clean["loss"][1500])
    assert case.effect == 8.0
    assert shift == pytest.approx(8.0 * case.detail["sigma"]["loss"], rel=1e-3)  # sigma is stored rounded
    assert case.start == case.end == int(a["step"][1500])


def test_large_spike_is_found_at_its_step_and_clean_run_has_no_incident(curve):
    params = Params()
    case, a = inj.make_case(
        3, curve, "spike", np.random.default_rng(3), steps=3000, interval=1, fp16=False, at=2000, effect=40.0, width=3
    )
    scored = inj.score_case(case, a, params)
    assert scored.found and scored.start == 2001
    clean, b = inj.make_case(4, curve, "clean", np.random.default_rng(3), steps=3000, interval=1, fp16=False)
    assert inj.score_case(clean, b, params).false_incidents == 0


def test_nan_burst_is_a_nonfinite_incident_and_a_missed_spot_is_not_found(curve):
    params = Params()
    case, a = inj.make_case(
        5, curve, "nan", np.random.default_rng(5), steps=2000, interval=1, fp16=False, at=1200, width=4
    )
    scored = inj.score_case(case, a, params)
    assert scored.found and scored.kind_ok
    # the same run scored against a fault placed elsewhere: nothing there
    case.start, case.end = 400, 403
    assert inj.score_case(case, a, params).found is False


def test_effect_buckets():
    assert inj.bucket(1.2) is None and inj.bucket(None) is None
    assert inj.bucket(4.0) == "4-6" and inj.bucket(5.99) == "4-6" and inj.bucket(25) == "20+"


def test_frozen_curves_load_back_the_same_and_alone(curve, tmp_path, monkeypatch):
    # a strict before/after of two trees: the curves one tree read, frozen, are what the other loads
    ic.freeze([curve], tmp_path / "frozen")
    monkeypatch.setattr(ic, "REAL_SPLITS", ("none",))
    (back,) = ic.load_curves(collected=tmp_path / "frozen")
    assert back.n == curve.n and set(back.values) == set(curve.values)
    for signal, values in curve.values.items():
        np.testing.assert_allclose(back.values[signal], values)
