"""Catastrophic jumps of a signed objective.

A loss that takes negative values (a flow or VAE negative log-likelihood, a diffusion ELBO bound,
a PPO actor loss) has no ratio scale, so the spike detectors' log-ratio tests skip it and the
run is `inconclusive`. One thing can still be judged there without a ratio: a value so far
outside everything the run printed before it that no noise explains it. WaveGlow (NVIDIA
waveglow#38) prints its negative log-likelihood around -5.4, then `123892: 40490.179687500`.

A record is a jump when it lies more than `signed_jump.jump_z` robust deviations (1.4826
x the MAD of the `signed_jump.window` records before it, at least
`signed_jump.min_records` of them) beyond the range those records span. Only that: the
ordinary spikes of a signed curve stay unjudged (the coverage says so). Consecutive jumps are
one finding; the recovery is whether the values come back inside the range before the jump.
Runs whose loss is never negative are left to the other detectors, but for one side of a GAN's pair
(`RunData.loss_without_ratio`): a game's score has no ratio scale either.

A signed loss can also run away without a jump: its magnitude grows by orders record after record (a
binary cross-entropy fed labels outside [0, 1] is unbounded below: a Keras reproduction's loss goes 0.75, -0.7,
-10, ... -9e7 over ten epochs). When the median magnitude of the last tenth of an attempt's records is
`signed_jump.runaway_ratio` times that of its first `min_records` records or more (or
`signed_jump.runaway_monotone_ratio` times, when every tenth's is larger than the one before and the loss never
changes sign), the last tenth is the largest of the ten and its records all share one sign, the loss is diverging: one critical `divergence` finding, fact
`cause` = `signed_runaway` (a loss unbounded in that direction: the loss does not fit the labels or the output,
or a sign error; rules/structure.toml).

Pure: `detect(run, params)` reads `run.series("loss")` only.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.detect import robust
from spikeforensics.detect.base import Evidence, Finding, as_notes, row_step
from spikeforensics.rundata import RunData

MAD_TO_SIGMA = 1.4826  # the MAD of a normal distribution times this is its standard deviation


def jumps(values: pl.DataFrame, window: int, min_records: int, z: float) -> pl.DataFrame:
    """Rows of `values` (`t`, `step`, `value`, finite, in order) that jump beyond the range of the
    records before them by more than `z` robust deviations, with `lo`, `hi`, `sigma`, `excess`
    (how many deviations past the range) and `before` (how many records the range spans)."""
    prev = pl.col("value").shift(1)
    framed = values.with_columns(
        prev.rolling_median(window, min_samples=min_records).alias("_med"),
        prev.rolling_min(window, min_samples=min_records).alias("lo"),
        prev.rolling_max(window, min_samples=min_records).alias("hi"),
    )
    # the MAD over the same trailing window: the median of |x - median| of the window's records
    dev = (prev - pl.col("_med")).abs()
    framed = framed.with_columns((dev.rolling_median(window, min_samples=min_records) * MAD_TO_SIGMA).alias("sigma"))
    beyond = pl.max_horizontal(pl.col("value") - pl.col("hi"), pl.col("lo") - pl.col("value"))
    framed = framed.with_columns(pl.min_horizontal(pl.int_range(pl.len()), window).alias("before"))
    return (
        framed.with_columns((beyond / pl.col("sigma")).alias("excess"))
        .filter((pl.col("sigma") > 0) & (pl.col("excess") > z))
        .drop("_med")
    )


def detect(run: RunData, params) -> list[Finding]:
    hp = params.signed_jump
    loss = run.series("loss")
    # a log without step numbers: the record index, as the other detectors take it
    finite = loss.filter(pl.col("value").is_finite()).with_columns(robust.step_or_record()).sort("t")
    if finite.height == 0 or not run.loss_without_ratio():
        return []
    out: list[Finding] = []
    for (attempt,), part in finite.group_by("attempt", maintain_order=True):
        part = part.with_row_index("_i")
        runaway = _runaway(part, int(attempt), hp)
        if runaway is not None:
            out.append(runaway)
            continue
        hits = jumps(part, hp.window, hp.min_records, hp.jump_z)
        if hits.height == 0:
            continue
        # consecutive jumping records (by position) are one finding
        runs = hits.with_columns((pl.col("_i").diff().fill_null(1) != 1).cum_sum().alias("_run"))
        for (_,), group in runs.group_by("_run", maintain_order=True):
            peak = group.sort("excess", descending=True).row(0, named=True)
            last_i = int(group.get_column("_i").max())
            after = part.filter(pl.col("_i") > last_i)
            back = after.filter(pl.col("value").is_between(peak["lo"], peak["hi"]))
            # the next record is no jump any more: not `jump_z` deviations past the range on the jump's side
            reach = hp.jump_z * peak["sigma"]
            up = peak["value"] > peak["hi"]
            inside = pl.col("value") <= peak["hi"] + reach if up else pl.col("value") >= peak["lo"] - reach
            back_next = after.height > 0 and bool(after.head(1).select(inside).item())
            recovery = (
                "unknown"
                if after.height == 0
                else "never"
                if back.height == 0
                else "fast"
                if int(back.get_column("step")[0]) - int(peak["step"]) < params.shape.fast_recovery
                else "slow"
            )
            out.append(
                Finding(
                    kind="hard_spike",
                    step_start=int(group.get_column("step").min()),
                    step_end=int(group.get_column("step").max()),
                    peak_step=int(peak["step"]),
                    severity="critical",
                    score=float(peak["excess"]),
                    attempt=int(attempt),
                    evidence=[
                        Evidence(
                            signal="loss",
                            step=int(peak["step"]),
                            value=float(peak["value"]),
                            baseline=float(peak["hi"] if peak["value"] > peak["hi"] else peak["lo"]),
                            note=f"{peak['excess']:.0f} robust deviations past the range of the {peak['before']} records before",
                        )
                    ],
                    summary=(
                        f"the signed loss jumped to {peak['value']:.6g} at step {peak['step']}, {peak['excess']:.0f} robust "
                        f"deviations outside the range [{peak['lo']:.4g}, {peak['hi']:.4g}] of the records before it"
                    ),
                    facts={
                        "onset_step": int(group.get_column("step").min()),
                        "recovery": recovery,
                        "recovery_loss": recovery,
                        "signed_loss": True,
                        "lead_signal": "unknown",
                        "one_record": group.height == 1 and back_next,
                    },
                )
            )
    return _game_blips(out, run, hp)


def _runaway(part: pl.DataFrame, attempt: int, hp) -> Finding | None:
    """The attempt's signed loss running away by orders of magnitude to its end (see the module's doc), else None."""
    n = part.height
    if n < 2 * hp.min_records:
        return None
    mag = pl.col("value").abs()
    start = float(part.head(hp.min_records).select(mag.median()).item())
    tenths = (
        part.with_columns((pl.int_range(pl.len()) * 10 // pl.len()).alias("_d"))
        .group_by("_d")
        .agg(mag.median().alias("m"))
        .sort("_d")
        .get_column("m")
    )
    tail = part.tail(max(1, n // 10))
    end = float(tenths[-1])
    signs = tail.select(pl.col("value").sign().unique()).to_series()
    # ... or a steadier climb: every tenth larger than the one before, one sign from the first record, by
    # `runaway_monotone_ratio` over all (a CSVLogger's binary cross-entropy at -3.4e4, -1e5, ... -6.5e7: 150x)
    climbing = (
        bool((tenths.diff().drop_nulls() > 0).all()) and part.select(pl.col("value").sign().n_unique()).item() == 1
    )
    far = end >= hp.runaway_ratio * start or (climbing and end >= hp.runaway_monotone_ratio * start)
    if not (start > 0 and far and end >= float(tenths.max()) and signs.len() == 1):
        return None
    # onset: the first record from which the magnitude stays above 10x the start's
    above = part.with_columns((mag > 10 * start).alias("_up")).with_columns(
        pl.col("_up").reverse().cum_min().reverse().alias("_stays")
    )
    onset = above.filter(pl.col("_stays")).row(0, named=True)
    last = part.row(n - 1, named=True)

    direction = "below" if last["value"] < 0 else "above"
    return Finding(
        kind="divergence",
        step_start=row_step(onset),
        step_end=row_step(last),
        peak_step=row_step(last),
        severity="critical",
        score=end / start,
        attempt=attempt,
        evidence=[
            Evidence(
                signal="loss",
                step=row_step(last),
                value=float(last["value"]),
                baseline=start,
                ratio=end / start,
                note=f"median |loss| of the last tenth {end:.4g} vs {start:.4g} over the first {hp.min_records} records",
            )
        ],
        summary=(
            f"the loss runs away {direction} zero: its magnitude grows from ~{start:.4g} to ~{end:.4g} "
            f"({end / start:.3g}x) and is largest at the end ({last['value']:.6g}): a loss unbounded "
            f"{direction}, not training"
        ),
        facts={
            "cause": "signed_runaway",
            "onset_step": row_step(onset),
            "recovery": "never",
            "recovery_loss": "never",
            "signed_loss": True,
            "lead_signal": "loss",
        },
    )


def _game_blips(found: list[Finding], run: RunData, hp) -> list[Finding]:
    """One side of a GAN's pair whose jumps are single records, the next record no jump any more,
    `game_blips_min` times or more in the run: the game's one-batch blips (a discriminator's per-batch loss jumps
    40-60x on a batch it misjudges and is back at once: BicycleGAN's `D:` 71 times over 5x in 979 records while the
    reconstruction loss keeps falling), notes. A jump that lasts, or a lone one, stays an incident."""
    if run.loss_without_ratio() != "adversarial":
        return found
    blips = [f for f in found if f.facts.get("one_record")]
    if len(blips) < hp.game_blips_min:
        return found
    as_notes(
        blips,
        "game_blip",
        f"over on the next record (no jump there), one of {len(blips)} such one-batch blips of the game",
    )
    return found
