"""Sample tracing: incident -> steps -> (rank, micro-batch) -> sample IDs, ranked by suspicion.

The batch manifest (`run.batches`: step, rank, micro, sample_id, sample_loss, tokens,
sample_source) says which samples each optimizer step consumed; gradient accumulation
(several micro-batches) and several ranks are just more rows of the same step. For an
incident we take its *implicated steps* (onset to peak, plus the step before: a bad
batch damages the weights the next step uses) and score every sample in them:

    score = step weight (peak / earlier / later step: w_peak, w_before, w_after)
          + w_recurrence x other spike incidents the sample is also in    (recurrence = data)
          + w_corroborated when the detector's chance test tied it to several bumps (recurrence.py)
          - w_healthy    x healthy steps the sample was seen in (max 4)     (exoneration, soft)
          + w_loss       x log2(sample loss / max(healthy per-sample loss, step's 10th percentile))
          + w_loss_abs   x log2(sample loss / healthy per-sample loss)   (a whole batch of bad data still
                                                                          stands above healthy data)
          + w_nonfinite  when the sample's own loss is NaN/Inf
          + w_rank       when it sat on the rank the incident is confined to
          + w_source     x log2(enrichment of its source in spike batches vs healthy ones)
          + w_length     x |log2(its tokens / the run's median tokens)|, capped (too long or nearly empty)
          + w_empty_nonfinite when the incident has a NaN/Inf and the sample has no tokens at all
                         (a per-sample mean over zero target tokens is 0/0)
          - w_replay_clean when the step was replayed and the sample's loss came out normal

A sample *stands out on its own loss* (`own_outlier`) when its loss clears `outlier_bar` (2x, or
the healthy samples' P99.9 over their step median if higher) times the healthy per-sample loss and,
after the peak, times its step's 10th percentile too; or when its own loss is NaN/Inf. The
incident's later steps (a run of bad batches) enter only through such samples, and every one of
them goes to the skip list, past its usual limit of 5.

Without a manifest, `consumed_samples_range` turns the log's consumed-samples counter
into the sample index range of the implicated steps. Everything here is polars over the
manifest; the only Python loop is over incidents.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import polars as pl

from spikeforensics.attribute.context import outside_windows
from spikeforensics.detect import signals
from spikeforensics.detect.base import Incident
from spikeforensics.params import Params, TracingParams
from spikeforensics.rundata import RunData

SAMPLE_COLUMNS = {
    "sample_id": pl.String,
    "score": pl.Float64,
    "step": pl.Int64,
    "rank": pl.Int32,
    "micro": pl.Int32,
    "sample_loss": pl.Float64,
    "loss_ratio": pl.Float64,
    "recurrence": pl.Int64,
    "healthy_seen": pl.Int64,
    "source": pl.String,
    "source_enrichment": pl.Float64,
    "tokens": pl.Int64,
    "own_nonfinite": pl.Boolean,
    "own_outlier": pl.Boolean,
    "replay_loss": pl.Float64,
    "replay_ratio": pl.Float64,
    "place": pl.Int64,
}
# the evidence that orders samples whose scores tie (within `tie_tol`), strongest first; samples equal on all
# of it share a `place` (see `_places`)
TIE_BREAK = (
    ("own_nonfinite", True),
    ("own_outlier", True),
    ("_lr", True),
    ("recurrence", True),
    ("healthy_seen", False),
)


def implicated_steps(incident: Incident, params: TracingParams, interval: int = 1, max_span: int = 8) -> list[int]:
    """Steps whose batches may have caused the incident: onset..peak (at most `max_span`) plus the step(s) before,
    and the same around the peak of every other warning+ finding grouped into it.

    `interval` is the log's step cadence: a loss printed every k steps averages (or samples)
    the k steps since the previous record, so all of them are implicated. At most
    `params.max_implicated_steps` are returned: the ones nearest the incident's peak.
    """
    cap = params.max_implicated_steps
    interval = min(interval, cap)
    onset = incident.facts.get("onset")
    start = int(onset) if isinstance(onset, (int, float)) and onset <= incident.peak_step else incident.step_start
    start = max(start, incident.peak_step - max(max_span, interval) + 1)
    start = min(start, incident.peak_step - interval + 1)
    steps = set(range(start - params.steps_before, incident.peak_step + 1))
    # an incident can group several events (a corroborated bump beside a louder spike): each warning+
    # finding's own peak, its log interval and the step before are implicated too
    for f in incident.findings:
        if f.severity not in ("info", "ok") and f.peak_step != incident.peak_step and f.attempt == incident.attempt:
            steps.update(range(f.peak_step - interval + 1 - params.steps_before, f.peak_step + 1))
    if len(steps) > cap:
        steps = set(sorted(steps, key=lambda s: (abs(s - incident.peak_step), s))[:cap])
    return sorted(steps)


@dataclass
class TraceContext:
    """Run-level manifest statistics shared by all incidents."""

    batches: pl.DataFrame  # the manifest, one row per (step, rank, micro, sample)
    membership: pl.DataFrame  # incident, sample_id: samples in each incident's implicated steps
    healthy_seen: pl.DataFrame  # sample_id, healthy_seen
    source_enrichment: pl.DataFrame  # source, source_enrichment, spike_share, healthy_share
    median_tokens: float | None
    spike_tokens_ratio: float | None  # mean tokens in spike batches / in healthy batches
    interval: int = 1  # steps between logged records
    healthy_loss: pl.DataFrame | None = None  # step, loss: median per-sample loss of each healthy step
    outlier_bar: float = 2.0  # loss ratio a sample must reach to stand out on its own loss (own_outlier)

    @property
    def has_manifest(self) -> bool:
        return self.batches.height > 0


def build_trace_context(
    run: RunData, incidents: list[Incident], unhealthy: pl.DataFrame, params: Params
) -> TraceContext:
    tp = params.tracing
    interval = signals.record_interval(run)
    keys = ["step", "rank", "micro", "sample_id"]
    rows, replayed = run.manifest(params.tracing)
    # a replayed step (resume from a checkpoint) appears again later in the manifest: keep the first
    # pass, and the loss the same sample had when the step was trained again
    if replayed:
        replays = (
            rows.group_by(keys, maintain_order=True)
            .agg(pl.len().alias("_n"), pl.col("sample_loss").last().alias("replay_loss"))
            .filter(pl.col("_n") > 1)
            .drop("_n")
        )
        batches = rows.unique(subset=keys, keep="first", maintain_order=True).join(
            replays, on=keys, how="left", nulls_equal=True
        )
    else:
        batches = rows.with_columns(pl.lit(None, pl.Float64).alias("replay_loss"))
    implicated = {inc.id: implicated_steps(inc, tp, interval) for inc in incidents}
    inc_steps = pl.DataFrame(
        {
            "incident": [i for i, s in implicated.items() for _ in s],
            "step": [x for s in implicated.values() for x in s],
        },
        schema={"incident": pl.String, "step": pl.Int64},
    )
    membership = inc_steps.join(batches.select("step", "sample_id"), on="step").select("incident", "sample_id").unique()
    healthy = outside_windows(batches, unhealthy)
    # exoneration is only asked of the incidents' own samples
    healthy_seen = (
        healthy.join(membership.select("sample_id").unique(), on="sample_id", how="semi")
        .group_by("sample_id")
        .agg(pl.col("step").n_unique().alias("healthy_seen"))
    )
    spike = batches.join(inc_steps.select("step").unique(), on="step")
    enrichment = pl.DataFrame(schema={"source": pl.String, "source_enrichment": pl.Float64})
    if batches.get_column("sample_source").null_count() < batches.height and spike.height and healthy.height:
        share = lambda f, name: f.group_by(pl.col("sample_source").alias("source")).agg(  # noqa: E731
            (pl.len() / f.height).alias(name), pl.len().alias(f"{name}_n")
        )
        enrichment = (
            share(spike, "spike_share")
            .filter(pl.col("spike_share_n") >= params.attribution.enrichment_min_batches)
            .join(share(healthy, "healthy_share"), on="source", how="left")
            .with_columns(
                (
                    pl.col("spike_share")
                    / pl.col("healthy_share").fill_null(0).clip(lower_bound=1.0 / max(healthy.height, 1))
                ).alias("source_enrichment")
            )
        )
    tokens = batches.get_column("tokens").drop_nulls()
    median_tokens = float(tokens.median()) if tokens.len() else None
    spike_ratio = None
    if (
        median_tokens
        and spike.get_column("tokens").drop_nulls().len()
        and healthy.get_column("tokens").drop_nulls().len()
    ):
        spike_ratio = float(spike.get_column("tokens").mean()) / max(float(healthy.get_column("tokens").mean()), 1e-9)
    finite = pl.col("sample_loss").is_not_null() & pl.col("sample_loss").is_finite()
    # the per-sample loss reference: healthy steps in the window before each incident (see
    # healthy_sample_loss); over the whole run only when some incident has none before it
    firsts = [s[0] for s in implicated.values()]
    windows = pl.DataFrame(
        {"step": sorted({x for f in firsts for x in range(f - tp.loss_ref_window, f)})}, schema={"step": pl.Int64}
    )
    with_loss = healthy.filter(finite)
    near = with_loss.join(windows, on="step", how="semi")
    every_window_has_steps = all(
        near.filter(pl.col("step").is_between(f - tp.loss_ref_window, f - 1)).height for f in firsts
    )
    source = near if every_window_has_steps else with_loss
    healthy_loss = source.group_by("step").agg(pl.col("sample_loss").median().alias("loss")).sort("step")
    # how far above its step's median a healthy sample's loss goes (mixed sources: a copy task sits far
    # above arithmetic): a sample must clear this too before it counts as an outlier on its own loss
    tail = (
        source.select(
            (pl.col("sample_loss") / pl.col("sample_loss").median().over("step")).quantile(tp.own_outlier_tail_quantile)
        ).item()
        if source.height
        else None
    )
    outlier_bar = max(tp.own_outlier_ratio, float(tail) if tail is not None and math.isfinite(tail) else 0.0)
    return TraceContext(
        batches, membership, healthy_seen, enrichment, median_tokens, spike_ratio, interval, healthy_loss, outlier_bar
    )


def healthy_sample_loss(incident: Incident, tc: TraceContext, params: TracingParams) -> float | None:
    """Typical per-sample loss before the incident: median over the healthy steps of the
    `loss_ref_window` steps before its first implicated step (else over all healthy steps)."""
    if tc.healthy_loss is None or tc.healthy_loss.height == 0:
        return None
    first = implicated_steps(incident, params, tc.interval)[0]
    before = tc.healthy_loss.filter(pl.col("step").is_between(first - params.loss_ref_window, first - 1))
    rows = before if before.height else tc.healthy_loss
    value = rows.get_column("loss").median()
    return float(value) if value is not None and math.isfinite(value) and value > 0 else None


def rank_samples(
    incident: Incident, tc: TraceContext, params: TracingParams, confined_rank: int | None = None
) -> pl.DataFrame:
    """The incident's samples, most suspicious first (columns SAMPLE_COLUMNS)."""
    if not tc.has_manifest:
        return pl.DataFrame(schema=SAMPLE_COLUMNS)
    steps = implicated_steps(incident, params, tc.interval)
    # the incident's later steps too (a run of bad batches), but only for samples that stand out in
    # their own step (below): after the peak every sample's loss is up with the damaged weights
    after = [
        s
        for s in range(incident.peak_step + 1, min(incident.step_end, incident.peak_step + params.after_peak_span) + 1)
        if s not in steps
    ]
    rows = tc.batches.filter(pl.col("step").is_in(steps + after))
    if rows.height == 0:
        return pl.DataFrame(schema=SAMPLE_COLUMNS)
    # A bad sample stands out from normal data: compare its loss with the larger of the healthy
    # per-sample loss before the incident and a low quantile of its step. The quantile follows a
    # batch-wide rise (LR, hardware: every sample's loss goes up together), while several bad
    # samples in one batch cannot inflate it the way they inflate the step median.
    finite_loss = pl.when(pl.col("sample_loss").is_finite()).then(pl.col("sample_loss"))
    step_low = finite_loss.quantile(params.loss_ref_quantile, "lower").over("step")
    ref = healthy_sample_loss(incident, tc, params)
    denom = step_low if ref is None else pl.max_horizontal(step_low, pl.lit(ref))
    rows = rows.with_columns(
        (pl.col("sample_loss") / denom).alias("loss_ratio"),
        (pl.col("replay_loss") / denom).alias("replay_ratio"),
        (pl.col("sample_loss") / ref if ref is not None else pl.lit(None, pl.Float64)).alias("_abs_ratio"),
    )
    recurrence = (
        tc.membership.filter(pl.col("incident") != incident.id).group_by("sample_id").agg(pl.len().alias("recurrence"))
    )
    rows = (
        rows.join(recurrence, on="sample_id", how="left")
        .join(tc.healthy_seen, on="sample_id", how="left")
        .join(
            tc.source_enrichment.select("source", "source_enrichment"),
            left_on="sample_source",
            right_on="source",
            how="left",
        )
        .with_columns(
            pl.col("recurrence").fill_null(0).cast(pl.Int64),
            pl.col("healthy_seen").fill_null(0).cast(pl.Int64),
            pl.col("source_enrichment").fill_null(1.0),
        )
    )
    log2 = lambda e: (e.clip(lower_bound=1.0)).log(2).fill_null(0.0).fill_nan(0.0)  # noqa: E731
    peaks = [incident.peak_step] + [f.peak_step for f in incident.findings if f.severity not in ("info", "ok")]
    step_weight = (
        pl.when(pl.col("step").is_in(peaks))
        .then(params.w_peak)
        .when(pl.col("step").is_in(after))
        .then(params.w_after)
        .otherwise(params.w_before)
    )
    # a NaN/Inf of the sample's own, while most of its step is finite (once the weights are NaN every
    # sample's loss is NaN, and that says nothing about any one of them)
    nonfinite = (
        pl.col("sample_loss").is_not_null()
        & ~pl.col("sample_loss").is_finite()
        & (pl.col("sample_loss").is_finite().fill_null(False).mean().over("step") >= 0.5)
    )
    rank_hit = pl.lit(False) if confined_rank is None else (pl.col("rank") == confined_rank).fill_null(False)
    corroborated = [str(x) for x in incident.facts.get("corroborated_by") or []]
    # extreme length either way: very long documents, or empty / all-padding ones (0/0 losses)
    tok = pl.col("tokens").cast(pl.Float64)
    length = (
        log2(pl.max_horizontal(tok / tc.median_tokens, tc.median_tokens / tok)).clip(upper_bound=params.length_cap_log2)
        if tc.median_tokens
        else pl.lit(0.0)
    )
    # an empty document (every target masked) makes a per-sample mean loss 0/0: in a NaN/Inf incident
    # it is a suspect on its own, even when no per-sample loss was recorded
    empty_in_nan = (pl.col("tokens") == 0).fill_null(False) & pl.lit("nonfinite" in incident.kinds)
    # the step was replayed and this sample's loss came out finite and well below its first pass
    replay_clean = pl.col("replay_loss").is_finite() & (
        ~pl.col("sample_loss").is_finite() | (pl.col("replay_loss") < params.replay_clean_frac * pl.col("sample_loss"))
    )
    # its own loss stands out (ratio >= tc.outlier_bar) over the healthy per-sample level, and, after
    # the peak, also over its step's low quantile (the damaged weights lift every sample there; a step
    # of nothing but junk, at or before the peak, has no normal quantile); or its own NaN/Inf.
    # (Ratios must be finite: polars orders NaN above every number.)
    rel = pl.when(pl.col("loss_ratio").is_finite()).then(pl.col("loss_ratio"))
    abs_ratio = pl.when(pl.col("_abs_ratio").is_finite()).then(pl.col("_abs_ratio"))
    absolute = abs_ratio.fill_null(rel)  # no healthy reference: the step-relative ratio
    own_outlier = nonfinite | (
        (absolute >= tc.outlier_bar) & ((pl.col("step") <= incident.peak_step) | (rel >= tc.outlier_bar))
    )
    rows = rows.with_columns(nonfinite.alias("own_nonfinite"), own_outlier.fill_null(False).alias("own_outlier"))
    rows = rows.filter(~pl.col("step").is_in(after) | pl.col("own_outlier"))
    rows = rows.with_columns(
        (
            step_weight
            + params.w_loss * log2(pl.col("loss_ratio"))
            + params.w_loss_abs * log2(abs_ratio)
            + pl.when(pl.col("own_nonfinite")).then(params.w_nonfinite_loss).otherwise(0.0)
            - pl.when(replay_clean.fill_null(False)).then(params.w_replay_clean).otherwise(0.0)
            + pl.when(rank_hit).then(params.w_rank).otherwise(0.0)
            + pl.when(pl.col("sample_id").is_in(corroborated)).then(params.w_corroborated).otherwise(0.0)
            + params.w_source * log2(pl.col("source_enrichment"))
            + params.w_length * length
            + pl.when(empty_in_nan).then(params.w_empty_nonfinite).otherwise(0.0)
        ).alias("row_score")
    )
    out = (
        rows.sort(
            ["row_score", "step"], descending=[True, False], maintain_order=True
        )  # a sample's best row, earliest on a tie
        .group_by("sample_id", maintain_order=True)
        .agg(pl.all().first())
        .with_columns(
            (
                pl.col("row_score")
                + params.w_recurrence * pl.col("recurrence")
                - params.w_healthy * pl.col("healthy_seen").clip(upper_bound=4)
            ).alias("score"),
            pl.col("sample_source").alias("source"),
        )
    )
    return _places(out, params.tie_tol).select(list(SAMPLE_COLUMNS)).cast(SAMPLE_COLUMNS)


