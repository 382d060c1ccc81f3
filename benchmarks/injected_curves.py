"""Healthy real training curves for the injected-fault benchmark, and their honest extension.

Sources (nothing here is invented data):
- the healthy logs of the real-log corpus (`sample_logs/real/*/*/FACTS.toml` with `healthy = true`),
  ingested with the library itself (`ingest_paths` into a scratch store, then `RunData.series`):
  their loss, grad norm and LR as the framework printed them, one value per logged step;
- the curves the CURVES helper collected in `benchmarks/real_curves/` (one Parquet or CSV per curve with
  `step` and any of `loss`, `grad_norm`, `lr`; provenance in that folder's PROVENANCE.md).

A curve is kept when it has at least `MIN_RECORDS` finite positive loss (or grad-norm) records.

Extension to a longer run (`extend`): real curves hold hundreds to a few thousand records; the benchmark
needs runs of up to 1,000,000 steps. An extended curve is *synthetic*, built from the real one:
1. on log scale, the trend is the centred rolling median of the real series (`trend_window` records);
   the residual is the real value minus that trend;
2. the trend is stretched to the new length (linear interpolation at position i * (n-1)/(m-1)): the
   real shape (fast early fall, slow tail) over a longer run;
3. the residual is resampled by a moving-block bootstrap: blocks of `block` consecutive real residuals
   (start drawn uniformly after the first 10% of the curve, whose residuals are the start-up transient
   rather than noise), concatenated to the new length. Blocks keep the short-range autocorrelation
   and the real heavy tails (an outlier of the real run is copied, never scaled); loss and grad norm use
   the *same* block starts, so their cross-correlation survives too;
4. the LR is the real LR schedule stretched the same way (no noise: an LR is not noisy).
A run no longer than the real curve is a contiguous slice of the real curve itself (real data, untouched).
"""

from __future__ import annotations

import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

# the real-log sets whose healthy logs give curves: those already scored once (a first-look set being collected
# must stay unseen until its one scoring, benchmarks/real_logs.py), real_logs.ALL itself (benchmarks/ is on the
# path of its scripts and of tests/test_injected.py)
from real_logs import ALL as REAL_SPLITS

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "sample_logs" / "real"
CURVES_DIR = Path(__file__).resolve().parent / "real_curves"
MIN_RECORDS = 50  # fewer records give no usable noise sample (one baseline window)
SIGNALS = ("loss", "grad_norm", "lr")
MAD_SCALE = 1.4826


@dataclass
class Curve:
    name: str
    origin: str  # "sample_logs/real/dev/<case>" or "benchmarks/real_curves/<file>"
    values: dict = field(default_factory=dict)  # signal -> float64 array (NaN where a record lacks it)

    @property
    def n(self) -> int:
        return len(next(iter(self.values.values())))

    def has(self, signal: str) -> bool:
        v = self.values.get(signal)
        return v is not None and int(np.isfinite(v).sum()) >= MIN_RECORDS // 2


def _from_columns(name: str, origin: str, frame: pl.DataFrame) -> Curve | None:
    values = {}
    for s in SIGNALS:
        if s in frame.columns:
            v = frame.get_column(s).cast(pl.Float64).fill_null(np.nan).to_numpy().copy()
            v[~(np.isfinite(v) & (v > 0))] = np.nan
            if np.isfinite(v).sum() >= MIN_RECORDS // 2:
                values[s] = v
    main = values.get("loss", values.get("grad_norm"))
    if main is None or np.isfinite(main).sum() < MIN_RECORDS:
        return None
    # gaps in a real series (a record without that field) are filled from the neighbours: the benchmark
    # needs a value on every record to inject into; the filled records are few and flagged nowhere
    for s, v in values.items():
        ok = np.isfinite(v)
        if not ok.all():
            idx = np.arange(len(v))
            values[s] = np.interp(idx, idx[ok], v[ok])
    return Curve(name=name, origin=origin, values=values)


def _ingested(folder: Path, scratch: Path) -> Curve | None:
    from spikeforensics.ingest import ingest_paths
    from spikeforensics.rundata import RunData
    from spikeforensics.store import Store

    run_id = re.sub(r"[^A-Za-z0-9._-]+", "-", folder.name)[:100]
    store = Store(scratch / run_id)
    files = [p for p in sorted(folder.iterdir()) if p.is_file() and p.name != "FACTS.toml"]
    try:
        ingest_paths(files, run_id, store)
    except Exception:  # a log the library cannot read gives no curve
        return None
    if not store.has_run(run_id):
        return None
    run = RunData.load(store, run_id)
    frames = []
    # a loss the product judges without a ratio scale (a signed objective, one side of a GAN's pair) is no
    # curve to inject ratio faults into: its spikes and drifts are not judged (docs/diagnosis.md `limited`)
    # neither is an RL critic's loss, whose rise from its bootstrapped start is not judged either (`schema.VALUE_LOSS`)
    ratio_free = run.loss_without_ratio() is not None or run.loss_is_critic()
    for s in SIGNALS:
        if s == "loss" and ratio_free:
            continue
        series = run.grad_norm_series()[0] if s == "grad_norm" else run.series(s)
        series = series.filter((pl.col("attempt") == 0) & pl.col("rank").is_null() & pl.col("step").is_not_null())
        if series.height:
            frames.append(series.group_by("step").agg(pl.col("value").first().alias(s)))
    if not frames:
        return None
    table = frames[0]
    for f in frames[1:]:
        table = table.join(f, on="step", how="full", coalesce=True)
    return _from_columns(folder.name, str(folder.relative_to(ROOT)), table.sort("step"))


