"""Readers and judgements first met in sample_logs/real/fresh12: d3rlpy's one-metric-per-file CSVs
(named_csv), an RL critic's settling climb, a patched mlx-lm trainer's extra fields and its guard's
skipped-batch line, and two custom-loop shapes of the catch-all grammar (a bare count before `Loss :`,
a record in angle brackets with a generator's total loss)."""

from __future__ import annotations

import math

import pytest
from _ingest_helpers import ingest, real_case, series, train_steps, value, write

from spikeforensics import api
from spikeforensics.rundata import RunData


def real(store, name):
    return real_case(store, "fresh12", name)


def warnings_plus(store):
    diagnosis = api.diagnose(api.load_run("r", store))
    return diagnosis, [i for i in diagnosis["incidents"] if i["severity"] in ("warning", "critical")]


def test_d3rlpy_metric_file_is_named_by_its_stem(store):
    metrics, _, f, facts = real(store, "d3rlpy-benchmarks-1-cql-walker2d-random-critic-loss-diverges-to-2e11-epoch350")
    steps = train_steps(metrics)
    assert f.format == "named_csv" and len(steps) == facts["step_records"] == 500
    assert steps[0] == facts["first_step"] == 1000 and steps[-1] == facts["last_step"]
    # `1,1000,28.409847`: epoch, step, the epoch's mean critic loss
    assert value(metrics, 1000, "critic_loss") == pytest.approx(28.409847) and value(metrics, 1000, "epoch") == 1
    # the climb to 2.65e11 is found where it leaves its band for good (FACTS: divergence from 350,000)
    diagnosis, found = warnings_plus(store)
    assert diagnosis["verdict"]["status"] == "unstable"
    assert any(i["step_start"] <= 376_000 and i["step_end"] >= 350_000 for i in found)


def test_two_column_file_needs_a_metric_name(tmp_path, store):
    rows = "".join(f"{i * 100},{2.5 - i * 0.01:.4f}\n" for i in range(1, 6)) + "600,nan\n"
    metrics, _, f = ingest(store, write(tmp_path, "loss.csv", rows))
    assert f.format == "named_csv" and train_steps(metrics) == [100, 200, 300, 400, 500, 600]
    assert math.isnan(series(metrics, "loss")[-1][1])
    # two bare numbers per line in a file whose name names no metric are no series of ours
    from spikeforensics.ingest import named_csv
    from spikeforensics.ingest.base import SniffSample

    lines = rows.splitlines()
    assert named_csv.sniff(SniffSample(tmp_path / "points.csv", rows, lines)) == 0.0
    assert named_csv.sniff(SniffSample(tmp_path / "loss.csv", rows, lines)) > 0.5


def test_a_bad_row_costs_that_row(tmp_path, store):
    rows = "1,1000,3.2\n2,2000,3.1\n2,oops,3.0\n3,3000,3.0\n4,4000,2.9\n"
    metrics, _, f = ingest(store, write(tmp_path, "critic_loss.csv", rows))
    assert train_steps(metrics) == [1000, 2000, 3000, 4000] and f.unparsed == 1
    assert f.unparsed_examples[0][0] == 3  # the file's line 3


def test_critic_loss_climbing_while_its_targets_bootstrap_is_no_spike(store):
    # IQL's critic: 65 -> 218 over its first 8 epoch means while the TD targets fill in, then a slow decline;
    # the 1.17x crest at the top of that climb is the run settling (FACTS: healthy)
    _, _, _, facts = real(store, "d3rlpy-benchmarks-iql-walker2d-random-critic-loss-healthy-500-epochs")
    diagnosis, found = warnings_plus(store)
    assert facts["healthy"] and diagnosis["verdict"]["status"] == "healthy" and not found


def test_a_critic_settling_crest_is_kept_for_a_non_critic_loss(tmp_path, store):
    # the same shape under a plain `loss` name: the initial value is a reference, and 3x above it is no settling
    shape = [65.2, 139.0, 183.0, 200.0, 208.0, 212.0, 216.0, 218.1, 214.4, 205.0] + [180.0 - i * 0.3 for i in range(90)]
    for name in ("critic_loss.csv", "loss.csv"):
        run = f"r_{name[:-4]}"
        rows = "".join(f"{i + 1},{(i + 1) * 1000},{v}\n" for i, v in enumerate(shape))
        ingest(store, write(tmp_path, name, rows), run=run)
    critic = api.diagnose(api.load_run("r_critic_loss", store))
    plain = api.diagnose(api.load_run("r_loss", store))
    assert critic["verdict"]["status"] == "healthy" and plain["verdict"]["status"] != "healthy"


