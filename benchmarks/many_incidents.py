"""Cost per incident: one long run with many incidents vs the same run with a few.

    python benchmarks/many_incidents.py [--steps 1000000] [--incidents 100] [--few 3] [--repeat 3]

Writes two plain-text training logs of `--steps` step lines each (`step N | loss ... | lr ... |
grad_norm ... | tokens_per_s ...`, about 80 bytes a line) into a temporary folder: one with
`--incidents` loss spikes, one with `--few`. Every spike is real (the loss jumps 2.5x and the
grad norm 60x for two steps, then recovers) and the spikes are spread evenly over the run, so each
is its own incident. Both logs are ingested once into a temporary store (not timed). Then, `--repeat`
times and alternating between the two runs (many, few, many, few, ...) so that a slow spell of the
machine hits both, each repeat loads the run fresh from the store and times the whole
`diagnose_run` plus `write_reports` (HTML, JSON, skip list, Markdown).

Target (issue 13): the many-incident run in at most 2x the time of the few-incident run. Prints
the times and one Markdown table row for benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path


def spike_steps(steps: int, count: int) -> list[int]:
    """`count` peak steps spread evenly over the run, clear of its first 5%."""
    start = max(2000, steps // 20)
    gap = (steps - start) // count
    return [start + k * gap for k in range(count)]


def write_log(path: Path, steps: int, peaks: list[int], seed: int = 0) -> int:
    """One step line per step; a spike is two steps with 2.5x loss and 60x grad norm."""
    rng = random.Random(seed)
    hit = {p: 1.0 for p in peaks} | {p + 1: 0.6 for p in peaks}
    with open(path, "w", buffering=1 << 22) as fh:
        buf = []
        for it in range(1, steps + 1):
            loss = 2.0 + 8.0 / (1 + it / 1000) + rng.gauss(0, 0.02)
            gn = 0.5 + 0.1 * rng.random()
            k = hit.get(it)
            if k:
                loss *= 1 + 1.5 * k
                gn *= 60 * k
            buf.append(
                f"step {it} | loss {loss:.5f} | lr {3e-4 * min(1, it / 2000):.4e} | grad_norm {gn:.4f} | "
                f"tokens_per_s {50000 + rng.random() * 100:.1f}\n"
            )
            if len(buf) >= 8192:
                fh.write("".join(buf))
                buf = []
        fh.write("".join(buf))
    return path.stat().st_size


def time_once(store, run_id: str, out: Path) -> tuple[float, int]:
    from spikeforensics import api
    from spikeforensics.attribute import diagnose_run
    from spikeforensics.params import Params

    run = api.load_run(run_id, store)
    t0 = time.perf_counter()
    diagnosis = diagnose_run(run, Params.load())
    api.write_reports(diagnosis, run, store, out=out / f"{run_id}.html")
    elapsed = time.perf_counter() - t0
    return elapsed, sum(1 for i in diagnosis["incidents"] if i["severity"] != "info")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--incidents", type=int, default=100)
    ap.add_argument("--few", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tmp", default=None, help="folder for the logs and the store (default: a temporary one)")
    args = ap.parse_args()

    from spikeforensics import api

    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        tmp = Path(tmp)
        store = api.open_store(tmp / "store")
        runs = {}
        for label, count in (("many", args.incidents), ("few", args.few)):
            log = tmp / f"{label}.log"
            size = write_log(log, args.steps, spike_steps(args.steps, count))
            t0 = time.perf_counter()
            api.ingest([log], run_id=label, store=store)
            print(
                f"{label}: {count} spikes, log {size / 1e6:.0f} MB, ingested in {time.perf_counter() - t0:.1f} s",
                file=sys.stderr,
            )
            runs[label] = count
        times: dict[str, list[float]] = {"many": [], "few": []}
        found: dict[str, int] = {}
        for r in range(args.repeat):
            for label in ("many", "few") if r % 2 == 0 else ("few", "many"):
                elapsed, found[label] = time_once(store, label, tmp)
                times[label].append(elapsed)
                print(f"  repeat {r + 1} {label}: {elapsed:.1f} s, {found[label]} incidents", file=sys.stderr)
    many, few = times["many"], times["few"]
    ratio = min(many) / min(few)
    print(
        f"many ({found['many']} incidents): {', '.join(f'{t:.1f}' for t in many)} s; "
        f"few ({found['few']} incidents): {', '.join(f'{t:.1f}' for t in few)} s; best-to-best ratio {ratio:.2f}"
    )
    print(
        f"| {args.steps:,} | {found['many']} vs {found['few']} | {min(many):.1f}-{max(many):.1f} s | "
        f"{min(few):.1f}-{max(few):.1f} s | {ratio:.2f}x |"
    )


if __name__ == "__main__":
    main()