def load_curves(include_collected: bool = True, collected: Path | None = None) -> list[Curve]:
    """Every healthy real curve with enough records, in a stable order (`collected`: another folder of
    collected curves than benchmarks/real_curves, e.g. a frozen copy for before/after comparisons)."""
    folder = Path(collected) if collected else CURVES_DIR
    out = []
    with tempfile.TemporaryDirectory(prefix="sf-curves-") as tmp:
        for facts in sorted(f for split in REAL_SPLITS for f in (REAL / split).glob("*/FACTS.toml")):
            try:
                meta = tomllib.loads(facts.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError):
                continue
            if meta.get("healthy") is True and int(meta.get("step_records") or 0) >= MIN_RECORDS:
                curve = _ingested(facts.parent, Path(tmp))
                if curve is not None:
                    out.append(curve)
    if include_collected and folder.is_dir():
        for path in sorted(folder.iterdir()):
            try:
                if path.suffix == ".parquet":
                    frame = pl.read_parquet(path)
                elif path.suffix == ".csv":
                    frame = pl.read_csv(path, infer_schema_length=10000)
                else:
                    continue
            except Exception:  # a malformed drop-in is skipped, not fatal
                continue
            if "step" in frame.columns:
                frame = frame.sort("step")
            curve = _from_columns(path.stem, f"{folder.name}/{path.name}", frame)
            if curve is not None:
                out.append(curve)
    return out


def freeze(curves: list[Curve], folder: Path) -> list[Path]:
    """Write `curves` as one parquet each (`NNN_<name>.parquet`: `step` = record index, one column per signal), in
    their order, so that `load_curves(collected=folder)` with no real sets (`--curves FOLDER --real-sets none`)
    returns the same curves to any version of the code: a strict before/after of two trees on the same cases
    (the cases are drawn from the curves, so a curve read differently shifts every later draw)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, c in enumerate(curves):
        path = folder / f"{i:03d}_{re.sub(r'[^A-Za-z0-9._-]+', '-', c.name)[:60]}.parquet"
        pl.DataFrame({"step": np.arange(c.n), **c.values}).write_parquet(path)
        out.append(path)
    return out


# -- noise and extension ---------------------------------------------------------------------


def rolling_median(y: np.ndarray, window: int) -> np.ndarray:
    return pl.Series(y).rolling_median(window, min_samples=1, center=True).to_numpy()


def trend_window(n: int) -> int:
    """Odd window for the trend: 1/8 of the curve, within 5..51 records."""
    w = int(max(5, min(51, n // 8)))
    return w | 1


def local_sigma(y: np.ndarray, at: int, reach: int = 250, window: int = 51) -> float:
    """The curve's own noise at record `at`: robust sigma (MAD x 1.4826) of the log-residuals around a
    centred rolling median (`window`), over the `reach` records on each side."""
    lo, hi = max(0, at - reach - window), min(len(y), at + reach + window)
    part = y[lo:hi]
    part = part[np.isfinite(part)]
    if len(part) < 10:
        return float("nan")
    resid = part - rolling_median(part, min(window, max(5, len(part) // 4) | 1))
    core = (
        resid[min(window, len(resid) // 4) : len(resid) - min(window, len(resid) // 4)]
        if len(resid) > 4 * window
        else resid
    )
    return float(MAD_SCALE * np.median(np.abs(core - np.median(core))))


def extend(curve: Curve, m: int, rng: np.random.Generator) -> tuple[dict, bool]:
    """Values of every signal over `m` records: a random contiguous slice of the real curve when it is long
    enough (extended=False), else the stretched trend plus block-bootstrapped residuals (extended=True)."""
    n = curve.n
    if m <= n:
        start = int(rng.integers(0, n - m + 1))
        return {s: v[start : start + m].copy() for s, v in curve.values.items()}, False
    w = trend_window(n)
    early = max(w // 2, n // 10)  # the first records' residuals are the start-up transient, not noise
    block = int(max(5, min(50, (n - early) // 10)))
    starts = rng.integers(early, n - block + 1, size=m // block + 1)
    idx = (starts[:, None] + np.arange(block)[None, :]).ravel()[:m]
    pos = np.arange(m) * (n - 1) / (m - 1)
    out = {}
    for s, v in curve.values.items():
        y = np.log(v)
        trend = rolling_median(y, w)
        stretched = np.interp(pos, np.arange(n), trend)
        if s == "lr":
            out[s] = np.exp(np.interp(pos, np.arange(n), y))
        else:
            out[s] = np.exp(stretched + (y - trend)[idx])
    return out, True
