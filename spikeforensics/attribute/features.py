"""Evidence features of one incident: named facts the rules in `rules/*.toml` test.

`incident_features(incident, run, ctx, tc, params)` is a pure function returning a
flat dict {feature name: bool | number | str | None}. `FEATURES` documents every name
(type and meaning) and is what the rule loader validates against, so a rule can only
name a feature that exists. `None` means "no data to say" and makes every condition on
that feature false.

Families (one helper each): incident shape and kinds; rank confinement; hardware
(Xid events, ECC counter deltas, temperature) in the incident's time window; replay
(the same step trained again after a resume); samples (recurrence, exoneration, loss
share, source/length enrichment, via tracing.py); clipping; loss scaling; layers
(concentration, exact zeros, stuck sign); drift before, plateau after; position in
training and learning rate.
"""

from __future__ import annotations

import json
import math
from datetime import timedelta

import polars as pl

from spikeforensics.attribute.context import RunContext, step_level, step_window
from spikeforensics.attribute.log_facts import FACTS as LOG_FACTS
from spikeforensics.attribute.log_facts import log_facts
from spikeforensics.attribute.tracing import TraceContext, consumed_samples_range, rank_samples, skip_candidates
from spikeforensics.detect.base import KINDS, Incident
from spikeforensics.params import AttributionParams, Params
from spikeforensics.rundata import RunData

