"""Incident shape: onset, recovery (fast / slow / never), which signal and which rank moved
first, and the post-spike plateau (DETECTION-ANCHORS §2.3).

Works on `Track`s: one signal's timeline (one rank) with the baseline columns of
`robust.add_baseline`, as numpy arrays. Every function looks at a bounded slice around
one peak, so the cost per finding does not grow with the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

LOOKBACK = 500  # records searched before a peak for its onset
LOOKAHEAD = 5000  # records searched after a peak for its recovery


@dataclass
class Track:
    signal: str
    rank: int | None
    pos: np.ndarray
    step: np.ndarray
    y: np.ndarray
    left: np.ndarray
    sigma: np.ndarray

    @classmethod
    def from_frame(cls, frame: pl.DataFrame, signal: str, rank: int | None = None) -> Track:
        if not frame.get_column("pos").is_sorted():  # a timeline already in order is not copied by a sort
            frame = frame.sort("pos")
        left = frame.get_column("left").fill_null(strategy="forward").fill_null(strategy="backward")
        return cls(
            signal=signal,
            rank=rank,
            pos=frame.get_column("pos").to_numpy(),
            step=frame.get_column("step").to_numpy(),
            y=frame.get_column("y").to_numpy(),
            left=np.asarray(left.to_numpy(), dtype=float),  # (a float column as it is: no copy)
            sigma=frame.get_column("sigma").to_numpy(),
        )

    def index(self, pos: int) -> int:
        """Index of the record at or just before `pos`."""
        return int(max(np.searchsorted(self.pos, pos, side="right") - 1, 0))

    def __len__(self) -> int:
        return len(self.pos)


def peak_index(track: Track, pos_start: int, pos_end: int) -> int | None:
    lo, hi = np.searchsorted(track.pos, pos_start, "left"), np.searchsorted(track.pos, pos_end, "right")
    if hi <= lo:
        return None
    seg = (track.y[lo:hi] - track.left[lo:hi]) / track.sigma[lo:hi]
    if not np.isfinite(seg).any():
        return None
    return int(lo + np.nanargmax(seg))


def onset_index(track: Track, i_peak: int, z_thr: float) -> int | None:
    """Walk back from the peak while the point stays > z_thr above the pre-peak level. None when the
    peak itself does not clear z_thr: this track did not move (another rank or signal raised the flag)."""
    level, sigma = track.left[i_peak], track.sigma[i_peak]
    lo = max(0, i_peak - LOOKBACK)
    z = (track.y[lo : i_peak + 1] - level) / sigma
    if not z[-1] > z_thr:
        return None
    quiet = np.nonzero(~(z > z_thr))[0]
    return lo if quiet.size == 0 else int(lo + quiet[-1] + 1)


def recovery_index(track: Track, i_peak: int, z_thr: float, hold: int) -> int | None:
    """First record after the peak from which the signal stays within z_thr of the pre-peak level
    for `hold` records; None when it never does (or the run ends first)."""
    level, sigma = track.left[i_peak], track.sigma[i_peak]
    seg = track.y[i_peak + 1 : i_peak + 1 + LOOKAHEAD]
    if seg.size < hold:
        calm = (seg - level) / sigma < z_thr
        return i_peak + 1 if seg.size and calm.all() and seg.size >= max(1, hold // 4) else None
    calm = ((seg - level) / sigma < z_thr).astype(int)
    runs = np.convolve(calm, np.ones(hold, dtype=int), mode="valid")
    hit = np.nonzero(runs == hold)[0]
    return None if hit.size == 0 else int(i_peak + 1 + hit[0])


def plateau_steps(track: Track, i_peak: int, i_rec: int | None, window: int, tol: float) -> int | None:
    """Records after recovery during which the loss has not improved on its pre-spike level
    (AdamW's inflated second moment slows learning); None when not measurable."""
    if i_rec is None or track.signal != "loss":
        return None
    level = track.left[i_peak]
    seg = track.y[i_rec : i_rec + window]
    if seg.size < 5:
        return None
    smooth = pl.Series(seg).rolling_median(min(25, seg.size), min_samples=1).to_numpy()
    better = np.nonzero(smooth < level + np.log1p(-tol))[0]
    return int(seg.size if better.size == 0 else better[0])


def describe(tracks: list[Track], pos_start: int, pos_end: int, params) -> dict:
    """Shape facts of one event seen on one or more tracks (signals x ranks)."""
    sp = params.shape
    onsets = []
    facts: dict = {}
    for track in tracks:
        i_peak = peak_index(track, pos_start, pos_end)
        if i_peak is None:
            continue
        i_on = onset_index(track, i_peak, sp.onset_z)
        if i_on is None:
            continue
        onsets.append((int(track.pos[i_on]), track.signal, track.rank, int(track.step[i_on])))
        key = track.signal if track.rank is None else f"{track.signal}@rank{track.rank}"
        if key in facts.get("onset_by_signal", {}):
            continue
        facts.setdefault("onset_by_signal", {})[key] = int(track.step[i_on])
        if track.signal in ("loss", "grad_norm") and f"recovery_{track.signal}" not in facts:
            i_rec = recovery_index(track, i_peak, sp.recover_z, sp.recover_hold)
            if i_rec is None:
                # the log ending within `recover_hold` records of the peak cannot show a recovery
                ended = len(track) - i_peak - 1 < sp.recover_hold
                facts[f"recovery_{track.signal}"] = "unknown" if ended else "never"
            else:
                steps = int(track.step[i_rec] - track.step[i_peak])
                facts[f"recovery_{track.signal}"] = "fast" if steps < sp.fast_recovery else "slow"
                facts[f"recovery_{track.signal}_steps"] = steps
            plateau = plateau_steps(track, i_peak, i_rec, sp.plateau_window, sp.plateau_tol)
            if plateau is not None:
                facts["plateau_steps"] = plateau
    if not onsets:
        return facts
    onsets.sort(key=lambda o: (o[0], o[2] is None, o[2] or 0, o[1]))
    first = onsets[0]
    facts["onset_step"] = first[3]
    facts["recovery"] = facts.get("recovery_loss", facts.get("recovery_grad_norm"))
    signals = {}
    for pos, signal, _rank, _step in onsets:
        signals.setdefault(signal, pos)
    if "loss" in signals and "grad_norm" in signals:
        lead = signals["loss"] - signals["grad_norm"]
        if 0 < lead <= sp.lead_max:
            facts["lead_signal"], facts["lead_steps"] = "grad_norm", int(lead)
        elif 0 < -lead <= sp.lead_max:
            facts["lead_signal"], facts["lead_steps"] = "loss", int(-lead)
        else:
            facts["lead_signal"], facts["lead_steps"] = "simultaneous", 0
    ranked = [o for o in onsets if o[2] is not None]
    if ranked:
        facts["first_rank"] = int(ranked[0][2])
    return facts
