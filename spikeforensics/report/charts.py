"""Plotly figure specs (JSON-able dicts) for the report: the run overview and incident windows.

Each builder takes the run (and the diagnosis) and returns a `Figure`: plotly
`data` + `layout` as plain dicts/lists, plus the notes the page prints under it
(what was downsampled, which steps were non-finite). Nothing is rendered here:
the page embeds every spec once as JSON and draws it client-side with the one
embedded copy of plotly.js (templates/report.js).

Untrusted strings (layer names, hosts, sample IDs) are HTML-escaped before they go
into a plotly text field, because plotly interprets a few tags in labels; an
escaped `&lt;script&gt;` shows as the literal text. Colours are mid-tones that
read on light and dark backgrounds; report.js sets fonts and grid colours from
the page's CSS variables.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field, replace

import polars as pl

from spikeforensics.attribute.model import Calibration, DiagnosedIncident, Diagnosis
from spikeforensics.report import downsample as ds
from spikeforensics.report.text import as_float, fmt_num
from spikeforensics.rundata import RunData

# Okabe-Ito colour-blind-safe palette; every series also has a name in the legend.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#8C6D31", "#999999"]
SEVERITY_COLOURS = {"critical": "#d62728", "warning": "#e69f00", "info": "#56b4e9"}
# Log scale when the largest finite value exceeds the median by more than this factor:
# a 20x spike on a linear axis flattens the baseline into one line.
LOG_SCALE_RATIO = 20.0
# Steps of context shown on each side of an incident window, as a multiple of its width (min 20 steps).
WINDOW_PAD_FACTOR = 2.0
WINDOW_PAD_MIN = 20
# Incident window charts drawn at most (the others are listed with the overview only).
MAX_WINDOW_CHARTS = 12
# a chart draws at most this many attempts (the first and the latest): a log restarted thousands of times (a loop
# around the script, a fuzzed log copied 20,000 times) would otherwise draw thousands of traces
MAX_ATTEMPT_TRACES = 12
# A window with more points than this uses WebGL (scattergl), for at most MAX_GL_CHARTS charts.
GL_POINTS = 3000
MAX_GL_CHARTS = 3
# Incident shades annotated with their id in the overview (more would be unreadable).
MAX_SHADE_LABELS = 30
# Event kinds drawn on the overview's event strip, in display order.
STRIP_EVENTS = ("overflow", "hysteresis", "resume", "nccl_timeout", "xid", "ecc", "oom", "error")
SIG_DIGITS = 5


@dataclass
class Figure:
    id: str
    title: str
    data: list
    layout: dict
    height: int = 420
    notes: list[str] = field(default_factory=list)  # plain text, shown under the chart

    def spec(self) -> dict:
        layout = dict(self.layout)
        layout.setdefault("height", self.height)
        return {"data": self.data, "layout": layout}


def esc(text) -> str:
    """Escape an untrusted string for a plotly text field (shown literally)."""
    return html.escape(str(text), quote=False)


def timeline(series: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """x = the logged step (or the record index when the log prints no step), y, attempt.

    A series logged per rank only (no global rows) is folded to one value per step:
    the first non-finite value if any rank had one, else the max over ranks (the
    extreme is what the overview must show; the per-rank panel shows each rank).
    """
    if series.height and series.get_column("step").null_count() == 0:
        xcol, label = "step", "step"
    else:
        xcol, label = "t", "record #"
    frame = series.select(pl.col(xcol).alias("x"), pl.col("value").alias("y"), "attempt", "rank")
    if frame.get_column("rank").n_unique() > 1:
        bad = ~pl.col("y").is_finite()
        frame = (
            frame.group_by("attempt", "x")
            .agg(pl.when(bad.any()).then(pl.col("y").filter(bad).first()).otherwise(pl.col("y").max()).alias("y"))
            .sort("attempt", "x")
        )
    return frame.select("x", "y", "attempt"), label


def xy_lists(frame: pl.DataFrame) -> tuple[list, list]:
    """x as ints where integral, y rounded to SIG_DIGITS significant digits (NaN -> None)."""
    if frame.height == 0:
        return [], []
    xs = frame.get_column("x")
    if xs.dtype.is_float() and (xs.drop_nulls() == xs.drop_nulls().round(0)).all():
        xs = xs.cast(pl.Int64)
    ys = frame.select(pl.col("y").round_sig_figs(SIG_DIGITS)).get_column("y")
    return xs.to_list(), ys.to_list()


def wants_log(values: pl.Series) -> bool:
    finite = values.filter(values.is_finite() & (values > 0))
    if finite.len() == 0 or finite.len() < values.filter(values.is_finite()).len():
        return False
    return float(finite.max()) / float(finite.median()) > LOG_SCALE_RATIO


def line_trace(
    frame: pl.DataFrame,
    name: str,
    colour: str,
    yaxis: str = "y",
    xaxis: str = "x",
    gl: bool = False,
    width: float = 1.2,
    dash: str | None = None,
) -> dict:
    x, y = xy_lists(frame)
    line = {"color": colour, "width": width}
    if dash:
        line["dash"] = dash
    return {
        "type": "scattergl" if gl else "scatter",
        "mode": "lines",
        "name": name,
        "x": x,
        "y": y,
        "xaxis": xaxis,
        "yaxis": yaxis,
        "line": line,
        "hovertemplate": f"step %{{x}}<br>{name} %{{y}}<extra></extra>",
    }


def hline_trace(x0, x1, y, name: str, colour: str, yaxis: str, dash: str = "dash") -> dict:
    """A horizontal reference line drawn as a trace (data units on linear and log axes alike)."""
    return {
        "type": "scatter",
        "mode": "lines",
        "name": name,
        "x": [x0, x1],
        "y": [y, y],
        "yaxis": yaxis,
        "line": {"color": colour, "width": 1.5, "dash": dash},
        "hoverinfo": "name",
    }


def marker_trace(xs: list, ys: list, name: str, colour: str, yaxis: str, symbol: str = "x") -> dict:
    return {
        "type": "scatter",
        "mode": "markers",
        "name": name,
        "x": xs,
        "y": ys,
        "yaxis": yaxis,
        "marker": {"color": colour, "symbol": symbol, "size": 8},
        "hovertemplate": f"{name} at step %{{x}}<extra></extra>",
    }


# ---------------------------------------------------------------------------- inputs


def clip_threshold(diagnosis: Diagnosis) -> float | None:
    cal = diagnosis.calibration
    value = as_float(cal.current_clip_norm) if isinstance(cal, Calibration) else None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def recommended_clip(diagnosis: Diagnosis) -> float | None:
    cal = diagnosis.calibration
    value = as_float(cal.recommended_clip_norm) if isinstance(cal, Calibration) else None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def incident_window(inc: DiagnosedIncident) -> tuple[int, int]:
    a, b = int(inc.step_start), int(inc.step_end)
    pad = max(WINDOW_PAD_MIN, int((b - a + 1) * WINDOW_PAD_FACTOR))
    return a - pad, b + pad


def event_steps(run, kind: str) -> pl.Series:
    return run.events.filter((pl.col("kind") == kind) & pl.col("step").is_not_null()).get_column("step")


def thin_steps(steps: pl.Series, max_marks: int) -> list[int]:
    """Distinct steps; past `max_marks`, one mark per equal-width bucket (presence is what counts)."""
    s = steps.drop_nulls().unique().sort()
    if s.len() <= max_marks:
        return s.to_list()
    frame = s.cast(pl.Float64).to_frame("x").with_columns(pl.col("x").alias("y"))
    return ds.minmax_buckets(frame, max_marks).get_column("x").cast(pl.Int64).unique().sort().to_list()


# ---------------------------------------------------------------------------- overview


@dataclass
class SeriesInfo:
    """What the page says about one drawn series: downsampling and non-finite steps."""

    signal: str
    n_in: int
    n_out: int
    downsampled: bool
    nonfinite: pl.DataFrame  # x, kind
    xlabel: str = "step"


def _drawn_attempts(attempts: list[int]) -> list[int]:
    """Every attempt when there are at most MAX_ATTEMPT_TRACES, else the first and the latest."""
    return attempts if len(attempts) <= MAX_ATTEMPT_TRACES else [attempts[0], *attempts[1 - MAX_ATTEMPT_TRACES :]]


def drawn_run(run: RunData) -> RunData:
    """The run as the charts take it: a run held lazily (a big one) with more attempts than a chart draws is cut to
    the attempts drawn before any series is taken out of it (a log copied 20,000 times: 12 copies in memory, not
    20,000), and the attempts cut are counted in `attempts_left_out` for the charts' notes. Any other run as it is."""
    if not isinstance(run.metrics, pl.LazyFrame):
        return run
    column = pl.col("attempt").fill_null(0)
    attempts = sorted(run.metrics.select(column.unique()).collect().to_series().to_list())
    drawn = _drawn_attempts(attempts)
    if len(drawn) == len(attempts):
        return run
    return replace(
        run, metrics=run.metrics.filter(column.is_in(drawn)), _cache={}, attempts_left_out=len(attempts) - len(drawn)
    )


