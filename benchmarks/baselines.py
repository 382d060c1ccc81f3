"""Reference detectors practitioners use today, replayed offline (benchmark only, not the product).

Each rule is a pure function over a run's loss and grad-norm series (frames with at
least `step` and `value`, as `RunData.series("loss")` and `RunData.grad_norm_series()[0]`
return them, in training order) and returns the flagged positions. `incidents()` groups
the flags of both signals into incidents of kind `hard_spike`, or `nonfinite` when a
flagged step holds a NaN/Inf, and `run_baselines(run)` returns one diagnosis-like dict
per rule for `spikeforensics.evaluate.score_run`.

What each does, and what it does with a NaN (faithful to its source, see
shared/DETECTION-ANCHORS.md):

- `static`: the folk rule "grad norm > 100x its initial level (mean of the first 10
  values), or loss > 2x the mean of the previous 20 losses". Written the naive way:
  `nan > x` is False, so a NaN is never flagged, and a NaN inside the 20-step window
  makes the mean NaN, blinding the loss rule until it leaves the window.
- `megatron`: Megatron-LM's checks. `is_unexpectedly_large(threshold=10)`: |value| >= 10x
  the max |value| of the first 100 finite values (loss: "Spiky loss"; grad norm: the
  `--check-for-large-grads` rule, which Megatron applies per bucket, here on the global
  norm). NaN/Inf are ignored by that check ("checked separately") and caught by
  `--check-for-nan-in-loss-and-grad` (on by default), so every non-finite value is flagged.
- `llm_foundry`: LLM Foundry `KillLossSpike` (window 100, outlier_multiplier 2,
  patience 4): a loss is an outlier when >= 2x the mean of the previous 100 losses (all
  losses enter the window, outliers too); an alert fires on the 5th consecutive outlier;
  the flagged span is the run of consecutive outliers. Loss only. `nan >= x` is False, so a
  NaN is never an outlier, and once in the window the mean is NaN: blind for 100 steps.
  (Its "persistently high loss" check, half the window above loss_cap=10, is a divergence
  alarm, not a spike detector, and is left out.)
- `olmo_core`: OLMo-core `SkipStepOptimizer` (rolling 128, sigma 6, active once 64 values
  are seen): a step is skipped unless `x - mean(prev) <= 6 * std(prev)` for loss and grad
  norm (one-sided; std with Bessel's correction, as torch.std_mean). A NaN makes the
  comparison False, so it is flagged; while the NaN stays in the 128-value window the
  mean is NaN and every step is flagged.
- `zclip`: ZClip (alpha 0.97, z_thresh 2.5, warmup 25, adaptive_scaling): EMA mean/var of
  the grad norm initialised from the first 25 values; a step is a spike when
  `(g - mean) / (std + 1e-6) > 2.5`; the EMA is updated with the clipped value
  `mean + 2.5 * std / (z / 2.5)` on spikes, else with g. Grad norm only. A NaN gives z NaN
  (not > 2.5, not flagged) and enters the EMA: the detector is blind for the rest of the run.
"""

from __future__ import annotations

import numpy as np
import polars as pl

GROUP_GAP_STEPS = 5  # flags closer than this form one incident (same rule as DETECTION-ANCHORS §2.3)