B, N, S = "bool", "number", "str"
FEATURES: dict[str, tuple[str, str]] = {
    # incident shape
    "kind": (S, "primary detector kind of the incident"),
    "severity": (S, "incident severity: warning or critical"),
    "n_kinds": (N, "how many detectors fired in the incident"),
    **{f"has_{k}": (B, f"the {k} detector fired in this incident") for k in KINDS},
    "duration_steps": (N, "step_end - step_start + 1"),
    "nonfinite": (B, "a NaN/Inf loss or grad norm inside the incident"),
    "peak_loss_ratio": (N, "loss at the peak / healthy baseline before onset"),
    "peak_grad_ratio": (N, "grad norm at the peak / healthy baseline before onset"),
    "peak_grad_norm": (N, "largest finite grad norm inside the incident"),
    "recovery": (S, "detector's recovery class: fast / slow / never / unknown"),
    "lead_signal": (S, "which signal moved first (detector fact), or unknown"),
    "lead_steps": (N, "records by which the lead signal moved first (detector fact), or None"),
    "detector_cause": (
        S,
        "a cause a detector already recognised (finding fact `cause`, e.g. clip_before_unscale), or empty",
    ),
    "scale_floor_event": (
        B,
        "an events-detector finding: overflow at the loss-scale floor, a 'scale already at minimum' message, or every logged step overflowing",
    ),
    "fatal_collective_timeout": (
        B,
        "an events-detector finding: an NCCL watchdog timeout with no training record after it (the job died on a hung collective)",
    ),
    "fatal_hw_event": (
        B,
        "an events-detector finding: a hardware error (Xid, uncorrectable ECC) with no training record after it",
    ),
    "stopped_on_nonfinite": (B, "an event says training stopped on a non-finite loss"),
    "event_evidence": (S, "the decisive event(s) in words (events-detector summaries), or empty"),
    "n_spike_incidents": (N, "warning+ hard_spike/nonfinite incidents in the whole run"),
    "run_recurring_spikes": (
        N,
        "spikes in the run's recurring grad-norm spike pattern (fact run_spike_pattern of any hard-spike finding), else 0",
    ),
    "recurring_spikes": (
        N,
        "separate spikes the detector grouped into this incident as a recurring pattern (fact recurring_spikes), else 0",
    ),
    "n_incidents": (N, "warning+ incidents in the whole run"),
    "spike_interval_shrinking": (B, "gaps between successive spike incidents get shorter"),
    # ranks
    "n_ranks": (N, "ranks seen in the run (metrics, layer dump or manifest)"),
    "multi_rank": (B, "the run has more than one rank"),
    "has_rank_data": (B, "per-rank values exist around the incident"),
    "rank_confined": (
        B,
        "one rank stands out at the peak while the others stay normal (never true for a single-rank run)",
    ),
    "rank_all": (B, "per-rank data shows every rank spiking together"),
    "peak_rank": (N, "the odd rank out, or -1"),
    "rank_outlier_ratio": (N, "odd rank's value / median of the other ranks at the peak"),
    "rank_norms_agree_healthy": (B, "per-rank grad norms agree on healthy steps (they are post-all-reduce)"),
    "rank_mismatch": (B, "per-rank grad norms that agree on healthy steps disagree at the incident"),
    # hardware
    "time_aligned": (B, "the incident could be mapped to wall-clock time"),
    "xid_count": (N, "Xid events in the incident's time window"),
    "xid_hw_weight": (N, "largest hardware weight of those Xid codes (1 = ECC/NVLink/off-bus, 0.3 = app-level)"),
    "xid_codes": (S, "Xid codes in the window, comma separated"),
    "ecc_delta": (N, "increase of ECC error counters (corrected + uncorrected) across the window"),
    "ecc_uncorrected_delta": (N, "increase of uncorrected ECC counters across the window"),
    "ecc_gpu": (S, "host:gpu with the largest ECC increase"),
    "temp_rise": (N, "max GPU temperature in the window minus the run's median (deg C)"),
    "hw_event_count": (N, "ecc / nccl_timeout / error events in the window"),
    "xid_unplaced_weight": (
        N,
        "largest hardware weight of Xid events that cannot be placed in time (no clock in the log), 0 if none",
    ),
    "ecc_run_delta": (
        N,
        "increase of ECC counters over the whole telemetry, when the incident cannot be placed in time",
    ),
    "hw_evidence": (B, "any rank, replay or telemetry evidence that could point at hardware"),
    # replay
    "replayed": (B, "the peak step was trained again in another attempt (after a resume)"),
    "replay_recurred": (B, "the spike came back on the replay (None when not replayed)"),
    "replay_ratio": (N, "replayed value / baseline at the peak step"),
    # samples
    "has_manifest": (B, "a batch manifest covers the implicated steps"),
    "has_sample_losses": (B, "the manifest carries per-sample losses"),
    "top_samples": (S, "the most suspicious sample IDs, comma separated"),
    "top_sample_score": (N, "suspicion score of the top sample"),
    "top_sample_loss_ratio": (
        N,
        "top sample's loss / its reference: max(healthy per-sample loss before the incident, the step's 10th percentile)",
    ),
    "sample_loss_outlier": (
        B,
        "the top sample's loss ratio reaches attribution.sample_outlier_ratio (one sample far above normal data)",
    ),
    "sample_loss_nonfinite": (
        B,
        "a sample in the implicated steps has a NaN/Inf loss of its own while most of its step is finite",
    ),
    "sample_replay_recurred": (
        B,
        "the top sample's step was replayed and its own loss was again non-finite or an outlier (None when not replayed)",
    ),
    "sample_recurrence": (N, "other spike incidents that contain the top sample"),
    "sample_exonerated": (N, "healthy steps in which the top sample was also seen"),
    "source_enrichment": (N, "largest enrichment of a sample source in spike batches vs healthy ones"),
    "length_enrichment": (N, "mean tokens in spike batches / in healthy batches"),
    "source_shift": (
        N,
        "largest change of a source's share between the 200 steps before the incident and the run's first half",
    ),
    "tokens_shift": (N, "mean tokens in the steps before the incident / in the run's first half"),
    "consumed_samples_known": (B, "the log's consumed-samples counter gives the sample range"),
    # clipping
    "clip_threshold": (N, "clip max_norm in effect, or None"),
    "clip_rate": (N, "share of finite steps whose pre-clip norm exceeds the threshold"),
    "clip_rate_before": (N, "clip rate over the 200 steps before onset"),
    "norm_over_clip": (N, "median healthy grad norm (all steps if none is healthy) / clip threshold"),
    # loss scaling
    "fp16": (
        B,
        "the run trains in fp16: a dynamic loss scale is in use (loss_scale metric or overflow events) or the log declares fp16",
    ),
    "overflow_count": (N, "overflow events (skipped steps) in the whole run"),
    "overflow_window": (N, "overflow events within the incident (padded)"),
    "loss_scale_halvings": (
        N,
        "halvings of the loss scale from its level in the window before onset to its lowest in the incident",
    ),
    "loss_scale_min": (N, "smallest loss scale seen up to the incident end"),
    "scale_drop_at_resume": (
        B,
        "the loss scale fell by >= 2 halvings in one record at a resume/relaunch, with no skipped steps logged: reconfigured, not lowered by overflows",
    ),
    # layers
    "has_layers": (B, "a per-layer gradient dump exists"),
    "top_layer": (S, "layer with the largest share of the peak squared norm"),
    "layer_top_share": (N, "that layer's share of the summed squared layer norms at the peak"),
    "layer_top_ratio": (N, "that layer's norm at the peak / its healthy median"),
    "layer_hidden": (B, "a layer >= 10x its median while the global norm is < 2x"),
    "zero_frac_max": (N, "largest exact-zero fraction of any layer within the incident"),
    "zero_frac_rise": (N, "that layer's zero fraction minus its early median"),
    "layer_all_zero": (B, "some layer's gradient is (nearly) all exact zeros in the incident"),
    "sign_stuck": (B, "some layer's positive-element share is stuck near 0 or 1 in the incident"),
    "grad_fall": (N, "median grad norm over the last 20% of the run / first 20% (vanishing < 0.01)"),
    # dynamics
    "drift_before": (N, "median grad norm in the window before onset / the window before that"),
    "plateau_after": (N, "median loss after the incident / median loss before onset"),
    "loss_next_ratio": (
        N,
        "the first finite loss after the incident / the last finite loss before its onset, "
        "records at any distance (a sparse log's next record): near 1, the loss came straight back",
    ),
    "train_frac": (N, "position of the peak in the run, 0 = first step, 1 = last"),
    "onset_frac": (N, "position of the incident's onset in the run, 0 = first step, 1 = last"),
    "early": (
        B,
        "the peak lies in the first early_frac of training (false for a log that starts after hard_spike.start_max_step)",
    ),
    "lr_at_peak": (N, "learning rate at the peak step"),
    "lr_trend_before": (N, "relative LR change over the window before onset (+ = rising)"),
    "in_warmup": (B, "the peak is before the LR maximum while the LR is still rising"),
    "lr_still_rising": (
        B,
        "the LR never fell from the records before the onset to the peak and is higher on a later record: "
        "the incident came while an LR ramp (a warmup) was still climbing, wherever the log starts",
    ),
    "lr_rising_late": (
        B,
        "after the warmup the LR rises again: >10% after it began to decay, or >2x when it never decays (wrong schedule)",
    ),
    "warmup_steps": (
        N,
        "steps from the first logged LR to the LR maximum of the warmup (0 = no warmup at all; none for a log that starts after hard_spike.start_max_step)",
    ),
    "lr_late_rise": (
        N,
        "largest LR / its running minimum after the warmup (decay start, or warmup_max_frac of the run)",
    ),
    "lr_restart": (B, "the LR after a resume jumps back up by > 2x"),
}
# run-level facts from what the log printed (precision, GPU, loss-scale floor, NaN at the start, ...)
FEATURES.update({k: v for k, v in LOG_FACTS.items() if k not in FEATURES})


