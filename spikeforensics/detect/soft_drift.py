"""Soft drift: sustained rises judged on smoothed series, not single steps.

- loss: the rolling-median log loss rises > 5% over `loss_span` steps (DOMAIN rule), or
  sits >= 10% above its lowest level of the previous `long_span` records (a slow climb),
  for at least a few consecutive records, and by more than `loss_noise_c` sigma of the
  smoothed series (a small-batch loss wanders 5% by noise alone), and the rise lasts: over
  the next `loss_span` steps the smoothed loss stays, in its median, above half the rise;
- grad norm: a level shift up, the median of the next `level_window` records >= 2x the
  median of the previous ones and >= c times the noise of that difference (ADTK
  LevelShiftAD idea, two-sided windows).
The early phase (fast-falling loss, large initial norms) is skipped.
A loss-only drift of an RL critic's loss (`RunData.loss_is_critic`: its targets move with the returns, so it
rises as they grow, by design), or of any loss of a run that logs RL bookkeeping (`RunData.loss_is_reinforcement`:
self-play games get harder as the policy improves), is a note; a runaway by orders is `divergence`'s.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.detect import robust, signals
from spikeforensics.detect.base import Evidence, Finding, as_notes
from spikeforensics.frames import per_group
from spikeforensics.rundata import RunData


def _prep(frame: pl.DataFrame, dp) -> pl.DataFrame:
    # only the columns read from here on, and no copy of the rows when every record has a log value (a filter
    # copies every column it keeps)
    data = signals.rows_where(frame.select("step", "attempt", "rank", "pos", "y"), pl.col("y").is_not_null())
    data = data.with_columns(pl.col("rank").cast(pl.String).fill_null("-").alias("_k"))
    o = _per_track(data)
    return data.with_columns(
        o(pl.int_range(pl.len(), dtype=pl.Int64)).alias("_i"),
        o(_early_records(dp)).alias("_early"),
        o(pl.col("y").rolling_median(dp.smooth, min_samples=1, center=True)).alias("smooth"),
    )


def _early_records(dp) -> pl.Expr:
    """How many of a track's first records are the start (`early_frac` of them, at least `early_min`), never judged as
    a drift. In training steps too: a log that prints every step at first and every 500 later (AlgoPerf) spends its
    first 10% of records on the first 0.02% of training, where the grad norm still grows 5x."""
    step = pl.col("step")
    early_steps = (step < step.min() + (step.max() - step.min()) * dp.early_frac).sum()
    return pl.max_horizontal(pl.lit(dp.early_min), (pl.len() * dp.early_frac).cast(pl.Int64), early_steps)


def _lower_quartile(dp) -> pl.Expr:
    """The rolling lower quartile of the log loss over the smoothing window: a drift lifts it with the median, a
    bimodal per-batch loss (diffusion: batches that drew low noise levels sit 5x under the others) moves only its
    median between the modes when the mix shifts."""
    return pl.col("y").rolling_quantile(0.25, window_size=dp.smooth, min_samples=1, center=True)


def _per_track(data: pl.DataFrame):
    """`.over("_k")` (per track) for several tracks; with one, the expression as it is (`frames.per_group`)."""
    return per_group(data, "rank", over="_k")


def _with_noise(data: pl.DataFrame, dp) -> pl.DataFrame:
    """`_noise`: `loss_noise_c` sigma of a difference of two rolling medians of `smooth` records (the
    noise of one such median from the residuals around it; 1.77 = 1.25 x sqrt 2). The residuals' scale is the
    track's, or where larger the local one (the median of their medians over blocks of `smooth` records, across
    `long_span` records): a log loss's noise grows as the loss nears 0 (a 32-sample cross-entropy: residual sigma
    0.28 over the run, 0.87 once it is under 0.1), and a wander of the late, noisier records is no drift."""
    o = _per_track(data)
    resid = (pl.col("y") - pl.col("smooth")).abs()
    # the local scale from blocks of `smooth` records: the median of their medians over `long_span` records (a
    # rolling median of 500 over every record of a 10M-step run costs 4 s per signal; this, a fraction)
    data = data.with_columns(resid.alias("_r"), (pl.col("_i") // dp.smooth).alias("_b"))
    window = max(1, dp.long_span // dp.smooth)
    local = pl.col("_r").rolling_median(window, min_samples=1, center=True)
    if data.get_column("rank").n_unique() == 1:
        # one track (most logs), its rows in record order: the blocks are consecutive rows, and block b's value is
        # row b of the blocks (no group-by or join over every record)
        r = data.get_column("_r")
        whole = r.len() // dp.smooth * dp.smooth
        medians = r.head(whole).reshape((whole // dp.smooth, dp.smooth)).arr.median()
        if whole < r.len():
            medians = medians.append(pl.Series([r.tail(r.len() - whole).median()], dtype=medians.dtype))
        blocks = pl.DataFrame({"_r": medians}).select(local)
        data = data.with_columns(blocks.get_column("_r").gather(data.get_column("_b")).alias("_local"))
    else:
        blocks = data.group_by("_k", "_b").agg(pl.col("_r").median()).sort("_k", "_b")
        blocks = blocks.with_columns(local.over("_k").alias("_local")).drop("_r")
        data = data.join(blocks, on=["_k", "_b"], how="left", maintain_order="left")
    scale = pl.max_horizontal(o(pl.col("_r").median()), pl.col("_local"))
    return data.with_columns(
        (scale * robust.MAD_SCALE * dp.loss_noise_c * 1.77 / math.sqrt(dp.smooth)).alias("_noise")
    ).drop("_r", "_b", "_local")


def _with_climb(data: pl.DataFrame, dp, span: int) -> pl.DataFrame:
    """The slow-climb columns of a smoothed log series: `_long` (the smoothed value over its lowest
    of the previous `long_span` records, after the early phase), `_floor_long` (the gap the run's own
    noise makes), `_ahead` (the median of the next span) and the levels before (`_level` for a rise
    over one span, `_level_long` for the slow climb)."""
    later = pl.col("_i") >= pl.col("_early")
    o = _per_track(data)
    data = data.with_columns(
        (pl.col("smooth") - o(pl.when(later).then(pl.col("smooth")).rolling_min(dp.long_span, min_samples=1))).alias(
            "_long"
        ),
    )
    # a drift lasts (DOMAIN: over 50 consecutive steps): the smoothed value over the next span stays, in its
    # median, above the midpoint of the rise. A rolling median wobbling 3 sigma for a few records and back
    # (a 20,000-record run tests hundreds of windows) is noise. A rise in the last half span of the log
    # cannot show that it lasts (a climb to the end is the divergence detector's)
    # and it stands above the level before it, not only above a dip: a wobble that dips and comes back is
    # no drift. "Before" is before the window the rise was measured over: the median of the 2 spans before
    # the span for the short rise, of the 2 spans before the `long_span` records for the slow climb (a climb
    # of 10% over 500 records is only a little above its level of 100 records ago: that is what slow means)
    ahead = o(pl.col("smooth").reverse().shift(1).rolling_median(span, min_samples=max(1, span // 2)).reverse())
    # (the level is a median of at least `smooth` records: with a record every 50 steps a span is one
    # record, and a median of 2 raw per-batch losses is no level)
    width = max(2 * span, dp.smooth)
    level = o(pl.col("y").shift(span).rolling_median(width, min_samples=1))
    # (a run shorter than that keeps the short rise's level: no long window before it to compare with)
    # the slow climb's "before" is the typical level of the `long_span` records before its window, not one
    # level at its start: a climb back from a dip that sits at the window's start is no climb
    level_long = pl.coalesce(
        o(pl.col("y").shift(dp.long_span).rolling_median(max(width, dp.long_span), min_samples=1)), level
    )
    # ... and a slow climb stands out of the gaps the run's own noise makes between its smoothed value
    # and the lowest smoothed value of the previous `long_span` records: that lowest value is the
    # extreme of many draws, so on a noisy loss (a bimodal mixup/cutmix per-batch loss, whose rolling
    # median jumps between the modes) the gap is wide everywhere (a healthy timm run: 15-25%). The
    # climb must clear median + loss_noise_c robust sigma of the same gap over the run.
    gap = pl.col("_long").filter(later & pl.col("_long").is_not_null())
    floor_long = gap.median() + dp.loss_noise_c * robust.MAD_SCALE * (gap - gap.median()).abs().median()
    # That gap distribution is the run's own, drift included: when a slow climb and its fall fill most of
    # a short run, its median is the climb itself (an injected 24% climb over 700 of 941 records raised the
    # floor to 54%). So the floor is at most `gap_floor_sigmas` noise units of the smoothed series, measured
    # on its differences one smoothing window apart (a slow climb moves those far less than the gaps)
    before = pl.col("smooth").shift(dp.smooth)
    lag_diff = (pl.col("smooth") - before).filter(later & before.is_not_null())
    sigma_smooth = robust.MAD_SCALE / math.sqrt(2) * (lag_diff - lag_diff.median()).abs().median()
    floor_long = pl.min_horizontal(floor_long, dp.gap_floor_sigmas * sigma_smooth)
    return data.with_columns(
        ahead.alias("_ahead"),
        level.alias("_level"),
        level_long.alias("_level_long"),
        o(floor_long).alias("_floor_long"),
    )


def _lasts(rise: str, before: str) -> pl.Expr:
    return (
        (pl.col("_ahead") >= pl.col("smooth") - pl.col(rise) / 2)
        & ~(pl.col("_ahead") < pl.col(before) + pl.col(rise) / 2)
    ).fill_null(False)


def _climbs(min_rise: float) -> pl.Expr:
    """A slow climb: `_long` >= log(min_rise), out of the noise and the run's own gaps, and lasting."""
    return (
        (pl.col("_i") >= pl.col("_early"))
        & (pl.col("_long") >= math.log(min_rise))
        & (pl.col("_long") >= pl.col("_noise"))
        & (pl.col("_long") >= pl.col("_floor_long")).fill_null(True)
        & _lasts("_long", "_level_long")
    )


