"""Ingest speed: `spikeforensics ingest` against equally complete hand-written readers.

    python benchmarks/ingest_speed.py [--formats megatron,hf,jsonl,jsonl-1nan,jsonl-finite,layers,tensorboard]
        [--size 200000] [--sizes megatron=1000000,...] [--rounds 3] [--scale 0]
        [--sides regex,polars,...] [--before DIR] [--json FILE] [--keep]

For each format a synthetic file is generated into /tmp, then each side runs as a whole
process (interpreter start and imports included), the sides in a rotating order each
round (round k starts with side k), and the figures are reported per round as ratios
to `spikeforensics ingest` of the same round (machine load hits neighbours alike):

- `ours`: the `spikeforensics ingest FILE --run bench --store TMP -q` command (sniffing,
  hashing, parsing, events, numbering, Parquet staged and committed);
- `regex` (text formats): one compiled regex per line capturing the same fields and the
  time, rows appended to lists, long form with the product's columns (source, line,
  step, record, attempt, rank, name, value, time), one zstd Parquet file;
  `json.loads` (JSONL), `csv` (per-layer CSV): the same with the standard-library reader;
- `read_ndjson` (`jsonl-finite` only: it cannot read a bare NaN): `pl.read_ndjson`, then the
  same long table as `polars`;
- `polars`: a plain polars script producing the same table (lines read by polars, one
  `extract_groups` over the known fields, long form, zstd Parquet);
- `floor`: polars' line reader alone (`pl.read_csv` with a separator that never occurs):
  what reading the bytes into lines costs, nothing parsed;
- TensorBoard: `tbparse` (`SummaryReader(...).scalars`) and tensorboard's
  `EventAccumulator` (every scalar kept: `size_guidance={"scalars": 0}`), each writing
  the same long table to Parquet. Both are benchmark-only: `pip install tbparse`
  (tensorboard is the package's optional extra).

The regex/json/csv/polars sides know the exact layout of the generated file (a lower
bound for a hand-written reader of one format); they do no sniffing, hashing, events or
record numbering beyond a running counter.

Figures: wall time, CPU time (user + system) and peak RSS of each process
(`os.wait4`, the child's own rusage). `--scale N` also runs `ours` on an N-times
larger file (peak memory flat in length?). The load average is printed per round:
the machine may be shared, so compare within a round.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# ---------------------------------------------------------------------------
# Generators

MEGATRON_LINE = (
    "[2024-05-01 12:{mm:02d}:{ss:02d}.{us:06d}] iteration {it:8d}/{total:8d} | consumed samples: {cs:12d} | "
    "elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tf:.1f} | "
    "learning rate: {lr:.6E} | global batch size:  1024 | lm loss: {loss:.6E} | loss scale: {scale:.1f} | "
    "grad norm: {gn:.3f} | num zeros: {nz:.1f} | params norm: {pn:.3f} | "
    "number of skipped iterations: {sk:3d} | number of nan iterations: {nn:3d} |\n"
)
TIMER = "times across ranks (ms):\n    forward-backward ...............................: (1234.56, 1240.12)\n"
WARN = (
    "/usr/lib/python3/dist-packages/torch/utils/checkpoint.py:31: UserWarning: None of the inputs have "
    "requires_grad=True. Gradients will be None\n"
)


class _Buffered:
    def __init__(self, path: Path):
        self.fh = open(path, "w", buffering=1 << 22)
        self.buf: list[str] = []

    def add(self, text: str) -> None:
        self.buf.append(text)
        if len(self.buf) > 4096:
            self.fh.write("".join(self.buf))
            self.buf = []

    def close(self) -> None:
        self.fh.write("".join(self.buf))
        self.fh.close()


def megatron_record(rng: random.Random, it: int, total: int, loss: float, scale: float, sk: int, gn=None) -> str:
    """One `iteration` line; the time per iteration, TFLOP/s and (when `gn` is None) the grad norm
    are drawn from `rng`, in that order."""
    ms, tf = 1000 + rng.random() * 50, 180 + rng.random()
    return MEGATRON_LINE.format(
        mm=(it // 60) % 60,
        ss=it % 60,
        us=(it * 7919) % 1_000_000,
        it=it,
        total=total,
        cs=it * 1024,
        ms=ms,
        tf=tf,
        lr=3e-4 * min(1, it / 2000),
        loss=loss,
        scale=scale,
        gn=0.5 + rng.random() if gn is None else gn,
        nz=0.0,
        pn=200 + it * 1e-4,
        sk=sk,
        nn=0,
    )


def overflow_line(scale: float) -> str:
    """DeepSpeed's fp16 overflow message at `scale`."""
    return (
        f"[2024-05-01 12:00:00,000] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 "
        f"Skipping step. Attempted loss scale: {int(scale)}, reducing to {int(scale // 2)}\n"
    )


