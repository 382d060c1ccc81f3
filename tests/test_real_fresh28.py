"""What sample_logs/real/fresh28 (MATLAB, PyMARL, verl, TRL GRPO, litgpt, torchtune, DeepLabCut, DeePMD-kit) first
needed: MATLAB's verbose training table, whose header is framed by `=` rules and splits each name over rows;
PyMARL's `Recent Stats` blocks, whose Q-learner loss is a TD loss; an RL critic's loss climbing or drifting with its
targets, and a self-play loss drifting with its data, as notes; an LR printed as a fixed-decimal zero (verl's `actor/lr:0.000`) read as below the print, not 0;
an entropy term never taken as the loss; grad-norm spikes whose gaps grow read as thinning out, not the LR
pattern."""

from __future__ import annotations

import numpy as np
import polars as pl
from _detect_synth import run_from
from _ingest_helpers import REAL, ingest, real_case

from spikeforensics import api
from spikeforensics.detect import blips, hard_spike, soft_drift
from spikeforensics.ingest.pipe_table import _framed_headers
from spikeforensics.params import Params

MATLAB = "matlab-yolov2-meal-recognition-300-epochs-minibatch-noise-val-overfits-healthy"
PYMARL = "pymarl-smix-starcraft-8m-cout-10m-steps-rising-td-loss-healthy"
VERL_RESUMED = "verl-dstack-qwen25-7b-gsm8k-ppo-2x8gpu-resumed-at-step-101-healthy"
VERL_REFERENCE = "verl-qwen25-05b-gsm8k-ppo-official-example-log-clipped-actor-grad-norm-spikes"
P = Params.load()


def test_matlab_verbose_table_reads_every_row_with_its_joined_names(store):
    metrics, _, f, facts = real_case(store, "fresh28", MATLAB)
    assert f.format == "pipe_table" and f.unparsed == 0
    loss = metrics.filter(pl.col("name") == "loss").sort("step")
    assert loss.height == facts["step_records"] == 61
    assert loss.get_column("step").to_list()[:3] == [1, 50, 100] and loss.get_column("step")[-1] == 3000
    assert loss.get_column("value")[0] == 36.4648  # `Mini-batch` + `Loss`
    names = set(metrics.get_column("name").unique())
    assert {"loss", "eval_loss", "lr", "epoch", "mini_batch_rmse", "validation_rmse"} <= names
    assert metrics.filter(pl.col("name") == "lr").get_column("value").unique().to_list() == [0.001]


def test_a_classification_table_pasted_behind_matlab_comments(store, tmp_path):
    text = (
        "options = trainingOptions('sgdm','MaxEpochs',15,'InitialLearnRate',0.0001);\n"
        "% |========================================================================================|\n"
        "% |  Epoch  |  Iteration  |  Time Elapsed  |  Mini-batch  |  Mini-batch  |  Base Learning  |\n"
        "% |         |             |   (hh:mm:ss)   |   Accuracy   |     Loss     |      Rate       |\n"
        "% |========================================================================================|\n"
        "% |       1 |           1 |       00:00:03 |        9.38% |      13.8418 |      1.0000e-04 |\n"
        "% |       1 |          50 |       00:00:17 |       56.25% |       2.8707 |      1.0000e-04 |\n"
        "% |       2 |         100 |       00:00:23 |       82.81% |       0.8151 |      1.0000e-04 |\n"
        "% |       3 |         150 |       00:00:28 |       85.94% |       0.6059 |      1.0000e-04 |\n"
        "% |========================================================================================|\n"
    )
    path = tmp_path / "train_output.txt"
    path.write_text(text)
    metrics, _, f = ingest(store, path)
    assert f.format == "pipe_table"
    loss = metrics.filter(pl.col("name") == "loss").sort("step")
    assert loss.get_column("step").to_list() == [1, 50, 100, 150]
    assert loss.get_column("value").to_list() == [13.8418, 2.8707, 0.8151, 0.6059]
    assert metrics.filter(pl.col("name") == "lr").get_column("value").unique().to_list() == [1e-4]


def test_rows_between_two_rules_that_name_no_loss_are_no_header():
    # two rows of numbers between rules (a short table's rows, a grid) are no header
    text = ["|=========|", "|  1 |  2 |", "|  3 |  4 |", "|=========|"]
    assert _framed_headers(pl.DataFrame({"line": [1, 2, 3, 4], "text": text})) == []
    named = ["|=====|", "| Epoch | Iteration | Mini-batch |", "|  |  | Loss |", "|=====|"]
    assert _framed_headers(pl.DataFrame({"line": [1, 2, 3, 4], "text": named})) == [
        (4, ["Epoch", "Iteration", "Mini-batch Loss"])
    ]


def test_pymarl_recent_stats_blocks_are_records_at_t_env(store):
    metrics, _, f, facts = real_case(store, "fresh28", PYMARL)
    assert f.format == "pymarl"
    td = metrics.filter(pl.col("name") == "td_loss").sort("step")  # a Q-learner's `loss` beside target_mean
    assert td.height == facts["step_records"] == 499
    assert td.get_column("step")[0] == 20044 and td.get_column("step")[-1] == 10034638
    assert td.get_column("value")[0] == 0.2325
    grad = metrics.filter(pl.col("name") == "grad_norm").sort("step")
    assert grad.height == 499 and grad.get_column("value")[0] == 3.3918
    assert metrics.filter(pl.col("name") == "episode").get_column("value").sort()[0] == 712.0
    assert metrics.filter(pl.col("name") == "loss").height == 0


