"""frames.py: the copy-free filter and sort give what `filter` and `sort` give, sharing the frame when they can."""

import numpy as np
import polars as pl
from polars.testing import assert_frame_equal

from spikeforensics.frames import in_order, in_slices, one_group, ordered, per_group, rows_where


def _frame() -> pl.DataFrame:
    return pl.DataFrame({"a": [0, 0, 1, 1, 2], "t": [0, 1, 2, 3, 4], "v": [None, 1.0, 2.0, None, 4.0]})


def test_rows_where_equals_filter():
    f = _frame()
    for keep in (pl.col("t") >= 0, pl.col("t") >= 2, pl.col("v").is_not_null(), pl.col("t") > 9, pl.col("t") == 1):
        assert_frame_equal(rows_where(f, keep), f.filter(keep))
    assert rows_where(f, pl.col("t") >= 0) is f  # every row kept: the frame itself


def test_ordered_and_in_order():
    f = _frame()
    assert ordered(f, "a", "t") and ordered(f, "t")
    assert in_order(f, "a", "t") is f
    assert not ordered(f, "a")  # ties: not strictly after
    back = f.reverse()
    assert not ordered(back, "t")
    assert_frame_equal(in_order(back, "t"), back.sort("t"))
    assert not ordered(f.with_columns(pl.lit(None, pl.Int64).alias("n")), "n")  # nulls: sorted as polars does


def test_per_group_is_over_with_several_groups():
    f = _frame()
    expr = pl.col("t").cum_sum()
    assert one_group(f.with_columns(pl.lit(None, pl.Int32).alias("r")), "r")
    assert not one_group(f, "a")
    assert_frame_equal(f.select(per_group(f, "a")(expr)), f.select(expr.over("a")))
    one = f.with_columns(pl.lit(3).alias("r"))
    assert_frame_equal(one.select(per_group(one, "r")(expr)), one.select(expr.over("r")))


def test_in_slices_equals_the_whole_query_and_reads_slices_of_the_stored_table(tmp_path):
    """Per-key sums and distinct keys over slices of a scanned Parquet table equal the query over the whole
    table, for slice sizes that cut keys, and one that holds the table; a filter inside the query applies per
    slice."""
    rng = np.random.default_rng(3)
    n = 1000
    frame = pl.DataFrame(
        {
            "key": rng.integers(0, 13, n),
            "name": rng.choice(["loss", "lr", "grad_norm"], n),
            "value": rng.normal(size=n),
        }
    )
    path = tmp_path / "t.parquet"
    frame.write_parquet(path, row_group_size=100)
    rows = pl.scan_parquet(path)

    def sums(piece):
        return piece.filter(pl.col("value") > 0).group_by("key").agg(pl.len().alias("n"), pl.col("value").sum())

    def combine(parts):
        return parts.group_by("key").agg(pl.col("n").sum(), pl.col("value").sum()).sort("key")

    whole = combine(sums(rows).collect())
    names = rows.select("name", "key").unique().collect().sort("name", "key")
    for slice_rows in (1, 37, 100, 999, 5000):
        got = in_slices(rows, sums, combine, slice_rows)
        assert got.get_column("n").to_list() == whole.get_column("n").to_list()
        assert np.allclose(got.get_column("value").to_numpy(), whole.get_column("value").to_numpy())
        distinct = in_slices(rows, lambda p: p.select("name", "key").unique(), pl.DataFrame.unique, slice_rows)
        assert distinct.sort("name", "key").equals(names)
