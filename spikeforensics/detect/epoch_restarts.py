"""Loss bumps at the start of an epoch of a running mean that restarts each epoch: notes, not incidents.

Many training loops print, every few batches, the mean loss since the epoch began (`losses.avg` of an
`AverageMeter` reset each epoch; DSFD's `Loss:`, a liveness net's `train loss`). Right after the reset that
mean is over a handful of batches, so the first records of each epoch jump up or down from the previous
epoch's long mean by that small sample's noise (DSFD 0.63x to 1.34x at its 35 epoch starts, a converged
liveness net 0.3x to 3.6x), while within an epoch the mean barely moves. Such a series is recognised by its
own shape: the median move across epoch boundaries is `hard_spike.epoch_restart_jump` times the median move
between records of one epoch, over at least `epoch_restart_min_epochs` boundaries, and the boundary moves go
both ways (at least `epoch_restart_two_way` of them up and of them down: a loss that steps down at each epoch
is no restarting mean). A loss-only warning or
critical hard spike in the first `epoch_restart_start_frac` of such an epoch's records is a note when that
epoch's own mean (its last record) stays under `loss_ratio_floor` x the epoch before's: a bad batch big
enough to matter lifts the whole epoch's mean, a small sample does not.

`quiet_epoch_restarts(findings, run, params)`: pure, findings in, findings out.

Within an epoch such a mean wanders as its sample grows (the batches since the reset change as the data go by):
`quiet_epoch_drifts` makes a loss-only `soft_drift` or `loss_oscillation` warning a note when it lies inside one
epoch of such a series and that epoch's own mean (its last record) stays under `loss_ratio_floor` x the epoch
before's: the epoch as a whole did not get worse (Keras' per-batch running means printed one per line).
"""

from __future__ import annotations

import polars as pl

from spikeforensics.detect.base import Finding
from spikeforensics.rundata import RunData


def _epochs(run: RunData) -> pl.DataFrame | None:
    """The loss's records with their epoch (`pos`: the step, or the record position of a step-less log)."""
    loss = run.series("loss")
    epoch = run.series("epoch")
    if loss.height == 0 or epoch.height == 0:
        return None
    joined = loss.filter(pl.col("value").is_finite() & (pl.col("value") > 0)).join(
        epoch.select("source", "line", pl.col("value").alias("epoch")), on=["source", "line"]
    )
    if joined.height < 2:
        return None
    return joined.sort("t").with_columns(pl.coalesce(pl.col("step"), pl.col("t")).alias("pos"))


def restarting_mean(frame: pl.DataFrame, hp) -> bool:
    """The shape of a per-epoch running mean: big moves at epoch boundaries, small ones inside epochs."""
    moves = frame.with_columns(
        (pl.col("value").log() - pl.col("value").log().shift(1)).abs().alias("move"),
        (pl.col("value").log() - pl.col("value").log().shift(1)).alias("signed"),
        (pl.col("epoch") != pl.col("epoch").shift(1)).alias("boundary"),
    ).filter(pl.col("move").is_not_null())
    across_signed = moves.filter(pl.col("boundary")).get_column("signed")
    across = across_signed.abs()
    inside = moves.filter(~pl.col("boundary")).get_column("move")
    if across.len() < hp.epoch_restart_min_epochs or inside.len() < across.len():
        return False
    up = float((across_signed > 0).mean() or 0.0)
    if min(up, 1.0 - up) < hp.epoch_restart_two_way:
        return False  # a loss stepping down at each epoch, no mean that restarts
    calm = float(inside.median() or 0.0)
    return float(across.median() or 0.0) >= hp.epoch_restart_jump * max(calm, 1e-12)


def run_restarts_mean(run: RunData, hp) -> bool:
    """The run's loss is a running mean restarted each epoch (`restarting_mean` on its records with their epoch)."""
    frame = _epochs(run)
    return frame is not None and restarting_mean(frame, hp)


def _epoch_table(frame: pl.DataFrame) -> pl.DataFrame:
    """Per epoch: its first and last position, its record count, its mean (the last record) and the epoch before's."""
    return (
        frame.group_by("attempt", "epoch", maintain_order=True)
        .agg(
            pl.col("pos").first().alias("first"),
            pl.col("pos").last().alias("last"),
            pl.len().alias("n"),
            pl.col("value").last().alias("mean"),
        )
        .with_columns(pl.col("mean").shift(1).over("attempt").alias("before"))
    )


def quiet_epoch_restarts(findings: list[Finding], run: RunData, params) -> list[Finding]:
    """Loss-only hard spikes in the first `epoch_restart_start_frac` of an epoch's records (see the module's doc)."""
    return _quiet(findings, run, params.hard_spike, ("hard_spike",), at_start=True)


def quiet_epoch_drifts(findings: list[Finding], run: RunData, params) -> list[Finding]:
    """Loss-only drifts and oscillations that lie inside one epoch (see the module's doc)."""
    return _quiet(findings, run, params.hard_spike, ("soft_drift", "loss_oscillation"), at_start=False)


def _quiet(findings: list[Finding], run: RunData, hp, kinds: tuple, at_start: bool) -> list[Finding]:
    """Make notes of the loss-only findings of `kinds` that sit in one epoch of a restarting running mean (at its
    start, or anywhere inside it) whose whole-epoch mean stays under `loss_ratio_floor` x the epoch before's."""
    if not any(f.kind in kinds and f.severity != "info" for f in findings):
        return findings
    frame = _epochs(run)
    if frame is None or not restarting_mean(frame, hp):
        return findings
    epochs = _epoch_table(frame)
    for f in findings:
        if f.kind not in kinds or f.severity == "info" or {e.signal for e in f.evidence} != {"loss"}:
            continue
        home = epochs.filter(
            (pl.col("attempt") == f.attempt) & (pl.col("first") <= f.step_start) & (pl.col("last") >= f.step_start)
        )
        if home.height != 1:
            continue
        ep = home.row(0, named=True)
        if ep["before"] is None or ep["mean"] > ep["before"] * hp.loss_ratio_floor:
            continue
        if at_start:  # within the epoch's first records, where the mean is over a handful of batches
            head = frame.filter((pl.col("attempt") == f.attempt) & (pl.col("epoch") == ep["epoch"])).head(
                max(1, int(ep["n"] * hp.epoch_restart_start_frac))
            )
            if f.step_start > head.get_column("pos").max():
                continue
        elif f.step_end > ep["last"]:
            continue
        f.severity = "info"
        f.facts["epoch_restart"] = True
        where = "at the start of" if at_start else "inside"
        what = "the restarted mean's small sample" if at_start else "the mean's wander as its sample grows"
        f.summary += (
            f"; {where} epoch {ep['epoch']:g} of a loss printed as a running mean that restarts each epoch, whose "
            f"whole-epoch mean ({ep['mean']:.4g}) stays within {hp.loss_ratio_floor:g}x the epoch before's "
            f"({ep['before']:.4g}): {what}, not an instability (note)"
        )
    return findings
