"""Ingest speed: spikeforensics' Megatron ingest vs a straightforward line-by-line `re`
parser writing the same Parquet, each in its own process (wall time, peak RSS).

    python benchmarks/ingest_speed.py [--iterations 1000000] [--scale 5] [--keep]

Generates a synthetic Megatron-LM log (one `iteration` line per step plus noise: timer
lines, warnings, a validation block every 1000 steps, a checkpoint line, a few fp16
overflow messages) into /tmp, then runs, side by side:

- `spikeforensics`: `ingest_paths([log], run, Store(tmp))` in a fresh `python -c` process
  (imports, hashing, parsing, events and Parquet writing included);
- `re loop`: the same fields with one `re` match per line, rows appended to lists,
  written to one Parquet file with pyarrow (no events, no hashing: a lower bound).

Peak memory is each child's own `ru_maxrss` (from `os.wait4`); cpu is its user + system
time. `--scale N` also runs spikeforensics on an N-times larger log to check that its
peak memory stays flat. The load average is printed around each run (stderr): other
jobs on the machine slow both sides.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LINE = (
    "[2024-05-01 12:{mm:02d}:{ss:02d}.{us:06d}] iteration {it:8d}/{total:8d} | consumed samples: {cs:12d} | "
    "elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tf:.1f} | "
    "learning rate: {lr:.6E} | global batch size:  1024 | lm loss: {loss:.6E} | loss scale: {scale:.1f} | "
    "grad norm: {gn:.3f} | num zeros: {nz:.1f} | params norm: {pn:.3f} | "
    "number of skipped iterations: {sk:3d} | number of nan iterations: {nn:3d} |\n"
)
TIMER = "times across ranks (ms):\n    forward-backward ...............................: (1234.56, 1240.12)\n"
WARN = "/usr/lib/python3/dist-packages/torch/utils/checkpoint.py:31: UserWarning: None of the inputs have requires_grad=True. Gradients will be None\n"


def generate(path: Path, iterations: int, seed: int = 0) -> int:
    """Write the synthetic log; returns its size in bytes."""
    rng = random.Random(seed)
    scale = 65536.0
    with open(path, "w", buffering=1 << 22) as fh:
        buf = []
        for it in range(1, iterations + 1):
            sk = 0
            if rng.random() < 0.0005:
                fh.write("".join(buf))
                buf = []
                fh.write(f"[2024-05-01 12:00:00,000] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 "
                         f"Skipping step. Attempted loss scale: {int(scale)}, reducing to {int(scale // 2)}\n")
                scale = max(scale / 2, 1.0)
                sk = 1
            loss = 2.0 + 8.0 / (1 + it / 1000) + rng.gauss(0, 0.05)
            buf.append(LINE.format(
                mm=(it // 60) % 60, ss=it % 60, us=(it * 7919) % 1_000_000, it=it, total=iterations,
                cs=it * 1024, ms=1000 + rng.random() * 50, tf=180 + rng.random(), lr=3e-4 * min(1, it / 2000),
                loss=loss, scale=scale, gn=0.5 + rng.random(), nz=0.0, pn=200 + it * 1e-4, sk=sk, nn=0,
            ))
            if it % 50 == 0:
                buf.append(TIMER)
            if it % 100 == 0:
                buf.append(WARN)
            if it % 1000 == 0:
                buf.append("-" * 100 + f"\n validation loss at iteration {it} | lm loss value: {loss:.6E} | "
                           f"lm loss PPL: {2.718 ** loss:.6E} |\n" + "-" * 100 + "\n")
            if it % 10000 == 0:
                buf.append(f"[2024-05-01 12:00:00] saving checkpoint at iteration {it:7d} to /ckpt in torch format\n")
            if len(buf) > 4096:
                fh.write("".join(buf))
                buf = []
        fh.write("".join(buf))
    return path.stat().st_size


OURS = """
import sys
from pathlib import Path
from spikeforensics.ingest import ingest_paths
from spikeforensics.store import Store
report = ingest_paths([sys.argv[1]], "bench", Store(sys.argv[2]))
f = report.files[0]
print(f.status, f.rows, "unparsed", f.unparsed, file=sys.stderr)
"""

# The baseline: what one would write by hand - one regex per line, lists, one Parquet.
LOOP = r'''
import re, sys
import pyarrow as pa, pyarrow.parquet as pq
ITER = re.compile(r"iteration\s+(\d+)/\s*\d+ \|(.*)")
FIELD = re.compile(r"\s*([^|:]+?):\s*([-+0-9.eE]+|nan|inf|NAN|INF)\s*\|")
ALIAS = {"lm loss": "loss", "grad norm": "grad_norm", "learning rate": "lr", "loss scale": "loss_scale",
         "consumed samples": "consumed_samples", "elapsed time per iteration (ms)": "step_time_ms",
         "number of skipped iterations": "skipped_iters", "number of nan iterations": "nan_iters",
         "num zeros": "num_zeros"}
src, out = sys.argv[1], sys.argv[2]
lines, steps, records, names, values = [], [], [], [], []
record = 0
with open(src, encoding="utf-8", errors="replace") as fh:
    for n, text in enumerate(fh, 1):
        m = ITER.search(text)
        if not m:
            continue
        step = int(m.group(1))
        for key, val in FIELD.findall(m.group(2)):
            key = key.strip()
            name = ALIAS.get(key, re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_"))
            lines.append(n); steps.append(step); records.append(record); names.append(name); values.append(float(val))
        record += 1
table = pa.table({"source": pa.array([src.rsplit("/", 1)[-1]] * len(lines)), "line": lines, "step": steps,
                  "record": records, "attempt": pa.array([0] * len(lines), pa.int32()),
                  "rank": pa.nulls(len(lines), pa.int32()), "name": names, "value": values})
pq.write_table(table, out, compression="zstd")
print(len(lines), "rows", file=sys.stderr)
'''


def run(label: str, argv: list[str]) -> dict:
    """Run one side in its own process; wall time and that process's own peak RSS
    (`os.wait4` gives the child's rusage, not a running max over all children)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{label} failed:\n{err}")
    return {"label": label, "wall_s": wall, "peak_mib": usage.ru_maxrss / 1024,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "note": err.strip().splitlines()[-1] if err.strip() else ""}


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, {platform.system()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=1_000_000)
    ap.add_argument("--scale", type=int, default=5, help="also run ours on a log this many times larger (0: skip)")
    ap.add_argument("--keep", action="store_true", help="keep the generated logs")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sf-bench-", dir="/tmp"))
    log = tmp / "megatron_bench.log"
    t0 = time.perf_counter()
    size = generate(log, args.iterations)
    print(f"generated {log} ({size / 1e6:.0f} MB, {args.iterations:,} iterations) in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    py = sys.executable
    print(f"before: {load()}", file=sys.stderr)
    results = [
        run("spikeforensics ingest", [py, "-c", OURS, str(log), str(tmp / "store")]),
        run("re loop", [py, "-c", LOOP, str(log), str(tmp / "loop.parquet")]),
    ]
    print(f"after 1x: {load()}", file=sys.stderr)
    if args.scale > 1:
        big = tmp / "megatron_bench_big.log"
        bsize = generate(big, args.iterations * args.scale, seed=1)
        log.unlink()
        print(f"before {args.scale}x: {load()}", file=sys.stderr)
        r = run(f"spikeforensics ingest, {args.scale}x log", [py, "-c", OURS, str(big), str(tmp / "store_big")])
        r["label"] += f" ({bsize / 1e6:.0f} MB)"
        results.append(r)
        print(f"after {args.scale}x: {load()}", file=sys.stderr)
    print(f"machine: {machine()}")
    print(f"log: {size / 1e6:.0f} MB, {args.iterations:,} iterations")
    print(f"{'run':45s} {'wall s':>8s} {'cpu s':>8s} {'peak MiB':>9s}  note")
    for r in results:
        print(f"{r['label']:45s} {r['wall_s']:8.1f} {r['cpu_s']:8.1f} {r['peak_mib']:9.0f}  {r['note']}")
    ours, loop = results[0], results[1]
    print(f"speed-up: {loop['wall_s'] / ours['wall_s']:.2f}x wall; peak memory {ours['peak_mib'] / loop['peak_mib']:.2f}x the loop's")
    if args.scale > 1:
        print(f"peak memory {args.scale}x log / 1x log: {results[2]['peak_mib'] / ours['peak_mib']:.2f}")
    if not args.keep:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
