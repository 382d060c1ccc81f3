"""Loss oscillation: the loss swinging up and down far more than its usual noise while not improving.

Detrended log loss (residual from a centred rolling median over ~200 records); its local
volatility is the robust scale of the residual over `window` records. A stretch fires
when that volatility is >= 3x the run's typical volatility (or above an absolute level,
for a run that oscillates from the start: its typical volatility is at that level too) for >= `min_records` records and the loss trend
over the stretch is not falling (LR too high: DOMAIN "oscillating loss"). A stretch whose loss relapses to
`hard_spike.loss_ratio_critical` x the run's initial loss on >= `relapse_records` records fires even while
its trend falls: a noisy phase of training never does twice as badly as the untrained model again and
again (CS336 at LR 1: spikes of 10-60x every few records, 50x the initial loss, while its calm level
improves). A run noisy from the start (only the absolute level flags it) must relapse that way too: a
per-sample loss (micro batch 1: RWKV's reward model, 0 to 1.3 from record to record) swings as much.
On an RL critic's loss (`RunData.loss_is_critic`), which does not fall by design, a stretch is a note.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.detect import robust, signals
from spikeforensics.detect.base import Evidence, Finding, as_notes
from spikeforensics.rundata import RunData


def detect(run: RunData, params) -> list[Finding]:
    op = params.oscillation
    loss, _ = signals.raw(run, "loss")
    # the columns read here only, and no copy of the rows when every record has a log loss
    loss = signals.rows_where(loss.select("t", "step", "attempt", "rank", "pos", "y"), pl.col("y").is_not_null())
    if loss.height < op.min_records + op.window:
        return []
    key = pl.col("rank").cast(pl.String).fill_null("-")
    # one track (the global rows, or a single rank): the windows per track are windows over all rows, so the
    # key is a constant and no expression needs `.over` (on a long run, each grouping of every row by a string
    # key costs more memory than the columns it computes)
    one = loss.get_column("rank").n_unique() == 1
    over = (lambda e: e) if one else (lambda e: e.over("_k"))
    data = (
        loss.with_columns(pl.lit(loss.head(1).select(key).item()).alias("_k") if one else key.alias("_k"))
        .with_columns(
            over(pl.col("y").rolling_median(op.detrend, min_samples=1, center=True)).alias("trend"),
        )
        .with_columns((pl.col("y") - pl.col("trend")).alias("resid"))
    )
    data = data.with_columns(
        pl.col("resid").abs().alias("_abs"), over(pl.int_range(pl.len(), dtype=pl.Int64)).alias("_i")
    )
    vol = robust.strided_rolling_median(data, "_abs", "_k", op.window).with_columns(pl.col("_med") * robust.MAD_SCALE)
    # the scale joined onto the key columns only, then set beside the others (a join of the whole frame
    # copies every column of the run's loss timeline)
    keys = ["_i"] if one else ["_k", "_i"]
    med = data.select(keys).join(vol.select(*keys, "_med"), on=keys, how="left", maintain_order="left")
    data = (
        data.with_columns(med.get_column("_med"))
        .with_columns(over(pl.col("_med").forward_fill().backward_fill()).alias("vol"))
        .drop("trend", "resid", "_abs", "_med")  # (read no more)
    )
    typical = over(pl.col("vol").median())
    # the absolute level is for a run that oscillates from the start (its typical volatility is itself
    # at that level, so no stretch can be 3x it); a run whose typical volatility is below it needs the
    # ratio (a mixup/cutmix per-batch loss swings ~13% as its normal noise and 1.5x that in places)
    # and a swing of under `min_vol` is no oscillation whatever its ratio: a running-average loss (Sockeye's
    # checkpoint-window ppl) has a typical volatility of 1e-4, and one reload step makes 20x that, 0.2%
    high = ((pl.col("vol") >= op.vol_ratio * typical) | ((pl.col("vol") >= op.abs_vol) & (typical >= op.abs_vol))) & (
        pl.col("vol") >= op.min_vol
    )
    data = data.with_columns(typical.alias("typical"))
    hot = robust.flag_groups(data.filter(high.fill_null(False)), op.group_gap, by=["_k"])
    runs = hot.filter(pl.len().over("group") >= op.min_records)
    # the loss the run started from, when the log starts at the start of training (a relapse above it is
    # the model doing worse than untrained)
    first = signals.in_order(loss, "t").row(0, named=True)
    # (a relapse: `hard_spike.loss_ratio_critical` x that loss; a per-sample loss wanders above its first value)
    start_y = (
        first["y"] + math.log(params.hard_spike.loss_ratio_critical)
        if first["step"] <= params.hard_spike.start_max_step
        else None
    )
    settled_t = first["t"] + int(loss.height * params.hard_spike.early_frac)  # (the first records may hover at it)
    findings = []
    critic = run.loss_is_critic()
    for _, g in runs.group_by("group", maintain_order=True):
        lo, hi = int(g.get_column("step").min()), int(g.get_column("step").max())
        inside = data.filter((pl.col("_k") == g.get_column("_k")[0]) & pl.col("step").is_between(lo, hi))
        # progress: mean log loss of the last third minus the first third (means average the swings out)
        third = max(inside.height // 3, 1)
        y = inside.get_column("y")
        per_1000 = (y.tail(third).mean() - y.head(third).mean()) / max(inside.height - third, 1) * 1000
        peak = g.sort("vol", descending=True).row(0, named=True)
        relapses = (
            inside.filter((pl.col("t") >= settled_t) & (pl.col("y") > start_y)).height if start_y is not None else 0
        )
        if per_1000 < -op.stall_tol and relapses < op.relapse_records:
            continue  # still improving: a noisy phase, not an oscillation (unless it keeps relapsing)
        if (g.get_column("vol") < op.vol_ratio * g.get_column("typical")).all() and relapses < op.relapse_records:
            continue  # noisy from the start and never 3x that: a per-sample loss (batch 1) swings like this too
        ratio = peak["vol"] / peak["typical"] if peak["typical"] else None
        ev = [
            Evidence(
                signal="loss_volatility",
                step=peak["step"],
                value=peak["vol"],
                baseline=peak["typical"],
                ratio=ratio,
                rank=peak["rank"],
                note="robust scale of detrended log-loss (about the relative swing per step)",
            )
        ]
        findings.append(
            Finding(
                kind="loss_oscillation",
                step_start=lo,
                step_end=hi,
                peak_step=int(peak["step"]),
                severity="warning",
                score=round(float(ratio or 0.0), 3),
                rank=peak["rank"],
                attempt=int(peak["attempt"] or 0),
                evidence=ev,
                summary=(
                    f"loss oscillating about {math.expm1(peak['vol']):.0%} per step "
                    + (f"({ratio:.1f}x its usual noise) " if ratio is not None else "(its usual noise is nil) ")
                    + f"without improving, steps {lo}-{hi}"
                ),
                facts={"onset_step": lo},
            )
        )
        if critic:
            # an RL critic's loss does not fall by design (its targets grow with the returns; AWR's value MSE
            # swings most while it is near 0, 0.0009 -> 0.0028 -> 0.0072 in its first records)
            as_notes(
                findings[-1:], "critic_swing", "an RL critic's loss, whose level moves with its bootstrapped targets"
            )
    return findings