def megatron_extras(it: int, loss: float) -> list[str]:
    """What Megatron prints between iteration lines: timers every 50, a warning every 100, a
    validation block every 1,000 and a checkpoint line every 10,000 iterations."""
    out = []
    if it % 50 == 0:
        out.append(TIMER)
    if it % 100 == 0:
        out.append(WARN)
    if it % 1000 == 0:
        out.append(
            "-" * 100 + f"\n validation loss at iteration {it} | lm loss value: {loss:.6E} | "
            f"lm loss PPL: {math.exp(min(loss, 50)):.6E} |\n" + "-" * 100 + "\n"
        )
    if it % 10000 == 0:
        out.append(f"[2024-05-01 12:00:00] saving checkpoint at iteration {it:7d} to /ckpt in torch format\n")
    return out


def gen_megatron(path: Path, n: int, seed: int = 0) -> None:
    """Megatron-LM stdout: one `iteration` line per step (13 fields, 12 of them metrics
    the product keeps, plus the time prefix), timer blocks, warnings, validation blocks,
    checkpoint lines, ~1 fp16 overflow message per 2,000 steps."""
    rng = random.Random(seed)
    scale = 65536.0
    out = _Buffered(path)
    for it in range(1, n + 1):
        sk = 0
        if rng.random() < 0.0005:
            out.add(overflow_line(scale))
            scale = max(scale / 2, 1.0)
            sk = 1
        loss = 2.0 + 8.0 / (1 + it / 1000) + rng.gauss(0, 0.05)
        out.add(megatron_record(rng, it, n, loss, scale, sk))
        for extra in megatron_extras(it, loss):
            out.add(extra)
    out.close()


def gen_hf(path: Path, n: int, seed: int = 0) -> None:
    """HF Trainer stdout: a tqdm bar redrawn with CR each step, the `{'loss': ...}` dict
    the Trainer prints every step on its own line, a few warnings."""
    rng = random.Random(seed)
    out = _Buffered(path)
    for it in range(1, n + 1):
        pct = 100 * it // n
        out.add(f"\r{pct:3d}%|{'#' * (pct // 10):10s}| {it}/{n} [{it // 60:02d}:{it % 60:02d}<00:00,  3.21it/s]")
        loss = 2.0 + 8.0 / (1 + it / 1000) + rng.gauss(0, 0.05)
        out.add(
            f"\n{{'loss': {loss:.4f}, 'grad_norm': {0.5 + rng.random():.6f}, "
            f"'learning_rate': {3e-4 * min(1, it / 2000):.6e}, 'epoch': {it / n * 3:.4f}}}\n"
        )
        if it % 1000 == 0:
            out.add("/usr/lib/python3/site-packages/transformers/trainer.py:2891: UserWarning: something\n")
    out.close()