def _f(x) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _median(frame: pl.DataFrame, col: str = "value") -> float | None:
    vals = frame.filter(pl.col(col).is_finite()).get_column(col) if frame.height else None
    return _f(vals.median()) if vals is not None and vals.len() else None


def _at(frame: pl.DataFrame, attempt: int, lo: int, hi: int) -> pl.DataFrame:
    rows = step_window(frame, lo, hi)  # a binary search on a sorted step column (context.py)
    same = rows.filter(pl.col("attempt") == attempt)
    return same if same.height else rows.unique(subset=["step"], keep="first")


def _onset(inc: Incident) -> int:
    onset = inc.facts.get("onset")
    return int(onset) if isinstance(onset, (int, float)) and onset <= inc.peak_step else inc.step_start


# --- families --------------------------------------------------------------------------------


def shape_features(inc: Incident, incidents: list[Incident], ctx: RunContext, ap: AttributionParams) -> dict:
    on = _onset(inc)
    out = {
        "kind": inc.kind,
        "severity": inc.severity,
        "n_kinds": len(inc.kinds),
        **{f"has_{k}": k in inc.kinds for k in KINDS},
        "duration_steps": inc.step_end - inc.step_start + 1,
        "recovery": str(inc.facts.get("recovery", "unknown")),
        "lead_signal": str(inc.facts.get("lead_signal", "unknown")),
        "lead_steps": inc.facts.get("lead_steps"),
        "detector_cause": next((str(f.facts["cause"]) for f in inc.findings if f.facts.get("cause")), ""),
    }
    causes = {str(f.facts.get("cause")) for f in inc.findings if f.facts.get("decisive_event")}
    out["scale_floor_event"] = bool(causes & {"loss_scale_floor", "all_steps_overflow"})
    out["fatal_hw_event"] = "hardware_death" in causes
    out["fatal_collective_timeout"] = "collective_timeout" in causes
    out["stopped_on_nonfinite"] = "stopped_nonfinite" in causes
    out["event_evidence"] = "; ".join(f.summary for f in inc.findings if f.facts.get("decisive_event"))
    spikes = sorted(
        i.peak_step for i in incidents if i.severity != "info" and {"hard_spike", "nonfinite"} & set(i.kinds)
    )
    gaps = [b - a for a, b in zip(spikes, spikes[1:])]
    out["n_spike_incidents"] = len(spikes)
    grouped = [
        f.facts.get("recurring_spikes") for f in inc.findings if isinstance(f.facts.get("recurring_spikes"), list)
    ]
    out["recurring_spikes"] = max((len(g) for g in grouped), default=0)
    in_run = [
        f.facts["run_spike_pattern"]
        for i in incidents
        for f in i.findings
        if isinstance(f.facts.get("run_spike_pattern"), list)
    ]
    out["run_recurring_spikes"] = max((len(g) for g in in_run), default=0)
    out["n_incidents"] = sum(1 for i in incidents if i.severity != "info")
    out["spike_interval_shrinking"] = (
        len(gaps) >= 2 and all(b <= a for a, b in zip(gaps, gaps[1:])) and gaps[-1] < gaps[0]
    )
    pad = ap.pad_steps
    nonfinite = "nonfinite" in inc.kinds
    for name, frame in (("loss", ctx.loss), ("grad", ctx.grad)):
        window = _at(frame, inc.attempt, inc.step_start - pad, inc.step_end + pad)
        base = _median(ctx.healthy(_at(frame, inc.attempt, on - ap.baseline_window, on - 1))) or _median(
            ctx.healthy(frame)
        )
        nonfinite = nonfinite or window.filter(pl.col("value").is_nan() | pl.col("value").is_infinite()).height > 0
        peak = _f(window.filter(pl.col("value").is_finite()).get_column("value").max()) if window.height else None
        out[f"peak_{name}_ratio"] = peak / base if peak is not None and base else None
        if name == "grad":
            out["peak_grad_norm"] = peak
    out["nonfinite"] = nonfinite
    return out


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