def _loss_flags(loss: pl.DataFrame, dp) -> pl.DataFrame:
    span = robust.rows_for_steps(loss, dp.loss_span)
    data = _with_climb(_with_noise(_prep(loss, dp), dp), dp, span)
    o = _per_track(data)
    data = data.with_columns((pl.col("smooth") - o(pl.col("smooth").shift(span))).alias("_short"))
    data = data.with_columns(pl.max_horizontal("_short", "_long").alias("rise"))
    # a drift moves the whole loss, not only its mix: the lower quartile of the same records rises by at
    # least `low_share` of the median's rise. A per-batch loss that is bimodal (a diffusion loss: batches
    # that drew low noise levels sit 5x under the others) has a rolling median that jumps between the modes
    # when the share of one mode shifts a little, while its lower quartile stays in the lower mode
    low = o(_lower_quartile(dp))
    data = data.with_columns(low.alias("_lowq"))
    low_before_short = o(pl.col("_lowq").shift(span))
    # (the slow climb's lower quartile is judged against its typical level before the `long_span` window, as
    # `_level_long` is: the lowest lower quartile of 500 records is an extreme that any flip clears)
    low_later = pl.when(pl.col("_i") >= pl.col("_early")).then(pl.col("_lowq"))
    low_before_long = pl.coalesce(
        o(low_later.shift(dp.long_span).rolling_median(dp.long_span, min_samples=1)),
        o(low_later.shift(span).rolling_median(dp.long_span, min_samples=1)),  # a run too short for that
    )
    whole_short = (pl.col("_lowq") - low_before_short >= dp.low_share * pl.col("_short")).fill_null(True)
    whole_long = (pl.col("_lowq") - low_before_long >= dp.low_share * pl.col("_long")).fill_null(True)
    flagged = data.filter(
        (
            (pl.col("_i") - span >= pl.col("_early"))
            & (pl.col("_short") >= math.log1p(dp.loss_rise))
            & (pl.col("_short") >= pl.col("_noise"))
            & _lasts("_short", "_level")
            & whole_short
        )
        | (_climbs(1 + dp.long_rise) & whole_long)
    )
    return flagged.with_columns(pl.lit("loss").alias("signal"), (pl.col("smooth") - pl.col("rise")).alias("before"))


