"""What sample_logs/real/fresh25 (Keras bug reproductions, a TrainCheck workload, tianshou, a Flax example) first
needed: Keras updates printed one per line read as batches, a JSON object of per-epoch lists, tianshou's bar
stepped by its `env_step`, CLU's `[N] key=value` lines behind absl's prefix, a warmup from 0 printed rounded; and
four judgements: a signed loss running away by orders, a loss that never moves, an early blow-up that leaves a dead
model, a loss that climbs back to chance."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
import polars as pl
from _detect_synth import run_from
from _ingest_helpers import real_case, series

from spikeforensics import api
from spikeforensics.detect import hard_spike, signed_jump, stall
from spikeforensics.params import Params

REAL = Path(__file__).resolve().parents[1] / "sample_logs" / "real"
NEGATIVE = "keras-bugrepro-so50079585-3-classes-binary-crossentropy-negative-loss-diverges"
BLOWUP = "keras-bugrepro-so48934338-sgd-lr0-1-regression-loss-blowup-5e9-epoch2-1000-epochs"
CONSTANT = "keras-bugrepro-so34311586-softmax-single-unit-loss-constant-0-6667-20-epochs"
ZERO_GRAD = "pytorch-traincheck-so60335387-mnist-missing-zero-grad-loss-climbs-to-chance-10-epochs"
DTQN = "tianshou-levdoom-dtqn-defend-the-center-loss-nan-from-epoch-70"
FLAX = "flax-gemma3-1b-lm1b-tpu-v6e-readme-example-healthy-4000-steps"


def diagnose(tmp_path, name):
    folder = REAL / "fresh25" / name
    facts = tomllib.loads((folder / "FACTS.toml").read_text())
    api.ingest([folder / f for f in facts["files"]], run_id="r", store=tmp_path)
    return api.diagnose(api.load_run("r", tmp_path)), facts


def causes(incident: dict) -> list[str]:
    return [incident["root_cause"], *(a["root_cause"] for a in incident["alternatives"])]


# -- readers ------------------------------------------------------------------------------------------------------


def test_keras_updates_printed_one_per_line_are_batches_at_a_global_step(store):
    metrics, _, f, facts = real_case(store, "fresh25", NEGATIVE)
    loss = series(metrics, "loss")
    assert f.format == "keras" and len(loss) == facts["step_records"] == 610
    assert loss[:3] == [(1, 0.7526), (2, 0.0914), (3, -0.7484)]  # epoch 1's batches 1-3
    assert loss[62] == (63, -2533.3164)  # epoch 2, batch 2: (2 - 1) * 61 + 2
    epochs = dict(series(metrics, "epoch"))  # each batch record with its epoch (a running mean restarts there)
    assert (epochs[61], epochs[62], epochs[610]) == (1.0, 2.0, 10.0)
    # the `61/61 ... ETA: 0s` redraw and the end-of-epoch line after it are one record, the end line's values
    assert (61, -5276.5059) in loss and series(metrics, "eval_loss")[0] == (61, -26558.1562)


def test_keras_updates_redrawn_on_one_line_stay_one_record_per_epoch(store):
    metrics, _, f, facts = real_case(store, "fresh25", CONSTANT)  # 1/1 batches: an ETA line and an end line
    assert f.format == "keras" and series(metrics, "loss") == [(e, 0.6667) for e in range(1, 21)]


def test_a_json_object_of_per_epoch_lists_is_one_record_per_entry(store):
    metrics, _, f, facts = real_case(store, "fresh25", ZERO_GRAD)
    loss = series(metrics, "loss")
    assert f.format == "jsonl_metrics" and len(loss) == facts["step_records"] == 10
    assert loss[0] == (0, 1.2892145216576756) and loss[-1][0] == 9
    assert len(series(metrics, "eval_loss")) == 10  # `validation_loss`
    assert set(metrics.get_column("line").to_list()) == {1}  # every row on the object's one line


def test_tianshou_bars_are_stepped_by_env_step(store):
    metrics, events, f, facts = real_case(store, "fresh25", DTQN)
    loss = series(metrics, "loss")
    assert f.format == "tqdm_postfix" and len(loss) >= facts["step_records"] - 2  # two renders share a step
    assert loss[0] == (100000, 0.1) and loss[68] == (6900000, 0.093)
    first_nan = next(s for s, v in loss if math.isnan(v))
    assert first_nan == facts["first_nonfinite_step"] == 6919980


def test_clu_metric_writer_lines_behind_absl_are_records(store):
    metrics, _, _, facts = real_case(store, "fresh25", FLAX)
    loss = series(metrics, "loss")
    assert len(loss) == facts["step_records"] == 22
    assert loss[-2:] == [(2000, 3.729034185409546), (4000, 3.389246940612793)]
    evals = metrics.filter(pl.col("name") == "eval_loss").sort("step").select("step", "value").rows()
    assert evals == [(2000, 3.198998212814331), (4000, 2.988433599472046)]  # evaluation rows, no records


# -- judgements on the real cases ---------------------------------------------------------------------------------


def test_the_flax_warmup_printed_as_zero_is_healthy(tmp_path):
    d, facts = diagnose(tmp_path, FLAX)
    assert facts["healthy"] and d["verdict"]["status"] == "healthy"


def test_a_signed_loss_running_away_is_a_model_bug(tmp_path):
    d, facts = diagnose(tmp_path, NEGATIVE)
    (inc,) = d["incidents"]
    assert inc["kind"] == "divergence" and inc["severity"] == "critical"
    assert inc["root_cause"] == facts["stated_label"] == "model_bug"


def test_a_loss_that_never_moves_is_a_model_bug(tmp_path):
    d, facts = diagnose(tmp_path, CONSTANT)
    (inc,) = d["incidents"]
    assert inc["kind"] == "no_progress" and inc["root_cause"] == facts["stated_label"] == "model_bug"


def test_an_early_blowup_that_leaves_a_dead_model_is_lr_too_high(tmp_path):
    d, facts = diagnose(tmp_path, BLOWUP)
    (inc,) = d["incidents"]
    assert inc["root_cause"] == facts["stated_label"] == "lr_too_high"


def test_a_loss_climbing_back_to_chance_names_the_loop_bug_second(tmp_path):
    d, facts = diagnose(tmp_path, ZERO_GRAD)
    (inc,) = d["incidents"]
    assert inc["kind"] == "divergence" and causes(inc)[:2] == ["lr_too_high", "model_bug"]


# -- the same judgements on hand-made curves, and what they leave alone -------------------------------------------


def _curve(n=300, seed=0, start=3.0, end=0.8, noise=0.02):
    rng = np.random.default_rng(seed)
    return end + (start - end) * np.exp(-np.arange(n) / 40) + rng.normal(0, noise, n)


def test_a_healthy_signed_objective_does_not_run_away():
    # a flow's NLL going from +2 to -3 and settling: one order of magnitude at most
    rng = np.random.default_rng(3)
    nll = -3 + 5 * np.exp(-np.arange(400) / 60) + rng.normal(0, 0.05, 400)
    run = run_from({"step": np.arange(400), "loss": nll})
    assert not [f for f in signed_jump.detect(run, Params()) if f.facts.get("cause") == "signed_runaway"]
    runaway = -np.exp(np.arange(400) / 25)  # -1 ... -9e6
    run = run_from({"step": np.arange(400), "loss": np.r_[0.7, runaway[1:]]})
    (found,) = [f for f in signed_jump.detect(run, Params()) if f.facts.get("cause") == "signed_runaway"]
    assert found.severity == "critical" and found.kind == "divergence"


def test_a_constant_loss_needs_every_record_equal():
    run = run_from({"step": np.arange(12), "loss": np.full(12, 0.6667)})
    (found,) = stall.detect(run, Params())
    assert found.facts["cause"] == "loss_constant"
    moving = np.full(12, 0.6667)
    moving[5] = 0.6666
    assert not stall.detect(run_from({"step": np.arange(12), "loss": moving}), Params())


def test_an_early_blowup_then_a_falling_loss_is_no_dead_model():
    loss = _curve(400)
    loss[3] = 500.0  # a spike in the first records, then training goes on
    findings = hard_spike.detect(run_from({"step": np.arange(400), "loss": loss}), Params())
    assert "unstable_start_dead" not in {f.facts.get("cause") for f in findings}
    dead = _curve(400)
    dead[3] = 500.0
    dead[4:] = 1.35 + np.random.default_rng(1).normal(0, 0.002, 396)  # flat from the blow-up on
    findings = hard_spike.detect(run_from({"step": np.arange(400), "loss": dead}), Params())
    assert "unstable_start_dead" in {f.facts.get("cause") for f in findings}


def test_back_to_chance_needs_a_loss_that_had_learned():
    ln10 = math.log(10)
    rng = np.random.default_rng(2)
    collapsed = np.r_[np.linspace(2.3, 0.5, 20), np.linspace(0.5, ln10, 10), ln10 + rng.normal(0, 0.003, 30)]
    (found,) = [
        f
        for f in stall.detect(run_from({"step": np.arange(60), "loss": collapsed}), Params())
        if f.kind == "divergence"
    ]
    assert found.facts["cause"] == "chance_collapse" and found.facts["chance_classes"] == 10
    healthy = _curve(60, start=2.3, end=0.3)
    assert not [f for f in stall.detect(run_from({"step": np.arange(60), "loss": healthy}), Params())]