def gen_jsonl(path: Path, n: int, seed: int = 0, nans: str = "every") -> None:
    """JSONL metrics as `json.dumps` writes them: step, 5 metrics, a timestamp; a NaN grad
    norm (written as a bare `NaN`) once per 10,000 lines (`nans="every"`), once in the
    middle of the file (`"one"`) or never (`"none"`). Built by polars in blocks of 1M lines
    (a Python loop takes minutes for 10M lines on a loaded machine)."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    with open(path, "wb") as fh:
        for lo in range(1, n + 1, 1_000_000):
            it = np.arange(lo, min(lo + 1_000_000, n + 1))
            gn = 0.5 + rng.random(it.size)
            nan = it % 10000 == 0 if nans == "every" else (it == n // 2 if nans == "one" else np.zeros(it.size, bool))
            gn[nan] = np.nan
            frame = pl.DataFrame(
                {
                    "step": it,
                    "loss": np.round(2.0 + 8.0 / (1 + it / 1000) + rng.normal(0, 0.05, it.size), 6),
                    "grad_norm": gn,
                    "lr": 3e-4 * np.minimum(1, it / 2000),
                    "tokens_per_sec": np.round(5e4 + rng.random(it.size) * 1e3, 1),
                    "loss_scale": np.full(it.size, 65536.0),
                    "_timestamp": 1714564800.0 + it,
                }
            )
            line = pl.concat_str(
                [pl.lit("{")]
                + [
                    x
                    for i, c in enumerate(frame.columns)
                    for x in ([pl.lit(", ")] if i else []) + [pl.lit(f'"{c}": '), pl.col(c).cast(pl.String)]
                ]
                + [pl.lit("}")]
            )
            fh.write(("\n".join(frame.select(line).to_series().to_list()) + "\n").encode())


def gen_layers(path: Path, n: int, seed: int = 0) -> None:
    """Per-layer gradient CSV: `step,layer,grad_norm,zero_frac,max_abs,numel`, 24 layers
    per step, `n` rows in all."""
    rng = random.Random(seed)
    out = _Buffered(path)
    out.add("step,layer,grad_norm,zero_frac,max_abs,numel\n")
    for i in range(n):
        step, layer = divmod(i, 24)
        out.add(
            f"{step + 1},model.layers.{layer}.mlp.weight,{0.01 + rng.random():.6g},{rng.random() * 1e-3:.6g},"
            f"{rng.random():.6g},{4194304}\n"
        )
    out.close()


TB_TAGS = ("train/loss", "train/grad_norm", "train/learning_rate", "train/loss_scale")


def gen_tensorboard(path: Path, n: int, seed: int = 0) -> Path:
    """A TensorBoard event file of `n` scalars (4 tags per step, `simple_value`, as
    PyTorch's SummaryWriter writes them); returns the event file's path (`path` is a folder)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    rng = random.Random(seed)
    path.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(path), max_queue_size=10000, flush_secs=3600)
    for i in range(n // len(TB_TAGS)):
        step = i + 1
        vals = (2.0 + 8.0 / (1 + step / 1000) + rng.gauss(0, 0.05), 0.5 + rng.random(), 3e-4, 65536.0)
        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in zip(TB_TAGS, vals)]
        )
        writer.add_event(event_pb2.Event(wall_time=1714564800.0 + step, step=step, summary=summary))
    writer.close()
    return next(path.glob("events.out.tfevents.*"))


# ---------------------------------------------------------------------------
# The other sides: whole scripts, each run with `python -c SCRIPT INPUT OUTPUT`

# Long form with the product's columns, written like the product (zstd Parquet).
_WRITE_LONG = r"""
import pyarrow as pa, pyarrow.parquet as pq
def write_long(out, src, lines, steps, records, names, values, times=None):
    n = len(values)
    cols = {"source": pa.array([src] * n), "line": pa.array(lines, pa.int64()), "step": pa.array(steps, pa.int64()),
            "record": pa.array(records, pa.int64()), "attempt": pa.array([0] * n, pa.int32()),
            "rank": pa.nulls(n, pa.int32()), "name": pa.array(names), "value": pa.array(values, pa.float64())}
    cols["time"] = pa.array(times, pa.timestamp("us")) if times is not None else pa.nulls(n, pa.timestamp("us"))
    pq.write_table(pa.table(cols), out, compression="zstd")
"""

FLOOR = r"""
import sys, polars as pl
f = pl.read_csv(sys.argv[1], has_header=False, separator="\x1f", quote_char=None, new_columns=["line"],
                schema={"line": pl.String}, truncate_ragged_lines=True, encoding="utf8-lossy")
print(f.height, "lines", file=sys.stderr)
"""

