"""The capture folder's files: what is written, under which names, and how (atomically).

One file set per rank, in formats `spikeforensics ingest` reads (docs/formats.md):

- `metrics-rank{R}.jsonl` (rank 0 only by default): one JSON object per optimizer step, appended
  at each flush in one `write` (+ `fsync` with `fsync=True`); keys `step`, `rank`, `loss`, `grad_norm` (pre-clip),
  `grad_norm_clipped`, `clip_coef`, `loss_scale`, `skipped` (1 for an overflow-skipped step),
  `skipped_iters` (running count), `lr` (param group 0) and `lr_pg{i}` for the other groups.
  Non-finite values are written as bare `NaN` / `Infinity` (ingest reads them). The metrics are one
  append-only file, not one file per flush, because the diagnosis reads a metric from the one file
  (source) that logs it most: a series split over many files would be read in part only.
- `layers-rank{R}-{SEQ}.parquet`: one row per (step, layer) of the steps with per-layer statistics
  in that flush: `step, rank, layer, grad_norm, zero_frac, pos_frac, max_abs, numel, param_norm,
  update_norm` (the last two on the parameter-norm steps only, null elsewhere).
- `batches-rank{R}-{SEQ}.parquet`: one row per (step, rank, micro-batch): `step, rank, micro,
  sample_ids` (list of strings), `sample_losses` (list of floats, when given), `tokens` (list of
  ints per sample, or null).

`SEQ` is a 6-digit flush counter per rank and kind that continues after the largest one already
in the folder, so a resumed job adds files and never overwrites one. A Parquet file is written
under a hidden temporary name (`.NAME.tmp`, which ingest passes over) and renamed into place, so
a run killed at any moment leaves only complete files.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

LAYER_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("rank", pa.int64()),
        ("layer", pa.string()),
        ("grad_norm", pa.float64()),
        ("zero_frac", pa.float64()),
        ("pos_frac", pa.float64()),
        ("max_abs", pa.float64()),
        ("numel", pa.int64()),
        ("param_norm", pa.float64()),
        ("update_norm", pa.float64()),
    ]
)
BATCH_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("rank", pa.int64()),
        ("micro", pa.int64()),
        ("sample_ids", pa.list_(pa.string())),
        ("sample_losses", pa.list_(pa.float64())),
        ("tokens", pa.list_(pa.int64())),
    ]
)


def _json_value(v):
    if isinstance(v, float) and not math.isfinite(v):
        return v  # json.dumps writes NaN / Infinity, which ingest reads
    return v


class CaptureWriter:
    """Writes one rank's files into `out_dir` (created if missing)."""

    def __init__(self, out_dir: str | os.PathLike, rank: int, write_metrics: bool = True, fsync: bool = False):
        self.fsync = fsync  # a killed process loses nothing written; fsync also survives a machine crash
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rank = rank
        self.metrics_path = self.dir / f"metrics-rank{rank}.jsonl" if write_metrics else None
        self._seq = {kind: self._last_seq(kind) for kind in ("layers", "batches")}

    def _last_seq(self, kind: str) -> int:
        pat = re.compile(rf"^{kind}-rank{self.rank}-(\d+)\.parquet$")
        seqs = [int(m.group(1)) for f in self.dir.iterdir() if (m := pat.match(f.name))]
        return max(seqs, default=0)

    def _next_path(self, kind: str) -> Path:
        while True:
            self._seq[kind] += 1
            path = self.dir / f"{kind}-rank{self.rank}-{self._seq[kind]:06d}.parquet"
            if not path.exists():  # another writer of the same rank: never overwrite
                return path

    def write_metrics(self, rows: list[dict]) -> None:
        """Append step records (dicts) to the metrics JSONL: one write, flushed and fsynced."""
        if not rows or self.metrics_path is None:
            return
        text = "".join(json.dumps({k: _json_value(v) for k, v in r.items() if v is not None}) + "\n" for r in rows)
        with open(self.metrics_path, "a", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            if self.fsync:
                os.fsync(fh.fileno())

    def write_table(self, kind: str, columns: dict, schema: pa.Schema) -> Path | None:
        """A new Parquet file of `kind` ("layers" / "batches"), written atomically."""
        n = len(next(iter(columns.values()))) if columns else 0  # a column: a list, or a pyarrow array
        if n == 0:
            return None
        # a batch column with no value in this flush (no per-sample losses given) is left out; a
        # layer file keeps all its columns (param / update norms are null between their steps),
        # so every file of a folder has one schema
        fields = [
            f
            for f in schema
            if kind == "layers"
            or f.name in ("step", "rank", "sample_ids")
            or any(v is not None for v in columns[f.name])
        ]
        table = pa.table(
            {
                f.name: columns[f.name]
                if isinstance(columns[f.name], pa.Array)
                else pa.array(columns[f.name], type=f.type)
                for f in fields
            },
            schema=pa.schema(fields),
        )
        path = self._next_path(kind)
        tmp = path.with_name(f".{path.name}.tmp")
        pq.write_table(table, tmp, compression="zstd")
        if self.fsync:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path
