"""Divergence: the loss leaves its band and does not come back.

Today's hard-spike test sees a divergence as a string of one-record spikes; this detector
sees the shape. On log-loss with the shared two-sided baseline (`signals.with_baseline`,
whose `left` is the trailing robust median before a guard band and `sigma` the run's robust
noise), a record is out of band when it stands `band_z` x its trailing noise (robust scale of the
residuals before it) and `band_ratio` above its
pre-onset median. The onset is the first out-of-band record after which *no* record of the
same attempt comes back under that threshold (a suffix minimum, no loop per step). It is a
divergence when

- the loss stays out for >= `min_records` records to the end of the attempt, its median
  there is >= `min_ratio` x the pre-onset level, and it is not visibly recovering (falling
  on >= `falling_frac` of the records after its peak, by more than the band's width); or
- it climbs monotonically for >= `min_records_nonfinite` records and the attempt ends in a
  non-finite loss (a NaN/Inf record, a `nan` event, a stop); or
- it rises on every record for >= `min_records_rising` records to the end of the attempt, its
  median there >= `min_ratio` x the pre-onset level (a fastai LSTM at 0.37-0.41 for 10 epochs, then
  0.72, 0.81, 1.05 when the user stopped it: a climb the log ends in, not a spike it cut off); or
- (`past_start`) in a log that begins at the start of training, it fell to 1/`start_drop` of where it
  began or lower (a trailing median of `start_records` records: a level, not one lucky batch), then stays above the
  geometric midpoint of that start and its lowest value for >= `min_records` records to the end, with a
  median there at or above the start: the model ends worse than it began. A run whose noise grew with
  its learning rate (a Keras LR range test: 0.055 at epoch 60, 0.09-0.63 for twenty epochs, then 0.67-0.98
  to the end, over its chance-level start of 0.69) has a trailing noise that hides the rise from the
  band test; its own start is a level no healthy run returns to. Not on a loss with no ratio scale (a
  GAN side, a signed loss) nor a reinforcement-learning loss, whose levels move with the policy.

On an RL critic's loss (`RunData.loss_is_critic`) a divergence that does not end non-finite, peaks under
`hard_spike.critic_blip_max_ratio` x its band and never rises `hard_spike.loss_ratio_critical` x over the median
of the records before is a note (`critic_climb`): its targets grow with the returns.

Critical at >= `critical_ratio` or ending non-finite, else a warning. One finding per
attempt at most; the incident grouping puts the spikes inside it into the same incident.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.detect import robust, signals
from spikeforensics.detect.base import Evidence, Finding, as_notes
from spikeforensics.rundata import RunData


def _nonfinite_after(run: RunData, raw: pl.DataFrame, attempt: int, pos: int) -> int | None:
    """The first step at or after `pos` (same attempt) with a non-finite loss or a nan event, else None."""
    bad = raw.filter((pl.col("attempt") == attempt) & (pl.col("pos") >= pos) & ~pl.col("finite"))
    steps = bad.get_column("step").to_list()
    ev = run.events_of("nan").filter(pl.col("step").is_not_null() & (pl.col("attempt").fill_null(0) == attempt))
    steps += ev.filter(pl.col("step") >= pos % 10**12).get_column("step").to_list()
    return int(min(steps)) if steps else None


def detect(run: RunData, params) -> list[Finding]:
    dp = params.divergence
    frame, _ = signals.with_baseline(run, "loss", params)
    # only the columns read here, and no copy of the rows when every one has a baseline (issues 14/16)
    frame = signals.one_track(frame).select("rank", "attempt", "t", "step", "pos", "value", "y", "left", "sigma")
    frame = signals.rows_where(frame, pl.col("left").is_not_null() & pl.col("sigma").is_not_null())
    if frame.height == 0:
        return []
    raw, _ = signals.raw(run, "loss")
    raw = signals.one_track(raw)
    # the noise before each record: robust scale of the trailing residuals (the shared `sigma` is two-sided and a
    # divergence inflates it around its own onset)
    window = signals.short_series_windows(frame, params)[0]
    noise = (pl.col("y") - pl.col("left")).abs().shift(1).rolling_median(window, min_samples=1) * robust.MAD_SCALE
    f = signals.in_order(frame, "attempt", "t").with_columns(noise.over("attempt").alias("noise"))
    thr = pl.col("left") + pl.max_horizontal(
        dp.band_z * pl.col("noise").fill_null(pl.col("sigma")), pl.lit(math.log(dp.band_ratio))
    )
    f = f.with_columns(thr.alias("thr")).with_columns(
        (pl.col("y") >= pl.col("thr")).alias("out"),
        pl.col("y").reverse().cum_min().reverse().over("attempt").alias("suffix_min"),
    )
    cand = f.filter(pl.col("out") & (pl.col("suffix_min") >= pl.col("thr")))
    findings = [
        found
        for attempt, onset, tail in _onsets(cand, f)
        if (found := _judge(run, raw, tail, onset, attempt, params)) is not None
    ]
    if not (run.loss_without_ratio() or run.loss_is_reinforcement()):
        judged = [f.attempt for f in findings]
        findings += _past_start(run, raw, f.filter(~pl.col("attempt").fill_null(0).is_in(judged)), params)
    if run.loss_is_critic():
        # an RL critic's loss climbs with its bootstrapped targets as the returns grow (AWR's value MSE 0.001 ->
        # 0.057 over a run whose return goes 1,000 -> 5,500), by design, as `soft_drift` and `critic_blips` read
        # it; a rise that ends non-finite, passes `hard_spike.critic_blip_max_ratio` x its band or jumps
        # `hard_spike.loss_ratio_critical` x over the records before on its way (a DDPG critic's Q-loss blow-ups)
        # is no climb
        hp = params.hard_spike
        climbs = [
            d
            for d in findings
            if not d.facts["ends_nonfinite"]
            and d.score < hp.critic_blip_max_ratio
            and d.facts["max_step_ratio"] < hp.loss_ratio_critical
        ]
        as_notes(climbs, "critic_climb", "an RL critic's loss rising with its bootstrapped targets as the returns grow")
    return findings


def _onsets(cand: pl.DataFrame, frame: pl.DataFrame):
    """(attempt, onset row, rows of that attempt from the onset on) for the first candidate of each attempt."""
    for (attempt,), first in cand.group_by("attempt", maintain_order=True):
        onset = first.row(0, named=True)
        yield int(attempt or 0), onset, frame.filter((pl.col("attempt") == attempt) & (pl.col("t") >= onset["t"]))


def _past_start(run: RunData, raw: pl.DataFrame, f: pl.DataFrame, params) -> list[Finding]:
    """Attempts whose loss fell to 1/`start_drop` of their start or lower and end above that start (the
    `past_start` arm of the module docstring), in a log that begins at the start of training. `f` holds the baseline
    rows in order, with `suffix_min`."""
    dp = params.divergence
    if f.height == 0 or not run.starts_at_start(params.hard_spike.start_max_step):
        return []
    # only attempts that begin where the log begins: a resumed attempt's first records are no untrained start
    f = f.filter(pl.col("step").min().over("attempt") <= f.get_column("step").min())
    start = pl.col("y").head(dp.start_records).median().over("attempt")
    # the lowest level reached, of a short trailing median (one lucky batch of a heavy-tailed loss is no level)
    low = pl.col("y").rolling_median(dp.start_records).cum_min().over("attempt")
    g = f.with_columns(start.alias("start"), low.alias("low")).with_columns(
        ((pl.col("start") + pl.col("low")) / 2).alias("thr")
    )
    deep = (pl.col("start") - pl.col("low")) >= math.log(dp.start_drop)
    cand = g.filter(deep & (pl.col("y") >= pl.col("thr")) & (pl.col("suffix_min") >= pl.col("thr")))
    findings = []
    for attempt, onset, tail in _onsets(cand, g):
        if tail.height < dp.min_records or float(tail.get_column("y").median()) < onset["start"]:
            continue
        # the band is the lowest level the attempt reached before it rose
        found = _judge(run, raw, tail, onset | {"left": onset["low"]}, attempt, params)
        if found is not None:
            findings.append(found)
    return findings


def _judge(run: RunData, raw: pl.DataFrame, tail: pl.DataFrame, onset: dict, attempt: int, params) -> Finding | None:
    dp = params.divergence
    base = onset["left"]
    n = tail.height
    y = tail.get_column("y")
    excess = float(y.median()) - base
    peak = tail.sort("y", descending=True).row(0, named=True)
    after_peak = tail.filter(pl.col("t") >= peak["t"]).get_column("y")
    diffs = after_peak.diff().drop_nulls()
    # recovering: falling on most records after the peak, and by more than the band's width (not noise)
    recovering = (
        diffs.len() >= dp.falling_min
        and float((diffs < 0).mean()) >= dp.falling_frac
        and float(peak["y"] - after_peak[-1]) >= float(onset["thr"] - base)
    )
    last_pos = int(tail.get_column("pos").max())
    end_bad = _nonfinite_after(run, raw, attempt, last_pos)
    stopped = _stop_event(run, params, int(tail.get_column("step").max()))
    ends_nonfinite = end_bad is not None or stopped
    monotone = bool((y.diff().drop_nulls() >= 0).all())
    sustained = n >= dp.min_records and excess >= math.log(dp.min_ratio) and not recovering
    climb = ends_nonfinite and monotone and n >= dp.min_records_nonfinite
    # fewer records out of band than `min_records`, each higher than the one before to the end of the log and
    # `min_ratio` above the band: a climb in progress when the log stops, not a spike it cut off (that comes back)
    rising = n >= dp.min_records_rising and bool((y.diff().drop_nulls() > 0).all()) and excess >= math.log(dp.min_ratio)
    if not (sustained or climb or rising):
        return None
    ratio = math.exp(excess)
    peak_ratio = math.exp(peak["y"] - base)
    severity = "critical" if ends_nonfinite or ratio >= dp.critical_ratio else "warning"
    step_lo = int(onset["step"])
    step_hi = max(int(tail.get_column("step").max()), end_bad or 0)
    ev = [
        Evidence(
            signal="loss",
            step=int(onset["step"]),
            value=onset["value"],
            baseline=math.exp(base),
            ratio=round(math.exp(onset["y"] - base), 4),
            note="onset: first record out of the band that never came back",
        ),
        Evidence(
            signal="loss",
            step=int(peak["step"]),
            value=peak["value"],
            baseline=math.exp(base),
            ratio=round(peak_ratio, 4),
            note=f"peak; median {ratio:.2f}x the pre-onset level over the {n} records to the end"
            + ("; ends in a non-finite loss" if ends_nonfinite else ""),
        ),
    ]
    how = "climbed until the loss went non-finite" if climb and not sustained else "never came back to its band"
    summary = (
        f"loss diverged from step {step_lo}: it left its band ({math.exp(base):.4g}) and {how}"
        f" (median {ratio:.1f}x, peak {peak_ratio:.1f}x at step {peak['step']}, {n} records)"
    )
    return Finding(
        kind="divergence",
        step_start=step_lo,
        step_end=step_hi,
        peak_step=int(peak["step"]),
        severity=severity,
        score=round(peak_ratio, 4),
        summary=summary,
        attempt=attempt,
        evidence=ev,
        facts={
            "onset_step": step_lo,
            "onset": step_lo,
            "recovery": "never",
            "divergence": True,
            "ends_nonfinite": ends_nonfinite,
            "divergence_ratio": round(ratio, 4),
            "first_nonfinite_step": end_bad,
            # the largest rise of a record over the median of the (up to) 10 before it after the onset: a climb has
            # none of a spike's size
            "max_step_ratio": round(
                math.exp(float((y - y.rolling_median(10, min_samples=1).shift(1)).max() or 0.0)), 4
            ),
        },
    )


def _stop_event(run: RunData, params, after_step: int) -> bool:
    ep = params.events
    ev = run.events_of("nan", "error")
    if ev.height == 0:
        return False
    text = pl.col("detail").fill_null("")
    hit = ev.filter(
        text.str.contains(ep.stop_pattern)
        & text.str.contains(ep.nonfinite_pattern)
        & (pl.col("step").is_null() | (pl.col("step") >= after_step))
    )
    return hit.height > 0
