"""One-batch loss bumps (a `hard_spike` step): a loss-only bump of one or two records that comes back at once,
with no grad-norm spike beside it, is a batch harder than the rest, a note, when it stays under the hard-spike
ratio or the run's own noise tail reaches it by chance (`robust.tail_expected`). The band and "back at once" are
read on the whole loss series in record order, across attempts, and on the run's own noise.

Pure: `quiet_loss_bumps(findings, run, params)`, findings in, findings out.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.detect import robust, signals
from spikeforensics.detect.base import Finding
from spikeforensics.frames import in_order
from spikeforensics.rundata import RunData

SIGNALS = ("loss", "grad_norm")


def quiet_loss_bumps(findings: list[Finding], run: RunData, params) -> list[Finding]:
    """Loss bumps below the hard-spike ratio (DOMAIN: >= 2x) of at most `bump_max_records` records above the
    band, back in band on the record after them, with no grad-norm spike beside them, are batches harder
    than the rest (a per-step batch loss swings 1.3-1.8x now and then: modded-nanogpt 1B, 12 sigma of its
    own noise, nothing follows), not an instability: the updates were ordinary and nothing followed.
    Notes. Bumps that a recurring sample explains are promoted again by `recurrence.promote`; a bump the
    grad norm answers, or one that lasts, stays an incident."""
    for f in findings:
        if _is_loss_bump(f, run, params):
            f.severity = "info"
            f.facts["loss_bump"] = True
            f.summary += "; back in its band at once, no grad-norm spike: a one-batch loss bump (note)"
    return findings


def _is_loss_bump(f: Finding, run: RunData, params) -> bool:
    hp = params.hard_spike
    signals_hit = {e.signal for e in f.evidence} & set(SIGNALS)
    if f.severity == "info" or f.facts.get("early_rise") or f.facts.get("sustained_bump") or signals_hit != {"loss"}:
        return False
    peak = max((e.ratio or 0.0) for e in f.evidence if e.signal == "loss")
    if not 0 < peak:
        return False
    # the whole series in record order, across attempts: a counter that restarts every epoch (VinVL's `Epoch: [1],
    # step: [2300]`, an attempt per epoch of 44 records) leaves each attempt too short for a band, the run is not
    # (the four columns read, sorted only when out of order)
    loss = in_order(run.series("loss").select("t", "step", "value", "attempt"), "t")
    # (a log without step numbers: the record index is the step, as `robust.prepare` numbers it)
    loss = loss.with_columns(robust.step_or_record())
    span = loss.filter((pl.col("attempt") == f.attempt) & pl.col("step").is_between(f.step_start, f.step_end))
    if loss.height < hp.short_series_records or span.height == 0:
        return False  # a short excerpt: no band to come back to
    t0, t1 = int(span.get_column("t").min()), int(span.get_column("t").max())
    nxt = loss.filter(pl.col("t") == t1 + 1)
    before = loss.filter(pl.col("t").is_between(t0 - params.series.window, t0 - 1)).get_column("value")
    if nxt.height == 0 or before.len() == 0 or not math.isfinite(nxt.item(0, "value")):
        return False
    band = float(before.median()) * hp.loss_ratio_floor
    # records above the band, or standing z_threshold over both sides (a NaN counts as high)
    frame, _ = signals.with_baseline(run, "loss", params)
    inside = frame.filter((pl.col("attempt") == f.attempt) & pl.col("step").is_between(f.step_start, f.step_end))
    z_high = inside.filter(pl.col("z") >= hp.z_threshold).get_column("step")
    high = span.filter(~(pl.col("value") <= band) | pl.col("step").is_in(z_high.implode())).height
    # a bump that stays up (`bump_lasting_records` consecutive records each joint_z over both sides) is not one
    # or two hard batches, however few of its records reach z_threshold
    up = (pl.col("z") >= hp.joint_z).fill_null(False)
    runs = inside.sort("t").with_columns(up.alias("_up"), (~up).cum_sum().alias("_run")).filter("_up")
    if runs.height and int(runs.group_by("_run").len().get_column("len").max()) >= hp.bump_lasting_records:
        return False
    if high <= hp.bump_max_records and _back(loss, frame, t1 + 1, band, hp):  # one or two records, back at once
        # at loss_ratio_critical or more, only when the run's own tail reaches that z by chance (`robust.tail_expected`)
        return peak < hp.loss_ratio_critical or robust.tail_expected(frame, inside, hp) >= hp.bump_tail_expected
    # a hard batch whose next record echoes it (a per-batch loss's 0.083, then 0.022, then back at 0.0017): two
    # records, back on the one after, judged by the run's own tail whatever its ratio
    return (
        high + 1 <= hp.bump_max_records
        and _back(loss, frame, t1 + 2, band, hp)
        and robust.tail_expected(frame, inside, hp) >= hp.bump_tail_expected
    )


def _back(loss: pl.DataFrame, frame: pl.DataFrame, t: int, band: float, hp) -> bool:
    """The record at position `t` is back: under the band, or well inside the run's own noise (under bump_back_z
    robust sigma over both sides: a per-batch loss whose noise spans 10x passes a 1.3x band on half its records)."""
    row = loss.filter(pl.col("t") == t)
    if row.height == 0 or not math.isfinite(row.item(0, "value")):
        return False
    if row.item(0, "value") <= band:
        return True
    z = frame.filter((pl.col("t") == t) & (pl.col("attempt") == row.item(0, "attempt"))).get_column("z")
    return z.len() > 0 and z[0] is not None and z[0] < hp.bump_back_z