def _grad_climb_flags(grad: pl.DataFrame, dp) -> pl.DataFrame:
    """The grad norm's slow climb: the loss's slow-climb test with the level-shift ratio (`grad_rise`):
    a norm that creeps up `grad_rise`x over hundreds of records never shows a 2x step between two
    `level_window` medians."""
    span = robust.rows_for_steps(grad, dp.loss_span)
    data = _with_climb(_with_noise(_prep(grad, dp), dp), dp, span)
    flagged = data.filter(_climbs(dp.grad_rise)).with_columns(pl.col("_long").alias("rise"))
    return flagged.with_columns(
        pl.lit("grad_norm").alias("signal"), (pl.col("smooth") - pl.col("rise")).alias("before")
    )


def _grad_flags(grad: pl.DataFrame, dp) -> pl.DataFrame:
    w = dp.level_window
    data = _prep(grad, dp)
    # one trailing median serves both windows: before_t = M[t], after_t = M[t + w]
    o = _per_track(data)
    data = data.with_columns(o(pl.col("y").rolling_median(w, min_samples=w)).alias("before"))
    data = data.with_columns(
        o(pl.col("before").shift(-w)).alias("after"),
        o((pl.col("y") - pl.col("smooth")).abs().median()).mul(robust.MAD_SCALE).alias("noise"),
    ).with_columns((pl.col("after") - pl.col("before")).alias("rise"))
    flagged = data.filter(
        (pl.col("_i") - w >= pl.col("_early"))
        & (pl.col("rise") >= math.log(dp.grad_rise))
        & (pl.col("rise") >= dp.level_c * 1.77 * pl.col("noise") / math.sqrt(w))
    )
    if flagged.height == 0:
        return flagged.with_columns(pl.lit("grad_norm").alias("signal"))
    # a level shift is flagged from half a window before its change point: report from the change
    # point (the largest rise) to the end of the raised stretch (smoothed norm above the midway level)
    out = []
    for _, g in robust.flag_groups(flagged, w).group_by("group", maintain_order=True):
        cp = g.sort("rise", descending=True).row(0, named=True)
        midway = cp["before"] + cp["rise"] / 2
        after = data.filter((pl.col("_k") == cp["_k"]) & (pl.col("_i") >= cp["_i"]))
        low = after.filter((pl.col("_i") >= cp["_i"] + dp.smooth) & (pl.col("smooth") < midway)).head(1)
        last = int(low.get_column("_i")[0]) - 1 if low.height else int(after.get_column("_i").max())
        out.append(
            after.filter(pl.col("_i") <= last).with_columns(
                pl.lit(cp["before"]).alias("before"),
                pl.lit(cp["rise"]).alias("rise"),
                pl.lit(cp["before"] + cp["rise"]).alias("smooth"),
            )
        )  # evidence: the level after the change point
    return pl.concat(out).with_columns(pl.lit("grad_norm").alias("signal"))


