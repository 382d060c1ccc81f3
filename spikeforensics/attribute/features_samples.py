"""Evidence features of the samples in the incident's batches (via tracing.py): the top
suspect's score, loss ratio, recurrence and exoneration, non-finite per-sample losses,
replay of the sample's step, source/length enrichment, and the data-mix shift before onset.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.attribute._feature_helpers import _f, _onset
from spikeforensics.attribute.context import RunContext
from spikeforensics.attribute.tracing import TraceContext, consumed_samples_range, skip_candidates
from spikeforensics.detect.base import Incident
from spikeforensics.params import Params
from spikeforensics.rundata import RunData


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