def hardware_features(inc: Incident, run: RunData, ctx: RunContext, ap: AttributionParams) -> dict:
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
    out["hw_event_count"] = events.filter(pl.col("kind").is_in(["ecc", "nccl_timeout", "error"])).height
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


def sample_features(
    inc: Incident, run: RunData, ctx: RunContext, tc: TraceContext, params: Params, samples: pl.DataFrame
) -> dict:
    out = {
        "has_manifest": samples.height > 0,
        "has_sample_losses": samples.height > 0 and samples.get_column("sample_loss").null_count() < samples.height,
        "top_samples": ", ".join(
            skip_candidates(samples, params.tracing.skip_score_frac, limit=3)
            or samples.head(1).get_column("sample_id").to_list()
        ),
        "top_sample_score": None,
        "top_sample_loss_ratio": None,
        "sample_loss_outlier": False,
        "sample_loss_nonfinite": False,
        "sample_replay_recurred": None,
        "sample_recurrence": 0,
        "sample_exonerated": 0,
        "source_enrichment": None,
        "length_enrichment": tc.spike_tokens_ratio,
        "source_shift": None,
        "tokens_shift": None,
        "consumed_samples_known": consumed_samples_range(run, inc, params.tracing, tc.interval) is not None,
    }
    if samples.height:
        top = samples.row(0, named=True)
        out["top_sample_score"] = _f(top["score"])
        out["top_sample_loss_ratio"] = _f(top["loss_ratio"])
        out["sample_recurrence"] = int(top["recurrence"])
        out["sample_exonerated"] = int(top["healthy_seen"])
        out["sample_loss_outlier"] = (out["top_sample_loss_ratio"] or 0.0) >= params.attribution.sample_outlier_ratio
        out["sample_loss_nonfinite"] = bool(samples.get_column("own_nonfinite").any())
        rep = top["replay_loss"]
        if rep is not None:
            ratio = top["replay_ratio"]
            out["sample_replay_recurred"] = bool(
                not math.isfinite(rep) or (ratio is not None and ratio >= params.attribution.sample_outlier_ratio)
            )
    if tc.source_enrichment.height:
        out["source_enrichment"] = _f(tc.source_enrichment.get_column("source_enrichment").max())
    if tc.has_manifest and ctx.first_step is not None and ctx.last_step is not None:
        on = _onset(inc)
        mid = ctx.first_step + (ctx.last_step - ctx.first_step) // 2
        recent = tc.batches.filter(pl.col("step").is_between(on - 200, inc.peak_step))
        early = tc.batches.filter(pl.col("step") <= min(mid, on - 200))
        if recent.height and early.height:
            if recent.get_column("sample_source").null_count() < recent.height:
                share = lambda f, n: f.group_by("sample_source").agg((pl.len() / f.height).alias(n))  # noqa: E731
                both = (
                    share(recent, "r")
                    .join(share(early, "e"), on="sample_source", how="full", coalesce=True)
                    .fill_null(0)
                )
                out["source_shift"] = float((both.get_column("r") - both.get_column("e")).abs().max())
            te, tr = early.get_column("tokens").mean(), recent.get_column("tokens").mean()
            if te and tr is not None:
                out["tokens_shift"] = float(tr) / float(te)
    return out