def detect(run: RunData, params) -> list[Finding]:
    dp = params.soft_drift
    parts = []
    loss, _ = signals.raw(run, "loss")
    # a loss too short for the drift test (a pasted excerpt) is judged as a whole; the grad norm still is below
    findings = _excerpt_climb(loss, dp, params) if loss.height <= dp.early_min else []
    if loss.height > dp.early_min:
        parts.append(_loss_flags(loss, dp))
        findings += _early_rebound(loss, dp, params)
    grad, derived = signals.raw(run, "grad_norm")
    if grad.height > dp.early_min + 2 * dp.level_window:
        parts.append(_grad_flags(grad, dp))
    if grad.height > dp.early_min:
        parts.append(_grad_climb_flags(grad, dp))
    parts = [
        p.select("signal", "_k", "step", "attempt", "rank", "pos", "smooth", "before", "rise", "_i")
        for p in parts
        if p.height
    ]
    if not parts:
        return findings
    flags = robust.flag_groups(pl.concat(parts), gap=max(dp.loss_span, dp.level_window))
    for _, g in flags.group_by("group", maintain_order=True):
        if (
            g.filter(pl.col("signal") == "loss").height < dp.min_records
            and g.filter(pl.col("signal") == "grad_norm").height == 0
        ):
            continue  # a loss bump of a few records is a spike's echo or a small batch's wander, not a drift
        finding = _finding(g, derived)
        if g.filter(pl.col("signal") == "loss").height == 0:
            finding = _under_lr_decay(run, finding, grad, dp)
        findings.append(finding)
    if run.loss_is_reinforcement():
        loss_only = [f for f in findings if {e.signal for e in f.evidence} == {"loss"}]
        why = (
            "a critic's loss moves with its bootstrapped targets as the returns change"
            if run.loss_is_critic()
            else "a reinforcement-learning loss moves with the data its own policy generates"
        )
        as_notes(loss_only, "critic_drift" if run.loss_is_critic() else "rl_drift", why)
    return findings