STATIC_GRAD_FACTOR = 100.0
STATIC_GRAD_INIT_VALUES = 10
STATIC_LOSS_FACTOR = 2.0
STATIC_LOSS_WINDOW = 20
MEGATRON_FACTOR = 10.0
MEGATRON_SAMPLES = 100
FOUNDRY_WINDOW = 100
FOUNDRY_MULTIPLIER = 2.0
FOUNDRY_PATIENCE = 4
OLMO_WINDOW = 128
OLMO_SIGMA = 6.0
OLMO_MIN_VALUES = max(20, OLMO_WINDOW // 2)
ZCLIP_ALPHA = 0.97
ZCLIP_Z = 2.5
ZCLIP_WARMUP = 25
ZCLIP_EPS = 1e-6


def _values(frame: pl.DataFrame | None) -> np.ndarray:
    if frame is None or frame.height == 0:
        return np.empty(0)
    return frame.get_column("value").cast(pl.Float64).fill_null(np.nan).to_numpy()


def _prev_stat(x: np.ndarray, window: int, min_values: int, stat: str) -> np.ndarray:
    """Mean or std (ddof=1) of the previous `window` values at each position (NaN before
    `min_values` previous values exist). A NaN inside the window makes it NaN, as in the
    naive numpy/torch code of the sources."""
    s = pl.Series(x, dtype=pl.Float64).shift(1)
    rolled = (
        s.rolling_mean(window, min_samples=min_values)
        if stat == "mean"
        else s.rolling_std(window, min_samples=min_values)
    )
    return rolled.fill_null(np.nan).to_numpy()


# -- the five rules: values in, boolean flags out ------------------------------------------


def static_grad(grad: np.ndarray) -> np.ndarray:
    if len(grad) <= STATIC_GRAD_INIT_VALUES:
        return np.zeros(len(grad), bool)
    initial = grad[:STATIC_GRAD_INIT_VALUES].mean()
    with np.errstate(invalid="ignore"):
        flags = grad > STATIC_GRAD_FACTOR * initial
    flags[:STATIC_GRAD_INIT_VALUES] = False
    return flags


def static_loss(loss: np.ndarray) -> np.ndarray:
    if len(loss) <= STATIC_LOSS_WINDOW:
        return np.zeros(len(loss), bool)
    with np.errstate(invalid="ignore"):
        recent = _prev_stat(loss, STATIC_LOSS_WINDOW, STATIC_LOSS_WINDOW, "mean")  # inactive for the first window
        return loss > STATIC_LOSS_FACTOR * recent


def megatron(x: np.ndarray) -> np.ndarray:
    finite = np.isfinite(x)
    nonfinite = ~finite
    order = np.cumsum(finite)  # 1-based count of finite values seen so far
    calibration = finite & (order <= MEGATRON_SAMPLES)
    if len(x) == 0 or order[-1] <= MEGATRON_SAMPLES:
        return nonfinite
    ref = np.abs(x[calibration]).max()
    with np.errstate(invalid="ignore"):
        spiky = finite & (order > MEGATRON_SAMPLES) & (np.abs(x) >= MEGATRON_FACTOR * ref)
    return spiky | nonfinite


def llm_foundry(loss: np.ndarray) -> np.ndarray:
    if len(loss) <= FOUNDRY_WINDOW:
        return np.zeros(len(loss), bool)
    with np.errstate(invalid="ignore"):
        mean = _prev_stat(loss, FOUNDRY_WINDOW, FOUNDRY_WINDOW, "mean")  # only once the window is full
        outlier = loss >= FOUNDRY_MULTIPLIER * mean  # NaN mean (start, or NaN in window): False
    # length of each run of consecutive outliers; flag runs longer than the patience
    run_id = np.cumsum(~outlier)
    run_len = np.bincount(run_id, weights=outlier)[run_id]
    return outlier & (run_len > FOUNDRY_PATIENCE)


def olmo_core(x: np.ndarray) -> np.ndarray:
    """Flags of one signal; OLMo-core skips a step when the loss rule OR the grad rule flags."""
    mean = _prev_stat(x, OLMO_WINDOW, OLMO_MIN_VALUES - 1, "mean")
    std = _prev_stat(x, OLMO_WINDOW, OLMO_MIN_VALUES - 1, "std")
    active = np.arange(1, len(x) + 1) >= OLMO_MIN_VALUES  # values seen, the current one included
    with np.errstate(invalid="ignore"):
        ok = (x - mean) <= OLMO_SIGMA * std  # NaN anywhere: False, the step is skipped
    return active & ~ok


def zclip(grad: np.ndarray) -> np.ndarray:
    """ZClip's recursion (clipped values feed the EMA): a Python loop, benchmark-only."""
    flags = np.zeros(len(grad), bool)
    if len(grad) < ZCLIP_WARMUP:
        return flags
    warm = grad[:ZCLIP_WARMUP]
    mean = float(warm.mean())
    var = float(((warm - mean) ** 2).mean())
    for i in range(ZCLIP_WARMUP, len(grad)):
        g = float(grad[i])
        std = var**0.5
        z = (g - mean) / (std + ZCLIP_EPS)
        value = g
        if z > ZCLIP_Z:
            flags[i] = True
            value = mean + ZCLIP_Z * std / (z / ZCLIP_Z)
        mean = ZCLIP_ALPHA * mean + (1 - ZCLIP_ALPHA) * value
        var = ZCLIP_ALPHA * var + (1 - ZCLIP_ALPHA) * (value - mean) ** 2
    return flags


# -- rules -> incidents ---------------------------------------------------------------------


def _flagged(frame: pl.DataFrame | None, flags: np.ndarray) -> pl.DataFrame:
    if frame is None or frame.height == 0 or not flags.any():
        return pl.DataFrame(schema={"step": pl.Int64, "nonfinite": pl.Boolean, "strength": pl.Float64})
    steps = frame.get_column("step")
    if steps.null_count():  # a log without step numbers: position in training order
        steps = frame.get_column("t") if "t" in frame.columns else pl.Series(range(frame.height))
    values = _values(frame)
    typical = np.nanmedian(np.abs(np.where(np.isfinite(values), values, np.nan))) if np.isfinite(values).any() else 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        strength = np.where(np.isfinite(values), np.abs(values) / (typical or 1.0), np.inf)
    return pl.DataFrame(
        {
            "step": steps.cast(pl.Int64).to_numpy()[flags],
            "nonfinite": ~np.isfinite(values[flags]),
            "strength": strength[flags],  # |value| / the signal's median: comparable across loss and grad norm
        }
    )


def incidents(*flagged: pl.DataFrame, gap: int = GROUP_GAP_STEPS) -> list[dict]:
    """Group flagged steps of any signal into diagnosis-style incident dicts (severity warning)."""
    rows = pl.concat([f for f in flagged if f.height]) if any(f.height for f in flagged) else None
    if rows is None:
        return []
    groups = (
        rows.sort("step")
        .with_columns((pl.col("step").diff().fill_null(gap) >= gap).cum_sum().alias("g"))
        .group_by("g", maintain_order=True)
        .agg(
            pl.col("step").min().alias("step_start"),
            pl.col("step").max().alias("step_end"),
            pl.col("nonfinite").any().alias("nonfinite"),
            pl.col("nonfinite").all().alias("all_nonfinite"),
            pl.col("step").sort_by("strength", descending=True).first().alias("peak_step"),
        )
    )
    out = []
    for n, g in enumerate(groups.iter_rows(named=True)):
        kind = "nonfinite" if g["nonfinite"] else "hard_spike"
        kinds = (
            ["nonfinite"] if g["all_nonfinite"] else (["nonfinite", "hard_spike"] if g["nonfinite"] else ["hard_spike"])
        )
        out.append(
            {
                "id": f"inc-{n + 1}",
                "kind": kind,
                "kinds": kinds,
                "severity": "warning",
                "step_start": g["step_start"],
                "step_end": g["step_end"],
                "peak_step": g["peak_step"],
                "root_cause": None,
                "sample_ids": [],
            }
        )
    return out


def detect_all(loss: pl.DataFrame | None, grad: pl.DataFrame | None) -> dict[str, list[dict]]:
    """Incidents of every baseline for one run's loss and grad-norm series."""
    y, u = _values(loss), _values(grad)
    return {
        "static": incidents(_flagged(loss, static_loss(y)), _flagged(grad, static_grad(u))),
        "megatron": incidents(_flagged(loss, megatron(y)), _flagged(grad, megatron(u))),
        "llm_foundry": incidents(_flagged(loss, llm_foundry(y))),
        "olmo_core": incidents(_flagged(loss, olmo_core(y)), _flagged(grad, olmo_core(u))),
        "zclip": incidents(_flagged(grad, zclip(u))),
    }


def run_baselines(run) -> dict[str, dict]:
    """{baseline name: diagnosis-like dict} for a `RunData`."""
    grad, _derived = run.grad_norm_series()
    found = detect_all(run.series("loss"), grad)
    return {name: {"run_id": run.run_id, "incidents": incs} for name, incs in found.items()}
