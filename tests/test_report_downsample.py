"""Display downsampling: extremes survive, incident windows stay whole, non-finite rows are listed."""

import math

import numpy as np
import polars as pl

from spikeforensics.report import downsample as ds


def _series(n, seed=0):
    rng = np.random.default_rng(seed)
    return pl.DataFrame({"step": np.arange(n), "value": rng.normal(1.0, 0.1, n)})


def test_minmax_keeps_global_and_bucket_extremes():
    frame = _series(100_000).with_columns(
        pl.when(pl.col("step") == 51_234)
        .then(99.0)
        .when(pl.col("step") == 7)
        .then(-50.0)
        .otherwise(pl.col("value"))
        .alias("value")
    )
    out = ds.minmax_buckets(frame, 1000, "step", "value")
    assert out.height <= 1000
    assert out.get_column("y").max() == 99.0 and out.filter(pl.col("y") == 99.0).get_column("x")[0] == 51_234
    assert out.get_column("y").min() == -50.0
    # every bucket's max survives: compare against a direct per-bucket max
    # same bucket edges as the implementation: 500 equal-width buckets over [0, 99_999]
    direct = (
        frame.with_columns((pl.col("step") * 500 / 99_999).floor().clip(0, 499).alias("b"))
        .group_by("b")
        .agg(pl.col("value").max())
    )
    kept = set(out.get_column("y").to_list())
    assert all(v in kept for v in direct.get_column("value").to_list())


def test_not_a_stride_single_step_spike_survives():
    frame = _series(1_000_001)
    frame = frame.with_columns(pl.when(pl.col("step") == 333_333).then(7.5).otherwise(pl.col("value")).alias("value"))
    d = ds.downsample_series(frame, "step", "value", 500)
    assert d.downsampled and d.n_out <= 500 + 10
    assert 333_333 in d.frame.get_column("x").cast(pl.Int64).to_list()


def test_small_series_untouched():
    frame = _series(300)
    d = ds.downsample_series(frame, "step", "value", 2000)
    assert not d.downsampled and d.n_out == 300


def test_every_nonfinite_row_is_listed_not_dropped():
    frame = _series(200_000)
    bad = {10: math.nan, 150_001: math.inf, 150_002: -math.inf, 199_999: math.nan}
    frame = frame.with_columns(
        pl.col("step")
        .replace_strict(list(bad), list(bad.values()), default=pl.col("value"), return_dtype=pl.Float64)
        .alias("value")
    )
    d = ds.downsample_series(frame, "step", "value", 1000)
    assert dict(
        zip(d.nonfinite.get_column("x").cast(pl.Int64).to_list(), d.nonfinite.get_column("kind").to_list())
    ) == {10: "nan", 150_001: "inf", 150_002: "-inf", 199_999: "nan"}
    assert d.frame.get_column("y").is_finite().all()
    assert d.n_in == 200_000 - 4


def test_incident_window_kept_at_full_resolution():
    frame = _series(500_000)
    d = ds.downsample_series(frame, "step", "value", 1000, windows=[(250_000, 250_300)])
    kept = set(d.frame.get_column("x").cast(pl.Int64).to_list())
    assert set(range(250_000, 250_301)) <= kept
    assert d.n_out < 1000 + 301 + 5


def test_window_series_full_resolution_and_nonfinite():
    frame = _series(10_000).with_columns(
        pl.when(pl.col("step") == 5005).then(float("nan")).otherwise(pl.col("value")).alias("value")
    )
    w = ds.window_series(frame, "step", "value", 4990, 5020)
    assert w.n_out == 30 and not w.downsampled
    assert w.nonfinite.get_column("x").to_list() == [5005.0]


def test_step_ranges_and_format():
    ranges = ds.step_ranges([5, 1, 2, 3, 9, 10, 3])
    assert ranges == [(1, 3, 3), (5, 5, 1), (9, 10, 2)]
    assert ds.format_ranges(ranges) == "1-3, 5, 9-10"
    assert ds.format_ranges(ranges, limit=1) == "1-3 and 3 more steps in 2 more ranges"
    assert ds.step_ranges([]) == []


def test_a_chart_draws_the_first_and_latest_attempts_of_a_log_restarted_thousands_of_times():
    """One trace per attempt, but not 2,000 of them (a fuzzed log copied 2,000 times drew 4,000 traces, a 24 MB
    page, 33 s): the first attempt and the latest MAX_ATTEMPT_TRACES - 1, split in one pass."""
    from spikeforensics.report import charts

    n_attempts = 300
    frame = pl.DataFrame(
        {
            "x": np.tile(np.arange(10), n_attempts).astype(float),
            "y": np.arange(10 * n_attempts, dtype=float),
            "attempt": np.repeat(np.arange(n_attempts), 10).astype(np.int32),
        }
    )
    parts, left_out = charts.attempt_parts(frame)
    drawn = [a for a, _ in parts]
    assert drawn == [0, *range(n_attempts - charts.MAX_ATTEMPT_TRACES + 1, n_attempts)]
    assert left_out == n_attempts - charts.MAX_ATTEMPT_TRACES
    assert all(p.get_column("y").to_list() == [10.0 * a + i for i in range(10)] for a, p in parts)
    few, none_left = charts.attempt_parts(frame.filter(pl.col("attempt") < 3))
    assert [a for a, _ in few] == [0, 1, 2] and none_left == 0


def test_a_big_run_restarted_many_times_is_cut_to_the_attempts_drawn_before_its_series_are_taken_out():
    """`charts.drawn_run`: a run held lazily (a big one) keeps only the attempts the charts draw, so the report
    of a log copied 20,000 times takes 12 copies' series out of the store, not 20,000 (1.2 GB -> 0.4 GB), and the
    charts still say how many attempts they left out. An eager (small) run is drawn as it is."""
    import dataclasses

    from spikeforensics.report import charts
    from spikeforensics.rundata import RunData

    n_attempts, per = 40, 10
    metrics = pl.DataFrame(
        {
            "step": np.tile(np.arange(per), n_attempts),
            "record": np.arange(per * n_attempts),
            "attempt": np.repeat(np.arange(n_attempts), per).astype(np.int32),
            "name": ["loss"] * (per * n_attempts),
            "value": np.linspace(3.0, 1.0, per * n_attempts),
            "line": np.arange(1, per * n_attempts + 1),
            "source": ["train.log"] * (per * n_attempts),
        }
    )
    run = RunData.from_frames(metrics=metrics)
    assert charts.drawn_run(run) is run
    lazy = dataclasses.replace(run, metrics=run.metrics.lazy(), _cache={})
    drawn = charts.drawn_run(lazy)
    kept = sorted(drawn.metrics.collect().get_column("attempt").unique().to_list())
    assert kept == [0, *range(n_attempts - charts.MAX_ATTEMPT_TRACES + 1, n_attempts)]
    assert drawn.attempts_left_out == n_attempts - charts.MAX_ATTEMPT_TRACES
    # the overview's note counts the attempts of the whole run, as it did when it split the whole series
    parts, left_out = charts.attempt_parts(charts.timeline(drawn.series("loss"))[0], drawn.attempts_left_out)
    whole_parts, whole_left_out = charts.attempt_parts(charts.timeline(run.series("loss"))[0])
    assert left_out == whole_left_out and [a for a, _ in parts] == [a for a, _ in whole_parts]
    assert all(p.equals(q) for (_, p), (_, q) in zip(parts, whole_parts))
