"""What a user may set as a parameter, and how a parameters file is read.

The allowed range of every numeric parameter (`RANGES`, with why), the lookup of a parameter's range by
dotted name, field name or kind (`range_spec`, `allowed_range`), and the bounded read of a user file
(`read_small_file`, `read_small_toml`: regular files only, a size cap). `params.Params` checks every value
from `--params FILE` and `--set` against these; a bad one is a `ParamError` (a usage error: exit 2).
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path

# --- what a user may set (`--params FILE`, `--set`): checked on load, a bad value is a usage
# error (exit 2) naming the parameter and its allowed range ------------------------------------
# why: every window, count and step distance is in records or steps; a million is beyond any
# logged run's record count (the 1M-iteration Megatron log has 10^6 records), and rolling
# windows allocate per window element: 10^12 aborts the process (a Rust panic), not the run
MAX_INT_PARAM = 1_000_000
# why: thresholds, ratios and norms: the largest default is 1e8 (absurd_grad_norm); 1e15
# leaves room for any unit while keeping arithmetic on them finite
MAX_FLOAT_PARAM = 1e15
# why: names that are shares or probabilities: a value outside [0, 1] means nothing
FRACTION_SUFFIXES = ("_frac", "_share", "_quantile", "confidence", "_chance", "_prob")
# why: a --params file is a few dozen lines; a bigger or special file (a device, a pipe) is a mistake
MAX_PARAMS_FILE_BYTES = 1 << 20
_MAXI, _MAXF = f"{MAX_INT_PARAM:g}", f"{MAX_FLOAT_PARAM:g}"

# The allowed range of every numeric parameter, with why: "[lo, hi]" closed, "(lo, hi)" open ends.
# Looked up by dotted name, then by field name (any section), then by kind ("int", "fraction" for
# names ending in FRACTION_SUFFIXES, "float"). A value outside is a usage error (exit 2) naming the
# parameter and this range, from a --params file and from --set alike.
RANGES: dict[str, tuple[str, str]] = {
    # integers: counts, windows, spans in records or steps
    "int": (f"[1, {_MAXI}]", "a window, count or span of no records means nothing (a rolling window of 0 fails)"),
    **{
        k: (f"[0, {_MAXI}]", "0 is meaningful: no gap, no guard band, no padding, or the check turned off")
        for k in (
            "guard",
            "short_series_records",
            "start_max_step",
            "joint_reach",
            "group_gap",
            "merge_gap",
            "fast_recovery",
            "lead_max",
            "calibration_steps",
            "min_numel",
            "early_min",
            "reach",
            "max_alternatives",
            "pad_steps",
            "start_records",
            "first_update_steps",
            "steps_before",
            "after_peak_span",
            "align_max_offset",
            "skip_max_outliers",
        )
    },
    "mad_window": (f"[5, {_MAXI}]", "a robust scale from fewer than 5 residuals is the event itself"),
    **{k: (f"[4, {_MAXI}]", "a trend test over fewer than 4 bins has no p-value") for k in ("bins", "max_bins")},
    # floats: shares and probabilities
    "fraction": ("[0, 1]", "a share or probability outside [0, 1] means nothing"),
    **{
        k: ("(0, 1)", "a quantile, p-value or chance of exactly 0 or 1 is no threshold (all or nothing passes)")
        for k in ("quantile", "own_outlier_tail_quantile", "loss_ref_quantile", "trend_p", "corroborate_chance")
    },
    **{
        k: ("[0, 1]", "a rate, band or relative tolerance: a share of steps or of a value")
        for k in (
            "tolerance",
            "healthy_high",
            "healthy_low",
            "lr_band",
            "tight_band",
            "loose_band",
            "unscale_rate",
            "high",
            "very_high",
            "too_loose",
            "rank_agree_rtol",
            "align_min_corr",
            "align_min_gain",
            "plateau_tol",
        )
    },
    **{
        k: ("[0.5, 1]", "'nearly all zeros / one sign' is a share above one half")
        for k in ("zero_frac_stuck", "sign_stuck")
    },
    **{
        k: ("(0, 0.5)", "the distance of a sign share from 0 or 1: at 0.5 every layer is 'one-signed'")
        for k in ("sign_ratio.extreme", "sign_ratio.mild")
    },
    **{
        k: ("(0, 1)", "a fall to a fraction of the reference level: 1 or more is no fall")
        for k in ("vanishing.ratio", "vanishing.severe_ratio")
    },
    # floats: rise ratios (x times a baseline)
    **{
        k: (f"[1, {_MAXF}]", "a rise over a baseline: below 1 a fall would count as a rise")
        for k in (
            "loss_ratio_floor",
            "grad_ratio_floor",
            "loss_ratio_critical",
            "grad_ratio_critical",
            "recurring_ratio",
            "joint_loss_ratio",
            "joint_grad_ratio",
            "layer_ratio_min",
            "bump_loss_ratio",
            "bump_grad_ratio",
            "corroborate_sample_ratio",
            "rise_ratio",
            "layer_outlier.ratio",
            "shift_excess",
            "sustained_ratio_alone",
            "global_ratio_max",
            "vol_ratio",
            "grad_rise",
            "settle_factor",
            "unscale_factor",
            "band_ratio",
            "min_ratio",
            "critical_ratio",
            "loss_effect_ratio",
            "rank_outlier_ratio",
            "replay_spike_ratio",
            "drift_ratio",
            "lr_rise_after_decay",
            "lr_rise_no_decay",
            "loss_explode_ratio",
            "sample_outlier_ratio",
            "nan_rise_ratio",
            "back_at_once_ratio",
            "own_outlier_ratio",
            "margin",
            "min_halvings",
        )
    },
    # floats: thresholds in noise units, and scales that divide
    **{
        k: (f"(0, {_MAXF}]", "a threshold in noise units (sigma) or a scale that divides: at 0 every record passes")
        for k in (
            "z_threshold",
            "grad_only_z",
            "recurring_z",
            "joint_z",
            "bump_z",
            "onset_z",
            "recover_z",
            "band_z",
            "loss_effect_z",
            "jump_z",
            "level_c",
            "loss_noise_c",
            "sigma_floor_loss",
            "sigma_floor_grad",
            "absurd_grad_norm",
            "astronomical_norm",
            "unscaled_norm_median",
            "scaled_ratio_lo",
            "scaled_ratio_hi",
        )
    },
    "float": (f"[0, {_MAXF}]", "a threshold, weight or norm: not negative, and finite arithmetic on it"),
}
_KINDS = ("int", "fraction", "float")
_RANGE_RE = re.compile(r"([\[(])\s*([^,\s]+)\s*,\s*([^\])\s]+)\s*([\])])")


class ParamError(ValueError):
    """A parameter value or name that cannot be used (a usage error: exit 2)."""


def range_spec(dotted: str, default=None) -> tuple[str, str]:
    """(interval text, why) of a numeric parameter (`RANGES`); `default` gives its kind (else looked up)."""
    key = dotted.rpartition(".")[2]
    if dotted in RANGES:
        return RANGES[dotted]
    if key in RANGES and key not in _KINDS:
        return RANGES[key]
    if default is None:
        from spikeforensics.params import Params  # (the defaults' home imports this module)

        section, _, name = dotted.partition(".")
        default = getattr(getattr(Params(), section), name)
    if isinstance(default, int):
        return RANGES["int"]
    return RANGES["fraction"] if key.endswith(FRACTION_SUFFIXES) else RANGES["float"]


def allowed_range(dotted: str, default=None) -> tuple[float, float, bool, bool]:
    """(low, high, low end open, high end open) of a numeric parameter."""
    m = _RANGE_RE.fullmatch(range_spec(dotted, default)[0])
    return float(m.group(2)), float(m.group(3)), m.group(1) == "(", m.group(4) == ")"


def _in_range(value: float, dotted: str, default) -> bool:
    lo, hi, lo_open, hi_open = allowed_range(dotted, default)
    return (lo < value if lo_open else lo <= value) and (value < hi if hi_open else value <= hi)


def read_small_file(path: str | Path, cap: int, what: str) -> bytes:
    """A user file's bytes: a regular file (not a device, pipe or socket, also behind a symlink)
    of at most `cap` bytes, checked with stat before it is opened; ValueError otherwise (one line)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: {what} must be a regular file")
        if st.st_size > cap:
            raise ValueError(f"{path}: {what} file is {st.st_size:,} bytes; at most {cap:,} are read")
        with open(path, "rb") as fh:
            data = fh.read(cap + 1)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > cap:
        raise ValueError(f"{path}: {what} file is over {cap:,} bytes")
    return data


def read_small_toml(path: str | Path, cap: int, what: str) -> dict:
    """A user TOML file (`read_small_file`), parsed; ValueError otherwise (one line)."""
    data = read_small_file(path, cap, what)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise ValueError(f"{path}: cannot read {what}: {reason}") from None
