"""Shared test fixtures: paths to the real excerpts and labelled runs, a temp store, CliRunner."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
# Verbatim copies of shared/formats/real (real logs written by real frameworks).
REAL = Path(__file__).resolve().parent / "data" / "real"
SAMPLE_LOGS = REPO / "sample_logs"


@pytest.fixture
def real() -> Path:
    return REAL


@pytest.fixture
def store(tmp_path):
    from spikeforensics.store import Store

    return Store(tmp_path / "store")


@pytest.fixture
def runner(monkeypatch) -> CliRunner:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("SPIKEFORENSICS_STORE", raising=False)
    return CliRunner()
