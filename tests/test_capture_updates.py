"""layer_outlier on per-layer update norms (the `update_norm` column that spikeforensics.capture
writes): a layer whose optimizer update per element stands out from the other layers'."""

from __future__ import annotations

import numpy as np
import polars as pl
from _detect_synth import curves, run_from

from spikeforensics.detect import layer_outlier
from spikeforensics.params import Params

NAMES = ["wte", "h.0.ln_1", "h.0.attn", "h.0.mlp", "h.1.ln_1", "h.1.attn", "h.1.mlp", "ln_f", "lm_head"]
NUMEL = {
    "wte": 3072,
    "h.0.ln_1": 96,
    "h.0.attn": 7056,
    "h.0.mlp": 9408,
    "h.1.ln_1": 96,
    "h.1.attn": 7056,
    "h.1.mlp": 9408,
    "ln_f": 96,
    "lm_head": 3072,
}


def update_dump(steps, lr, seed=0, spread=4.0, hot=None, factor=40.0, hot_from=0, with_numel=True):
    """Every 10th step: per layer an Adam-like update (per element ~ lr x a layer constant within
    `spread`, log-normal noise), the parameter norm growing slowly; `hot` gets `factor` x its update
    from `hot_from` on (and its weights grow with it)."""
    rng = np.random.default_rng(seed)
    consts = dict(zip(NAMES, np.exp(np.linspace(-np.log(spread) / 2, np.log(spread) / 2, len(NAMES)))))
    rows = []
    for s, l in zip(steps, lr):
        if s % 10:
            continue
        for name in NAMES:
            n = NUMEL[name]
            per = l * consts[name] * np.exp(rng.normal(0, 0.15))
            pn = np.sqrt(n) * 0.02 * (1 + s / 2000)
            if name == hot and s >= hot_from:
                per *= factor
                pn *= 1 + (s - hot_from) / 100
            rows.append(
                dict(
                    step=int(s),
                    rank=None,
                    layer=name,
                    grad_norm=0.05 * np.exp(rng.normal(0, 0.2)),
                    numel=n if with_numel else None,
                    param_norm=pn,
                    update_norm=per * np.sqrt(n),
                )
            )
    return pl.DataFrame(rows, schema_overrides={"rank": pl.Int64, "numel": pl.Int64})


def _run(**kw):
    c = curves(1000, seed=kw.pop("seed", 0))
    return run_from(c, layers=update_dump(c["step"], c["lr"], **kw))


def _update_findings(run):
    return [f for f in layer_outlier.detect(run, Params()) if "update_ratio" in f.facts]


def test_layer_with_its_own_high_lr_is_named():
    [f] = _update_findings(_run(hot="h.0.attn", factor=40.0, hot_from=400))
    assert f.layer == "h.0.attn" and f.severity == "warning"
    assert f.facts["layers"] == ["h.0.attn"]
    assert 400 <= f.step_start <= 420 and f.step_end >= 990  # the cosine LR reaches 0 at step 1000
    assert 15 < f.facts["update_ratio"] < 80  # ~40x, against the median of layers spread over 4x
    assert f.evidence[0].signal == "layer_update_norm" and f.evidence[0].layer == "h.0.attn"


def test_from_the_first_step_too():
    [f] = _update_findings(_run(hot="h.1.mlp", factor=30.0, hot_from=0))
    assert f.layer == "h.1.mlp" and f.step_start <= 120


def test_healthy_spread_and_moderate_factor_are_quiet():
    for seed in range(3):
        assert _update_findings(_run(seed=seed)) == []
        assert _update_findings(_run(seed=seed, hot="h.0.mlp", factor=3.0, hot_from=200)) == []


def test_needs_records_in_a_row():
    run = _run(hot="h.0.attn", factor=40.0, hot_from=400)
    lay = run.layers.filter(pl.col("step") <= 420)  # only two hot records (400, 410, 420 = three)
    short = run_from(curves(1000, seed=0), layers=lay.filter(pl.col("step") <= 410))
    assert _update_findings(short) == []
    assert len(_update_findings(run_from(curves(1000, seed=0), layers=lay))) == 1