MEGATRON_REGEX = (
    _WRITE_LONG
    + r"""
import re, sys
from datetime import datetime
REC = re.compile(
    r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\] iteration\s+(\d+)/\s*\d+ \| consumed samples:\s*(\S+) \| "
    r"elapsed time per iteration \(ms\):\s*(\S+) \| throughput per GPU \(TFLOP/s/GPU\):\s*(\S+) \| "
    r"learning rate:\s*(\S+) \| global batch size:\s*(\S+) \| lm loss:\s*(\S+) \| loss scale:\s*(\S+) \| "
    r"grad norm:\s*(\S+) \| num zeros:\s*(\S+) \| params norm:\s*(\S+) \| "
    r"number of skipped iterations:\s*(\S+) \| number of nan iterations:\s*(\S+) \|")
VALID = re.compile(r"validation loss at iteration (\d+) \| lm loss value:\s*(\S+) \| lm loss PPL:\s*(\S+) \|")
NAMES = ["consumed_samples", "step_time_ms", "throughput_per_gpu_tflop_s_gpu", "lr", "global_batch_size", "loss",
         "loss_scale", "grad_norm", "num_zeros", "params_norm", "skipped_iters", "nan_iters"]
src, out = sys.argv[1], sys.argv[2]
lines, steps, records, names, values, times = [], [], [], [], [], []
record = 0
parse_time = datetime.fromisoformat
with open(src, encoding="utf-8", errors="replace") as fh:
    for n, text in enumerate(fh, 1):
        m = REC.search(text)
        if m is not None:
            g = m.groups()
            t, step = parse_time(g[0]), int(g[1])
            for name, val in zip(NAMES, g[2:]):
                lines.append(n); steps.append(step); records.append(record); names.append(name)
                values.append(float(val)); times.append(t)
            record += 1
        elif "validation loss" in text and (m := VALID.search(text)) is not None:
            step = int(m.group(1))
            for name, val in (("eval_loss", m.group(2)), ("eval_lm_loss_ppl", m.group(3))):
                lines.append(n); steps.append(step); records.append(None); names.append(name)
                values.append(float(val)); times.append(None)
write_long(out, src.rsplit("/", 1)[-1], lines, steps, records, names, values, times)
print(len(values), "rows", file=sys.stderr)
"""
)

MEGATRON_POLARS = r"""
import sys, polars as pl
src, out = sys.argv[1], sys.argv[2]
REC = (r"^\[(?<time>[^\]]+)\] iteration\s+(?<step>\d+)/\s*\d+ \| consumed samples:\s*(?<consumed_samples>\S+) \| "
       r"elapsed time per iteration \(ms\):\s*(?<step_time_ms>\S+) \| throughput per GPU \(TFLOP/s/GPU\):\s*(?<throughput_per_gpu_tflop_s_gpu>\S+) \| "
       r"learning rate:\s*(?<lr>\S+) \| global batch size:\s*(?<global_batch_size>\S+) \| lm loss:\s*(?<loss>\S+) \| "
       r"loss scale:\s*(?<loss_scale>\S+) \| grad norm:\s*(?<grad_norm>\S+) \| num zeros:\s*(?<num_zeros>\S+) \| "
       r"params norm:\s*(?<params_norm>\S+) \| number of skipped iterations:\s*(?<skipped_iters>\S+) \| "
       r"number of nan iterations:\s*(?<nan_iters>\S+) \|")
NAMES = ["consumed_samples", "step_time_ms", "throughput_per_gpu_tflop_s_gpu", "lr", "global_batch_size", "loss",
         "loss_scale", "grad_norm", "num_zeros", "params_norm", "skipped_iters", "nan_iters"]
lines = pl.scan_csv(src, has_header=False, separator="\x1f", quote_char=None, new_columns=["text"],
                    schema={"text": pl.String}, truncate_ragged_lines=True, encoding="utf8-lossy").with_row_index("line", 1)
recs = (lines.filter(pl.col("text").str.contains("iteration", literal=True))
        .select(pl.col("line").cast(pl.Int64), pl.col("text").str.extract_groups(REC).alias("g")).unnest("g")
        .filter(pl.col("step").is_not_null())
        .select("line", pl.col("step").cast(pl.Int64), pl.int_range(pl.len(), dtype=pl.Int64).alias("record"),
                pl.lit(0, pl.Int32).alias("attempt"), pl.lit(None, pl.Int32).alias("rank"),
                pl.col("time").str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="us"),
                *[pl.col(n).cast(pl.Float64) for n in NAMES]))
long = recs.unpivot(index=["line", "step", "record", "attempt", "rank", "time"], variable_name="name", value_name="value")
long = long.with_columns(pl.lit(src.rsplit("/", 1)[-1]).alias("source")).sort("line", maintain_order=True)
long.sink_parquet(out, compression="zstd")
print("done", file=sys.stderr)
"""

