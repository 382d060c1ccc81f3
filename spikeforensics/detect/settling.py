"""Small loss bumps while training settles: notes, not incidents.

In its first records a run is still finding its footing (LR warmup, Adam's moments filling, a
tiny dataset's first epochs): the loss falls, bounces and falls again. A loss-only bump in that
phase that stays under `hard_spike.loss_ratio_floor` over its baseline and under that ratio of the
loss the run started from has lost some early progress and nothing else; it is a note. A bump
that far above the initial loss is the unstable start (`hard_spike._early_rise`); one of 1.3x or more, one
that the grad norm shows, or one after the settling phase keeps its severity. An RL critic's loss
(`RunData.loss_is_critic`) starts from bootstrapped targets near 0 and climbs while they fill in, so its
initial value is no reference: there the bump's ratio over its baseline decides alone (d3rlpy's IQL
critic, 65 -> 218 over its first 8 epochs, a 1.17x crest at the top of that climb).

`quiet_settling_bumps(findings, run, params)`: pure, findings in, findings out.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.detect.base import Finding
from spikeforensics.rundata import RunData


def quiet_settling_bumps(findings: list[Finding], run: RunData, params) -> list[Finding]:
    hp = params.hard_spike
    loss = run.series("loss").filter((pl.col("attempt") == 0) & pl.col("value").is_finite()).sort("t")
    if loss.height < hp.short_series_records or loss.get_column("step").null_count():
        return findings
    first = loss.row(0, named=True)
    if not run.starts_at_start(hp.start_max_step):
        return findings  # an excerpt from mid-training has no settling phase of its own
    cut = loss.get_column("step")[min(loss.height - 1, int(loss.height * hp.early_frac))]
    critic = run.loss_is_critic()
    for f in findings:
        hit = {e.signal for e in f.evidence}
        if f.severity != "warning" or hit != {"loss"} or f.attempt != 0 or f.step_end > cut:
            continue
        peak = max((e.ratio or 0.0) for e in f.evidence)
        top = loss.filter(pl.col("step").is_between(f.step_start, f.step_end)).get_column("value").max()
        if peak < hp.loss_ratio_floor and top is not None and (critic or top <= first["value"] * hp.loss_ratio_floor):
            f.severity = "info"
            f.facts["settling_bump"] = True
            against = (
                "its baseline (a critic's loss climbs from its start)"
                if critic
                else (f"its baseline and of the initial loss ({first['value']:g})")
            )
            f.summary += (
                f"; in the first {hp.early_frac:.0%} of training, under {hp.loss_ratio_floor:g}x {against}: "
                "the run settling, not an instability (note)"
            )
    return findings
