"""Small hand-made runs for the attribution tests (no detector needed).

`make_run` builds a RunData with a smooth loss, a noisy grad norm, an LR, optional
per-rank rows, wall-clock times, a batch manifest and a spike at `spike_at`; `incident`
builds the matching Incident the detector would hand over.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl

from spikeforensics.detect.base import Evidence, Finding, Incident
from spikeforensics.rundata import RunData

T0 = datetime(2024, 5, 1, 12, 0, 0)
STEP_SECONDS = 10


def step_time(step: int) -> datetime:
    return T0 + timedelta(seconds=STEP_SECONDS * step)


def metric_rows(name, steps, values, attempt=0, rank=None, source="train.log", record0=0, timed=True):
    n = len(steps)
    return pl.DataFrame(
        {
            "source": source,
            "line": [int(s) * 3 + (rank or 0) for s in steps],
            "step": [int(s) for s in steps],
            "record": list(range(record0, record0 + n)),
            "attempt": attempt,
            "rank": rank,
            "name": name,
            "value": [float(v) for v in values],
            "time": [step_time(int(s)) if timed else None for s in steps],
        },
        schema_overrides={"rank": pl.Int32, "time": pl.Datetime("us")},
    )


def make_run(
    n=300,
    spike_at=None,
    spike_grad=30.0,
    spike_loss=6.0,
    ranks=1,
    per_rank_grad=False,
    spike_rank=None,
    per_rank_mode="agree",
    manifest=True,
    bad_sample_loss=None,
    micro=2,
    per_micro=2,
    lr=None,
    seed=0,
    timed=True,
    run_id="synth",
    extra=None,
) -> RunData:
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1)
    loss = 3.0 * np.exp(-steps / 150) + 1.5 + rng.normal(0, 0.01, n)
    grad = 0.5 + rng.normal(0, 0.03, n)
    if spike_at is not None:
        loss[spike_at - 1] = spike_loss
        grad[spike_at - 1] = spike_grad
    lr_vals = lr if lr is not None else np.full(n, 3e-4)
    frames = [metric_rows("loss", steps, loss, timed=timed), metric_rows("lr", steps, lr_vals, timed=timed)]
    if per_rank_grad and ranks > 1:
        for r in range(ranks):
            g = grad.copy()
            if spike_at is not None and per_rank_mode == "mismatch":
                g[spike_at - 1] = spike_grad if r == spike_rank else 0.5
            frames.append(metric_rows("grad_norm", steps, g, rank=r, timed=timed))
    else:
        frames.append(metric_rows("grad_norm", steps, grad, timed=timed))
    batches = None
    if manifest:
        rows = []
        k = 0
        srcs = ("web", "code", "books")
        for s in steps:
            for r in range(ranks):
                for m in range(micro):
                    for _ in range(per_micro):
                        sid = f"{srcs[k % 3]}-{k:06d}"
                        sl = 2.0 + rng.normal(0, 0.1)
                        rows.append((int(s), r, m, sid, sl, 100 + int(rng.integers(0, 20)), srcs[k % 3]))
                        k += 1
        batches = pl.DataFrame(
            rows, schema=["step", "rank", "micro", "sample_id", "sample_loss", "tokens", "sample_source"], orient="row"
        )
        if spike_at is not None and bad_sample_loss is not None:
            r = spike_rank if spike_rank is not None else 0
            batches = batches.with_columns(
                pl.when(
                    (pl.col("step") == spike_at)
                    & (pl.col("rank") == r)
                    & (pl.col("micro") == micro - 1)
                    & (
                        pl.col("sample_id")
                        == batches.filter(
                            (pl.col("step") == spike_at) & (pl.col("rank") == r) & (pl.col("micro") == micro - 1)
                        ).get_column("sample_id")[0]
                    )
                )
                .then(pl.lit(bad_sample_loss))
                .otherwise(pl.col("sample_loss"))
                .alias("sample_loss")
            )
    tables = {"metrics": pl.concat(frames, how="diagonal_relaxed")}
    if batches is not None:
        tables["batches"] = batches
    tables.update(extra or {})
    return RunData.from_frames(run_id, **tables)


def bad_sample_id(run: RunData, step: int, rank: int = 0) -> str:
    b = run.batches.filter((pl.col("step") == step) & (pl.col("rank") == rank)).sort("sample_loss", descending=True)
    return b.get_column("sample_id")[0]


def incident(
    step,
    kind="hard_spike",
    kinds=None,
    severity="critical",
    start=None,
    end=None,
    ranks=None,
    iid="inc-1",
    attempt=0,
    facts=None,
    value=30.0,
) -> Incident:
    start = step if start is None else start
    end = step if end is None else end
    kinds = kinds or [kind]
    f = Finding(
        kind,
        start,
        end,
        step,
        severity,
        20.0,
        f"{kind} at {step}",
        attempt=attempt,
        evidence=[Evidence("grad_norm", step, value, 0.5, value / 0.5)],
    )
    return Incident(
        iid,
        kind,
        kinds,
        severity,
        start,
        end,
        step,
        [f],
        ranks=list(ranks or []),
        attempt=attempt,
        facts=dict(facts or {}),
    )


def events(rows) -> pl.DataFrame:
    """rows: (kind, step, time, detail_json, attempt)."""
    return pl.DataFrame(
        [
            {
                "source": "kern.log",
                "line": i + 1,
                "step": r[1],
                "attempt": r[4] if len(r) > 4 else 0,
                "rank": None,
                "kind": r[0],
                "time": r[2],
                "detail": r[3],
            }
            for i, r in enumerate(rows)
        ],
        schema_overrides={"step": pl.Int64, "time": pl.Datetime("us"), "rank": pl.Int32, "attempt": pl.Int32},
    )


def telemetry(rows) -> pl.DataFrame:
    """rows: (time, host, gpu, field, value)."""
    return pl.DataFrame(
        [
            {
                "source": "smi.csv",
                "line": i + 1,
                "time": r[0],
                "host": r[1],
                "gpu": r[2],
                "field": r[3],
                "value": float(r[4]),
            }
            for i, r in enumerate(rows)
        ],
        schema_overrides={"time": pl.Datetime("us"), "gpu": pl.Int32},
    )


def _contexts(run, incidents, params):
    from spikeforensics.attribute.context import build_context
    from spikeforensics.attribute.tracing import build_trace_context

    ctx = build_context(run, incidents, params)
    return ctx, build_trace_context(run, incidents, ctx.unhealthy, params)


def feats(run, inc, incidents=None, params=None):
    """Every feature of `inc`, computed as build_diagnosis does."""
    from spikeforensics.attribute.features import incident_features
    from spikeforensics.params import Params

    params = params or Params()
    incidents = incidents or [inc]
    ctx, tc = _contexts(run, incidents, params)
    return incident_features(inc, run, ctx, tc, params, incidents)


def ranked(run, inc, incidents=None, confined=None):
    """The incident's samples, most suspicious first (tracing.rank_samples)."""
    from spikeforensics.attribute.tracing import rank_samples
    from spikeforensics.params import Params

    params = Params()
    incidents = incidents or [inc]
    _, tc = _contexts(run, incidents, params)
    return rank_samples(inc, tc, params.tracing, confined)


def rule_toml(name: str, label: str, weight: float, feature: str, explanation: str, value=True, op: str = "==") -> str:
    """One `[[rule]]` of a rules file, firing when `feature op value`."""
    val = str(value).lower() if isinstance(value, bool) else repr(value)
    return (
        f'[[rule]]\nname = "{name}"\nlabel = "{label}"\nweight = {weight}\n'
        f'when = [{{feature = "{feature}", op = "{op}", value = {val}}}]\nexplanation = "{explanation}"\n'
    )
