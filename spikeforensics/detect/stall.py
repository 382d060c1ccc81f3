"""A run that cannot learn: the learning rate is exactly 0 and the loss does not fall.

An LR printed as 0.0 on `stall.lr_zero_records` or more consecutive training records (a
warmup that starts at 0 prints it once, on its first step) while the loss over those records
does not fall (the median of their last third >= `stall.loss_fall_ratio` x the median of
their first third) means the optimizer is not moving the weights: a scheduler that never
leaves 0, a warmup longer than the run, an LR of 0 in the config. One `no_progress` finding
(warning: nothing explodes, but nothing is learned), fact `cause` = `lr_zero`. A zero stretch that
ends the log after the LR decayed to it is a schedule's normal end (`_decayed_to_zero`), and one that opens the
log with the LR climbing out of it from the print's last digit a warmup printed rounded (`_warmup_from_zero`):
neither is a finding.

Updates skipped to the end of the log: the last `stall.skipped_tail_records` or more training records
each hold a `skipped_step` event at their step (ESPnet2's `optim_step_time=nan`: no optimizer step ran
in the interval). Whatever the loss does over them (an interval mean still drifts down a little) the
trainer is discarding every update (a grad
norm that stays non-finite under AMP, a guard that rejects every batch): `no_progress`, fact `cause` =
`updates_skipped`.

A loss printed as exactly 0 on every record of the log (`_loss_all_zero`): `no_progress`, `cause` =
`loss_zero` (a masked non-finite loss, or every label masked out). The same nonzero loss on every record from the
first (`_loss_constant`): `cause` = `loss_constant` (no gradient reaches the weights); the same nonzero loss on the
last records after it had moved (`_loss_frozen`): `cause` = `loss_frozen` (the printed loss is no longer updated). The
same nonzero held-out loss at every evaluation while the training loss moves (`_heldout_constant`): `cause` =
`heldout_constant` (no update reached the weights).

A loss that collapses (`_loss_collapse`): within the first `stall.collapse_within` records it falls to
`stall.collapse_ratio` of its first record or less and stays there to the end of the log (OLMo#692: 12.18,
then 1.8e-06, then 0.0 from scratch). No model learns four orders of magnitude in a few updates: the loss
no longer measures the task (labels leaking into the inputs, every target masked, a causal mask that lets a
token see itself). `no_progress`, `cause` = `loss_collapse`.

A loss at chance (`_loss_at_chance`): from the start of training to the end of the log its median sits at ln K
(`stall.chance_tol`), the cross-entropy of a uniform guess over K classes (binary 0.6931, 10 classes 2.3026,
ImageNet 6.9078), the last third of its records is no lower, and no lower than its first third by more than the
records' interquartile range (a slow, steady fall from ln K is learning). A run that learns leaves that level in its first
records; one that stays there outputs the same distribution whatever the input: saturated sigmoids or dead ReLUs
that pass no gradient, a layer that scales the signal to nothing, inputs or labels that never reach the model.
`no_progress`, `cause` = `chance_level`.

Pure: `detect(run, params)` reads the `lr` and loss series and the `skipped_step` events only.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.detect import signals
from spikeforensics.detect.base import Evidence, Finding, row_step
from spikeforensics.detect.heldout import heldout_series
from spikeforensics.rundata import RunData


def _median(values: pl.Series) -> float | None:
    finite = values.filter(values.is_finite())  # a null is not finite: dropped too
    return float(finite.median()) if finite.len() else None


def _warmup_from_zero(lr: pl.DataFrame, zero_run: dict, sp) -> bool:
    """The zero stretch opens the log and the LR climbs out of it from the print's last digit: a warmup from 0
    whose first steps print as 0 (Flax's gemma example: 1.6e-6 more per step, printed with 5 decimals:
    `LR: 0.00000` on steps 0-2, then 0.00001, 0.00002 ...). Not a frozen run: the first positive LR after it is
    `stall.decayed_quanta` units of the print (its smallest move) and the LR keeps rising, to at least twice it."""
    if lr.filter(pl.col("t") < zero_run["t0"]).height:
        return False
    after = lr.filter((pl.col("t") > zero_run["t1"]) & pl.col("value").is_finite()).sort("t").get_column("value")
    if after.len() < 2 or not after[0] > 0:
        return False
    moves = after.diff().abs()
    quantum = float(moves.filter(moves > 0).min() or 0.0)
    return after[0] <= sp.decayed_quanta * quantum * (1 + 1e-6) and after.max() >= 2 * after[0]


def _decayed_to_zero(lr: pl.DataFrame, zero_run: dict, sp) -> bool:
    """The zero stretch ends the log and the LR came down to it: the end of a schedule that decays to 0
    (llm.c, cosine/linear to zero), its last steps printed as 0.000000. Not a frozen run: the LR before it
    was positive and had decayed to under `stall.decayed_frac` of its peak, or to the last digit of its print
    (`stall.decayed_quanta` units of it, under `stall.decayed_print_frac` of its peak)."""
    if lr.filter(pl.col("t") > zero_run["t1"]).height:
        return False
    before = lr.filter((pl.col("t") < zero_run["t0"]) & pl.col("value").is_finite()).sort("t").get_column("value")
    if before.len() == 0 or not before.max() > 0:
        return False
    if 0 < before[-1] <= sp.decayed_frac * before.max():
        return True
    # ... or to the print's last digit: a linear decay of 2e-5 printed with 6 decimals (VinVL's `lr: 0.000001`, then
    # `lr: 0.000000`) shows its last positive value at one unit of the print, 5% of its peak
    moves = before.diff().abs()
    quantum = float(moves.filter(moves > 0).min() or 0.0)
    # (with float rounding room: 2e-05 - 1.9e-05 is 9.99999999999999e-07, one unit of the print)
    unit = sp.decayed_quanta * quantum * (1 + 1e-6)
    return 0 < before[-1] <= unit and before[-1] < sp.decayed_print_frac * before.max()


def detect(run: RunData, params) -> list[Finding]:
    lr_zero = _lr_zero(run, params)
    return (
        lr_zero
        + _skipped_to_the_end(run, params)
        + (
            _loss_all_zero(run, params)
            or _loss_collapse(run, params)
            or _loss_at_chance(run, params)
            # (an LR at 0 already says why the loss never moves)
            or (
                []
                if lr_zero
                else _loss_constant(run, params) or _heldout_constant(run, params) or _loss_frozen(run, params)
            )
        )
        + _back_to_chance(run, params)
    )


def _stall(lo: int, hi: int, records: int, summary: str, evidence: Evidence, facts: dict) -> Finding:
    """One `no_progress` warning over steps lo-hi (nothing explodes, nothing is learned)."""
    return Finding(
        kind="no_progress",
        step_start=lo,
        step_end=hi,
        peak_step=lo,
        severity="warning",
        score=float(records),
        summary=summary,
        evidence=[evidence],
        facts=facts,
    )


def _loss_all_zero(run: RunData, params) -> list[Finding]:
    """Every training loss of the log printed as exactly 0 (`stall.lr_zero_records` or more records): no
    model trains at a loss of 0 from its first step; the trainer is printing a masked non-finite loss
    (HF Trainer under fp16) or every label is masked out. Nothing explodes, nothing is learned."""
    loss = run.series("loss")
    if loss.height < params.stall.lr_zero_records or not (loss.get_column("value") == 0).all():
        return []
    steps = loss.get_column("step").drop_nulls()
    lo, hi = (int(steps.min()), int(steps.max())) if steps.len() else (0, loss.height - 1)
    summary = (
        f"the loss is exactly 0 on all {loss.height} records: a masked non-finite loss or labels that are "
        "all masked out, not a model that learns"
    )
    ev = Evidence(signal="loss", step=lo, value=0.0, baseline=None, note=f"loss = 0 on {loss.height} records")
    return [_stall(lo, hi, loss.height, summary, ev, {"cause": "loss_zero", "scope": "run"})]


def _loss_constant(run: RunData, params) -> list[Finding]:
    """Every training loss of the log printed as the same nonzero value, from the first record to the last
    (`stall.constant_records` or more): not one update moved it. The gradient is zero: the output does not depend
    on the weights (a softmax over a single unit is 1 whatever the input: a Keras reproduction's `loss: 0.6667` for
    20 epochs), the graph is cut (a detached tensor, frozen parameters), or nothing is applied. A loss that
    plateaus later, or one at chance (`_loss_at_chance`), is not this."""
    loss = run.series("loss").filter(pl.col("value").is_finite())
    if loss.height < params.stall.constant_records or run.series("loss").height != loss.height:
        return []
    values = loss.get_column("value")
    if values.n_unique() != 1 or values[0] == 0:
        return []
    steps = loss.get_column("step").drop_nulls()
    lo, hi = (int(steps.min()), int(steps.max())) if steps.len() else (0, loss.height - 1)
    summary = (
        f"the loss is {values[0]:.6g} on all {loss.height} records, not one update moved it: the output does not "
        "depend on the weights (no gradient reaches them)"
    )
    ev = Evidence(signal="loss", step=lo, value=float(values[0]), note=f"the same loss on {loss.height} records")
    return [_stall(lo, hi, loss.height, summary, ev, {"cause": "loss_constant", "scope": "run"})]


def _heldout_constant(run: RunData, params) -> list[Finding]:
    """The held-out loss printed as the same nonzero value at every evaluation (`stall.constant_records` or more, at
    distinct steps) while the training loss moves from record to record: an evaluation on a fixed set gives the same
    number only when the weights are the same, so no update ever reached the model (an optimizer built over other
    tensors than the model's parameters, every parameter frozen). The training loss moves with its batches, which is
    why it alone does not show it (cadence-gemma's projector: 1,000 records, the eval loss -0.000723 at all 1,000).
    `no_progress`, `cause` = `heldout_constant`."""
    sp = params.stall
    held = heldout_series(run)
    if held is None or held.height < sp.constant_records:
        return []
    values = held.get_column("value")
    train = run.series("loss").filter(pl.col("value").is_finite()).get_column("value")
    if values.n_unique() != 1 or values[0] == 0 or train.len() < sp.constant_records or train.n_unique() < 2:
        return []
    steps = held.get_column("step")
    lo, hi = int(steps.min()), int(steps.max())
    summary = (
        f"the held-out loss is {values[0]:.6g} at all {held.height} evaluations (steps {lo}-{hi}) while the training "
        "loss moves: the weights never changed (the optimizer does not update the model's parameters, or all of "
        "them are frozen)"
    )
    ev = Evidence(
        signal="eval_loss", step=lo, value=float(values[0]), note=f"the same held-out loss at {held.height} evaluations"
    )
    return [_stall(lo, hi, held.height, summary, ev, {"cause": "heldout_constant", "scope": "run"})]


def _loss_frozen(run: RunData, params) -> list[Finding]:
    """The same nonzero loss on the last `stall.frozen_records` or more training records (distinct steps), after it
    had moved: the printed loss is no longer updated. A meter that skips non-finite values (NVIDIA's MLPerf Mask R-CNN
    keeps printing `loss: 0.7799 (0.9819)` once the loss is NaN), a process printing a stale value, or an output that
    stopped depending on the weights: nothing is learned from there on. Only when the print resolves the loss's noise:
    the records before them (as many, or all there are: `stall.frozen_records` at least) print at least
    `stall.frozen_moving_share` distinct values (a converged loss printed with few digits repeats by rounding, before
    its last records too). `no_progress`, `cause` = `loss_frozen`."""
    sp = params.stall
    loss = (
        run.series("loss")
        .filter(pl.col("value").is_finite() & pl.col("step").is_not_null())
        .unique("step", keep="first", maintain_order=True)
    )
    values = loss.get_column("value")
    if values.len() < 2 * sp.frozen_records or values[-1] == 0:
        return []
    changed = (values != values.shift(1)).fill_null(True)
    tail = int(values.len() - (changed.arg_true().max() or 0))  # records in the final run of one value
    start = max(0, values.len() - 2 * tail)
    before = values.slice(start, values.len() - tail - start)  # up to as many records before the frozen ones
    if (
        tail < sp.frozen_records
        or before.len() < sp.frozen_records
        or before.n_unique() < sp.frozen_moving_share * before.len()
    ):
        return []
    steps = loss.get_column("step")
    lo, hi = int(steps[values.len() - tail]), int(steps[-1])
    lr = run.series("lr").filter(pl.col("step") >= lo).get_column("value")
    if lr.len() and lr[-1] == 0:
        return []  # the LR ends at 0 (a schedule decayed to it, `_decayed_to_zero`): nothing is meant to move
    summary = (
        f"the loss is printed as {values[-1]:.6g} on the last {tail} records (steps {lo}-{hi}) after it had moved on "
        "every record before: it is no longer updated (a non-finite loss the meter skips, or a stalled process)"
    )
    ev = Evidence(signal="loss", step=lo, value=float(values[-1]), note=f"the same loss on the last {tail} records")
    return [_stall(lo, hi, tail, summary, ev, {"cause": "loss_frozen", "scope": "tail"})]


def _loss_collapse(run: RunData, params) -> list[Finding]:
    """See the module docstring: the loss falls >= 1/collapse_ratio within collapse_within records and stays down."""
    sp = params.stall
    loss = run.series("loss").sort("t").filter(pl.col("value").is_finite())
    if loss.height < 2 or run.loss_without_ratio():
        return []
    values = loss.get_column("value")
    first = float(values[0])
    if not first > 0:
        return []
    low = values <= first * sp.collapse_ratio
    hit = low.arg_true()
    if hit.len() == 0 or int(hit[0]) > sp.collapse_within or not bool(low.slice(int(hit[0])).all()):
        return []
    at = int(hit[0])
    steps = loss.get_column("step")
    lo = int(steps[at]) if steps[at] is not None else int(loss.get_column("t")[at])
    hi = int(steps.drop_nulls().max()) if steps.drop_nulls().len() else int(loss.get_column("t").max())
    n = loss.height - at
    last = float(values[-1])
    summary = (
        f"the loss collapsed from {first:.4g} to {float(values[at]):.3g} within {at} record(s) and stays there "
        f"({last:.3g} at the end, {n} records): no model learns that fast; the loss no longer measures the task"
    )
    ev = Evidence(
        signal="loss", step=lo, value=float(values[at]), baseline=first, ratio=float(values[at]) / first,
        note=f"loss {first:.4g} -> {float(values[at]):.3g} in {at} record(s)",
    )  # fmt: skip
    return [_stall(lo, hi, n, summary, ev, {"cause": "loss_collapse", "scope": "run"})]


def chance_level(median: float, sp) -> int | None:
    """K when `median` is within `stall.chance_tol` (and a quarter of the gap to the next K's) of ln K, the
    cross-entropy of a uniform guess over K classes, for K in `stall.chance_classes`; else None."""
    for k in sp.chance_classes:
        if k >= 2 and abs(median - math.log(k)) <= _chance_tol(k, sp):
            return k
    return None


def _chance_tol(k: int, sp) -> float:
    return min(sp.chance_tol, 0.25 * (math.log(k + 1) - math.log(k)))


def _loss_at_chance(run: RunData, params) -> list[Finding]:
    """See the module docstring: from the start of training to the end of the log the loss sits at ln K."""
    sp = params.stall
    if run.loss_without_ratio() or run.loss_is_critic() or not run.starts_at_start(params.hard_spike.start_max_step):
        return []
    loss = run.series("loss").sort("t").filter(pl.col("value").is_finite())
    if loss.height < sp.chance_min_records:
        return []
    body = loss.get_column("value").slice(1)  # (the first record may precede any update)
    k = chance_level(float(body.median()), sp)
    if k is None:
        return []
    level, tol = math.log(k), _chance_tol(k, sp)
    tail = body.slice(body.len() - max(1, body.len() // 3))
    if float(tail.median()) < level - tol:
        return []  # the run got below chance by its end: it learns, however slowly
    spread = float(body.quantile(0.75)) - float(body.quantile(0.25))
    if spread > sp.chance_tol:
        return []  # a noisy loss whose median passes ln K, not one pinned there
    head = body.head(max(1, body.len() // 3))
    if float(head.median()) - float(tail.median()) > spread:
        # falling from its first third to its last by more than its own spread: slow learning from where the
        # objective starts (a DPO loss is ln 2 at step 0 by construction: 0.692 -> 0.680 at beta 0.05, its reward
        # accuracy rising 0.47 -> 0.95), not a loss pinned at ln K
        return []
    steps = loss.get_column("step").drop_nulls()
    lo, hi = (int(steps.min()), int(steps.max())) if steps.len() else (0, loss.height - 1)
    summary = (
        f"the loss stays at {float(body.median()):.4g} from the start to the end of the log ({loss.height} records): "
        f"ln {k} = {level:.4f}, the cross-entropy of a uniform guess over {k} classes; the output does not depend on "
        "the input (saturated or dead units passing no gradient, a layer that zeroes the signal, inputs or labels "
        "that never reach the model): nothing is learned"
    )
    ev = Evidence(
        signal="loss", step=lo, value=float(body.median()), baseline=level, ratio=float(body.median()) / level,
        note=f"median loss {float(body.median()):.4g} vs ln {k} = {level:.4f} over {loss.height} records",
    )  # fmt: skip
    return [_stall(lo, hi, loss.height, summary, ev, {"cause": "chance_level", "chance_classes": k, "scope": "run"})]


def _back_to_chance(run: RunData, params) -> list[Finding]:
    """The loss had learned (a record at most `stall.collapse_drop` of ln K) and climbed back to ln K, where the
    last third of the log sits (median from ln K - `chance_tol` to `chance_collapse_above` over it, interquartile
    range under `chance_tol`): the model collapsed to a constant output and lost what it learned (a PyTorch MNIST
    loop that never zeroes its gradients: 0.84 at epoch 1, then up to 2.33 = ln 10 + 1% for the last five epochs).
    One critical `divergence`, cause `chance_collapse`."""
    sp = params.stall
    if run.loss_without_ratio() or run.loss_is_critic():
        return []
    loss = run.series("loss").sort("t").filter(pl.col("value").is_finite())
    if loss.height < sp.chance_min_records:
        return []
    values = loss.get_column("value")
    n_tail = max(3, values.len() // 3)
    tail, head = values.tail(n_tail), values.head(values.len() - n_tail)
    if head.len() == 0:
        return []
    mid = float(tail.median())
    k = next(
        (
            k
            for k in sp.chance_classes
            if k >= 2 and math.log(k) - _chance_tol(k, sp) <= mid <= math.log(k) * (1 + sp.chance_collapse_above)
        ),
        None,
    )
    if k is None or float(tail.quantile(0.75)) - float(tail.quantile(0.25)) > sp.chance_tol:
        return []
    level, best = math.log(k), float(head.min())
    if best > sp.collapse_drop * level:
        return []  # it never learned: `_loss_at_chance`'s case, or a plateau
    low = loss.head(head.len()).filter(pl.col("value") == best).row(0, named=True)
    climb = loss.filter((pl.col("t") > low["t"]) & (pl.col("value") >= level - _chance_tol(k, sp))).row(0, named=True)
    last = loss.row(loss.height - 1, named=True)

    summary = (
        f"the loss had come down to {best:.4g} and climbed back to {mid:.4g}, ln {k} = {level:.4f}, the cross-entropy "
        f"of a uniform guess over {k} classes, where it stays: the model collapsed to a constant output and lost "
        "what it had learned"
    )
    return [
        Finding(
            kind="divergence",
            step_start=row_step(low),
            step_end=row_step(last),
            peak_step=row_step(climb),
            severity="critical",
            score=mid / best,
            summary=summary,
            evidence=[
                Evidence(
                    signal="loss",
                    step=row_step(climb),
                    value=mid,
                    baseline=best,
                    ratio=mid / best,
                    note=f"median of the last {n_tail} records vs ln {k} = {level:.4f}; lowest before: {best:.4g}",
                )  # fmt: skip
            ],
            facts={
                "cause": "chance_collapse",
                "chance_classes": k,
                "onset_step": row_step(low),
                "recovery": "never",
                "recovery_loss": "never",
                "lead_signal": "loss",
            },
        )
    ]


def _skipped_to_the_end(run: RunData, params) -> list[Finding]:
    sp = params.stall
    skips = run.events_of("skipped_step").filter(pl.col("step").is_not_null())
    loss = run.series("loss")
    if skips.height < sp.skipped_tail_records or loss.height <= sp.skipped_tail_records:
        return []
    loss = signals.in_order(loss, "t")  # (sorted only when out of order: a sort copies every column)
    last_attempt = loss.get_column("attempt").max()
    tail = loss.filter(pl.col("attempt") == last_attempt)
    flags = tail.with_columns(
        pl.col("step")
        .is_in(skips.filter(pl.col("attempt") == last_attempt).get_column("step").implode())
        .alias("_skip")
    )
    run_len = int(flags.reverse().select(pl.col("_skip").cum_min().sum()).item())
    if run_len < sp.skipped_tail_records:
        return []
    stuck = flags.tail(run_len)
    last = _median(stuck.get_column("value"))
    lo, hi = int(stuck.get_column("step").min()), int(stuck.get_column("step").max())
    summary = (
        f"every update of the last {run_len} records (steps {lo}-{hi}) was skipped by the trainer"
        + (f"; the loss stays at {last:.4g}" if last is not None else "")
        + ": training stopped making progress"
    )
    ev = Evidence(
        signal="skipped_step",
        step=lo,
        value=float(run_len),
        baseline=None,
        note="updates skipped to the end of the log",
    )
    facts = {"cause": "updates_skipped", "skipped_records": run_len, "onset_step": lo}
    return [_stall(lo, hi, run_len, summary, ev, facts)]


def _lr_zero(run: RunData, params) -> list[Finding]:
    sp = params.stall
    lr = run.series("lr")
    if lr.height < sp.lr_zero_records:
        return []
    runs = (
        # only t, step and value, sorted only when out of order (a sort copies every column)
        signals.in_order(lr.select("t", "step", "value"), "t")
        .lazy()
        .with_columns((pl.col("value") == 0).fill_null(False).alias("_zero"))
        .with_columns(pl.col("_zero").rle_id().alias("_run"))
        .filter(pl.col("_zero"))
        .select("_run", "step", "t")
        .collect()
    )
    if runs.height == 0:
        return []
    sizes = runs.group_by("_run").agg(
        pl.len().alias("n"),
        pl.col("step").min().alias("lo"),
        pl.col("step").max().alias("hi"),
        pl.col("t").min().alias("t0"),
        pl.col("t").max().alias("t1"),
    )
    longest = sizes.sort(["n", "t0"], descending=[True, False]).row(0, named=True)
    if longest["n"] < sp.lr_zero_records:
        return []
    if _decayed_to_zero(lr, longest, sp) or _warmup_from_zero(lr, longest, sp):
        return []
    if longest["lo"] is None:  # a log without step counters: records are numbered by position
        longest["lo"], longest["hi"] = longest["t0"], longest["t1"]
    loss = run.series("loss").filter(pl.col("t").is_between(longest["t0"], longest["t1"])).sort("t")
    third = max(1, loss.height // 3)
    first = _median(loss.get_column("value").head(third)) if loss.height else None
    last = _median(loss.get_column("value").tail(third)) if loss.height else None
    if first is not None and last is not None and last < sp.loss_fall_ratio * first:
        return []  # the loss falls: the printed 0 is a rounded small LR, not a frozen run
    loss_note = f"; the loss stays at {last:.4g}" if last is not None else ""
    return [
        Finding(
            kind="no_progress",
            step_start=longest["lo"],
            step_end=longest["hi"],
            peak_step=longest["lo"],
            severity="warning",
            score=float(longest["n"]),
            summary=f"the learning rate is exactly 0 on {longest['n']} consecutive records (steps {longest['lo']}-{longest['hi']})"
            f"{loss_note}: the weights are not being updated",
            evidence=[
                Evidence(
                    signal="lr", step=longest["lo"], value=0.0, baseline=None, note=f"lr = 0 on {longest['n']} records"
                )
            ],
            facts={"cause": "lr_zero", "lr_zero_records": int(longest["n"]), "scope": "run"},
        )
    ]
