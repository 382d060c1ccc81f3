"""Run-level views that every incident's features share, computed once per run.

`RunContext` holds the step-level series (one value per attempt and step, medians over
ranks when the log only has per-rank rows), the per-rank rows, the set of steps that
belong to an incident (everything else is "healthy"), the step -> wall-clock map used to
align kernel and telemetry events, and the clip threshold in effect. Pure: built from a
`RunData`, the incidents and the parameters; nothing here reads files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from spikeforensics.detect.base import Incident
from spikeforensics.params import Params
from spikeforensics.rundata import RunData

STEP_SCHEMA = {"attempt": pl.Int32, "step": pl.Int64, "value": pl.Float64, "time": pl.Datetime("us")}


@dataclass
class RunContext:
    loss: pl.DataFrame  # attempt, step, value, time (one row per attempt x step)
    grad: pl.DataFrame  # same, global grad norm (logged, else derived from the layer dump)
    grad_derived: bool
    lr: pl.DataFrame
    loss_scale: pl.DataFrame
    per_rank: pl.DataFrame  # signal ("loss" / "grad_norm" / "layer_norm"), attempt, step, rank, value
    unhealthy: pl.DataFrame  # `lo`, `hi`: the (padded) warning+ incident windows, merged, disjoint, sorted
    step_time: pl.DataFrame  # attempt, step, time (where the log prints wall-clock times)
    first_step: int | None
    last_step: int | None
    n_ranks: int
    fp16: bool
    clip_threshold: float | None  # max_norm in effect (params, detector facts, or inferred)
    clip_threshold_source: str
    memo: dict = field(default_factory=dict, repr=False)  # run-level values shared by every incident

    def once(self, key, compute):
        """A run-level value computed for the first incident that needs it and reused by the others
        (so an incident's cost does not grow with the run's length)."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    def healthy(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Rows of a step-level frame whose step is outside every incident."""
        return outside_windows(frame, self.unhealthy)


def merged_windows(windows: list[tuple[int, int]]) -> pl.DataFrame:
    """(lo, hi) step windows -> disjoint sorted `lo`, `hi` rows (overlapping or touching ones merged). Kept as
    intervals, never enumerated: an incident that runs to a garbled step of 2e7 is one row, not 2e7."""
    if not windows:
        return pl.DataFrame(schema={"lo": pl.Int64, "hi": pl.Int64})
    w = pl.DataFrame(windows, schema={"lo": pl.Int64, "hi": pl.Int64}, orient="row").sort("lo")
    new = (pl.col("lo") > pl.col("hi").cum_max().shift(1) + 1).fill_null(True)
    return w.group_by(new.cum_sum().alias("_g")).agg(pl.col("lo").min(), pl.col("hi").max()).sort("lo").drop("_g")


def outside_windows(frame: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Rows of `frame` whose `step` lies in none of the disjoint `windows` (`merged_windows`), in the frame's
    order; rows without a step are kept."""
    if windows.height == 0 or frame.height == 0:
        return frame
    tagged = frame.with_row_index("_row")
    stepped = tagged.filter(pl.col("step").is_not_null()).sort("step")
    hit = stepped.join_asof(windows.sort("lo"), left_on="step", right_on="lo", strategy="backward")
    inside = hit.filter(pl.col("hi").is_not_null() & (pl.col("step") <= pl.col("hi"))).select("_row")
    return tagged.join(inside, on="_row", how="anti").sort("_row").drop("_row")


def step_window(frame: pl.DataFrame, lo: int | None, hi: int | None) -> pl.DataFrame:
    """Rows with lo <= step <= hi (None: open), in the frame's order: a binary search when the step
    column is flagged sorted (a run without resumes, see `build_context`), else a filter."""
    lo = -(2**62) if lo is None else lo
    hi = 2**62 if hi is None else hi
    steps = frame.get_column("step")
    if frame.height and steps.flags["SORTED_ASC"] and steps.null_count() == 0:
        a, b = int(steps.search_sorted(lo, "left")), int(steps.search_sorted(hi, "right"))
        return frame.slice(a, max(0, b - a))
    return frame.filter(pl.col("step").is_between(lo, hi))


def _flag_sorted(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with its step column flagged sorted when it is (checked once here)."""
    steps = frame.get_column("step")
    if frame.height and steps.null_count() == 0 and steps.is_sorted():
        return frame.with_columns(pl.col("step").set_sorted())
    return frame


def step_level(frame: pl.DataFrame) -> pl.DataFrame:
    """One value per (attempt, step): the frame itself, or the median over ranks."""
    if frame.height == 0:
        return pl.DataFrame(schema=STEP_SCHEMA)
    rows = frame.filter(pl.col("step").is_not_null()) if frame.get_column("step").null_count() else frame
    if rows.get_column("rank").null_count() == rows.height:
        out = rows.select("attempt", "step", "value", "time")
        if _one_row_per_step(out):  # nothing to drop: the series' own columns are shared, not copied
            return out.cast(STEP_SCHEMA)
    else:
        out = (
            rows.group_by("attempt", "step")
            .agg(pl.col("value").median(), pl.col("time").min(), pl.col("t").min())
            .sort("t")
            .drop("t")
        )
    return out.unique(subset=["attempt", "step"], keep="first", maintain_order=True).cast(STEP_SCHEMA)


def _one_row_per_step(frame: pl.DataFrame) -> bool:
    """One attempt and strictly increasing steps: `unique` on (attempt, step) would keep every row."""
    steps = frame.get_column("step")
    return frame.get_column("attempt").n_unique() == 1 and bool((steps.diff().drop_nulls() > 0).all())


def _per_rank(run: RunData) -> pl.DataFrame:
    frames = []
    for name in ("loss", "grad_norm"):
        rows = run.series(name, per_rank=True).filter(pl.col("rank").is_not_null())
        if rows.height:
            frames.append(rows.select(pl.lit(name).alias("signal"), "attempt", "step", "rank", "value"))
    layers = run.layers.filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null())
    if layers.height:
        frames.append(
            layers.group_by("step", "rank")
            .agg((pl.col("grad_norm") ** 2).sum().sqrt().alias("value"))
            .select(
                pl.lit("layer_norm").alias("signal"),
                pl.lit(0, dtype=pl.Int32).alias("attempt"),
                "step",
                "rank",
                "value",
            )
        )
    schema = {"signal": pl.String, "attempt": pl.Int32, "step": pl.Int64, "rank": pl.Int32, "value": pl.Float64}
    if not frames:
        return pl.DataFrame(schema=schema)
    return pl.concat([f.cast(schema) for f in frames])


