"""Hand-made training runs for the detector tests: realistic clean curves plus injected faults.

Clean = loss falling fast then slowly (log-normal noise), grad norm large at first then
settling, linear warmup and cosine LR decay. Faults are injected per step by the tests.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from spikeforensics.rundata import RunData


def curves(n: int = 3000, seed: int = 0, loss_noise: float = 0.02, grad_noise: float = 0.12, warmup: int = 100):
    rng = np.random.default_rng(seed)
    step = np.arange(1, n + 1)
    loss = (2.0 + 8.0 * np.exp(-step / 60.0) + 1.0 * np.exp(-step / (n / 3))) * np.exp(rng.normal(0, loss_noise, n))
    grad = (0.4 + 12.0 * np.exp(-step / 40.0)) * np.exp(rng.normal(0, grad_noise, n))
    lr = np.where(
        step < warmup, 3e-4 * step / warmup, 3e-4 * 0.5 * (1 + np.cos(np.pi * (step - warmup) / (n - warmup)))
    )
    return {"step": step, "loss": loss, "grad_norm": grad, "lr": lr}


def metrics_frame(cols: dict, ranks=None, attempt=None, source="train.log") -> pl.DataFrame:
    """Long metrics rows from equal-length columns {'step': ..., name: values}."""
    step = np.asarray(cols["step"])
    n = step.size
    wide = pl.DataFrame(
        {
            "source": [source] * n,
            "line": np.arange(1, n + 1),
            "step": step,
            "record": np.arange(n),
            "attempt": np.zeros(n, dtype=np.int32) if attempt is None else np.asarray(attempt),
            "rank": pl.Series([None] * n, dtype=pl.Int32)
            if ranks is None
            else pl.Series(np.asarray(ranks), dtype=pl.Int32),
            **{k: np.asarray(v, dtype=float) for k, v in cols.items() if k != "step"},
        }
    )
    names = [k for k in cols if k != "step"]
    return wide.unpivot(
        index=["source", "line", "step", "record", "attempt", "rank"],
        on=names,
        variable_name="name",
        value_name="value",
    )


def run_from(cols: dict, layers: pl.DataFrame | None = None, events: pl.DataFrame | None = None, **kw) -> RunData:
    return RunData.from_frames(metrics=metrics_frame(cols, **kw), layers=layers, events=events)


def layer_dump(
    steps: np.ndarray,
    names: list[str],
    seed: int = 0,
    norm: float = 0.2,
    noise: float = 0.1,
    zero_frac: float = 0.001,
    pos_frac: float = 0.5,
    rank=None,
) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    steps = np.asarray(steps)
    rows = []
    for i, name in enumerate(names):
        n = steps.size
        rows.append(
            pl.DataFrame(
                {
                    "source": "grads.csv",
                    "line": np.arange(n) + 1,
                    "step": steps,
                    "rank": pl.Series([rank] * n, dtype=pl.Int32),
                    "layer": [name] * n,
                    "grad_norm": norm * (1 + 0.3 * i) * np.exp(rng.normal(0, noise, n)),
                    "zero_frac": np.full(n, zero_frac),
                    "pos_frac": np.clip(pos_frac + rng.normal(0, 0.01, n), 0, 1),
                    "numel": np.full(n, 4096),
                }
            )
        )
    return pl.concat(rows)