HF_REGEX = (
    _WRITE_LONG
    + r"""
import re, sys
TQDM = re.compile(r".*\|\s*(\d+)/\d+ \[")
REC = re.compile(r"\{'loss': (\S+), 'grad_norm': (\S+), 'learning_rate': (\S+), 'epoch': ([^}]+)\}")
NAMES = ("loss", "grad_norm", "lr", "epoch")
src, out = sys.argv[1], sys.argv[2]
lines, steps, records, names, values = [], [], [], [], []
record, step = 0, None
with open(src, encoding="utf-8", errors="replace", newline="\n") as fh:
    for n, text in enumerate(fh, 1):
        m = TQDM.match(text)
        if m is not None:
            step = int(m.group(1))
        m = REC.search(text)
        if m is not None:
            for name, val in zip(NAMES, m.groups()):
                lines.append(n); steps.append(step); records.append(record); names.append(name); values.append(float(val))
            record += 1
write_long(out, src.rsplit("/", 1)[-1], lines, steps, records, names, values)
print(len(values), "rows", file=sys.stderr)
"""
)

HF_POLARS = r"""
import sys, polars as pl
src, out = sys.argv[1], sys.argv[2]
REC = r"\{'loss': (?<loss>\S+), 'grad_norm': (?<grad_norm>\S+), 'learning_rate': (?<lr>\S+), 'epoch': (?<epoch>[^}]+)\}"
NAMES = ["loss", "grad_norm", "lr", "epoch"]
lines = pl.scan_csv(src, has_header=False, separator="\x1f", quote_char=None, new_columns=["text"],
                    schema={"text": pl.String}, truncate_ragged_lines=True, encoding="utf8-lossy").with_row_index("line", 1)
recs = (lines.select(pl.col("line").cast(pl.Int64), pl.col("text").str.extract(r".*\|\s*(\d+)/\d+ \[", 1).cast(pl.Int64).alias("step"),
                     pl.col("text").str.extract_groups(REC).alias("g"))
        .with_columns(pl.col("step").forward_fill()).unnest("g").filter(pl.col("loss").is_not_null())
        .select("line", "step", pl.int_range(pl.len(), dtype=pl.Int64).alias("record"), pl.lit(0, pl.Int32).alias("attempt"),
                pl.lit(None, pl.Int32).alias("rank"), pl.lit(None, pl.Datetime("us")).alias("time"),
                *[pl.col(n).cast(pl.Float64) for n in NAMES]))
long = recs.unpivot(index=["line", "step", "record", "attempt", "rank", "time"], variable_name="name", value_name="value")
long.with_columns(pl.lit(src.rsplit("/", 1)[-1]).alias("source")).sort("line", maintain_order=True).sink_parquet(out, compression="zstd")
print("done", file=sys.stderr)
"""

JSONL_LOOP = (
    _WRITE_LONG
    + r"""
import json, sys
from datetime import datetime, timezone
src, out = sys.argv[1], sys.argv[2]
lines, steps, records, names, values, times = [], [], [], [], [], []
record = 0
with open(src, encoding="utf-8", errors="replace") as fh:
    for n, text in enumerate(fh, 1):
        obj = json.loads(text)
        step = obj.pop("step")
        t = datetime.fromtimestamp(obj.pop("_timestamp"), timezone.utc).replace(tzinfo=None)
        for name, val in obj.items():
            lines.append(n); steps.append(step); records.append(record); names.append(name); values.append(float(val)); times.append(t)
        record += 1
write_long(out, src.rsplit("/", 1)[-1], lines, steps, records, names, values, times)
print(len(values), "rows", file=sys.stderr)
"""
)

JSONL_POLARS = r"""
import sys, polars as pl
src, out = sys.argv[1], sys.argv[2]
NAMES = ["loss", "grad_norm", "lr", "tokens_per_sec", "loss_scale"]
lines = pl.scan_csv(src, has_header=False, separator="\x1f", quote_char=None, new_columns=["text"],
                    schema={"text": pl.String}, truncate_ragged_lines=True, encoding="utf8-lossy").with_row_index("line", 1)
dtype = pl.Struct({"step": pl.Int64, "_timestamp": pl.Float64, **{n: pl.String for n in NAMES}})
obj = lines.select(pl.col("line").cast(pl.Int64),
                   pl.col("text").str.replace_all(r":\s*(-?(?:NaN|Infinity))", ': "$1"').str.json_decode(dtype).alias("o")).unnest("o")
recs = obj.select("line", "step", pl.int_range(pl.len(), dtype=pl.Int64).alias("record"), pl.lit(0, pl.Int32).alias("attempt"),
                  pl.lit(None, pl.Int32).alias("rank"), pl.from_epoch((pl.col("_timestamp") * 1e6).cast(pl.Int64), time_unit="us").alias("time"),
                  *[pl.col(n).cast(pl.Float64) for n in NAMES])
long = recs.unpivot(index=["line", "step", "record", "attempt", "rank", "time"], variable_name="name", value_name="value")
long.with_columns(pl.lit(src.rsplit("/", 1)[-1]).alias("source")).sort("line", maintain_order=True).sink_parquet(out, compression="zstd")
print("done", file=sys.stderr)
"""

