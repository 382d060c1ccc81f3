"""What a real log says about the run as a whole, beyond the shape of its curves.

Real logs rarely come with a layer dump or a batch manifest, but they do print the
precision the run trains in, the GPU, the loss-scale trajectory, the LR and the scale of
the loss and grad norm. These run-level facts let attribution name a cause where the log
alone decides it (NaN from the first updates of an fp16 run on a GPU without bf16, a loss
scale pinned at its floor, a loss at 1e10 within 50 iterations) instead of `unknown`.

`log_facts(run, params)` returns a flat dict of features (documented in `FACTS`), added to
every incident's features by `features.incident_features`. Pure: run data in, dict out.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.attribute.context import uses_loss_scaling
from spikeforensics.detect.events import floor_events
from spikeforensics.rundata import RunData

B, N, S = "bool", "number", "str"
FACTS: dict[str, tuple[str, str]] = {
    "precision": (
        S,
        "fp16 / bf16 / fp32 as the log declares it (precision events), else fp16 when a loss scale "
        "or fp16 overflows were logged (only fp16 dynamic scaling has them), else empty",
    ),
    "precision_declared": (B, "the log itself printed the precision (config line, dtype, AMP banner)"),
    "precision_known": (B, "the precision is known (declared, or fp16 inferred from loss scaling)"),
    "fp16": (B, "the run trains in fp16 (declared or inferred)"),
    "gpu_no_bf16": (B, "the log names a GPU without bf16 support (pre-Ampere: V100, T4, P100, RTX 20xx ...)"),
    "lr_range_test": (
        B,
        "the log is an LR range test's (an `lr_finder` event: ktrain / fastai / Lightning / torch-lr-finder): the LR "
        "grows every step until the loss diverges, by design",
    ),
    "loss_scale_floor": (
        B,
        "the logged loss scale sits at its floor (attribution.loss_scale_floor), or an event puts it at a floor "
        "(detect/events.py `floor_events`: a scaler's own floor, a halving that could not happen, past every "
        "scaler's floor, or the log saying it cannot decrease any more)",
    ),
    "overflow_share": (N, "overflow / skipped-step events per logged training record"),
    "nan_at_start": (
        B,
        "the first non-finite loss or grad norm is within the first attribution.start_records records "
        "of a log that starts at the start of training",
    ),
    "first_nonfinite_step": (N, "step of the first non-finite loss or grad norm, or None"),
    "nan_without_rise": (
        B,
        "the first non-finite loss or grad norm comes without a build-up: >= "
        "attribution.nan_rise_min_records finite records before it, and the last finite loss and "
        "grad norm are within attribution.nan_rise_ratio x their median before it (shown as evidence; "
        "it clears no cause: the real corpus's sources name the LR most often for such a NaN)",
    ),
    "nan_never_finite": (
        B,
        "the log shows no finite loss or grad norm before its first non-finite one, in a log that starts at "
        "the start of training (its first step within hard_spike.start_max_step, or within one logging "
        "interval of step 0), and no finite record follows: the model never produced a finite value",
    ),
    "nan_before_lr_acts": (
        B,
        "in a log that starts at the start of training, the first non-finite value (or the stop on one) "
        "comes at step <= attribution.first_update_steps of a counter that counts updates (it moves within "
        "an epoch), out of the initial weights, or after updates "
        "whose LR, summed, is <= attribution.negligible_lr_budget (warm-up at 1e-8, burn-in at 0): the "
        "weights had not moved, so the learning rate is not the cause",
    ),
    "losses_rejected": (
        N,
        "batches whose loss the trainer rejected as out of range and skipped while training went on "
        "(ESPnet `loss (=2.5e8) is not correct`): per-batch sanity-check failures, not a stop",
    ),
    "nonfinite_episodes": (N, "separate runs of non-finite loss / grad-norm records"),
    "nonfinite_recovers": (
        B,
        "the run goes on with finite values after >= 2 non-finite episodes: the bad updates were "
        "skipped (what fp16 dynamic loss scaling does on overflow), not applied",
    ),
    "grad_nonfinite_skipped": (
        B,
        "the grad norm is non-finite on records whose loss is finite, the loss is never "
        "non-finite, and a later record has a finite loss or grad norm: the update was skipped (fp16 dynamic loss "
        "scaling on overflow), not applied",
    ),
    "loss_explodes": (B, "the largest finite loss is >= attribution.loss_explode_ratio x the first logged loss"),
    "loss_max_ratio": (N, "largest finite loss / first logged loss"),
    "loss_zero_collapse": (
        B,
        "the loss is printed as exactly 0 on >= 2 records after a positive loss or beside a "
        "non-finite grad norm, or on every record of a log of >= stall.lr_zero_records records (a masked NaN: HF Trainer and fp16 runs print "
        "0.0 when the loss overflowed)",
    ),
    "samples_nonfinite": (
        B,
        "the log says some samples of a batch (not all) got non-finite gradients or losses and were "
        "ignored (ESPnet CTC `5/42 samples got nan grad`): bad samples, not a bad step",
    ),
    "nonfinite_confined": (
        B,
        "on >= attribution.confined_min_records records with a non-finite value, only some loss terms are "
        "non-finite while >= 2 sibling terms stay finite, on every such record: the NaN comes from "
        "those terms' inputs (their targets), not from the shared weights",
    ),
    "nonfinite_component": (S, "the loss term(s) non-finite while the others stay finite (see nonfinite_confined)"),
    "grad_norm_max": (N, "largest finite grad norm of the run"),
    "grad_norm_astronomical": (
        B,
        "a finite grad norm >= attribution.astronomical_norm (clipping not in effect, or "
        "a norm measured on loss-scaled gradients)",
    ),
    "lr_max": (N, "largest logged learning rate"),
    "lr_constant": (B, "the logged learning rate never changes (2+ finite values, all equal): the run has no schedule"),
}


def _mode_from_events(events: pl.DataFrame) -> str:
    prec = events.filter(pl.col("kind") == "precision")
    if prec.height == 0:
        return ""
    modes = prec.get_column("detail").fill_null("").str.json_path_match("$.mode").drop_nulls().to_list()
    # fp16 anywhere wins: its range problems are the ones that bite; mixed precision of no stated dtype
    # (`amp`) is fp16 unless the log also declares bf16 (autocast, apex and AMP wrappers default to float16)
    for wanted in ("fp16", "bf16", "amp", "fp32"):
        if any(wanted in m for m in modes):
            return "fp16" if wanted == "amp" else wanted
    return ""


def _gpu_no_bf16(events: pl.DataFrame) -> bool:
    dev = events.filter(pl.col("kind") == "device")
    if dev.height == 0:
        return False
    flags = dev.get_column("detail").fill_null("").str.json_path_match("$.bf16_supported").drop_nulls()
    return bool((flags == "false").any())


def _floor_reached(run: RunData, floor: float, ep) -> bool:
    scale = run.series("loss_scale")
    finite = scale.filter(pl.col("value").is_finite() & (pl.col("value") > 0)).get_column("value")
    # a scaler that goes below `floor` (fairseq halves on to 1e-4) has a lower floor: its values say nothing
    if finite.len() and finite.min() == floor and uses_loss_scaling(scale):
        return True
    # the events the events detector convicts the run on (detect/events.py `floor_events`)
    return floor_events(run, ep).height > 0


def _finite(series: pl.DataFrame) -> pl.Series:
    return series.filter(pl.col("value").is_finite()).get_column("value")


def _nan_without_rise(loss: pl.DataFrame, grad: pl.DataFrame, first_bad_t, ap) -> bool:
    """The first non-finite value comes without a build-up in the finite loss and grad norm before it."""
    if first_bad_t is None:
        return False
    judged = False
    for s in (loss, grad):
        before = s.filter((pl.col("t") < first_bad_t) & pl.col("value").is_finite()).sort("t").get_column("value")
        if before.len() < ap.nan_rise_min_records:
            continue
        base = float(before.head(before.len() - 1).median())
        if base <= 0 or float(before[-1]) > ap.nan_rise_ratio * base:
            return False
        judged = True
    return judged


def _grad_nonfinite_skipped(loss: pl.DataFrame, grad: pl.DataFrame, events: pl.DataFrame) -> bool:
    """A non-finite grad norm beside a finite loss, no non-finite loss anywhere, a finite grad norm after it.
    The non-finite grad norm may be a record's value or a line saying the step with it was skipped (a guard's
    `SKIPPED non-finite batch (loss 1.23, norm nan)`, ESPnet's `The grad norm is nan. Skipping updating the
    model.`): at the step the line names (`Iter 40: SKIPPED ...`), else at the record before the line."""
    if loss.height == 0 or not loss.get_column("value").is_finite().all():
        return False
    detail = pl.col("detail").fill_null("")
    told = events.filter(
        (pl.col("kind") == "nan")
        & (detail.str.json_path_match("$.metric") == "grad_norm")
        & (detail.str.json_path_match("$.skipped") == "true")
        & pl.col("step").is_not_null()
    ).get_column("step")
    # placed on the record of its step (the loss's, when no grad norm is printed: upstream mlx-lm prints none)
    steps = (grad if grad.height else loss).select("t", "step")
    told_rows = steps.filter(pl.col("step").is_in(told.implode())).select("t", pl.lit(float("nan")).alias("value"))
    bad = pl.concat([grad.filter(~pl.col("value").is_finite()).select("t", "value"), told_rows])
    if bad.height == 0:
        return False
    beside = bad.join(loss.select("t"), on="t", how="semi").height
    # a later record with a finite grad norm or a finite loss: an applied NaN update would have
    # left NaN weights, so every later loss non-finite
    first = bad.get_column("t").min()
    later = (
        grad.filter((pl.col("t") > first) & pl.col("value").is_finite()).height
        + loss.filter(pl.col("t") > first).height
    )
    return beside > 0 and later > 0


def _nonfinite_episodes(loss: pl.DataFrame, grad: pl.DataFrame) -> tuple[int, int]:
    """(runs of consecutive records with a non-finite loss or grad norm, how many of them
    are followed by a finite record)."""
    both = pl.concat([loss.select("t", "value"), grad.select("t", "value")])
    if both.height == 0:
        return 0, 0
    per_t = both.group_by("t").agg((~pl.col("value").is_finite()).any().alias("bad")).sort("t")
    bad = per_t.get_column("bad")
    starts = bad & ~bad.shift(1, fill_value=False)
    ends = bad & ~bad.shift(-1, fill_value=False)
    not_last = pl.int_range(bad.len(), eager=True) < bad.len() - 1
    return int(starts.sum()), int((ends & not_last).sum())


def _masked_zero_losses(loss: pl.DataFrame, grad: pl.DataFrame) -> int:
    """Records whose loss is printed as exactly 0 after a positive loss, or beside a
    non-finite grad norm (a NaN loss the trainer masked as 0.0)."""
    if loss.height == 0:
        return 0
    frame = (
        loss.sort("t")
        .select("t", "value")
        .join(grad.select("t", (~pl.col("value").is_finite()).alias("_gbad")), on="t", how="left")
    )
    positive_before = (pl.col("value") > 0).cast(pl.Int32).cum_sum().shift(1, fill_value=0) > 0
    masked = (pl.col("value") == 0) & (positive_before | pl.col("_gbad").fill_null(False))
    return int(frame.select(masked.sum()).item())


def _losses_rejected(events: pl.DataFrame) -> int:
    skipped = events.filter(pl.col("kind") == "skipped_step").get_column("detail").fill_null("")
    return int(skipped.str.contains('"reason":\\s*"invalid_loss"').sum())


def _partial_batch_nonfinite(events: pl.DataFrame) -> bool:
    nan = events.filter(pl.col("kind") == "nan")
    if nan.height == 0:
        return False
    detail = nan.get_column("detail").fill_null("")
    parts = detail.str.extract_groups(r"(\d+)\s*/\s*(\d+) samples? got nan")
    k = parts.struct.field("1").cast(pl.Int64, strict=False)
    n = parts.struct.field("2").cast(pl.Int64, strict=False)
    return bool(((k > 0) & (k < n)).fill_null(False).any())


def _confined_nonfinite(run: RunData, params) -> dict:
    """`nonfinite_confined` / `nonfinite_component`: loss terms (the record's metrics that are no
    counter, timing, memory, optimizer or accuracy value, the total loss excepted) that are non-finite
    while >= attribution.confined_min_siblings of their siblings stay finite and non-zero, on every record
    where any term is non-finite."""
    ap = params.attribution
    out = {"nonfinite_confined": False, "nonfinite_component": ""}
    loss_name = run.resolve("loss")
    terms = (
        run.metrics.lazy()  # lazily: only the loss terms' rows and the columns read leave the long table
        .filter(
            pl.col("record").is_not_null()
            & (pl.col("name") != loss_name)
            & ~pl.col("name").str.contains(ap.component_exclude_pattern)
            & ~pl.col("name").str.starts_with("eval")
            & ~pl.col("name").str.starts_with("val")
        )
        .select("attempt", "record", "name", "value")
        .collect()
    )
    if terms.height == 0:
        return out
    # a term printed as exactly 0 says nothing: a term over an empty selection (no positive boxes) is 0
    # whatever the weights hold
    per = terms.group_by("attempt", "record").agg(
        pl.col("name").filter(~pl.col("value").is_finite()).unique().sort().alias("bad"),
        (pl.col("value").is_finite() & (pl.col("value") != 0)).sum().alias("good"),
    )
    bad = per.filter(pl.col("bad").list.len() > 0)
    if bad.height < ap.confined_min_records or bad.get_column("good").min() < ap.confined_min_siblings:
        return out
    names = sorted({n for row in bad.get_column("bad").to_list() for n in row})
    return {"nonfinite_confined": True, "nonfinite_component": ", ".join(names)}


def _counts_updates(run: RunData) -> bool:
    """The step counter counts updates, not epochs: it moves within an epoch (a record whose step is
    above its printed epoch). Keras, fastai and ultralytics print one record per epoch, numbered by
    the epoch: their step 1 is a whole epoch of updates."""
    epoch = run.series("epoch")
    return bool(epoch.height and epoch.filter(pl.col("step") > pl.col("value")).height)


def _counts_epochs(run: RunData) -> bool:
    """The step counter is the epoch: every record's step equals its printed epoch (GluonTS' per-epoch bar,
    Keras, a per-epoch CSV), so each record stands for a whole epoch of updates."""
    epoch = run.series("epoch")
    loss = run.series("loss")
    return bool(
        epoch.height
        and epoch.height >= 0.9 * loss.height
        and epoch.filter(pl.col("step") != pl.col("value")).height == 0
    )


def _nan_before_lr_acts(run: RunData, first_bad, starts_at_start: bool, ap) -> bool:
    """See FACTS["nan_before_lr_acts"]. Without a placed non-finite value, a stop on one that names no
    step (detectron2's `Predicted boxes or scores contain Inf/NaN`) counts at the last record's step."""
    if not starts_at_start:
        return False
    if first_bad is None:
        stops = run.events.filter((pl.col("kind") == "nan") & pl.col("step").is_null())
        last = run.step_range()[1]
        if stops.height == 0 or last is None:
            return False
        first_bad = last
    if first_bad <= ap.first_update_steps and _counts_updates(run):
        return True
    lr = run.series("lr").filter(pl.col("step") <= first_bad)
    lr_max = _finite(lr).max() if lr.height else None
    # an upper bound of the LR summed over the updates: the largest LR so far on every one of them
    return lr_max is not None and float(lr_max) * first_bad <= ap.negligible_lr_budget


def log_facts(run: RunData, params) -> dict:
    """Run-level facts from what the log printed (see `FACTS`)."""
    ap = params.attribution
    events = run.events
    loss = run.series("loss")
    grad, _ = run.grad_norm_series()
    overflows = events.filter(pl.col("kind").is_in(["overflow", "skipped_step"])).height
    declared = _mode_from_events(events)
    # a logged loss scale of 1 throughout is what bf16/fp32 Megatron logs print: not fp16 scaling
    # only an fp16 scaler's overflow says fp16: a batch skipped by a z-score guard, a bad grad norm
    # or a loss sanity check (`skipped_step`) happens in any precision
    scaler_overflows = events.filter(pl.col("kind") == "overflow").height
    inferred = "fp16" if (uses_loss_scaling(run.series("loss_scale")) or scaler_overflows) else ""
    precision = declared or inferred
    records = max(loss.height, grad.height)

    first_bad, first_bad_t = None, None
    for s in (loss, grad):
        bad = s.filter(~pl.col("value").is_finite())
        if bad.height:
            t, step = bad.sort("t").row(0, named=True)["t"], bad.sort("t").row(0, named=True)["step"]
            if first_bad_t is None or t < first_bad_t:
                first_bad_t, first_bad = t, step
    episodes, recovered = _nonfinite_episodes(loss, grad)
    first_step = run.step_range()[0]
    starts_at_start = run.starts_at_start(params.hard_spike.start_max_step)
    nan_at_start = first_bad_t is not None and first_bad_t < ap.start_records and starts_at_start
    if nan_at_start and first_bad_t > 0 and _counts_epochs(run):
        # a log of one record per epoch (the step is the epoch): its 2nd-10th records are whole epochs of
        # updates in, not the first updates; only a non-finite first record is "from the start"
        nan_at_start = False
    if first_bad is None:  # no series says it: a nan event that names its step (detectron2 `at iteration=27`)
        placed = events.filter((pl.col("kind") == "nan") & pl.col("step").is_not_null()).get_column("step")
        if placed.len():
            first_bad = int(placed.min())
            nan_at_start = first_step is None and first_bad <= params.hard_spike.start_max_step

    lf = _finite(loss)
    before_lr = _nan_before_lr_acts(run, first_bad, starts_at_start, ap)
    first_loss = float(lf[0]) if lf.len() else None
    loss_max = float(lf.max()) if lf.len() else None
    ratio = loss_max / first_loss if first_loss and first_loss > 0 and loss_max is not None else None
    zero_after = _masked_zero_losses(loss, grad)
    gf = _finite(grad)
    gmax = float(gf.max()) if gf.len() else None
    lr = _finite(run.series("lr"))
    return {
        "precision": precision,
        "precision_declared": bool(declared),
        "precision_known": bool(precision),
        "fp16": precision == "fp16",
        "gpu_no_bf16": _gpu_no_bf16(events),
        "lr_range_test": bool(events.filter(pl.col("kind") == "lr_finder").height),
        "loss_scale_floor": _floor_reached(run, ap.loss_scale_floor, params.events),
        "overflow_share": overflows / records if records else (1.0 if overflows else 0.0),
        "nan_at_start": bool(nan_at_start),
        "first_nonfinite_step": first_bad,
        "nan_without_rise": _nan_without_rise(loss, grad, first_bad_t, ap),
        "nan_before_lr_acts": before_lr,
        "nan_never_finite": bool(starts_at_start and first_bad_t == 0 and episodes == 1 and recovered == 0),
        "losses_rejected": _losses_rejected(events),
        "nonfinite_episodes": episodes,
        "nonfinite_recovers": episodes >= 2 and recovered >= episodes - 1,
        "grad_nonfinite_skipped": _grad_nonfinite_skipped(loss, grad, events),
        "loss_explodes": bool(ratio is not None and ratio >= ap.loss_explode_ratio),
        "loss_max_ratio": ratio,
        "loss_zero_collapse": zero_after >= 2
        or bool(loss.height >= params.stall.lr_zero_records and (loss.get_column("value") == 0).all()),
        "samples_nonfinite": _partial_batch_nonfinite(events),
        **_confined_nonfinite(run, params),
        "grad_norm_max": gmax,
        "grad_norm_astronomical": bool(gmax is not None and gmax >= ap.astronomical_norm),
        "lr_max": float(lr.max()) if lr.len() else None,
        "lr_constant": bool(lr.len() >= 2 and lr.min() == lr.max()),
    }
