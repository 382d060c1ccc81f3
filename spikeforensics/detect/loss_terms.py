"""A loss term switched on mid-run: the objective changed, not the model.

Some trainers add a term to the loss part way through: YOLOX prints `l1_loss: 0.0` for its first 285 of 300
epochs, then `--->Add additional L1 loss now!` and `l1_loss: 0.7` for the last 15 (its `no_aug_epochs`), and the
total loss it prints steps up by about that much; a VAE's KL term annealed in from a weight of 0, a distillation
term enabled after a warm-up, do the same. The soft-drift and divergence tests see the total's step up as a drift.
So a loss-only `soft_drift` or `divergence` whose rise the switched-on term accounts for becomes a note that says
so: a term of the training records, other than the loss judged, printed as exactly 0 on the `series.min_side` or
more records before a step and above 0 on every record from there to the finding's end (the drift test finds a
step up late, and a drift later in the same phase is the same change), whose median from there is at least
`loss_terms.rise_share` of the loss's rise (median from that step to the finding's end over the median of the
`series.window` records before it: a loss that fell since the switch has no rise to explain).

`quiet_switched_on_terms(findings, run, params)`: pure, findings in, findings out.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.detect.base import Finding
from spikeforensics.rundata import RunData

KINDS = ("soft_drift", "divergence")
LOSS_SIGNALS = {"loss", "loss_volatility"}  # the evidence of a finding the loss alone shows


def quiet_switched_on_terms(findings: list[Finding], run: RunData, params) -> list[Finding]:
    candidates = [
        f
        for f in findings
        if f.kind in KINDS and f.severity != "info" and f.evidence and {e.signal for e in f.evidence} <= LOSS_SIGNALS
    ]
    if not candidates:
        return findings
    terms = _terms(run)
    if not terms:
        return findings
    loss = run.series("loss").filter(pl.col("value").is_finite())
    window, min_side = params.series.window, params.series.min_side
    for f in candidates:
        own = loss.filter(pl.col("attempt") == f.attempt)
        for name in terms:
            found = _switched_on(run, name, f, min_side)
            if found is None:
                continue
            first_on, level = found
            before = own.filter(pl.col("step") < first_on).tail(window).get_column("value")
            after = own.filter(pl.col("step").is_between(first_on, f.step_end)).get_column("value")
            if before.len() < min_side or after.is_empty():
                continue
            rise = float(after.median()) - float(before.median())
            if rise > 0 and level >= params.loss_terms.rise_share * rise:
                f.severity = "info"
                f.facts["switched_on_term"] = {"name": name, "step": first_on, "level": level, "loss_rise": rise}
                f.summary += (
                    f"; the loss term `{name}`, printed as 0 before, is on from step {first_on} (median {level:.3g}) "
                    f"and accounts for the loss's rise of {rise:.3g}: the objective changed, not the model (note)"
                )
                break
    return findings


def _switched_on(run: RunData, name: str, f: Finding, min_side: int) -> tuple[int, float] | None:
    """(the step the term `name` switched on at, its median from there to the finding's end): its last 0 up to the
    finding's end is followed by values above 0 only, and the `min_side` records before that step are all 0."""
    term = (
        run.series(name)
        .filter((pl.col("attempt") == f.attempt) & pl.col("value").is_finite() & (pl.col("step") <= f.step_end))
        .sort("step")
    )
    values = term.get_column("value")
    zeros = (values == 0).arg_true()
    if zeros.len() < min_side or int(zeros[-1]) + 1 >= term.height:
        return None
    cut = int(zeros[-1]) + 1
    first_on = int(term.item(cut, "step"))
    if bool((values.slice(cut - min_side, min_side) != 0).any()):
        return None
    return first_on, float(values.slice(cut).median())


def _terms(run: RunData) -> list[str]:
    """The loss terms of the training records other than the loss judged (no eval ones)."""
    judged = run.resolve("loss")
    return [
        n for n in run.loss_term_names() if n not in (judged, "loss") and not n.startswith(("eval_", "val_", "test_"))
    ]