def _places(samples: pl.DataFrame, tie_tol: float) -> pl.DataFrame:
    """Most suspicious first, ties kept as ties, never broken by sample ID.

    Scores within `tie_tol` of the first score of their group tie (greedy from the top: a group is never
    wider than `tie_tol`). Inside a group the further evidence decides, in `TIE_BREAK` order: the sample's
    own NaN/Inf, its own loss standing out, its loss ratio (with per-sample losses no two samples of a
    group tie), other spike incidents it is in, fewer healthy steps it was seen in. Samples equal on all of
    that share a `place` (1-based, like a sports ranking: 1, 1, 1, 4, ...); within a place they follow the
    score (differences below `tie_tol`), then a fixed pseudo-random order (CRC-32 of the sample ID): neither
    is evidence, and neither the ID's alphabetical order nor the position in the batch (a data generator may
    put its bad samples first) can make a tie look like a ranking."""
    if samples.height == 0:
        return samples.with_columns(pl.lit(None, pl.Int64).alias("place"))
    shuffle = pl.Series(
        "_shuffle", [zlib.crc32(str(x).encode()) for x in samples.get_column("sample_id")], dtype=pl.Int64
    )
    samples = samples.with_columns(shuffle).sort(["score", "_shuffle"], descending=[True, False], nulls_last=True)
    groups, anchor, g = [], None, 0
    for score in samples.get_column("score").to_list():  # one pass over the incident's samples (a few thousand)
        if anchor is None or score is None or not score >= anchor - tie_tol:
            g, anchor = g + 1, score
        groups.append(g)
    keys = [k for k, _ in TIE_BREAK]
    samples = samples.with_columns(
        pl.Series("_tol", groups, dtype=pl.Int64),
        pl.when(pl.col("loss_ratio").is_finite()).then(pl.col("loss_ratio")).alias("_lr"),
    ).sort(
        ["_tol", *keys, "score", "_shuffle"],
        descending=[False, *(d for _, d in TIE_BREAK), True, False],
        nulls_last=True,
    )
    new = pl.any_horizontal([pl.col(k).ne_missing(pl.col(k).shift(1)) for k in ["_tol", *keys]]) | (
        pl.int_range(pl.len()) == 0
    )
    return samples.with_columns(pl.when(new).then(pl.int_range(1, pl.len() + 1)).forward_fill().alias("place"))


