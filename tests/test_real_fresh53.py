"""What sample_logs/real/fresh52 to fresh54 first needed: a Keras LR range test whose loss ends above its chance-level
start behind a noisy band (detect/divergence.py's past-start arm, tested in test_detect_events.py); a Keras run's
per-epoch loss that jumps 37% for two epochs in its smooth fall (a rebound under 2x); a per-sample diffusion loss
whose 25-record median wanders 2.5x over its low in the early phase (an early rebound by noise); a 32-sample
cross-entropy whose log noise triples as it nears 0 (a drift by noise)."""

from __future__ import annotations

import numpy as np
import polars as pl
from _ingest_helpers import REAL

from spikeforensics import api
from spikeforensics.detect import rebound, soft_drift
from spikeforensics.params import Params


def _warned(path, tmp_path, run_id: str) -> list[dict]:
    api.ingest([str(path)], run_id=run_id, store=tmp_path)
    d = api.diagnose(api.load_run(run_id, tmp_path))
    return [i for i in d["incidents"] if i["severity"] in ("warning", "critical")]


def _track(values: np.ndarray, sigma: float) -> pl.DataFrame:
    return pl.DataFrame({"step": np.arange(1, len(values) + 1), "y": np.log(values), "sigma": sigma})


def test_a_short_moderate_rise_in_a_smooth_fall_is_a_rebound_and_a_warning():
    hp = Params().hard_spike
    fall = 1.9 * np.exp(-np.arange(34) / 35) + 0.1  # 34 per-epoch losses falling ~2% an epoch
    jump = fall.copy()
    jump[24:29] *= [1.37, 1.33, 1.17, 1.09, 1.04]
    got = rebound.rebound_spans(_track(jump, sigma=0.11), hp, window=50)
    assert got.height == 1 and got.item(0, "lo") == 25 and 1.3 <= got.item(0, "ratio") < 2.0
    assert rebound.rebound_spans(_track(fall, sigma=0.11), hp, window=50).height == 0
    # a rise of 1.2x is under the floor; one on a per-batch loss whose residual sigma is its own noise is noise
    small = fall.copy()
    small[24:26] *= 1.2
    assert rebound.rebound_spans(_track(small, sigma=0.11), hp, window=50).height == 0
    noisy = jump * np.exp(np.random.default_rng(2).normal(0, 0.1, 34))
    assert rebound.rebound_spans(_track(noisy, sigma=0.1), hp, window=50).height == 0


def test_real_keras_epoch_loss_jump_is_a_warning_at_its_epoch(tmp_path):
    case = REAL / "fresh54" / "keras-handson-ml3-selu-20-layer-cifar10-train-loss-jump-epoch25-recovers-34-epochs"
    warned = _warned(next(case.glob("*.txt")), tmp_path, "selu")
    assert [(i["kind"], i["severity"], i["peak_step"]) for i in warned] == [("hard_spike", "warning", 25)]


def test_real_healthy_diffusion_and_small_batch_losses_raise_no_drift(tmp_path):
    mitty = REAL / "fresh54" / "lightning-mitty-wan22-ti2v-5b-lora-video-diffusion-20000-records-healthy"
    assert _warned(mitty / "metrics.csv", tmp_path, "mitty") == []
    cloth = REAL / "fresh53" / "custom-pytorch-resnet50-cloth-classifier-wandb-output-healthy-6960-records-30-epochs"
    assert _warned(cloth / "output.log", tmp_path, "cloth") == []


def test_drift_noise_is_the_local_scale_where_the_noise_grows():
    # a log loss whose residual noise triples in its second half: the noise there is the local scale, not the
    # run's (which the first half keeps: the larger of the two)
    rng = np.random.default_rng(5)
    dp = Params().soft_drift

    def noise(y):
        frame = pl.DataFrame(
            {"step": np.arange(len(y)), "attempt": 0, "rank": pl.Series([None] * len(y), dtype=pl.Int32), "pos": 0}
        ).with_columns(pl.Series("y", y))
        return soft_drift._with_noise(soft_drift._prep(frame, dp), dp).get_column("_noise").to_numpy()

    calm = rng.normal(0, 0.25, 3000)
    growing = noise(np.concatenate([calm, rng.normal(0, 0.8, 3000)]))
    assert growing[5000] > 2.8 * noise(calm)[1000]
    assert growing[500] < growing[5000] / 1.5