def attempt_parts(frame: pl.DataFrame, left_before: int = 0) -> tuple[list[tuple[int, pl.DataFrame]], int]:
    """A timeline split by attempt in one pass, in attempt order: every attempt when there are at most
    MAX_ATTEMPT_TRACES, else the first and the latest; and how many attempts were left out (with `left_before`,
    those cut before the timeline was taken: `drawn_run`)."""
    keyed = frame.with_columns(pl.col("attempt").fill_null(0).alias("_attempt"))
    attempts = sorted(keyed.get_column("_attempt").unique().to_list())
    drawn = _drawn_attempts(attempts)
    if len(drawn) < len(attempts):
        keyed = keyed.filter(pl.col("_attempt").is_in(drawn))
    parts = keyed.partition_by("_attempt", as_dict=True, maintain_order=True)
    return [(a, parts[(a,)].drop("_attempt")) for a in drawn], len(attempts) - len(drawn) + left_before


def _left_out_note(name: str, left_out: int) -> str:
    return f"{name}: {left_out:,} attempts not drawn (a chart draws the first and the latest {MAX_ATTEMPT_TRACES - 1})."


def _downsampled_traces(
    frame: pl.DataFrame,
    name: str,
    colour: str,
    yaxis: str,
    max_points: int,
    windows: list[tuple[int, int]],
    left_before: int = 0,
) -> tuple[list[dict], SeriesInfo, pl.Series, int]:
    """One trace per attempt drawn (a resumed run replays steps), min/max downsampled; and the attempts left out."""
    traces, bad, n_in, n_out, down = [], [], 0, 0, False
    parts, left_out = attempt_parts(frame, left_before)
    for attempt, part in parts:
        d = ds.downsample_series(part, "x", "y", max_points, windows)
        label = name if attempt == 0 else f"{name} (attempt {attempt + 1}, after resume)"
        traces.append(line_trace(d.frame, label, colour, yaxis=yaxis, dash=None if attempt == 0 else "dot"))
        bad.append(d.nonfinite)
        n_in, n_out, down = n_in + d.n_in, n_out + d.n_out, down or d.downsampled
    nonfinite = pl.concat(bad) if bad else pl.DataFrame(schema={"x": pl.Float64, "kind": pl.String})
    return traces, SeriesInfo(name, n_in, n_out, down, nonfinite), frame.get_column("y"), left_out


