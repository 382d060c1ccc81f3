"""Sign ratio: the share of positive gradient elements of a layer, normally 40-60%.

Measured among non-zero elements (`pos_frac / (1 - zero_frac)`), so a sparse layer is
not mistaken for a biased one. A layer that sits below 10% or above 90% positive for
most of a window is pushed one way by the graph (a structural bias, model_bug): a
warning. Outside 30-70% only is a note. Tiny tensors are skipped (a 4-element bias can
be one-signed legitimately).
"""

from __future__ import annotations

import polars as pl

from spikeforensics.detect import robust, signals
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData


def detect(run: RunData, params) -> list[Finding]:
    sp = params.sign_ratio
    layers = signals.layer_frame(run)
    if layers.height == 0 or layers.get_column("pos_frac").drop_nulls().len() == 0:
        return []
    zero = pl.col("zero_frac").fill_null(0.0).clip(0.0, 1.0)
    data = layers.filter(
        pl.col("pos_frac").is_finite() & (pl.col("numel").is_null() | (pl.col("numel") >= sp.min_numel))
    )
    # with most elements exactly zero (underflow, a mask) the sign share of the few others says nothing
    data = data.with_columns(
        pl.when(zero <= sp.max_zero_frac).then(pl.col("pos_frac") / (1.0 - zero)).clip(0.0, 1.0).alias("p")
    ).filter(pl.col("p").is_not_null())
    if data.height == 0:
        return []
    by = ["layer", "rank"]
    dev = (pl.col("p") - 0.5).abs()
    data = data.sort(*by, "step", nulls_last=True).with_columns(
        (dev >= 0.5 - sp.extreme)
        .cast(pl.Float64)
        .rolling_mean(sp.window, min_samples=1, center=True)
        .over(by)
        .alias("ext"),
        (dev >= 0.5 - sp.mild)
        .cast(pl.Float64)
        .rolling_mean(sp.window, min_samples=1, center=True)
        .over(by)
        .alias("mild"),
    )
    findings = []
    for level, col, severity in (("extreme", "ext", "warning"), ("mild", "mild", "info")):
        flagged = data.filter(pl.col(col) >= sp.sustain_frac)
        if level == "mild":
            flagged = flagged.filter(pl.col("ext") < sp.sustain_frac)
        if flagged.height == 0:
            continue
        groups = robust.flag_groups(flagged, sp.window, by=by)
        for _, g in groups.group_by("group", maintain_order=True):
            if g.height < min(sp.window, 5):
                continue
            findings.append(_finding(g, severity, sp))
    return findings


def _finding(g: pl.DataFrame, severity: str, sp) -> Finding:
    r = g.row(0, named=True)
    med = float(g.get_column("p").median())
    lo, hi = int(g.get_column("step").min()), int(g.get_column("step").max())
    side = "positive" if med > 0.5 else "negative"
    share = med if med > 0.5 else 1 - med
    ev = [
        Evidence(
            signal="pos_frac",
            step=lo,
            value=med,
            baseline=0.5,
            ratio=med / 0.5,
            rank=r["rank"],
            layer=r["layer"],
            note=f"median share of positive elements (among non-zeros) over steps {lo}-{hi}",
        )
    ]
    return Finding(
        kind="sign_ratio_anomaly",
        step_start=lo,
        step_end=hi,
        peak_step=lo,
        severity=severity,
        score=abs(med - 0.5) * 2,
        rank=r["rank"],
        layer=r["layer"],
        evidence=ev,
        summary=f"layer {r['layer']} gradients {share:.0%} {side} over steps {lo}-{hi} (healthy 40-60%)",
        facts={"onset_step": lo, "pos_frac_median": med, "layers": [r["layer"]], "scope": "run"},
    )
