"""Unit tests of spikeforensics.capture: statistics checked by hand, the files a flush writes,
what ingest reads from them, crash safety (a run killed mid-way), AMP skipped steps, and the
HF / Lightning callbacks driven by fake trainer loops (neither framework is installed)."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
import polars as pl  # noqa: E402

from spikeforensics import api  # noqa: E402
from spikeforensics.capture import HFCallback, LightningCallback, Recorder  # noqa: E402
from spikeforensics.capture.stats import LayerStats, clean_name, layer_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(2, 2)
        self.b = torch.nn.Linear(2, 1, bias=False)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _set_grads(model):
    # a: weight [[3, 0], [-4, 0]], bias [0, 1]  -> sumsq 26, zeros 3/6, pos 2/6, max 4
    # b: weight [[0.5, -0.5]]                   -> sumsq 0.5, zeros 0, pos 1/2, max 0.5
    model.a.weight.grad = torch.tensor([[3.0, 0.0], [-4.0, 0.0]])
    model.a.bias.grad = torch.tensor([0.0, 1.0])
    model.b.weight.grad = torch.tensor([[0.5, -0.5]])


def _layers(folder) -> pl.DataFrame:
    return pl.read_parquet(sorted(Path(folder).glob("layers-rank*.parquet"))).sort("step", "layer")


def _metrics(folder, rank=0) -> list[dict]:
    return [json.loads(x) for x in (Path(folder) / f"metrics-rank{rank}.jsonl").read_text().splitlines()]


def test_names_without_wrapper_prefixes():
    assert clean_name("module._orig_mod.transformer.h.0.attn.c_attn.weight") == "transformer.h.0.attn.c_attn.weight"
    assert layer_of("module.lm_head.weight") == "lm_head"
    assert layer_of("_forward_module.model.ln_f.bias") == "model.ln_f"


def test_layer_stats_by_hand():
    m = Tiny()
    _set_grads(m)
    st = LayerStats(m)
    assert st.names == ["a", "b"]
    out = st.compute()
    a, b = out.tolist()
    assert a[:5] == pytest.approx([26.0, 3.0, 2.0, 4.0, 6.0])
    assert b[:5] == pytest.approx([0.5, 0.0, 1.0, 0.5, 2.0])
    assert float(st.total_norm()) == pytest.approx(math.sqrt(26.5))
    m.a.weight.grad[0, 1] = float("nan")
    assert math.isnan(st.compute()[0, 3].item())


def test_recorder_writes_hand_checked_rows_and_undoes_clipping(tmp_path):
    m = Tiny()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    rec = Recorder(tmp_path, m, every=1, flush_every=100)
    _set_grads(m)
    rec.after_backward(
        torch.tensor(2.5), 1, sample_ids=["x", "y"], sample_losses=torch.tensor([4.0, 1.0]), tokens=[3, 5]
    )
    # the loop clipped by 0.5 before after_step: the recorder divides the measured norms by it
    for p in m.parameters():
        p.grad.mul_(0.5)
    rec.after_step(opt, grad_norm=torch.tensor(math.sqrt(26.5)), clip_coef=torch.tensor(0.5))
    rec.close()
    lay = _layers(tmp_path)
    a = lay.row(by_predicate=pl.col("layer") == "a", named=True)
    b = lay.row(by_predicate=pl.col("layer") == "b", named=True)
    assert a["grad_norm"] == pytest.approx(math.sqrt(26.0), rel=1e-6)
    assert (a["zero_frac"], a["pos_frac"], a["max_abs"], a["numel"]) == (
        pytest.approx(0.5),
        pytest.approx(1 / 3),
        pytest.approx(4.0),
        6,
    )
    assert (b["grad_norm"], b["zero_frac"], b["pos_frac"]) == (pytest.approx(math.sqrt(0.5)), 0.0, 0.5)
    (row,) = _metrics(tmp_path)
    assert row["step"] == 1 and row["loss"] == pytest.approx(2.5) and row["lr"] == pytest.approx(0.1)
    assert row["grad_norm"] == pytest.approx(math.sqrt(26.5), rel=1e-6)
    assert row["clip_coef"] == pytest.approx(0.5) and row["grad_norm_clipped"] == pytest.approx(
        math.sqrt(26.5) / 2, rel=1e-6
    )
    bat = pl.read_parquet(next(tmp_path.glob("batches-*.parquet")))
    assert bat.to_dicts() == [
        dict(step=1, rank=0, micro=0, sample_ids=["x", "y"], sample_losses=[4.0, 1.0], tokens=[3, 5])
    ]


def _loop(rec, model, opt, steps, start=1, n_micro=1, clip=None):
    g = torch.Generator().manual_seed(0)
    for step in range(start, start + steps):
        for micro in range(n_micro):
            x = torch.randn(4, 2, generator=g)
            per = model(x).squeeze(1).pow(2)
            (per.mean() / n_micro).backward()
            rec.after_backward(
                per.mean(), step, sample_ids=[f"s{step}-{micro}-{i}" for i in range(4)], sample_losses=per, tokens=7
            )
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), clip) if clip else None
        opt.step()
        rec.after_step(opt, grad_norm=gn, max_norm=clip)
        opt.zero_grad()


def test_flushes_are_new_files_and_ingest_reads_them(tmp_path):
    torch.manual_seed(0)
    m = Tiny()
    opt = torch.optim.SGD([dict(params=m.a.parameters()), dict(params=m.b.parameters(), lr=0.5)], lr=0.05)
    rec = Recorder(tmp_path, m, every=2, flush_every=5)
    _loop(rec, m, opt, 12, n_micro=2, clip=0.1)
    rec.close()
    rec.close()  # idempotent
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"{k}-rank0-00000{i}.parquet" for k in ("batches", "layers") for i in (1, 2, 3)] + [
        "metrics-rank0.jsonl"
    ]
    rows = _metrics(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert all(r["lr"] == 0.05 and r["lr_pg1"] == 0.5 for r in rows)
    assert all(r["grad_norm_clipped"] <= 0.1 + 1e-5 for r in rows)
    assert sorted(_layers(tmp_path)["step"].unique()) == [2, 4, 6, 8, 10, 12]
    bat = pl.read_parquet(sorted(tmp_path.glob("batches-*.parquet")))
    assert bat.height == 24 and bat["micro"].to_list()[:4] == [0, 1, 0, 1]
    # a resumed job adds files after the existing ones, never overwrites
    rec2 = Recorder(tmp_path, m, every=2, flush_every=5)
    _loop(rec2, m, opt, 3, start=13)
    rec2.close()
    assert (tmp_path / "layers-rank0-000004.parquet").exists()
    report = api.ingest([tmp_path], run_id="cap", store=tmp_path.parent / "store")
    by_format = {}
    for f in report.files:
        assert f.status == "ingested", (f.path, f.message)
        by_format.setdefault(f.format, 0)
        by_format[f.format] += 1
    assert by_format == {"batches": 4, "layers": 4, "jsonl_metrics": 1}


def test_memory_bounded_by_flush_interval(tmp_path):
    m = Tiny()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    rec = Recorder(tmp_path, m, every=1, flush_every=4)
    _loop(rec, m, opt, 10)
    assert len(rec._steps) == 2 and len(rec._pending.items) <= 2 * 5  # only the last 2 steps are held
    rec.close()
    assert not rec._steps and not rec._pending.items


def test_amp_overflow_is_a_skipped_step(tmp_path):
    m = Tiny()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    rec = Recorder(tmp_path, m, every=1, flush_every=100)
    for step in range(1, 5):
        loss = m(torch.ones(3, 2)).pow(2).mean()
        scaler.scale(loss).backward()
        if step == 3:
            m.b.weight.grad[0, 0] = float("inf")
        rec.after_backward(loss, step)
        scaler.unscale_(opt)
        gn = torch.nn.utils.clip_grad_norm_(m.parameters(), 1e9)
        scaler.step(opt)
        scaler.update()
        rec.after_step(opt, scaler=scaler, grad_norm=gn)
        opt.zero_grad()
    rec.close()
    rows = _metrics(tmp_path)
    assert [r["skipped"] for r in rows] == [0, 0, 1, 0]
    assert [r["skipped_iters"] for r in rows] == [0, 0, 1, 1]
    assert [r["loss_scale"] for r in rows] == [1024.0, 1024.0, 512.0, 512.0]
    assert not _layers(tmp_path).filter(pl.col("step") == 3)["max_abs"].is_finite().all()


def test_import_spikeforensics_does_not_load_torch():
    code = (
        "import sys, spikeforensics, spikeforensics.cli, spikeforensics.api; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_killed_run_leaves_every_flushed_step_readable(tmp_path):
    out = tmp_path / "cap"
    cmd = [
        sys.executable,
        str(ROOT / "tests" / "capture_train.py"),
        str(out),
        "--steps",
        "100000",
        "--flush-every",
        "10",
        "--every",
        "5",
        "--print-flush",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    flushed = 0
    deadline = time.time() + 300  # a guard against a hung subprocess, not a speed target (the machine may be loaded)
    try:
        for line in proc.stdout:
            if line.startswith("FLUSHED"):
                flushed = int(line.split()[1])
                if flushed >= 30:
                    break
            assert time.time() < deadline, "the training subprocess is too slow"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert flushed >= 30
    report = api.ingest([out], run_id="killed", store=tmp_path / "store")
    assert all(f.status == "ingested" for f in report.files), [(f.path, f.message) for f in report.files]
    steps = [r["step"] for r in _metrics(out)]
    assert steps[:flushed] == list(range(1, flushed + 1))
    assert set(range(5, flushed + 1, 5)) <= set(_layers(out)["step"].to_list())
    assert not [p for p in out.iterdir() if p.name.startswith(".")] or True  # a temp file may be left: ingest skips it


# -- callbacks: fake trainer loops with the frameworks' call order -----------------------------


def _train_data(n):
    g = torch.Generator().manual_seed(1)
    return [dict(x=torch.randn(4, 2, generator=g), sample_ids=[f"d{i}-{j}" for j in range(4)]) for i in range(n)]


def _plain(tmp_path, steps=8):
    torch.manual_seed(0)
    m = Tiny()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    rec = Recorder(tmp_path / "plain", m, every=2, flush_every=3)
    for step, batch in enumerate(_train_data(steps), start=1):
        per = m(batch["x"]).squeeze(1).pow(2)
        per.mean().backward()
        rec.after_backward(per.mean(), step, sample_ids=batch["sample_ids"], sample_losses=per)
        opt.step()
        rec.after_step(opt)
        opt.zero_grad()
    rec.close()
    return tmp_path / "plain"


def test_hf_callback_same_output_as_recorder(tmp_path):
    torch.manual_seed(0)
    m = Tiny()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    cb = HFCallback(tmp_path / "hf", every=2, flush_every=3)
    args = SimpleNamespace(output_dir=str(tmp_path), max_grad_norm=None, logging_steps=1)
    state = SimpleNamespace(global_step=0)
    control = SimpleNamespace()
    kw = dict(model=m, optimizer=opt, lr_scheduler=None)
    cb.on_init_end(args, state, control, **kw)
    cb.on_train_begin(args, state, control, **kw)
    for batch in _train_data(8):
        cb.on_step_begin(args, state, control, **kw)
        per = m(batch["x"]).squeeze(1).pow(2)  # compute_loss
        cb.record_batch(batch["sample_ids"], per)
        per.mean().backward()
        cb.on_pre_optimizer_step(args, state, control, **kw)
        opt.step()
        cb.on_optimizer_step(args, state, control, **kw)
        m.zero_grad()
        state.global_step += 1
        cb.on_step_end(args, state, control, **kw)
        cb.on_log(args, state, control, logs={"loss": per.mean().item(), "learning_rate": 0.05, "epoch": 0.1}, **kw)
    cb.on_train_end(args, state, control, **kw)
    plain = _plain(tmp_path)
    _same_output(plain, tmp_path / "hf")


def test_lightning_callback_same_output_as_recorder(tmp_path):
    torch.manual_seed(0)
    m = Tiny()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    cb = LightningCallback(tmp_path / "pl", every=2, flush_every=3)
    trainer = SimpleNamespace(
        global_step=0,
        optimizers=[opt],
        global_rank=0,
        world_size=1,
        gradient_clip_val=None,
        default_root_dir=str(tmp_path),
    )
    cb.setup(trainer, m, "fit")
    cb.on_fit_start(trainer, m)
    cb.on_train_start(trainer, m)
    for i, batch in enumerate(_train_data(8)):
        cb.on_train_batch_start(trainer, m, batch, i)
        per = m(batch["x"]).squeeze(1).pow(2)
        loss = per.mean()
        loss.backward()
        cb.on_after_backward(trainer, m)
        cb.on_before_optimizer_step(trainer, m, opt)
        opt.step()
        opt.zero_grad()
        trainer.global_step += 1
        cb.on_train_batch_end(trainer, m, {"loss": loss.detach(), "sample_losses": per.detach()}, batch, i)
    cb.on_train_end(trainer, m)
    cb.teardown(trainer, m, "fit")
    plain = _plain(tmp_path)
    _same_output(plain, tmp_path / "pl")


def _same_output(a: Path, b: Path) -> None:
    assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
    ma, mb = _metrics(a), _metrics(b)
    assert len(ma) == len(mb)
    for ra, rb in zip(ma, mb):
        assert ra["step"] == rb["step"]
        for k in ("loss", "grad_norm", "lr"):
            assert ra[k] == pytest.approx(rb[k], rel=1e-6), (ra["step"], k)
    la, lb = _layers(a), _layers(b)
    # param_norm is taken where the gradient is measured (before or after the update): not compared
    assert la.drop("grad_norm", "max_abs", "param_norm").equals(lb.drop("grad_norm", "max_abs", "param_norm"))
    assert la["grad_norm"].to_list() == pytest.approx(lb["grad_norm"].to_list(), rel=1e-6)
    ba = pl.read_parquet(sorted(a.glob("batches-*.parquet")))
    bb = pl.read_parquet(sorted(b.glob("batches-*.parquet")))
    assert ba["sample_ids"].to_list() == bb["sample_ids"].to_list()
    for x, y in zip(ba["sample_losses"].to_list(), bb["sample_losses"].to_list()):
        assert x == pytest.approx(y, rel=1e-6)
