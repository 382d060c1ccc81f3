"""Diagnosis time on a long synthetic run: the ten detectors, then attribution and tracing.

    python benchmarks/diagnose_speed.py [--steps 1000000] [--batch 8] [--repeat 2]

The run is `report_size.make_run` (loss, grad norm and loss scale every step, a 24-layer gradient
dump every 1,000 steps, three spikes, five NaN losses, one Inf grad norm, an overflow storm, a
resume) plus, with `--batch B`, a batch manifest of B samples per step (sample IDs, per-sample
losses, tokens). Times `run_detectors` and the whole `diagnose_run` (detectors, grouping, features,
rules, tracing, calibration) on a fresh `RunData` each repeat, and the process's peak RSS. Prints
one Markdown table row for benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_size import make_run  # noqa: E402

from spikeforensics.attribute import diagnose_run  # noqa: E402
from spikeforensics.detect import run_detectors  # noqa: E402
from spikeforensics.params import Params  # noqa: E402
from spikeforensics.rundata import RunData  # noqa: E402


def manifest(n: int, batch: int, seed: int = 1) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    steps = np.repeat(np.arange(1, n + 1, dtype=np.int64), batch)
    idx = np.arange(n * batch, dtype=np.int64)
    return pl.DataFrame(
        {
            "step": steps,
            "rank": np.zeros(idx.size, dtype=np.int32),
            "micro": (idx % batch).astype(np.int32),
            "sample_loss": np.abs(rng.normal(2.5, 0.3, idx.size)),
            "tokens": rng.integers(200, 2048, idx.size),
        }
    ).with_columns(
        pl.format("doc-{}", pl.Series(idx)).alias("sample_id"),
        pl.lit("batches.jsonl").alias("source"),
        pl.Series("line", idx + 1),
    )


def build(n: int, batch: int) -> RunData:
    run, _ = make_run(n)
    if batch:
        run = RunData.from_frames(
            run.run_id, metrics=run.metrics, events=run.events, layers=run.layers, batches=manifest(n, batch)
        )
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=8, help="manifest samples per step (0: no manifest)")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    params = Params.load()
    detect_s, diagnose_s = [], []
    for _ in range(args.repeat):
        run = build(args.steps, args.batch)
        t0 = time.perf_counter()
        findings = run_detectors(run, params)
        detect_s.append(time.perf_counter() - t0)
        run = build(args.steps, args.batch)  # no cached series from the run above
        t0 = time.perf_counter()
        diagnosis = diagnose_run(run, params)
        diagnose_s.append(time.perf_counter() - t0)
    errors = [f.summary for f in findings if f.facts.get("error")]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"steps {args.steps:,}, manifest {args.batch} samples/step, {len(diagnosis['incidents'])} incidents, "
        f"detector errors {len(errors)}",
        file=sys.stderr,
    )
    print(
        f"| {args.steps:,} | {args.batch or '-'} | {min(detect_s):.1f}-{max(detect_s):.1f} s | "
        f"{min(diagnose_s):.1f}-{max(diagnose_s):.1f} s | {peak:,.0f} MiB | {len(diagnosis['incidents'])} |"
    )


if __name__ == "__main__":
    main()
