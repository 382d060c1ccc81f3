"""Grad-norm blips and recurring spikes (detect/hard_spike.py's second stage): whether a grad-norm-only spike is the
norm's heavy tail or an event.

- `quiet_blip`: on a long run (`blips.long_run_records`), a grad-norm-only spike at most `blips.max_width` records
  wide at its core (`core_width`) that the loss does not answer (`loss_answer`) is a note, whatever its size;
- `recurring_blips`: on a shorter run, enough such quiet spikes are the run's blips (notes) unless they come often
  (`dense`: the LR-too-high pattern);
- `recurring`: spikes that keep coming back are one pattern: the events no incident covers become ONE grouped
  finding, a note when they are the quiet tail, a warning when the loss answers them or they come often.

Pure: findings and run in, findings out.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.detect import loss_answer, robust, signals
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData

SIGNALS = ("loss", "grad_norm")


def grad_records(run: RunData) -> int:
    grad, _ = signals.raw(run, "grad_norm")
    return grad.height


def long_run_of(run: RunData, params) -> bool:
    return grad_records(run) >= params.blips.long_run_records


def tail_known(run: RunData, params) -> bool:
    """Enough grad-norm records (`blips.tail_known_records`) that a few quiet spikes are its tail."""
    return grad_records(run) >= params.blips.tail_known_records


def core_width(f: Finding, run: RunData) -> int:
    """The steps a grad-norm spike spans at its core: from the first to the last record of the finding at
    sqrt(peak ratio) x its baseline or more (half the peak's height in log scale). A one-record spike whose norm
    then relaxes over a few records (llm.c at step 10959: 11.8x, then 1.6x, 1.8x, 1.5x, 1.3x its level) is
    one record wide; a finding without grad-norm evidence keeps its span."""
    ev = next((e for e in f.evidence if e.signal == "grad_norm" and e.baseline and e.ratio), None)
    span = f.step_end - f.step_start + 1
    if ev is None or ev.ratio <= 1:
        return span
    grad = run.series("grad_norm").filter(
        (pl.col("attempt") == f.attempt)
        & pl.col("step").is_between(f.step_start, f.step_end)
        & (pl.col("value") >= ev.baseline * math.sqrt(ev.ratio))
    )
    steps = grad.get_column("step").drop_nulls()
    return int(steps.max() - steps.min() + 1) if steps.len() else span


def quiet_blip(f: Finding, run: RunData, params) -> Finding:
    """On a long run, a grad-norm-only spike of at most `blips.max_width` records at its core (`core_width`) that
    the loss does not answer is the norm's heavy tail: a note, whatever its size."""
    signals_hit = {e.signal for e in f.evidence} & set(SIGNALS)
    if (
        f.severity == "info"
        or f.facts.get("early_rise")
        or signals_hit != {"grad_norm"}
        or core_width(f, run) > params.blips.max_width * signals.record_interval(run)
    ):
        return f
    answer = loss_answer.answer(run, params, list(range(f.step_start, f.step_end + 1)))
    if answer is None or answer.height == 0 or answer.get_column("moved").any():
        return f
    f.severity = "info"
    f.facts["blip"] = True
    f.summary += "; the loss did not move: an isolated grad-norm blip (note)"
    return f


def recurring(findings: list[Finding], run: RunData, params, long_run: bool = False) -> list[Finding]:
    """Grad-norm spikes that keep coming back (>= `recurring_count` separate events at >= `recurring_ratio`):
    a pattern of the run, not one-offs. Returns `findings` with the pattern applied. An event is a grad-only
    note that high over its past, a grad-norm record that high over *both* sides at a lower z (`recurring_z`:
    in a run whose grad norm spikes all the time the robust sigma is inflated, so each spike's z understates
    it), and on a long run every isolated blip `quiet_blip` made a note. The events no warning+ finding
    covers become ONE grouped finding over their span (facts `recurring_spikes`, and `blip_pattern`: count,
    steps (at most `blips.steps_listed`), first/last, median/max size, the loss's answer).
    Spikes that come often (`blips.lr_pattern_rate` per record or more over their span) are the LR-too-high
    pattern: that finding is a warning and every hard-spike finding carries the pattern as fact
    `run_spike_pattern`. Sparse ones on a long run (`quiet_blip`), or sparse ones the loss never answers
    on a shorter run (`recurring_blips`), are the grad norm's heavy tail: their individual notes are
    absorbed into the one finding, which is a note unless the loss answers `blips.pattern_loss_share` of
    them (then a warning), and `run_spike_pattern` (which the rules read as "the run is unstable") counts
    only the events the loss answered or an incident holds."""
    hp, bp = params.hard_spike, params.blips
    grad_only = lambda f: {e.signal for e in f.evidence} & set(SIGNALS) == {"grad_norm"}  # noqa: E731
    long_run = long_run or recurring_blips(findings, run, params)  # from here on: "blips are notes"
    grad_ratio = lambda f: max((e.ratio or 0.0) for e in f.evidence if e.signal == "grad_norm")  # noqa: E731
    notes = [
        f
        for f in findings
        if not f.facts.get("early_rise")
        and f.severity == "info"
        and grad_only(f)
        and (grad_ratio(f) >= hp.recurring_ratio or f.facts.get("blip"))
    ]
    frame, _ = signals.with_baseline(run, "grad_norm", params)
    high = frame.filter(
        pl.col("left").is_not_null()
        & (pl.col("z") >= hp.recurring_z)
        & (pl.col("y") - pl.col("base") >= math.log(hp.recurring_ratio))
    )
    rows = high.select("step", "value", "base", "z").with_columns(pl.col("base").exp())
    # every candidate step with its size over the baseline (a note's own evidence, else the record's)
    sizes = (
        pl.concat(
            [
                rows.select(
                    pl.col("step").cast(pl.Int64).alias("pos"), (pl.col("value") / pl.col("base")).alias("ratio")
                ),
                pl.DataFrame(
                    {"pos": [f.peak_step for f in notes], "ratio": [grad_ratio(f) for f in notes]},
                    schema={"pos": pl.Int64, "ratio": pl.Float64},
                ),
            ]
        )
        .drop_nulls("pos")
        .group_by("pos")
        .agg(pl.col("ratio").max())
    )
    grouped = (
        robust.flag_groups(sizes, hp.group_gap)
        .group_by("group")
        .agg(pl.col("pos").min().alias("step"), pl.col("ratio").max())
        .sort("step")
    )
    events = grouped.get_column("step").to_list()  # each event's first step
    if len(events) < hp.recurring_count:
        return findings
    if long_run and dense(run, params, events):
        long_run = False  # spikes this frequent are the LR pattern, not a heavy tail: one warning as on a short run
    claimed = [f for f in findings if f.severity != "info" and not f.facts.get("early_rise")]
    is_free = lambda s: not any(f.step_start - hp.group_gap <= s <= f.step_end + hp.group_gap for f in claimed)  # noqa: E731
    free = [s for s in events if is_free(s)]
    moved = loss_answer.answer(run, params, free)
    answered = moved.filter(pl.col("moved")).get_column("step").to_list() if moved is not None else []
    if not long_run and moved is not None and not answered and free and tail_known(run, params):
        long_run = not dense(run, params, events)  # sparse spikes the loss never answered: the norm's tail
        if long_run:  # ... and so are the spikes among them that are incidents, when the loss did not answer them
            quieted = [quiet_blip(f, run, params) for f in claimed if holds_any(f, events)]
            notes += [f for f in quieted if f.severity == "info"]
            claimed = [f for f in claimed if f.severity != "info"]
            free = [s for s in events if is_free(s)]
            moved = loss_answer.answer(run, params, free)
            answered = moved.filter(pl.col("moved")).get_column("step").to_list() if moved is not None else []
    if long_run:  # the rules' "unstable run" pattern: events with an effect, not the quiet heavy tail
        pattern = sorted(set(events) - set(free) | set(answered))
        absorbed = {id(f) for f in notes if is_free(f.peak_step)} if free else set()
        findings = [f for f in findings if id(f) not in absorbed]
    else:
        pattern = events
    for f in findings:
        if len(pattern) >= hp.recurring_count:
            f.facts["run_spike_pattern"] = pattern
    if not free:
        return findings
    ev_rows = rows.filter(pl.col("step").is_in(free)).sort("step")
    ev = [
        Evidence(
            signal="grad_norm",
            step=r["step"],
            value=r["value"],
            baseline=r["base"],
            ratio=round(r["value"] / r["base"], 4) if r["base"] else None,
            note=f"one of the recurring grad-norm spikes (robust z {r['z']:.1f})",
        )
        for r in ev_rows.iter_rows(named=True)
    ]
    top = ev_rows.sort("z", descending=True).row(0, named=True) if ev_rows.height else {"step": free[0]}
    size = grouped.filter(pl.col("step").is_in(free)).get_column("ratio")
    rises = moved.get_column("rise") if moved is not None else pl.Series([], dtype=pl.Float64)
    blip_pattern = {
        "count": len(free),
        "first_step": free[0],
        "last_step": free[-1],
        "steps": free[: bp.steps_listed],
        "median_ratio": round(float(size.median()), 2),
        "max_ratio": round(float(size.max()), 2),
        "loss_moved": len(answered) if moved is not None else None,
        "loss_reach_records": bp.reach,
        "loss_rise_median": round(float(rises.median()), 4) if rises.len() else None,
        "loss_rise_max": round(float(rises.max()), 4) if rises.len() else None,
    }
    severity, facts = "warning", {}
    if long_run:  # a pattern of blips on a long run: one grouped note (a warning when the loss answers), never run-long
        loud = len(answered) >= hp.recurring_count and len(answered) >= bp.pattern_loss_share * len(free)
        severity = "warning" if loud else "info"
        facts = {"scope": "run", "blips": free[: bp.steps_listed]}
    if moved is None:
        effect = "no loss series to judge their effect by"
    elif answered:
        effect = f"the loss rose after {len(answered)} of them (within {bp.reach} records)"
    else:
        effect = (
            f"the loss did not move after any of them (within {bp.reach} records: median "
            f"{blip_pattern['loss_rise_median']:.2f}x, max {blip_pattern['loss_rise_max']:.2f}x its prior level)"
        )
    quiet = long_run and severity == "info"
    what = "isolated grad-norm blips" if quiet else f"grad-norm spikes of {hp.recurring_ratio:g}x or more"
    told = free if quiet else events  # a warning tells the whole pattern (its other spikes are incidents or notes)
    listed = ", ".join(map(str, told[:12])) + (" ..." if len(told) > 12 else "")
    told_size = grouped.filter(pl.col("step").is_in(told)).get_column("ratio")
    summary = (
        f"{len(told)} {what} between steps {told[0]} and {told[-1]} (median {float(told_size.median()):.1f}x, "
        f"max {float(told_size.max()):.1f}x their level; at steps {listed})"
        + ("" if quiet else ": recurring, not a one-off (LR too high?)")
        + f"; {effect}"
        + ("; the grad norm's heavy tail (note)" if quiet else "")
    )
    return findings + [
        Finding(
            kind="hard_spike",
            step_start=min(free),
            step_end=max(free),
            peak_step=int(top["step"]),
            severity=severity,
            score=float(len(events)),
            evidence=ev[:10],
            summary=summary,
            facts={
                "recurring_spikes": events,
                "run_spike_pattern": pattern if long_run else events,
                "onset_step": min(free),
                "blip_pattern": blip_pattern,
                **facts,
            },
        )
    ]


def holds_any(f: Finding, steps: list[int]) -> bool:
    return any(f.step_start <= s <= f.step_end for s in steps)


def recurring_blips(findings: list[Finding], run: RunData, params) -> bool:
    """On a run too short for `quiet_blip`: when `blips.short_run_min_blips` or more grad-norm-only spikes of at most
    `blips.max_width` records come and go without the loss moving, they are the run's blips, not separate
    events, unless they come often (`dense`): each becomes a note (fact `blip`) for `recurring` to group,
    and True is returned. Fewer keep their severity: a one-off 50x grad norm on a short run is worth a look."""
    hp, width = params.hard_spike, params.blips.max_width * signals.record_interval(run)
    cands = [
        f
        for f in findings
        if not f.facts.get("early_rise")
        and not f.facts.get("blip")
        and {e.signal for e in f.evidence} & set(SIGNALS) == {"grad_norm"}
        and core_width(f, run) <= width
    ]
    if len(cands) < hp.recurring_count:
        return False
    answer = loss_answer.answer(run, params, sorted({s for f in cands for s in range(f.step_start, f.step_end + 1)}))
    if answer is None:
        return False  # no loss to judge by: the spikes keep their severity
    moved = set(answer.filter(pl.col("moved")).get_column("step").to_list())
    seen = set(answer.get_column("step").to_list())
    quiet = [
        f
        for f in cands
        if not moved & set(range(f.step_start, f.step_end + 1)) and seen & set(range(f.step_start, f.step_end + 1))
    ]
    least = hp.recurring_count if tail_known(run, params) else params.blips.short_run_min_blips
    if len(quiet) < max(hp.recurring_count, least) or dense(run, params, [f.peak_step for f in quiet]):
        return False
    for f in quiet:
        if f.severity != "info":
            f.summary += "; the loss did not move: one of the run's recurring grad-norm blips (note)"
        f.severity = "info"
        f.facts["blip"] = True
    return True


def dense(run: RunData, params, steps: list[int]) -> bool:
    """Do these spikes recur at `blips.lr_pattern_rate` or more per record over their span, without thinning out?
    Spikes whose gaps grow (the median of the later half of the gaps `blips.thinning_ratio` x the earlier half's or
    more, with `blips.thinning_min_gaps` gaps to judge) are an early phase settling (a PPO actor's pre-clip norm in
    its first hundred updates), not the LR pattern's recurring spikes with a shrinking interval."""
    frame, _ = signals.raw(run, "grad_norm")
    t = frame.filter(pl.col("step").is_in(steps)).get_column("t").unique().sort()
    if t.len() < 2:
        return False
    if (len(set(steps)) - 1) / max(1, int(t.max()) - int(t.min())) < params.blips.lr_pattern_rate:
        return False
    gaps = t.diff().drop_nulls()
    if gaps.len() >= params.blips.thinning_min_gaps:
        half = gaps.len() // 2
        early, late = gaps.head(half).median(), gaps.tail(gaps.len() - half).median()
        if early and late >= params.blips.thinning_ratio * early:
            return False
    return True