def _under_lr_decay(run: RunData, finding: Finding, grad: pl.DataFrame, dp) -> Finding:
    """A grad-norm rise the LR schedule took back: between the two points the drift's evidence compares (the
    norm's level at its peak, and the last record before it where the smoothed norm stood at the baseline
    level), the LR fell by at least as much as the norm rose, so the update the optimizer applies (lr x the
    gradient norm) did not grow, and the loss did not drift with it. The grad norm of a run whose LR decays
    grows as the LR goes down (Defazio et al. 2025, "Why gradients rapidly increase near the end of training":
    weight decay and normalised layers under a decaying LR) - a fine-tune's cosine schedule to ~0 lifts it 2-5x
    while the loss keeps falling. Such a drift is an info note, not a warning; under a constant LR, or an LR
    that took back only part of the rise (or no LR logged), it stays a warning."""
    ev = next((e for e in finding.evidence if e.signal == "grad_norm"), None)
    lr, _ = signals.raw(run, "lr")  # steps as the grad norm's (a log without step numbers: record index)
    if ev is None or not ev.baseline or not ev.ratio:
        return finding
    track = (
        grad.filter(
            pl.col("y").is_not_null() & (pl.col("attempt") == finding.attempt) & pl.col("rank").eq_missing(ev.rank)
        )
        .sort("pos")
        .with_columns(pl.col("y").rolling_median(dp.smooth, min_samples=1, center=True).alias("smooth"))
    )
    earlier = track.filter(pl.col("step") < ev.step)
    at_base = earlier.filter(pl.col("smooth") <= math.log(ev.baseline) + 1e-9).tail(1)
    if at_base.height == 0:
        at_base = earlier.sort("smooth").head(1)
    if at_base.height == 0:
        return finding
    if lr.height == 0:
        return _loss_fell(run, finding, int(at_base.item(0, "step")), ev.step, dp)
    lr = lr.filter(pl.col("y").is_not_null() & (pl.col("attempt") == finding.attempt)).sort("pos")
    then, now = _log_median_near(lr, int(at_base.item(0, "step")), dp), _log_median_near(lr, ev.step, dp)
    if then is None or now is None:
        return finding
    lr_ratio = math.exp(now - then)
    update_ratio = ev.ratio * lr_ratio
    if update_ratio > 1.0:
        return finding  # the LR took back only part of the rise (or none): the update grew
    finding.severity = "info"
    finding.summary += (
        f" while the LR decayed to {lr_ratio:.2f}x: the update (lr x grad norm) did not grow ({update_ratio:.2f}x) "
        "and the loss did not drift (a grad norm rising as the LR decays)"
    )
    finding.facts["update_ratio"] = round(update_ratio, 3)
    return finding


