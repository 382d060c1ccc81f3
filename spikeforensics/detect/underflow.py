"""Underflow: a rising share of exact-zero gradient elements (fp16 flushes tiny values to 0).

Per layer (and rank) `zero_frac` from the per-layer dump, and Megatron's global
`num_zeros`, are binned; a layer fires when the binned series trends up (Mann-Kendall
p < 0.01), its late level is >= 3x its early median and rose by at least a couple of
points (DETECTION-ANCHORS §2.8). A layer that was sparse from the start (a mask) does
not trend and is not an underflow. Without fp16 loss scaling in the log, only a rise in
most layers is a warning; a few layers is a note.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from spikeforensics.detect import robust, signals
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData


def _test(values: np.ndarray, up) -> dict | None:
    n = values.size
    if n < 8:
        return None
    k_early = max(2, int(round(n * up.early_frac)))
    k_late = max(2, int(round(n * up.late_frac)))
    early, late = float(np.median(values[:k_early])), float(np.median(values[-k_late:]))
    tau, p = robust.mann_kendall(values)
    if not (tau > 0 and p < up.trend_p and late >= up.rise_ratio * max(early, 1e-12)):
        return None
    half = early + 0.5 * (late - early)
    onset = int(np.argmax(values >= half))
    return {"early": early, "late": late, "tau": tau, "p": p, "onset_bin": onset}


def detect(run: RunData, params) -> list[Finding]:
    up = params.underflow
    findings = []
    layers = signals.layer_frame(run)
    if layers.height and layers.get_column("zero_frac").drop_nulls().len():
        data = layers.filter(pl.col("zero_frac").is_finite())
        bins = robust.binned(data, "zero_frac", up.bins, by=["layer", "rank"])
        hits = []
        for (layer, rank), b in bins.group_by("layer", "rank", maintain_order=True):
            res = _test(b.get_column("value").to_numpy(), up)
            if res is None or res["late"] - res["early"] < up.min_abs_rise:
                continue
            res.update(
                layer=layer,
                rank=rank,
                onset_step=int(b.get_column("step_first")[res["onset_bin"]]),
                last_step=int(b.get_column("step_last")[-1]),
            )
            hits.append(res)
        if hits:
            n_layers = data.select(pl.struct("layer", "rank").n_unique()).item()
            findings.append(_finding(hits, "zero_frac", run, _severity(run, len(hits), n_layers, up)))
    s = run.series("num_zeros")
    if s.height >= 8:
        b = robust.binned(s.filter(pl.col("value").is_finite()).sort("t"), "value", up.bins)
        res = _test(b.get_column("value").to_numpy(), up)
        if res is not None:
            res.update(
                layer=None,
                rank=None,
                onset_step=int(b.get_column("step_first")[res["onset_bin"]]),
                last_step=int(b.get_column("step_last")[-1]),
            )
            findings.append(_finding([res], "num_zeros", run, _severity(run, 1, 1, up)))
    return findings


def _severity(run: RunData, rising: int, layers: int, up) -> str:
    """Underflow is an fp16 effect: a warning with fp16 loss scaling in the log or when most layers
    flood with zeros; a few layers gaining zeros in a bf16/fp32 run is a note (dead units, a mask)."""
    if signals.fp16_evidence(run) or rising >= up.widespread_frac * layers:
        return "warning"
    return "info"


def _finding(hits: list[dict], signal: str, run: RunData, severity: str) -> Finding:
    hits = sorted(hits, key=lambda h: h["late"] - h["early"], reverse=True)
    top = hits[0]
    ranks = sorted({h["rank"] for h in hits if h["rank"] is not None})
    all_ranks = run.ranks()
    rank = top["rank"] if ranks and len(all_ranks) > 1 and len(ranks) < len(all_ranks) else None
    evidence = [
        Evidence(
            signal=signal,
            step=h["last_step"],
            value=h["late"],
            baseline=h["early"],
            ratio=h["late"] / h["early"] if h["early"] > 0 else None,
            rank=h["rank"],
            layer=h["layer"],
            note=f"Mann-Kendall tau {h['tau']:.2f}, p {h['p']:.1e}; rising from step {h['onset_step']}",
        )
        for h in hits[:5]
    ]
    onset = min(h["onset_step"] for h in hits)
    layers = [h["layer"] for h in hits if h["layer"] is not None]
    what = f"{len(layers)} layer(s), most in {layers[0]}" if layers else "the gradient"
    summary = f"exact-zero gradient share rising in {what}: {top['early']:.3g} -> {top['late']:.3g} from step {onset}"
    return Finding(
        kind="underflow_zeros",
        step_start=onset,
        step_end=max(h["last_step"] for h in hits),
        peak_step=onset,
        severity=severity,
        score=float(abs(np.log10(max(top["p"], 1e-300)))),
        summary=summary,
        rank=rank,
        layer=top["layer"],
        evidence=evidence,
        facts={"onset_step": onset, "layers": layers[:10], "ranks_flagged": ranks, "scope": "run"},
    )
