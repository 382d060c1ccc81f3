"""A hand-made unstable run and its diagnosis, for the report tests.

Deterministic (fixed seed): 3,000 steps, a grad-norm spike at step 1492 with two
NaN steps after it, a resume that replays steps 1900-1999, two ranks, a 12-layer
gradient dump where layer 3 explodes, a batch manifest (one sample ID is a
`<script>` tag), fp16 loss scale with overflow skips, and GPU telemetry.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from spikeforensics.rundata import RunData

SCRIPT_ID = "<script>alert(1)</script>"
SCRIPT_LOG = "iteration 1492 | loss 9.87 </script><script>alert(2)</script>"
T0 = datetime(2024, 5, 1, 12, 0, 0)


def make_run(n: int = 3000, seed: int = 0, with_layers: bool = True, log_path: str | None = None) -> RunData:
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1)
    loss = 2.0 + 3.0 * np.exp(-steps / 600) + rng.normal(0, 0.03, n)
    grad = np.abs(rng.normal(0.6, 0.05, n))
    peak = 1492
    grad[peak - 1] = 43.1
    loss[peak - 1 : peak + 3] += [0.5, 4.0, 2.0, 1.0]
    loss[peak] = np.nan  # step 1493
    grad[peak] = np.inf
    loss[peak + 1] = np.nan  # step 1494
    times = [T0 + timedelta(seconds=2 * i) for i in range(n)]
    frames = []
    for name, values in (
        ("loss", loss),
        ("grad_norm", grad),
        ("lr", np.full(n, 3e-4)),
        ("loss_scale", np.where(steps < 1480, 65536.0, 8192.0)),
    ):
        frames.append(
            pl.DataFrame(
                {
                    "source": "train.log",
                    "line": steps * 2,
                    "step": steps,
                    "record": steps - 1,
                    "attempt": 0,
                    "name": name,
                    "value": values,
                    "time": times,
                }
            )
        )
    # resume: steps 1900..1999 replayed as attempt 1
    replay = np.arange(1900, 2000)
    for name, values in (("loss", loss[replay - 1] + 0.01), ("grad_norm", grad[replay - 1])):
        frames.append(
            pl.DataFrame(
                {
                    "source": "train.log",
                    "line": 2 * n + replay,
                    "step": replay,
                    "record": n + replay - 1900,
                    "attempt": 1,
                    "name": name,
                    "value": values,
                    "time": [T0 + timedelta(seconds=2 * n + i) for i in range(len(replay))],
                }
            )
        )
    # two ranks' grad norms, printed on their own lines of the same log
    for rank in (0, 1):
        g = grad * (1 + 0.02 * rank)
        if rank == 1:
            g = g.copy()
            g[peak - 1] = 80.0
        frames.append(
            pl.DataFrame(
                {
                    "source": "train.log",
                    "line": steps * 2 + 1,
                    "step": steps,
                    "record": steps - 1,
                    "attempt": 0,
                    "rank": rank,
                    "name": "grad_norm",
                    "value": g,
                }
            )
        )
    metrics = pl.concat(
        [
            f.with_columns(pl.col("time").cast(pl.Datetime("us")))
            if "time" in f.columns
            else f.with_columns(pl.lit(None, dtype=pl.Datetime("us")).alias("time"))
            for f in frames
        ],
        how="diagonal_relaxed",
    )
    events = pl.DataFrame(
        {
            "source": "train.log",
            "line": [2 * 1478, 2 * 1479, 2 * 1493, 2 * 1494, 2 * n + 1],
            "step": [1478, 1479, 1493, 1494, 1900],
            "attempt": [0, 0, 0, 0, 1],
            "kind": ["overflow", "overflow", "nan", "nan", "resume"],
            "detail": [
                json.dumps({"old_scale": 65536, "new_scale": 32768}),
                json.dumps({"old_scale": 32768, "new_scale": 16384}),
                '{"metric": "loss", "value": "nan"}',
                '{"metric": "loss", "value": "nan"}',
                "{}",
            ],
        }
    )
    out = {"metrics": metrics, "events": events}
    if with_layers:
        lsteps = np.arange(10, n + 1, 10)
        names = [f"transformer.h.{i}.attn.c_attn" for i in range(12)]
        rows = []
        for li, lname in enumerate(names):
            g = np.abs(rng.normal(0.15, 0.02, len(lsteps))) * (0.8**li)
            if li == 3:
                g[np.searchsorted(lsteps, 1490)] = 40.0
            rows.append(
                pl.DataFrame(
                    {
                        "source": "grads.csv",
                        "line": np.arange(len(lsteps)) + 2 + li * len(lsteps),
                        "step": lsteps,
                        "layer": lname,
                        "grad_norm": g,
                    }
                )
            )
        out["layers"] = pl.concat(rows)
    ids = [f"shard03-{i:06d}" for i in range(200)]
    out["batches"] = pl.DataFrame(
        {
            "source": "batches.jsonl",
            "line": np.arange(1, 13),
            "step": [1492] * 8 + [1491] * 4,
            "rank": [1] * 8 + [0] * 4,
            "sample_id": ["shard03-000123", SCRIPT_ID] + ids[2:12],
            "sample_loss": [41.0, 30.5] + [2.1] * 10,
        }
    )
    tel = []
    for gpu in (0, 1):
        t = [T0 + timedelta(seconds=10 * i) for i in range(n // 5)]
        temp = 60 + rng.normal(0, 1, len(t)) + (gpu == 1) * 5
        tel.append(
            pl.DataFrame(
                {
                    "source": "smi.csv",
                    "line": np.arange(len(t)) + 2,
                    "time": t,
                    "host": "node-a",
                    "gpu": gpu,
                    "field": "temperature",
                    "value": temp,
                }
            )
        )
        tel.append(
            pl.DataFrame(
                {
                    "source": "smi.csv",
                    "line": np.arange(len(t)) + 2,
                    "time": t,
                    "host": "node-a",
                    "gpu": gpu,
                    "field": "power",
                    "value": 300 + rng.normal(0, 10, len(t)),
                }
            )
        )
    out["telemetry"] = pl.concat(tel).with_columns(pl.col("time").cast(pl.Datetime("us")))
    out["sources"] = pl.DataFrame(
        {
            "source": ["train.log", "grads.csv", "batches.jsonl", "weird <b>name</b>.log"],
            "path": [log_path or "/nonexistent/train.log", "/x/grads.csv", "/x/batches.jsonl", "/x/weird.log"],
            "format": ["megatron", "layer_grads", "batches", "unknown"],
            "lines": [6200, 3601, 12, 3],
            "records": [3100, 3600, 12, 0],
            "unparsed": [2, 0, 0, 3],
            "unparsed_examples": [
                json.dumps([[7, "garbage </script> line"], [9, "<img src=x onerror=alert(3)>"]]),
                "[]",
                "[]",
                "[]",
            ],
        }
    )
    return RunData.from_frames("gpt-small-03", **out)


def make_diagnosis(with_log_lines: bool = True) -> dict:
    inc1 = {
        "id": "inc-1",
        "kind": "hard_spike",
        "kinds": ["hard_spike", "nonfinite", "layer_outlier"],
        "severity": "critical",
        "step_start": 1490,
        "step_end": 1496,
        "peak_step": 1492,
        "ranks": [1],
        "layers": ["transformer.h.3.attn.c_attn"],
        "root_cause": "data_outlier",
        "confidence": 0.86,
        "alternatives": [{"root_cause": "hardware_fault", "confidence": 0.10}],
        "explanation": "Grad norm jumped 70x on one batch whose two samples have 15x the median loss; layer 3 led by one step.",
        "sample_ids": ["shard03-000123", SCRIPT_ID] + [f"shard03-{i:06d}" for i in range(2, 14)],
        "evidence": [
            {"signal": "grad_norm", "step": 1492, "value": 43.1, "baseline": 0.61, "ratio": 70.6},
            {"signal": "loss", "step": 1493, "value": "nan"},
            {
                "signal": "layer_grad_norm",
                "step": 1490,
                "layer": "transformer.h.3.attn.c_attn",
                "value": 40.0,
                "baseline": 0.09,
                "ratio": 444.0,
            },
        ],
        "actions": [
            "Drop or repair sample shard03-000123 and resume from the checkpoint at step 1400",
            f"Inspect sample {SCRIPT_ID}",
        ],
    }
    if with_log_lines:
        inc1["log_lines"] = [
            {"line": 2982 + 2 * i, "text": f"iteration {1491 + i} | loss {2.3 + i:.2f}", "source": "train.log"}
            for i in range(3)
        ]
        inc1["log_lines"][1]["text"] = SCRIPT_LOG
    inc2 = {
        "id": "inc-2",
        "kind": "loss_scale_collapse",
        "kinds": ["loss_scale_collapse"],
        "severity": "warning",
        "step_start": 1478,
        "step_end": 1479,
        "peak_step": 1479,
        "ranks": [],
        "layers": [],
        "root_cause": "fp16_overflow",
        "confidence": 0.55,
        "alternatives": [],
        "explanation": "Two overflow skips halved the loss scale twice.",
        "sample_ids": [],
        "evidence": [{"signal": "loss_scale", "step": 1479, "value": 16384, "baseline": 65536, "ratio": 0.25}],
        "actions": ["Raise the minimum loss scale or switch to bf16"],
    }
    return {
        "schema_version": 1,
        "tool_version": "0.1.0",
        "run_id": "gpt-small-03",
        "generated_at": "2024-05-01 12:00 UTC",
        "steps": {"first": 1, "last": 3000, "count": 3000},
        "verdict": {
            "status": "unstable",
            "root_cause": "data_outlier",
            "summary": "One bad batch at step 1492 (samples shard03-000123 and another) blew up layer 3 and produced two NaN losses.",
        },
        "incidents": [inc2, inc1],
        "calibration": {
            "recommended_clip_norm": 1.1,
            "basis": "P99 of pre-clip grad norm over healthy steps x 1.5",
            "current_clip_norm": 1.0,
            "clip_rate": 0.0007,
        },
        "notes": [
            "Loss scale collapsed once; see inc-2.",
            {"severity": "info", "text": "telemetry shows nothing unusual"},
        ],
        "skiplist": {"run_id": "gpt-small-03", "steps": [1492], "sample_ids": ["shard03-000123", SCRIPT_ID]},
    }
