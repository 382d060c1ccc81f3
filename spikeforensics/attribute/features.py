"""Evidence features of one incident: named facts the rules in `rules/*.toml` test.

`incident_features(incident, run, ctx, tc, params)` is a pure function returning a
flat dict {feature name: bool | number | str | None}. `FEATURES` documents every name
(type and meaning) and is what the rule loader validates against, so a rule can only
name a feature that exists. `None` means "no data to say" and makes every condition on
that feature false.

Families (one helper each): incident shape and kinds (here); rank confinement, hardware
(Xid events, ECC counter deltas, temperature) in the incident's time window and replay
(the same step trained again after a resume) in `features_hardware.py`; samples
(recurrence, exoneration, loss share, source/length enrichment, via tracing.py) in
`features_samples.py`; clipping, loss scaling and layers (concentration, exact zeros,
stuck sign) in `features_gradients.py`; drift before, plateau after, position in training
and learning rate in `features_dynamics.py`. This module holds the catalogue and
assembles the families.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.attribute._feature_helpers import _at, _f, _median, _onset
from spikeforensics.attribute.context import RunContext
from spikeforensics.attribute.features_dynamics import dynamics_features
from spikeforensics.attribute.features_gradients import clip_features, layer_features, precision_features
from spikeforensics.attribute.features_hardware import hardware_features, rank_features, replay_features
from spikeforensics.attribute.features_samples import sample_features
from spikeforensics.attribute.log_facts import FACTS as LOG_FACTS
from spikeforensics.attribute.log_facts import log_facts
from spikeforensics.attribute.tracing import TraceContext, rank_samples
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
    "nonfinite_heldout_only": (
        B,
        "every non-finite value of the incident is a held-out measure (eval_loss ...) while the training loss "
        "stays finite on its records (detect/nonfinite.py fact heldout_only)",
    ),
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
        "nonfinite_heldout_only": any(f.facts.get("heldout_only") for f in inc.findings if f.kind == "nonfinite"),
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
    out.update(hardware_features(inc, run, ctx, ap, params.events.hardware_pattern))
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
