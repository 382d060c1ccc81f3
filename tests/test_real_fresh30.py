"""What sample_logs/real/fresh30 (GPT-NeoX fp16 runs, Megatron-LM, GPUMD-NEP, PyMARL under sacred, HF Trainer and its
trainer_state.json, unsloth GRPO) first needed: a PyMARL learner's stats repeated by every runner block are no new
records (`ingest/pymarl.py`), and on a run whose grad-norm tail is known the big quiet spikes among its sparse
recurring ones are that tail too when the loss does not answer them (`blips.recurring`)."""

from __future__ import annotations

import numpy as np
import polars as pl
from _detect_synth import run_from
from _ingest_helpers import REAL, ingest

from spikeforensics import api
from spikeforensics.detect import hard_spike
from spikeforensics.params import Params

P = Params.load()
LINDA_STABLE = "pymarl-linda-qmix-8m-run163-cout-same-config-stable-win-rate-0p9-healthy"
EAGLE = "hf-trainer-state-angelslim-eagle3-draft-head-40k-steps-2000-records-grad-norm-blips-healthy"


def _block(t_env: int, learner: dict[str, float] | None, won: float) -> str:
    pairs = {"battle_won_mean": won, "epsilon": 0.05, **(learner or {}), "return_mean": 10.0 + won}
    cells = [f"{k + ':':<27}{v:.4f}" for k, v in pairs.items()]
    rows = ["\t".join(cells[i : i + 4]) for i in range(0, len(cells), 4)]
    return f"[INFO 13:26:31] my_main Recent Stats | t_env: {t_env:>10} | Episode: {t_env // 30:>8}\n" + "\n".join(rows)


def test_pymarl_learner_stats_repeated_by_runner_blocks_are_not_new_records(tmp_path, store):
    learner = lambda k: {"grad_norm": 1.0 + k, "loss": 0.1 + 0.01 * k, "q_taken_mean": 0.5, "td_error_abs": 0.2}  # noqa: E731
    blocks = [_block(400, None, 0.0)]
    for k in range(4):  # the learner updates every 10,000 env steps, the runner prints every ~400: 25 copies each
        blocks += [_block(10_000 * (k + 1) + 400 * i, learner(k), 0.1 * k) for i in range(25)]
    blocks.append(_block(50_400, {**learner(3), "q_taken_mean": 0.6}, 0.5))  # one stat moved: a new update
    path = tmp_path / "cout.txt"
    path.write_text("\n".join(blocks) + "\n")
    metrics, _, f = ingest(store, path)
    assert f.format == "pymarl"
    per_name = dict(metrics.group_by("name").len().iter_rows())
    assert per_name["td_loss"] == per_name["grad_norm"] == 5  # the four updates and the moved one, not 101
    assert per_name["battle_won_mean"] == 102  # the runner's own stats: every block
    first = metrics.filter(pl.col("name") == "td_loss").sort("step").get_column("step").to_list()
    assert first == [10_000, 20_000, 30_000, 40_000, 50_400]  # each value where it was first printed


def test_linda_stable_run_is_healthy_its_learner_read_once_an_update(tmp_path):
    case = REAL / "fresh30" / LINDA_STABLE
    api.ingest([str(case / "cout.txt")], run_id="r", store=tmp_path)
    run = api.load_run("r", tmp_path)
    diagnosis = api.diagnose(run)
    assert diagnosis["verdict"]["status"] == "healthy"  # was 1,031 drift warnings on a staircase of repeats
    records = diagnosis["verdict"]["coverage"]["series_records"]
    assert 50 < records["loss"] < 200 and records["loss"] == records["grad_norm"]  # of 2,302 blocks


def _tail_run(answer_big: bool) -> tuple:
    """2,000 records (the tail known, short of a long run): a heavy-tailed grad norm with ~30 quiet 3-5x spikes
    (often enough to count as dense), a few 5.5x ones and two big ones (17x, 14x), the loss not moving."""
    rng = np.random.default_rng(30)
    n = 2000
    steps = np.arange(20, 20 * n + 1, 20)
    loss = 4.4 * np.exp(-np.arange(n) / 4000) * (1 + 0.02 * rng.standard_normal(n))
    grad = 4.5 * (1 + 0.1 * rng.standard_normal(n))
    small = rng.choice(np.arange(50, n - 50), 30, replace=False)
    grad[small] *= rng.uniform(3.2, 4.6, 30)
    for at in (230, 530, 1700, 1772, 1800, 1885):
        grad[at] = 4.5 * 5.5
    big = (1118, 1695)
    grad[big[0]], grad[big[1]] = 4.5 * 17.5, 4.5 * 13.8
    if answer_big:
        loss[big[0] + 1 : big[0] + 4] *= 1.6
    return run_from({"step": steps, "loss": loss, "grad_norm": grad}), [int(steps[b]) for b in big]


def test_big_quiet_spikes_among_a_known_tail_are_notes_unless_the_loss_answers():
    run, big = _tail_run(answer_big=False)
    loud = [f for f in hard_spike.detect(run, P) if f.severity != "info"]
    assert loud == []  # the 17x and 14x spikes are the norm's tail like the others: the loss never moved
    run, big = _tail_run(answer_big=True)
    loud = [f for f in hard_spike.detect(run, P) if f.severity != "info"]
    assert any(f.step_start <= big[0] <= f.step_end for f in loud)  # answered: an incident


def test_eagle3_draft_head_run_with_quiet_grad_norm_spikes_is_healthy(tmp_path):
    case = REAL / "fresh30" / EAGLE
    api.ingest([str(case / "trainer_state.json")], run_id="r", store=tmp_path)
    diagnosis = api.diagnose(api.load_run("r", tmp_path))
    assert diagnosis["verdict"]["status"] == "healthy"
    grouped = [n for n in diagnosis["notes"] if "isolated grad-norm blips" in n["summary"]]
    assert grouped and "22360" in grouped[0]["summary"]  # the 17.5x spike is one of the grouped blips