def _event_strip(run, infos: list[SeriesInfo]) -> list[tuple[str, pl.Series]]:
    """The overview's event strip: non-finite steps and logged events, one (name, steps) row each."""
    strip = [(f"NaN/Inf {info.signal}", info.nonfinite.get_column("x")) for info in infos if info.nonfinite.height]
    for kind in STRIP_EVENTS:
        steps = event_steps(run, kind)
        if steps.len():
            strip.append((kind, steps))
    return strip


def _draw_strip(
    strip: list[tuple[str, pl.Series]], n_panels: int, max_points: int, data: list, layout: dict, notes: list[str]
) -> None:
    """Add the strip's rows to the overview (the bottom panel): traces to `data`, its axis to `layout`."""
    strip_axis = f"y{n_panels}" if n_panels > 1 else "y"
    names = []
    for idx, (name, steps) in enumerate(strip):
        marks = thin_steps(steps.cast(pl.Int64), max_points)
        if len(marks) < steps.unique().len():
            notes.append(f"{name}: {steps.len():,} events drawn as {len(marks):,} marks.")
        colour = "#d62728" if name.startswith("NaN") else PALETTE[(idx + 2) % len(PALETTE)]
        data.append(
            marker_trace(
                marks,
                [name] * len(marks),
                name,
                colour,
                strip_axis,
                symbol="x" if name.startswith("NaN") else "line-ns-open",
            )
        )
        names.append(name)
    layout[f"yaxis{n_panels}" if n_panels > 1 else "yaxis"].update(
        {"type": "category", "categoryorder": "array", "categoryarray": names[::-1], "showgrid": False}
    )


