"""Clipping analysis: is clipping on, at what threshold, how often, and does it hurt?

- threshold: `clipping.threshold` when set, else a configured value in the log
  (`max_grad_norm`, `clip_grad`, ...), else the post-clip norm on clipped steps
  (`grad_norm_clipped` below the pre-clip norm). Unknown -> no clip analysis.
- clip rate (after the early phase of large initial norms) overall and per `window`
  records against DOMAIN bands: > 50% threshold
  too small (a warning: the norms themselves say most steps exceed it); > 20% LR too
  high or threshold too tight (a warning only when the loss is not falling there);
  8-20% and < 0.1% are notes.
- clip before unscale: nearly every step clipped with norms >= 100x the threshold
  (about loss-scale times normal): a warning. Without a threshold (`_scaled_norms`): norms
  about the printed loss scale times a normal norm, or, with no loss scale in the log,
  astronomically large norms on every step while the loss trains normally.
- runs of consecutive clipped steps: 3 in a row is a note (its steps go to the sample
  trace); `sustained_run` in a row with a non-falling loss is a warning.
- a high clip rate carried by one layer that dominates the squared norm is that layer's
  problem: the finding names it (`facts.cause = "dominant_layer"`).
"""

from __future__ import annotations

import polars as pl

from spikeforensics.detect import robust, signals
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData

CONFIG_NAMES = (
    "max_grad_norm",
    "clip_grad",
    "grad_clip",
    "gradient_clipping",
    "clip_norm",
    "max_norm",
    "clip_grad_norm",
)
MAX_RUN_NOTES = 50  # consecutive-clip notes listed at most (the rest are counted in the summary note)


def threshold(run: RunData, params) -> tuple[float | None, str]:
    cp = params.clipping
    if cp.threshold > 0:
        return float(cp.threshold), "configured in parameters"
    for name in CONFIG_NAMES:
        vals = (
            run.metrics.lazy()
            .filter((pl.col("name") == name) & pl.col("value").is_finite() & (pl.col("value") > 0))
            .select("value")
            .collect()
        )
        if vals.height:
            return float(vals.get_column("value").median()), f"configured in the log ({name})"
    pre, post = run.series("grad_norm"), run.series("grad_norm_clipped")
    if pre.height and post.height:
        both = pre.join(post, on=["attempt", "step", "rank"], how="inner", suffix="_post", nulls_equal=True)
        clipped = both.filter(pl.col("value_post") < pl.col("value") * (1 - cp.tolerance))
        if clipped.height:
            return float(clipped.get_column("value_post").median()), "post-clip norm on clipped steps"
        return None, "clipping never engaged (post-clip norm equals pre-clip norm)"
    return None, "no threshold in the log"


def _loss_not_falling(run: RunData, lo: int, hi: int, params) -> bool | None:
    loss, _ = signals.raw(run, "loss")
    part = loss.filter(pl.col("step").is_between(lo, hi) & pl.col("y").is_not_null())
    if part.height < 10:
        return None
    b = robust.binned(part, "y", params.series.max_bins)
    return robust.theil_sen(b.get_column("value").to_numpy()) >= 0.0


