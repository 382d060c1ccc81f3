"""Training-loss bumps the held-out loss does not show: notes, not incidents.

A log that measures a held-out loss (validation or test) at the steps of its training records tells a hard batch
from damage to the model. A per-epoch print of the last minibatch's loss (a tutorial loop's `Epoch [6], Loss: 0.229,
..., Test_loss: 0.116`) jumps 6x from one epoch to the next on the batch it happened to end on, while the model,
measured on the whole test set, keeps improving. A one- or two-record training-loss bump (`hard_spike.bump_max_records`,
no grad-norm evidence, not the unstable start) whose held-out loss, measured at the bump or at the next record,
stays under `hard_spike.heldout_rise` x its last value before the bump is such a batch: a note. A bump the
held-out loss answers, or one with no held-out measure beside it, keeps its severity.

`quiet_heldout_bumps(findings, run, params)`: pure, findings in, findings out.

The other way round, `detect_mismatch(run, params)`: a held-out loss that is `divergence.heldout_gap` x the training
loss from the first evaluation and climbs (its last third's median `divergence.heldout_climb` x its lowest value)
while the training loss halves (last third vs first third) measures data unlike the training data: the model
learns the training set and moves away from the held-out one (Keras' `validation_split` takes the last 20% of
unshuffled data: one class the training never sees, val accuracy 0, val loss 8.3 -> 51.5). One `divergence`
warning, `cause` `heldout_mismatch` (rules/data.toml). Overfitting, whose held-out loss starts near the training
loss, is not this.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.detect import signals
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData

# the held-out loss, as evaluation records name it (`eval_loss`) or as a training line prints it beside its loss
HELDOUT_NAMES = ("eval_loss", "val_loss", "valid_loss", "validation_loss", "test_loss")


def heldout_series(run: RunData) -> pl.DataFrame | None:
    """(step, value) of the run's held-out loss, any record kind, finite values, by step."""
    names = [n for n in HELDOUT_NAMES if run.has_metric(n)]
    if not names:
        return None
    rows = (
        run.metrics.lazy()  # (a long run's metrics are a lazy scan)
        .filter((pl.col("name") == names[0]) & pl.col("step").is_not_null() & pl.col("value").is_finite())
        .group_by("step")
        .agg(pl.col("value").first())
        .sort("step")
        .collect()
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
    held = heldout_series(run)
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


def detect_mismatch(run: RunData, params) -> list[Finding]:
    """See the module's doc: a held-out loss far above the training loss from the start, climbing while it falls."""
    dp = params.divergence
    held = heldout_series(run)
    loss = run.series("loss").filter(pl.col("value").is_finite() & (pl.col("value") > 0) & pl.col("step").is_not_null())
    if held is None or held.height < dp.heldout_min_records or loss.height < dp.heldout_min_records:
        return []
    loss = loss.sort("t")
    first = held.row(0, named=True)
    at = loss.filter(pl.col("step") <= first["step"])
    train0 = float((at if at.height else loss.head(1)).get_column("value")[-1])
    h, t = held.get_column("value"), loss.get_column("value")
    third_h, third_t = max(1, h.len() // 3), max(1, t.len() // 3)
    h_end, t_start, t_end = (
        float(h.tail(third_h).median()),
        float(t.head(third_t).median()),
        float(t.tail(third_t).median()),
    )
    if not (
        first["value"] >= dp.heldout_gap * train0
        and h_end >= dp.heldout_climb * float(h.min())
        and h_end > float(h.head(third_h).median())
        and t_end <= t_start / dp.heldout_climb
    ):
        return []
    last = held.row(held.height - 1, named=True)
    return [
        Finding(
            kind="divergence",
            step_start=int(first["step"]),
            step_end=int(last["step"]),
            peak_step=int(held.sort("value").row(held.height - 1, named=True)["step"]),
            severity="warning",
            score=h_end / float(h.min()),
            summary=(
                f"the held-out loss is {first['value'] / train0:.0f}x the training loss at the first evaluation "
                f"({first['value']:.4g} vs {train0:.4g}) and climbs to {h_end:.4g} while the training loss falls "
                f"{t_start:.4g} -> {t_end:.4g}: the held-out data are unlike the training data"
            ),
            evidence=[
                Evidence(
                    signal="eval_loss",
                    step=int(first["step"]),
                    value=float(first["value"]),
                    baseline=train0,
                    ratio=float(first["value"]) / train0,
                    note="held-out vs training loss at the first evaluation",
                ),
                Evidence(
                    signal="eval_loss",
                    step=int(last["step"]),
                    value=h_end,
                    baseline=float(h.min()),
                    ratio=h_end / float(h.min()),
                    note="median of the last third vs the lowest held-out loss",
                ),
            ],  # fmt: skip
            facts={"cause": "heldout_mismatch", "recovery": "never", "lead_signal": "eval_loss", "scope": "run"},
        )
    ]
