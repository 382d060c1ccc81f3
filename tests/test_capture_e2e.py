"""End to end: a training run recorded by spikeforensics.capture, then ingest + diagnose of the
capture folder alone (tests/capture_train.py: the fixture generator's tiny GPT on the CPU).

1. 2-rank gloo DDP, one corrupted record injected on rank 1 at step 150 (random raw-byte tokens
   and a mis-parsed loss weight of 4): the diagnosis names `data_outlier` for the spike, puts the
   sample in the incident's top 5 and in the skip list.
2. One layer's param group at 40x the LR from step 80: the diagnosis names that layer (its
   gradient norm shows nothing; the per-layer update norms the recorder takes every 10 steps do)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from spikeforensics import api  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "capture_train.py"


def _train(out: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), *args], capture_output=True, text=True, cwd=ROOT, timeout=900
    )  # a hang guard, not a speed target (a loaded machine is slow)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _diagnose(folder: Path, store: Path) -> dict:
    report = api.ingest([folder], run_id="capture", store=store)
    assert all(f.status == "ingested" for f in report.files), [(f.path, f.message) for f in report.files]
    return api.diagnose("capture", store=store)


def test_ddp_corrupted_sample_is_traced(tmp_path):
    out = tmp_path / "capture"
    stdout = _train(
        out,
        "--world",
        "2",
        "--steps",
        "200",
        "--batch",
        "4",
        "--poison-step",
        "150",
        "--poison-kind",
        "garbage",
        "--poison-weight",
        "4",
    )
    _, sid, step, rank = next(ln for ln in stdout.splitlines() if ln.startswith("POISON")).split()
    names = sorted(p.name for p in out.iterdir())
    assert "metrics-rank0.jsonl" in names and "metrics-rank1.jsonl" not in names
    assert {
        "layers-rank0-000001.parquet",
        "layers-rank1-000001.parquet",
        "batches-rank0-000001.parquet",
        "batches-rank1-000001.parquet",
    } <= set(names)
    dg = _diagnose(out, tmp_path / "store")
    hits = [i for i in dg["incidents"] if i["step_start"] <= int(step) <= i["step_end"]]
    assert hits, dg["incidents"]
    inc = hits[0]
    assert inc["root_cause"] == "data_outlier", inc
    assert sid in inc["sample_ids"][:5]
    assert sid in dg["skiplist"]["sample_ids"]


def test_layer_at_40x_lr_is_named(tmp_path):
    out = tmp_path / "capture"
    layer = "transformer.h.0.attn.c_attn"
    _train(
        out,
        "--steps",
        "240",
        "--batch",
        "8",
        "--hot-layer",
        layer,
        "--hot-factor",
        "40",
        "--hot-from",
        "80",
        "--every",
        "2",
    )
    dg = _diagnose(out, tmp_path / "store")
    named = [i for i in dg["incidents"] if layer in (i.get("layers") or [])]
    assert named, dg["incidents"]
    inc = named[0]
    assert inc["root_cause"] == "layer_instability" and inc["severity"] in ("warning", "critical"), inc
    assert inc["step_start"] <= 90, inc  # from the step the LR went up (norms every 10 steps)
    assert layer in inc["explanation"], inc["explanation"]
    # no other layer is blamed
    assert all(set(i.get("layers") or []) <= {layer} for i in dg["incidents"]), dg["incidents"]