# `pl.read_ndjson` reads strict JSON only (a bare NaN fails the file): run on `jsonl-finite`
JSONL_NDJSON = JSONL_POLARS.replace(
    r"""lines = pl.scan_csv(src, has_header=False, separator="\x1f", quote_char=None, new_columns=["text"],
                    schema={"text": pl.String}, truncate_ragged_lines=True, encoding="utf8-lossy").with_row_index("line", 1)
dtype = pl.Struct({"step": pl.Int64, "_timestamp": pl.Float64, **{n: pl.String for n in NAMES}})
obj = lines.select(pl.col("line").cast(pl.Int64),
                   pl.col("text").str.replace_all(r":\s*(-?(?:NaN|Infinity))", ': "$1"').str.json_decode(dtype).alias("o")).unnest("o")
""",
    """obj = pl.read_ndjson(src).lazy().with_row_index("line", 1).with_columns(pl.col("line").cast(pl.Int64))
""",
)
assert JSONL_NDJSON != JSONL_POLARS

LAYERS_CSV = r"""
import csv, sys
import pyarrow as pa, pyarrow.parquet as pq
src, out = sys.argv[1], sys.argv[2]
cols = {k: [] for k in ("line", "step", "layer", "grad_norm", "zero_frac", "max_abs", "numel")}
with open(src, newline="", encoding="utf-8", errors="replace") as fh:
    reader = csv.reader(fh)
    next(reader)
    for n, row in enumerate(reader, 2):
        cols["line"].append(n); cols["step"].append(int(row[0])); cols["layer"].append(row[1])
        cols["grad_norm"].append(float(row[2])); cols["zero_frac"].append(float(row[3]))
        cols["max_abs"].append(float(row[4])); cols["numel"].append(int(row[5]))
m = len(cols["line"])
table = pa.table({"source": pa.array([src.rsplit("/", 1)[-1]] * m), **{k: pa.array(v) for k, v in cols.items()},
                  "rank": pa.nulls(m, pa.int32()), "attempt": pa.array([0] * m, pa.int32())})
pq.write_table(table, out, compression="zstd")
print(m, "rows", file=sys.stderr)
"""

LAYERS_POLARS = r"""
import sys, polars as pl
src, out = sys.argv[1], sys.argv[2]
f = pl.scan_csv(src, schema_overrides={"step": pl.Int64, "numel": pl.Int64}).with_row_index("line", 2)
f.select(pl.lit(src.rsplit("/", 1)[-1]).alias("source"), pl.col("line").cast(pl.Int64), "step", "layer", "grad_norm",
         "zero_frac", "max_abs", "numel", pl.lit(None, pl.Int32).alias("rank"), pl.lit(0, pl.Int32).alias("attempt")
         ).sink_parquet(out, compression="zstd")
print("done", file=sys.stderr)
"""

TB_TBPARSE = (
    _WRITE_LONG
    + r"""
import sys
from tbparse import SummaryReader
src, out = sys.argv[1], sys.argv[2]
df = SummaryReader(src, extra_columns={"wall_time"}).scalars
n = len(df)
write_long(out, src.rsplit("/", 1)[-1], [None] * n, df["step"].tolist(), [None] * n, df["tag"].tolist(),
           df["value"].tolist(), [int(t * 1e6) for t in df["wall_time"].tolist()])
print(n, "rows", file=sys.stderr)
"""
)

TB_ACCUMULATOR = (
    _WRITE_LONG
    + r"""
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
src, out = sys.argv[1], sys.argv[2]
acc = EventAccumulator(src, size_guidance={"scalars": 0})
acc.Reload()
steps, names, values, times = [], [], [], []
for tag in acc.Tags()["scalars"]:
    for e in acc.Scalars(tag):
        steps.append(e.step); names.append(tag); values.append(e.value); times.append(int(e.wall_time * 1e6))
n = len(values)
write_long(out, src.rsplit("/", 1)[-1], [None] * n, steps, [None] * n, names, values, times)
print(n, "rows", file=sys.stderr)
"""
)