def clip_features(inc: Incident, ctx: RunContext, params: Params) -> dict:
    thr = ctx.clip_threshold
    out = {"clip_threshold": thr, "clip_rate": None, "clip_rate_before": None, "norm_over_clip": None}
    if not thr or ctx.grad.height == 0:
        return out
    finite = ctx.once("grad_finite", lambda: ctx.grad.filter(pl.col("value").is_finite()))
    if finite.height == 0:
        return out
    out["clip_rate"] = ctx.once(("clip_rate", thr), lambda: float((finite.get_column("value") > thr).mean()))
    on = _onset(inc)
    before = step_window(finite, on - 200, on - 1)
    if before.height == 0:  # the incident starts with the run: judge its own first steps
        before = step_window(finite, on, on + 199)
    if before.height:
        out["clip_rate_before"] = float((before.get_column("value") > thr).mean())
    med = _median(ctx.healthy(finite)) or _median(finite)
    out["norm_over_clip"] = med / thr if med is not None else None
    return out


def precision_features(inc: Incident, run: RunData, ctx: RunContext, ap: AttributionParams) -> dict:
    overflow = run.events_of("overflow")
    counts = overflow.select(pl.col("detail").str.json_path_match("$.count").cast(pl.Int64, strict=False).fill_null(1))
    in_win = overflow.filter(pl.col("step").is_between(inc.step_start - ap.pad_steps, inc.step_end + ap.pad_steps))
    out = {
        "fp16": ctx.fp16,
        "overflow_count": int(counts.sum().item() or 0) if counts.height else 0,
        "overflow_window": in_win.height,
        "loss_scale_halvings": 0,
        "loss_scale_min": None,
        "scale_drop_at_resume": False,
    }
    scale = ctx.loss_scale.filter(pl.col("value").is_finite() & (pl.col("value") > 0))
    upto = scale.filter(pl.col("step") <= inc.step_end)
    if upto.height and ctx.fp16:  # a constant `loss scale: 1.0` (bf16/fp32 Megatron logs) says nothing
        low = float(upto.get_column("value").min())
        out["loss_scale_min"] = low
        # halvings from the level the scale had settled at before the incident (the start-up halvings
        # of a scaler that begins at 2^32 are normal) down to the lowest scale inside it
        on = _onset(inc)
        before = upto.filter(pl.col("step").is_between(on - ap.baseline_window, on - 1))
        top = float((before if before.height else upto).get_column("value").max())
        inside = upto.filter(pl.col("step") >= inc.step_start - ap.pad_steps)
        low_in = float(inside.get_column("value").min()) if inside.height else low
        out["loss_scale_halvings"] = max(0, int(round(math.log2(top / low_in)))) if low_in > 0 else 0
        out["scale_drop_at_resume"] = _scale_drop_at_resume(run, upto, ap)
    return out


def _scale_drop_at_resume(run: RunData, scale: pl.DataFrame, ap: AttributionParams) -> bool:
    """A dynamic scaler halves once per overflow and skips that step; a drop of several halvings in one
    record right at a relaunch, with the skipped-iterations counter flat, is a new configuration."""
    drops = (
        scale.sort("attempt", "step")
        .with_columns(
            (pl.col("value").shift(1) / pl.col("value")).log(2).alias("halvings"),
            (pl.col("attempt") != pl.col("attempt").shift(1)).alias("new_attempt"),
        )
        .filter(pl.col("halvings") >= 2)
    )
    if drops.height == 0:
        return False
    resumes = run.events_of("resume").get_column("step").drop_nulls()
    skipped = (
        step_level(run.series("skipped_iters"))
        .sort("attempt", "step")
        .with_columns((pl.col("value") - pl.col("value").shift(1)).alias("d"))
    )
    for row in drops.iter_rows(named=True):  # a handful of drops at most
        at_resume = row["new_attempt"] or bool(((resumes - row["step"]).abs() <= ap.pad_steps).any())
        skips = skipped.filter(pl.col("step").is_between(row["step"] - ap.pad_steps, row["step"]) & (pl.col("d") > 0))
        if at_resume and skipped.height and skips.height == 0:
            return True
    return False


