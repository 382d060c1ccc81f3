"""frames.py: the copy-free filter and sort give what `filter` and `sort` give, sharing the frame when they can."""

import polars as pl
from polars.testing import assert_frame_equal

from spikeforensics.frames import in_order, one_group, ordered, per_group, rows_where


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
