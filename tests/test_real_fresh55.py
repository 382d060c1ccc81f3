"""What sample_logs/real/fresh55 first needed: a JAX loop printing `LossTrajs:` (a CamelCase name, read as one word
`losstrajs`, so no loss was found and the run was inconclusive), whose inner solver's settings printed beside it
(`NbInnerStepsNode: 20`, `InnerToleranceNode: 1e-16`) made a NaN of every term look confined to some; a W&B capture of TRL's PPOTrainer that kept one progress bar
(`1/500`) for its 500 metric dicts, read as one record."""

from __future__ import annotations

from _ingest_helpers import REAL

from spikeforensics import api

FRESH = REAL / "fresh55"


def _diagnosed(path, tmp_path, run_id: str):
    api.ingest([str(path)], run_id=run_id, store=tmp_path)
    run = api.load_run(run_id, tmp_path)
    return run, api.diagnose(run)


def test_jax_loop_camel_case_loss_is_read_and_its_nan_not_blamed_on_one_term(tmp_path):
    case = FRESH / "custom-jax-ncflow-neural-ode-brusselator-loss-nan-at-outer-step-140-after-smooth-descent-19-records"
    run, d = _diagnosed(case / "nohup.log", tmp_path, "ncflow")
    assert run.resolve("loss") == "losstrajs"
    [inc] = [i for i in d["incidents"] if i["severity"] == "critical"]
    assert inc["kind"] == "nonfinite" and inc["step_start"] == 140
    assert inc["root_cause"] != "data_outlier"  # every term went NaN; the solver's settings are no loss terms


def test_trl_ppo_dicts_counted_by_their_own_episode_key(tmp_path):
    case = FRESH / "trl-ppo-qwen25-05b-emoji-rm-wandb-output-kl-climbs-0-to-100-reward-hacking-500-episodes"
    run, d = _diagnosed(case / "output.log", tmp_path, "ppo")
    steps = run.series("loss").get_column("step")
    assert steps.len() == 500 and steps.min() == 1 and steps.max() == 500
    assert d["verdict"]["status"] != "inconclusive"


def test_epoch_batch_counter_without_total_and_lettered_loss_names(tmp_path):
    """`Epoch E, Batch B, Loss X: a, Loss Y: b` (fresh58's hybrid ODE loop): the letter after `Loss` is the loop's
    own label, and the batch counter that restarts as the epoch moves up composes with it: (E - e0) * n + B, n the
    batches an epoch prints (a restart that the epoch does not explain stays a new attempt)."""
    lines = [
        f"Epoch {e}, Batch {b}, Loss X: {1 + 0.01 * b:.4f}, Loss Y: {0.9 + 0.01 * b:.4f}"
        for e in range(3)
        for b in range(20)
    ]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    api.ingest([str(log)], run_id="eb", store=tmp_path / "s")
    run = api.load_run("eb", tmp_path / "s")
    assert run.resolve("loss") == "loss_x"
    loss = run.series("loss")
    assert loss.get_column("step").to_list() == list(range(60)) and loss.get_column("attempt").n_unique() == 1
    # the counter going back inside an epoch is a restart of the run, not a new epoch
    redo = lines[:30] + [f"Epoch 1, Batch {b}, Loss X: 1.0, Loss Y: 0.9" for b in range(10)]
    log.write_text("\n".join(redo) + "\n")
    api.ingest([str(log)], run_id="redo", store=tmp_path / "s2")
    steps = api.load_run("redo", tmp_path / "s2").series("loss").get_column("step").to_list()
    assert steps[:30] == list(range(20)) + list(range(10)) and steps[30:] == list(range(10))
