"""Vanishing gradients: a grad norm that falls >= 10x below its own earlier level and stays there.

The smoothed log norm (rolling median) is compared with a reference: the highest typical
level (rolling median over `reference_window` records) seen since the early phase, up to
`min_records` before the point. Only a run of >= `min_records` consecutive low records
fires, so a short dip does not; a sudden or a slow fall by >= 10x does.
The early phase (large initial norms falling during warmup: the first `early_frac` of the records, at least
`early_min`, and of the steps) is never a reference. Run on
the global norm and on every layer; a layer fires alone when the global norm does not
(shallow layers dying while the rest learn).
DOMAIN's vanishing is a fall "by orders of magnitude" and learning stalls: a fall of one
order (10-100x) while the loss keeps falling over the low stretch is the norm calming after an
early instability or following the LR decay, not vanishing; it fires only when the loss
stalls or rises there. A fall of >= 100x (`severe_ratio`) fires regardless.
A collapse of >= 1000x (`collapse_ratio`) below the run's first records also counts when it comes
inside the early phase (then judged by the loss like a one-order fall).
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.detect import robust, signals
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData


def _windows(frame: pl.DataFrame, by: str, vp) -> tuple[int, int, int]:
    """(min_records, reference_window, early_min), shrunk to `max_run_frac` of a short series."""
    n = int(frame.group_by(by).len().get_column("len").max()) if frame.height else 0
    cap = max(5, int(n * vp.max_run_frac))
    return min(vp.min_records, cap), min(vp.reference_window, cap), min(vp.early_min, cap)


def _drops(frame: pl.DataFrame, by: str, vp) -> pl.DataFrame:
    """Rows in sustained drops, with `ref` (log) and `smooth` (log); `frame` has y, t-ordered per `by`."""
    min_records, ref_window, early_min = _windows(frame, by, vp)
    n = pl.len().over(by)
    early = pl.max_horizontal(pl.lit(early_min), (n * vp.early_frac).cast(pl.Int64))
    idx = pl.int_range(pl.len(), dtype=pl.Int64).over(by)
    # only the columns read from here on (a filter copies every column it keeps)
    keep = [c for c in (by, "rank", "layer", "step", "y") if c in frame.columns]
    data = signals.rows_where(frame.select(keep), pl.col("y").is_not_null())
    data = data.with_columns(idx.alias("_i"), early.alias("_early"))
    # the early phase is also the first `early_frac` of the steps: a log that prints every step at the start and
    # every 500th later (AlgoPerf's runner: steps 0-100, then 500, 1000, ...) has most of its records in the
    # first 1% of training, where a norm still falls from its initial level
    first, last = pl.col("step").min().over(by), pl.col("step").max().over(by)
    past_early_steps = (pl.col("step") - first >= (last - first) * vp.early_frac).fill_null(True)
    data = data.with_columns(
        pl.col("y").rolling_median(vp.smooth, min_samples=1, center=True).over(by).alias("smooth"),
        pl.when((pl.col("_i") >= pl.col("_early")) & past_early_steps).then(pl.col("y")).alias("_ry"),
    ).with_columns(
        pl.col("_ry")
        .rolling_median(ref_window, min_samples=max(ref_window // 4, 1))
        .shift(min_records)
        .cum_max()
        .over(by)
        .alias("ref"),
    )
    # a collapse by orders of magnitude (`collapse_ratio`) counts from the run's first records too: an RL
    # policy whose norm goes from 0.4 to 1e-4 at its 12th step never had a level after the early phase
    collapse_ref = (
        pl.col("y").rolling_median(vp.smooth, min_samples=max(vp.smooth // 5, 1)).shift(min_records).cum_max().over(by)
    )
    # (backward-filled: the records before the first reference are judged against it, so a collapse at the
    # 12th record starts there, not `min_records` later)
    data = data.with_columns(collapse_ref.backward_fill().over(by).alias("_cref"))
    collapsed = (pl.col("smooth") - pl.col("_cref") <= math.log(vp.collapse_ratio)).fill_null(False)
    data = data.with_columns(
        pl.when(collapsed).then(pl.max_horizontal("ref", "_cref")).otherwise(pl.col("ref")).alias("ref"),
        collapsed.alias("_collapse"),
    )
    low = data.with_columns(
        ((pl.col("smooth") - pl.col("ref") <= math.log(vp.ratio)).fill_null(False) | pl.col("_collapse")).alias("_low")
    )
    low = low.with_columns(pl.col("_low").rle_id().over(by).alias("_run"))
    low = low.filter(pl.col("_low")).with_columns(pl.len().over(by, "_run").alias("_len"))
    return low.filter(pl.col("_len") >= min_records)


def detect(run: RunData, params) -> list[Finding]:
    vp = params.vanishing
    findings = []
    glob, derived = signals.raw(run, "grad_norm")
    spans = []  # step ranges where the global norm already fired
    if glob.height:
        drops = _drops(glob.with_columns(pl.col("rank").cast(pl.String).fill_null("-").alias("_k")), "_k", vp)
        for _, g in drops.group_by("_k", "_run", maintain_order=True):
            if not _learning(g, run, params):
                findings.append(_finding(g, None, derived, run, vp))
            spans.append((int(g.get_column("step").min()), int(g.get_column("step").max())))
    layers = signals.layer_frame(run)
    if layers.height:
        lay = layers.with_columns(
            pl.when(pl.col("grad_norm").is_finite() & (pl.col("grad_norm") > 0))
            .then(pl.col("grad_norm").log())
            .alias("y"),
            pl.concat_str(pl.col("layer"), pl.col("rank").cast(pl.String).fill_null("-"), separator="@").alias("_k"),
        )
        drops = _drops(lay, "_k", vp)
        if drops.height and spans:
            drops = drops.filter(~pl.any_horizontal([pl.col("step").is_between(a, b) for a, b in spans]))
        if drops.height:
            groups = robust.flag_groups(drops.with_columns(pl.col("step").alias("pos")), vp.min_records)
            for _, g in groups.group_by("group", maintain_order=True):
                if not _learning(g, run, params):
                    findings.append(_finding(g, g.get_column("layer")[0], False, run, vp))
    return findings


def _learning(g: pl.DataFrame, run: RunData, params) -> bool:
    """A fall short of `severe_ratio` while the loss keeps falling over the low stretch: not vanishing."""
    vp = params.vanishing
    # (a collapse seen only against the early records is judged by the loss like a one-order fall: a run from
    # scratch whose first norms are in the hundreds falls 1000x while it learns)
    if float((g.get_column("smooth") - g.get_column("ref")).min()) <= math.log(vp.severe_ratio) and not bool(
        g.get_column("_collapse").all()
    ):
        return False
    loss, _ = signals.raw(run, "loss")
    lo, hi = int(g.get_column("step").min()), int(g.get_column("step").max())
    part = loss.filter(pl.col("step").is_between(lo, hi) & pl.col("y").is_not_null())
    if part.height < 10:
        return False  # no loss to judge by: the fall alone decides
    b = robust.binned(part, "y", params.series.max_bins)
    return robust.theil_sen(b.get_column("value").to_numpy()) < 0.0


def _finding(g: pl.DataFrame, layer: str | None, derived: bool, run: RunData, vp) -> Finding:
    lo, hi = int(g.get_column("step").min()), int(g.get_column("step").max())
    worst = g.sort(pl.col("smooth") - pl.col("ref")).row(0, named=True)
    ratio = math.exp(worst["smooth"] - worst["ref"])
    layers = g.get_column("layer").unique(maintain_order=True).to_list() if "layer" in g.columns else []
    note = signals.DERIVED_NOTE if derived else ""
    ev = [
        Evidence(
            signal="layer_grad_norm" if layer else "grad_norm",
            step=worst["step"],
            value=math.exp(worst["smooth"]),
            baseline=math.exp(worst["ref"]),
            ratio=ratio,
            rank=worst.get("rank"),
            layer=layer,
            note=(note + "; " if note else "") + "rolling median vs the median of earlier records",
        )
    ]
    what = f"layer {layer}" if layer else "global grad norm"
    return Finding(
        kind="vanishing_gradients",
        step_start=lo,
        step_end=hi,
        peak_step=int(worst["step"]),
        severity="warning",
        score=round(-math.log10(max(ratio, 1e-300)), 3),
        layer=layer,
        rank=worst.get("rank"),
        evidence=ev,
        summary=f"{what} fell to {ratio:.2g}x its earlier level from step {lo} to {hi}",
        facts={"onset_step": lo, "layers": [x for x in layers if x][:10]},
    )


def absorb_spikes(findings: list[Finding], params) -> list[Finding]:
    """Grad-norm "spikes" inside a vanished stretch of the global norm that stay under `ratio` x the level it
    fell from are the vanished norm's own noise (on a log scale a norm of 1e-4 swings 10x), not spikes: their
    events leave grad-norm-only hard-spike findings, and a finding left with none, or a recurring pattern left
    with fewer than `recurring_count` events, is dropped."""
    vp, hp = params.vanishing, params.hard_spike
    vanished = [
        (f.step_start, f.step_end, f.evidence[0].baseline * vp.ratio)
        for f in findings
        if f.kind == "vanishing_gradients" and f.layer is None and f.evidence and f.evidence[0].baseline
    ]
    if not vanished:
        return findings

    def quiet(e: Evidence) -> bool:
        return e.signal == "grad_norm" and any(
            e.step is not None and lo <= e.step <= hi and (e.value or 0.0) <= cap for lo, hi, cap in vanished
        )

    out = []
    for f in findings:
        signals_seen = {e.signal for e in f.evidence}
        if f.kind != "hard_spike" or "loss" in signals_seen or not any(quiet(e) for e in f.evidence):
            out.append(f)
            continue
        kept = [e for e in f.evidence if not quiet(e)]
        recurring = f.facts.get("recurring_spikes")
        if not kept or (recurring is not None and len(kept) < hp.recurring_count):
            continue
        f.evidence = kept
        if recurring is not None:
            steps = sorted(e.step for e in kept if e.step is not None)
            f.facts["recurring_spikes"] = steps
            f.step_start, f.step_end = steps[0], steps[-1]
        out.append(f)
    return out