def _log_median_near(series: pl.DataFrame, step: int, dp) -> float | None:
    """The median log value of a prepared series (`signals.raw`, sorted) over the smoothing window of records
    around `step`."""
    half = dp.smooth // 2
    rows = pl.concat(
        [series.filter(pl.col("step") < step).tail(half), series.filter(pl.col("step") >= step).head(half + 1)]
    )
    return float(rows.get_column("y").median()) if rows.height else None


def _loss_fell(run: RunData, finding: Finding, base_step: int, peak_step: int, dp) -> Finding:
    """`_under_lr_decay` for a log that prints no LR: a grad-norm rise over which the smoothed loss fell by
    `grad_rise_loss_fall` or more (AlgoPerf's OGBG baseline: the norm 0.026 -> 0.21 over 40,000 steps while the loss
    goes 0.035 -> 0.020) is the end-of-training rise, an info note; a loss flat or rising under it stays a warning."""
    loss, _ = signals.raw(run, "loss")
    if loss.height == 0:
        return finding
    loss = loss.filter(pl.col("y").is_not_null() & (pl.col("attempt") == finding.attempt)).sort("pos")
    then, now = _log_median_near(loss, base_step, dp), _log_median_near(loss, peak_step, dp)
    if then is None or now is None or now - then > math.log(1.0 - dp.grad_rise_loss_fall):
        return finding
    finding.severity = "info"
    finding.summary += (
        f" while the loss fell to {math.exp(now - then):.2f}x of its level where the rise began: a grad norm rising "
        "as training converges (no LR printed to tell more)"
    )
    finding.facts["loss_ratio_over_rise"] = round(math.exp(now - then), 3)
    return finding


def _early_rebound(loss: pl.DataFrame, dp, params) -> list[Finding]:
    """The loss climbing back inside the early phase that the drift test leaves out (`_prep`'s `_early` records):
    on the smoothed log loss of the first attempt, the highest rise over the lowest level reached before it is
    `rebound_rise` or more, takes back `rebound_regain` of the fall from the first smoothed level to that low, stands
    out of the noise of a smoothed difference (`_with_noise`), lasts `min_records` records, and climbs higher than
    the smoothed loss ever climbs over its running low in as many records right after the early phase
    (`_noise_climb`: the extreme of many windows, not one difference). A warmup that collapses the model (DINO's loss
    back at ln 65536 after falling to 7) is this; the start's fast fall is not.
    Critical at `hard_spike.loss_ratio_critical`."""
    track = signals.one_track(loss)
    if track.height == 0:
        return []
    track = signals.rows_where(track, pl.col("attempt") == track.get_column("attempt").min())
    track = signals.rows_where(track.select("step", "attempt", "rank", "pos", "y"), pl.col("y").is_not_null())
    if track.height == 0:
        return []
    # the early phase as `_prep` counts it on the whole attempt; only its records (and the smoothing window's reach
    # past them) are smoothed: a 10M-step run's rolling medians are not computed for the first 5%
    early = int(track.select(_early_records(dp)).item())
    # smoothed as far as the stretch of as many records after the early phase (the reference below)
    smoothed = _with_noise(_prep(track.head(2 * early + dp.smooth), dp), dp)
    data = smoothed.filter(pl.col("_i") < early)
    if data.height < 2 * dp.min_records:
        return []
    low_before = pl.col("smooth").cum_min()
    # the lower quartile of the same records, against its own lowest level so far: a drift moves the whole loss,
    # a bimodal per-batch loss only moves its median between the modes (see `_loss_flags`)
    low_q = _lower_quartile(dp)
    data = data.with_columns(
        low_before.alias("_low"), (pl.col("smooth") - low_before).alias("_up"), (low_q - low_q.cum_min()).alias("_upq")
    )
    start = float(data.item(0, "smooth"))
    rise = math.log1p(dp.rebound_rise)
    up = (
        (pl.col("_up") >= rise) & (pl.col("_up") >= pl.col("_noise")) & (pl.col("_upq") >= dp.low_share * pl.col("_up"))
    )
    # ... after a fall of that size at least (the model had trained), of which the climb takes back `rebound_regain`
    fall = pl.lit(start) - pl.col("_low")
    up = up & (fall >= rise) & (pl.col("_up") >= dp.rebound_regain * fall)
    flagged = data.filter(up)
    if flagged.height < dp.min_records:
        return []
    peak = flagged.sort("_up", descending=True).row(0, named=True)
    if peak["_up"] <= _noise_climb(smoothed.filter((pl.col("_i") >= early) & (pl.col("_i") < 2 * early)), dp):
        return []
    low_at = data.filter((pl.col("_i") <= peak["_i"]) & (pl.col("smooth") == peak["_low"])).row(-1, named=True)
    ratio = math.exp(peak["_up"])
    return [
        _loss_rise(
            params,
            steps=(int(low_at["step"]), int(flagged.get_column("step").max()), int(peak["step"])),
            ratio=ratio,
            attempt=peak["attempt"],
            value=math.exp(peak["smooth"]),
            baseline=math.exp(peak["_low"]),
            note=f"smoothed loss back up {ratio:.2f}x over the low it reached at step {low_at['step']}, "
            f"having fallen from {math.exp(start):.4g}",
            summary=f"loss climbed back {ratio - 1:.0%} in the first records (steps {low_at['step']}-{peak['step']}), "
            "undoing what training had gained: a collapse during warmup (LR too high for the start, warmup too short)",
            facts={"early_rebound": True, "recovery": "unknown"},
        )
    ]