FORMATS = {
    # name: (generator, default size, file name, {side: script})
    "megatron": (gen_megatron, "megatron.log", {"regex": MEGATRON_REGEX, "polars": MEGATRON_POLARS, "floor": FLOOR}),
    "hf": (gen_hf, "hf_trainer.log", {"regex": HF_REGEX, "polars": HF_POLARS, "floor": FLOOR}),
    "jsonl": (gen_jsonl, "metrics.jsonl", {"json.loads": JSONL_LOOP, "polars": JSONL_POLARS, "floor": FLOOR}),
    # the same file with one bare NaN (the typed decode must not fail over), and with none
    "jsonl-1nan": (
        functools.partial(gen_jsonl, nans="one"),
        "metrics.jsonl",
        {"json.loads": JSONL_LOOP, "polars": JSONL_POLARS, "floor": FLOOR},
    ),
    "jsonl-finite": (
        functools.partial(gen_jsonl, nans="none"),
        "metrics.jsonl",
        {"json.loads": JSONL_LOOP, "read_ndjson": JSONL_NDJSON, "polars": JSONL_POLARS, "floor": FLOOR},
    ),
    "layers": (gen_layers, "layer_grads.csv", {"csv": LAYERS_CSV, "polars": LAYERS_POLARS, "floor": FLOOR}),
    "tensorboard": (gen_tensorboard, "tb", {"tbparse": TB_TBPARSE, "EventAccumulator": TB_ACCUMULATOR}),
}


# ---------------------------------------------------------------------------
# Running


def run(label: str, argv: list[str], env: dict | None = None) -> dict:
    """One side in its own process: wall time, CPU time and that process's own peak RSS
    (`os.wait4` gives the child's rusage, not a running max over all children)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, **env} if env else None
    )
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{label} failed:\n{err}")
    return {"side": label, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mib": usage.ru_maxrss / 1024}


def ours_argv(path: Path, store: Path) -> list[str]:
    exe = Path(sys.executable).with_name("spikeforensics")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "spikeforensics"]
    return [*cmd, "ingest", str(path), "--run", "bench", "--store", str(store), "-q"]


def load() -> float:
    return os.getloadavg()[0]


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import polars

    return (
        f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, polars {polars.__version__}, "
        f"{platform.system()}"
    )


def bench_format(
    fmt: str, size: int, rounds: int, sides: list[str] | None, scale: int, tmp: Path, before: Path | None = None
) -> dict:
    gen, fname, others = FORMATS[fmt]
    path = tmp / fname
    made = _generate(gen, path, size)
    path = made if isinstance(made, Path) else path
    nbytes = path.stat().st_size
    names = ["ours", *(["before"] if before else []), *others]
    if sides:
        names = [s for s in names if s in sides or s in ("ours", "before")]
    rows: list[list[dict]] = []
    for k in range(rounds):
        order = names[k % len(names) :] + names[: k % len(names)]
        got = {}
        load0 = load()  # not `before`: that is the earlier version's folder
        for side in order:
            out = tmp / f"out-{side}"
            if side == "ours":
                got[side] = run(side, ours_argv(path, out))
            elif side == "before":
                got[side] = run(side, ours_argv(path, out), env={"PYTHONPATH": str(before)})
            else:
                got[side] = run(side, [sys.executable, "-c", others[side], str(path), str(out)])
            shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)
        load_txt = f"{load0:.1f}-{load():.1f}"
        rows.append([{**got[s], "round": k + 1, "load": load_txt} for s in names])
        print(
            f"{fmt} round {k + 1} (order {', '.join(order)}; load {load_txt}): "
            + "; ".join(
                f"{s} {got[s]['wall_s']:.1f}s/{got[s]['cpu_s']:.1f}s/{got[s]['peak_mib']:.0f}MiB" for s in names
            ),
            file=sys.stderr,
        )
    result = {"format": fmt, "size": size, "bytes": nbytes, "rounds": rows}
    if scale > 1 and fmt != "tensorboard":
        big = tmp / f"big-{fname}"
        path.unlink()
        _generate(gen, big, size * scale, seed=1)
        r = run("ours", ours_argv(big, tmp / "out-big"))
        shutil.rmtree(tmp / "out-big", ignore_errors=True)
        result["scaled"] = {**r, "scale": scale, "bytes": big.stat().st_size, "load": f"{load():.1f}"}
        big.unlink()
    return result


def _generate(gen, path: Path, n: int, seed: int = 0):
    """`gen(path, n, seed)` in a child process: Linux carries a process's peak RSS across
    fork + exec into its children's `ru_maxrss`, so a generator run here would set a floor
    under every side's peak."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(gen, (path, n, seed))