def overview(run, diagnosis: Diagnosis, max_points: int) -> tuple[Figure | None, list[SeriesInfo]]:
    """Loss and grad norm on one step axis, incidents shaded, events on a strip below."""
    incidents = diagnosis.incidents
    windows = [incident_window(i) for i in incidents]
    loss_s = run.series("loss")
    grad_s, derived = run.grad_norm_series()
    if loss_s.height == 0 and grad_s.height == 0:
        return None, []
    data, infos, notes = [], [], []
    xlabel = "step"
    panels = []  # (axis name, title, values)
    if loss_s.height:
        frame, xlabel = timeline(loss_s)
        traces, info, values, left_out = _downsampled_traces(
            frame, "loss", PALETTE[0], "y", max_points, windows, run.attempts_left_out
        )
        if left_out:
            notes.append(_left_out_note(info.signal, left_out))
        data += traces
        infos.append(info)
        panels.append(("yaxis", "loss", values))
    if grad_s.height:
        frame, gx = timeline(grad_s)
        xlabel = xlabel if loss_s.height else gx
        name = "grad norm (derived from layers)" if derived else "grad norm"
        axis = "y2" if loss_s.height else "y"
        traces, info, values, left_out = _downsampled_traces(
            frame, name, PALETTE[1], axis, max_points, windows, run.attempts_left_out
        )
        if left_out:
            notes.append(_left_out_note(info.signal, left_out))
        data += traces
        infos.append(info)
        panels.append(("yaxis2" if loss_s.height else "yaxis", "grad norm", values))
        clip = clip_threshold(diagnosis)
        if clip is not None:
            x0, x1 = frame.get_column("x").min(), frame.get_column("x").max()
            data.append(hline_trace(x0, x1, clip, f"clip threshold {fmt_num(clip)}", "#7f7f7f", axis))
    for info in infos:
        info.xlabel = xlabel
        if info.downsampled:
            notes.append(
                f"{info.signal}: {info.n_in:,} finite points drawn as {info.n_out:,} "
                f"(min and max per bucket; incident windows at full resolution)."
            )

    strip = _event_strip(run, infos)
    n_panels = len(panels) + (1 if strip else 0)
    layout = _stacked_layout(n_panels, [p[1] for p in panels] + (["events"] if strip else []), xlabel)
    for axis, _, values in panels:
        if wants_log(values):
            layout[axis]["type"] = "log"
    if strip:
        _draw_strip(strip, n_panels, max_points, data, layout, notes)
    layout["shapes"], layout["annotations"] = _incident_shades(incidents)
    xs = pl.concat([loss_s.get_column("step"), grad_s.get_column("step")]).drop_nulls()
    if xs.len() and xs.max() - xs.min() < 10:
        layout["xaxis"]["dtick"] = 1  # a handful of steps: no fractional step ticks
    layout["shapes"] += _resume_lines(run)
    height = 260 * len(panels) + (40 + 24 * len(strip) if strip else 0) + 80
    fig = Figure("overview", "Loss and gradient norm by step", data, layout, height=height, notes=notes)
    return fig, infos