def test_starts_at_start_takes_one_logging_interval():
    import polars as pl

    def run(steps):
        n = len(steps)
        metrics = pl.DataFrame(
            {
                "source": ["f"] * n,
                "line": list(range(1, n + 1)),
                "step": steps,
                "record": list(range(n)),
                "attempt": [0] * n,
                "rank": pl.Series([None] * n, dtype=pl.Int32),
                "name": ["loss"] * n,
                "value": [1.0] * n,
            }
        )
        return RunData.from_frames(metrics=metrics)

    assert run([1000, 2000, 3000]).starts_at_start(50)  # d3rlpy's first epoch mean
    assert run([10, 20, 30]).starts_at_start(50)
    assert not run([7000, 7100, 7200]).starts_at_start(50)  # an excerpt from mid-training


def test_angle_bracket_record_reads_its_last_value_and_the_generator_total_is_the_loss(store):
    metrics, _, f, _ = real(store, "academicodec-27-encodec-24k-total-loss-g-oscillates-42-to-55226-iter7560-7590")
    # `<epoch:8, iter:7560, total_loss_g:55226.8750, ..., loss_d:0.5080>, d_weight: 1.0000`
    assert train_steps(metrics) == [7560, 7570, 7580, 7590]
    assert value(metrics, 7560, "loss_d") == pytest.approx(0.508) and value(metrics, 7560, "d_weight") == 1.0
    run = api.load_run("r", store)
    assert run.resolve("loss") == "total_loss_g"  # the total before its terms (feat_loss, rec_loss, adv_g_loss)


def test_braced_record_closes_its_last_value(tmp_path, store):
    text = "".join(f"step {i}: {{loss: {2.0 - i * 0.1:.2f}, lr: 0.001}}\n" for i in range(1, 5))
    metrics, _, _ = ingest(store, write(tmp_path, "braces.log", text))
    assert value(metrics, 2, "loss") == pytest.approx(1.8) and value(metrics, 2, "lr") == pytest.approx(0.001)


def test_bare_count_before_the_loss_is_the_step(store):
    metrics, _, f, facts = real(store, "audio-diffusion-pytorch-35-loss-0-05-to-1-7e10-epoch1338-partial-recovery")
    steps = train_steps(metrics)
    assert steps[0] == facts["first_step"] == 1328 and steps[-1] == facts["last_step"] == 1343
    assert value(metrics, 1338, "loss") == pytest.approx(17436217794.0833)
    diagnosis, found = warnings_plus(store)
    assert any(i["step_start"] <= 1338 <= i["step_end"] for i in found)


def test_a_count_that_repeats_is_no_step(tmp_path, store):
    # `print(epoch, "Loss :", loss)` per batch: the same count on several lines is the epoch, no record counter
    text = "".join(f"{1 + i // 3} Loss : {2.0 - i * 0.05:.4f}\n" for i in range(9))
    metrics, _, _ = ingest(store, write(tmp_path, "repeat.log", text))
    assert set(train_steps(metrics)) == {None} and len(series(metrics, "loss")) == 9


def test_mlx_lm_patched_fields_and_the_guards_skip(store):
    metrics, events, f, facts = real(store, "mlx-lm-1658-qwen3-lora-grad-norm-5044-then-1e8-nan-batch-skipped-iter40")
    assert f.format == "mlx_lm" and train_steps(metrics) == [10, 20, 30, 40, 50] == list(range(10, 51, 10))
    # `Iter 30: Train loss 1.4008, LR 1.450e-06, grad_norm 5044.074,     skipped 0`
    assert value(metrics, 30, "grad_norm") == pytest.approx(5044.074) and value(metrics, 30, "lr") == 1.45e-6
    assert value(metrics, 40, "skipped") == 1
    # `Iter 40: SKIPPED non-finite batch (loss 1.23..., norm nan) -- weights untouched`: a skipped step, no record
    skip = events.filter(events["kind"] == "nan")
    assert skip.height == 1 and '"skipped": true' in skip.item(0, "detail") and skip.item(0, "line") == 4
    # a grad norm the trainer skipped, the loss finite throughout: the fp16/bf16 scaler's signature first
    diagnosis, _ = warnings_plus(store)
    assert diagnosis["verdict"]["root_cause"] == "fp16_overflow"


def test_mlx_lm_upstream_fields_keep_their_names(tmp_path, store):
    text = (
        "Iter 10: Train loss 2.363, Learning Rate 1.000e-05, It/sec 1.022, Tokens/sec 88.083, "
        "Trained Tokens 862, Peak mem 9.707 GB\n"
        "Iter 20: Train loss 2.101, Learning Rate 1.000e-05, It/sec 1.010, Tokens/sec 87.5, "
        "Trained Tokens 1724, Peak mem 9.707 GB\n"
    )
    metrics, _, f = ingest(store, write(tmp_path, "mlx.log", text))
    assert f.format == "mlx_lm" and value(metrics, 20, "consumed_tokens") == 1724
    assert value(metrics, 10, "peak_mem_gb") == pytest.approx(9.707) and value(metrics, 10, "lr") == 1e-5
    assert value(metrics, 10, "it_per_s") == pytest.approx(1.022) and value(metrics, 10, "tokens_per_s") == 88.083
