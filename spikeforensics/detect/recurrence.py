"""Corroboration: small spikes that one recurring sample explains are promoted to warnings.

A bump of 2-3x grad norm or 1.1-1.25x loss is below the hard-spike bar, correctly: clean runs
have such bumps. But DOMAIN: "a sample that *recurs* ... and spikes again is the signature of
data". So every record that stands out a little (`bump_z` on the two-sided robust z with a
`bump_loss_ratio` / `bump_grad_ratio` floor) is a candidate, the batch manifest says which
samples each candidate step trained on, and a sample is a *corroborated* culprit when

- it sits in >= `corroborate_min_events` separate candidate events (further apart than
  `group_gap`), and in those events its own loss, when the manifest has per-sample losses,
  is >= `corroborate_sample_ratio` x the median of its step (it is why the step bumped);
- at least `corroborate_min_share` of the steps it appears in are candidate steps (a sample
  seen in many calm steps is exonerated, as OLMo 2 warns: presence in a spike batch is weak);
- chance cannot explain it: with q = share of manifest steps standing out at least as much
  (robust z) as the sample's weakest hit, the expected number of samples with that many of
  their appearances on such steps, binomial tail x the number of samples tested (all
  samples; with per-sample losses only those elevated somewhere), is <= `corroborate_chance`.
  Small batches over a small dataset repeat samples every epoch, so two coincidences among
  many 2-sigma bumps are common; three, or two clear ones, are not.

The candidate events holding a corroborated sample become `warning` hard spikes (an `info`
note at the same steps is upgraded); events already at warning or above are left alone.
Without a manifest nothing changes. Polars over the manifest; the loop is over promoted events.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from spikeforensics.detect import robust, signals
from spikeforensics.detect.base import Evidence, Finding, severity_rank
from spikeforensics.rundata import RunData

SIGNALS = (("loss", "bump_loss_ratio"), ("grad_norm", "bump_grad_ratio"))


def candidates(run: RunData, params) -> pl.DataFrame:
    """Records that stand out a little (global series): step, signal, value, base (exp), ratio, z."""
    hp = params.hard_spike
    out = []
    for name, ratio_field in SIGNALS:
        frame, _ = signals.with_baseline(run, name, params)
        if frame.height == 0:
            continue
        rise = pl.col("y") - pl.col("base")
        rows = frame.filter(
            pl.col("left").is_not_null() & (pl.col("z") >= hp.bump_z) & (rise >= math.log(getattr(hp, ratio_field)))
        )
        out.append(
            rows.select(
                "step",
                "attempt",
                "value",
                pl.lit(name).alias("signal"),
                pl.col("base").exp().alias("base"),
                rise.exp().alias("ratio"),
                "z",
            )
        )
    if not out:
        return pl.DataFrame(
            schema={
                "step": pl.Int64,
                "attempt": pl.Int32,
                "value": pl.Float64,
                "signal": pl.String,
                "base": pl.Float64,
                "ratio": pl.Float64,
                "z": pl.Float64,
            }
        )
    return pl.concat(out, how="vertical_relaxed").sort("step")


def _manifest(run: RunData, params) -> pl.DataFrame:
    """First-pass manifest rows (a replayed step is not a new appearance), one per (step, sample)."""
    rows, replayed = run.manifest(params.tracing)
    if replayed:
        rows = rows.unique(subset=["step", "sample_id"], keep="first", maintain_order=True)
    rows = rows.select("step", "sample_id", "sample_loss")
    if rows.get_column("sample_loss").is_not_null().any():
        rows = rows.with_columns((pl.col("sample_loss") / pl.col("sample_loss").median().over("step")).alias("rel"))
    else:
        rows = rows.with_columns(pl.lit(None, pl.Float64).alias("rel"))
    return rows


def corroborated(run: RunData, cands: pl.DataFrame, params) -> pl.DataFrame:
    """Samples that explain several candidate events: sample_id, events (list of event ids), expected (chance)."""
    hp = params.hard_spike
    empty = pl.DataFrame(
        schema={
            "sample_id": pl.String,
            "events": pl.List(pl.Int64),
            "hit_steps": pl.List(pl.Int64),
            "expected": pl.Float64,
        }
    )
    man = _manifest(run, params)
    if man.height == 0 or cands.height == 0:
        return empty
    # one score per candidate step (the stronger signal); a record printed every k steps stands for
    # the k steps since the previous one
    interval = signals.record_interval(run)
    steps = step_scores(run, params).join(cands.select("step").unique(), on="step", how="semi")
    steps = robust.flag_groups(steps.with_columns(pl.col("step").alias("pos")), hp.group_gap)
    covered = (
        pl.concat(
            [
                steps.select((pl.col("step") - d).alias("step"), pl.col("group").alias("event"), "score")
                for d in range(interval)
            ]
        )
        .sort("score", descending=True)
        .unique(subset=["step"], keep="first")
    )
    has_losses = man.get_column("rel").is_not_null().any()
    # only the manifest rows of candidate steps can be hits: a small frame, whatever the run's length
    hits = man.join(covered, on="step", how="inner")
    if has_losses:  # in a candidate step the sample must be why the step stood out
        hits = hits.filter(pl.col("rel") >= hp.corroborate_sample_ratio)
    per = (
        hits.group_by("sample_id")
        .agg(
            pl.col("event").unique().alias("events"),
            pl.col("step").unique().sort().alias("hit_steps"),
            pl.col("step").n_unique().alias("k"),
            pl.col("score").min().alias("weakest"),
        )
        .filter(pl.col("events").list.len() >= hp.corroborate_min_events)
    )
    if per.height == 0:
        return empty
    appearances = (
        man.join(per.select("sample_id"), on="sample_id", how="semi")
        .group_by("sample_id")
        .agg(pl.col("step").n_unique().alias("n"))
    )
    per = per.join(appearances, on="sample_id").filter(pl.col("k") >= hp.corroborate_min_share * pl.col("n"))
    if per.height == 0:
        return empty
    # samples tested: all of them; with per-sample losses only those elevated somewhere
    tested = (
        (man.filter(pl.col("rel") >= hp.corroborate_sample_ratio) if has_losses else man)
        .get_column("sample_id")
        .n_unique()
    )
    # chance that a sample's appearances land on steps standing out at least as much as its weakest
    # hit: q = share of manifest steps scoring that high; binomial tail over its n appearances
    n_steps = man.get_column("step").n_unique()
    scores = covered.join(man.select("step").unique(), on="step", how="semi").get_column("score").sort().to_numpy()
    weakest = per.get_column("weakest").to_numpy()
    q = (scores.size - np.searchsorted(scores, weakest, side="left")) / max(n_steps, 1)
    from scipy import stats  # here, not at import: ~1.5 s that most diagnoses never need

    tail = stats.binom.sf(per.get_column("k").to_numpy() - 1, per.get_column("n").to_numpy(), q)
    per = per.with_columns(pl.Series("expected", tail * max(tested, 1)))
    per = per.filter(pl.col("expected") <= hp.corroborate_chance)
    return per.select("sample_id", "events", "hit_steps", "expected").sort("expected")


def step_scores(run: RunData, params) -> pl.DataFrame:
    """One score per step (first pass): the stronger of the loss and grad-norm robust z, or their
    Stouffer sum (z_loss + z_grad) / sqrt(2) when both are up. A bad sample lifts both its step's loss
    and its gradient; noise mostly lifts one, so steps where the two agree are rarer, and the chance
    test below sees that. Only positive z count toward the sum."""
    parts = []
    for name, _ in SIGNALS:
        frame, _ = signals.with_baseline(run, name, params)
        if frame.height:
            parts.append(
                frame.filter((pl.col("attempt") == 0) & pl.col("z").is_not_null())
                .group_by("step")
                .agg(pl.col("z").max().alias(f"z_{name}"))
            )
    if not parts:
        return pl.DataFrame(schema={"step": pl.Int64, "score": pl.Float64})
    joined = parts[0] if len(parts) == 1 else parts[0].join(parts[1], on="step", how="full", coalesce=True)
    zs = [pl.col(c) for c in joined.columns if c.startswith("z_")]
    both = sum(z.clip(lower_bound=0).fill_null(0) for z in zs) / math.sqrt(len(zs))
    return joined.select("step", pl.max_horizontal(*zs, both).alias("score"))


def promote(run: RunData, findings: list[Finding], params) -> list[Finding]:
    """`findings` (of the hard-spike detector) with corroborated candidate events promoted to warnings."""
    hp = params.hard_spike
    if run.batches.height == 0:
        return findings
    cands = candidates(run, params)
    culprits = corroborated(run, cands, params)
    if culprits.height == 0:
        return findings
    events = robust.flag_groups(cands.with_columns(pl.col("step").alias("pos")), hp.group_gap)
    by_event = culprits.explode("events").group_by("events").agg(pl.col("sample_id").sort())
    out = list(findings)
    hit_steps = set(culprits.get_column("hit_steps").explode().drop_nulls().to_list())
    interval = signals.record_interval(run)  # a record every k steps stands for the k manifest steps up to it
    for event, samples in by_event.sort("events").iter_rows():
        rows = events.filter(pl.col("group") == event)
        # a chain of small bumps can be long: keep the records within `group_gap` of the culprit's own step
        own = [s for s in rows.get_column("step").to_list() if any(s - interval < h <= s for h in hit_steps)]
        if own:
            rows = rows.filter(pl.col("step").is_between(min(own) - hp.group_gap, max(own) + hp.group_gap))
        lo, hi = int(rows.get_column("step").min()), int(rows.get_column("step").max())
        near = [
            f
            for f in out
            if f.step_start <= hi + hp.group_gap
            and f.step_end >= lo - hp.group_gap
            and not f.facts.get("early_rise")
            and not f.facts.get("recurring_spikes")
        ]
        if any(severity_rank(f.severity) >= severity_rank("warning") for f in near):
            continue
        out = [f for f in out if f not in near]  # an info note at these steps becomes the warning
        out.append(_finding(rows, samples, culprits, lo, hi, own))
    return sorted(out, key=lambda f: (f.attempt, f.step_start))


def _finding(
    rows: pl.DataFrame, samples: list[str], culprits: pl.DataFrame, lo: int, hi: int, own: list[int]
) -> Finding:
    # the peak is the bump the culprit explains (its own step), not a louder neighbour in the chain
    at_own = rows.filter(pl.col("step").is_in(own)) if own else rows
    peak = (at_own if at_own.height else rows).sort("z", descending=True).row(0, named=True)
    evidence = [
        Evidence(
            signal=r["signal"],
            step=r["step"],
            value=r["value"],
            baseline=r["base"],
            ratio=round(r["ratio"], 4),
            note=f"robust z {r['z']:.1f}: below the hard-spike bar on its own",
        )
        for r in rows.sort("ratio", descending=True)
        .unique(subset=["signal"], keep="first", maintain_order=True)
        .iter_rows(named=True)
    ]
    info = culprits.filter(pl.col("sample_id").is_in(samples))
    n_events = int(info.get_column("events").list.len().max())
    evidence.append(
        Evidence(
            signal="sample",
            step=peak["step"],
            value=float(n_events),
            note=f"sample {', '.join(samples[:3])} is in {n_events} such bumps "
            f"(chance expectation {float(info.get_column('expected').min()):.2g})",
        )
    )
    ratio = max(e.ratio or 0 for e in evidence if e.signal != "sample")
    return Finding(
        kind="hard_spike",
        step_start=lo,
        step_end=hi,
        peak_step=int(peak["step"]),
        severity="warning",
        score=round(float(peak["z"]), 3),
        evidence=evidence,
        attempt=int(peak["attempt"] or 0),
        summary=(
            f"{' and '.join(sorted(set(rows.get_column('signal'))))} rose {ratio:.2f}x at step {peak['step']}, "
            f"a small bump corroborated by sample {samples[0]} recurring in {n_events} such bumps"
        ),
        facts={"onset_step": lo, "corroborated_by": samples[:5]},
    )
