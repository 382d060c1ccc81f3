"""Layer-local explosions that a normal global norm hides (DETECTION-ANCHORS §2.9).

Each layer's log grad norm gets the same two-sided excluded-centre baseline as the
global series; a layer fires where it is >= 10x its own baseline (robust z >= 6) while the
global grad norm at that step is < 2x its baseline. When the global norm spikes too,
the hard-spike detector owns the event and names the layer.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.detect import robust, signals
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData


def detect(run: RunData, params) -> list[Finding]:
    lp = params.layer_outlier
    base = signals.layer_baseline(run, params)
    if base.height == 0:
        return []
    flagged = base.filter(
        pl.col("left").is_not_null() & (pl.col("z") >= lp.z_threshold) & ((pl.col("y") - pl.col("base")) >= math.log(lp.ratio))
    )
    if flagged.height == 0:
        return []
    glob, derived = signals.with_baseline(run, "grad_norm", params)
    if glob.height:
        g = glob.filter(pl.col("rank").is_null()) if glob.get_column("rank").null_count() else glob
        g = g.group_by("step").agg((pl.col("y") - pl.col("base")).max().exp().alias("global_ratio"))
        flagged = flagged.join(g, on="step", how="left")
    else:
        flagged = flagged.with_columns(pl.lit(None, pl.Float64).alias("global_ratio"))
    hidden = flagged.filter(pl.col("global_ratio").is_null() | (pl.col("global_ratio") < lp.global_ratio_max))
    if hidden.height == 0:
        return []
    groups = robust.flag_groups(hidden, lp.group_gap)
    findings = []
    for _, grp in groups.group_by("group", maintain_order=True):
        findings.append(_finding(grp, derived))
    return findings


def _finding(g: pl.DataFrame, derived: bool) -> Finding:
    g = g.with_columns((pl.col("y") - pl.col("base")).exp().alias("ratio"))
    top = g.sort("ratio", descending=True).row(0, named=True)
    per_layer = g.sort("ratio", descending=True).unique(subset=["layer", "rank"], keep="first", maintain_order=True)
    lo, hi = int(g.get_column("step").min()), int(g.get_column("step").max())
    ev = [Evidence(signal="layer_grad_norm", step=r["step"], value=r["grad_norm"], baseline=math.exp(r["base"]),
                   ratio=round(r["ratio"], 4), rank=r["rank"], layer=r["layer"],
                   note=f"global grad norm at {r['global_ratio']:.2f}x its baseline" if r["global_ratio"] is not None else "")
          for r in per_layer.head(5).iter_rows(named=True)]
    ranks = sorted(g.get_column("rank").drop_nulls().unique().to_list())
    layers = per_layer.get_column("layer").unique(maintain_order=True).to_list()
    sev = "warning"
    return Finding(kind="layer_outlier", step_start=lo, step_end=hi, peak_step=int(top["step"]), severity=sev,
                   score=round(float(g.get_column("z").max()), 3), rank=top["rank"], layer=top["layer"], evidence=ev,
                   summary=(f"layer {top['layer']} grad norm {top['ratio']:.0f}x its baseline at step {top['step']} "
                            f"while the global norm stayed normal"),
                   facts={"onset_step": lo, "layers": layers[:10], "ranks_flagged": ranks,
                          "global_derived": derived})
