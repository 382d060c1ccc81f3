"""Bumps of a loss trained towards 0: notes, not incidents.

A loss that falls to a small share of where it started (a speaker-verification or classification
loss trained towards 0: GE2E's 4.0 -> 0.005 over 58,000 steps) keeps a per-batch noise that is
large in relative terms and tiny in absolute ones: single batches at 3-5x the median, a 25-record
median wandering 20%, all within a few hundredths of a loss that started at 4. In log space, where
the spike and drift tests judge, these look like spikes and drifts; on the loss itself they are
invisible. So a loss-only hard spike, soft drift or oscillation whose baseline is at most
`converged.level_frac` of the run's starting loss, and whose highest record stands less than
`converged.rise_frac` of that starting loss above the baseline, becomes a note that says so.

Only when the log begins at the start of training (else its first records are not where the loss
started), the loss has a ratio scale (`RunData.loss_without_ratio`), and it is not an RL critic's
(which starts near 0 and climbs). A finding the grad norm or any other signal shows keeps its
severity, as does a bump that takes the loss back towards where it started.

`quiet_converged_bumps(findings, run, params)`: pure, findings in, findings out.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.detect.base import Finding
from spikeforensics.rundata import RunData

KINDS = ("hard_spike", "soft_drift", "loss_oscillation")
LOSS_SIGNALS = {"loss", "loss_volatility"}  # the evidence of a finding the loss alone shows


def quiet_converged_bumps(findings: list[Finding], run: RunData, params) -> list[Finding]:
    cp = params.converged
    candidates = [
        f
        for f in findings
        if f.kind in KINDS and f.severity != "info" and f.evidence and {e.signal for e in f.evidence} <= LOSS_SIGNALS
    ]
    if not candidates or run.loss_without_ratio() or run.loss_is_critic():
        return findings
    if not run.starts_at_start(params.hard_spike.start_max_step):
        return findings
    loss = run.series("loss").filter(pl.col("value").is_finite()).sort("t")
    if loss.height < params.hard_spike.short_series_records:
        return findings
    start = loss.head(cp.start_median_records).get_column("value").median()
    if start is None or start <= 0:
        return findings
    window = params.series.window
    for f in candidates:
        own = loss.filter(pl.col("attempt") == f.attempt)
        before = own.filter(pl.col("step") < f.step_start).tail(window).get_column("value")
        during = own.filter(pl.col("step").is_between(f.step_start, f.step_end)).get_column("value")
        if before.len() < params.series.min_side or during.is_empty():
            continue
        base, top = float(before.median()), float(during.max())
        if base > cp.level_frac * start or top - base >= cp.rise_frac * start:
            continue
        f.severity = "info"
        f.facts["converged_loss"] = {"start": start, "baseline": base, "top": top}
        f.summary += (
            f"; the loss has converged to {base:.3g} ({base / start:.1%} of the {start:.3g} it started from) and this "
            f"rise to {top:.3g} stays within {cp.rise_frac:.0%} of that start: per-batch noise at a tiny loss (note)"
        )
    return findings
