"""The series the detectors share, with their robust baselines, computed once per run.

`loss` and `grad_norm` (logged, or derived from the per-layer dump and said so) as
global or per-rank timelines, and per-layer norm timelines, each through
`robust.add_baseline`. Results are cached on the `RunData` (keyed by the series
parameters), so ten detectors do not recompute the same rolling medians.
"""

from __future__ import annotations

from dataclasses import astuple

import polars as pl

from spikeforensics.detect import robust
from spikeforensics.frames import in_order, rows_where
from spikeforensics.rundata import RunData

__all__ = ["in_order", "rows_where"]  # (re-exported: the detectors call them as `signals.*`)

DERIVED_NOTE = "derived from the per-layer dump (L2 over layers)"


def one_track(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows of one track of a timeline: the global rows (rank null), or when the log has only rank-level
    rows, those of the lowest rank."""
    if frame.height and frame.get_column("rank").null_count() == 0:
        return rows_where(frame, pl.col("rank") == frame.get_column("rank").min())
    return rows_where(frame, pl.col("rank").is_null())


# the detectors' own cached frames (timelines, baselines, layer frames, the loss-answer rows): nothing after
# detection reads them (attribution and the report read `RunData.series`)
DETECTOR_FRAMES = ("sf-raw", "sf-base", "sf-layers", "sf-layer-base", "sf-loss-answer")


def release(run: RunData, kinds: tuple[str, ...] | None = None) -> None:
    """Drop the detectors' cached frames from `run`: all of them (`kinds` None) once every detector has run (the
    timelines and baselines, most of a long run's memory, that attribution and the report would otherwise carry:
    issues 14/16), else those of `kinds`, each a DETECTOR_FRAMES name, or `name:series` for one series' frames
    (`sf-base:grad_norm`). A later caller computes them again, the same."""
    wanted = [tuple(k.split(":")) for k in (DETECTOR_FRAMES if kinds is None else kinds)]
    for key in [k for k in run._cache if isinstance(k, tuple) and any(k[: len(w)] == w for w in wanted)]:
        del run._cache[key]


def _floor(name: str, params) -> float:
    return params.series.sigma_floor_loss if name == "loss" else params.series.sigma_floor_grad


def raw(run: RunData, name: str, per_rank: bool = False) -> tuple[pl.DataFrame, bool]:
    """The prepared timeline of `name` (see `robust.prepare`) and whether it was derived.

    per_rank=True returns only rank-level rows (empty when the log has none)."""
    key = ("sf-raw", name, per_rank)
    if key in run._cache:
        return run._cache[key]
    derived = False
    if name == "grad_norm" and not per_rank:
        series, derived = run.grad_norm_series()
    else:
        series = run.series(name, per_rank=per_rank)
        if per_rank:
            series = series.filter(pl.col("rank").is_not_null())
        if name == "grad_norm" and per_rank and series.height == 0 and run.layers.height:
            series = _derived_per_rank(run)  # per-rank norms from a per-rank layer dump
            derived = series.height > 0
    if name == "loss" and run.loss_without_ratio():
        # a signed objective (a policy-gradient / PPO actor loss, a negative log-likelihood bound) or one
        # side of a GAN's pair has no ratio scale: the log-ratio tests of the detectors do not apply to it
        series = series.head(0)
    out = robust.prepare(series), derived
    run._cache[key] = out
    return out


def _derived_per_rank(run: RunData) -> pl.DataFrame:
    ranked = run.layer_l2_norms().filter(pl.col("rank").is_not_null())
    if ranked.get_column("rank").n_unique() < 2:
        return run.series("grad_norm").head(0)
    out = ranked.sort("rank", "step").with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).over("rank").alias("t"),
        pl.lit(0, pl.Int32).alias("attempt"),
        pl.lit(None, pl.Datetime("us")).alias("time"),
    )
    return out.select("t", "step", "attempt", "rank", "value", "line", "source", "time")


def with_baseline(run: RunData, name: str, params, per_rank: bool = False) -> tuple[pl.DataFrame, bool]:
    """`raw()` plus the two-sided robust baseline columns (finite, positive values only). The cache holds them
    without the two z columns, which each call computes again (the same values): a caller holds them while it
    reads them, the run does not (issues 14/16: two float columns, 160 MB per baseline at 10M records)."""
    key = ("sf-base", name, per_rank, astuple(params.series))
    if key not in run._cache:
        run._cache[key] = _baseline(run, name, per_rank, params)
    frame, derived = run._cache[key]
    return frame.with_columns(robust.z_scores()), derived


def _baseline(run: RunData, name: str, per_rank: bool, params) -> tuple[pl.DataFrame, bool]:
    frame, derived = raw(run, name, per_rank)
    window, guard, min_side = short_series_windows(frame, params)
    out = (
        robust.add_baseline(
            # (no detector reads a baseline's log line or clock: a series with non-finite records, whose
            # baseline is a filtered copy, does not copy those two columns)
            frame.drop("line", "time", strict=False),
            window=window,
            guard=guard,
            min_side=min_side,
            mad_window=params.series.mad_window,
            sigma_floor=_floor(name, params),
        ).drop("z_left", "z"),
        derived,
    )
    return out


def short_series_windows(frame: pl.DataFrame, params) -> tuple[int, int, int]:
    """(window, guard, min_side): the configured ones, shrunk for a series shorter than 4 windows
    (a pasted excerpt of a few records still gets a before/after comparison)."""
    sp = params.series
    n = frame.group_by("rank").len().get_column("len").max() if frame.height else 0
    if not n or n >= 4 * sp.window:
        return sp.window, sp.guard, sp.min_side
    window = max(2, n // 4)
    guard = min(sp.guard, window // 4)
    return window, guard, max(1, min(sp.min_side, (window - guard) // 2))


def layer_frame(run: RunData) -> pl.DataFrame:
    """Per-layer rows with `pos` (= step; layer dumps carry no attempt), sorted by layer, rank, step."""
    key = ("sf-layers",)
    if key in run._cache:
        return run._cache[key]
    layers = run.layers
    if layers.height:
        layers = (
            layers.filter(pl.col("step").is_not_null())
            .sort("layer", "rank", "step", nulls_last=True)
            .with_columns(
                pl.col("step").cast(pl.Int64).alias("pos"),
                pl.lit(0, pl.Int32).alias("attempt"),
            )
        )
    run._cache[key] = layers
    return layers


def layer_baseline(run: RunData, params) -> pl.DataFrame:
    """Per-layer grad-norm timelines with `y` = log(norm) and the robust baseline columns, per (layer, rank)."""
    key = ("sf-layer-base", astuple(params.series))
    if key in run._cache:
        return run._cache[key]
    layers = layer_frame(run)
    if layers.height == 0:
        out = layers
    else:
        sp = params.series
        layers = layers.with_columns(
            pl.when(pl.col("grad_norm").is_finite() & (pl.col("grad_norm") > 0))
            .then(pl.col("grad_norm").log())
            .alias("y"),
            pl.concat_str(pl.col("layer"), pl.col("rank").cast(pl.String).fill_null("-"), separator="@").alias("_key"),
        )
        out = robust.add_baseline(
            layers,
            window=sp.window,
            guard=sp.guard,
            min_side=sp.min_side,
            mad_window=sp.mad_window,
            sigma_floor=sp.sigma_floor_grad,
            by="_key",
        )
    run._cache[key] = out
    return out


def record_interval(run: RunData) -> int:
    """Steps between consecutive training records (the median gap of the loss's steps, else the grad
    norm's; 1 without step counters): a log printing every 10 steps has its neighbouring records 10 apart."""
    key = ("sf-record-interval",)
    if key not in run._cache:
        gap = 1
        for name in ("loss", "grad_norm"):
            steps = run.series(name).filter(pl.col("attempt") == 0).get_column("step").drop_nulls().unique().sort()
            if steps.len() > 1:
                gap = max(1, int(steps.diff().drop_nulls().median()))
                break
        run._cache[key] = gap
    return run._cache[key]


def has_ranks(frame: pl.DataFrame) -> bool:
    return frame.height > 0 and frame.get_column("rank").drop_nulls().n_unique() > 1


def fp16_evidence(run: RunData) -> bool:
    """Does the log show dynamic fp16 loss scaling (a scale other than 1 that changes, overflow events)?"""
    if run.events_of("overflow", "hysteresis").height:
        return True
    scale = run.series("loss_scale").get_column("value").drop_nulls()
    return scale.len() > 0 and (scale.n_unique() > 1 or float(scale.max()) > 1.0)
