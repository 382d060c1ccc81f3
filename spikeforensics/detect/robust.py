"""Robust statistics shared by the detectors (all vectorised; O(n log w) on a series).

- `prepare` turns a `RunData.series()` frame into a timeline with `y = log(value)`.
- `add_baseline` gives every point a two-sided robust baseline that *excludes the point
  and a guard band around it* (so a single spike cannot hide in its own median), and a
  robust noise scale; z-scores follow (DETECTION-ANCHORS §2.2).
- `flag_groups` turns flagged rows into contiguous groups (a spike of several steps).
- `binned` / `mann_kendall` / `theil_sen` are the super-linear tools; they only ever see a
  binned series.
- `rolling_scale` is the residual scale (exact on short series, sampled on long ones);
  `strided_rolling_median` and `settled_step` are helpers for slowly moving scales and for
  the end of the early phase.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from spikeforensics.frames import one_group, per_group

MAD_SCALE = 1.4826  # MAD -> sigma for normal data
ATTEMPT_SPAN = 10**12
MIN_SCALE_POINTS = 10  # a robust scale from fewer points is dominated by the event itself
# why: the residual scale is an exact rolling median of every residual (each sigma is the median of the
# same number of them) on series up to this many records (~0.1 s); longer series sample every k-th
# residual (SCALE_SAMPLES per window) to stay linear-time on a million records
EXACT_SCALE_RECORDS = 20_000
SCALE_SAMPLES = 50  # why: on a long series every sigma is the median of 50 residuals spread over its window (as many for every record: consistent); the noise scale of a long run moves slowly


def step_noise(y: pl.Series) -> float:
    """The record-to-record noise of a log series: robust sigma of its differences between neighbouring records
    (median |difference| over 0.6745 sqrt 2), which a trend moves little."""
    return float(y.diff().drop_nulls().abs().median() or 0.0) / (0.6745 * math.sqrt(2))


def step_or_record() -> pl.Expr:
    """`step`, or the record index `t` where the log prints no step number: every detector numbers a step-less
    log's records so (its findings need a step)."""
    return pl.col("step").fill_null(pl.col("t"))


def prepare(series: pl.DataFrame) -> pl.DataFrame:
    """Timeline of one metric: sorted by rank then `t`, with `finite`, `y` = log(value) (null if <= 0 or non-finite)
    and `pos` (attempt-major step position, comparable across signals from one log)."""
    if series.height == 0:
        return series.with_columns(
            pl.lit(None, pl.Boolean).alias("finite"),
            pl.lit(None, pl.Float64).alias("y"),
            pl.lit(None, pl.Int64).alias("pos"),
        )
    series = series.with_columns(step_or_record())  # a log without step numbers: record index
    if not _in_order(series):  # a series already in order keeps its columns (shared, not copied)
        series = series.sort("rank", "t", nulls_last=True)
    return share_pos(
        series.with_columns(
            pl.col("value").is_finite().fill_null(False).alias("finite"),
            pl.when(pl.col("value").is_finite() & (pl.col("value") > 0)).then(pl.col("value").log()).alias("y"),
            position(pl.col("attempt"), pl.col("step")).alias("pos"),
        )
    )


