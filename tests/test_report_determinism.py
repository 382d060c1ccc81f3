"""Same inputs, same bytes: `diagnose` run twice on real inputs, each time in a fresh store and a fresh
process with its own hash seed, writes the same diagnosis.json, skip list and Markdown byte for byte, and
the same HTML once the parts marked volatile (the generation time, the tool version) are scrubbed.

Two processes, not two calls in one: Python's string hashing (set order) and polars' group order (without
`maintain_order`) change from process to process, and a second call in the same process could reuse the
first one's order. The fixture runs have a per-layer dump and a batch manifest (layer order, sample order,
evidence order all go into the JSON; the second one's dump has NaN layers, marked on the heatmap); the real
log is a BLOOM-176B Megatron-DeepSpeed excerpt whose incident carries per-rank evidence.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import SAMPLE_LOGS, TUNE

REAL_DIR = SAMPLE_LOGS / "real" / "dev"
CASES = {
    "fixture-layers-manifest": [TUNE / "data_outlier_clip"],
    "fixture-nan-layers-resume": [TUNE / "nan_recurs_after_resume"],  # NaN cells in the layer heatmap
    "real-rank-evidence": [
        REAL_DIR / "megatron-deepspeed-tr11-176b-gpu-crash-cuda-unknown-error" / "chronicles_excerpt.log"
    ],
}
# the only parts of the outputs that may differ between two runs (templates/report.html marks them)
VOLATILE = re.compile(r'(data-volatile="\w+">)[^<]*(<)')


def _diagnose(paths, workdir, seed: str) -> dict[str, bytes]:
    """Run `spikeforensics diagnose` in a new process with PYTHONHASHSEED=seed and a store of its own."""
    workdir.mkdir()
    out = workdir / "report.html"
    env = {**os.environ, "PYTHONHASHSEED": seed, "NO_COLOR": "1"}
    env.pop("SPIKEFORENSICS_STORE", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spikeforensics",
            "diagnose",
            *map(str, paths),
            "--run",
            "r",
            "--store",
            str(workdir / "store"),
            "--out",
            str(out),
        ],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    html = VOLATILE.sub(r"\1\2", out.read_text(encoding="utf-8"))
    return {
        "json": (workdir / "report.json").read_bytes(),
        "skiplist": (workdir / "report.skiplist.json").read_bytes(),
        "markdown": (workdir / "report.md").read_bytes(),
        "html": html.encode(),
    }


@pytest.mark.parametrize("case", CASES)
def test_two_fresh_runs_write_the_same_bytes(case, tmp_path):
    first = _diagnose(CASES[case], tmp_path / "a", "1")
    second = _diagnose(CASES[case], tmp_path / "b", "12345")
    assert b'"evidence"' in first["json"], "the case has incidents with evidence"
    if case == "fixture-layers-manifest":
        assert b'"layer_clip_norms": {\n' in first["json"] and b'"samples"' in first["json"]
    for kind in first:
        assert first[kind] == second[kind], f"{kind} differs between two runs on the same inputs"


def test_the_scrub_leaves_everything_but_the_volatile_parts():
    page = '<dd><span class="volatile" data-volatile="generated">2026-01-01 10:00 UTC</span> x <b>run</b></dd>'
    assert (
        VOLATILE.sub(r"\1\2", page) == '<dd><span class="volatile" data-volatile="generated"></span> x <b>run</b></dd>'
    )