def _stacked_layout(n: int, titles: list[str], xlabel: str) -> dict:
    """n panels stacked top to bottom on one shared x axis; the last (event strip) is thinner."""
    has_strip = titles and titles[-1] == "events"
    weights = [1.0] * n
    if has_strip:
        weights[-1] = 0.35
    gap = 0.04
    total = sum(weights) + gap * (n - 1)
    layout = {
        "xaxis": {"title": {"text": xlabel}, "anchor": f"y{n}" if n > 1 else "y", "automargin": True},
        "hovermode": "closest",
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        "margin": {"t": 40, "r": 20, "b": 50, "l": 70},
    }
    top = 1.0
    for i, (w, title) in enumerate(zip(weights, titles)):
        h = w / total
        name = "yaxis" if i == 0 else f"yaxis{i + 1}"
        layout[name] = {"domain": [max(0.0, top - h), top], "title": {"text": title}, "anchor": "x", "automargin": True}
        top -= h + gap / total
    return layout


def _incident_shades(incidents: list[DiagnosedIncident]) -> tuple[list, list]:
    shapes, notes = [], []
    for n, inc in enumerate(incidents):
        colour = SEVERITY_COLOURS.get(inc.severity, "#999999")
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": int(inc.step_start) - 0.5,
                "x1": int(inc.step_end) + 0.5,
                "y0": 0,
                "y1": 1,
                "fillcolor": colour,
                "opacity": 0.18,
                "line": {"width": 1, "color": colour},
                "layer": "below",
            }
        )
        if n < MAX_SHADE_LABELS:
            notes.append(
                {
                    "x": int(inc.peak_step),
                    "y": 1,
                    "xref": "x",
                    "yref": "paper",
                    "yanchor": "top",
                    "text": esc(f"{inc.id} {inc.severity}"),
                    "showarrow": False,
                    "yshift": -12 * (n % 2),
                    "font": {"size": 10, "color": colour},
                }
            )
    return shapes, notes


def _resume_lines(run, limit: int = 50) -> list:
    steps = event_steps(run, "resume").unique().sort().to_list()[:limit]
    return [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": s,
            "x1": s,
            "y0": 0,
            "y1": 1,
            "line": {"color": "#7f7f7f", "width": 1, "dash": "dashdot"},
        }
        for s in steps
    ]


# ---------------------------------------------------------------------------- incident windows


