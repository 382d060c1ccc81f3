"""Training-loss bumps the held-out loss does not show: notes, not incidents.

A log that measures a held-out loss (validation or test) at the steps of its training records tells a hard batch
from damage to the model. A per-epoch print of the last minibatch's loss (a tutorial loop's `Epoch [6], Loss: 0.229,
..., Test_loss: 0.116`) jumps 6x from one epoch to the next on the batch it happened to end on, while the model,
measured on the whole test set, keeps improving. A one- or two-record training-loss bump (`hard_spike.bump_max_records`,
no grad-norm evidence, not the unstable start) whose held-out loss, measured at the bump or at the next record,
stays under `hard_spike.heldout_rise` x its last value before the bump is such a batch: a note. A bump the
held-out loss answers, or one with no held-out measure beside it, keeps its severity.

`quiet_heldout_bumps(findings, run, params)`: pure, findings in, findings out.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.detect import signals
from spikeforensics.detect.base import Finding
from spikeforensics.rundata import RunData

# the held-out loss, as evaluation records name it (`eval_loss`) or as a training line prints it beside its loss
HELDOUT_NAMES = ("eval_loss", "val_loss", "valid_loss", "validation_loss", "test_loss")


def _heldout(run: RunData) -> pl.DataFrame | None:
    """(step, value) of the run's held-out loss, any record kind, finite values, by step."""
    names = [n for n in HELDOUT_NAMES if run.has_metric(n)]
    if not names:
        return None
    rows = (
        run.metrics.filter((pl.col("name") == names[0]) & pl.col("step").is_not_null() & pl.col("value").is_finite())
        .group_by("step")
        .agg(pl.col("value").first())
        .sort("step")
    )
    return rows if rows.height else None


def quiet_heldout_bumps(findings: list[Finding], run: RunData, params) -> list[Finding]:
    hp = params.hard_spike
    bumps = [
        f
        for f in findings
        if f.kind == "hard_spike"
        and f.severity != "info"
        and {e.signal for e in f.evidence} == {"loss"}
        and not f.facts.get("early_rise")
    ]
    if not bumps:
        return findings
    held = _heldout(run)
    if held is None or held.height < 3:
        return findings
    loss = run.series("loss").select("step", "attempt")
    reach = signals.record_interval(run)
    for f in bumps:
        records = loss.filter((pl.col("attempt") == f.attempt) & pl.col("step").is_between(f.step_start, f.step_end))
        if records.height > hp.bump_max_records:
            continue
        before = held.filter(pl.col("step") < f.step_start).tail(1).get_column("value")
        after = held.filter(pl.col("step").is_between(f.step_start, f.step_end + reach)).get_column("value")
        if before.len() == 0 or after.len() == 0 or not before[0] > 0:
            continue
        if float(after.max()) < hp.heldout_rise * float(before[0]):
            f.severity = "info"
            f.facts["heldout_calm"] = {"before": float(before[0]), "after": float(after.max())}
            f.summary += (
                f"; the held-out loss did not move ({float(before[0]):.4g} before, {float(after.max()):.4g} at the "
                "bump): a hard batch, not damage to the model (note)"
            )
    return findings
