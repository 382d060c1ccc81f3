"""Evidence features of the training dynamics around an incident: drift before, plateau
after, the loss straight after, position in training, and the learning-rate schedule
(warmup, LR still rising, LR rising late, LR restart at a resume).
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.attribute._feature_helpers import _at, _median, _onset
from spikeforensics.attribute.context import RunContext, _flag_sorted, step_window
from spikeforensics.detect.base import Incident
from spikeforensics.frames import rows_where
from spikeforensics.params import AttributionParams
from spikeforensics.rundata import RunData


def _lr_still_rising(lr: pl.DataFrame, lo: int, peak: int) -> bool:
    """The LR rose, never fell, from `lo` to `peak` (at least two records), and a later record is higher still."""
    lr = lr if lr.get_column("step").flags["SORTED_ASC"] else lr.sort("step")
    ramp = step_window(lr, lo, peak).get_column("value")
    later = step_window(lr, peak + 1, None).get_column("value")
    if ramp.len() < 2 or later.len() == 0:
        return False
    rose = float(ramp[-1]) > float(ramp[0]) and bool((ramp.diff().drop_nulls() >= 0).all())
    return rose and float(later.max()) > float(ramp[-1])


def _lr_schedule(lr: pl.DataFrame, attempt: int, ctx: RunContext, ap: AttributionParams):
    """(the attempt's LR records sorted by step with their running max, the first decayed step, the
    warmup cut, the warmup's last step). Warmup ends where the decay starts; without any decay, a
    warmup never lasts past `warmup_max_frac` of the run, so the LR rising after that is a schedule
    fault too (judged on `warmup_min_records` LR records or more: a short paste may end inside its warmup; and not
    when the log ends with the loss non-finite: the run died before its schedule did, so the log's length is not the
    run's - timm's T2T-ViT warming up over 3 of 20 epochs went NaN in epoch 1 and logged NaN to epoch 2)."""
    first_pass = lr.filter(pl.col("attempt") == attempt)
    first_pass = first_pass if first_pass.height else lr
    seq = first_pass.sort("step").with_columns(pl.col("value").cum_max().alias("cmax"))
    decayed = seq.filter(pl.col("value") < 0.9 * pl.col("cmax"))
    decay_step = int(decayed.get_column("step")[0]) if decayed.height else None
    cut = decay_step
    if (
        cut is None
        and ctx.first_step is not None
        and ctx.last_step is not None
        and seq.height >= ap.warmup_min_records
        and not _ends_nonfinite(ctx, attempt)
    ):
        cut = int(ctx.first_step + ap.warmup_max_frac * (ctx.last_step - ctx.first_step))
    warm = seq if cut is None else seq.filter(pl.col("step") < cut)
    warm = warm if warm.height else seq
    finite = warm.filter(pl.col("value").is_finite())  # a NaN LR has no place in the warmup
    top = float(finite.get_column("value").max()) if finite.height else 0.0
    near_top = finite.filter(pl.col("value") >= top - 0.01 * abs(top))  # 0.99 x top, for a negative LR too
    warm_end = int((near_top if near_top.height else warm).get_column("step")[0])
    return seq, decay_step, cut, warm_end


def _ends_nonfinite(ctx: RunContext, attempt: int) -> bool:
    """The attempt's last loss record (in training order, as `ctx.loss` holds them) is NaN/inf."""
    last = ctx.loss.lazy().filter(pl.col("attempt") == attempt).select(pl.col("value").last()).collect().item()
    return last is not None and not math.isfinite(last)


def _next_ratio(ctx: RunContext, attempt: int, onset: int, end: int) -> float | None:
    """The first finite loss after `end` / the last finite loss before `onset` (same attempt)."""
    # the attempt's finite records once per run (the loss itself when they are all of it), then slices of
    # its sorted steps: per incident no copy of the whole loss
    same = ctx.once(
        ("loss_finite", attempt),
        lambda: _flag_sorted(rows_where(ctx.loss, (pl.col("attempt") == attempt) & pl.col("value").is_finite())),
    )
    before = step_window(same, None, onset - 1).get_column("value")
    after = step_window(same, end + 1, None).get_column("value")
    if before.len() == 0 or after.len() == 0 or before[-1] <= 0:
        return None
    return float(after[0]) / float(before[-1])


def dynamics_features(inc: Incident, run: RunData, ctx: RunContext, ap: AttributionParams, start_max_step: int) -> dict:
    """Position in training, drift before, plateau after, and the LR schedule around the incident.
    "Early" and the warmup length are judged only for a log that begins at the start of training
    (first step <= `start_max_step`): an excerpt from step 7000 has no "start" of its own."""
    on, w = _onset(inc), ap.baseline_window
    out = {
        "drift_before": None,
        "plateau_after": None,
        "loss_next_ratio": None,
        "train_frac": None,
        "onset_frac": None,
        "early": False,
        "lr_at_peak": None,
        "lr_trend_before": None,
        "in_warmup": False,
        "lr_still_rising": False,
        "warmup_steps": None,
        "lr_rising_late": False,
        "lr_late_rise": None,
        "lr_restart": False,
    }
    recent = _median(_at(ctx.grad, inc.attempt, on - w, on - 1))
    older = _median(_at(ctx.grad, inc.attempt, on - 3 * w, on - w - 1))
    if recent is not None and older:
        out["drift_before"] = recent / older
    before = _median(_at(ctx.loss, inc.attempt, on - w, on - 1))
    after = _median(_at(ctx.loss, inc.attempt, inc.step_end + 1, inc.step_end + ap.plateau_window))
    if before and after is not None:
        out["plateau_after"] = after / before
    out["loss_next_ratio"] = _next_ratio(ctx, inc.attempt, on, inc.step_end)
    if ctx.first_step is not None and ctx.last_step is not None and ctx.last_step > ctx.first_step:
        out["train_frac"] = (inc.peak_step - ctx.first_step) / (ctx.last_step - ctx.first_step)
        out["early"] = out["train_frac"] <= ap.early_frac and ctx.first_step <= start_max_step
        out["onset_frac"] = max(0.0, (on - ctx.first_step) / (ctx.last_step - ctx.first_step))
    lr = ctx.once("lr_finite", lambda: rows_where(ctx.lr, pl.col("value").is_finite()))
    if lr.height:
        # the attempt's LR by step, its decay and warmup: the same for every incident of that attempt
        seq, decay_step, cut, warm_end = ctx.once(
            ("lr_schedule", inc.attempt), lambda: _lr_schedule(lr, inc.attempt, ctx, ap)
        )
        at = step_window(seq, None, inc.peak_step)
        if at.height:
            out["lr_at_peak"] = float(at.get_column("value")[-1])
            prev = step_window(seq, on - w, on - 1)
            if prev.height and prev.get_column("value")[0] > 0:
                out["lr_trend_before"] = out["lr_at_peak"] / float(prev.get_column("value")[0]) - 1
            out["in_warmup"] = inc.peak_step <= warm_end and (out["lr_trend_before"] or 0) > 0
            out["lr_still_rising"] = _lr_still_rising(seq, on - w, inc.peak_step)
            first_lr_step = int(seq.get_column("step")[0])
            out["warmup_steps"] = warm_end - first_lr_step if first_lr_step <= start_max_step else None
            if cut is not None:
                late = (
                    step_window(seq, cut, inc.peak_step)
                    .filter(pl.col("value") > 0)
                    .with_columns(pl.col("value").cum_min().alias("cmin"))
                )
                if late.height:
                    out["lr_late_rise"] = float((late.get_column("value") / late.get_column("cmin")).max())
                    limit = ap.lr_rise_after_decay if decay_step is not None else ap.lr_rise_no_decay
                    out["lr_rising_late"] = out["lr_late_rise"] > limit
        if lr.get_column("attempt").n_unique() > 1:
            # LR of the first record of each later attempt vs the last LR of the attempt before it
            firsts = (
                lr.group_by("attempt")
                .agg(pl.col("value").first().alias("f"), pl.col("value").last().alias("l"))
                .sort("attempt")
            )
            jumps = firsts.with_columns((pl.col("f") / pl.col("l").shift(1)).alias("j")).get_column("j").drop_nulls()
            out["lr_restart"] = bool((jumps > 2.0).any())
    return out