def detect(run: RunData, params) -> list[Finding]:
    cp = params.clipping
    thr, basis = threshold(run, params)
    pre, derived = signals.raw(run, "grad_norm")
    pre = pre.filter(pl.col("finite"))
    if pre.height < cp.min_steps:
        return _excerpt_norms(run, pre, thr, params)
    if thr is None:
        return _scaled_norms(run, pre, basis, params)
    settled = robust.settled_step(pre, cp.settle_smooth, cp.settle_factor)
    data = pre.filter(pl.col("step") >= settled)
    if data.height < cp.min_steps:
        return []
    data = data.with_columns((pl.col("value") > thr * (1 + cp.tolerance)).alias("clipped"))
    data = data.with_columns(
        pl.col("clipped")
        .cast(pl.Float64)
        .rolling_mean(cp.window, min_samples=cp.window // 2, center=True)
        .over("rank")
        .alias("rate"),
        pl.col("clipped").rle_id().over("rank").alias("_run"),
    )
    rate = float(data.get_column("clipped").mean())
    median_norm = float(data.get_column("value").median())
    dominant = _dominant_layer(run, data.filter(pl.col("clipped")), cp)
    facts = {
        "clip_threshold": thr,
        "threshold_basis": basis,
        "clip_rate": rate,
        "median_grad_norm": median_norm,
        "scope": "run",
        "derived": derived,
        "rate_from_step": settled,
    }
    if dominant:
        facts.update(cause="dominant_layer", dominant_layer=dominant[0], dominant_share=dominant[1])
    lo, hi = int(data.get_column("step").min()), int(data.get_column("step").max())
    findings = []
    base_ev = Evidence(
        signal="clip_rate",
        step=None,
        value=rate,
        baseline=cp.healthy_high,
        ratio=rate / cp.healthy_high,
        note=f"threshold {thr:g} ({basis}); median pre-clip norm {median_norm:.3g}",
    )
    layer = dominant[0] if dominant else None
    if rate >= cp.unscale_rate and median_norm >= cp.unscale_factor * thr:
        findings.append(
            Finding(
                kind="clip_rate_anomaly",
                step_start=lo,
                step_end=hi,
                peak_step=lo,
                severity="warning",
                score=rate * 10,
                summary=(
                    f"{rate:.0%} of steps clipped with a median norm {median_norm / thr:.0f}x the threshold: "
                    "clipping sees loss-scaled gradients (clip before unscale)"
                ),
                evidence=[base_ev],
                facts={**facts, "cause": "clip_before_unscale"},
            )
        )
        return findings
    findings.extend(_band_findings(run, data, thr, layer, facts, base_ev, params))
    findings.extend(_run_findings(run, data, params))
    if not any(f.severity != "info" for f in findings):
        band = (
            "healthy"
            if cp.loose_band <= rate <= cp.healthy_high
            else "too loose (threshold rarely reached)"
            if rate < cp.loose_band
            else "above the healthy 1-8% band"
        )
        findings.append(
            Finding(
                kind="clip_rate_anomaly",
                step_start=lo,
                step_end=hi,
                peak_step=lo,
                severity="info",
                score=rate,
                layer=layer,
                evidence=[base_ev],
                facts=facts,
                summary=f"clip rate {rate:.1%} at threshold {thr:g}: {band}",
            )
        )
    return findings


def _scaled_norms(run: RunData, pre: pl.DataFrame, basis: str, params) -> list[Finding]:
    """No threshold known: the clip-before-unscale signature can still show as logged norms about
    loss-scale times normal, on essentially every step, while the loss trains normally (AdamW is
    nearly scale-invariant: clipping scaled gradients slows training, it does not break it).

    - The log prints a loss scale: median norm / median scale between `scaled_ratio_lo` and
      `scaled_ratio_hi` (an unscaled norm of ordinary size) with a scale >= `unscale_factor`.
      A scale of 1 (bf16/fp32 Megatron) proves nothing was scaled. Norms 20x the scale (the
      bigscience 104B logs: 1e5 at scale 4096) are large in their own right, not scaled-normal.
    - No loss scale at all (an HF Trainer log: grad_norm, loss, learning_rate): the norm is
      astronomically large throughout (median >= `unscaled_norm_median`, and >= 1/10 of that on
      `unscale_rate` of the steps), no NaN, and the loss falls. Any sane threshold would clip
      every step. A framework that logs the scaled norm yet clips correctly (old DeepSpeed fp16)
      or a sum-reduced loss looks the same in the log: the finding says what it measured.
    """
    cp = params.clipping
    med_norm = float(pre.get_column("value").median())
    lo, hi = int(pre.get_column("step").min()), int(pre.get_column("step").max())
    if not _trains_normally(run, pre, params):
        return []
    scale = run.series("loss_scale").filter(pl.col("value").is_finite() & (pl.col("value") > 0))
    facts = {"cause": "clip_before_unscale", "threshold_basis": basis, "scope": "run", "median_grad_norm": med_norm}
    if scale.height:
        if scale.height < cp.min_steps:
            return []
        med_scale = float(scale.get_column("value").median())
        ratio = med_norm / med_scale
        if med_scale < cp.unscale_factor or not (cp.scaled_ratio_lo <= ratio <= cp.scaled_ratio_hi):
            return []
        ev = [
            Evidence(
                signal="grad_norm",
                step=None,
                value=med_norm,
                baseline=med_scale,
                ratio=ratio,
                note="median logged grad norm vs median loss scale: the norm was taken on loss-scaled gradients",
            )
        ]
        summary = (
            f"logged grad norms (median {med_norm:.3g}) are about the loss scale ({med_scale:g}) times "
            f"a normal norm: gradients are measured and clipped before unscaling"
        )
    else:
        big = _astronomical(pre, cp)
        if big is None:
            return []
        ev = [_astronomical_evidence(med_norm, big, None, "steps", "the loss falling normally, ", cp)]
        summary = (
            f"logged grad norms are astronomically large on every step (median {med_norm:.3g}) while the loss "
            "trains normally: norms measured on loss-scaled gradients; any sane threshold clips ~100% of steps "
            "(clip before unscale?)"
        )
        facts["clip_rate_any_sane_threshold"] = 1.0
    return [
        Finding(
            kind="clip_rate_anomaly",
            step_start=lo,
            step_end=hi,
            peak_step=lo,
            severity="warning",
            score=10.0,
            summary=summary,
            evidence=ev,
            facts=facts,
        )
    ]


def _astronomical(pre: pl.DataFrame, cp) -> float | None:
    """The share of grad norms >= 1/10 of `unscaled_norm_median` when the norms are astronomically large (median
    >= `unscaled_norm_median`, that share >= `unscale_rate`), else None."""
    values = pre.get_column("value")
    big = float((values >= cp.unscaled_norm_median / 10).mean())
    return big if float(values.median()) >= cp.unscaled_norm_median and big >= cp.unscale_rate else None


def _astronomical_evidence(med_norm: float, big: float, step: int | None, unit: str, also: str, cp) -> Evidence:
    return Evidence(
        signal="grad_norm",
        step=step,
        value=med_norm,
        baseline=cp.unscaled_norm_median,
        ratio=med_norm / cp.unscaled_norm_median,
        note=f"median logged grad norm, {big:.0%} of {unit} >= {cp.unscaled_norm_median / 10:g}, "
        f"{also}no loss scale in the log",
    )


def _excerpt_norms(run: RunData, pre: pl.DataFrame, thr: float | None, params) -> list[Finding]:
    """A log too short for a clip rate (fewer than `min_steps` grad norms, a pasted excerpt) still shows norms
    no clipped run prints: astronomically large (>= `unscaled_norm_median`) in their median, and >= 1/10 of
    that on `unscale_rate` of the records, with no loss scale in the log (a printed scale may be what makes
    them large: `_scaled_norms` judges that on a full run). Clipping was not in effect, or the norms were
    measured on scaled or sum-reduced gradients: a warning that says what it measured."""
    cp = params.clipping
    if pre.height < params.soft_drift.excerpt_climb_records + 1 or run.series("loss_scale").height:
        return []
    big = _astronomical(pre, cp)
    if big is None:
        return []
    med_norm = float(pre.get_column("value").median())
    lo, hi = int(pre.get_column("step").min()), int(pre.get_column("step").max())
    peak = pre.sort("value", descending=True).row(0, named=True)
    configured = f" although the log configures a threshold of {thr:g}" if thr is not None else ""
    return [
        Finding(
            kind="clip_rate_anomaly",
            step_start=lo,
            step_end=hi,
            peak_step=int(peak["step"]),
            severity="warning",
            score=10.0,
            summary=(
                f"grad norms astronomically large on {big:.0%} of the excerpt's {pre.height} records (median "
                f"{med_norm:.3g}, peak {peak['value']:.3g}){configured}: clipping not in effect, or norms measured "
                "on scaled or sum-reduced gradients"
            ),
            evidence=[_astronomical_evidence(med_norm, big, int(peak["step"]), "records", "", cp)],
            facts={
                "cause": "astronomical_norms",
                "scope": "run",
                "median_grad_norm": med_norm,
                "threshold_basis": "configured in the log" if thr is not None else "no threshold in the log",
            },
        )
    ]


def _trains_normally(run: RunData, pre: pl.DataFrame, params) -> bool:
    """No non-finite loss or grad norm, and the loss falls (last quarter's median below the first's)."""
    loss, _ = signals.raw(run, "loss")
    grad_all, _ = signals.raw(run, "grad_norm")
    if (
        loss.height < params.clipping.min_steps
        or not loss.get_column("finite").all()
        or not grad_all.get_column("finite").all()
    ):
        return False
    k = max(1, loss.height // 4)
    first, last = loss.get_column("value").head(k).median(), loss.get_column("value").tail(k).median()
    return bool(last < first * (1 - params.clipping.unscaled_loss_fall))


def _band_findings(run, data, thr, layer, facts, base_ev, params) -> list[Finding]:
    """Stretches of the windowed clip rate above the 20% / 50% bands."""
    cp = params.clipping
    out = []
    for band, label in ((cp.tight_band, "threshold too small"), (cp.lr_band, "LR too high or threshold too tight")):
        hot = data.filter(pl.col("rate") > band)
        if hot.height < cp.min_steps:
            continue
        for _, g in robust.flag_groups(hot, cp.window).group_by("group", maintain_order=True):
            if g.height < cp.min_steps:
                continue
            lo, hi = int(g.get_column("step").min()), int(g.get_column("step").max())
            r = float(g.get_column("rate").mean())
            if band == cp.tight_band:
                severity = "warning"
            else:
                severity = "warning" if _loss_not_falling(run, lo, hi, params) else "info"
            peak = g.sort("rate", descending=True).row(0, named=True)
            ev = [
                Evidence(
                    signal="clip_rate",
                    step=peak["step"],
                    value=r,
                    baseline=cp.healthy_high,
                    ratio=r / cp.healthy_high,
                    note=f"mean {cp.window}-step clip rate over steps {lo}-{hi}, threshold {thr:g}",
                )
            ]
            owner = f"; layer {layer} dominates the norm on clipped steps" if layer else ""
            out.append(
                Finding(
                    kind="clip_rate_anomaly",
                    step_start=lo,
                    step_end=hi,
                    peak_step=int(peak["step"]),
                    severity=severity,
                    score=r * 10,
                    layer=layer,
                    evidence=[*ev, base_ev],
                    summary=f"{r:.0%} of steps clipped over steps {lo}-{hi} ({label}){owner}",
                    facts={**facts, "band": label},
                )
            )
        if out:
            break  # the stricter band already covers these steps
    return out


def _run_findings(run, data, params) -> list[Finding]:
    """Runs of consecutive clipped steps: notes at `consecutive`, warnings when long and the loss rises."""
    cp = params.clipping
    runs = (
        data.filter(pl.col("clipped"))
        .group_by("rank", "_run", maintain_order=True)
        .agg(
            pl.col("step").min().alias("lo"),
            pl.col("step").max().alias("hi"),
            pl.len().alias("n"),
            pl.col("value").max().alias("peak_norm"),
            pl.col("step").sort_by("value").last().alias("peak"),
            pl.col("attempt").first(),
        )
    )
    runs = runs.filter(pl.col("n") >= cp.consecutive).sort("n", descending=True)
    out = []
    for r in runs.head(MAX_RUN_NOTES).iter_rows(named=True):
        long = r["n"] >= cp.sustained_run and _loss_not_falling(run, r["lo"], r["hi"], params)
        out.append(
            Finding(
                kind="clip_rate_anomaly",
                step_start=r["lo"],
                step_end=r["hi"],
                peak_step=r["peak"],
                severity="warning" if long else "info",
                score=float(r["n"]),
                rank=r["rank"],
                attempt=int(r["attempt"] or 0),
                summary=f"{r['n']} consecutive clipped steps {r['lo']}-{r['hi']}",
                evidence=[
                    Evidence(
                        signal="grad_norm",
                        step=r["peak"],
                        value=r["peak_norm"],
                        rank=r["rank"],
                        note=f"{r['n']} clipped steps in a row",
                    )
                ],
                facts={"consecutive_clipped": r["n"], "onset_step": r["lo"]},
            )
        )
    return out


def _dominant_layer(run: RunData, clipped: pl.DataFrame, cp) -> tuple[str, float] | None:
    """The layer carrying > `dominant_share` of the squared norm on most clipped steps, if any."""
    layers = signals.layer_frame(run)
    if layers.height == 0 or clipped.height == 0:
        return None
    on = layers.filter(pl.col("step").is_in(clipped.get_column("step").implode()) & pl.col("grad_norm").is_finite())
    if on.height == 0:
        return None
    share = on.with_columns(
        (pl.col("grad_norm") ** 2 / (pl.col("grad_norm") ** 2).sum().over("step", "rank")).alias("share")
    )
    top = share.sort("share", descending=True).unique(subset=["step", "rank"], keep="first")
    top = top.filter(pl.col("share") >= cp.dominant_share)
    if top.height < 0.5 * on.select(pl.struct("step", "rank").n_unique()).item():
        return None
    counts = top.group_by("layer").agg(pl.len().alias("n"), pl.col("share").median()).sort("n", descending=True)
    best = counts.row(0, named=True)
    return best["layer"], float(best["share"])