def _noise_climb(stretch: pl.DataFrame, dp) -> float:
    """The highest climb of the smoothed loss over the lowest level it reached before, in the stretch of as many
    records right after the early phase: what the loss's own noise makes of that statistic over as many windows. A
    per-sample diffusion loss (log residual sigma 0.7, Wan2.2 LoRA) whose 25-record median wanders 0.11-0.28 in its
    first 2,000 records climbs 2.5x over its low by noise alone, past the 3-sigma test of one difference, and as far
    in the 2,000 after. -inf when the stretch is too short to tell (fewer than `min_records` records)."""
    if stretch.height < dp.min_records:
        return -math.inf
    up = stretch.select((pl.col("smooth") - pl.col("smooth").cum_min()).max()).item()
    return float(up) if up is not None else -math.inf


def _loss_rise(
    params, steps: tuple[int, int, int], ratio: float, attempt, value, baseline, note: str, summary: str, facts: dict
) -> Finding:
    """A `soft_drift` finding of the loss judged as a whole (an excerpt's climb, an early rebound): `steps` its
    start, end and peak, critical at `hard_spike.loss_ratio_critical`, its one evidence row at the peak."""
    lo, hi, peak = steps
    return Finding(
        kind="soft_drift",
        step_start=lo,
        step_end=hi,
        peak_step=peak,
        severity="critical" if ratio >= params.hard_spike.loss_ratio_critical else "warning",
        score=round(ratio, 3),
        attempt=int(attempt or 0),
        evidence=[Evidence(signal="loss", step=peak, value=value, baseline=baseline, ratio=ratio, note=note)],
        summary=summary,
        facts={"onset_step": lo, **facts},
    )


