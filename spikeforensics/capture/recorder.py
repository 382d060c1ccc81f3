"""`Recorder`: what a training loop hands over, buffered on the device, flushed to files.

A plain PyTorch loop adds three calls::

    rec = Recorder("runs/x/capture", model, every=10)          # per-layer stats every 10 steps
    ...
        loss.backward()
        rec.after_backward(loss, step, sample_ids=ids, sample_losses=per_sample, tokens=ntok)
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        rec.after_step(optimizer, grad_norm=gn, max_norm=1.0)   # before optimizer.zero_grad()
    rec.close()

What is recorded
- per optimizer step: `loss` (mean of the micro-batch losses given to `after_backward`; under
  torch.distributed the mean over ranks, by one all-reduce per flush), `grad_norm` (pre-clip global
  L2 norm: the one given, else measured), `grad_norm_clipped`, `clip_coef` (min(1, max_norm / norm),
  or the one given, or post/pre measured), `loss_scale` and `skipped` (an overflow step of a
  `torch.amp.GradScaler`: its scale went down, or the unscaled norm is not finite), `skipped_iters`
  (running count), the learning rate of every param group (`lr`, `lr_pg1`, ...);
- every `every` steps, per layer (module that owns parameters): gradient L2 norm, share of exact
  zeros, share of elements > 0, max |element| and element count, of the unscaled gradient before
  clipping (a gradient measured after clipping is divided by the clip coefficient); every
  `norms_every` steps (a multiple of `every`, >= 10 steps apart by default) also the parameter L2
  norm and the update L2 norm (how far the optimizer step moved the layer's parameters: a copy of
  the parameters is taken before the step, on those steps only);
- per micro-batch and rank: the sample IDs, and per-sample losses and token counts when given.

How: values stay tensors on their device (no `.item()`, no host sync per step) and are copied to
the host once per flush (every `flush_every` steps, and at `close()`), then written as new files by
`CaptureWriter` (see `writer.py` for names and columns). Memory is bounded by `flush_every`.
Rank and world size come from torch.distributed when it is initialised. Under torch.distributed
every rank must flush at the same steps (the loss all-reduce): call the recorder on every rank.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict

import numpy as np
import pyarrow as pa
import torch

from spikeforensics.capture.stats import LayerStats
from spikeforensics.capture.writer import BATCH_SCHEMA, LAYER_SCHEMA, CaptureWriter

_FIELDS = ("loss", "grad_norm", "grad_norm_clipped", "clip_coef", "loss_scale", "skipped")


def dist_rank_world() -> tuple[int, int]:
    """(rank, world size) from torch.distributed when it is initialised, else (0, 1)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:  # a build without distributed support
        pass
    return 0, 1


def _detach(x):
    """A tensor as a detached float32 scalar tensor (same device); numbers as floats."""
    if isinstance(x, torch.Tensor):
        return x.detach().reshape(()).float() if x.numel() == 1 else x.detach().float()
    return None if x is None else float(x)


def _ids(sample_ids) -> list[str]:
    if isinstance(sample_ids, torch.Tensor):
        sample_ids = sample_ids.tolist()
    return [str(s) for s in sample_ids]


class _Pending:
    """Device tensors waiting for the flush's single copy to the host."""

    def __init__(self):
        self.items: list[torch.Tensor] = []

    def add(self, t: torch.Tensor) -> int:
        self.items.append(t.reshape(-1))
        return len(self.items) - 1

    def resolve(self) -> list[list[float]]:
        """Every added tensor as a list of floats: one `cat` and one copy per device."""
        out: list[list[float] | None] = [None] * len(self.items)
        by_device: dict[torch.device, list[int]] = defaultdict(list)
        for i, t in enumerate(self.items):
            by_device[t.device].append(i)
        for idx in by_device.values():
            parts = [self.items[i].float() for i in idx]
            flat = torch.cat(parts).cpu().tolist() if parts else []
            pos = 0
            for i, p in zip(idx, parts):
                out[i] = flat[pos : pos + p.numel()]
                pos += p.numel()
        self.items = []
        return out  # type: ignore[return-value]


