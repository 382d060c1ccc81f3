"""Shared test fixtures: paths to the real excerpts and labelled runs, a temp store, CliRunner."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
# Verbatim copies of shared/formats/real (real logs written by real frameworks).
REAL = Path(__file__).resolve().parent / "data" / "real"
# CONTRACT.md's incident fields, in order (written out here, not taken from the product, so that a
# product change cannot move the contract silently)
CONTRACT_INCIDENT_KEYS = [
    "id",
    "kind",
    "kinds",
    "severity",
    "step_start",
    "step_end",
    "peak_step",
    "ranks",
    "layers",
    "root_cause",
    "confidence",
    "alternatives",
    "explanation",
    "sample_ids",
    "evidence",
    "actions",
]
SAMPLE_LOGS = REPO / "sample_logs"
TUNE = SAMPLE_LOGS / "tune"


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


@pytest.fixture(scope="session")
def tune_store(tmp_path_factory):
    """One store for the labelled tune runs, shared by every test module that loads them."""
    from spikeforensics.store import Store

    return Store(tmp_path_factory.mktemp("tune-store"))


def load_tune_run(store, name: str):
    """Ingest sample_logs/tune/<name> (everything but ground_truth.json) once; return its RunData."""
    from spikeforensics.ingest import IngestError, ingest_paths
    from spikeforensics.rundata import RunData

    if not store.has_run(name):
        for path in sorted((TUNE / name).iterdir()):
            if path.name != "ground_truth.json":
                try:
                    ingest_paths([path], name, store)
                except IngestError:
                    pass
    return RunData.load(store, name)
