"""An RL critic's one-record loss blips: notes, not incidents, when the run has several.

A Q-network's or value function's loss (`RunData.loss_is_critic`: `td_loss`, `critic_loss`, `value_loss`, ...)
is measured against bootstrapped targets that move with the policy and the target network: a logged interval's
loss jumps several times over on a batch of rare transitions and is back on the next record (SB3's DQN on
Breakout: single-batch TD losses of 2.8x, 3.4x and 17.7x its level between records at the usual level, while the
returns keep rising). As with one side of a GAN's pair (`signed_jump._game_blips`), a loss-only hard spike of one
record under `hard_spike.critic_blip_max_ratio` x its baseline after which the loss is `hard_spike.loss_ratio_floor` x
lower on the next record that is no blip itself is such a blip (a 100x+ epoch of a DDPG critic is a Q-value blow-up) when the run has `signed_jump.game_blips_min` or more of them: notes. A
lone one stays an incident, and so does a rise that lasts or that the grad norm shows.

The same loss also climbs for good while the targets fill in and the returns grow (PyMARL's QMIX on SMAC: the TD
loss 0.2 -> 1.9 over its first 600k of 10M steps as the returns go 1.8 -> 15, the win rate rising): a baseline
taken over the first records then sees a 2-5x "spike" on a ramp. A loss-only hard spike under
`critic_blip_max_ratio` x its baseline reached by records none of which is `hard_spike.loss_ratio_floor` x the
one before it (from the record before the finding to its end) is such a climb: a note, whatever the count.

`quiet_critic_blips(findings, run, params)`: pure, findings in, findings out.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.detect.base import Finding, as_notes
from spikeforensics.rundata import RunData


def _loss_only_under_cap(f: Finding, hp) -> bool:
    """A loss-only hard spike (warning or above) under `critic_blip_max_ratio` x its baseline."""
    ev = f.evidence[0] if f.evidence else None
    return (
        f.kind == "hard_spike"
        and f.severity != "info"
        and {e.signal for e in f.evidence} == {"loss"}
        and ev.value is not None
        and bool(ev.baseline)
        and ev.value < hp.critic_blip_max_ratio * ev.baseline
    )


def _one_record_blips(findings: list[Finding], run: RunData, hp) -> list[Finding]:
    """Loss-only hard spikes of one record under `critic_blip_max_ratio` x their baseline after which the loss falls
    back by `hard_spike.loss_ratio_floor` or more on the next record that is no such spike itself (a critic's loss
    trends with the returns, so "back at the level before" is too strict; two blips in a row are judged by the
    record after the second)."""
    candidates = [f for f in findings if _loss_only_under_cap(f, hp) and f.step_start == f.step_end]
    return _fall_back(candidates, run, hp) if candidates else []


def _fall_back(candidates: list[Finding], run: RunData, hp) -> list[Finding]:
    """The candidates whose loss falls back on the next record that is no candidate itself."""
    spiked = pl.DataFrame(
        {"attempt": [f.attempt for f in candidates], "step": [f.peak_step for f in candidates], "_spiked": True},
        schema={"attempt": pl.Int32, "step": pl.Int64, "_spiked": pl.Boolean},
    )
    loss = (
        run.series("loss")
        .filter(pl.col("value").is_finite())
        .sort("t")
        .select(pl.col("attempt").cast(pl.Int32), pl.col("step").cast(pl.Int64), "value")
        .join(spiked, on=["attempt", "step"], how="left")
        .with_columns(pl.col("_spiked").fill_null(False))
    )
    # the value of the next record that is no candidate: the clean values, shifted up one and filled backwards
    clean = pl.when(~pl.col("_spiked")).then(pl.col("value"))
    back = loss.with_columns(clean.shift(-1).backward_fill().alias("_next")).filter(
        pl.col("_spiked") & (pl.col("_next") * hp.loss_ratio_floor <= pl.col("value"))
    )
    fell = set(zip(back.get_column("attempt").to_list(), back.get_column("step").to_list()))
    return [f for f in candidates if (f.attempt, f.peak_step) in fell]


def _climbs(findings: list[Finding], run: RunData, hp) -> list[Finding]:
    """Loss-only hard spikes under `critic_blip_max_ratio` x their baseline whose records, from the one before the
    finding to its end, each stay under `loss_ratio_floor` x the record before: a ramp, no jump."""
    candidates = [f for f in findings if _loss_only_under_cap(f, hp)]
    if not candidates:
        return []
    loss = (
        run.series("loss")
        .filter(pl.col("value").is_finite() & (pl.col("value") > 0))
        .sort("t")
        .select("attempt", "step", (pl.col("value") / pl.col("value").shift(1)).over("attempt").alias("_up"))
    )
    out = []
    for f in candidates:
        span = loss.filter((pl.col("attempt") == f.attempt) & pl.col("step").is_between(f.step_start, f.step_end))
        jumps = span.get_column("_up")
        if span.height and jumps.null_count() == 0 and jumps.max() < hp.loss_ratio_floor:
            out.append(f)
    return out


def quiet_critic_blips(findings: list[Finding], run: RunData, params) -> list[Finding]:
    if not run.loss_is_critic():
        return findings
    climbs = _climbs(findings, run, params.hard_spike)
    as_notes(
        climbs,
        "critic_climb",
        f"no record {params.hard_spike.loss_ratio_floor:g}x the one before: a critic's loss climbing with its "
        "bootstrapped targets as the returns grow, not a spike",
    )
    blips = _one_record_blips(findings, run, params.hard_spike)
    if len(blips) < params.signed_jump.game_blips_min:
        return findings
    as_notes(
        blips,
        "critic_blip",
        f"back on the next record, one of {len(blips)} such one-batch blips of a critic's loss against moving "
        "bootstrapped targets",
    )
    return findings
