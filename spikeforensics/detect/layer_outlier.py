"""Layer-local explosions that a normal global norm hides (DETECTION-ANCHORS §2.9).

Spikes: each layer's log grad norm gets the same two-sided excluded-centre baseline as
the global series; a layer fires where it is >= 10x its own baseline (robust z >= 6) while
the global grad norm at that step is < 2x its baseline. When the global norm spikes too,
the hard-spike detector owns the event and names the layer.

Sustained: a layer whose level (median of the next `shift_window` records vs the previous
ones) rises >= 10x while the global norm rises at least `shift_excess` times less: the
layer carries the change. A warning when the layer comes to dominate the squared global
norm (and with it the clipping) or rose >= 100x; a note otherwise.

Updates (per-layer `update_norm`, as `spikeforensics.capture` records it): a layer whose optimizer
update per element (update norm / sqrt(numel); update / parameter norm without `numel`) is >=
`update_ratio` x the median of all layers at the same step, for `update_min_records` records in
a row. Under Adam every layer's update per element is about the learning rate, so a layer far
above its peers has a learning rate of its own that is too high (a param group, a multiplier);
its gradient norm often shows nothing (its weights grow, its gradient shrinks).
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.detect import robust, signals
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData


def detect(run: RunData, params) -> list[Finding]:
    return _spikes(run, params) + _sustained(run, params) + _updates(run, params)


def _updates(run: RunData, params) -> list[Finding]:
    lp = params.layer_outlier
    layers = signals.layer_frame(run)
    if layers.height == 0 or "update_norm" not in layers.columns:
        return []
    u = layers.filter(pl.col("update_norm").is_finite() & (pl.col("update_norm") > 0))
    if u.height == 0:
        return []
    per_element = (
        "numel" in u.columns and u.get_column("numel").null_count() == 0 and bool((u.get_column("numel") > 0).all())
    )
    if per_element:
        size, what = pl.col("update_norm") / pl.col("numel").cast(pl.Float64).sqrt(), "update per element"
    elif "param_norm" in u.columns:
        u = u.filter(pl.col("param_norm").is_finite() & (pl.col("param_norm") > 0))
        size, what = pl.col("update_norm") / pl.col("param_norm"), "update / weight norm"
    else:
        return []
    at = ["step", "rank"]
    u = u.with_columns(size.log().alias("y")).with_columns(
        pl.col("y").median().over(at, nulls_last=True).alias("peer"), pl.len().over(at).alias("n_layers")
    )
    u = u.filter(pl.col("n_layers") >= lp.update_min_layers).with_columns((pl.col("y") - pl.col("peer")).alias("r"))
    if u.height == 0:
        return []
    hot = pl.col("r") >= math.log(lp.update_ratio)
    u = u.sort("layer", "rank", "step", nulls_last=True).with_columns(hot.alias("hot"))
    u = u.with_columns(
        (pl.col("hot") != pl.col("hot").shift(1)).fill_null(True).cum_sum().over("layer", "rank").alias("_run")
    )
    runs = (
        u.filter(pl.col("hot"))
        .group_by("layer", "rank", "_run")
        .agg(
            pl.len().alias("n"),
            pl.col("step").min().alias("lo"),
            pl.col("step").max().alias("hi"),
            pl.col("r").median().alias("r_med"),
            pl.col("step").sort_by("r").last().alias("peak"),
            pl.col("r").max().alias("r_max"),
            pl.col("update_norm").sort_by("r").last().alias("value"),
            (size.log() - pl.col("r")).sort_by("r").last().exp().alias("peer_size"),
            size.sort_by("r").last().alias("size"),
        )
        .filter(pl.col("n") >= lp.update_min_records)
    )
    if runs.height == 0:
        return []
    # runs that overlap in steps (the same layer on every rank, layers hit together) are one finding
    runs = runs.sort("lo", "r_med", descending=[False, True])
    findings, group, end = [], [], None
    for r in runs.iter_rows(named=True):
        if group and r["lo"] > end:
            findings.append(_update_finding(group, what))
            group = []
        group.append(r)
        end = r["hi"] if end is None or not group[:-1] else max(end, r["hi"])
    findings.append(_update_finding(group, what))
    return findings


def _update_finding(group: list[dict], what: str) -> Finding:
    group = sorted(group, key=lambda r: -r["r_med"])
    top = group[0]
    layers_hit = list(dict.fromkeys(r["layer"] for r in group))
    ranks = sorted({r["rank"] for r in group if r["rank"] is not None})
    ratio = math.exp(top["r_med"])
    ev = [
        Evidence(
            signal="layer_update_norm",
            step=r["peak"],
            value=r["size"],
            baseline=r["peer_size"],
            ratio=round(math.exp(r["r_max"]), 4),
            rank=r["rank"],
            layer=r["layer"],
            note=f"{what} vs the median of all layers at that step; {r['n']} records in a row "
            f"(median {math.exp(r['r_med']):.1f}x), update norm {r['value']:.4g}",
        )
        for r in group[:5]
    ]
    return Finding(
        kind="layer_outlier",
        step_start=min(r["lo"] for r in group),
        step_end=max(r["hi"] for r in group),
        peak_step=int(top["peak"]),
        severity="warning",
        score=round(ratio, 3),
        rank=top["rank"] if len(ranks) <= 1 else None,
        layer=top["layer"],
        evidence=ev,
        summary=(
            f"layer {top['layer']}: its optimizer updates are {ratio:.0f}x the other layers' ({what}) "
            f"from step {top['lo']}: a learning rate too high for that layer (its own param group or "
            f"multiplier), or its parameters at the wrong scale"
        ),
        facts={
            "onset_step": int(top["lo"]),
            "layers": layers_hit[:10],
            "sustained": True,
            "update_ratio": ratio,
            **({"ranks_flagged": ranks} if ranks else {}),
        },
    )


def _level_rise(frame: pl.DataFrame, by: str, w: int, early: int) -> pl.DataFrame:
    """Per record: `before` = median of the previous w records, `rise` = median of the next w minus it (log)."""
    frame = frame.filter(pl.col("y").is_not_null()).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).over(by).alias("_i")
    )
    frame = frame.with_columns(pl.col("y").rolling_median(w, min_samples=w).over(by).alias("before"))
    return frame.with_columns((pl.col("before").shift(-w).over(by) - pl.col("before")).alias("rise")).filter(
        pl.col("_i") >= early + w
    )


def _sustained(run: RunData, params) -> list[Finding]:
    lp = params.layer_outlier
    layers = signals.layer_frame(run)
    glob, derived = signals.raw(run, "grad_norm")
    if layers.height == 0 or glob.height == 0:
        return []
    n = int(glob.height)
    w = max(5, min(lp.shift_window, n // 6))
    early = max(lp.early_min, int(n * 0.05))
    lay = layers.with_columns(
        pl.when(pl.col("grad_norm").is_finite() & (pl.col("grad_norm") > 0)).then(pl.col("grad_norm").log()).alias("y"),
        pl.concat_str(pl.col("layer"), pl.col("rank").cast(pl.String).fill_null("-"), separator="@").alias("_k"),
    )
    rises = _level_rise(lay, "_k", w, early)
    g = glob.filter(pl.col("rank").is_null()) if glob.get_column("rank").null_count() else glob
    g = (
        _level_rise(g.with_columns(pl.lit("-").alias("_k")), "_k", w, early)
        .group_by("step")
        .agg(pl.col("rise").max().alias("global_rise"))
    )
    rises = rises.join(g, on="step", how="left").with_columns(pl.col("global_rise").fill_null(0.0))
    hot = rises.filter(
        (pl.col("rise") >= math.log(lp.ratio))
        & (pl.col("rise") - pl.col("global_rise").clip(lower_bound=0.0) >= math.log(lp.shift_excess))
    )
    if hot.height == 0:
        return []
    # one change point per layer (its largest rise), then layers changing together are one finding
    cps = hot.sort(["rise", "step"], descending=[True, False]).unique(subset=["_k"], keep="first")
    findings = []
    for _, grp in robust.flag_groups(cps.with_columns(pl.col("step").alias("pos")), w).group_by(
        "group", maintain_order=True
    ):
        top = grp.sort("rise", descending=True).row(0, named=True)
        lvl = lay.filter((pl.col("_k") == top["_k"]) & (pl.col("step") >= top["step"]))
        lvl = lvl.with_columns(pl.col("y").rolling_median(w, min_samples=1).alias("_m"))
        low = lvl.filter((pl.col("step") >= top["step"] + w) & (pl.col("_m") < top["before"] + top["rise"] / 2)).head(1)
        end = int(low.get_column("step")[0]) if low.height else int(lvl.get_column("step").max())
        share = _share(layers, top["layer"], top["rank"], top["step"], end)
        ev = [
            Evidence(
                signal="layer_grad_norm",
                step=r["step"],
                value=math.exp(r["before"] + r["rise"]),
                baseline=math.exp(r["before"]),
                ratio=math.exp(r["rise"]),
                rank=r["rank"],
                layer=r["layer"],
                note=f"level shift; global grad norm x{math.exp(r['global_rise']):.2f} over the same windows"
                + (f" ({signals.DERIVED_NOTE})" if derived else ""),
            )
            for r in grp.sort("rise", descending=True).head(5).iter_rows(named=True)
        ]
        if share is not None:
            ev.append(
                Evidence(
                    signal="layer_share_of_squared_norm",
                    step=top["step"],
                    value=share,
                    layer=top["layer"],
                    rank=top["rank"],
                    note="median share of the squared global norm after the shift",
                )
            )
        layers_hit = grp.sort("rise", descending=True).get_column("layer").unique(maintain_order=True).to_list()
        findings.append(
            Finding(
                kind="layer_outlier",
                step_start=int(top["step"]),
                step_end=end,
                peak_step=int(top["step"]),
                severity="warning"
                if (share or 0.0) >= lp.dominant_share or top["rise"] >= math.log(lp.sustained_ratio_alone)
                else "info",
                score=round(math.exp(top["rise"]), 3),
                rank=top["rank"],
                layer=top["layer"],
                evidence=ev,
                summary=(
                    f"layer {top['layer']} grad norm rose {math.exp(top['rise']):.0f}x from step {top['step']} "
                    f"while the global norm rose {math.exp(top['global_rise']):.1f}x"
                    + (f"; it carries {share:.0%} of the squared norm" if share is not None else "")
                ),
                facts={
                    "onset_step": int(top["step"]),
                    "layers": layers_hit[:10],
                    "sustained": True,
                    **({"dominant_layer": top["layer"], "dominant_share": share} if share and share >= 0.5 else {}),
                },
            )
        )
    return findings


def _share(layers: pl.DataFrame, layer: str, rank, lo: int, hi: int) -> float | None:
    part = layers.filter(
        pl.col("step").is_between(lo, hi) & pl.col("rank").eq_missing(rank) & pl.col("grad_norm").is_finite()
    )
    if part.height == 0:
        return None
    per_step = part.group_by("step").agg(
        ((pl.col("grad_norm") ** 2).filter(pl.col("layer") == layer).sum() / (pl.col("grad_norm") ** 2).sum()).alias(
            "s"
        )
    )
    return float(per_step.get_column("s").median())


def _spikes(run: RunData, params) -> list[Finding]:
    lp = params.layer_outlier
    base = signals.layer_baseline(run, params)
    if base.height == 0:
        return []
    flagged = base.filter(
        pl.col("left").is_not_null()
        & (pl.col("z") >= lp.z_threshold)
        & ((pl.col("y") - pl.col("base")) >= math.log(lp.ratio))
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
    ev = [
        Evidence(
            signal="layer_grad_norm",
            step=r["step"],
            value=r["grad_norm"],
            baseline=math.exp(r["base"]),
            ratio=round(r["ratio"], 4),
            rank=r["rank"],
            layer=r["layer"],
            note=f"global grad norm at {r['global_ratio']:.2f}x its baseline" if r["global_ratio"] is not None else "",
        )
        for r in per_layer.head(5).iter_rows(named=True)
    ]
    ranks = sorted(g.get_column("rank").drop_nulls().unique().to_list())
    layers = per_layer.get_column("layer").unique(maintain_order=True).to_list()
    sev = "warning"
    return Finding(
        kind="layer_outlier",
        step_start=lo,
        step_end=hi,
        peak_step=int(top["step"]),
        severity=sev,
        score=round(float(g.get_column("z").max()), 3),
        rank=top["rank"],
        layer=top["layer"],
        evidence=ev,
        summary=(
            f"layer {top['layer']} grad norm {top['ratio']:.0f}x its baseline at step {top['step']} "
            f"while the global norm stayed normal"
        ),
        facts={"onset_step": lo, "layers": layers[:10], "ranks_flagged": ranks, "global_derived": derived},
    )
