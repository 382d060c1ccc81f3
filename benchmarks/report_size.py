"""Report size and render time on a very long synthetic run.

    python benchmarks/report_size.py [--steps 10000000] [--out /tmp/sf-bench] [--no-browser]

Builds a run of N steps in memory (loss, grad norm and loss scale per step, a
24-layer gradient dump every 1,000 steps, three incidents with NaN steps, an
overflow storm and a resume), writes the HTML report with `write_reports`, and
opens it in headless chromium (tests/chromium.py) to time the page until every
chart is drawn. Prints one Markdown table row for benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from spikeforensics.report import write_reports  # noqa: E402
from spikeforensics.rundata import RunData  # noqa: E402


def make_run(n: int, seed: int = 0) -> tuple[RunData, dict]:
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1, dtype=np.int64)
    loss = (2.0 + 3.0 * np.exp(-steps / (n / 5)) + rng.normal(0, 0.03, n)).astype(np.float64)
    grad = np.abs(rng.normal(0.6, 0.05, n))
    peaks = [int(n * 0.31), int(n * 0.62), int(n * 0.9)]
    for p in peaks:
        grad[p - 1] = 45.0
        loss[p - 1] += 3.0
    loss[peaks[1] : peaks[1] + 5] = np.nan  # five NaN steps after the second spike
    grad[peaks[2]] = np.inf
    scale = np.where(steps < peaks[1], 65536.0, 4096.0)
    cols = []
    for name, values in (("loss", loss), ("grad_norm", grad), ("loss_scale", scale)):
        cols.append(
            pl.DataFrame({"step": steps, "value": values}).with_columns(
                pl.lit("train.log").alias("source"),
                (pl.col("step") * 3).alias("line"),
                (pl.col("step") - 1).alias("record"),
                pl.lit(0).alias("attempt"),
                pl.lit(name).alias("name"),
            )
        )
    metrics = pl.concat(cols, how="diagonal_relaxed")
    storm = np.arange(peaks[1] - 2000, peaks[1], 2)
    events = pl.DataFrame({"source": "train.log", "line": storm * 3, "step": storm, "kind": "overflow", "detail": "{}"})
    events = pl.concat(
        [
            events,
            pl.DataFrame(
                {
                    "source": "train.log",
                    "line": [peaks[0] * 3 + 1],
                    "step": [peaks[0] - 500],
                    "kind": ["resume"],
                    "detail": ["{}"],
                }
            ),
        ]
    )
    lsteps = np.arange(1000, n + 1, 1000, dtype=np.int64)
    layers = pl.concat(
        [
            pl.DataFrame(
                {"step": lsteps, "grad_norm": np.abs(rng.normal(0.1, 0.01, len(lsteps))) * (0.9**i)}
            ).with_columns(pl.lit(f"model.layers.{i}.mlp").alias("layer"), pl.lit("grads.csv").alias("source"))
            for i in range(24)
        ]
    )
    run = RunData.from_frames("bench-10m", metrics=metrics, events=events, layers=layers)
    incidents = []
    for k, p in enumerate(peaks, 1):
        incidents.append(
            {
                "id": f"inc-{k}",
                "kind": "hard_spike",
                "kinds": ["hard_spike"],
                "severity": "critical",
                "step_start": p - 2,
                "step_end": p + 6,
                "peak_step": p,
                "ranks": [],
                "layers": ["model.layers.5.mlp"],
                "root_cause": "data_outlier",
                "confidence": 0.8,
                "alternatives": [{"root_cause": "lr_too_high", "confidence": 0.1}],
                "explanation": "synthetic",
                "sample_ids": [f"s-{p}-{i}" for i in range(5)],
                "evidence": [{"signal": "grad_norm", "step": p, "value": 45.0, "baseline": 0.6, "ratio": 75.0}],
                "actions": ["skip the batch"],
            }
        )
    diagnosis = {
        "schema_version": 1,
        "tool_version": "bench",
        "run_id": "bench-10m",
        "steps": {"first": 1, "last": n, "count": n},
        "verdict": {"status": "unstable", "root_cause": "data_outlier", "summary": "synthetic benchmark"},
        "incidents": incidents,
        "calibration": {
            "recommended_clip_norm": 1.0,
            "current_clip_norm": 1.0,
            "clip_rate": 0.001,
            "basis": "synthetic",
        },
    }
    return run, diagnosis


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10_000_000)
    ap.add_argument("--out", default="/tmp/sf-bench")
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    t0 = time.perf_counter()
    run, diagnosis = make_run(args.steps)
    t1 = time.perf_counter()
    paths = write_reports(diagnosis, run, out / "report.html", out / "diagnosis.json", out / "report.md")
    t2 = time.perf_counter()
    size = paths["html"].stat().st_size
    print(f"built run of {args.steps:,} steps ({run.metrics.height:,} metric rows) in {t1 - t0:.1f} s", file=sys.stderr)
    render = "not measured"
    if not args.no_browser:
        import chromium

        if chromium.find():
            status = chromium.load(paths["html"], budget_ms=60000, timeout=300)
            ok = "ok" if status.ok() else f"FAILED {status.errors} {status.charts_rendered}/{status.charts_expected}"
            render = f"{status.render_ms / 1000:.1f} s in page ({status.seconds:.1f} s chromium wall), {ok}"
            chromium.screenshot(paths["html"], out / "report.png", height=2400)
    print(f"| {args.steps:,} | {size / 1e6:.2f} MB | {t2 - t1:.1f} s | {render} |")


if __name__ == "__main__":
    main()
