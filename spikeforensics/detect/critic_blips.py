"""An RL critic's one-record loss blips: notes, not incidents, when the run has several.

A Q-network's or value function's loss (`RunData.loss_is_critic`: `td_loss`, `critic_loss`, `value_loss`, ...)
is measured against bootstrapped targets that move with the policy and the target network: a logged interval's
loss jumps several times over on a batch of rare transitions and is back on the next record (SB3's DQN on
Breakout: single-batch TD losses of 2.8x, 3.4x and 17.7x its level between records at the usual level, while the
returns keep rising). As with one side of a GAN's pair (`signed_jump._game_blips`), a loss-only hard spike of one
record under `hard_spike.critic_blip_max_ratio` x its baseline after which the loss is `hard_spike.loss_ratio_floor` x
lower on the next record that is no blip itself is such a blip (a 100x+ epoch of a DDPG critic is a Q-value blow-up) when the run has `signed_jump.game_blips_min` or more of them: notes. A
lone one stays an incident, and so does a rise that lasts or that the grad norm shows.

`quiet_critic_blips(findings, run, params)`: pure, findings in, findings out.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.detect.base import Finding
from spikeforensics.rundata import RunData


def _one_record_blips(findings: list[Finding], run: RunData, hp) -> list[Finding]:
    """Loss-only hard spikes of one record after which the loss falls back by `hard_spike.loss_ratio_floor` or more
    on the next record that is no such spike itself (a critic's loss trends with the returns, so "back at the level
    before" is too strict; two blips in a row are judged by the record after the second)."""
    loss = run.series("loss").filter(pl.col("value").is_finite()).sort("t")
    candidates = [
        f
        for f in findings
        if f.kind == "hard_spike"
        and f.severity != "info"
        and f.step_start == f.step_end
        and f.evidence
        and {e.signal for e in f.evidence} == {"loss"}
        and f.evidence[0].value is not None
        and f.evidence[0].baseline
        and f.evidence[0].value < hp.critic_blip_max_ratio * f.evidence[0].baseline
    ]
    spiked = {(f.attempt, f.peak_step) for f in candidates}
    rows = loss.select("attempt", "step", "value").rows()
    at = {(a, s): i for i, (a, s, _) in enumerate(rows)}
    out = []
    for f in candidates:
        i = at.get((f.attempt, f.peak_step))
        if i is None:
            continue
        j = i + 1
        while j < len(rows) and (rows[j][0], rows[j][1]) in spiked:
            j += 1
        if j < len(rows) and rows[j][2] * hp.loss_ratio_floor <= rows[i][2]:
            out.append(f)
    return out


def quiet_critic_blips(findings: list[Finding], run: RunData, params) -> list[Finding]:
    if not run.loss_is_critic():
        return findings
    blips = _one_record_blips(findings, run, params.hard_spike)
    if len(blips) < params.signed_jump.game_blips_min:
        return findings
    for f in blips:
        f.severity = "info"
        f.facts["critic_blip"] = True
        f.summary += (
            f"; back on the next record, one of {len(blips)} such one-batch blips of a critic's loss against "
            "moving bootstrapped targets (note)"
        )
    return findings