def test_without_numel_uses_update_over_weight_norm():
    # without numel the ratio is update / parameter norm: the hot layer's growing weights shrink it,
    # but at 100x it still stands out
    fs = _update_findings(_run(hot="h.0.attn", factor=100.0, hot_from=400, with_numel=False))
    assert fs and all(f.layer == "h.0.attn" for f in fs) and 400 <= fs[0].step_start <= 420


def test_no_update_norm_no_finding():
    run = _run(hot="h.0.attn", factor=40.0, hot_from=400)
    plain = run_from(
        curves(1000, seed=0), layers=run.layers.with_columns(pl.lit(None, pl.Float64).alias("update_norm"))
    )
    assert _update_findings(plain) == []


# -- the recorder's update norms (torch) ------------------------------------------------------------


def _sgd_run(tmp_path, order: str):
    torch = __import__("pytest").importorskip("torch")
    from spikeforensics.capture import Recorder

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    lr = 0.05
    opt = torch.optim.SGD(model.parameters(), lr=lr)  # plain SGD: the update is exactly lr x grad
    rec = Recorder(tmp_path / order, model, every=1, norms_every=2, flush_every=100)
    for step in range(1, 5):
        x = torch.randn(4, 8)
        loss = model(x).pow(2).mean()
        loss.backward()
        if order == "loop":  # plain loop: after_backward before the step
            rec.after_backward(loss, step)
            opt.step()
        else:  # Lightning order: statistics before the step, the loss after it
            rec.capture_grads(step, pre_clip=True)
            opt.step()
            rec.after_backward(loss, step)
        rec.after_step(opt)
        opt.zero_grad(set_to_none=True)
    rec.close()
    return pl.read_parquet(tmp_path / order / "layers-rank0-000001.parquet"), lr


def test_recorder_update_norm_is_the_optimizer_step(tmp_path):
    for order in ("loop", "lightning"):
        lay, lr = _sgd_run(tmp_path, order)
        assert lay.get_column("step").unique().sort().to_list() == [1, 2, 3, 4]
        with_norms = lay.filter(pl.col("update_norm").is_not_null())
        assert with_norms.get_column("step").unique().sort().to_list() == [2, 4], order
        assert lay.filter(pl.col("step").is_in([1, 3])).get_column("param_norm").null_count() == lay.height // 2
        # SGD without momentum moves each layer by lr x its gradient
        np.testing.assert_allclose(
            with_norms.get_column("update_norm").to_numpy(),
            lr * with_norms.get_column("grad_norm").to_numpy(),
            rtol=1e-4,
        )
        assert (with_norms.get_column("param_norm") > 0).all()


def test_layer_stats_nan_elements_are_neither_zero_nor_positive():
    torch = __import__("pytest").importorskip("torch")
    from spikeforensics.capture.stats import LayerStats

    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.Linear(30, 20), torch.nn.Linear(20, 5))
    for k, p in enumerate(m.parameters()):
        g = torch.randn_like(p)
        g[torch.rand_like(p) < 0.3] = 0
        if k == 0:
            g[torch.rand_like(p) < 0.2] = float("nan")
            g.view(-1)[:3] = float("inf")
        if k == 3:
            g[:] = float("nan")  # an all-NaN bias: not "all zeros"
        p.grad = g
    st = LayerStats(m)
    out = st.compute()
    for i, name in enumerate(st.names):
        gs = [p.grad for n, p in m.named_parameters() if n.startswith(name + ".")]
        assert out[i, 1].item() == sum(int((g == 0).sum()) for g in gs), name
        assert out[i, 2].item() == sum(int((g > 0).sum()) for g in gs), name
        assert torch.isnan(out[i, 3]) and torch.isnan(out[i, 0])
