"""Runs that differ from the tune runs: other metric sets, sparse or late logs, smaller spikes.

Variants are derived from the tune fixtures (drop columns, scale spikes down, thin the log
cadence) and hand-made runs cover what the fixtures cannot (multi-epoch clean manifests,
large-norm Megatron-like runs with a printed loss scale, early instabilities followed by an
ordinary LR-decay drift of the grad norm).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from _detect_synth import curves, run_from
from conftest import TUNE  # noqa: E402
from conftest import load_tune_run as load

from spikeforensics.attribute import diagnose_run
from spikeforensics.detect import clipping, detect_incidents, hard_spike, recurrence, signals, vanishing
from spikeforensics.ingest import ingest_paths
from spikeforensics.params import Params
from spikeforensics.rundata import RunData
from spikeforensics.store import Store

REAL = Path(__file__).resolve().parent / "data" / "real" / "megatron"
needs_tune = pytest.mark.skipif(not (TUNE / "data_recurring").exists(), reason="no tune fixtures")


@pytest.fixture(scope="module")
def store(tune_store):
    return tune_store


# --- variant builders -------------------------------------------------------------------------


def fresh(run: RunData, **tables) -> RunData:
    return dataclasses.replace(run, **tables, _cache={})


def keep_metrics(run: RunData, names: list[str]) -> RunData:
    """Only these metrics and no per-layer dump (an HF Trainer log: grad_norm, loss, learning_rate)."""
    return fresh(run, metrics=run.metrics.filter(pl.col("name").is_in(names)), layers=run.layers.head(0))


def scale_spike(run: RunData, step: int, name: str, ratio: float, half: int = 25, guard: int = 3) -> RunData:
    """Set `name` at `step` to `ratio` x the median of its neighbours (guard..half steps away)."""
    m = run.metrics
    sel = pl.col("name") == name
    base = m.filter(sel & (pl.col("step") - step).abs().is_between(guard, half)).get_column("value").median()
    return fresh(
        run,
        metrics=m.with_columns(
            pl.when(sel & (pl.col("step") == step)).then(base * ratio).otherwise(pl.col("value")).alias("value")
        ),
    )


def shrink_hits(run: RunData, spec) -> RunData:
    for step, loss_ratio, grad_ratio in spec:
        run = scale_spike(scale_spike(run, step, "loss", loss_ratio), step, "grad_norm", grad_ratio)
    return fresh(run, layers=run.layers.head(0))


def without_sample_losses(run: RunData) -> RunData:
    return fresh(run, batches=run.batches.with_columns(pl.lit(None, dtype=pl.Float64).alias("sample_loss")))


def thin(run: RunData, every: int, start: int) -> RunData:
    keep = (pl.col("step") >= start) & ((pl.col("step") - start) % every == 0)
    return fresh(run, metrics=run.metrics.filter(keep | pl.col("step").is_null()), layers=run.layers.filter(keep))


def hf_like(run: RunData, lr: float) -> RunData:
    """loss + grad_norm (L2 over the layer dump) + a constant LR, no layer dump."""
    grad, _ = run.grad_norm_series()
    loss = run.metrics.filter(pl.col("name") == "loss")
    g = (
        loss.join(grad.select("step", "attempt", pl.col("value").alias("g")), on=["step", "attempt"])
        .with_columns(pl.lit("grad_norm").alias("name"), pl.col("g").alias("value"))
        .drop("g")
    )
    lr_rows = loss.with_columns(pl.lit("lr").alias("name"), pl.lit(lr).alias("value"))
    return fresh(run, metrics=pl.concat([loss, g, lr_rows]), layers=run.layers.head(0))


def incidents_of(diagnosis: dict) -> list[tuple]:
    return [
        (i["kind"], i["step_start"], i["step_end"], i["root_cause"], i["sample_ids"][:5])
        for i in diagnosis["incidents"]
    ]


# --- 1. clip before unscale without threshold or loss scale -------------------------------------


@needs_tune
def test_clip_before_unscale_from_an_hf_metric_set(store):
    run = keep_metrics(load(store, "clip_before_unscale"), ["grad_norm", "loss", "lr"])
    found = [f for f in clipping.detect(run, Params()) if f.severity == "warning"]
    assert [f.facts.get("cause") for f in found] == ["clip_before_unscale"]
    got = incidents_of(diagnose_run(run, Params()))
    assert [(k, rc) for k, _, _, rc, _ in got] == [("clip_rate_anomaly", "clip_misconfigured")], got


def large_norm_run(norm: float, scale: float | None, loss_trend: str = "falls", n: int = 300) -> RunData:
    c = curves(n, seed=5)
    c["grad_norm"] = norm * np.exp(np.random.default_rng(6).normal(0, 0.2, n))
    if loss_trend == "rises":
        c["loss"] = c["loss"][::-1].copy()
    if loss_trend == "nan":
        c["loss"][n // 2] = np.nan
    if scale is not None:
        c["loss_scale"] = np.full(n, scale)
    return run_from(c)


def unscale_causes(run: RunData) -> list:
    return [f.facts.get("cause") for f in clipping.detect(run, Params()) if f.severity != "info"]


def test_scaled_norms_without_loss_scale_and_threshold():
    assert unscale_causes(large_norm_run(6.5e4, None)) == ["clip_before_unscale"]  # 2^16 x ~1
    assert unscale_causes(large_norm_run(2e3, None)) == ["clip_before_unscale"]  # a scale halved to ~2^11
    assert unscale_causes(large_norm_run(6.5e4, None, "rises")) == []  # not training normally: another story
    assert unscale_causes(large_norm_run(6.5e4, None, "nan")) == []
    assert unscale_causes(large_norm_run(50.0, None)) == []  # large, not astronomical


def test_large_norms_with_a_printed_loss_scale():
    # bigscience 104B (tests/data/real/megatron): norms ~1e5 at loss scale 4096 -> ~24x the scale, large in itself
    assert unscale_causes(large_norm_run(1e5, 4096.0)) == []
    # bf16/fp32 Megatron prints `loss scale: 1.0`: nothing was scaled, however large the norm
    assert unscale_causes(large_norm_run(1e5, 1.0)) == []
    # norms about the scale x a normal norm: measured before unscaling
    assert unscale_causes(large_norm_run(1e5, 65536.0)) == ["clip_before_unscale"]


def test_real_104b_excerpts_are_not_clip_before_unscale(tmp_path):
    store = Store(tmp_path)
    for path in sorted(REAL.glob("bigscience_*.log")):
        ingest_paths([path], path.stem, store)
        incidents, _ = detect_incidents(RunData.load(store, path.stem), Params())
        assert not any(f.facts.get("cause") == "clip_before_unscale" for i in incidents for f in i.findings), path.name


# --- 2. small recurring spikes of one bad sample ------------------------------------------------

SMALL = ((70, 1.2, 2.5), (184, 1.15, 2.2), (261, 1.12, 2.0))  # 2-sigma bumps in this batch-4 run
CLEAR_TWO = ((70, 1.0, 1.0), (184, 1.25, 3.0), (261, 1.22, 2.8))  # the first hit gone, two clear ones left
CLEAR_THREE = ((70, 1.25, 3.0), (184, 1.22, 2.8), (261, 1.2, 2.5))
BAD = "repeat-000582"


@needs_tune
@pytest.mark.parametrize(
    "spec,losses,steps",
    [
        pytest.param(
            SMALL,
            True,
            [70, 184, 261],
            marks=pytest.mark.xfail(
                strict=True,
                reason=(
                    "session 5: with the residual scale taken from every residual (not every 10th), these bumps sit at "
                    "1.4-2.8 sigma, under the recurrence test's one bump_z cut (issue 12, left open)"
                ),
            ),
        ),
        (CLEAR_TWO, True, [184, 261]),
        (CLEAR_THREE, False, [70, 184, 261]),
    ],
    ids=["small-with-losses", "two-clear-with-losses", "three-clear-no-losses"],
)
def test_recurring_sample_corroborates_small_bumps(store, spec, losses, steps):
    run = shrink_hits(load(store, "data_recurring"), spec)
    run = run if losses else without_sample_losses(run)
    # alone, none of the shrunk bumps clears the hard-spike bar
    p = Params()
    p.hard_spike.corroborate_min_events = 99
    assert [f for f in hard_spike.detect(run, p) if f.severity != "info"] == []
    got = incidents_of(diagnose_run(run, Params()))
    assert [(k, s, rc) for k, s, _, rc, _ in got] == [("hard_spike", s, "data_outlier") for s in steps], got
    assert all(ids[0] == BAD for *_, ids in got), got


@needs_tune
def test_two_faint_bumps_are_not_enough(store):
    """Two 2-sigma bumps in a batch-4 run with ~35 such bumps: coincidence is too likely to claim data."""
    run = shrink_hits(load(store, "data_recurring"), ((70, 1.0, 1.0), (184, 1.15, 2.2), (261, 1.12, 2.0)))
    assert recurrence.corroborated(run, recurrence.candidates(run, Params()), Params()).height == 0


def epoch_run(
    n_epochs: int = 8,
    per_epoch: int = 50,
    batch: int = 4,
    bad_step: int | None = None,
    seed: int = 0,
    noise: float = 0.04,
    loss_up: float = 1.3,
    grad_up: float = 3.0,
) -> RunData:
    """A multi-epoch run over a small dataset (reshuffled each epoch), per-sample losses in the manifest.

    The sample first trained at `bad_step` is bad: wherever it appears its own loss is 2.5x, the
    step's loss `loss_up` x and its grad norm `grad_up` x."""
    rng = np.random.default_rng(seed)
    n = n_epochs * per_epoch
    c = curves(n, seed=seed + 1, loss_noise=noise, grad_noise=noise * 6)
    ids = np.array([f"doc-{i:04d}" for i in range(per_epoch * batch)])
    rows = []
    bad = None
    for e in range(n_epochs):
        order = rng.permutation(ids)
        if bad_step is not None and e == 0:
            bad = order[(bad_step - 1) * batch]
        for j in range(per_epoch):
            step = e * per_epoch + j + 1
            for _k, sid in enumerate(order[j * batch : (j + 1) * batch]):
                loss = c["loss"][step - 1] * np.exp(rng.normal(0, 0.1))
                if sid == bad:
                    loss *= 2.5
                    c["loss"][step - 1] *= loss_up
                    c["grad_norm"][step - 1] *= grad_up
                rows.append(
                    {
                        "source": "batches.jsonl",
                        "line": step,
                        "step": step,
                        "rank": 0,
                        "micro": 0,
                        "sample_id": sid,
                        "sample_loss": loss,
                        "tokens": 48,
                    }
                )
    return dataclasses.replace(run_from(c), batches=pl.DataFrame(rows), _cache={})


