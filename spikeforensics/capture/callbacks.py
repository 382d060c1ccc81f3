"""Trainer callbacks with the `Recorder`'s output, written against the frameworks' protocols by
duck typing: neither transformers nor Lightning is imported unless a real subclass is asked for.

HF Trainer (`HFCallback`, transformers >= 4.45 for `on_pre_optimizer_step`): every hook takes
`(args, state, control, **kwargs)`; the Trainer passes `model`, `optimizer`, `lr_scheduler`, and
`logs` to `on_log`. The Trainer clips before `on_pre_optimizer_step`, so the per-layer statistics
are taken after clipping and divided by the clip coefficient; the pre-clip `grad_norm` and the
`loss` come from `on_log` (set `logging_steps=1` to have them every step; between logging steps a
step that did not clip has its measured norm, one that clipped has none). Callbacks do not see the
batch: call `callback.record_batch(sample_ids, sample_losses, tokens)` from a `compute_loss`
override to get the batch manifest.

Lightning (`LightningCallback`): `on_before_optimizer_step` sees the unscaled gradients before
clipping (exact per-layer and global pre-clip norms); `on_train_batch_end` gives the loss
(`outputs["loss"]`) and the batch; `batch_info(batch, outputs) -> dict(sample_ids=...,
sample_losses=..., tokens=...)` picks the samples (default: the keys `sample_ids` / `ids` of a dict
batch, `sample_losses` / `tokens` of the outputs or the batch).
"""

from __future__ import annotations

import os


class _NoOpHooks:
    """Any `on_*` hook not defined here does nothing (the frameworks call every hook)."""

    def __getattr__(self, name):
        if name.startswith("on_"):
            return lambda *a, **k: None
        raise AttributeError(name)


def _get(obj, *keys):
    if isinstance(obj, dict):
        for k in keys:
            if k in obj and obj[k] is not None:
                return obj[k]
    return None


def default_batch_info(batch, outputs) -> dict:
    """Sample IDs from a dict batch (`sample_ids`, `ids`, `sample_id`), per-sample losses and
    token counts from the outputs or the batch (`sample_losses`, `tokens`)."""
    return dict(
        sample_ids=_get(batch, "sample_ids", "ids", "sample_id"),
        sample_losses=_get(outputs, "sample_losses")
        if _get(outputs, "sample_losses") is not None
        else _get(batch, "sample_losses"),
        tokens=_get(outputs, "tokens") if _get(outputs, "tokens") is not None else _get(batch, "tokens"),
    )