class Recorder:
    """Records a training run for `spikeforensics diagnose` (see the module docstring).

    Parameters: `out_dir` (the capture folder, shared by all ranks), `model` (the module whose
    parameters are measured; a DDP / compiled wrapper is fine), `every` (per-layer statistics every
    N optimizer steps; 0 turns them off), `flush_every` (steps between flushes), `rank` /
    `world_size` (default: torch.distributed, else 0 / 1), `metrics_ranks` (ranks that write the
    step metrics; default rank 0), `reduce_loss` (average the loss over ranks at each flush),
    `include` (a predicate on layer names), `param_norm` (also record parameter and update norms),
    `norms_every` (steps between parameter / update norms; default: the first multiple of `every`
    that is >= 10; it is rounded up to a multiple of `every`), `fsync` (fsync every file written: survives a machine crash,
    not only a killed process; slower).
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        model: torch.nn.Module,
        every: int = 10,
        flush_every: int = 50,
        rank: int | None = None,
        world_size: int | None = None,
        metrics_ranks=(0,),
        reduce_loss: bool = True,
        include=None,
        param_norm: bool = True,
        norms_every: int | None = None,
        auto_flush: bool = True,
        fsync: bool = False,
    ):
        r, w = dist_rank_world()
        self.rank = r if rank is None else rank
        self.world_size = w if world_size is None else world_size
        self.every = int(every)
        self.param_norm = param_norm
        base = max(1, self.every)
        want = max(1, int(norms_every)) if norms_every is not None else 10
        self.norms_every = base * -(-want // base)  # rounded up to a multiple of `every`
        self.flush_every = max(1, int(flush_every))
        self.auto_flush = auto_flush
        self.reduce_loss = reduce_loss and self.world_size > 1 and dist_rank_world()[1] > 1
        self.layers = LayerStats(model, include=include, param_norm=param_norm)
        self.writer = CaptureWriter(out_dir, self.rank, write_metrics=self.rank in tuple(metrics_ranks), fsync=fsync)
        self.out_dir = self.writer.dir
        self.files: list[str] = []  # Parquet files written so far
        self._pending = _Pending()
        self._steps: list[dict] = []  # closed steps of this flush
        self._layer_rows: list[tuple] = []  # (step index in _steps or None, step, pending handle, pre_clip)
        self._batches: list[dict] = []
        self._skipped_total = 0
        self._skip_handles: list[int] = []
        self._prev_scale = None
        self._since_flush = 0
        self._closed = False
        self._open: dict | None = None  # the step being recorded

    # -- the step being recorded ------------------------------------------------------------
    def _begin(self, step: int | None) -> dict:
        if self._open is not None and (step is None or self._open["step"] == step):
            return self._open
        if self._open is not None:
            self.after_step()  # the loop did not call after_step: close the open step as it is
        if step is None:
            step = (self._steps[-1]["step"] + 1) if self._steps else 1
        self._open = dict(step=int(step), loss_sum=None, n_loss=0, micro=0, grads=False, values={})
        return self._open

    def _norms_step(self, step: int) -> bool:
        return self.param_norm and self.every > 0 and step % self.norms_every == 0

    def _snapshot(self, st: dict) -> None:
        """Before the optimizer step of a norms step: a copy of the parameters (for the update norm)."""
        if "snap" not in st and not st["grads"] and self._norms_step(st["step"]):
            st["snap"] = self.layers.snapshot()

    def after_backward(
        self,
        loss=None,
        step: int | None = None,
        sample_ids=None,
        sample_losses=None,
        tokens=None,
        micro: int | None = None,
    ) -> None:
        """Once per micro-batch, after `backward()`: its loss (the micro-batch's own, not divided
        by the accumulation steps), the optimizer step it belongs to, and optionally its sample IDs,
        per-sample losses (tensor or list) and token counts (per sample, or one total)."""
        st = self._begin(step)
        self._snapshot(st)
        if loss is not None:
            v = _detach(loss)
            st["loss_sum"] = v if st["loss_sum"] is None else st["loss_sum"] + v
            st["n_loss"] += 1
        if sample_ids is not None:
            self.record_batch(sample_ids, sample_losses, tokens, micro=micro, step=st["step"])
        st["micro"] += 1

    def record_batch(
        self, sample_ids, sample_losses=None, tokens=None, micro: int | None = None, step: int | None = None
    ) -> None:
        """The samples of one micro-batch (for loops or callbacks that see the batch elsewhere)."""
        st = self._begin(step)
        ids = _ids(sample_ids)
        row = dict(
            step=st["step"], micro=st["micro"] if micro is None else int(micro), ids=ids, losses=None, tokens=None
        )
        if sample_losses is not None:
            row["losses"] = (
                ("t", self._pending.add(sample_losses.detach()))
                if isinstance(sample_losses, torch.Tensor)
                else ("v", [float(x) for x in sample_losses])
            )
        if tokens is not None:
            if isinstance(tokens, torch.Tensor):
                row["tokens"] = ("t", self._pending.add(tokens.detach()))
            elif isinstance(tokens, (int, float)):
                row["tokens"] = ("v", [int(tokens)])  # one total: ingest shares it among the samples
            else:
                row["tokens"] = ("v", [int(x) for x in tokens])
        self._batches.append(row)

    def capture_grads(
        self, step: int | None = None, pre_clip: bool = True, measure: bool = True, _after_update: bool = False
    ) -> None:
        """Per-layer statistics of the gradients as they are now (call it after unscaling and
        before clipping for exact pre-clip values, before the optimizer step; `after_step` calls
        it when it was not called, with `pre_clip=False`). Also measures the global norm, used
        when none is given."""
        st = self._begin(step)
        if st["grads"]:
            return
        if not _after_update:
            self._snapshot(st)
        st["grads"] = True
        st["measured_pre_clip"] = pre_clip
        st["measured"] = self.layers.total_norm() if measure else None
        if self.every > 0 and st["step"] % self.every == 0:
            stats = self.layers.compute(param_norm=self._norms_step(st["step"]))
            if stats is not None:
                st["layer_handle"] = self._pending.add(stats)

    def set_step_values(self, step: int, **values) -> None:
        """Values known later than the step (a callback's `on_log`): `loss`, `grad_norm`, ... of a
        step not yet flushed. Unknown names are written as extra metrics."""
        for rec in (*self._steps, *([self._open] if self._open else [])):
            if rec["step"] == step:
                rec["values"].update({k: _detach(v) for k, v in values.items() if v is not None})

    def after_step(
        self,
        optimizer=None,
        scaler=None,
        grad_norm=None,
        clip_coef=None,
        max_norm: float | None = None,
        loss=None,
        step: int | None = None,
    ) -> None:
        """After the optimizer step (and `scaler.update()`), before `zero_grad()`: closes the step.

        `grad_norm` is the pre-clip global norm (what `clip_grad_norm_` returns); `clip_coef` or
        `max_norm` tells the clipping; without them the coefficient is measured (post / pre)."""
        st = self._begin(step)
        if not st["grads"]:
            # the global norm is measured only when the loop gives no norm or no clipping
            need = grad_norm is None and "grad_norm" not in st["values"] or (clip_coef is None and max_norm is None)
            self.capture_grads(st["step"], pre_clip=False, measure=need, _after_update=True)
        snap = st.pop("snap", None)
        if snap is not None:
            st["update_handle"] = self._pending.add(self.layers.update_sumsq(snap))
            del snap
        vals = st["values"]
        if loss is not None:
            vals.setdefault("loss", _detach(loss))
        elif st["loss_sum"] is not None:
            vals.setdefault("loss", st["loss_sum"] / st["n_loss"] if st["n_loss"] > 1 else st["loss_sum"])
        measured = st.get("measured")
        pre = _detach(grad_norm) if grad_norm is not None else vals.get("grad_norm")
        coef = _detach(clip_coef) if clip_coef is not None else None
        if pre is None and measured is not None:
            pre = measured if (st["measured_pre_clip"] or coef is None) else measured / coef
        if coef is None and pre is not None:
            if max_norm is not None and max_norm > 0:
                coef = (
                    torch.clamp(max_norm / (pre + 1e-6), max=1.0)
                    if isinstance(pre, torch.Tensor)
                    else min(1.0, max_norm / (pre + 1e-6))
                )
            elif measured is not None and not st["measured_pre_clip"]:
                coef = (
                    torch.clamp(measured / pre, max=1.0)
                    if isinstance(pre, torch.Tensor) or isinstance(measured, torch.Tensor)
                    else min(1.0, measured / pre)
                )
        if pre is not None:
            vals.setdefault("grad_norm", pre)
        if coef is not None:
            vals["clip_coef"] = coef
            if pre is not None:
                vals.setdefault("grad_norm_clipped", pre * coef)
        if scaler is not None:
            self._scaler_values(st, scaler, pre)
        if optimizer is not None:
            for i, g in enumerate(optimizer.param_groups):
                lr = g.get("lr")
                if lr is not None:
                    vals["lr" if i == 0 else f"lr_pg{i}"] = float(lr)
        self._steps.append(st)
        self._open = None
        self._since_flush += 1
        if self.auto_flush and self._since_flush >= self.flush_every:
            self.flush()

    def _scaler_values(self, st: dict, scaler, pre) -> None:
        scale = getattr(scaler, "_scale", None)
        if isinstance(scale, torch.Tensor):
            scale = scale.detach().reshape(()).float().clone()  # update() changes it in place
        else:
            try:
                scale = float(scaler.get_scale())
            except Exception:
                return
        vals = st["values"]
        vals["loss_scale"] = scale
        skipped = None
        if self._prev_scale is not None:
            skipped = scale < self._prev_scale
        if isinstance(pre, torch.Tensor):
            bad = ~torch.isfinite(pre)
            skipped = bad if skipped is None else (torch.as_tensor(skipped, device=bad.device) | bad)
        elif pre is not None and not math.isfinite(pre):
            skipped = True
        if skipped is not None:
            vals["skipped"] = skipped.float() if isinstance(skipped, torch.Tensor) else float(skipped)
        self._prev_scale = scale

    # -- flushing ---------------------------------------------------------------------------
    def flush(self) -> None:
        """Copy the buffered values of the closed steps to the host (once) and write them as
        new files. A step still open (between `after_backward` and `after_step`) stays buffered."""
        steps, self._steps = self._steps, []
        open_step = self._open["step"] if self._open is not None else None
        batches = [b for b in self._batches if b["step"] != open_step]
        kept = [b for b in self._batches if b["step"] == open_step]
        self._since_flush = 0
        reduced = self._reduced_losses(steps) if self.reduce_loss else None
        keys = []
        for st in steps:
            for k, v in st["values"].items():
                if isinstance(v, torch.Tensor):
                    keys.append((st, k, self._pending.add(v)))
        # tensors of the open step survive the copy: taken out, put back after it
        carry = []
        for b in kept:
            for key in ("losses", "tokens"):
                if b[key] is not None and b[key][0] == "t":
                    carry.append((b, key, self._pending.items[b[key][1]]))
        if self._open is not None and "layer_handle" in self._open:
            carry.append((self._open, "layer_handle", self._pending.items[self._open["layer_handle"]]))
        host = self._pending.resolve()
        for obj, key, t in carry:
            h = self._pending.add(t)
            obj[key] = h if key == "layer_handle" else ("t", h)
        self._batches = kept
        for st, k, h in keys:
            v = host[h]
            st["values"][k] = v[0] if len(v) == 1 else v
        if reduced is not None:
            for st, v in zip(steps, reduced):
                if v is not None:
                    st["values"]["loss"] = v
        self._write_metrics(steps)
        self._write_layers(steps, host)
        self._write_batches(batches, host)

    def _reduced_losses(self, steps: list[dict]) -> list[float | None]:
        """Each step's loss averaged over ranks: one all-reduce of the flush's losses."""
        import torch.distributed as dist

        losses = [st["values"].get("loss") for st in steps]
        dev = next((v.device for v in losses if isinstance(v, torch.Tensor)), None)
        if dev is None:
            dev = self.layers.all_params[0].device if self.layers.all_params else torch.device("cpu")
        vec = (
            torch.stack(
                [
                    v.to(dev)
                    if isinstance(v, torch.Tensor)
                    else torch.tensor(float("nan") if v is None else v, device=dev)
                    for v in losses
                ]
            )
            if losses
            else torch.zeros(0, device=dev)
        )
        try:
            dist.all_reduce(vec)
        except Exception:
            return [None] * len(steps)
        vals = (vec / self.world_size).cpu().tolist()
        return [None if losses[i] is None else vals[i] for i in range(len(steps))]

    def _write_metrics(self, steps: list[dict]) -> None:
        rows = []
        for st in steps:
            v = st["values"]
            row = {"step": st["step"], "rank": self.rank}
            for k in _FIELDS:
                if k in v:
                    row[k] = v[k]
            if "skipped" in v:
                if v["skipped"] and v["skipped"] > 0.5:
                    self._skipped_total += 1
                row["skipped"] = int(v["skipped"] > 0.5)
                row["skipped_iters"] = self._skipped_total
            for k, x in v.items():
                if k not in row:
                    row[k] = x
            rows.append(row)
        self.writer.write_metrics(rows)

    def _write_layers(self, steps: list[dict], host) -> None:
        """The flush's per-layer rows, column-wise with numpy (no Python loop per row)."""
        blocks = []
        n_layers = len(self.layers.names)
        for st in steps:
            h = st.get("layer_handle")
            if h is None:
                continue
            coef = st["values"].get("clip_coef")
            div = 1.0
            if not st.get("measured_pre_clip", True) and isinstance(coef, float) and math.isfinite(coef) and coef > 0:
                div = coef
            upd = host[st["update_handle"]] if "update_handle" in st else [math.nan] * n_layers
            blocks.append((st["step"], div, host[h], upd))
        if not blocks:
            return
        k = len(blocks)
        stats = np.asarray([b[2] for b in blocks], dtype=np.float64).reshape(k * n_layers, 6)
        sumsq, zeros, pos, amax, numel, psumsq = stats.T
        div = np.repeat([b[1] for b in blocks], n_layers)
        usumsq = np.asarray([b[3] for b in blocks], dtype=np.float64).reshape(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            has = numel > 0
            zero_frac = np.where(has, zeros / np.where(has, numel, 1.0), np.nan)
            pos_frac = np.where(has, pos / np.where(has, numel, 1.0), np.nan)
            pnorm, unorm = np.sqrt(psumsq), np.sqrt(usumsq)
        cols = {
            "step": pa.array(np.repeat([b[0] for b in blocks], n_layers), type=pa.int64()),
            "rank": pa.array(np.full(k * n_layers, self.rank), type=pa.int64()),
            "layer": pa.array(self.layers.names * k, type=pa.string()),
            "grad_norm": pa.array(np.sqrt(sumsq) / div, type=pa.float64()),
            "zero_frac": pa.array(zero_frac, type=pa.float64(), mask=~has),
            "pos_frac": pa.array(pos_frac, type=pa.float64(), mask=~has),
            "max_abs": pa.array(amax / div, type=pa.float64()),
            "numel": pa.array(numel.astype(np.int64), type=pa.int64()),
            "param_norm": pa.array(pnorm, type=pa.float64(), mask=np.isnan(pnorm)),
            "update_norm": pa.array(unorm, type=pa.float64(), mask=np.isnan(unorm)),
        }
        path = self.writer.write_table("layers", cols, LAYER_SCHEMA)
        if path:
            self.files.append(str(path))

    def _write_batches(self, batches: list[dict], host) -> None:
        cols = {f.name: [] for f in BATCH_SCHEMA}

        def value(x, cast):
            if x is None:
                return None
            vals = host[x[1]] if x[0] == "t" else x[1]
            return [cast(v) for v in vals]

        for b in batches:
            cols["step"].append(b["step"])
            cols["rank"].append(self.rank)
            cols["micro"].append(b["micro"])
            cols["sample_ids"].append(b["ids"])
            cols["sample_losses"].append(value(b["losses"], float))
            cols["tokens"].append(value(b["tokens"], lambda v: int(round(v))))
        path = self.writer.write_table("batches", cols, BATCH_SCHEMA)
        if path:
            self.files.append(str(path))

    def close(self) -> None:
        """Close the open step (if any) and flush what is buffered. Idempotent."""
        if self._closed:
            return
        if self._open is not None:
            self.after_step()
        self.flush()
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