@pytest.mark.parametrize("n_epochs,per_epoch", [(8, 50), (3, 130)])
def test_multi_epoch_clean_run_has_no_corroborated_sample(n_epochs, per_epoch):
    """Noisy small-batch runs repeating every sample each epoch: ~20 bumps, and samples that sit in two
    of them by chance (shown with the share and chance tests switched off), but none corroborated."""
    loose = Params()
    loose.hard_spike.corroborate_chance, loose.hard_spike.corroborate_min_share = 1e9, 0.0
    tempting, bumps = 0, 0
    for seed in (1, 2, 3):
        run = epoch_run(n_epochs=n_epochs, per_epoch=per_epoch, seed=seed, noise=0.08)
        for variant in (run, without_sample_losses(run)):
            cands = recurrence.candidates(variant, Params())
            bumps += cands.get_column("step").n_unique()
            assert recurrence.corroborated(variant, cands, Params()).height == 0
            assert [i for i in detect_incidents(variant, Params())[0] if i.kind == "hard_spike"] == []
        tempting += recurrence.corroborated(without_sample_losses(run), cands, loose).height
    assert bumps >= 20  # chance bumps (~2% of steps at a consistent noise scale) to tempt the recurrence test
    # over 8 epochs, samples in two chance bumps exist: the chance test, not their absence, keeps them out
    # (over 3 epochs a sample is seen 3 times and such coincidences are rare at a consistent noise scale)
    assert tempting >= (1 if n_epochs >= 8 else 0)


