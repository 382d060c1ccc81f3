"""Where the memory of a diagnose goes, phase by phase (issues 14/16).

    python benchmarks/diagnose_memory.py [--steps 1000000] [--store S --run r] [--out report.html]

Without `--store`, writes `--steps` JSONL records with `ingest_speed.gen_jsonl` (loss, grad norm, lr,
tokens/s, loss scale, a NaN grad norm every 10,000 steps) and ingests them into a temporary store.
Then loads the run, diagnoses it and writes the reports in this process, as `spikeforensics
diagnose` does, with each phase wrapped: the load, every detector, grouping, the run context,
tracing, raw log lines, the per-incident attribution, calibration, coverage, and the report's
writers and charts. A thread samples the resident set (/proc/self/status VmRSS) every 3 ms and
charges it to every phase running; tracemalloc does not see polars' or Arrow's buffers.

Prints one Markdown row per phase: calls, CPU seconds, RSS when it started (first call), the
highest RSS sampled inside it, and the rise over its start; then the process peak (ru_maxrss).
RSS includes memory the allocator has not handed back yet, so a phase's rise can include a
predecessor's freed buffers: the peak column, not the rise, is what the process paid.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SAMPLE_S = 0.003


def rss_mb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return 0


class Phases:
    def __init__(self):
        self.stack: list[str] = []
        self.rows: dict[str, dict] = {}
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self):
        while True:
            now = rss_mb()
            for label in list(self.stack):  # every phase running (an outer one holds its inner ones)
                row = self.rows[label]
                row["peak"] = max(row["peak"], now)
            time.sleep(SAMPLE_S)

    def wrap(self, label: str, fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            row = self.rows.setdefault(label, {"calls": 0, "cpu": 0.0, "start": rss_mb(), "peak": 0})
            row["calls"] += 1
            self.stack.append(label)
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                row["cpu"] += time.process_time() - t
                row["peak"] = max(row["peak"], rss_mb())
                self.stack.pop()

        return inner

    def patch(self, module: str, name: str, label: str | None = None) -> None:
        mod = importlib.import_module(module)
        if hasattr(mod, name):  # a renamed helper is skipped, not an error
            setattr(mod, name, self.wrap(label or f"{module.rsplit('.', 1)[-1]}.{name}", getattr(mod, name)))


def instrument(phases: Phases) -> None:
    from spikeforensics import detect

    detect.DETECTORS = tuple((n, phases.wrap(f"detect.{n}", fn)) for n, fn in detect.DETECTORS)
    phases.patch("spikeforensics.detect", "group_incidents", "detect.group_incidents")
    phases.patch("spikeforensics.detect.runs_in_log", "_split", "detect.runs_in_log")
    diag = "spikeforensics.attribute.diagnosis"
    for name in ("build_context", "build_trace_context", "log_lines_all", "_incident_json", "calibrate", "coverage"):
        phases.patch(diag, name)
    for name in ("incident_features", "rank_samples"):
        phases.patch(diag, name)
    phases.patch("spikeforensics.report", "write_outputs", "report.json+skiplist")
    phases.patch("spikeforensics.report.markdown", "render_markdown", "report.markdown")
    for name in ("overview", "incident_windows"):
        phases.patch("spikeforensics.report.charts", name, f"charts.{name}")
    for name in ("layer_heatmap", "rank_comparison", "clip_rate", "loss_scale", "telemetry", "calibration_hist"):
        phases.patch("spikeforensics.report.panels", name, f"panels.{name}")
    phases.patch("spikeforensics.report.html", "render_html", "report.html (all)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--store", help="an existing store (else a generated run in a temporary one)")
    ap.add_argument("--run", default="r")
    ap.add_argument("--out", help="report path (default: in a temporary folder)")
    args = ap.parse_args()

    from spikeforensics import api
    from spikeforensics.params import Params

    tmp = tempfile.TemporaryDirectory()
    store = args.store
    if store is None:
        from ingest_speed import gen_jsonl

        path = Path(tmp.name) / "metrics.jsonl"
        gen_jsonl(path, args.steps)
        store = str(Path(tmp.name) / "store")
        api.ingest([path], run_id=args.run, store=store)
        path.unlink()
    out = args.out or str(Path(tmp.name) / "report.html")

    phases = Phases()
    instrument(phases)
    base = rss_mb()
    t0 = time.process_time()
    run = phases.wrap("load RunData", api.load_run)(args.run, store)
    diagnosis = phases.wrap("diagnose (all)", api.diagnose)(run, params=Params.load())
    phases.wrap("write reports (all)", api.write_reports)(diagnosis, run, store=store, out=out)
    cpu = time.process_time() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024

    print(f"run {args.run}: {run.metric_rows():,} metric rows, {len(diagnosis['incidents'])} incidents")
    print("| phase | calls | CPU s | RSS at start MB | peak inside MB | rise MB |")
    print("|---|---|---|---|---|---|")
    for label, r in phases.rows.items():
        print(f"| {label} | {r['calls']} | {r['cpu']:.1f} | {r['start']} | {r['peak']} | {r['peak'] - r['start']} |")
    print(f"\nbefore load {base} MB; process peak {peak} MB; CPU {cpu:.1f} s")
    tmp.cleanup()


if __name__ == "__main__":
    main()