def _grad_fall(grad: pl.DataFrame) -> float | None:
    """Median grad norm of the run's last fifth over its first fifth (finite, positive values)."""
    g = grad.filter(pl.col("value").is_finite() & (pl.col("value") > 0)).get_column("value")
    k = max(1, g.len() // 5)
    first, last = g.head(k).median(), g.tail(k).median()
    return float(last) / float(first) if first else None


def layer_features(inc: Incident, run: RunData, ctx: RunContext, ap: AttributionParams, peak_grad_ratio) -> dict:
    out = {
        "has_layers": run.layers.height > 0,
        "top_layer": "",
        "layer_top_share": None,
        "layer_top_ratio": None,
        "layer_hidden": False,
        "zero_frac_max": None,
        "zero_frac_rise": None,
        "layer_all_zero": False,
        "sign_stuck": False,
        "grad_fall": None,
    }
    if ctx.grad.height >= 10:
        out["grad_fall"] = ctx.once("grad_fall", lambda: _grad_fall(ctx.grad))
    layers = run.layers.filter(pl.col("step").is_not_null())
    if layers.height == 0:
        return out
    pad = ap.pad_steps
    # in dump order: the shares below are sums over layers, and a float sum depends on its order
    layers = layers.group_by("step", "layer", maintain_order=True).agg(
        pl.col("grad_norm", "zero_frac", "pos_frac").mean()
    )
    window = layers.filter(pl.col("step").is_between(inc.step_start - pad, inc.step_end + pad))
    if window.height == 0:
        nearest = layers.select((pl.col("step") - inc.peak_step).abs().min()).item()
        window = layers.filter((pl.col("step") - inc.peak_step).abs() == nearest)
    healthy = ctx.healthy(layers)
    base = healthy.group_by("layer").agg(
        pl.col("grad_norm").filter(pl.col("grad_norm").is_finite()).median().alias("base"),
        pl.col("zero_frac").sort_by("step").head(20).median().alias("zero_base"),
    )
    sq = window.filter(pl.col("grad_norm").is_finite()).with_columns((pl.col("grad_norm") ** 2).alias("sq"))
    if sq.height:
        peak_step = sq.group_by("step").agg(pl.col("sq").sum()).sort("sq", descending=True).get_column("step")[0]
        at = (
            sq.filter(pl.col("step") == peak_step)
            .join(base, on="layer", how="left")
            .with_columns(
                (pl.col("sq") / pl.col("sq").sum()).alias("share"),
                (pl.col("grad_norm") / pl.col("base")).alias("ratio"),
            )
        )
        top = at.sort("ratio", descending=True, nulls_last=True).row(0, named=True)
        by_share = at.sort("share", descending=True).row(0, named=True)
        out["top_layer"] = by_share["layer"]
        out["layer_top_share"] = _f(by_share["share"])
        out["layer_top_ratio"] = _f(top["ratio"])
        if top["ratio"] is not None and top["ratio"] >= 10 and (peak_grad_ratio is None or peak_grad_ratio < 2):
            out["layer_hidden"] = True
            out["top_layer"] = top["layer"]
    # an update-size outlier (layer_outlier on `update_norm`) names its layer; the gradient shares do not show it
    upd = next(
        (f.layer for f in inc.findings if f.kind == "layer_outlier" and f.layer and "update_ratio" in f.facts), None
    )
    if upd:
        out["top_layer"] = upd
        mine = at.filter(pl.col("layer") == upd) if sq.height else None
        out["layer_top_share"] = _f(mine.get_column("share")[0]) if mine is not None and mine.height else None
    zf = window.filter(pl.col("zero_frac").is_not_null()).join(base, on="layer", how="left")
    if zf.height:
        row = zf.sort("zero_frac", descending=True).row(0, named=True)
        out["zero_frac_max"] = _f(row["zero_frac"])
        out["zero_frac_rise"] = _f(row["zero_frac"] - (row["zero_base"] or 0.0))
        out["layer_all_zero"] = row["zero_frac"] >= ap.zero_frac_stuck
    pf = window.filter(pl.col("pos_frac").is_not_null())
    if pf.height:
        # sign share among the non-zero elements (pos_frac counts > 0 over all elements, so a layer of
        # exact zeros would look "all negative"); layers mostly zero are not judged
        nonzero = 1 - pl.col("zero_frac").fill_null(0.0)
        pf = pf.filter(nonzero >= 1 - ap.sign_max_zero_frac).with_columns(
            (pl.col("pos_frac") / nonzero).alias("pos_share")
        )
        stuck = (
            pf.group_by("layer")
            .agg(pl.col("pos_share").mean())
            .filter((pl.col("pos_share") >= ap.sign_stuck) | (pl.col("pos_share") <= 1 - ap.sign_stuck))
        )
        out["sign_stuck"] = stuck.height > 0
    return out


def _lr_still_rising(lr: pl.DataFrame, lo: int, peak: int) -> bool:
    """The LR rose, never fell, from `lo` to `peak` (at least two records), and a later record is higher still."""
    lr = lr if lr.get_column("step").flags["SORTED_ASC"] else lr.sort("step")
    ramp = step_window(lr, lo, peak).get_column("value")
    later = step_window(lr, peak + 1, None).get_column("value")
    if ramp.len() < 2 or later.len() == 0:
        return False
    rose = float(ramp[-1]) > float(ramp[0]) and bool((ramp.diff().drop_nulls() >= 0).all())
    return rose and float(later.max()) > float(ramp[-1])


def _lr_schedule(lr: pl.DataFrame, attempt: int, ctx: RunContext, ap: AttributionParams):
    """(the attempt's LR records sorted by step with their running max, the first decayed step, the
    warmup cut, the warmup's last step). Warmup ends where the decay starts; without any decay, a
    warmup never lasts past `warmup_max_frac` of the run, so the LR rising after that is a schedule
    fault too."""
    first_pass = lr.filter(pl.col("attempt") == attempt)
    first_pass = first_pass if first_pass.height else lr
    seq = first_pass.sort("step").with_columns(pl.col("value").cum_max().alias("cmax"))
    decayed = seq.filter(pl.col("value") < 0.9 * pl.col("cmax"))
    decay_step = int(decayed.get_column("step")[0]) if decayed.height else None
    cut = decay_step
    if cut is None and ctx.first_step is not None and ctx.last_step is not None:
        cut = int(ctx.first_step + ap.warmup_max_frac * (ctx.last_step - ctx.first_step))
    warm = seq if cut is None else seq.filter(pl.col("step") < cut)
    warm = warm if warm.height else seq
    finite = warm.filter(pl.col("value").is_finite())  # a NaN LR has no place in the warmup
    top = float(finite.get_column("value").max()) if finite.height else 0.0
    near_top = finite.filter(pl.col("value") >= top - 0.01 * abs(top))  # 0.99 x top, for a negative LR too
    warm_end = int((near_top if near_top.height else warm).get_column("step")[0])
    return seq, decay_step, cut, warm_end


def _next_ratio(loss: pl.DataFrame, attempt: int, onset: int, end: int) -> float | None:
    """The first finite loss after `end` / the last finite loss before `onset` (same attempt)."""
    same = loss.filter((pl.col("attempt") == attempt) & pl.col("value").is_finite())
    before = same.filter(pl.col("step") < onset).get_column("value")
    after = same.filter(pl.col("step") > end).get_column("value")
    if before.len() == 0 or after.len() == 0 or before[-1] <= 0:
        return None
    return float(after[0]) / float(before[-1])


def dynamics_features(inc: Incident, run: RunData, ctx: RunContext, ap: AttributionParams, start_max_step: int) -> dict:
    """Position in training, drift before, plateau after, and the LR schedule around the incident.
    "Early" and the warmup length are judged only for a log that begins at the start of training
    (first step <= `start_max_step`): an excerpt from step 7000 has no "start" of its own."""
    on, w = _onset(inc), ap.baseline_window
    out = {
        "drift_before": None,
        "plateau_after": None,
        "loss_next_ratio": None,
        "train_frac": None,
        "onset_frac": None,
        "early": False,
        "lr_at_peak": None,
        "lr_trend_before": None,
        "in_warmup": False,
        "lr_still_rising": False,
        "warmup_steps": None,
        "lr_rising_late": False,
        "lr_late_rise": None,
        "lr_restart": False,
    }
    recent = _median(_at(ctx.grad, inc.attempt, on - w, on - 1))
    older = _median(_at(ctx.grad, inc.attempt, on - 3 * w, on - w - 1))
    if recent is not None and older:
        out["drift_before"] = recent / older
    before = _median(_at(ctx.loss, inc.attempt, on - w, on - 1))
    after = _median(_at(ctx.loss, inc.attempt, inc.step_end + 1, inc.step_end + ap.plateau_window))
    if before and after is not None:
        out["plateau_after"] = after / before
    out["loss_next_ratio"] = _next_ratio(ctx.loss, inc.attempt, on, inc.step_end)
    if ctx.first_step is not None and ctx.last_step is not None and ctx.last_step > ctx.first_step:
        out["train_frac"] = (inc.peak_step - ctx.first_step) / (ctx.last_step - ctx.first_step)
        out["early"] = out["train_frac"] <= ap.early_frac and ctx.first_step <= start_max_step
        out["onset_frac"] = max(0.0, (on - ctx.first_step) / (ctx.last_step - ctx.first_step))
    lr = ctx.once("lr_finite", lambda: ctx.lr.filter(pl.col("value").is_finite()))
    if lr.height:
        # the attempt's LR by step, its decay and warmup: the same for every incident of that attempt
        seq, decay_step, cut, warm_end = ctx.once(
            ("lr_schedule", inc.attempt), lambda: _lr_schedule(lr, inc.attempt, ctx, ap)
        )
        at = step_window(seq, None, inc.peak_step)
        if at.height:
            out["lr_at_peak"] = float(at.get_column("value")[-1])
            prev = step_window(seq, on - w, on - 1)
            if prev.height and prev.get_column("value")[0] > 0:
                out["lr_trend_before"] = out["lr_at_peak"] / float(prev.get_column("value")[0]) - 1
            out["in_warmup"] = inc.peak_step <= warm_end and (out["lr_trend_before"] or 0) > 0
            out["lr_still_rising"] = _lr_still_rising(seq, on - w, inc.peak_step)
            first_lr_step = int(seq.get_column("step")[0])
            out["warmup_steps"] = warm_end - first_lr_step if first_lr_step <= start_max_step else None
            if cut is not None:
                late = (
                    step_window(seq, cut, inc.peak_step)
                    .filter(pl.col("value") > 0)
                    .with_columns(pl.col("value").cum_min().alias("cmin"))
                )
                if late.height:
                    out["lr_late_rise"] = float((late.get_column("value") / late.get_column("cmin")).max())
                    limit = ap.lr_rise_after_decay if decay_step is not None else ap.lr_rise_no_decay
                    out["lr_rising_late"] = out["lr_late_rise"] > limit
        if lr.get_column("attempt").n_unique() > 1:
            # LR of the first record of each later attempt vs the last LR of the attempt before it
            firsts = (
                lr.group_by("attempt")
                .agg(pl.col("value").first().alias("f"), pl.col("value").last().alias("l"))
                .sort("attempt")
            )
            jumps = firsts.with_columns((pl.col("f") / pl.col("l").shift(1)).alias("j")).get_column("j").drop_nulls()
            out["lr_restart"] = bool((jumps > 2.0).any())
    return out


# --- all together -----------------------------------------------------------------------------


def incident_features(
    inc: Incident,
    run: RunData,
    ctx: RunContext,
    tc: TraceContext,
    params: Params,
    incidents: list[Incident],
    samples: pl.DataFrame | None = None,
) -> dict:
    """Every feature in FEATURES for one incident (samples: tracing.rank_samples output, computed if None)."""
    ap = params.attribution
    out: dict = {}
    out.update(shape_features(inc, incidents, ctx, ap))
    out.update(rank_features(inc, ctx, ap))
    out.update(hardware_features(inc, run, ctx, ap))
    out.update(replay_features(inc, ctx, ap))
    if samples is None:
        confined = out["peak_rank"] if out["rank_confined"] and out["peak_rank"] >= 0 else None
        samples = rank_samples(inc, tc, params.tracing, confined)
    out.update(sample_features(inc, run, ctx, tc, params, samples))
    out.update(clip_features(inc, ctx, params))
    out.update(precision_features(inc, run, ctx, ap))
    out.update(layer_features(inc, run, ctx, ap, out.get("peak_grad_ratio")))
    out.update(dynamics_features(inc, run, ctx, ap, params.hard_spike.start_max_step))
    facts = run._cache.get("log_facts")
    if facts is None:
        facts = run._cache["log_facts"] = log_facts(run, params)
    out.update({k: v for k, v in facts.items() if k != "fp16"})
    # a precision the log declares settles what the loss-scale trajectory could only suggest
    out["fp16"] = bool(ctx.fp16 or facts["fp16"])
    out["hw_evidence"] = bool(
        (out["multi_rank"] and (out["rank_confined"] or out["rank_mismatch"]))
        or out["xid_count"] > 0
        or out["ecc_delta"] > 0
        or out["hw_event_count"] > 0
        or out["xid_unplaced_weight"] > 0
        or out["ecc_run_delta"] > 0
        or out["fatal_hw_event"]
        or out["fatal_collective_timeout"]
        or out["replay_recurred"] is False
        or out["sample_replay_recurred"] is False
    )
    missing = set(FEATURES) - set(out)
    assert not missing, f"features not computed: {sorted(missing)}"
    return {k: out[k] for k in FEATURES}