def test_pymarl_td_loss_climbing_with_the_returns_is_no_incident(tmp_path):
    case = REAL / "fresh28" / PYMARL
    api.ingest([str(case / "cout.txt")], run_id="r", store=tmp_path)
    diagnosis = api.diagnose(api.load_run("r", tmp_path))
    assert diagnosis["verdict"]["status"] == "healthy"
    assert any("critic's loss climbing" in n["summary"] for n in diagnosis["notes"])


def test_a_critic_loss_ramp_is_a_note_and_a_jump_stays():
    n = 300
    steps = np.arange(n) * 10
    rng = np.random.default_rng(3)
    ramp = np.concatenate([np.full(30, 0.2), np.linspace(0.2, 1.2, 20), np.full(n - 50, 1.2)])
    ramp = ramp * (1 + 0.01 * rng.standard_normal(n))
    climbs = [
        f for f in hard_spike.detect(run_from({"step": steps, "td_loss": ramp}), P) if f.facts.get("critic_climb")
    ]
    jump = ramp.copy()
    jump[30:] = 1.2 * (1 + 0.01 * rng.standard_normal(n - 30))  # the same rise in one record
    kept = [f for f in hard_spike.detect(run_from({"step": steps, "td_loss": jump}), P) if f.severity != "info"]
    plain = [f for f in hard_spike.detect(run_from({"step": steps, "loss": ramp}), P) if f.severity != "info"]
    assert climbs and all(f.severity == "info" for f in climbs)
    assert kept and plain  # a jump of a critic's loss, and the same ramp of a plain loss, stay incidents


def test_a_critic_loss_drift_is_a_note():
    n = 400
    steps = np.arange(n)
    rng = np.random.default_rng(5)
    rising = np.concatenate([np.full(200, 1.0), np.linspace(1.0, 1.6, 100), np.full(100, 1.6)])
    rising = rising * (1 + 0.02 * rng.standard_normal(n))
    drifts = soft_drift.detect(run_from({"step": steps, "value_loss": rising}), P)
    plain = soft_drift.detect(run_from({"step": steps, "loss": rising}), P)
    assert drifts and all(f.severity == "info" and f.facts.get("critic_drift") for f in drifts)
    assert any(f.severity != "info" for f in plain)


def test_a_fixed_decimal_zero_lr_is_below_the_print_not_zero(store, tmp_path):
    path = tmp_path / "train.log"
    lines = [
        f"step:{i} - actor/pg_loss:{-0.01 * (i % 3):.3f} - actor/lr:0.000 - critic/lr:{0.0 if i == 0 else 1e-5}"
        for i in range(1, 30)
    ]
    path.write_text("\n".join(lines) + "\n")
    metrics, _, _ = ingest(store, path)
    names = set(metrics.get_column("name").unique())
    assert "lr" not in names  # every `actor/lr:0.000`: an LR under 0.0005, no value
    assert metrics.filter(pl.col("name") == "critic_lr").height == 29  # another name keeps its values


def test_verl_resumed_run_is_healthy_its_critic_loss_judged_not_the_entropy(tmp_path):
    case = REAL / "fresh28" / VERL_RESUMED
    api.ingest([str(p) for p in case.glob("*.log")], run_id="r", store=tmp_path)
    run = api.load_run("r", tmp_path)
    assert run.resolve("loss") == "critic_vf_loss" and run.loss_is_critic()
    assert run.series("lr").height == 0  # `actor/lr:0.000` on every record
    assert api.diagnose(run)["verdict"]["status"] == "healthy"


def test_grad_norm_spikes_whose_gaps_grow_are_no_lr_pattern(tmp_path):
    case = REAL / "fresh28" / VERL_REFERENCE
    api.ingest([str(p) for p in case.glob("*.log")], run_id="r", store=tmp_path)
    run = api.load_run("r", tmp_path)
    early = [8, 16, 25, 33, 42, 64, 86, 159, 175, 328]  # gaps 8-9 early, 70-150 late
    assert not blips.dense(run, P, early)
    steady = list(range(20, 420, 40))  # every 40 records, evenly: the LR pattern's rate
    assert blips.dense(run, P, steady)
    diagnosis = api.diagnose(run)
    grouped = [n for n in diagnosis["notes"] if "isolated grad-norm blips" in n["summary"]]
    assert grouped and "steps 8 and 328" in grouped[0]["summary"]


def test_a_self_play_loss_drift_is_a_note(tmp_path):
    # AlphaZero gomoku (fresh21): loss 2.1 -> 2.3-2.4 as the self-play games get harder, `explained_var_old` logged
    case = next((REAL / "fresh21").glob("alphazero-gomoku-*"))
    api.ingest([str(case / "train.log")], run_id="r", store=tmp_path)
    run = api.load_run("r", tmp_path)
    assert run.loss_is_reinforcement() and not run.loss_is_critic()
    drifts = [f for f in soft_drift.detect(run, P)]
    assert drifts and all(f.severity == "info" and f.facts.get("rl_drift") for f in drifts)
    n = 400
    rising = np.concatenate([np.full(200, 1.0), np.linspace(1.0, 1.6, 100), np.full(100, 1.6)])
    supervised = run_from({"step": np.arange(n), "loss": rising, "accuracy": np.linspace(0.1, 0.9, n)})
    assert not supervised.loss_is_reinforcement()
