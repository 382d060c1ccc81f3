"""Shrink long series for display without hiding what matters.

A 10,000,000-step run cannot be drawn point by point in a browser, and a plain
stride (every k-th step) would skip exactly the one-step spike the report is
about. So, pure polars, frame in and frame out:

- `minmax_buckets`: split the x range into equal buckets and keep, per bucket, the
  row with the smallest and the row with the largest y. Every local extreme that
  stands out at display resolution survives (the global max and min always do).
- `downsample_series`: the above for the run overview, except that rows inside the
  given windows (incidents) are kept at full resolution, and the non-finite rows are
  returned separately so they can be listed and marked, never silently dropped.
- `nonfinite_rows` / `step_ranges`: NaN/Inf rows, and consecutive steps collapsed to
  ranges (a NaN storm of 100,000 steps is one line "1200-101199", not 100,000).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

# Most points kept inside one incident window; a longer window (a run-wide drift)
# is bucketed to this many points itself, and the report says so.
WINDOW_MAX_POINTS = 4000


@dataclass
class Downsampled:
    """A series ready to draw: finite points, plus what was left out and how."""

    frame: pl.DataFrame  # columns x, y: finite values only, sorted by x
    nonfinite: pl.DataFrame  # columns x, kind ("nan" | "inf" | "-inf")
    n_in: int  # finite rows in the input
    downsampled: bool  # True when some finite rows were bucketed away

    @property
    def n_out(self) -> int:
        return self.frame.height


def _xy(frame: pl.DataFrame, x: str, y: str) -> pl.DataFrame:
    return frame.select(pl.col(x).cast(pl.Float64).alias("x"), pl.col(y).cast(pl.Float64).alias("y"))


def nonfinite_rows(frame: pl.DataFrame, x: str = "x", y: str = "y") -> pl.DataFrame:
    """Rows whose y is NaN, +Inf or -Inf, as (x, kind), sorted by x."""
    xy = _xy(frame, x, y)
    return (
        xy.filter(pl.col("y").is_not_null() & ~pl.col("y").is_finite())
        .select(
            "x",
            pl.when(pl.col("y").is_nan())
            .then(pl.lit("nan"))
            .when(pl.col("y") > 0)
            .then(pl.lit("inf"))
            .otherwise(pl.lit("-inf"))
            .alias("kind"),
        )
        .sort("x")
    )


def minmax_buckets(frame: pl.DataFrame, max_points: int, x: str = "x", y: str = "y") -> pl.DataFrame:
    """Keep the min-y and max-y row of each of `max_points // 2` equal-width x buckets.

    Input rows must have finite y. Output columns x, y sorted by x; at most
    `max_points` rows; unchanged (but sorted) when already small enough.
    """
    xy = _xy(frame, x, y)
    if xy.height <= max_points:
        return xy.sort("x")
    buckets = max(1, max_points // 2)
    lo, hi = xy.get_column("x").min(), xy.get_column("x").max()
    span = (hi - lo) or 1.0
    bucket = ((pl.col("x") - lo) * buckets / span).floor().clip(0, buckets - 1).cast(pl.Int64)
    agg = (
        xy.with_columns(bucket.alias("_b"))
        .group_by("_b")
        .agg(
            pl.col("x").get(pl.col("y").arg_min()).alias("x_lo"),
            pl.col("y").min().alias("y_lo"),
            pl.col("x").get(pl.col("y").arg_max()).alias("x_hi"),
            pl.col("y").max().alias("y_hi"),
        )
    )
    return (
        pl.concat(
            [
                agg.select(pl.col("x_lo").alias("x"), pl.col("y_lo").alias("y")),
                agg.select(pl.col("x_hi").alias("x"), pl.col("y_hi").alias("y")),
            ]
        )
        .unique(maintain_order=False)
        .sort("x", "y")
    )


def in_windows(windows: list[tuple[float, float]], col: str = "x") -> pl.Expr:
    """True for rows whose `col` falls in any [lo, hi] window (inclusive)."""
    expr = pl.lit(False)
    for lo, hi in windows:
        expr = expr | pl.col(col).is_between(lo, hi)
    return expr


def downsample_series(
    frame: pl.DataFrame,
    x: str,
    y: str,
    max_points: int,
    windows: list[tuple[float, float]] | None = None,
) -> Downsampled:
    """Overview points of one series: min/max buckets outside `windows`, full resolution inside.

    Non-finite rows are returned apart (`Downsampled.nonfinite`), whatever their x.
    """
    xy = _xy(frame, x, y).filter(pl.col("x").is_not_null() & pl.col("y").is_not_null())
    bad = nonfinite_rows(xy)
    good = xy.filter(pl.col("y").is_finite())
    n_in = good.height
    if n_in <= max_points:
        return Downsampled(good.sort("x"), bad, n_in, False)
    windows = windows or []
    inside_mask = in_windows(windows)
    inside = good.filter(inside_mask)
    outside = good.filter(~inside_mask)
    parts = [minmax_buckets(outside, max_points)]
    for lo, hi in windows:
        part = inside.filter(pl.col("x").is_between(lo, hi))
        parts.append(minmax_buckets(part, WINDOW_MAX_POINTS))
    out = pl.concat(parts).unique().sort("x", "y")
    return Downsampled(out, bad, n_in, out.height < n_in)


def window_series(frame: pl.DataFrame, x: str, y: str, lo: float, hi: float) -> Downsampled:
    """One incident window: every row in [lo, hi], bucketed only past WINDOW_MAX_POINTS."""
    xy = _xy(frame, x, y).filter(pl.col("x").is_between(lo, hi) & pl.col("y").is_not_null())
    bad = nonfinite_rows(xy)
    good = xy.filter(pl.col("y").is_finite())
    out = minmax_buckets(good, WINDOW_MAX_POINTS)
    return Downsampled(out, bad, good.height, out.height < good.height)


def step_ranges(steps: pl.Series | list) -> list[tuple[int, int, int]]:
    """Distinct integer steps collapsed into runs: [(first, last, count), ...]."""
    s = pl.Series("s", steps, dtype=pl.Float64).drop_nulls().cast(pl.Int64).unique().sort()
    if s.len() == 0:
        return []
    runs = (
        s.to_frame()
        .with_columns((pl.col("s").diff().fill_null(1) != 1).cum_sum().alias("g"))
        .group_by("g", maintain_order=True)
        .agg(pl.col("s").min().alias("a"), pl.col("s").max().alias("b"), pl.len().alias("n"))
    )
    return list(zip(runs.get_column("a").to_list(), runs.get_column("b").to_list(), runs.get_column("n").to_list()))


def format_ranges(ranges: list[tuple[int, int, int]], limit: int | None = None) -> str:
    """ "5, 9-12, 40" from step ranges; with `limit`, the rest is counted, not listed."""
    shown = ranges if limit is None else ranges[:limit]
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b, _ in shown)
    if limit is not None and len(ranges) > limit:
        rest = sum(n for _, _, n in ranges[limit:])
        text += f" and {rest} more steps in {len(ranges) - limit} more ranges"
    return text
