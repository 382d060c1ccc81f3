"""A W&B run folder given whole (`wandb/run-*/files/`): the stdout capture `output.log` is the log, the
one-object `wandb-summary.json` is the run's final summary (no training step), the config, requirements,
metadata and the binary `.wandb` file are skipped with a warning, not errors."""

from __future__ import annotations

import json
from pathlib import Path

from spikeforensics import api

LOG = (
    Path(__file__).resolve().parents[1]
    / "sample_logs"
    / "real"
    / "dev"
    / "colossalai-examples-37-zero3-overflow-loss-nan"
)


def wandb_folder(tmp_path: Path) -> Path:
    files = tmp_path / "wandb" / "run-20240101_000000-abc123" / "files"
    files.mkdir(parents=True)
    (files / "output.log").write_bytes((LOG / "issue_37_paste.log").read_bytes())
    (files / "config.yaml").write_text("wandb_version: 1\n\nlr:\n  desc: null\n  value: 0.0003\n")
    (files / "requirements.txt").write_text("torch==2.1.0\nnumpy==1.26.0\n")
    (files / "wandb-metadata.json").write_text(json.dumps({"os": "Linux", "program": "train.py", "gpu_count": 8}))
    summary = {"train/loss": 2.31, "train/global_step": 1000, "_step": 1000, "_runtime": 3600, "_timestamp": 1704070800}
    (files / "wandb-summary.json").write_text(json.dumps(summary) + "\n")
    (files.parent / "run-abc123.wandb").write_bytes(bytes(range(256)) * 2)
    return tmp_path / "wandb"


def test_a_wandb_run_folder_reads_its_log_and_keeps_the_summary_off_the_steps(tmp_path):
    report = api.ingest([wandb_folder(tmp_path)], run_id="w", store=tmp_path / "s")
    status = {Path(f.source).name: f.status for f in report.files}
    assert status["output.log"] == status["wandb-summary.json"] == "ingested"
    assert {status[n] for n in ("config.yaml", "requirements.txt", "wandb-metadata.json", "run-abc123.wandb")} == {
        "failed"
    }
    metrics = api.load_run("w", tmp_path / "s").metrics
    summary = metrics.filter(metrics["source"].str.ends_with("wandb-summary.json"))
    assert summary.height and summary.get_column("record").null_count() == summary.height
    assert "train_loss" in summary.get_column("name").to_list()
    steps = metrics.filter(metrics["record"].is_not_null()).get_column("step").unique().sort().to_list()
    assert steps == [1, 2, 3]  # the log's steps only: no training record at the summary's step 1000
