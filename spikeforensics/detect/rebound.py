"""Rebounds: a smooth loss that turns back up by `loss_ratio_floor` or more over its own recent minimum (and by
`z_threshold` x its record-to-record noise) and comes back down: critical at `loss_ratio_critical`, else a warning.

The two-sided z-test measures a record against the median of the records around it, in units of the run's robust
sigma of those residuals. On a loss that falls steeply and is logged densely (AlgoPerf's runner prints every step
for the first hundred steps, then every 500th), that sigma is set by the fall itself: the lagged median stands far
above every record of the fall, so a 2.3x rebound in the middle of it (a Lion run's criteo loss 0.203 -> 0.467 over
22 steps and back to 0.158) reaches 1.1 sigma and passes as noise. Against the lowest value of the records just
before it, and in units of the record-to-record noise of the loss (robust sigma of its log differences, as the
unstable-start check uses), the same rebound stands 2.3x and tens of sigma up: a spike by any practitioner's measure.
So does a Keras run's per-epoch loss falling 1% an epoch that jumps 37% for two epochs (1.028 -> 1.410, back in
five): 0.5 sigma on the lagged median, 30 times its record-to-record noise.

Judged only where the z-test's sigma is set by the trend, not by the noise: a loss whose residual sigma is at least
`rebound_smooth_ratio` times its record-to-record noise (a per-batch loss scatters around its trend, and there both
are the same noise: the lowest of 50 such records lies far below the rest, and 2x over it is an ordinary batch);
on one track of the training loss per attempt, from a log long enough to sample its noise (`rebound_min_records`); a rise that never comes back is the divergence detector's, an RL critic's loss is none
of this (bootstrapped targets move it by design), nor a running mean restarted each epoch (detect/epoch_restarts.py:
its first records after each reset are the mean of a few batches).
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from spikeforensics.detect import epoch_restarts, robust, signals
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData


def rebound_spans(loss: pl.DataFrame, hp, window: int) -> pl.DataFrame:
    """Rebounds of one loss track (`step`, `y` = log loss, `sigma` = the z-test's robust scale, in record order):
    one row per rebound with its first and last raised step (`lo`, `hi`), the peak (`peak_step`, `peak_value`), the
    minimum it rose from (`floor_value`), its rise over that minimum (`ratio`) and the first step at which the loss
    is back near it (`back_step`)."""
    empty = pl.DataFrame(
        schema={
            "lo": pl.Int64,
            "hi": pl.Int64,
            "peak_step": pl.Int64,
            "peak_value": pl.Float64,
            "floor_value": pl.Float64,
            "ratio": pl.Float64,
            "back_step": pl.Int64,
        }
    )
    if loss.height < hp.rebound_min_records:
        return empty
    noise = robust.step_noise(loss.get_column("y"))
    sigma = float(loss.get_column("sigma").median() or 0.0)
    if sigma < hp.rebound_smooth_ratio * noise:
        return empty  # a loss whose records scatter around its trend: the z-test's sigma is its own noise
    need = max(math.log(hp.loss_ratio_floor), hp.z_threshold * noise)
    frame = loss.select("step", "y").with_columns(
        pl.col("y").rolling_min(window, min_samples=1).shift(1).alias("_floor")
    )
    frame = frame.with_columns(((pl.col("y") - pl.col("_floor")) >= need).fill_null(False).alias("_up"))
    frame = frame.with_columns(pl.col("_up").rle_id().alias("_run"), pl.int_range(pl.len()).alias("_i"))
    runs = (
        frame.filter(pl.col("_up"))
        .group_by("_run", maintain_order=True)
        .agg(
            pl.col("step").min().alias("lo"),
            pl.col("step").max().alias("hi"),
            pl.col("_i").max().alias("_last"),
            pl.col("step").sort_by("y").last().alias("peak_step"),
            pl.col("y").max().alias("_peak_y"),
            pl.col("_floor").first().alias("_floor_y"),
            pl.len().alias("_n"),
        )
    )
    if runs.height == 0:
        return empty
    ys, steps = frame.get_column("y").to_numpy(), frame.get_column("step").to_numpy()
    rows = []
    for r in runs.iter_rows(named=True):  # few raised stretches; each looks ahead in one vectorised pass
        later = ys[r["_last"] + 1 :] <= math.log(hp.loss_ratio_floor) + r["_floor_y"]
        if not later.any():
            continue  # never back near where it rose from: a divergence, not a rebound
        back = int(steps[r["_last"] + 1 + int(np.argmax(later))])
        rows.append(
            {
                "lo": r["lo"],
                "hi": r["hi"],
                "peak_step": r["peak_step"],
                "peak_value": math.exp(r["_peak_y"]),
                "floor_value": math.exp(r["_floor_y"]),
                "ratio": math.exp(r["_peak_y"] - r["_floor_y"]),
                "back_step": back,
            }
        )
    return pl.DataFrame(rows, schema=empty.schema) if rows else empty


def detect(run: RunData, params, covered: list[Finding]) -> list[Finding]:
    """Rebounds of the training loss that no finding in `covered` already spans."""
    hp = params.hard_spike
    if run.loss_is_critic() or epoch_restarts.run_restarts_mean(run, hp):
        return []  # a critic's moving targets; a mean over the batches since the epoch began (few after each reset)
    loss, _ = signals.with_baseline(run, "loss", params)
    loss = loss.filter(pl.col("y").is_not_null() & pl.col("step").is_not_null())
    out = []
    for (attempt,), part in loss.group_by("attempt", maintain_order=True):
        track = signals.one_track(part).sort("t")
        for r in rebound_spans(track, hp, params.series.window).iter_rows(named=True):
            if any(f.attempt == attempt and f.step_start <= r["hi"] and r["lo"] <= f.step_end for f in covered):
                continue
            out.append(_finding(r, int(attempt or 0), params))
    return out


def _finding(r: dict, attempt: int, params) -> Finding:
    fast = r["back_step"] - r["peak_step"] < params.shape.fast_recovery
    return Finding(
        kind="hard_spike",
        step_start=r["lo"],
        step_end=r["hi"],
        peak_step=r["peak_step"],
        severity="critical" if r["ratio"] >= params.hard_spike.loss_ratio_critical else "warning",
        score=float(r["ratio"]),
        attempt=attempt,
        evidence=[
            Evidence(
                signal="loss",
                step=r["peak_step"],
                value=r["peak_value"],
                baseline=r["floor_value"],
                ratio=round(r["ratio"], 4),
                note=f"peak over the lowest loss of the records before it; back near it at step {r['back_step']}",
            )
        ],
        summary=(
            f"loss turned back up to {r['ratio']:.1f}x its recent minimum ({r['floor_value']:.4g} -> "
            f"{r['peak_value']:.4g}) from step {r['lo']} to {r['hi']}, back near it at step {r['back_step']}"
        ),
        facts={"onset_step": r["lo"], "rebound": True, "recovery": "fast" if fast else "slow"},
    )