def consumed_samples_range(run: RunData, incident: Incident, params: TracingParams, interval: int = 1) -> dict | None:
    """[start, end) sample indices of the implicated steps, from the log's consumed-samples counter."""
    cs = run.series("consumed_samples")
    if cs.height == 0:
        return None
    cs = cs.filter(pl.col("attempt") == incident.attempt) if incident.attempt in cs.get_column("attempt") else cs
    steps = implicated_steps(incident, params, interval)
    before = cs.filter(pl.col("step") < steps[0]).sort("step")
    last = max(steps[-1], incident.peak_step)
    upto = cs.filter(pl.col("step") <= last).sort("step")
    if upto.height == 0:
        return None
    end = upto.get_column("value")[-1]
    start = before.get_column("value")[-1] if before.height else 0.0
    if not (math.isfinite(end) and math.isfinite(start)):
        return None
    return {
        "start": int(start),
        "end": int(end),
        "steps": [steps[0], last],
        "note": "samples consumed from the end of step %d to the end of step %d" % (steps[0] - 1, last),
    }


def skip_candidates(
    samples: pl.DataFrame, score_frac: float, limit: int = 5, tie_tol: float = 1e-9, max_outliers: int = 0
) -> list[str]:
    """Sample IDs worth skipping on resume: those scoring within `score_frac` of the top one, at most
    `limit` - except that samples tied with the last one kept (sharing its `place`, or scoring within
    `tie_tol` of it) are never cut off: without per-sample losses a whole micro-batch can tie, and skipping
    half of it may leave the bad sample in; which half would be decided by nothing but the listing order.
    With `max_outliers`, every sample whose own loss stands out (`own_outlier`) is added too, up to
    that many: a step with 25 corrupted documents needs all 25 skipped, each on its own evidence."""
    if samples.height == 0:
        return []
    top = samples.get_column("score")[0]
    if top is None or top <= 0:
        return []
    near = samples.filter(pl.col("score") >= top * score_frac)
    if near.height > limit:
        last = near.get_column("score")[limit - 1]
        tied = pl.col("score") >= last - tie_tol
        if "place" in near.columns and near.get_column("place").null_count() == 0:
            tied = tied | (pl.col("place") <= near.get_column("place")[limit - 1])
        near = near.filter(tied)
    picked = near.get_column("sample_id").to_list()
    if max_outliers and "own_outlier" in samples.columns:
        own = samples.filter(pl.col("own_outlier").fill_null(False)).head(max_outliers).get_column("sample_id")
        seen = set(picked)
        picked += [x for x in own if x not in seen]
    return picked


def listed_count(samples: pl.DataFrame, params: TracingParams) -> int:
    """How many of the ranked samples an incident lists: `max_samples`, or more when more samples stand
    out on their own loss (each of them is implicated by its own evidence)."""
    own = int(samples.get_column("own_outlier").sum()) if "own_outlier" in samples.columns and samples.height else 0
    return max(params.max_samples, min(own, params.skip_max_outliers))
