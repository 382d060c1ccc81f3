"""Batch manifest <-> training log: do their step numbers mean the same step?

A manifest written by the data loader can number steps differently from the log: nanoGPT prints
`iter 0` for the first optimizer step while a callback sees `global_step` 1 after it; a loader may
count the batch it is *about* to serve. Traced on a manifest one step off, a spike implicates the
wrong batch, and silently.

When the manifest records per-sample losses the two can be checked: the log's loss of a step is
the mean of that step's per-sample losses (up to token weighting and rounding). Both series share
the training trend, so we compare their step-to-step *changes*: aligned, they move together
(correlation near 1); one step off, white noise changes correlate near -0.5. `manifest_offset`
tries the offsets -k..k on the first `align_window` steps and keeps one only when it is clearly
better than the manifest as written. Without per-sample losses, or when the log does not print
every step, nothing can be checked and the manifest is used as written.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass
class Alignment:
    offset: int  # add to the manifest's steps to get the log's
    corr: float | None  # correlation of step-to-step loss changes at that offset
    corr_as_written: float | None  # the same at offset 0
    steps: int  # steps compared

    @property
    def summary(self) -> str:
        return (
            f"The batch manifest's step numbers are {abs(self.offset)} step(s) "
            f"{'behind' if self.offset > 0 else 'ahead of'} the log's: its per-step mean sample loss follows "
            f"the logged loss with step shifted by {self.offset:+d} (correlation of step-to-step changes "
            f"{self.corr:.2f}, {self.corr_as_written:.2f} as written, over {self.steps} steps); "
            "tracing used the shifted steps."
        )


def _changes(frame: pl.DataFrame, name: str) -> pl.DataFrame:
    """step, d_<name>: change from the previous step, only where the previous step is step - 1."""
    return (
        frame.sort("step")
        .with_columns(pl.when(pl.col("step").diff() == 1).then(pl.col(name).log().diff()).alias(f"d_{name}"))
        .select("step", f"d_{name}")
        .drop_nulls()
    )


def manifest_offset(
    manifest: pl.DataFrame,
    loss: pl.DataFrame,
    max_offset: int = 2,
    min_corr: float = 0.5,
    min_gain: float = 0.3,
    window: int = 2000,
    min_steps: int = 20,
) -> Alignment | None:
    """The step offset that makes the manifest's per-step mean sample loss track the log's loss.

    `manifest`: rows with `step`, `sample_loss`; `loss`: the log's loss records with `step`, `value`.
    Returns None when it cannot be checked (no per-sample losses, too few common steps, a log that
    does not print every step), else an `Alignment` whose `offset` is 0 unless another offset
    correlates >= `min_corr` and beats the manifest as written by `min_gain`.
    """
    finite = manifest.filter(pl.col("sample_loss").is_finite() & (pl.col("sample_loss") > 0))
    if finite.height == 0:
        return None
    first = int(finite.get_column("step").min())
    per_step = (
        finite.filter(pl.col("step") < first + window).group_by("step").agg(pl.col("sample_loss").mean().alias("m"))
    )
    logged = (
        loss.filter(pl.col("value").is_finite() & (pl.col("value") > 0) & pl.col("step").is_not_null())
        .group_by("step")
        .agg(pl.col("value").mean().alias("l"))
    )
    if logged.height < min_steps or per_step.height < min_steps:
        return None
    steps = logged.get_column("step").sort()
    if int(steps.diff().drop_nulls().median()) != 1:  # a log that averages k steps per record
        return None
    dm, dl = _changes(per_step, "m"), _changes(logged, "l")
    corr: dict[int, tuple[float, int]] = {}
    for k in range(-max_offset, max_offset + 1):
        joined = dm.with_columns(pl.col("step") + k).join(dl, on="step")
        if joined.height >= min_steps:
            c = joined.select(pl.corr("d_m", "d_l")).item()
            if c is not None and c == c:
                corr[k] = (float(c), joined.height)
    if 0 not in corr:
        return None
    best = max(corr, key=lambda k: corr[k][0])
    as_written = corr[0][0]
    if best != 0 and corr[best][0] >= min_corr and corr[best][0] - as_written >= min_gain:
        return Alignment(best, corr[best][0], as_written, corr[best][1])
    return Alignment(0, as_written, as_written, corr[0][1])
