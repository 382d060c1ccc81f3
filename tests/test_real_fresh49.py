"""What sample_logs/real/fresh49 first needed: a W&B `output.log` whose training records are the script's own
`print(json.dumps(...))` lines (`{"epoch": 0, "step": 5, "loss": 240.16, "time": 6}`) among the launcher's and the
libraries' output was no recognised log: the JSON-lines reader took JSON objects behind other text only when they
held a string value (fairseq's `"lr": "0.0005"`-style records)."""

from __future__ import annotations

import polars as pl
from _ingest_helpers import REAL

from spikeforensics import api
from spikeforensics.ingest import detect_format

SWEEP = (
    REAL
    / "fresh49"
    / "custom-context-enhancement-mbert-translation-sweep-lr0-2-wandb-output-loss-7-to-240-step5-never-recovers"
    / "output.log"
)


def test_json_stats_printed_among_other_output_are_the_records(tmp_path):
    assert detect_format(SWEEP)[0] == "jsonl_metrics"
    api.ingest([str(SWEEP)], run_id="sweep", store=tmp_path)
    run = api.load_run("sweep", tmp_path)
    loss = run.series("loss")
    assert loss.height == 48
    assert loss.get_column("step").to_list() == list(range(0, 240, 5))
    assert loss.get_column("value")[:2].to_list() == [7.117185592651367, 240.16217041015625]
    d = api.diagnose(run)
    assert d["verdict"]["status"] == "unstable"
    first = [i for i in d["incidents"] if i["severity"] == "critical"][0]
    assert first["step_start"] <= 5 <= first["step_end"]


def test_a_text_log_with_a_few_braces_is_not_taken_for_json_lines(tmp_path):
    """Python dict reprs and a config's braces are no JSON stats: the text grammar keeps the file."""
    lines = ["{'lr': 0.1, 'epochs': 3}", "config = {", "}", "{}"] + [
        f"step {i} | loss {2.0 - i / 100:.4f} | lr 0.1" for i in range(1, 40)
    ]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    assert detect_format(path)[0] != "jsonl_metrics"
    api.ingest([str(path)], run_id="t", store=tmp_path / "s")
    metrics = api.load_run("t", tmp_path / "s").metrics
    assert metrics.filter((pl.col("name") == "loss") & pl.col("record").is_not_null()).height == 39