def _excerpt_climb(loss: pl.DataFrame, dp, params) -> list[Finding]:
    """A log too short for the drift test (a pasted excerpt) still shows a climb in progress: its last
    `excerpt_climb_records` intervals each rise (one track, finite records, in log order) and the loss ends
    `excerpt_rise` or more above where that climb began (`loss_rise` when the climb is the whole log from the
    start of training: a loss that never fell; or when a log from the start of training ends `loss_rise` above
    its first record, judged from there). Critical at `hard_spike.loss_ratio_critical`."""
    one = signals.one_track(loss.filter(pl.col("finite") & (pl.col("attempt") == pl.col("attempt").max())).sort("t"))
    if one.height < 2:
        return []
    # k: the rises that end the log (the leading run of True in the reversed rise flags)
    up = (pl.col("value").diff() > 0).fill_null(False)
    k = int(one.select(up.reverse().cast(pl.Int64).cum_prod().sum()).item())
    if k < dp.excerpt_climb_records or one.item(one.height - 1 - k, "value") <= 0:
        return []
    start, end = one.row(one.height - 1 - k, named=True), one.row(one.height - 1, named=True)
    ratio = end["value"] / start["value"]
    # a loss that rises on every record from the first update of the run on never trained at all: there a
    # rise of DOMAIN's 5% suffices (a loss falls from its initial value; LightGBM #742's logloss climbs 8%
    # over its first 4 iterations)
    from_start = k == one.height - 1 and start["step"] <= params.hard_spike.start_max_step
    first = one.row(0, named=True)
    if (
        not from_start
        and ratio < 1 + dp.excerpt_rise
        and first["step"] <= params.hard_spike.start_max_step
        and first["value"] > 0
        and end["value"] / first["value"] >= 1 + dp.loss_rise
    ):
        # a log from the start of training that ends, still climbing, above its first record: the model is worse
        # than untrained (DINO #246: 10.38 at epoch 0, a dip, then 8 rises to 11.0, its collapse at ln 65536);
        # judged from that first record, with DOMAIN's 5%
        start, ratio, from_start = first, end["value"] / first["value"], True
    if ratio < 1 + (dp.loss_rise if from_start else dp.excerpt_rise):
        return []
    lo, hi = int(start["step"]), int(end["step"])  # (`robust.prepare` numbers a step-less log by record)
    from_first = start["t"] != one.item(one.height - 1 - k, "t")
    return [
        _loss_rise(
            params,
            steps=(lo, hi, hi),
            ratio=ratio,
            attempt=end["attempt"],
            value=end["value"],
            baseline=start["value"],
            note=f"the loss rose on each of the excerpt's last {k} intervals"
            + (f", ending above its first record (step {lo})" if from_first else ""),
            summary=f"loss climbing {ratio - 1:.0%} over steps {lo}-{hi}, rising on its last {k} intervals when the log "
            f"ends ({one.height} records: too few for a drift test, the climb judged as a whole)",
            facts={"excerpt_climb": True, "recovery": "never"},
        )
    ]


def _finding(g: pl.DataFrame, derived: bool) -> Finding:
    lo, hi = int(g.get_column("step").min()), int(g.get_column("step").max())
    ev = []
    for (signal,), rows in g.group_by("signal", maintain_order=True):
        top = rows.sort(["rise", "step"], descending=[True, False]).row(0, named=True)
        note = (
            "level shift: median after vs before"
            if signal == "grad_norm"
            else "rolling-median loss vs its level a span earlier"
        )
        if signal == "grad_norm" and derived:
            note = signals.DERIVED_NOTE + "; " + note
        ev.append(
            Evidence(
                signal=signal,
                step=top["step"],
                value=math.exp(top["smooth"]),
                baseline=math.exp(top["before"]),
                ratio=math.exp(top["rise"]),
                rank=top["rank"],
                note=note,
            )
        )
    top = g.sort(["rise", "step"], descending=[True, False]).row(0, named=True)
    sigs = " and ".join(sorted(set(g.get_column("signal"))))
    return Finding(
        kind="soft_drift",
        step_start=lo,
        step_end=hi,
        peak_step=int(top["step"]),
        severity="warning",
        score=round(math.exp(top["rise"]), 3),
        rank=None,
        attempt=int(top["attempt"] or 0),
        evidence=ev,
        summary=f"{sigs} drifting up {math.expm1(top['rise']):.0%} over steps {lo}-{hi}",
        facts={"onset_step": lo},
    )
