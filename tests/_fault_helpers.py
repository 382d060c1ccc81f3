"""Shared by the fault tests (tests/test_faults.py, tests/test_faults_fuzz.py): small inputs written here and a
diagnose into a fresh store."""

from __future__ import annotations

import json
from pathlib import Path

from spikeforensics.cli import cli

ROOT = Path(__file__).resolve().parents[1]


def write_lines(path, lines, end="\n"):
    path.write_bytes((end.join(lines) + end).encode())
    return path


def diagnosed(runner, path, tmp_path) -> dict:
    """`diagnose PATH` into a fresh store under tmp_path: exit 0, and the diagnosis JSON."""
    res = runner.invoke(
        cli, ["diagnose", str(path), "--store", str(tmp_path / "st"), "--out", str(tmp_path / "r" / "report.html")]
    )
    assert res.exit_code == 0, res.output
    return json.loads((tmp_path / "r" / "report.json").read_text())