def _span(values: list[float], fmt: str = "{:.2f}") -> str:
    lo, hi = min(values), max(values)
    return fmt.format(statistics.median(values)) + (f" ({fmt.format(lo)}-{fmt.format(hi)})" if len(values) > 1 else "")


def render(res: dict) -> str:
    """A markdown table: per side, median (range) over rounds of wall, CPU, peak RSS and
    the per-round ratios side / ours (> 1: ours is faster or smaller)."""
    mb = res["bytes"] / 1e6
    out = [
        f"**{res['format']}**: {res['size']:,} records, {mb:.0f} MB; {len(res['rounds'])} round(s), "
        f"load {', '.join(r[0]['load'] for r in res['rounds'])}",
        "",
        "| side | wall s | CPU s | peak MiB | MB/s (wall) | wall / ours | CPU / ours | ours peak / its peak |",
        "|---|---|---|---|---|---|---|---|",
    ]
    sides = [r["side"] for r in res["rounds"][0]]
    for i, side in enumerate(sides):
        per = [rnd[i] for rnd in res["rounds"]]
        ours = [rnd[0] for rnd in res["rounds"]]
        wall = [p["wall_s"] for p in per]
        cells = [
            _span(wall, "{:.1f}"),
            _span([p["cpu_s"] for p in per], "{:.1f}"),
            _span([p["peak_mib"] for p in per], "{:.0f}"),
            _span([mb / w for w in wall], "{:.0f}"),
        ]
        if side == "ours":
            cells += ["1", "1", "1"]
        else:
            cells += [
                _span([p["wall_s"] / o["wall_s"] for p, o in zip(per, ours)]),
                _span([p["cpu_s"] / o["cpu_s"] for p, o in zip(per, ours)]),
                _span([o["peak_mib"] / p["peak_mib"] for p, o in zip(per, ours)]),
            ]
        out.append(f"| {side} | " + " | ".join(cells) + " |")
    if "scaled" in res:
        s = res["scaled"]
        one = statistics.median(rnd[0]["peak_mib"] for rnd in res["rounds"])
        out.append(
            f"\n`ours` on a {s['scale']}x file ({s['bytes'] / 1e6:.0f} MB): {s['wall_s']:.1f} s wall, "
            f"{s['cpu_s']:.1f} s CPU, {s['peak_mib']:.0f} MiB peak ({s['peak_mib'] / one:.2f}x the 1x peak; load {s['load']})"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", default="megatron,hf,jsonl,layers,tensorboard")
    ap.add_argument("--size", type=int, default=200_000, help="records per file (steps; lines; layer rows; scalars)")
    ap.add_argument("--sizes", default="", help="per-format sizes, e.g. megatron=1000000,jsonl=10000000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sides", default="", help="only these sides besides ours (comma-separated)")
    ap.add_argument("--scale", type=int, default=0, help="also run ours on a file this many times larger")
    ap.add_argument("--json", type=Path, help="write the raw figures here")
    ap.add_argument(
        "--before",
        type=Path,
        help="also run `spikeforensics ingest` with this folder first on "
        "PYTHONPATH (a checkout of an earlier version: `git archive REV spikeforensics | tar -x -C DIR`)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    args = ap.parse_args()
    sizes = dict(kv.split("=") for kv in args.sizes.split(",") if kv)
    tmp = Path(tempfile.mkdtemp(prefix="sf-bench-", dir="/tmp"))
    results = []
    try:
        for fmt in args.formats.split(","):
            size = int(sizes.get(fmt, args.size))
            res = bench_format(
                fmt, size, args.rounds, [s for s in args.sides.split(",") if s], args.scale, tmp, args.before
            )
            results.append(res)
            print(render(res) + "\n", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"machine: {machine()}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
