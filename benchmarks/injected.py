"""Real-noise fault benchmark: faults injected, with known ground truth, into healthy real training curves.

    python benchmarks/injected.py [--seed 12] [--cases 520] [--quick] [--json OUT] [--write-readme]

Curves (`injected_curves.py`): the healthy logs of `sample_logs/real/` (ingested with the library) and the
curves collected in `benchmarks/real_curves/`: loss, grad norm and LR as they really fluctuated. A run up
to the real curve's length is a contiguous slice of it (real data); a longer run is an *extension*: the
curve's rolling-median trend stretched, plus its detrended residuals resampled in blocks (moving-block
bootstrap: autocorrelation and heavy tails kept; loss and grad norm share the block starts). Extended runs
are synthetic and are reported as such (`extended` in the JSON); they are never presented as real logs. A
curve is stretched to at most `MAX_STRETCH` (20) times its records: a longer run drawn for a short curve is
cut to that.

Cases (seeded; `--cases N` of them, `--quick` = 100): a curve, a run length (200 to 1,000,000 steps;
mostly short, a few long), a logging interval (1, or 10 steps a record for a fifth of them), an fp16 flag
(a third: a loss-scale series with a healthy scaler's rare overflow and regrowth), then one fault:

| fault | what is injected (on log scale, at a random record) | truth |
|---|---|---|
| `spike` | loss and grad norm raised together over 1-20 steps (decaying to 1/3 of the peak) | located incident |
| `blip` | grad norm only, 1.5-100x over 1-20 steps; the loss untouched | located finding, a note counts |
| `nan` | 1-10 records of NaN loss and grad norm | located incident, kind `nonfinite` |
| `divergence` | the loss climbs over 5-200 records to its peak and stays; the log ends 20-500 records later | located incident |
| `drift_loss` / `drift_grad` | a slow rise over 100-5,000 steps, a hold, a slow fall | located incident |
| `overflow` | a storm of 5-40 skipped steps (no loss/grad row, overflow event, loss scale halved) | root cause `fp16_overflow` |
| `lr_fault` | the LR jumps 2-10x, or its warmup restarts; the loss and grad norm answer with a bump | root cause `lr_schedule` |

Effect size: every effect is in units of the curve's own noise at the injection site: the robust sigma
(MAD x 1.4826) of the log-residuals around a centred 51-record rolling median over +/-250 records
(`injected_curves.local_sigma`). The size is the injected peak shift of log(value) over that sigma (for
`spike` the loss's; the grad norm moves by the same number of its own sigmas, at least 1.5x, at most
100x). Curves whose loss is printed too coarsely for a noise estimate (sigma < 0.003: a loss printed to 4
decimals at 1e-4) get no injection and no extension; they are clean controls as they are.

Scoring. A fault is *found* when an incident (severity warning or critical; for a grad-norm-only `blip` a
note counts too) overlaps its injected steps widened by one logging interval. Recall by effect bucket is
the detection curve. False incidents: warning+ incidents on the untouched curves (the real curves as they
are, and clean runs of the same generator), per 10,000 records (logged steps). Root cause top-1 where the
injection defines it (`overflow` -> `fp16_overflow`, `lr_fault` -> `lr_schedule`; `nan` is judged on the
incident's kind). The five practitioner baselines (`baselines.py`) are scored on the same runs.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import baselines  # noqa: E402
import injected_curves as ic  # noqa: E402

README = HERE / "README.md"
BEGIN, END = "<!-- injected:begin -->", "<!-- injected:end -->"
BUCKETS = (1.5, 2, 3, 4, 6, 10, 20)  # lower edges, in sigma
KIND_WEIGHTS = {
    "spike": 0.24,
    "blip": 0.14,
    "nan": 0.08,
    "divergence": 0.1,
    "drift_loss": 0.1,
    "drift_grad": 0.08,
    "overflow": 0.12,
    "lr_fault": 0.14,
}
ROOT_CAUSE = {"overflow": "fp16_overflow", "lr_fault": "lr_schedule"}
BASELINES = ("static", "megatron", "llm_foundry", "olmo_core", "zclip")
MIN_SIGMA = 0.003  # a loss printed to 4 decimals at 1e-4 has no measurable noise: no injection there
SCALE0 = 65536.0
# a curve is stretched to at most this many times its own records: a 73-record curve bootstrapped to
# 1,000,000 records repeats its ~60 residuals 13,700 times over, which is no noise model (session 7 saw
# 928 false incidents on one such run); a longer run takes a longer curve or is cut to the cap
MAX_STRETCH = 20


@dataclass
class Case:
    id: str
    curve: str
    kind: str  # a fault kind, or "clean"
    steps: int
    interval: int
    fp16: bool
    extended: bool = False
    start: int = 0  # injected steps (inclusive)
    end: int = 0
    effect: float | None = None  # sigma units
    ratio: float | None = None  # peak multiplier on the signal the effect is measured on
    detail: dict = field(default_factory=dict)
    found: bool | None = None
    noted: bool | None = None  # found, or reported as a note (info) at the fault
    kind_ok: bool | None = None
    root_cause: str | None = None
    root_ok: bool | None = None
    false_incidents: int = 0  # warning+ incidents away from the injection (clean: all of them)
    baselines: dict = field(default_factory=dict)
    seconds: float = 0.0


# -- generating a case -------------------------------------------------------------------------


def _length(rng: np.random.Generator, quick: bool) -> int:
    r = rng.random()
    if r < 0.6:
        return int(rng.integers(200, 2000))
    if r < 0.87:
        return int(np.exp(rng.uniform(np.log(2000), np.log(20000))))
    if r < 0.985 or quick:
        return int(np.exp(rng.uniform(np.log(20000), np.log(200000))))
    return 1_000_000


def _effect(rng: np.random.Generator) -> float:
    return float(np.exp(rng.uniform(np.log(1.5), np.log(40.0))))


def _profile(width: int) -> np.ndarray:
    return np.exp(-np.arange(width) * math.log(3) / max(1, width - 1))


def _fp16_background(n: int, interval: int, rng) -> tuple[np.ndarray, list[int]]:
    """A healthy dynamic loss scale: an overflow halves it (that step is skipped), 1,000 clean steps double it
    again (GradScaler / DeepSpeed defaults). An overflow is the scaled gradient leaving the fp16 range, so its
    chance grows with the scale: one in ~1,500 steps at the top scale, half that a halving lower (a chance
    that ignores the scale makes a random walk that wanders down to the floor on long runs: no healthy scaler)."""
    scale = np.empty(n)
    s, clean, skipped = SCALE0, 0, []
    p = interval / 1500.0
    for i in range(n):
        if i > 20 and rng.random() < p * s / SCALE0:
            s, clean = max(1.0, s / 2), 0
            skipped.append(i)
        else:
            clean += interval
            if clean >= 1000:
                s, clean = min(s * 2, SCALE0), 0
        scale[i] = s
    return scale, skipped


def make_case(
    idx: int,
    curve: ic.Curve,
    kind: str,
    rng: np.random.Generator,
    quick: bool = False,
    steps: int | None = None,
    interval: int | None = None,
    fp16: bool | None = None,
    **fix,
) -> tuple[Case, dict]:
    """(case, arrays): arrays hold per-record `loss`, `grad_norm`, `lr`, `loss_scale` (any may be absent),
    `skip` (bool: overflow-skipped record) and `step`. `steps`, `interval`, `fp16` and `fix` (`at`: record,
    `effect`: sigma, `width`: records) pin what is otherwise drawn (tests)."""
    steps = _length(rng, quick) if steps is None else steps
    if interval is None:
        interval = 10 if rng.random() < 0.2 and steps >= 2000 else 1
    if fp16 is None:
        fp16 = kind == "overflow" or rng.random() < 0.33
    n = min(max(ic.MIN_RECORDS * 2, steps // interval), max(curve.n, MAX_STRETCH * curve.n))
    values, extended = ic.extend(curve, n, rng)
    arrays = {s: v for s, v in values.items()}
    arrays["step"] = (np.arange(n, dtype=np.int64) + 1) * interval
    arrays["skip"] = np.zeros(n, bool)
    if fp16:
        arrays["loss_scale"], skipped = _fp16_background(n, interval, rng)
        arrays["skip"][skipped] = True
    case = Case(
        id=f"c{idx:04d}",
        curve=curve.name,
        kind=kind,
        steps=int(arrays["step"][-1]),
        interval=interval,
        fp16=fp16,
        extended=extended,
    )
    if kind != "clean":
        _inject(case, arrays, rng, **fix)
    return case, arrays


def _site(n: int, rng, lo=0.1, hi=0.9) -> int:
    return int(rng.integers(int(n * lo), max(int(n * lo) + 1, int(n * hi))))


SIGMA_FLOOR = 1e-3


def _shift(arrays: dict, signal: str, at: int, prof: np.ndarray, amount: float) -> None:
    hi = min(len(arrays[signal]), at + len(prof))
    arrays[signal][at:hi] *= np.exp(amount * prof[: hi - at])


def _inject(
    case: Case, a: dict, rng, at: int | None = None, effect: float | None = None, width: int | None = None
) -> None:
    n, iv, kind = len(a["step"]), case.interval, case.kind
    main = "grad_norm" if kind in ("blip", "drift_grad") else "loss"
    if at is None:
        at = _site(n, rng, 0.5, 0.9) if kind == "divergence" else _site(n, rng)
    # a curve printed to few digits can sit still around the site (a spread of exactly 0): its noise then
    # counts as 0.1% (log units), so an effect in sigma stays defined; any measured spread is kept as it is
    sig = {s: ic.local_sigma(np.log(a[s]), at) or SIGMA_FLOOR for s in ("loss", "grad_norm") if s in a}
    case.detail["sigma"] = {s: round(v, 5) for s, v in sig.items()}
    e = _effect(rng) if effect is None else effect
    if kind in ("spike", "blip"):
        width = max(1, math.ceil(int(rng.integers(1, 21)) / iv)) if width is None else width
        prof = _profile(width)
        if kind == "blip":
            amount = float(np.clip(e * sig["grad_norm"], math.log(1.5), math.log(100)))
            e = amount / sig["grad_norm"]
            _shift(a, "grad_norm", at, prof, amount)
        else:
            amount = e * sig["loss"]
            _shift(a, "loss", at, prof, amount)
            if "grad_norm" in a:
                _shift(a, "grad_norm", at, prof, float(np.clip(e * sig["grad_norm"], math.log(1.5), math.log(100))))
        case.ratio = math.exp(amount)
        end = at + width - 1
    elif kind == "nan":
        width = int(rng.integers(1, 11)) if width is None else width
        for s in ("loss", "grad_norm"):
            if s in a:
                a[s][at : at + width] = np.nan
        e, end = None, at + width - 1
    elif kind == "divergence":
        ramp = int(rng.integers(5, 201))
        stop = min(n, at + ramp + int(rng.integers(20, 501)))
        for s in list(a):
            a[s] = a[s][:stop]
        prof = np.minimum(1.0, (np.arange(stop - at) + 1) / ramp)
        _shift(a, "loss", at, prof, e * sig["loss"])
        if "grad_norm" in a:
            _shift(a, "grad_norm", at, prof, min(math.log(100), e * sig["grad_norm"]))
        case.ratio, end = math.exp(e * sig["loss"]), stop - 1
        case.detail["ramp_records"] = ramp
    elif kind in ("drift_loss", "drift_grad"):
        span = max(10, min(int(0.3 * n), int(np.exp(rng.uniform(np.log(100), np.log(5000)))) // iv))
        at = min(at, n - int(2.5 * span) - 1) if n > 2.5 * span + 10 else int(0.05 * n)
        prof = np.concatenate([np.linspace(0, 1, span), np.ones(span // 2), np.linspace(1, 0, span)])
        _shift(a, main, at, prof, e * sig[main])
        case.ratio, end = math.exp(e * sig[main]), at + len(prof) - 1
        case.detail["span_records"] = span
    elif kind == "overflow":
        count = int(rng.integers(5, 41))
        span = count * int(rng.integers(1, 6))
        hits = np.sort(
            rng.choice(np.arange(at, min(n, at + span)), size=min(count, min(n, at + span) - at), replace=False)
        )
        a["skip"][hits] = True
        scale = a["loss_scale"]
        for h in hits:
            scale[h:] = np.maximum(1.0, scale[h:] / 2)  # halved at each overflow; regrowth only later
        e, end = None, int(hits[-1])
        case.detail["overflows"] = len(hits)
    elif kind == "lr_fault":
        lr = a["lr"]
        if rng.random() < 0.5:
            factor = float(np.exp(rng.uniform(np.log(2), np.log(10))))
            lr[at:] *= factor
            case.detail.update(fault="lr_jump", factor=round(factor, 2))
            lag = 0
        else:
            warm = max(5, int(rng.integers(20, 501)) // iv)
            peak = float(np.max(lr[:at]))
            ramp = np.linspace(0.01, 1.0, warm) * peak
            hi = min(n, at + warm)
            lr[at:hi] = ramp[: hi - at]
            lr[hi:] = np.maximum(lr[hi:], peak * lr[hi:] / max(lr[hi - 1], 1e-30)) if hi < n else lr[hi:]
            case.detail.update(fault="warmup_restart", warmup_records=warm)
            lag = warm // 2
        bump_at = min(n - 1, at + lag)
        width = int(rng.integers(5, 51))
        prof = _profile(width)
        _shift(a, "loss", bump_at, prof, e * sig["loss"])
        if "grad_norm" in a:
            _shift(a, "grad_norm", bump_at, prof, float(np.clip(e * sig["grad_norm"], math.log(1.5), math.log(100))))
        case.ratio, end = math.exp(e * sig["loss"]), min(n - 1, bump_at + width - 1)
    case.effect = None if e is None else round(float(e), 3)
    case.start, case.end = int(a["step"][at]), int(a["step"][min(end, len(a["step"]) - 1)])


def pick_kind(curve: ic.Curve, rng) -> str | None:
    kinds = [
        k
        for k in KIND_WEIGHTS
        if not (
            (k in ("blip", "drift_grad") and not curve.has("grad_norm")) or (k == "lr_fault" and not curve.has("lr"))
        )
    ]
    w = np.array([KIND_WEIGHTS[k] for k in kinds])
    return str(rng.choice(kinds, p=w / w.sum()))


def injectable(curve: ic.Curve) -> bool:
    y = np.log(curve.values["loss"]) if curve.has("loss") else np.log(curve.values["grad_norm"])
    return (
        np.nanmedian([ic.local_sigma(y, i) for i in np.linspace(curve.n * 0.1, curve.n * 0.9, 5).astype(int)])
        >= MIN_SIGMA
    )


def build_cases(curves: list[ic.Curve], count: int, seed: int, quick: bool):
    """Yield (case, arrays): the untouched real curves, clean generated runs, then `count` faults."""
    rng = np.random.default_rng(seed)
    k = 0
    for c in curves:  # the real curves as they are
        a = {s: v.copy() for s, v in c.values.items()}
        a["step"], a["skip"] = np.arange(1, c.n + 1, dtype=np.int64), np.zeros(c.n, bool)
        yield Case(id=f"real-{k:03d}", curve=c.name, kind="clean", steps=c.n, interval=1, fp16=False), a
        k += 1
    n_clean = max(10, count // 10)
    usable = [c for c in curves if injectable(c) and c.has("loss")]  # a coarsely printed loss is not extended
    for i in range(n_clean):
        c = usable[int(rng.integers(len(usable)))]
        yield make_case(k + i, c, "clean", rng, quick)
    for i in range(count):
        c = usable[int(rng.integers(len(usable)))]
        yield make_case(k + n_clean + i, c, pick_kind(c, rng), rng, quick)


# -- a case as a run -------------------------------------------------------------------------------


def to_run(case: Case, a: dict):
    from spikeforensics.rundata import RunData

    n = len(a["step"])
    step, rec = a["step"], np.arange(n, dtype=np.int64)
    keep = ~a["skip"]
    cols = []
    for name in ("loss", "grad_norm", "lr", "loss_scale"):
        if name not in a:
            continue
        mask = keep if name in ("loss", "grad_norm") else np.ones(n, bool)  # a skipped step prints no loss / norm
        cols.append(
            pl.DataFrame(
                {
                    "step": step[mask],
                    "record": rec[mask],
                    "value": a[name][mask].astype(np.float64),
                    "line": rec[mask] + 1,
                }
            ).with_columns(pl.lit(name).alias("name"))
        )
    metrics = pl.concat(cols).with_columns(pl.lit("train.log").alias("source"), pl.lit(0, pl.Int32).alias("attempt"))
    events = None
    if "loss_scale" in a and a["skip"].any():
        idx = np.flatnonzero(a["skip"])
        scale = a["loss_scale"]
        old = np.where(idx > 0, scale[np.maximum(idx - 1, 0)], SCALE0)
        details = [json.dumps({"old_scale": float(o), "new_scale": float(s)}) for o, s in zip(old, scale[idx])]
        events = pl.DataFrame(
            {
                "source": "train.log",
                "line": idx + 1,
                "step": step[idx],
                "kind": "overflow",
                "detail": details,
                "attempt": np.zeros(len(idx), np.int32),
            }
        )
    return RunData.from_frames(re.sub(r"[^A-Za-z0-9._-]", "-", case.id), metrics=metrics, events=events)


def _overlaps(inc: dict, lo: int, hi: int) -> bool:
    return int(inc["step_start"]) <= hi and int(inc["step_end"]) >= lo


def score_case(case: Case, a: dict, params) -> Case:
    from spikeforensics.attribute import diagnose_run

    run = to_run(case, a)
    t0 = time.perf_counter()
    try:
        diagnosis = diagnose_run(run, params)
    except Exception as exc:  # reported (and counted as not found), not fatal: the benchmark scores the rest
        case.detail["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        diagnosis = {}
    case.seconds = round(time.perf_counter() - t0, 3)
    incidents = [i for i in diagnosis.get("incidents", []) if i.get("severity") in ("warning", "critical")]
    notes = diagnosis.get("notes", [])
    failed = [
        n.get("summary", "") for n in notes if any(e.get("signal") == "detector_error" for e in n.get("evidence", []))
    ]
    if failed:  # a detector that raised: the figures of this run are partial, and the table says so
        case.detail["error"] = "; ".join(failed)[:300]
    lo, hi = case.start - case.interval, case.end + case.interval
    if case.kind == "clean":
        case.false_incidents = len(incidents)
    else:
        pool = incidents + ([x for x in notes if "step_start" in x] if case.kind == "blip" else [])
        hits = [i for i in pool if _overlaps(i, lo, hi)]
        case.found = bool(hits)
        case.noted = case.found or any(_overlaps(x, lo, hi) for x in notes if "step_start" in x)
        # incidents nowhere near the fault (+/- 50 records): false ones, as on the clean runs
        reach = 50 * case.interval
        case.false_incidents = sum(1 for i in incidents if not _overlaps(i, lo - reach, hi + reach))
        if hits:
            best = max(hits, key=lambda i: {"critical": 2, "warning": 1}.get(i.get("severity"), 0))
            case.root_cause = best.get("root_cause")
            if case.kind == "nan":
                case.kind_ok = any("nonfinite" in (i.get("kinds") or [i.get("kind")]) for i in hits)
            if case.kind in ROOT_CAUSE:
                case.root_ok = case.root_cause == ROOT_CAUSE[case.kind]
    found = baselines.run_baselines(run)
    for name, diag in found.items():
        incs = diag["incidents"]
        if case.kind == "clean":
            case.baselines[name] = {"false": len(incs)}
        else:
            reach = 50 * case.interval
            case.baselines[name] = {
                "found": any(_overlaps(i, lo, hi) for i in incs),
                "false": sum(1 for i in incs if not _overlaps(i, lo - reach, hi + reach)),
            }
    return case


# -- tables ------------------------------------------------------------------------------------------


def bucket(effect: float | None) -> str | None:
    if effect is None:
        return None
    edges = [b for b in BUCKETS if effect >= b]
    if not edges:
        return None
    lo = edges[-1]
    i = BUCKETS.index(lo)
    return f"{lo:g}-{BUCKETS[i + 1]:g}" if i + 1 < len(BUCKETS) else f"{lo:g}+"


def _rate(hits: list[bool]) -> str:
    return f"{sum(hits) / len(hits):.2f}" if hits else "-"


def summarise(cases: list[Case], n_real: int) -> dict:
    faults = [c for c in cases if c.kind != "clean"]
    sized = [c for c in faults if bucket(c.effect) is not None]
    curve = {}
    for b in [bucket(x + 1e-9) for x in BUCKETS]:
        group = [c for c in sized if bucket(c.effect) == b]
        curve[b] = {
            "n": len(group),
            "spikeforensics": [c.found for c in group],
            **{name: [c.baselines[name]["found"] for c in group] for name in BASELINES},
        }
    clean = [c for c in cases if c.kind == "clean"]
    real = clean[:n_real]
    gen = clean[n_real:]
    records = lambda cs: sum(c.steps // c.interval for c in cs)  # noqa: E731
    per10k = lambda k, cs: 1e4 * k / max(1, records(cs))  # noqa: E731
    return {
        "cases": len(faults),
        "clean_real": len(real),
        "clean_generated": len(gen),
        "curve": curve,
        "by_kind": {
            k: {
                "n": len([c for c in faults if c.kind == k]),
                "found": [c.found for c in faults if c.kind == k],
                "noted": [bool(c.noted) for c in faults if c.kind == k],
            }
            for k in KIND_WEIGHTS
        },
        "ge6": {
            "spikeforensics": [c.found for c in sized if c.effect >= 6],
            **{b: [c.baselines[b]["found"] for c in sized if c.effect >= 6] for b in BASELINES},
        },
        "false": {
            "real": {
                "records": records(real),
                "incidents": sum(c.false_incidents for c in real),
                **{b: sum(c.baselines[b]["false"] for c in real) for b in BASELINES},
            },
            "generated": {
                "records": records(gen),
                "incidents": sum(c.false_incidents for c in gen),
                **{b: sum(c.baselines[b]["false"] for c in gen) for b in BASELINES},
            },
            "away_from_faults": {"records": records(faults), "incidents": sum(c.false_incidents for c in faults)},
        },
        "per10k": {
            "clean": per10k(sum(c.false_incidents for c in clean), clean),
            **{b: per10k(sum(c.baselines[b]["false"] for c in clean), clean) for b in BASELINES},
        },
        "root": {
            k: {
                "n": len([c for c in faults if c.kind == k and c.found]),
                "ok": [c.root_ok for c in faults if c.kind == k and c.found],
                "got": sorted({str(c.root_cause) for c in faults if c.kind == k and c.found}),
            }
            for k in ROOT_CAUSE
        },
        "nan_kind": [c.kind_ok for c in faults if c.kind == "nan" and c.found],
        "errors": sum("error" in c.detail for c in cases),
        "extended": sum(c.extended for c in faults),
        "long": sum(c.steps >= 100_000 for c in faults),
    }


def markdown(s: dict, meta: dict) -> str:
    out = [
        f"Seed {meta['seed']}, {s['cases']} injected cases ({s['extended']} on extended curves, "
        f"{s['long']} of >= 100,000 steps), {s['clean_real']} untouched real curves and "
        f"{s['clean_generated']} clean generated runs; {meta['curves']} healthy real curves; "
        f"{meta['seconds']:.0f} s."
        + (f" **{s['errors']} runs raised** (scored as nothing found)." if s["errors"] else ""),
        "",
        "Recall by effect size (sigma = the curve's own robust noise at the site; all faults with a size):",
        "",
        "| effect (sigma) | cases | spikeforensics | " + " | ".join(BASELINES) + " |",
        "|---|---|---|" + "---|" * len(BASELINES),
    ]
    for b, row in s["curve"].items():
        if row["n"]:
            out.append(
                f"| {b} | {row['n']} | **{_rate(row['spikeforensics'])}** | "
                + " | ".join(_rate(row[n]) for n in BASELINES)
                + " |"
            )
    g = s["ge6"]
    out.append(
        f"| >= 6 (pooled) | {len(g['spikeforensics'])} | **{_rate(g['spikeforensics'])}** | "
        + " | ".join(_rate(g[n]) for n in BASELINES)
        + " |"
    )
    out += [
        "",
        'Recall by fault kind (all sizes; "or noted": an info note at the fault counts too):',
        "",
        "| fault | cases | found | found or noted |",
        "|---|---|---|---|",
    ]
    for k, row in s["by_kind"].items():
        if row["n"]:
            out.append(f"| `{k}` | {row['n']} | {_rate(row['found'])} | {_rate(row['noted'])} |")
    f = s["false"]
    out += [
        "",
        "False incidents (warning+) per 10,000 records on the untouched curves:",
        "",
        "| | records | spikeforensics | " + " | ".join(BASELINES) + " |",
        "|---|---|---|" + "---|" * len(BASELINES),
    ]
    for name in ("real", "generated"):
        row = f[name]
        rate = lambda k, r=row["records"]: f"{k} ({1e4 * k / max(1, r):.2f})"  # noqa: E731
        out.append(
            f"| {name} curves | {row['records']:,} | **{rate(row['incidents'])}** | "
            + " | ".join(rate(row[b]) for b in BASELINES)
            + " |"
        )
    away = f["away_from_faults"]
    out += [
        "",
        f"Warning+ incidents more than 50 records away from the injected fault, in the {s['cases']} faulty "
        f"runs: {away['incidents']} over {away['records']:,} records "
        f"({1e4 * away['incidents'] / max(1, away['records']):.2f} per 10,000).",
        "",
        "Root cause top-1 of the found faults where the injection defines it:",
        "",
    ]
    for k, row in s["root"].items():
        out.append(
            f"- `{k}` -> `{ROOT_CAUSE[k]}`: {_rate(row['ok'])} of {row['n']} (labels given: {', '.join(row['got'])})"
        )
    out.append(f"- `nan` -> kind `nonfinite` in the incident: {_rate(s['nan_kind'])} of {len(s['nan_kind'])}")
    return "\n".join(out)


def write_readme(text: str, command: str) -> None:
    body = README.read_text(encoding="utf-8")
    section = (
        f"{BEGIN}\n## Injected faults on real noise\n\n`{command}` (see the script's docstring for how curves "
        f"are extended and faults injected; extended runs are synthetic, built from real curves).\n\n{text}\n{END}"
    )
    if BEGIN in body and END in body:
        body = body[: body.index(BEGIN)] + section + body[body.index(END) + len(END) :]
    else:
        body = body.rstrip("\n") + "\n\n" + section + "\n"
    row = (
        "| injected faults | `python benchmarks/injected.py --write-readme` | recall by effect size (in units of "
        "the curve's own noise) of faults injected into healthy real curves, false incidents per 10,000 records on "
        "the untouched curves, root cause where the fault defines it, with the five baselines |"
    )
    if "| injected faults |" not in body:
        anchor = "| diagnosis speed |"
        at = body.index(anchor)
        eol = body.index("\n", at)
        body = body[: eol + 1] + row + "\n" + body[eol + 1 :]
    README.write_text(body, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--cases", type=int, default=520)
    ap.add_argument("--quick", action="store_true", help="about 100 cases, no 1,000,000-step run")
    ap.add_argument("--json", help="write every case and the summary here")
    ap.add_argument("--write-readme", action="store_true")
    ap.add_argument("--no-collected", action="store_true", help="only the curves of sample_logs/real")
    ap.add_argument("--curves", help="folder of collected curves instead of benchmarks/real_curves (a frozen copy)")
    ap.add_argument(
        "--freeze-curves",
        metavar="DIR",
        help="write the curves this tree reads to DIR (one parquet each) and stop: run two trees with "
        "`--curves DIR --real-sets none` for a before/after on the same cases",
    )
    ap.add_argument(
        "--real-sets",
        help="comma-separated sets of sample_logs/real whose healthy logs give curves (default: all scored ones); "
        "a before/after comparison of two trees needs the same curves, so the sets both trees read",
    )
    args = ap.parse_args(argv)
    from spikeforensics.params import Params

    params = Params.load() if hasattr(Params, "load") else Params()
    count = 100 if args.quick else args.cases
    t0 = time.perf_counter()
    if args.real_sets:
        ic.REAL_SPLITS = tuple(args.real_sets.split(","))
    curves = ic.load_curves(include_collected=not args.no_collected, collected=args.curves)
    print(f"{len(curves)} healthy real curves", file=sys.stderr)
    if args.freeze_curves:
        ic.freeze(curves, Path(args.freeze_curves))
        print(f"wrote {len(curves)} curves to {args.freeze_curves}", file=sys.stderr)
        return 0
    cases = []
    for case, arrays in build_cases(curves, count, args.seed, args.quick):
        cases.append(score_case(case, arrays, params))
        if len(cases) % 50 == 0:
            print(f"  {len(cases)} runs, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    meta = {
        "seed": args.seed,
        "curves": len(curves),
        "seconds": time.perf_counter() - t0,
        "curve_origins": [c.origin for c in curves],
    }
    summary = summarise(cases, len(curves))
    text = markdown(summary, meta)
    print(text)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"meta": meta, "summary": summary, "cases": [asdict(c) for c in cases]}, indent=1, default=str),
            encoding="utf-8",
        )
    if args.write_readme:
        cmd = (
            "python benchmarks/injected.py"
            + (f" --seed {args.seed}" if args.seed != 12 else "")
            + (" --quick" if args.quick else f" --cases {count}" if count != 520 else "")
        )
        write_readme(text, cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
