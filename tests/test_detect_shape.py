"""Incident shape helpers on hand-made tracks."""

import numpy as np

from spikeforensics.detect import shape
from spikeforensics.params import Params


def _track(y, left=0.0, sigma=0.1):
    n = len(y)
    return shape.Track(
        signal="loss",
        rank=None,
        pos=np.arange(n),
        step=np.arange(1, n + 1),
        y=np.asarray(y, dtype=float),
        left=np.full(n, left),
        sigma=np.full(n, sigma),
    )


def test_onset_walks_back_over_the_rise():
    t = _track([0, 0, 0.05, 0.3, 0.5, 0.9, 0.2, 0])
    assert shape.onset_index(t, 5, z_thr=2.0) == 3


def test_a_track_that_did_not_move_has_no_onset_even_on_the_last_record():
    # the last record is the "peak" of a flag that another track raised; on this track it is below z_thr.
    # This once returned the index *after* the peak and crashed describe() with an IndexError on a
    # 360-step run whose flag sat on the final record (and let quiet ranks claim "first rank").
    quiet = _track([0, 0.02, -0.01, 0.05])
    assert shape.onset_index(quiet, 3, z_thr=2.0) is None
    assert shape.describe([quiet], 3, 3, Params()) == {}
    moved = _track([0, 0.02, -0.01, 0.9])
    facts = shape.describe([quiet, moved], 3, 3, Params())
    assert facts["onset_step"] == 4 and facts["recovery"] == "unknown"  # the log ends at the peak


def test_recovery_never_needs_enough_records_after_the_peak():
    hold = Params().shape.recover_hold
    stays_up = _track([0] * 30 + [1.0] * (hold + 5))
    assert shape.describe([stays_up], 30, 30, Params())["recovery"] == "never"
    cut_short = _track([0] * 30 + [1.0] * (hold - 5))
    assert shape.describe([cut_short], 30, 30, Params())["recovery"] == "unknown"
    falls_back = _track([0] * 30 + [1.0] + [0.0] * (hold + 5))
    assert shape.describe([falls_back], 30, 30, Params())["recovery"] == "fast"