def incident_windows(run, diagnosis: Diagnosis) -> dict[str, Figure]:
    """Full-resolution loss and grad norm around each incident (first MAX_WINDOW_CHARTS)."""
    out = {}
    loss_s = run.series("loss")
    grad_s, derived = run.grad_norm_series()
    if loss_s.height == 0 and grad_s.height == 0:
        return out
    clip = clip_threshold(diagnosis)
    gl_used = 0
    first, last, _ = run.step_range()
    # each series' timeline split by attempt once, not once per incident
    signals = [
        (attempt_parts(timeline(series)[0], run.attempts_left_out), name, colour, axis)
        for series, name, colour, axis in (
            (loss_s, "loss", PALETTE[0], "y"),
            (grad_s, "grad norm (derived)" if derived else "grad norm", PALETTE[1], "y2"),
        )
        if series.height
    ]
    for inc in diagnosis.incidents[:MAX_WINDOW_CHARTS]:
        lo, hi = incident_window(inc)
        if first is not None:  # the title names steps the run has, not the padding
            lo, hi = max(lo, first), min(hi, last)
        data, notes, has_loss, grad_log = [], [], False, False
        for (parts, left_out), name, colour, axis in signals:
            if left_out:
                notes.append(_left_out_note(name, left_out))
            for attempt, part in parts:
                w = ds.window_series(part, "x", "y", lo, hi)
                if w.n_out == 0 and w.nonfinite.height == 0:
                    continue
                gl = w.n_out > GL_POINTS and gl_used < MAX_GL_CHARTS
                label = name if attempt == 0 else f"{name} (attempt {attempt + 1})"
                tr = line_trace(
                    w.frame, label, colour, yaxis=axis, gl=gl, width=1.6, dash=None if attempt == 0 else "dot"
                )
                tr["mode"] = "lines+markers" if w.n_out <= 400 else "lines"
                tr["marker"] = {"size": 4, "color": colour}
                data.append(tr)
                gl_used += gl
                if w.downsampled:
                    notes.append(
                        f"{label}: {w.n_in:,} points in this window drawn as {w.n_out:,} (min/max per bucket)."
                    )
                if w.nonfinite.height:
                    xs = w.nonfinite.get_column("x").cast(pl.Int64).to_list()
                    # non-finite points sit on the top edge of the panel
                    data.append(
                        {
                            "type": "scatter",
                            "mode": "markers",
                            "name": f"NaN/Inf {name}",
                            "x": xs,
                            "y": [1] * len(xs),
                            "yaxis": "y3",
                            "marker": {"color": "#d62728", "symbol": "x", "size": 10},
                            "hovertemplate": f"{name} non-finite at step %{{x}}<extra></extra>",
                        }
                    )
                if axis == "y":
                    has_loss = True
                elif wants_log(w.frame.get_column("y")):
                    grad_log = True
        if not data:
            continue
        if clip is not None and grad_s.height:
            data.append(hline_trace(lo, hi, clip, f"clip threshold {fmt_num(clip)}", "#7f7f7f", "y2"))
        layout = {
            "xaxis": {"title": {"text": "step"}, "range": [lo, hi], "automargin": True},
            "yaxis": {"title": {"text": "loss"}, "automargin": True},
            "yaxis2": {
                "title": {"text": "grad norm"},
                "overlaying": "y",
                "side": "right",
                "automargin": True,
                "type": "log" if grad_log else "linear",
                "showgrid": False,
            },
            "yaxis3": {"overlaying": "y", "range": [0, 1.05], "visible": False, "fixedrange": True},
            "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
            "margin": {"t": 40, "r": 70, "b": 50, "l": 70},
            "hovermode": "x unified",
            "shapes": [
                {
                    "type": "rect",
                    "xref": "x",
                    "yref": "paper",
                    "x0": int(inc.step_start) - 0.5,
                    "x1": int(inc.step_end) + 0.5,
                    "y0": 0,
                    "y1": 1,
                    "opacity": 0.15,
                    "layer": "below",
                    "fillcolor": SEVERITY_COLOURS.get(inc.severity, "#999999"),
                    "line": {"width": 0},
                },
                {
                    "type": "line",
                    "xref": "x",
                    "yref": "paper",
                    "x0": int(inc.peak_step),
                    "x1": int(inc.peak_step),
                    "y0": 0,
                    "y1": 1,
                    "line": {"color": "#d62728", "width": 1, "dash": "dot"},
                },
            ],
            "annotations": [
                {
                    "x": int(inc.peak_step),
                    "y": 1,
                    "xref": "x",
                    "yref": "paper",
                    "yanchor": "bottom",
                    "text": f"peak {int(inc.peak_step)}",
                    "showarrow": False,
                    "font": {"size": 10},
                }
            ],
        }
        if not has_loss:
            layout["yaxis2"].pop("overlaying")
        fig_id = f"window-{len(out) + 1}"
        out[str(inc.id)] = Figure(fig_id, f"{inc.id}: steps {lo}-{hi}", data, layout, height=340, notes=notes)
    return out
