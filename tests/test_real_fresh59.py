"""What sample_logs/real/fresh59 and fresh60 first needed: a CLIP pretraining loop printing `loss is X, acc1 is Y,
...` with no counter (unreadable); MXNet's Speedometer with auto_reset=False (`Epoch[5] Batch [0-160]`, read as one
record at batch 0); PaddlePaddle hapi's `Model.fit` output (`Epoch 1/10` header lines, `step 10/614 - loss: ...`,
and an `Eval begin...` section whose `step 10/88` lines were read as training records); ML-Agents TensorBoard files
(environment statistics written at steps without an update counted as records; the policy loss taken over the
critic's); Lightning's `lr-AdamW/pg1` LR column not read as the LR; an LR range test (ktrain's `lr_find`) whose
designed blow-up was blamed on nothing."""

from __future__ import annotations

import polars as pl
from _ingest_helpers import REAL

from spikeforensics import api
from spikeforensics.ingest.aliases import canonical_metric
from spikeforensics.rundata import RunData

FRESH, FRESH60 = REAL / "fresh59", REAL / "fresh60"


def _run(paths, tmp_path, run_id: str):
    api.ingest([str(p) for p in paths], run_id=run_id, store=tmp_path)
    return api.load_run(run_id, tmp_path)


def _train_records(run) -> int:
    return run.metrics.filter(pl.col("record").is_not_null()).select("source", "record").unique().height


def test_loss_is_lines_without_a_counter_are_step_less_records(tmp_path):
    case = FRESH / "custom-merl-ecg-text-clip-pretrain-amp-cosine-warm-restart-uma-loss-spike-22992-records"
    run = _run([case / "output.log"], tmp_path, "merl")
    assert _train_records(run) == 22992
    assert {"loss", "cma_loss", "uma_loss", "acc1"} <= set(run.metric_names())
    d = api.diagnose(run)
    # the spike of record 5007 (1-based; the log prints no step), 3.3x the records before it
    assert any(i["severity"] == "critical" and abs(i["peak_step"] - 5006) <= 1 for i in d["incidents"])
    # prose is no record: `The loss is 0.9, lower than before` opens no line as `loss is x, name is y`
    log = tmp_path / "prose.log"
    log.write_text("".join(f"The loss is {0.9 - i / 100:.2f}, lower than before\n" for i in range(5)))
    try:
        api.ingest([str(log)], run_id="prose", store=tmp_path / "p")
        assert _train_records(api.load_run("prose", tmp_path / "p")) == 0
    except Exception as err:  # not a training log at all: also right
        assert "not a recognised" in str(err) or "no usable records" in str(err)


def test_mxnet_speedometer_batch_ranges_compose_with_the_epoch(tmp_path):
    case = (
        FRESH / "mxnet-ssh-keypoint-widerface-resumed-epochs-5-43-running-mean-kpoint-loss-jumps-3052-records-healthy"
    )
    run = _run([case / "train.log"], tmp_path, "mx")
    assert _train_records(run) == 3052
    loss = run.series("loss")
    assert loss.get_column("attempt").n_unique() == 1 and loss.get_column("step").is_sorted()
    assert api.diagnose(run)["verdict"]["status"] == "healthy"


def test_paddle_hapi_epochs_under_header_lines_and_its_eval_section(tmp_path):
    case = FRESH / "paddle-hapi-chexnet-chestxray14-10-epochs-per-step-loss-616-records-healthy"
    run = _run([case / "train.log"], tmp_path, "hapi")
    assert _train_records(run) == 616
    loss = run.series("loss")
    steps = loss.get_column("step")
    # (E - 1) * 614 + N, one attempt: `Epoch 2/10` above `step  10/614` is step 624
    assert loss.get_column("attempt").n_unique() == 1 and steps.min() == 10 and steps.max() == 9 * 614 + 614
    assert 624 in steps.to_list()
    # `Eval begin...`, then `step 10/88 - loss: ...`: evaluation lines
    assert run.metrics.filter(pl.col("name") == "eval_loss").height == 89


def test_mlagents_environment_statistics_are_no_records_and_the_critic_is_the_loss(tmp_path):
    case = FRESH60 / "mlagents-ppo-lstm-grid-object-collector-value-loss-burst-reward-crash-250k-recovers-2626-records"
    run = _run(list(case.glob("events.out.tfevents.*")), tmp_path, "mla")
    assert _train_records(run) == 2626  # 17 steps carry rewards and entropy only
    assert run.resolve("loss") == "losses_value_loss"
    d = api.diagnose(run)
    peaks = [i["peak_step"] for i in d["incidents"] if i["severity"] != "info"]
    assert any(abs(p - 11_640_000) <= 10_000 for p in peaks)  # its 5x value-loss blip


def test_a_critic_loss_before_a_non_negative_actor_loss():
    steps = list(range(50))
    run = RunData.from_frames(
        metrics=pl.DataFrame(
            {
                "source": "t",
                "step": steps * 2,
                "record": steps * 2,
                "attempt": 0,
                "rank": None,
                "name": ["policy_loss"] * 50 + ["value_loss"] * 50,
                "value": [0.02] * 50 + [0.5] * 50,
            },
            schema_overrides={"rank": pl.Int64},
        )
    )
    assert run.resolve("loss") == "value_loss"


def test_lightning_learning_rate_monitor_columns_are_the_lr():
    assert canonical_metric("lr-AdamW/pg1") == "lr" and canonical_metric("lr-Adam") == "lr"
    assert canonical_metric("lr-SGD") == "lr" and canonical_metric("lr-AdamW/pg2") != "lr"
    assert canonical_metric("lr-decay") != "lr"


def test_an_lr_range_test_blow_up_is_the_lr_too_high(tmp_path):
    case = FRESH / "keras-ktrain-graphsage-cora-lr-find-100-epochs-loss-bump-epoch82-then-diverges-epoch96"
    run = _run(list(case.glob("*_stdout.txt")), tmp_path, "lrf")
    assert run.events.filter(pl.col("kind") == "lr_finder").height == 1
    d = api.diagnose(run)
    assert d["verdict"]["root_cause"] == "lr_too_high"


def test_a_critic_loss_climbing_with_the_returns_is_no_divergence(tmp_path):
    """AWR's Ant-v2 log (fresh19): its critic's value MSE grows 0.0009 -> 0.057 as the return grows 1,000 ->
    5,500; with the critic taken as the loss (before the actor's), neither its climb nor its early swings near 0
    are incidents."""
    case = REAL / "fresh19" / "awr-xbpeng-ant-v2-paper-log3-critic-actor-loss-healthy-12050-iters"
    files = [p for p in case.iterdir() if p.name != "FACTS.toml"]
    run = _run(files, tmp_path, "awr")
    assert run.resolve("loss") == "critic_loss"
    d = api.diagnose(run)
    assert d["verdict"]["status"] == "healthy"
    kinds = {n["kind"] for n in d["notes"] if "RL critic's loss" in n["summary"]}
    assert {"divergence", "loss_oscillation"} <= kinds