class HFCallback(_NoOpHooks):
    """A transformers `TrainerCallback` (duck-typed). `out_dir` defaults to
    `<args.output_dir>/spikeforensics`; other keyword arguments go to `Recorder`."""

    def __init__(
        self, out_dir: str | os.PathLike | None = None, every: int = 10, flush_every: int = 50, **recorder_kwargs
    ):
        self.out_dir, self.every, self.flush_every = out_dir, every, flush_every
        self.kwargs = recorder_kwargs
        self.recorder = None
        self._max_norm = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        from spikeforensics.capture.recorder import Recorder

        if self.recorder is None:
            out = self.out_dir or os.path.join(getattr(args, "output_dir", "."), "spikeforensics")
            kw = dict(reduce_loss=False) | self.kwargs  # the Trainer logs the loss already averaged
            self.recorder = Recorder(out, model, every=self.every, flush_every=self.flush_every, auto_flush=False, **kw)
        self._max_norm = getattr(args, "max_grad_norm", None)

    def record_batch(self, sample_ids, sample_losses=None, tokens=None, state=None):
        """The samples of the current micro-batch (call it from `compute_loss`)."""
        if self.recorder is not None:
            self.recorder.record_batch(sample_ids, sample_losses, tokens, step=self._step)

    _step = None

    def on_step_begin(self, args, state, control, **kwargs):
        rec = self.recorder
        if rec is not None and rec._since_flush >= rec.flush_every:
            rec.flush()  # here, not at on_step_end: the previous step's on_log has arrived
        self._step = state.global_step + 1

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.recorder is not None:
            self.recorder.capture_grads(state.global_step + 1, pre_clip=False)

    def on_step_end(self, args, state, control, optimizer=None, **kwargs):
        rec = self.recorder
        if rec is None:
            return
        step = state.global_step
        st = rec._begin(step)
        measured = st.get("measured")
        max_norm = self._max_norm if self._max_norm and self._max_norm > 0 else None
        grad_norm = None
        if measured is not None:
            if max_norm is None:
                grad_norm = measured  # no clipping: the measured norm is the pre-clip one
            else:
                # below the threshold nothing was clipped; above it the pre-clip norm is unknown
                # until on_log gives it (NaN then; replaced by on_log's value when it comes)
                grad_norm = measured.where(measured < max_norm * (1 - 1e-4), measured.new_tensor(float("nan")))
        rec.after_step(optimizer, grad_norm=grad_norm, max_norm=max_norm, step=step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        rec = self.recorder
        if rec is None or not logs:
            return
        vals = {k: logs[k] for k in ("loss", "grad_norm") if isinstance(logs.get(k), (int, float))}
        if vals:
            if "grad_norm" in vals and self._max_norm and self._max_norm > 0:
                g = float(vals["grad_norm"])
                vals["clip_coef"] = min(1.0, self._max_norm / (g + 1e-6))
                vals["grad_norm_clipped"] = g * vals["clip_coef"]
            rec.set_step_values(state.global_step, **vals)

    def on_train_end(self, args, state, control, **kwargs):
        if self.recorder is not None:
            self.recorder.close()


class LightningCallback(_NoOpHooks):
    """A Lightning `Callback` (duck-typed). `out_dir` defaults to
    `<trainer.default_root_dir>/spikeforensics`; other keyword arguments go to `Recorder`."""

    def __init__(
        self,
        out_dir: str | os.PathLike | None = None,
        every: int = 10,
        flush_every: int = 50,
        batch_info=default_batch_info,
        **recorder_kwargs,
    ):
        self.out_dir, self.every, self.flush_every = out_dir, every, flush_every
        self.batch_info = batch_info
        self.kwargs = recorder_kwargs
        self.recorder = None
        self._gs0 = 0

    # Lightning asks every callback for these
    @property
    def state_key(self) -> str:
        return type(self).__qualname__

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state_dict) -> None:
        pass

    def setup(self, trainer, pl_module, stage=None):
        pass

    def teardown(self, trainer, pl_module, stage=None):
        if self.recorder is not None:
            self.recorder.close()

    def on_train_start(self, trainer, pl_module):
        from spikeforensics.capture.recorder import Recorder

        if self.recorder is None:
            out = self.out_dir or os.path.join(getattr(trainer, "default_root_dir", "."), "spikeforensics")
            kw = dict(rank=getattr(trainer, "global_rank", None), world_size=getattr(trainer, "world_size", None))
            kw = {k: v for k, v in kw.items() if v is not None} | self.kwargs
            self.recorder = Recorder(out, pl_module, every=self.every, flush_every=self.flush_every, **kw)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx, *args):
        self._gs0 = trainer.global_step

    def on_after_backward(self, trainer, pl_module):
        pass  # the gradients are complete only at on_before_optimizer_step (accumulation, unscaling)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer, *args):
        if self.recorder is not None:
            self.recorder.capture_grads(trainer.global_step + 1, pre_clip=True)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *args):
        rec = self.recorder
        if rec is None:
            return
        step = self._gs0 + 1
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        info = {k: v for k, v in (self.batch_info(batch, outputs) or {}).items() if v is not None}
        rec.after_backward(loss, step, **info)
        if trainer.global_step > self._gs0:  # this batch completed an optimizer step
            opts = getattr(trainer, "optimizers", None) or [None]
            plugin = getattr(trainer, "precision_plugin", None) or getattr(trainer, "strategy", None)
            scaler = getattr(plugin, "scaler", None)
            clip = getattr(trainer, "gradient_clip_val", None)
            algo = getattr(trainer, "gradient_clip_algorithm", "norm")
            max_norm = float(clip) if clip and str(algo).endswith("norm") else None
            rec.after_step(opts[0], scaler=scaler, max_norm=max_norm, step=step)

    def on_train_end(self, trainer, pl_module):
        if self.recorder is not None:
            self.recorder.close()


def hf_callback(*args, **kwargs):
    """An `HFCallback` that is also a real `transformers.TrainerCallback` (needs transformers)."""
    from transformers import TrainerCallback

    cls = type("SpikeforensicsHFCallback", (HFCallback, TrainerCallback), {})
    return cls(*args, **kwargs)


def lightning_callback(*args, **kwargs):
    """A `LightningCallback` that is also a real Lightning `Callback` (needs lightning or
    pytorch_lightning)."""
    try:
        from lightning.pytorch import Callback
    except ImportError:
        from pytorch_lightning import Callback
    cls = type("SpikeforensicsLightningCallback", (LightningCallback, Callback), {})
    return cls(*args, **kwargs)
