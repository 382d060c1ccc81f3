"""What sample_logs/real/fresh32 (nnU-Net v2, Sacred, TF NMT, ...) first needed: several files given to `ingest` at
once where one is an aborted launch's log with no record (skipped with a warning, the others read, not the whole
command refused), and Sacred's column-wise `metrics.json`."""

from __future__ import annotations

import polars as pl
from _ingest_helpers import REAL, ingest

from spikeforensics.cli import cli
from spikeforensics.ingest import detect_format

NNUNET = REAL / "fresh32" / "nnunet-v2-hippocampus-3d-fold0-1000-epochs-resume-at-450-healthy"
SACRED = REAL / "fresh32" / "sacred-pytorch-lstm-gaussian-nll-400-epochs-val-loss-crosses-zero-healthy"


def test_files_given_together_skip_one_with_no_record_and_read_the_others(tmp_path, runner):
    """`spikeforensics ingest training_log_*.txt`: the first log is a launch that died before its first epoch
    (19 lines, no record). It is skipped with a warning naming it; the two others are read (epochs 0-496, then
    the resume from 450 to 999), exit 0. Given alone, it is still an error (exit 1)."""
    files = sorted(NNUNET.glob("training_log_*.txt"))
    store = str(tmp_path / "store")
    result = runner.invoke(cli, ["ingest", *map(str, files), "--run", "nn", "--store", store])
    assert result.exit_code == 0, result.output
    assert "skipped" in result.stderr and files[0].name in result.stderr
    from spikeforensics import api

    loss = api.export("nn", "metrics", store).filter(pl.col("name") == "loss")
    assert loss.height == 497 + 550
    spans = loss.group_by("source").agg(pl.col("step").min().alias("lo"), pl.col("step").max().alias("hi"))
    assert spans.sort("lo").rows() == [
        (files[1].name, 0, 496),
        (files[2].name, 450, 999),
    ]
    alone = runner.invoke(cli, ["ingest", str(files[0]), "--run", "nn2", "--store", store])
    assert alone.exit_code == 1 and files[0].name in alone.stderr
    both_bad = runner.invoke(
        cli, ["ingest", str(files[0]), str(SACRED / "FACTS.toml"), "--run", "nn3", "--store", store]
    )
    assert both_bad.exit_code == 1


def test_sacred_metrics_json_is_read_column_wise_one_record_per_step(store):
    path = SACRED / "metrics.json"
    assert detect_format(path)[0] == "json_doc"
    metrics, _, outcome = ingest(store, path)
    loss = metrics.filter(pl.col("name") == "loss").sort("step")  # `training.loss` through the alias table
    assert loss.height == 400 and loss.get_column("step").to_list() == list(range(1, 401))
    assert loss.get_column("record").to_list() == list(range(400))
    assert abs(loss.item(0, "value") - 0.2630771433830261) < 1e-12 and loss.item(399, "value") < -0.67
    assert outcome.unparsed == 0


def test_tf_nmt_prints_perplexity_only_and_the_loss_is_its_log(store):
    """tensorflow/nmt issue 164's pasted log prints `ppl` and no loss: the loss is ln(ppl), the exploding
    perplexity (2.3e6 at step 300 -> 1.8e17 at step 900) a loss rising 14.65 -> 39.71."""
    import math

    path = REAL / "fresh32" / "tf-nmt-164-gru-sgd-lr1-ppl-explodes-from-2e6-to-1e17" / "issue_log.txt"
    assert detect_format(path)[0] == "tf_nmt"
    metrics, _, _ = ingest(store, path)
    loss = metrics.filter(pl.col("name") == "loss").sort("step")
    assert loss.get_column("step").to_list() == list(range(100, 1001, 100))
    assert abs(loss.item(2, "value") - math.log(2312801.91)) < 1e-9
    ppl = metrics.filter(pl.col("name") == "ppl").sort("step")
    assert ppl.item(8, "value") == 175912961198871744.0
    tps = metrics.filter((pl.col("name") == "tokens_per_s") & (pl.col("step") == 100))
    assert tps.item(0, "value") == 7340.0
    text = "  global step 200 lr 0.001 step-time 0.32s wps 12.28K ppl 23.17 gN 5.21 bleu 0.00\n"
    text += "  eval dev: perplexity 25.07, time 3s, Mon Jan 15 10:01:13 2018.\n"
    from spikeforensics.ingest import tf_nmt
    from spikeforensics.ingest.base import SourceFile, lines_from_bytes, prepare

    lines = prepare(lines_from_bytes(text.encode()))
    result = tf_nmt.parse(SourceFile(path=path, name="t", only_lines=lines))
    got = dict(result.tables["metrics"].select("name", "value").iter_rows())
    assert got["grad_norm"] == 5.21 and abs(got["eval_loss"] - math.log(25.07)) < 1e-12
