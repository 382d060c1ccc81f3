"""Evidence features that could point at hardware: rank confinement (one rank odd out),
hardware telemetry in the incident's time window (Xid events, ECC counter deltas,
temperature) and replay (the same step trained again after a resume, spiking again or not).
"""

from __future__ import annotations

import json
import math
from datetime import timedelta

import polars as pl

from spikeforensics.attribute._feature_helpers import _at, _f, _median, _onset
from spikeforensics.attribute.context import RunContext
from spikeforensics.detect.base import Incident
from spikeforensics.params import AttributionParams
from spikeforensics.rundata import RunData


def rank_features(inc: Incident, ctx: RunContext, ap: AttributionParams) -> dict:
    out = {
        "n_ranks": ctx.n_ranks,
        "multi_rank": ctx.n_ranks > 1,
        "has_rank_data": False,
        "rank_confined": False,
        "rank_all": False,
        "peak_rank": -1,
        "rank_outlier_ratio": None,
        "rank_norms_agree_healthy": False,
        "rank_mismatch": False,
    }
    if ctx.n_ranks <= 1 or ctx.per_rank.height == 0:
        if ctx.n_ranks > 1 and len(inc.ranks) == 1:  # the detector saw one rank only, no per-rank numbers to check
            out["rank_confined"], out["peak_rank"] = True, int(inc.ranks[0])
        return out
    pad = ap.pad_steps
    best = None
    for signal in ("grad_norm", "loss", "layer_norm"):
        rows = ctx.per_rank.filter(pl.col("signal") == signal)
        if rows.height == 0 or rows.get_column("rank").n_unique() < 2:
            continue
        window = _at(rows, inc.attempt, inc.step_start - pad, inc.step_end + pad)
        healthy = ctx.healthy(rows)
        base = healthy.group_by("rank").agg(pl.col("value").filter(pl.col("value").is_finite()).median().alias("base"))
        rel = window.join(base, on="rank").with_columns(
            pl.when(pl.col("value").is_finite())
            .then(pl.col("value") / pl.col("base"))
            .otherwise(float("inf"))
            .alias("rel")
        )
        if rel.height == 0:
            continue
        # a tie (two ranks both non-finite: rel inf) goes to the lowest rank, not to the group order of the day
        per_rank = rel.group_by("rank").agg(pl.col("rel").max()).sort(["rel", "rank"], descending=[True, False])
        top_rank, top = per_rank.row(0)
        others = per_rank.get_column("rel")[1:]
        other_med = float(others.median()) if others.len() else 1.0
        ratio = top / max(other_med, 1e-12)
        n_high = per_rank.filter(pl.col("rel") >= ap.replay_spike_ratio).height
        out["has_rank_data"] = True
        if signal in ("grad_norm", "layer_norm"):
            spread = (
                healthy.filter(pl.col("value").is_finite())
                .group_by("attempt", "step")
                .agg(((pl.col("value").max() - pl.col("value").min()) / pl.col("value").mean().abs()).alias("spread"))
            )
            agree = spread.height > 0 and float((spread.get_column("spread") <= ap.rank_agree_rtol).mean()) >= 0.9
            out["rank_norms_agree_healthy"] = out["rank_norms_agree_healthy"] or agree
            if agree:
                peak_spread = window.group_by("step").agg(
                    ((pl.col("value").max() - pl.col("value").min()) / pl.col("value").mean().abs()).alias("s"),
                    pl.col("value").is_finite().all().alias("fin"),
                )
                bad = peak_spread.filter((pl.col("s") > ap.rank_agree_rtol) | ~pl.col("fin"))
                out["rank_mismatch"] = out["rank_mismatch"] or bad.height > 0
        if best is None or ratio > best[0]:
            best = (ratio, top_rank, n_high, per_rank.height)
    if best is not None:
        ratio, top_rank, n_high, n = best
        out["rank_outlier_ratio"] = _f(ratio) if math.isfinite(ratio) else 1e12
        out["rank_confined"] = ratio >= ap.rank_outlier_ratio and n_high <= max(1, n // 4)
        out["rank_all"] = n_high == n
        out["peak_rank"] = int(top_rank) if out["rank_confined"] else -1
    return out


def _time_window(inc: Incident, ctx: RunContext, ap: AttributionParams):
    rows = ctx.step_time.filter(pl.col("step").is_between(inc.step_start - ap.pad_steps, inc.step_end + ap.pad_steps))
    same = rows.filter(pl.col("attempt") == inc.attempt)
    rows = same if same.height else rows
    if rows.height == 0:
        return None
    pad = timedelta(seconds=ap.pad_seconds)
    return rows.get_column("time").min() - pad, rows.get_column("time").max() + pad


def _xid_codes(xids: pl.DataFrame) -> list[int]:
    codes = []
    for d in xids.get_column("detail").to_list():
        try:
            c = json.loads(d or "{}").get("code")
        except (ValueError, AttributeError):
            continue
        if isinstance(c, (int, float)) or (isinstance(c, str) and c.isdigit()):
            codes.append(int(c))
    return codes


def hardware_features(
    inc: Incident, run: RunData, ctx: RunContext, ap: AttributionParams, hardware_pattern: str
) -> dict:
    out = {
        "time_aligned": False,
        "xid_count": 0,
        "xid_hw_weight": 0.0,
        "xid_codes": "",
        "ecc_delta": 0.0,
        "ecc_uncorrected_delta": 0.0,
        "ecc_gpu": "",
        "temp_rise": None,
        "hw_event_count": 0,
        "xid_unplaced_weight": 0.0,
        "ecc_run_delta": 0.0,
    }
    window = _time_window(inc, ctx, ap)
    in_steps = pl.col("step").is_between(inc.step_start - ap.pad_steps, inc.step_end + ap.pad_steps)

    def weight(c):
        if c in ap.xid_strong_codes:
            return ap.xid_strong_weight
        if c in ap.xid_medium_codes:
            return ap.xid_medium_weight
        return ap.xid_weak_weight if c in ap.xid_weak_codes else ap.xid_other_weight

    unplaced = run.events.filter(
        (pl.col("kind") == "xid") & pl.col("step").is_null() & (pl.col("time").is_null() | pl.lit(window is None))
    )
    if unplaced.height:
        out["xid_unplaced_weight"] = max((weight(c) for c in _xid_codes(unplaced)), default=ap.xid_other_weight)
    if window is None:
        # no wall clock in the log: only events that carry a step can be placed
        events = run.events.filter(in_steps.fill_null(False))
        ecc = run.telemetry.filter(pl.col("field").str.starts_with("ecc") & pl.col("value").is_finite())
        if ecc.height:
            span = ecc.group_by("host", "gpu", "field").agg((pl.col("value").max() - pl.col("value").min()).alias("d"))
            out["ecc_run_delta"] = float(span.get_column("d").sum())
    else:
        out["time_aligned"] = True
        lo, hi = window
        events = run.events.filter(pl.col("time").is_between(lo, hi).fill_null(False) | in_steps.fill_null(False))
    xids = events.filter(pl.col("kind") == "xid")
    if xids.height:
        codes = _xid_codes(xids)
        out["xid_count"] = xids.height
        out["xid_hw_weight"] = max((weight(c) for c in codes), default=ap.xid_other_weight)
        out["xid_codes"] = ",".join(str(c) for c in sorted(set(codes)))
    # an `error` event counts when it is a CUDA runtime error or names hardware (ECC, Xid, a GPU off
    # the bus: events.hardware_pattern); a Python exception (an AssertionError on a NaN loss, a shape
    # mismatch) is no evidence of hardware
    detail = pl.col("detail").fill_null("")
    hw_error = (pl.col("kind") == "error") & (
        detail.str.contains('"reason":\\s*"cuda_error"') | detail.str.contains(hardware_pattern)
    )
    out["hw_event_count"] = events.filter(pl.col("kind").is_in(["ecc", "nccl_timeout"]) | hw_error).height
    tel = run.telemetry
    if window is not None and tel.height:
        lo, hi = window
        ecc = tel.filter(pl.col("field").str.starts_with("ecc") & pl.col("value").is_finite())
        if ecc.height:
            before = (
                ecc.filter(pl.col("time") < lo)
                .sort("time")
                .group_by("host", "gpu", "field")
                .agg(pl.col("value").last().alias("v0"))
            )
            inside = (
                ecc.filter(pl.col("time").is_between(lo, hi))
                .sort("time")
                .group_by("host", "gpu", "field")
                .agg(pl.col("value").first().alias("first"), pl.col("value").last().alias("v1"))
            )
            delta = inside.join(before, on=["host", "gpu", "field"], how="left").with_columns(
                (pl.col("v1") - pl.coalesce("v0", "first")).clip(lower_bound=0).alias("d")
            )
            if delta.height:
                out["ecc_delta"] = float(delta.get_column("d").sum())
                out["ecc_uncorrected_delta"] = float(
                    delta.filter(pl.col("field").str.contains("uncorr")).get_column("d").sum()
                )
                top = delta.sort("d", descending=True).row(0, named=True)
                if top["d"] > 0:
                    out["ecc_gpu"] = f"{top['host'] or ''}:{top['gpu']}"
        temp = tel.filter((pl.col("field") == "temperature") & pl.col("value").is_finite())
        if temp.height:
            inside = temp.filter(pl.col("time").is_between(lo, hi))
            if inside.height:
                out["temp_rise"] = float(inside.get_column("value").max()) - float(temp.get_column("value").median())
    return out


def replay_features(inc: Incident, ctx: RunContext, ap: AttributionParams) -> dict:
    """Was the peak step trained again in another attempt, and did it spike again?"""
    out = {"replayed": False, "replay_recurred": None, "replay_ratio": None}
    on = _onset(inc)
    for frame in (ctx.grad, ctx.loss):
        if frame.height == 0 or frame.get_column("attempt").n_unique() < 2:
            continue
        here = frame.filter((pl.col("attempt") == inc.attempt) & pl.col("step").is_between(on, inc.step_end))
        other = frame.filter((pl.col("attempt") != inc.attempt) & pl.col("step").is_between(on, inc.step_end))
        if here.height == 0 or other.height == 0:
            continue
        base = _median(ctx.healthy(_at(frame, inc.attempt, on - ap.baseline_window, on - 1))) or _median(
            ctx.healthy(frame)
        )
        if not base:
            continue
        # compare only steps present in both passes
        both = here.join(other.group_by("step").agg(pl.col("value").max().alias("replay")), on="step")
        if both.height == 0:
            continue
        nonfin = lambda c: pl.col(c).is_nan() | pl.col(c).is_infinite()  # noqa: E731
        orig = both.select(pl.when(nonfin("value")).then(float("inf")).otherwise(pl.col("value")).max()).item()
        rep = both.select(pl.when(nonfin("replay")).then(float("inf")).otherwise(pl.col("replay")).max()).item()
        r0, r1 = orig / base, rep / base
        if r0 < ap.replay_spike_ratio and r1 < ap.replay_spike_ratio:
            continue  # this signal did not spike in either pass: no information
        out["replayed"] = True
        out["replay_ratio"] = _f(r1) if math.isfinite(r1) else 1e12
        spiked_again = r1 >= ap.replay_spike_ratio and (
            not math.isfinite(r0) or math.log(max(r1, 1.0)) >= 0.5 * math.log(max(r0, 1.0))
        )
        out["replay_recurred"] = (
            bool(spiked_again) if out["replay_recurred"] is None else (out["replay_recurred"] or spiked_again)
        )
    return out
