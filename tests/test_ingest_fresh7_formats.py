"""Readers first met in sample_logs/real/fresh7: pytorch-CycleGAN-and-pix2pix's `loss_log.txt` (cyclegan), the
VITS trainer's unnamed loss lists (vits), Ray Tune's `Result for` YAML blocks (ray_tune), DeePMD-kit's
`lcurve.out` and Spinning Up's `progress.txt` (column_table), and custom-loop shapes of generic_steps (the
PyTorch tutorial's `[E, I] loss:`, RMSE as the loss, `loss_train, 0.833`, a tqdm description once per epoch),
MACE's `"mode": "eval"` records and epoch restarts (jsonl_metrics). Each: the real case as the driver ingests
it (records and steps as its FACTS.toml counts them), the format's other shapes, and what must not be taken."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest
from _ingest_helpers import ingest, real_case, train_steps, value, write

from spikeforensics.ingest.cyclegan import epoch_size


def real(store, name):
    return real_case(store, "fresh7", name)


def test_cyclegan_loss_log_steps_are_samples_of_the_run_with_relaunches_as_attempts(store):
    metrics, _, f, facts = real(store, "pytorch-cyclegan-attentiongan-horse2zebra-loss-log-healthy-60-epochs")
    steps = train_steps(metrics)
    assert f.format == "cyclegan" and steps[0] == facts["first_step"] == 100
    # epoch 1 ends at iters 1300, epoch 2 opens at 64: 1,336 samples an epoch; the last line is epoch 60 iters 1300
    assert steps[-1] == facts["last_step"] == 59 * 1336 + 1300
    # 815 lines: the relaunch's first line repeats the step of the one-record relaunch before it (one record)
    assert abs(len(steps) - facts["step_records"]) <= 1
    assert value(metrics, 100, "loss_d_a") == pytest.approx(0.540) and value(
        metrics, 100, "loss_idt_b"
    ) == pytest.approx(1.010)
    assert metrics.filter(pl.col("attempt") > 0).height > 0  # the counter goes back at the relaunches


def test_cyclegan_pix2pix_names_and_an_epoch_size_the_file_does_not_agree_on(tmp_path, store):
    lines = ["================ Training Loss (Mon Jan  1 10:00:00 2024) ================"]
    for e, its in ((1, (100, 200, 300)), (2, (50, 150, 250)), (3, (0, 100))):
        lines += [
            f"(epoch: {e}, iters: {i}, time: 0.1, data: 0.01) G_GAN: 1.2 G_L1: 3.4 D_real: 0.6 D_fake: nan "
            for i in its
        ]
    metrics, _, f = ingest(store, write(tmp_path, "loss_log.txt", "\n".join(lines) + "\n"))
    # epoch 1 -> 2 gives 300 + 100 - 50 = 350, epoch 2 -> 3 gives 250 + 100 - 0 = 350: one size
    assert f.format == "cyclegan" and train_steps(metrics) == [100, 200, 300, 400, 500, 600, 700, 800]
    assert value(metrics, 100, "loss_g_l1") == pytest.approx(3.4) and math.isnan(value(metrics, 100, "loss_d_fake"))
    assert (
        epoch_size(pl.Series([1, 1, 2, 2, 3]), pl.Series([100, 200, 50, 150, 10])) is None
    )  # 350 vs 240: iters as printed


def test_vits_unnamed_loss_lists_take_the_trainer_order_and_its_global_step(store):
    metrics, _, f, facts = real(store, "so-vits-svc-32k-two-speaker-train-log-healthy-48800-steps")
    steps = train_steps(metrics)
    assert f.format.split("+")[0] == "vits" and len(steps) == facts["step_records"] == 245
    assert (steps[0], steps[-1]) == (facts["first_step"], facts["last_step"]) == (0, 48800)
    assert value(metrics, 200, "loss_mel") == pytest.approx(22.52760887145996)
    assert value(metrics, 200, "lr") == pytest.approx(9.98501030820433e-05)
    assert value(metrics, 0, "loss_kl") == pytest.approx(13.584056854248047)


def test_vits_six_losses_and_a_list_without_its_epoch_line(tmp_path, store):
    text = (
        "2021-06-01 10:00:00,000\tljs\tINFO\tTrain Epoch: 1 [0%]\n"
        "2021-06-01 10:00:00,001\tljs\tINFO\t[2.5, 2.1, 5.0, 30.0, 1.9, 8.0, 0, 0.0002]\n"
        "2021-06-01 10:05:00,000\tljs\tINFO\tTrain Epoch: 3 [40%]\n"
        "2021-06-01 10:05:00,001\tljs\tINFO\t[2.4, nan, 4.0, 25.0, 1.7, 2.0, 200, 0.0002]\n"
        "2021-06-01 10:05:01,000\tljs\tINFO\t[1.0, 2.0, 3.0, 4.0]\n"  # no `Train Epoch` line before it: not a record
    )
    metrics, _, f = ingest(store, write(tmp_path, "train.log", text))
    assert f.format == "vits" and train_steps(metrics) == [0, 200]
    assert value(metrics, 0, "loss_dur") == pytest.approx(1.9) and math.isnan(value(metrics, 200, "loss_gen"))
    assert value(metrics, 200, "epoch") == 3


def test_ray_tune_result_blocks_are_records_at_their_training_iteration(store):
    metrics, _, f, facts = real(store, "rllib-shogi-rl-dqn-selfplay-q-values-diverge-from-iter11")
    steps = train_steps(metrics)
    assert f.format == "ray_tune" and len(steps) >= 0.95 * facts["step_records"]
    assert steps[0] == facts["first_step"] == 1 and steps == sorted(steps)
    assert value(metrics, 1, "grad_norm") == pytest.approx(0.18033289909362793)  # RLlib's grad_gnorm
    assert value(metrics, 1, "lr") == pytest.approx(0.0005)  # cur_lr, not a config entry
    assert metrics.filter(pl.col("name").is_in(["pid", "date", "cpu_util_percent"])).height == 0


def test_pytorch_tutorial_epoch_batch_counter_and_rmse_as_the_loss(store):
    metrics, events, f, facts = real(store, "deeprecommender-25-autoencoder-own-data-rmse-nan-from-iter1000")
    assert f.format == "generic_steps" and len(train_steps(metrics)) == facts["step_records"] == 14
    loss = metrics.filter((pl.col("name") == "loss") & pl.col("record").is_not_null()).sort("record")
    assert loss.item(0, "value") == pytest.approx(8.0848995)
    # the batch counter restarts every epoch (`[1,     0] RMSE: nan`): each epoch a new attempt
    assert loss.filter(pl.col("step") == 0).get_column("attempt").to_list() == [0, 1]
    assert math.isnan(loss.item(1, "value")) and loss.item(1, "step") == 1000 == facts["first_nonfinite_step"]


def test_tutorial_lines_and_comma_separated_loss_names(tmp_path, store):
    metrics, _, f = ingest(
        store,
        write(tmp_path, "cifar.log", "[1,  2000] loss: 2.194\n[1,  4000] loss: 1.855\n[2,  2000] loss: 1.512\n"),
    )
    assert f.format == "generic_steps" and train_steps(metrics) == [2000, 4000, 2000]
    assert value(metrics, 4000, "epoch") == 1 and metrics.filter(pl.col("attempt") == 1).height > 0
    metrics, _, f = ingest(
        store,
        write(
            tmp_path,
            "unet.log",
            "epoch 1, phase train, step 10, loss_train, 0.833\nepoch 1, phase train, step 20, loss_train, 0.809\n",
        ),
        run="comma",
    )
    assert train_steps(metrics) == [10, 20] and value(metrics, 20, "loss_train") == pytest.approx(0.809)


def test_brain_mri_loop_prints_its_loss_after_a_comma(store):
    metrics, _, f, facts = real(store, "custom-brain-mri-unet-dice-step-log-healthy-1456-steps")
    assert f.format == "generic_steps" and len(train_steps(metrics)) == facts["step_records"] == 145


def test_tqdm_description_once_per_epoch_is_the_epoch_record(store):
    metrics, _, f, facts = real(store, "custom-imagenet1k-resnet50-t4-epoch-tqdm-log-healthy-80-epochs")
    steps = train_steps(metrics)
    assert f.format == "generic_steps" and len(steps) == facts["step_records"] == 80
    assert (steps[0], steps[-1]) == (1, 80) and value(metrics, 1, "loss") == pytest.approx(5.872)


def test_many_loss_lines_under_one_epoch_are_no_epoch_records(tmp_path, store):
    text = "".join(f"Epoch 0, Loss: {1 + i / 10:.2f}, Positive Score: 0.5\n" for i in range(5))
    metrics, _, _ = ingest(store, write(tmp_path, "rm.log", text))
    assert train_steps(metrics) == [None] * 5  # step-less records in file order, not one record of epoch 0


def test_deepmd_lcurve_commented_header_and_a_table_longer_than_the_header_gap(store):
    metrics, _, f, facts = real(store, "deepmd-kit-cucl-se-e2-a-lcurve-healthy-100k-steps")
    steps = train_steps(metrics)
    assert f.format == "column_table" and len(steps) == facts["step_records"] == 1001
    assert steps[-1] == 100000 and value(metrics, 100, "loss") == pytest.approx(2.44)
    assert value(metrics, 100, "eval_loss") == pytest.approx(2.10) and value(metrics, 100, "lr") == pytest.approx(1e-3)


def test_spinning_up_progress_losses_and_the_critic_as_the_run_loss(store):
    from spikeforensics.rundata import RunData

    metrics, _, f, facts = real(store, "spinningup-td3-hopper-progress-txt-healthy-139-epochs")
    assert f.format == "column_table" and len(train_steps(metrics)) == facts["step_records"] == 139
    run = RunData.load(store, "r")
    assert run.resolve("loss") == "loss_q"  # LossPi (the actor's -Q) is signed: the critic is the loss


def test_jsonl_mode_eval_records_and_epoch_restarts_without_a_step_key(tmp_path, store):
    rows = [{"loss": 9.0, "mode": "eval", "epoch": None}]
    for _run in range(2):
        rows += [{"loss": 5.0 - e, "time": 0.1, "mode": "opt", "epoch": e} for e in range(3)]
        rows += [{"loss": 2.5, "mae_e": 1.0, "mode": "eval", "epoch": 2}]
    metrics, _, _ = ingest(store, write(tmp_path, "mace_train.txt", "\n".join(json.dumps(r) for r in rows) + "\n"))
    train = metrics.filter(pl.col("record").is_not_null() & (pl.col("name") == "loss")).sort("record")
    assert train.height == 6 and train.get_column("attempt").to_list() == [0, 0, 0, 1, 1, 1]
    evals = metrics.filter(pl.col("record").is_null() & pl.col("name").str.ends_with("loss"))
    assert evals.height == 3  # the three `"mode": "eval"` lines are eval records, not training steps


def test_mace_results_file_three_appended_runs(store):
    metrics, _, f, facts = real(store, "mace-solvent-learncurve-train400-jsonl-healthy-3-appended-runs-5400-steps")
    train = metrics.filter(pl.col("record").is_not_null() & (pl.col("name") == "loss"))
    assert train.height == facts["step_records"] == 5400
    assert sorted(train.get_column("attempt").unique().to_list()) == [0, 1, 2]


def test_a_step_printed_by_two_grammars_is_one_record_with_both_lines_values(store):
    # DeepSpeed's `step=17, skipped=0, lr=[1e-06]` line, then diffusion-pipe's own `steps: 17 loss: 0.5994`
    metrics, _, f, facts = real(store, "diffusion-pipe-531-ltx2-lora-loss-nan-from-step18")
    steps = train_steps(metrics)
    assert set(f.format.split("+")) == {"deepspeed", "generic_steps"}
    assert len(steps) == facts["step_records"] == 8 and (steps[0], steps[-1]) == (16, 23)
    assert value(metrics, 17, "loss") == pytest.approx(0.5994) and value(metrics, 17, "lr") == pytest.approx(1e-6)
    assert math.isnan(value(metrics, facts["first_nonfinite_step"], "loss"))


def test_a_later_line_of_the_same_step_adds_the_names_the_first_does_not_print(tmp_path, store):
    text = "step 5 loss 2.0 acc 0.5\nstep 5 loss 9.9 grad_norm 1.2\nstep 6 loss 1.9 acc 0.6\n"
    metrics, _, _ = ingest(store, write(tmp_path, "two_lines.log", text))
    assert train_steps(metrics) == [5, 6]
    assert value(metrics, 5, "loss") == pytest.approx(2.0)  # a name both lines print: the first line's value
    assert value(metrics, 5, "grad_norm") == pytest.approx(1.2)


def test_one_json_record_pasted_in_markdown_bold(store):
    metrics, _, f, facts = real(store, "mmrotate-rotated-ld-5-distill-official-teacher-loss-nan-iter50")
    assert f.format == "jsonl_metrics" and train_steps(metrics) == [50] and facts["step_records"] == 1
    assert math.isnan(value(metrics, 50, "loss")) and math.isnan(value(metrics, 50, "grad_norm"))


def test_keras_rl_interval_bars_without_a_loss_are_progress_not_records(store):
    metrics, _, _, facts = real(store, "keras-rl-37-cdqn-pendulum-loss-and-q-diverge-not-learning")
    loss = metrics.filter((pl.col("name") == "loss") & pl.col("record").is_not_null()).sort("record")
    assert len(train_steps(metrics)) == facts["step_records"] == 4
    assert loss.get_column("value").to_list() == pytest.approx([5.522, 39.408, 100.004, 199.980])