def _n_ranks(run: RunData) -> int:
    ranks = set(run.ranks()) | set(run.batches.get_column("rank").drop_nulls().unique().to_list())
    return len(ranks)


def infer_clip_threshold(run: RunData, incidents: list[Incident], params: Params) -> tuple[float | None, str]:
    """The clip max_norm in effect: the parameter, a detector's fact, or the logged clipped norm."""
    if params.calibration.current_clip_norm > 0:
        return float(params.calibration.current_clip_norm), "parameter calibration.current_clip_norm"
    configured = getattr(getattr(params, "clipping", None), "threshold", 0.0) or 0.0
    if configured > 0:
        return float(configured), "parameter clipping.threshold"
    for inc in incidents:
        for f in inc.findings:
            value = f.facts.get("clip_threshold")
            if isinstance(value, (int, float)) and value > 0:
                return float(value), f"{f.kind} detector"
    pre = step_level(run.series("grad_norm"))
    post = step_level(run.series("grad_norm_clipped"))
    if pre.height and post.height:
        both = pre.join(post, on=["attempt", "step"], suffix="_post").filter(
            pl.col("value").is_finite()
            & pl.col("value_post").is_finite()
            & (pl.col("value_post") < pl.col("value") * (1 - 1e-6))
        )
        if both.height:
            return float(both.get_column("value_post").median()), "logged post-clip grad norm"
    return None, "unknown"


def uses_loss_scaling(loss_scale: pl.DataFrame) -> bool:
    """A loss scale other than 1 was logged. Megatron and DeepSpeed print `loss scale: 1.0` for
    bf16/fp32 runs too, so a scale that is 1 throughout means no fp16 loss scaling."""
    finite = loss_scale.filter(pl.col("value").is_finite())
    return finite.filter(pl.col("value") != 1.0).height > 0


def build_context(run: RunData, incidents: list[Incident], params: Params) -> RunContext:
    pad = params.attribution.pad_steps
    grad, derived = run.grad_norm_series()
    unhealthy = merged_windows([(i.step_start - pad, i.step_end + pad) for i in incidents if i.severity != "info"])
    step_time = (
        run.metrics.lazy()  # lazily: only attempt, step and time are taken out of the long table
        .filter(pl.col("time").is_not_null() & pl.col("step").is_not_null() & pl.col("record").is_not_null())
        .group_by("attempt", "step")
        .agg(pl.col("time").min())
        .sort("time")
        .collect()
    )
    first, last, _ = run.step_range()
    loss_scale = step_level(run.series("loss_scale"))
    fp16 = uses_loss_scaling(loss_scale) or run.events_of("overflow", "hysteresis").height > 0
    clip, clip_source = infer_clip_threshold(run, incidents, params)
    return RunContext(
        loss=_flag_sorted(step_level(run.series("loss"))),
        grad=_flag_sorted(step_level(grad)),
        grad_derived=derived,
        lr=_flag_sorted(step_level(run.series("lr"))),
        loss_scale=loss_scale,
        per_rank=_per_rank(run),
        unhealthy=unhealthy,
        step_time=step_time,
        first_step=first,
        last_step=last,
        n_ranks=_n_ranks(run),
        fp16=fp16,
        clip_threshold=clip,
        clip_threshold_source=clip_source,
    )
