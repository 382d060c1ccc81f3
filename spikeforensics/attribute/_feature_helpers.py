"""Small helpers the feature families share: a finite float, the median of finite values,
an incident's rows in a step window of its own attempt, and the incident's onset step."""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.attribute.context import step_window
from spikeforensics.detect.base import Incident


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
