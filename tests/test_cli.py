"""CLI wiring: help, exit codes, stdout/stderr discipline, export columns (CONTRACT.md)."""

from __future__ import annotations

import json

import pytest

from spikeforensics.cli import cli

COMMANDS = [[], ["ingest"], ["diagnose"], ["runs"], ["export"], ["rules"], ["rules", "check"]]
MODERNBERT = "hf_trainer/modernbert_233_gradnorm_nan_loss_zero.log"


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "root")
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_every_command_has_help(runner, cmd, flag):
    result = runner.invoke(cli, [*cmd, flag])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    if cmd and cmd != ["rules"]:
        assert "Example" in result.output


def test_unknown_run_is_exit_1_with_one_line(runner, tmp_path):
    result = runner.invoke(cli, ["diagnose", "--run", "nope", "--store", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr.strip().count("\n") == 0
    assert "unknown run 'nope'" in result.stderr


def test_bad_run_id_is_refused(runner, tmp_path, real):
    result = runner.invoke(cli, ["ingest", str(real / MODERNBERT), "--run", "../x", "--store", str(tmp_path)])
    assert result.exit_code == 1
    assert "invalid run id" in result.stderr


def test_usage_error_is_exit_2(runner):
    assert runner.invoke(cli, ["export", "--run", "x"]).exit_code == 2
    assert runner.invoke(cli, ["diagnose"]).exit_code == 2


def test_unusable_file_is_exit_1_naming_the_file(runner, tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\nthis is not a training log\n")
    result = runner.invoke(cli, ["ingest", str(junk), "--store", str(tmp_path / "s")])
    assert result.exit_code == 1
    assert "notes.txt" in result.stderr and "Traceback" not in result.stderr


def test_ingest_json_summary_on_stdout_progress_on_stderr(runner, tmp_path, real):
    result = runner.invoke(cli, ["ingest", str(real / MODERNBERT), "--run", "mb", "--store", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["run_id"] == "mb" and summary["files"][0]["status"] == "ingested"
    assert "reading" in result.stderr


def test_export_jsonl_has_contract_columns_and_nan_strings(runner, tmp_path, real):
    runner.invoke(cli, ["ingest", str(real / MODERNBERT), "--run", "mb", "--store", str(tmp_path)])
    result = runner.invoke(cli, ["export", "--run", "mb", "--table", "metrics", "--store", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {"source", "line", "step", "record", "attempt", "rank", "name", "value"} <= set(rows[0])
    grad = [r["value"] for r in rows if r["name"] == "grad_norm"]
    assert grad == ["nan", "nan", "nan"]
    loss = [r["value"] for r in rows if r["name"] == "loss"]
    assert loss == [0.2051, 0.0, 0.0]
    events = runner.invoke(cli, ["export", "--run", "mb", "--table", "events", "--store", str(tmp_path)])
    kinds = [json.loads(line)["kind"] for line in events.stdout.splitlines()]
    assert kinds.count("nan") == 3
    assert isinstance(json.loads(events.stdout.splitlines()[0])["detail"], dict)


def test_runs_lists_ingested_runs(runner, tmp_path, real):
    runner.invoke(cli, ["ingest", str(real / MODERNBERT), "--run", "mb", "--store", str(tmp_path)])
    result = runner.invoke(cli, ["runs", "--store", str(tmp_path), "--format", "json"])
    assert [r["run_id"] for r in json.loads(result.stdout)] == ["mb"]


def test_store_from_environment(runner, tmp_path, real, monkeypatch):
    monkeypatch.setenv("SPIKEFORENSICS_STORE", str(tmp_path / "envstore"))
    assert runner.invoke(cli, ["ingest", str(real / MODERNBERT), "--run", "mb"]).exit_code == 0
    assert (tmp_path / "envstore" / "tables").is_dir()


def test_diagnose_path_writes_every_output_and_fail_on_gates(runner, tmp_path):
    from conftest import SAMPLE_LOGS

    run_dir = SAMPLE_LOGS / "tune" / "data_outlier_clip"
    out = tmp_path / "r" / "report.html"
    result = runner.invoke(cli, ["diagnose", str(run_dir), "--store", str(tmp_path / "s"), "--out", str(out),
                                 "--fail-on", "critical", "-q"])
    assert result.exit_code == 3, result.stderr
    for name in ("report.html", "diagnosis.json", "skiplist.json", "report.md"):
        assert (out.parent / name).stat().st_size > 0, name
    diagnosis = json.loads((out.parent / "diagnosis.json").read_text())
    assert diagnosis["run_id"] == "data_outlier_clip" and diagnosis["verdict"]["status"] == "unstable"
    skip = json.loads((out.parent / "skiplist.json").read_text())
    assert set(skip) >= {"run_id", "steps", "sample_ids"} and skip["steps"]
    assert "inc-1" in result.stdout  # the terminal summary names the incident
    # the same run, already ingested, as JSON on stdout; exit 0 without --fail-on
    again = runner.invoke(cli, ["diagnose", "--run", "data_outlier_clip", "--store", str(tmp_path / "s"),
                                "--out", str(out), "--format", "json", "-q"])
    assert again.exit_code == 0
    assert json.loads(again.stdout)["incidents"][0]["id"] == "inc-1"


def test_healthy_run_passes_the_gate(runner, tmp_path):
    from conftest import SAMPLE_LOGS

    result = runner.invoke(cli, ["diagnose", str(SAMPLE_LOGS / "tune" / "clean"), "--store", str(tmp_path / "s"),
                                 "--out", str(tmp_path / "report.html"), "--fail-on", "warning", "-q"])
    assert result.exit_code == 0, result.stderr
    assert "Healthy" in result.stdout
