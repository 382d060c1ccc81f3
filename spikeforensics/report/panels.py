"""The report's secondary figures: layer heatmap, per-rank comparison, clip rate,
loss scale, telemetry overlay and the calibration histogram.

Same conventions as `charts.py` (which holds the overview): each builder returns a
`Figure` or None when the run has nothing to draw, aggregates in polars so the
spec size does not grow with run length, and escapes untrusted labels.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics.attribute.model import Diagnosis
from spikeforensics.report import downsample as ds
from spikeforensics.report.charts import (
    PALETTE,
    SEVERITY_COLOURS,
    Figure,
    clip_threshold,
    esc,
    event_steps,
    line_trace,
    marker_trace,
    recommended_clip,
    thin_steps,
    timeline,
    wants_log,
)
from spikeforensics.report.text import fmt_num, fmt_rate

# Step bins of the layer heatmap (columns); each cell keeps the max grad norm of its bin.
HEATMAP_BINS = 300
# Layers drawn at most; past it the offending layers plus the highest-peaking others are kept.
HEATMAP_MAX_LAYERS = 120
# Ranks drawn as their own line at most; past it only implicated and extreme ranks are.
MAX_RANK_LINES = 16
# Buckets of the clip-rate panel (fraction of steps above the threshold per bucket).
CLIP_RATE_BUCKETS = 200
# Bins of the calibration histogram (log10 grad norm).
HIST_BINS = 60
# Telemetry fields drawn (in this order of preference), and how many at most.
TELEMETRY_PREFERRED = ("temperature", "power", "ecc_uncorrected", "ecc_corrected", "sm_clock", "utilization")
TELEMETRY_MAX_FIELDS = 4


def _bins(steps: pl.Expr, lo: int, hi: int, n: int) -> pl.Expr:
    span = max(1, hi - lo + 1)
    return ((steps - lo) * n // span).clip(0, n - 1).cast(pl.Int64)


def _offending_layers(diagnosis: Diagnosis) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for inc in diagnosis.incidents:
        for layer in inc.layers or []:
            out.setdefault(str(layer), []).append(str(inc.id))
    return out


# ---------------------------------------------------------------------------- layer heatmap


def layer_heatmap(run, diagnosis: Diagnosis) -> Figure | None:
    """Layer x step (binned) of log10 max grad norm; offending layers boxed and labelled."""
    layers = run.layers.filter(pl.col("step").is_not_null() & pl.col("grad_norm").is_not_null())
    if layers.height == 0:
        return None
    lo, hi = int(layers.get_column("step").min()), int(layers.get_column("step").max())
    n_steps = layers.get_column("step").n_unique()
    nbins = min(HEATMAP_BINS, n_steps)
    span = max(1, hi - lo + 1)
    cells = (
        layers.with_columns(_bins(pl.col("step"), lo, hi, nbins).alias("bin"))
        .group_by("layer", "bin")
        .agg(
            pl.col("grad_norm").filter(pl.col("grad_norm").is_finite()).max().alias("g"),
            (~pl.col("grad_norm").is_finite()).any().alias("bad"),
        )
    )
    order = run.layer_names()
    offending = _offending_layers(diagnosis)
    notes = []
    if len(order) > HEATMAP_MAX_LAYERS:
        peaks = (
            cells.group_by("layer")
            .agg(pl.col("g").max())
            .sort(["g", "layer"], descending=[True, False], nulls_last=True)
        )
        keep = [l for l in offending if l in order]
        keep += [l for l in peaks.get_column("layer").to_list() if l not in keep][: HEATMAP_MAX_LAYERS - len(keep)]
        keep_set = set(keep)
        notes.append(
            f"{len(order)} layers: showing the {len(keep)} with the highest peaks (and every implicated layer)."
        )
        order = [l for l in order if l in keep_set]
        cells = cells.filter(pl.col("layer").is_in(keep))
    index = {name: i for i, name in enumerate(order)}
    z = [[None] * nbins for _ in order]
    cells = cells.with_columns(pl.col("g").log10().round_sig_figs(4).alias("z"))
    for layer, b, value in cells.select("layer", "bin", "z").iter_rows():
        if value is not None and math.isfinite(value):
            z[index[layer]][b] = value
    xs = [int(lo + (b + 0.5) * span / nbins) for b in range(nbins)]
    labels = [esc(l) for l in order]
    data = [
        {
            "type": "heatmap",
            "z": z,
            "x": xs,
            "y": labels,
            "colorscale": "Viridis",
            "name": "log10 grad norm",
            "colorbar": {"title": {"text": "log10 |g|"}},
            "hoverongaps": False,
            "hovertemplate": "%{y}<br>step ~%{x}<br>log10 grad norm %{z}<extra></extra>",
        }
    ]
    # by step bin, then in the dump's layer order (the groups above come in no fixed order)
    bad = sorted(((b, index[l]) for l, b in cells.filter(pl.col("bad")).select("layer", "bin").iter_rows()))
    if bad:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "NaN/Inf gradient",
                "showlegend": True,
                "x": [xs[b] for b, _ in bad],
                "y": [labels[i] for _, i in bad],
                "marker": {"symbol": "x", "color": "#d62728", "size": 9},
                "hovertemplate": "%{y}: NaN/Inf near step %{x}<extra></extra>",
            }
        )
    shapes, annotations, ticktext = [], [], []
    for name in order:
        i = index[name]
        if name in offending:
            shapes.append(
                {
                    "type": "rect",
                    "xref": "paper",
                    "yref": "y",
                    "x0": 0,
                    "x1": 1,
                    "y0": i - 0.5,
                    "y1": i + 0.5,
                    "line": {"color": "#d62728", "width": 2},
                    "fillcolor": "rgba(0,0,0,0)",
                }
            )
            annotations.append(
                {
                    "xref": "paper",
                    "yref": "y",
                    "x": 1,
                    "y": labels[i],
                    "xanchor": "left",
                    "text": esc("◀ " + ", ".join(offending[name])),
                    "showarrow": False,
                    "font": {"color": "#d62728", "size": 11},
                }
            )
            ticktext.append(f"<b>▶ {labels[i]}</b>")
        else:
            ticktext.append(labels[i])
    for inc in diagnosis.incidents:
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": int(inc.peak_step),
                "x1": int(inc.peak_step),
                "y0": 0,
                "y1": 1,
                "line": {"color": SEVERITY_COLOURS.get(inc.severity, "#999"), "width": 1, "dash": "dot"},
            }
        )
    layout = {
        "xaxis": {"title": {"text": "step"}, "automargin": True},
        "yaxis": {
            "autorange": "reversed",
            "tickmode": "array",
            "tickvals": labels,
            "ticktext": ticktext,
            "automargin": True,
            "title": {"text": "layer"},
        },
        "shapes": shapes,
        "annotations": annotations,
        "margin": {"t": 30, "r": 110, "b": 50, "l": 70},
    }
    if n_steps > nbins:
        notes.append(
            f"{n_steps:,} dumped steps in {nbins} columns of about {span // nbins:,} steps; each cell is the bin's max."
        )
    height = min(1500, max(280, 16 * len(order) + 120))
    return Figure("layers", "Per-layer gradient norm", data, layout, height=height, notes=notes)


# ---------------------------------------------------------------------------- per rank


def _per_rank(run, name: str) -> pl.DataFrame:
    rows = (
        run.metrics.lazy()
        .filter((pl.col("name") == name) & pl.col("rank").is_not_null() & pl.col("record").is_not_null())
        .select("source", "step", "record", "value", "rank")
        .collect()
    )
    if rows.height:
        src = rows.group_by("source").len().sort("len", descending=True).get_column("source")[0]
        rows = rows.filter(pl.col("source") == src)
        x = "step" if rows.get_column("step").null_count() == 0 else "record"
        return rows.select(pl.col(x).cast(pl.Float64).alias("x"), pl.col("value").alias("y"), "rank")
    if name == "grad_norm" and run.layers.height and run.layers.get_column("rank").drop_nulls().n_unique() > 1:
        return (
            run.layer_l2_norms()
            .filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null())
            .select(pl.col("step").cast(pl.Float64).alias("x"), pl.col("value").alias("y"), "rank")
        )
    return pl.DataFrame(schema={"x": pl.Float64, "y": pl.Float64, "rank": pl.Int32})


def rank_comparison(run, diagnosis: Diagnosis, max_points: int) -> Figure | None:
    """Grad norm (and loss) per rank on the step axis; implicated ranks drawn thick."""
    panels = [(n, _per_rank(run, n)) for n in ("grad_norm", "loss")]
    panels = [(n, f) for n, f in panels if f.height and f.get_column("rank").n_unique() > 1]
    if not panels:
        return None
    implicated = {int(r) for inc in diagnosis.incidents for r in inc.ranks or []}
    data, notes, layout = (
        [],
        [],
        {
            "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
            "margin": {"t": 40, "r": 20, "b": 50, "l": 70},
            "hovermode": "closest",
            "xaxis": {"title": {"text": "step"}, "anchor": f"y{len(panels)}" if len(panels) > 1 else "y"},
        },
    )
    for p, (name, frame) in enumerate(panels):
        axis = "y" if p == 0 else f"y{p + 1}"
        ranks = sorted(frame.get_column("rank").unique().to_list())
        if len(ranks) > MAX_RANK_LINES:
            peaks = (
                frame.group_by("rank")
                .agg(pl.col("y").filter(pl.col("y").is_finite()).max())
                .sort(["y", "rank"], descending=[True, False])
            )
            keep = [r for r in ranks if r in implicated]
            keep += [r for r in peaks.get_column("rank").to_list() if r not in keep][: MAX_RANK_LINES - len(keep)]
            notes.append(
                f"{name}: {len(ranks)} ranks; drawing the {len(keep)} with the highest peaks and every implicated rank."
            )
            ranks = sorted(keep)
        per = max(200, max_points // max(1, len(ranks)))
        for i, rank in enumerate(ranks):
            d = ds.downsample_series(frame.filter(pl.col("rank") == rank), "x", "y", per)
            label = f"{name.replace('_', ' ')} rank {rank}" + (" (implicated)" if rank in implicated else "")
            tr = line_trace(
                d.frame, label, PALETTE[i % len(PALETTE)], yaxis=axis, width=2.5 if rank in implicated else 1
            )
            tr["legendgroup"] = f"rank{rank}"
            data.append(tr)
            if d.nonfinite.height:
                xs = d.nonfinite.get_column("x").cast(pl.Int64).to_list()
                finite = d.frame.get_column("y")
                top = float(finite.max()) if finite.len() else 1.0
                data.append(marker_trace(xs, [top] * len(xs), f"NaN/Inf {name} rank {rank}", "#d62728", axis))
        n = len(panels)
        h = (1 - 0.06 * (n - 1)) / n
        top = 1 - p * (h + 0.06)
        layout["yaxis" if p == 0 else f"yaxis{p + 1}"] = {
            "domain": [max(0, top - h), top],
            "anchor": "x",
            "title": {"text": name.replace("_", " ")},
            "type": "log" if wants_log(frame.get_column("y")) else "linear",
            "automargin": True,
        }
    return Figure("ranks", "Per-rank comparison", data, layout, height=300 * len(panels) + 60, notes=notes)


# ---------------------------------------------------------------------------- clip rate and loss scale


def clip_rate(run, diagnosis: Diagnosis) -> Figure | None:
    """Fraction of steps whose pre-clip grad norm exceeds the current (and recommended) threshold."""
    grad, _ = run.grad_norm_series()
    current, recommended = clip_threshold(diagnosis), recommended_clip(diagnosis)
    if grad.height == 0 or (current is None and recommended is None):
        return None
    frame, xlabel = timeline(grad)
    lo, hi = int(frame.get_column("x").min()), int(frame.get_column("x").max())
    nb = min(CLIP_RATE_BUCKETS, frame.height)
    binned = frame.with_columns(_bins(pl.col("x"), lo, hi, nb).alias("b"))
    data = []
    for thr, name, colour, dash in (
        (current, "current", PALETTE[1], None),
        (recommended, "recommended", PALETTE[2], "dash"),
    ):
        if thr is None:
            continue
        rate = (
            binned.group_by("b")
            .agg(pl.col("x").min(), (pl.col("y") > thr).mean().alias("y"))
            .sort("x")
            .select("x", "y")
        )
        tr = line_trace(rate, f"clip rate at {name} threshold {fmt_num(thr)}", colour, width=1.6, dash=dash)
        tr["line"]["shape"] = "hv"
        data.append(tr)
    layout = {
        "xaxis": {"title": {"text": xlabel}},
        "yaxis": {"title": {"text": "fraction of steps clipped"}, "tickformat": ".0%", "rangemode": "tozero"},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        "margin": {"t": 40, "r": 20, "b": 50, "l": 70},
    }
    notes = [f"Each point covers about {max(1, (hi - lo + 1) // nb):,} steps."]
    return Figure("clip-rate", "Clip rate", data, layout, height=300, notes=notes)


def loss_scale(run, max_points: int) -> Figure | None:
    """The fp16 loss scale (log2 axis) with overflow skips marked."""
    scale = run.series("loss_scale")
    overflow = event_steps(run, "overflow")
    if scale.height == 0 and overflow.len() == 0:
        return None
    data, notes = [], []
    if scale.height:
        frame, _ = timeline(scale)
        d = ds.downsample_series(frame, "x", "y", max_points)
        data.append(line_trace(d.frame, "loss scale", PALETTE[0]))
        data[-1]["line"]["shape"] = "hv"
        if d.downsampled:
            notes.append(f"loss scale: {d.n_in:,} points drawn as {d.n_out:,} (min and max per bucket).")
    if overflow.len():
        marks = thin_steps(overflow.cast(pl.Int64), max_points)
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"overflow skip ({overflow.len():,} events)",
                "x": marks,
                "y": [0] * len(marks),
                "yaxis": "y2",
                "marker": {"symbol": "line-ns-open", "size": 10, "color": "#d62728"},
                "hovertemplate": "overflow at step %{x}<extra></extra>",
            }
        )
    yaxis = {"title": {"text": "loss scale"}, "type": "log"}
    if scale.height:
        finite = scale.filter(pl.col("value").is_finite() & (pl.col("value") > 0)).get_column("value")
        if finite.len():
            lo, hi = math.floor(math.log2(finite.min())), math.ceil(math.log2(finite.max()))
            every = max(1, math.ceil((hi - lo + 1) / 8))
            powers = list(range(lo, hi + 1, every))
            yaxis.update(
                {
                    "tickmode": "array",
                    "tickvals": [2.0**k for k in powers],
                    "ticktext": [f"2<sup>{k}</sup>" for k in powers],
                }
            )
    layout = {
        "xaxis": {"title": {"text": "step"}},
        "yaxis": yaxis,
        "yaxis2": {"overlaying": "y", "visible": False, "range": [-0.2, 5], "fixedrange": True},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        "margin": {"t": 40, "r": 20, "b": 50, "l": 70},
    }
    return Figure("loss-scale", "Loss scale and overflow skips", data, layout, height=300, notes=notes)


# ---------------------------------------------------------------------------- telemetry


def telemetry(run, max_points: int) -> Figure | None:
    """GPU telemetry per field (one panel each), on the step axis when log times allow, else wall time."""
    tel = run.telemetry.filter(pl.col("time").is_not_null() & pl.col("value").is_not_null())
    if tel.height == 0:
        return None
    fields = tel.get_column("field").unique().to_list()
    chosen = [f for f in TELEMETRY_PREFERRED if f in fields] + sorted(f for f in fields if f not in TELEMETRY_PREFERRED)
    chosen = chosen[:TELEMETRY_MAX_FIELDS]
    clock = run.series("loss").filter(pl.col("time").is_not_null() & pl.col("step").is_not_null())
    on_steps = clock.height > 1
    if on_steps:
        clock = clock.select("time", "step").sort("time")
        tel = tel.sort("time").join_asof(clock, on="time", strategy="nearest").filter(pl.col("step").is_not_null())
        tel = tel.with_columns(pl.col("step").cast(pl.Float64).alias("x"))
    else:
        tel = tel.with_columns(pl.col("time").dt.epoch("us").cast(pl.Float64).alias("x"))
    data, layout = (
        [],
        {
            "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
            "margin": {"t": 40, "r": 20, "b": 50, "l": 70},
            "hovermode": "closest",
            "xaxis": {
                "title": {"text": "step" if on_steps else "time"},
                "anchor": f"y{len(chosen)}" if len(chosen) > 1 else "y",
                **({} if on_steps else {"type": "date"}),
            },
        },
    )
    n = len(chosen)
    gpus = tel.select("host", "gpu").unique().sort("host", "gpu", nulls_last=True).rows()
    for p, fname in enumerate(chosen):
        axis = "y" if p == 0 else f"y{p + 1}"
        for g, (host, gpu) in enumerate(gpus):
            part = tel.filter(
                (pl.col("field") == fname) & (pl.col("gpu").eq_missing(gpu)) & (pl.col("host").eq_missing(host))
            )
            if part.height == 0:
                continue
            d = ds.downsample_series(part, "x", "value", max(200, max_points // max(1, len(gpus))))
            label = esc(f"{host + ':' if host else ''}gpu{gpu if gpu is not None else '?'}")
            tr = line_trace(d.frame, f"{label} {fname}", PALETTE[g % len(PALETTE)], yaxis=axis)
            tr["legendgroup"] = label
            tr["showlegend"] = p == 0
            if not on_steps:
                tr["x"] = (
                    pl.from_epoch(pl.Series(tr["x"], dtype=pl.Int64), "us").dt.to_string("%Y-%m-%dT%H:%M:%S").to_list()
                )
                tr["hovertemplate"] = f"%{{x}}<br>{label} {fname} %{{y}}<extra></extra>"
            data.append(tr)
        h = (1 - 0.05 * (n - 1)) / n
        top = 1 - p * (h + 0.05)
        layout["yaxis" if p == 0 else f"yaxis{p + 1}"] = {
            "domain": [max(0, top - h), top],
            "anchor": "x",
            "title": {"text": esc(fname)},
            "automargin": True,
        }
    shapes = []
    faults = run.events.filter(pl.col("kind").is_in(["xid", "ecc"]))
    for row in faults.head(50).iter_rows(named=True):
        if on_steps and row["step"] is not None:
            x = row["step"]
        elif not on_steps and row["time"] is not None:
            x = row["time"].strftime("%Y-%m-%dT%H:%M:%S")
        else:
            continue
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": x,
                "x1": x,
                "y0": 0,
                "y1": 1,
                "line": {"color": "#d62728", "width": 1.5, "dash": "dot"},
            }
        )
    layout["shapes"] = shapes
    notes = (
        [] if on_steps else ["The training log has no wall-clock times, so telemetry is drawn against time, not steps."]
    )
    if shapes:
        notes.append("Dotted red lines: Xid / ECC events from the kernel log.")
    return Figure("telemetry", "GPU telemetry", data, layout, height=220 * n + 80, notes=notes)


# ---------------------------------------------------------------------------- calibration


def calibration_hist(run, diagnosis: Diagnosis) -> Figure | None:
    """Histogram of pre-clip grad norm (log10 bins) with the current and recommended thresholds."""
    grad, _ = run.grad_norm_series()
    g = grad.filter(pl.col("value").is_finite() & (pl.col("value") > 0)).get_column("value")
    if g.len() < 10:
        return None
    logs = g.log10()
    lo, hi = float(logs.min()), float(logs.max())
    for thr in (clip_threshold(diagnosis), recommended_clip(diagnosis)):
        if thr is not None:
            lo, hi = min(lo, math.log10(thr)), max(hi, math.log10(thr))
    width = max(hi - lo, 1e-6) / HIST_BINS
    counts = (
        logs.to_frame("l")
        .with_columns(((pl.col("l") - lo) / width).floor().clip(0, HIST_BINS - 1).cast(pl.Int64).alias("b"))
        .group_by("b")
        .len()
        .sort("b")
    )
    xs = [round(10 ** (lo + (b + 0.5) * width), 6) for b in counts.get_column("b").to_list()]
    data = [
        {
            "type": "bar",
            "x": xs,
            "y": counts.get_column("len").to_list(),
            "name": "steps",
            "marker": {"color": PALETTE[5]},
            "hovertemplate": "grad norm ~%{x}<br>%{y} steps<extra></extra>",
        }
    ]
    top = int(counts.get_column("len").max())
    for thr, name, colour, dash in (
        (clip_threshold(diagnosis), "current clip", PALETTE[1], "solid"),
        (recommended_clip(diagnosis), "recommended clip", PALETTE[2], "dash"),
    ):
        if thr is not None:
            rate = float((g > thr).mean())
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": [thr, thr],
                    "y": [0, top],
                    "name": f"{name} {fmt_num(thr)} (clips {fmt_rate(rate)})",
                    "line": {"color": colour, "width": 2, "dash": dash},
                    "hoverinfo": "name",
                }
            )
    layout = {
        "xaxis": {"title": {"text": "pre-clip grad norm"}, "type": "log"},
        "yaxis": {"title": {"text": "steps"}},
        "bargap": 0.05,
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        "margin": {"t": 40, "r": 20, "b": 50, "l": 70},
    }
    return Figure("calibration", "Grad-norm distribution and clip thresholds", data, layout, height=300)


def expected_clip_rate(run, threshold: float | None) -> float | None:
    """Fraction of finite logged steps whose grad norm exceeds `threshold`."""
    if threshold is None:
        return None
    grad, _ = run.grad_norm_series()
    g = grad.filter(pl.col("value").is_finite()).get_column("value")
    return float((g > threshold).mean()) if g.len() else None
