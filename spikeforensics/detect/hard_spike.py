"""Hard spikes: a loss or grad-norm value far above *both* its past and its future.

Two-sided robust residual on log scale (DETECTION-ANCHORS §2.2): the baseline of a
point is the higher of the medians of the W-g records before and after it, its guard
band excluded; z = (log x - baseline) / robust sigma. A point is flagged when z >= 6
and the ratio to that baseline clears a floor (1.3x loss, 3x grad norm), or when it
jumps >= 2x loss / 10x grad norm above its past alone (the onset of a divergence, whose
future stays high). Early training never fires: the first records have no past, and a
fast-falling loss sits below its past. Severity is critical at >= 2x loss or >= 10x grad
norm over the pre-spike level (DOMAIN), else warning.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.detect import robust, shape, signals
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData

SIGNALS = ("loss", "grad_norm")


def _flags(frame: pl.DataFrame, signal: str, params) -> pl.DataFrame:
    hp = params.hard_spike
    floor = hp.loss_ratio_floor if signal == "loss" else hp.grad_ratio_floor
    crit = hp.loss_ratio_critical if signal == "loss" else hp.grad_ratio_critical
    if frame.height == 0:
        return frame.with_columns(pl.lit(None, pl.String).alias("signal"))
    log_floor, log_crit = math.log(floor), math.log(crit)
    both = (pl.col("z") >= hp.z_threshold) & ((pl.col("y") - pl.col("base")) >= log_floor)
    jump = (pl.col("z_left") >= hp.z_threshold) & ((pl.col("y") - pl.col("left")) >= log_crit)
    early = pl.col("t") < (pl.col("t").max().over("rank") * hp.early_skip_frac)
    return frame.filter(pl.col("left").is_not_null() & (both | jump) & ~early).with_columns(
        pl.lit(signal).alias("signal"),
        (pl.col("y") - pl.col("left")).exp().alias("ratio_left"),
        (pl.col("y") - pl.col("base")).exp().alias("ratio_base"),
    )


def detect(run: RunData, params) -> list[Finding]:
    hp = params.hard_spike
    flagged, tracks, derived_any = [], [], False
    for signal in SIGNALS:
        for per_rank in (False, True):
            frame, derived = signals.with_baseline(run, signal, params, per_rank=per_rank)
            if frame.height == 0 or (per_rank and not signals.has_ranks(frame)):
                continue
            derived_any |= derived and signal == "grad_norm"
            f = _flags(frame, signal, params).with_columns(pl.lit(per_rank).alias("per_rank"),
                                                          pl.lit(derived).alias("derived"))
            if f.height:
                flagged.append(f.select("signal", "per_rank", "derived", "t", "step", "attempt", "rank", "pos", "value",
                                        "left", "base", "z", "z_left", "ratio_left", "ratio_base"))
            for rank in frame.get_column("rank").unique().to_list():
                part = frame.filter(pl.col("rank").eq_missing(rank))
                tracks.append(shape.Track.from_frame(part, signal, rank if per_rank else None))
    if not flagged:
        return []
    flags = robust.flag_groups(pl.concat(flagged, how="vertical_relaxed"), hp.group_gap)
    layer_base = signals.layer_baseline(run, params)
    findings = []
    for _, group in flags.group_by("group", maintain_order=True):
        findings.append(_finding(group, tracks, layer_base, run, params))
    return findings


def _finding(group: pl.DataFrame, tracks: list, layer_base: pl.DataFrame, run: RunData, params) -> Finding:
    hp = params.hard_spike
    glob = group.filter(~pl.col("per_rank"))
    main = glob if glob.height else group
    # the peak: the loss peak when the loss spiked, else the grad-norm peak
    peak_src = main.filter(pl.col("signal") == "loss")
    peak_src = peak_src if peak_src.height else main
    peak = peak_src.sort("z", descending=True).row(0, named=True)
    evidence, severity = [], "warning"
    for (signal, per_rank), rows in main.group_by("signal", "per_rank", maintain_order=True):
        top = rows.sort("ratio_left", descending=True).row(0, named=True)
        crit = hp.loss_ratio_critical if signal == "loss" else hp.grad_ratio_critical
        if top["ratio_left"] >= crit:
            severity = "critical"
        evidence.append(Evidence(
            signal=signal, step=top["step"], value=top["value"], baseline=math.exp(top["left"]),
            ratio=round(top["ratio_left"], 4), rank=top["rank"],
            note=(signals.DERIVED_NOTE + "; " if rows.get_column("derived").any() else "")
            + f"robust z {top['z_left']:.1f} over the pre-spike median",
        ))
    ranks_flagged = sorted(group.filter(pl.col("rank").is_not_null()).get_column("rank").unique().to_list())
    all_ranks = run.ranks()
    rank = None
    if ranks_flagged and len(all_ranks) > 1 and len(ranks_flagged) < len(all_ranks):
        rank = int(group.filter(pl.col("rank").is_not_null()).sort("ratio_left", descending=True).get_column("rank")[0])
        for r in group.filter(pl.col("per_rank")).group_by("rank").agg(pl.all().sort_by("ratio_left").last()).iter_rows(named=True):
            evidence.append(Evidence(signal=r["signal"], step=r["step"], value=r["value"], baseline=math.exp(r["left"]),
                                     ratio=round(r["ratio_left"], 4), rank=r["rank"], note="per-rank value"))
    step_lo, step_hi = int(group.get_column("step").min()), int(group.get_column("step").max())
    layers = _top_layers(layer_base, step_lo, step_hi, hp.layer_ratio_min)
    for lay in layers[:3]:
        evidence.append(Evidence(signal="layer_grad_norm", step=lay["step"], value=lay["grad_norm"],
                                 baseline=math.exp(lay["left"]), ratio=round(lay["ratio"], 4), rank=lay["rank"],
                                 layer=lay["layer"]))
    pos_lo, pos_hi = int(group.get_column("pos").min()), int(group.get_column("pos").max())
    facts = shape.describe(tracks, pos_lo, pos_hi, params)
    if ranks_flagged:
        facts["ranks_flagged"] = ranks_flagged
    if layers:
        facts["layers"] = [lay["layer"] for lay in layers[:3]]
    signals_hit = sorted(set(main.get_column("signal")))
    ratio = max(e.ratio for e in evidence if e.signal in SIGNALS)
    summary = (f"{' and '.join(signals_hit)} spiked to {ratio:.1f}x the pre-spike level at step {peak['step']}"
               + (f" (rank {rank})" if rank is not None else "")
               + (f", led by layer {layers[0]['layer']}" if layers else ""))
    return Finding(
        kind="hard_spike", step_start=step_lo, step_end=step_hi, peak_step=peak["step"], severity=severity,
        score=round(float(group.get_column("z").max()), 3), summary=summary, rank=rank,
        layer=layers[0]["layer"] if layers else None, attempt=int(peak["attempt"] or 0), evidence=evidence, facts=facts,
    )


def _top_layers(layer_base: pl.DataFrame, step_lo: int, step_hi: int, min_ratio: float) -> list[dict]:
    """Layers whose norm rose most over their own baseline inside the spike's steps."""
    if layer_base.height == 0:
        return []
    rows = layer_base.filter(pl.col("step").is_between(step_lo, step_hi) & pl.col("left").is_not_null())
    if rows.height == 0:
        return []
    rows = rows.with_columns((pl.col("y") - pl.col("left")).exp().alias("ratio"))
    best = rows.sort("ratio", descending=True).unique(subset=["layer"], keep="first", maintain_order=True)
    best = best.filter(pl.col("ratio") >= min_ratio)
    return best.head(5).select("layer", "rank", "step", "grad_norm", "left", "ratio").to_dicts()