def share_pos(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with `pos` holding the `step` column itself when they are equal (a run of one attempt: pos =
    step), not a second buffer of 8 bytes a row."""
    pos, step = frame.get_column("pos"), frame.get_column("step")
    if frame.height and step.dtype == pos.dtype and pos.equals(step):
        return frame.with_columns(step.alias("pos"))
    return frame


def _in_order(series: pl.DataFrame) -> bool:
    """One rank (or none) and `t` strictly increasing: sorting by rank, then `t` would change nothing."""
    t = series.get_column("t")
    return series.get_column("rank").n_unique() == 1 and t.null_count() == 0 and bool((t.diff().drop_nulls() > 0).all())


def position(attempt: pl.Expr, step: pl.Expr) -> pl.Expr:
    return attempt.fill_null(0).cast(pl.Int64) * ATTEMPT_SPAN + step.cast(pl.Int64)


def add_baseline(
    frame: pl.DataFrame,
    *,
    window: int,
    guard: int,
    min_side: int,
    mad_window: int,
    sigma_floor: float,
    col: str = "y",
    by: str = "rank",
) -> pl.DataFrame:
    """Add `left` (median of the W-g records before the point, its guard band excluded), `base` (the higher
    of that and the same median after it: a spike must stand above both its past and its future),
    `sigma` (robust scale, over `mad_window` records, of the residuals from the mean of both sides; floored) and `z_left`, `z` = (y - base) / sigma.
    The median after (`right`) serves `base` and `sigma` only: it is not kept (nor a z over it), so a cached
    baseline of a 10M-record series holds two columns (160 MB) fewer (issues 14/16).

    Rows with null `col` are dropped first (non-finite values are the nonfinite detector's job).
    """
    side = max(window - guard, 1)
    # a column without nulls is kept as it is (a filter that keeps every row still copies every column)
    data = frame.filter(pl.col(col).is_not_null()) if frame.get_column(col).null_count() else frame
    if data is not frame and "pos" in data.columns and "step" in data.columns:
        data = share_pos(data)  # the filter copied `pos` and `step` apart
    if data.height == 0:
        return data.with_columns(*(pl.lit(None, pl.Float64).alias(c) for c in ("left", "base", "sigma", "z_left", "z")))
    y = pl.col(col)
    over = per_group(data, by)  # (one group, a timeline's global rows: no window over a constant key)
    # trailing medians of the W-g records before the guard band, and the same on the reversed series
    data = data.with_columns(
        over(y.shift(guard + 1).rolling_median(side, min_samples=min_side)).alias("left"),
        over(y.reverse().shift(guard + 1).rolling_median(side, min_samples=min_side).reverse()).alias("right"),
    ).with_columns(
        (y - pl.mean_horizontal("left", "right")).abs().alias("_absdev"),
        over(pl.int_range(pl.len(), dtype=pl.Int64)).alias("_i"),
    )
    mad = rolling_scale(data, "_absdev", by, mad_window).with_columns((pl.col("_med") * MAD_SCALE).alias("sigma"))
    if one_group(data, by):
        # one group: `_i` is the row number, so each sampled scale goes to its row by index (a join of every
        # row's keys holds three columns and two index arrays of the run's length)
        sigma = pl.repeat(None, data.height, dtype=pl.Float64, eager=True).alias("sigma")
        data = data.with_columns(sigma.scatter(mad.get_column("_i"), mad.get_column("sigma")))
    else:
        # the scale joined onto the two key columns only, then set beside the others (a join of the whole
        # frame copies all of its columns)
        keys = data.select(by, "_i").join(
            mad.drop("_med"), on=[by, "_i"], how="left", nulls_equal=True, maintain_order="left"
        )
        data = data.with_columns(keys.get_column("sigma"))
    enough = over(pl.len()) >= MIN_SCALE_POINTS  # fewer points than this: no scale estimate, the floor
    data = data.with_columns(
        pl.when(enough)
        .then(
            over(pl.col("sigma").forward_fill().backward_fill()).fill_null(over(pl.col("_absdev").median()) * MAD_SCALE)
        )
        .fill_null(sigma_floor)
        .clip(lower_bound=sigma_floor)
        .alias("sigma"),
        pl.max_horizontal("left", "right").alias("base"),
    )
    return data.drop("_absdev", "_i", "right").with_columns(z_scores(col))


def z_scores(col: str = "y") -> list[pl.Expr]:
    """`z_left` = (y - left) / sigma and `z` = (y - base) / sigma: the last two columns of `add_baseline`."""
    y = pl.col(col)
    return [
        ((y - pl.col("left")) / pl.col("sigma")).alias("z_left"),
        ((y - pl.col("base")) / pl.col("sigma")).alias("z"),
    ]


def rolling_scale(data: pl.DataFrame, col: str, by: str, window: int) -> pl.DataFrame:
    """Centred rolling median of `col` over `window` records, full windows only, per `by` group: every
    value is the median of the same number of residuals, whichever record it belongs to. A group shorter
    than the window gets null (the caller takes the median of all its residuals, so a short run has one
    scale from every residual, not from a sample of them); records within half a window of a group's
    ends get null (the caller fills them from the nearest full window). Exact up to
    EXACT_SCALE_RECORDS records per group, else on every k-th record with >= SCALE_SAMPLES per window.
    Needs `_i` (0.. per group); returns (by, _i, _med) to join back."""
    window = max(1, window)
    data = data.select(by, "_i", col)
    lengths = data.group_by(by).len().get_column("len")
    if lengths.max() <= EXACT_SCALE_RECORDS:
        short, long = data, data.head(0)
    elif lengths.min() > EXACT_SCALE_RECORDS:
        short, long = data.head(0), data
    else:
        n = pl.len().over(by)
        short, long = data.filter(n <= EXACT_SCALE_RECORDS), data.filter(n > EXACT_SCALE_RECORDS)
    parts = []
    if short.height:
        parts.append(
            short.with_columns(
                pl.col(col).rolling_median(window, min_samples=window, center=True).over(by).alias("_med")
            )
        )
    if long.height:
        stride = max(1, window // SCALE_SAMPLES)
        win = max(1, window // stride)
        parts.append(
            long.filter(pl.col("_i") % stride == 0).with_columns(
                pl.col(col).rolling_median(win, min_samples=win, center=True).over(by).alias("_med")
            )
        )
    parts = [p.select(by, "_i", "_med") for p in parts] or [
        data.select(by, "_i", pl.lit(None, pl.Float64).alias("_med"))
    ]
    return pl.concat(parts, how="vertical_relaxed") if len(parts) > 1 else parts[0]


def strided_rolling_median(data: pl.DataFrame, col: str, by: str, window: int) -> pl.DataFrame:
    """Centred rolling median of `col` over `window` records, computed on every k-th record only
    (k = window / 50): for slowly moving scales this keeps a million-step series fast. Needs an
    `_i` column (0.. per `by` group); returns (by, _i, _med) on the sampled records, to join back."""
    stride = max(1, window // 50)
    sub = data.filter(pl.col("_i") % stride == 0).select(by, "_i", col)
    win = max(3, window // stride)
    return sub.with_columns(
        pl.col(col).rolling_median(win, min_samples=min(win, 5), center=True).over(by).alias("_med")
    ).select(by, "_i", "_med")


def flag_groups(flagged: pl.DataFrame, gap: int, by: list[str] | None = None) -> pl.DataFrame:
    """Number contiguous groups of flagged rows: a new group when `pos` jumps by more than `gap`
    (or `by` columns change). Input needs `pos`; returns it sorted with a `group` column."""
    keys = list(by or [])
    if flagged.height == 0:
        return flagged.with_columns(pl.lit(None, pl.Int64).alias("group"))
    flagged = flagged.sort([*keys, "pos"], nulls_last=True)
    new = (pl.col("pos").diff() > gap).fill_null(True)
    for key in keys:
        new = new | (pl.col(key).ne_missing(pl.col(key).shift(1))).fill_null(True)
    return flagged.with_columns(new.cast(pl.Int64).cum_sum().alias("group"))


def rows_for_steps(frame: pl.DataFrame, steps: int) -> int:
    """How many records cover `steps` optimizer steps (logs print every k steps)."""
    if frame.height < 2:
        return max(1, steps)
    diffs = frame.get_column("step").diff().drop_nulls()
    diffs = diffs.filter(diffs > 0)
    every = float(diffs.median()) if diffs.len() else 1.0
    return max(1, int(round(steps / max(every, 1.0))))


def binned(frame: pl.DataFrame, col: str, max_bins: int, by: list[str] | None = None) -> pl.DataFrame:
    """Median of `col` per bin of consecutive rows (per `by` group), <= max_bins bins per group.

    Columns: by..., `bin`, `value` (median), `step_first`, `step_last`, `n`."""
    keys = list(by or [])
    data = frame.filter(pl.col(col).is_not_null())
    if data.height == 0:
        return pl.DataFrame(
            schema={
                **{k: frame.schema[k] for k in keys},
                "bin": pl.Int64,
                "value": pl.Float64,
                "step_first": pl.Int64,
                "step_last": pl.Int64,
                "n": pl.UInt32,
            }
        )
    idx = pl.int_range(pl.len(), dtype=pl.Int64)
    size = (pl.len() / max_bins).ceil().cast(pl.Int64).clip(lower_bound=1)
    if keys:
        idx, size = idx.over(keys), size.over(keys)
    data = data.with_columns((idx // size).alias("bin"))
    return (
        data.group_by([*keys, "bin"], maintain_order=True)
        .agg(
            pl.col(col).median().alias("value"),
            pl.col("step").first().alias("step_first"),
            pl.col("step").last().alias("step_last"),
            pl.len().alias("n"),
        )
        .sort([*keys, "bin"])
    )


def mann_kendall(values: np.ndarray) -> tuple[float, float]:
    """Monotone-trend test: Kendall tau of the values against time, and its two-sided p-value."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size < 4 or np.ptp(values) == 0:
        return 0.0, 1.0
    from scipy import stats  # here, not at import: ~1.5 s that most diagnoses never need

    tau, p = stats.kendalltau(np.arange(values.size), values)
    return float(tau), float(p if math.isfinite(p) else 1.0)


def theil_sen(values: np.ndarray, x: np.ndarray | None = None) -> float:
    """Robust slope (median of pairwise slopes). O(n^2): call on binned series only."""
    values = np.asarray(values, dtype=float)
    x = np.arange(values.size, dtype=float) if x is None else np.asarray(x, dtype=float)
    ok = np.isfinite(values) & np.isfinite(x)
    if ok.sum() < 3:
        return 0.0
    from scipy import stats  # here, not at import: ~1.5 s that most diagnoses never need

    return float(stats.theilslopes(values[ok], x[ok]).slope)


def settled_step(frame: pl.DataFrame, smooth: int, factor: float) -> int | None:
    """First step at which the rolling median of `value` comes within `factor` x the series median:
    the end of the early phase (large initial grad norms falling). None for an empty frame."""
    data = frame.filter(pl.col("value").is_finite()).sort("t")
    if data.height == 0:
        return None
    med = data.get_column("value").median()
    data = data.with_columns(pl.col("value").rolling_median(smooth, min_samples=1, center=True).alias("_s"))
    hit = data.filter(pl.col("_s") <= factor * med)
    return int((hit if hit.height else data).get_column("step")[0])


def tail_expected(frame: pl.DataFrame, inside: pl.DataFrame, hp) -> float:
    """How many records of the run's own noise are expected at or above the bump's highest z (`inside`: the
    bump's records). The tail is read from two bands of the run's other records, [a, a+1) and [a+1, a+2) robust
    sigma (a = bump_tail_from_z): their ratio is its decay per sigma (log-linear, an exponential tail), the
    upper band's count with that decay its mass from a+1 on, extrapolated to the bump's z. Bands, not counts
    above a level: other spikes far out (25 one-batch jumps at 40 sigma) are no part of the noise and must not
    flatten the tail they are tested against. 0 when the upper band holds fewer than bump_tail_min_records or
    the tail does not fall."""
    z_peak = inside.get_column("z").fill_nan(None).max()
    if z_peak is None:
        return 0.0
    own = inside.select("attempt", "step")
    others = frame.join(own, on=["attempt", "step"], how="anti").get_column("z").fill_nan(None).drop_nulls()
    a = hp.bump_tail_from_z
    low = int(others.is_between(a, a + 1, closed="left").sum())
    high = int(others.is_between(a + 1, a + 2, closed="left").sum())
    if high < hp.bump_tail_min_records or low <= high:
        return 0.0
    decay = math.log(low / high)  # per robust sigma
    mass = high / (1.0 - math.exp(-decay))  # records expected at >= a + 1
    return mass * math.exp(-decay * (float(z_peak) - (a + 1)))