def test_multi_epoch_bad_sample_is_found():
    run = epoch_run(n_epochs=3, per_epoch=150, bad_step=120, seed=1)
    bad = run.batches.filter(pl.col("step") == 120).get_column("sample_id")[0]
    culprits = recurrence.corroborated(run, recurrence.candidates(run, Params()), Params())
    assert culprits.get_column("sample_id").to_list() == [bad]
    spikes = [i for i in detect_incidents(run, Params())[0] if i.kind == "hard_spike"]
    assert len(spikes) == 3


def test_faint_bumps_in_both_signals_corroborate_without_sample_losses():
    """A bad sample that lifts its step's loss 1.15x and grad norm 2.2x, in a noisy run without per-sample
    losses (holdout data_recurring: 1.13-1.24x, 2.1-3.2x). Each bump is ~2-3 sigma in one signal, as common
    as the noise's own bumps; both signals rising at once is rare. Over 8 seeds (in several of which the
    early-training trend hides one of the three hits), the loss-and-grad bumps are tied to the sample
    far more often than the same grad bumps alone."""
    found = {1.15: 0, 1.0: 0}
    for seed in range(1, 9):
        for loss_up in found:
            run = without_sample_losses(
                epoch_run(n_epochs=3, per_epoch=150, bad_step=120, seed=seed, noise=0.05, loss_up=loss_up, grad_up=2.2)
            )
            bad = run.batches.filter(pl.col("step") == 120).get_column("sample_id")[0]
            culprits = recurrence.corroborated(run, recurrence.candidates(run, Params()), Params())
            found[loss_up] += bad in culprits.get_column("sample_id").to_list()
    assert found[1.15] >= 4 and found[1.0] <= 1, found
    # per step: agreeing signals add up (Stouffer), a lone signal counts as itself
    run = epoch_run(n_epochs=3, per_epoch=150, bad_step=120, seed=7, noise=0.05, loss_up=1.15, grad_up=2.2)
    scores = dict(recurrence.step_scores(run, Params()).iter_rows())
    zl = dict(signals.with_baseline(run, "loss", Params())[0].select("step", "z").iter_rows())
    zg = dict(signals.with_baseline(run, "grad_norm", Params())[0].select("step", "z").iter_rows())
    for step in (278, 339):  # two of the bad sample's steps
        assert scores[step] == pytest.approx(max(zl[step], zg[step], (max(zl[step], 0) + max(zg[step], 0)) / 2**0.5))
        assert scores[step] > max(zl[step], zg[step])


