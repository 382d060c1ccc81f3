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
    result = runner.invoke(
        cli,
        ["diagnose", str(run_dir), "--store", str(tmp_path / "s"), "--out", str(out), "--fail-on", "critical", "-q"],
    )
    assert result.exit_code == 3, result.stderr
    for name in ("report.html", "report.json", "report.skiplist.json", "report.md"):
        assert (out.parent / name).stat().st_size > 0, name
    assert not (out.parent / "ground_truth.json").exists() and "ground_truth" not in result.stderr
    diagnosis = json.loads((out.parent / "report.json").read_text())
    assert diagnosis["run_id"] == "data_outlier_clip" and diagnosis["verdict"]["status"] == "unstable"
    skip = json.loads((out.parent / "report.skiplist.json").read_text())
    assert set(skip) >= {"run_id", "steps", "sample_ids"} and skip["steps"]
    assert "inc-1" in result.stdout  # the terminal summary names the incident
    # the same run, already ingested, as JSON on stdout; exit 0 without --fail-on
    again = runner.invoke(
        cli,
        [
            "diagnose",
            "--run",
            "data_outlier_clip",
            "--store",
            str(tmp_path / "s"),
            "--out",
            str(out),
            "--format",
            "json",
            "-q",
        ],
    )
    assert again.exit_code == 0
    assert json.loads(again.stdout)["incidents"][0]["id"] == "inc-1"


def test_healthy_run_passes_the_gate(runner, tmp_path):
    from conftest import SAMPLE_LOGS

    result = runner.invoke(
        cli,
        [
            "diagnose",
            str(SAMPLE_LOGS / "tune" / "clean"),
            "--store",
            str(tmp_path / "s"),
            "--out",
            str(tmp_path / "report.html"),
            "--fail-on",
            "warning",
            "-q",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert "Healthy" in result.stdout


def test_two_reports_in_one_folder_keep_their_own_json(runner, tmp_path):
    from conftest import SAMPLE_LOGS

    for name, run in (("a", "data_outlier_clip"), ("b", "clean")):
        res = runner.invoke(
            cli,
            [
                "diagnose",
                str(SAMPLE_LOGS / "tune" / run),
                "--store",
                str(tmp_path / "s"),
                "--out",
                str(tmp_path / f"{name}.html"),
                "-q",
            ],
        )
        assert res.exit_code == 0, res.stderr
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")
    assert a["run_id"] == "data_outlier_clip" and b["run_id"] == "clean"
    assert json.loads((tmp_path / "a.skiplist.json").read_text())["sample_ids"]
    assert json.loads((tmp_path / "b.skiplist.json").read_text())["sample_ids"] == []


def test_diagnose_path_never_merges_into_a_run_holding_other_sources(runner, tmp_path):
    # a/train.log then b/train.log: two runs, not one run holding both files
    for sub_dir, loss in (("a", 3.0), ("b", 5.0)):
        (tmp_path / sub_dir).mkdir()
        (tmp_path / sub_dir / "train.log").write_text(
            "".join(f"step {s} | loss {loss - s / 1000:.4f} | lr 1e-4 | grad_norm 0.5\n" for s in range(1, 60))
        )
    store = str(tmp_path / "s")
    first = runner.invoke(
        cli, ["diagnose", str(tmp_path / "a" / "train.log"), "--store", store, "-q", "--out", str(tmp_path / "a.html")]
    )
    second = runner.invoke(
        cli, ["diagnose", str(tmp_path / "b" / "train.log"), "--store", store, "-q", "--out", str(tmp_path / "b.html")]
    )
    assert first.exit_code == 0 and second.exit_code == 0, second.stderr
    assert "train-2" in second.stderr and "--append" in second.stderr
    assert json.loads((tmp_path / "b.json").read_text())["run_id"] == "train-2"
    # the same file again reuses its run; an explicit --run that holds other sources is refused
    again = runner.invoke(
        cli, ["diagnose", str(tmp_path / "a" / "train.log"), "--store", store, "-q", "--out", str(tmp_path / "a2.html")]
    )
    assert again.exit_code == 0, again.stderr
    assert json.loads((tmp_path / "a2.json").read_text())["run_id"] == "train"
    refused = runner.invoke(cli, ["diagnose", str(tmp_path / "b" / "train.log"), "--run", "train", "--store", store])
    assert refused.exit_code == 2 and "--append" in refused.stderr
    appended = runner.invoke(
        cli,
        [
            "diagnose",
            str(tmp_path / "b" / "train.log"),
            "--run",
            "train",
            "--append",
            "--store",
            store,
            "-q",
            "--out",
            str(tmp_path / "ab.html"),
        ],
    )
    assert appended.exit_code == 0 and json.loads((tmp_path / "ab.json").read_text())["run_id"] == "train"
    empty = runner.invoke(cli, ["diagnose", str(tmp_path / "a" / "train.log"), "--run", "", "--store", store])
    assert empty.exit_code == 2


def test_a_bug_exits_4_not_1(runner, tmp_path, monkeypatch):
    from spikeforensics import api

    def broken(*a, **k):
        raise KeyError("oops")

    monkeypatch.setattr(api, "diagnose", broken)
    log = tmp_path / "train.log"
    log.write_text("".join(f"step {s} | loss {3 - s / 100:.3f} | grad_norm 0.5\n" for s in range(1, 30)))
    res = runner.invoke(cli, ["diagnose", str(log), "--store", str(tmp_path / "s"), "-q"])
    assert res.exit_code == 4 and "bug in spikeforensics" in res.stderr and "Traceback" not in res.stderr
