"""What sample_logs/real/fresh27 (icefall, Stable-Baselines3's DQN tables) first needed: a rank the logger writes
into its own header (`[train.py:878] (2/4)`), and an epsilon-greedy run's `train/loss` read as the Q-network's TD
loss, whose one-batch blips against moving targets are notes when a run has several."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import polars as pl
from _detect_synth import run_from
from _ingest_helpers import real_case, series

from spikeforensics import api
from spikeforensics.detect import critic_blips, hard_spike
from spikeforensics.ingest._lines import strip_prefixes
from spikeforensics.params import Params

REAL = Path(__file__).resolve().parents[1] / "sample_logs" / "real"
ICEFALL = "icefall-lstm-transducer-ami-4gpu-pruned-loss-warmup-weight-jumps-components-falling-healthy"
DQN = "stable-baselines3-dqn-breakout-console-tables-lr5e-4-healthy-500k-steps"


def test_icefall_lines_keep_the_rank_of_their_logger_header(store):
    metrics, _, _, facts = real_case(store, "fresh27", ICEFALL)
    loss = metrics.filter((pl.col("name") == "loss") & pl.col("record").is_not_null())
    assert loss.height == facts["step_records"] == 320  # 80 steps x 4 ranks, each rank's line its own record
    assert sorted(loss.get_column("rank").unique().to_list()) == [0, 1, 2, 3]


def test_a_logger_header_rank_needs_the_whole_header():
    lines = pl.DataFrame(
        {
            "line": [1, 2],
            "text": [
                "2023-08-25 19:14:58,332 INFO [train.py:878] (2/4) Epoch 1, batch 0, loss[loss=8.1]",
                "step 10 loss 2.3 (1/4 done)",  # a fraction in the message is no rank
            ],
        }
    )
    out = strip_prefixes(lines)
    assert out.get_column("prefix_rank").to_list() == [2, None]
    assert out.get_column("text")[0].startswith("2023-08-25")  # the header stays: its time is read from it


def test_an_epsilon_greedy_table_loss_is_a_td_loss_and_its_blips_are_notes(tmp_path, store):
    metrics, _, f, facts = real_case(store, "fresh27", DQN)
    assert f.format == "sb_table" and len(series(metrics, "td_loss")) == facts["series_records"] == 24
    folder = REAL / "fresh27" / DQN
    api.ingest([folder / n for n in tomllib.loads((folder / "FACTS.toml").read_text())["files"]], "r", tmp_path)
    d = api.diagnose(api.load_run("r", tmp_path))
    assert facts["healthy"] and d["verdict"]["status"] == "healthy"
    assert sum("critic's loss" in n["summary"] for n in d["notes"]) >= 3


def _critic_run(loss: np.ndarray):
    return run_from({"step": np.arange(loss.size) * 100, "critic_loss": loss})


def test_a_lone_critic_blip_stays_an_incident():
    rng = np.random.default_rng(0)
    base = np.geomspace(0.1, 1.0, 200) * np.exp(rng.normal(0, 0.05, 200))
    one = base.copy()
    one[120] *= 6
    found = critic_blips.quiet_critic_blips(hard_spike.detect(_critic_run(one), Params()), _critic_run(one), Params())
    assert [f.severity for f in found if f.peak_step == 12000] == ["critical"]
    many = base.copy()
    for at in (40, 90, 120, 170):
        many[at] *= 6
    run = _critic_run(many)
    found = hard_spike.detect(run, Params())
    blips = [f for f in found if f.facts.get("critic_blip")]
    assert {f.peak_step for f in blips} == {4000, 9000, 12000, 17000} and {f.severity for f in blips} == {"info"}