# --- 3. too-short warmup in late-starting or sparse logs; vanishing needs orders of magnitude ---


def warm_run(start: int, every: int, warmup: int, peak: int = 30, height: float = 2.0, n: int = 1000) -> RunData:
    """The loss rising to `height` x its initial value at `peak` and back, after a `warmup`-step LR warmup,
    logged from step `start` every `every` steps (HF/DeepSpeed metric set: loss, grad_norm, lr)."""
    rng = np.random.default_rng(3)
    c = curves(n, seed=3, warmup=warmup)
    s = c["step"].astype(float)
    bump = 1 + (height - 1) * np.exp(-(((s - peak) / (peak / 2)) ** 2))
    c["loss"] = (4.0 * np.exp(-s / 300) + 2.0) * bump * np.exp(rng.normal(0, 0.02, n))
    c["grad_norm"] = (0.5 + 3 * np.exp(-s / 40)) * bump**2 * np.exp(rng.normal(0, 0.1, n))
    keep = (c["step"] >= start) & ((c["step"] - start) % every == 0)
    return run_from({k: v[keep] for k, v in c.items()})


@pytest.mark.parametrize("warmup", [2, 20, 50])
@pytest.mark.parametrize("start,every", [(1, 1), (5, 1), (5, 5), (10, 2)])
def test_early_rise_in_sparse_or_late_logs_is_lr_schedule(start, every, warmup):
    got = incidents_of(diagnose_run(warm_run(start, every, warmup), Params()))
    assert [(k, s, rc) for k, s, _, rc, _ in got] == [("hard_spike", start, "lr_schedule")], got


@needs_tune
@pytest.mark.parametrize("every,start", [(3, 0), (5, 0), (3, 1)])
def test_warmup_fixture_thinned_to_an_hf_log(store, every, start):
    run = thin(hf_like(load(store, "warmup_too_short"), lr=0.3), every, start)
    got = incidents_of(diagnose_run(run, Params()))
    # the unstable start, then the peak LR's recurring grad-norm spikes (ground truth: 18 of them from step 134)
    assert [(k, s, rc) for k, s, _, rc, _ in got] == [
        ("hard_spike", start, "lr_schedule"),
        ("hard_spike", got[1][1], "lr_too_high"),
    ], got
    assert 134 <= got[1][1] < got[1][2] <= 400


def drift_run(n: int, unstable_frac: float, amp: float) -> RunData:
    """An early instability (`amp` x for the first `unstable_frac`), then a 4.5x LR-decay drift down."""
    c = curves(n, seed=1, warmup=max(2, n // 50))
    t = c["step"] / n
    g = (1 - 0.78 * t) * np.exp(np.random.default_rng(2).normal(0, 0.12, n))
    c["grad_norm"] = np.where(t < unstable_frac, g * amp, g)
    return run_from(c)


@pytest.mark.parametrize("n,frac,amp", [(400, 0.05, 10), (400, 0.25, 10), (100, 0.15, 10), (2000, 0.1, 20)])
def test_norm_calming_after_instability_is_not_vanishing(n, frac, amp):
    assert vanishing.detect(drift_run(n, frac, amp), Params()) == []


def test_orders_of_magnitude_fall_is_vanishing_even_while_loss_falls():
    assert len(vanishing.detect(drift_run(400, 0.3, 300), Params())) == 1


def test_one_order_fall_with_a_stalled_loss_is_vanishing():
    c = curves(600, seed=4)
    t = c["step"] / 600
    c["grad_norm"] = np.where(t < 0.4, 1.0, 0.05) * np.exp(np.random.default_rng(4).normal(0, 0.1, 600))
    c["loss"] = np.where(t < 0.4, c["loss"], c["loss"][240] * (1 + 0.1 * (t - 0.4)))  # stalls, creeps up
    assert len(vanishing.detect(run_from(c), Params())) == 1
