"""Every real excerpt, ingested and read back through `spikeforensics export`: strict JSON, contract columns."""

from __future__ import annotations

import json

import pytest
from conftest import REAL

from spikeforensics.cli import cli

EXCERPTS = sorted(p for p in REAL.rglob("*") if p.is_file() and p.name != "README.md")
COLUMNS = {
    "metrics": {"source", "line", "step", "record", "attempt", "rank", "name", "value"},
    "events": {"source", "line", "step", "rank", "kind", "time", "detail"},
    "telemetry": {"source", "line", "time", "host", "gpu"},
}


def _strict(line: str) -> dict:
    return json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c} in export"))


@pytest.mark.parametrize("path", EXCERPTS, ids=lambda p: p.relative_to(REAL).as_posix())
def test_excerpt_exports_as_strict_jsonl_with_contract_columns(runner, tmp_path, path):
    store = str(tmp_path / "s")
    ingested = runner.invoke(cli, ["ingest", str(path), "--run", "x", "--store", store, "-q"])
    assert ingested.exit_code == 0, ingested.stderr
    exported_rows = 0
    for table, columns in COLUMNS.items():
        result = runner.invoke(cli, ["export", "--run", "x", "--table", table, "--store", store])
        assert result.exit_code == 0, result.stderr
        rows = [_strict(line) for line in result.stdout.splitlines()]
        exported_rows += len(rows)
        for row in rows:
            assert columns <= set(row), (table, set(row))
            assert row["source"] == path.name
            if table == "metrics":
                assert isinstance(row["value"], float | int) or row["value"] in ("nan", "inf", "-inf")
            if table == "events":
                assert isinstance(row["detail"], dict)
    assert exported_rows > 0


def test_export_values_match_the_excerpt_readme(runner, tmp_path):
    """Spot values the excerpts' README lists, through the export command."""
    store = str(tmp_path / "s")
    path = REAL / "megatron" / "bigscience_tr8_104b_exp1_glitch_with_validation.log"
    runner.invoke(cli, ["ingest", str(path), "--run", "b", "--store", store, "-q"])
    rows = [
        _strict(line)
        for line in runner.invoke(
            cli, ["export", "--run", "b", "--table", "metrics", "--store", store]
        ).stdout.splitlines()
    ]
    loss = {r["step"]: r["value"] for r in rows if r["name"] == "loss" and r["record"] is not None}
    grad = {r["step"]: r["value"] for r in rows if r["name"] == "grad_norm"}
    assert round(loss[7010], 2) == 11.42 and round(loss[7000], 2) == 6.44
    assert grad[7010] == 219645.978 and grad[7000] == 98258.265  # exact logged values
    assert any(r["name"] == "eval_loss" and r["record"] is None for r in rows)
