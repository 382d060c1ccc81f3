"""Capture: make a training run record what `spikeforensics diagnose` needs.

Needs torch (`pip install 'spikeforensics[capture]'`); nothing else in spikeforensics imports
this package, so the CLI and `import spikeforensics` never load torch.

- `Recorder` (recorder.py): a plain PyTorch loop calls `after_backward` per micro-batch,
  `after_step` per optimizer step and `close` at the end.
- `HFCallback` (callbacks.py): a `transformers.TrainerCallback` by duck typing
  (`hf_callback()` makes a real subclass when transformers is installed).
- `LightningCallback` (callbacks.py): a Lightning `Callback` by duck typing
  (`lightning_callback()` makes a real subclass when Lightning is installed).

All three write the same files (writer.py): `metrics-rank{R}.jsonl` (step metrics, rank 0),
`layers-rank{R}-{SEQ}.parquet` (per-layer gradient statistics), `batches-rank{R}-{SEQ}.parquet`
(batch manifest), which `spikeforensics diagnose <folder>` reads. See docs/capture.md.
"""

from spikeforensics.capture.callbacks import HFCallback, LightningCallback, hf_callback, lightning_callback
from spikeforensics.capture.recorder import Recorder, dist_rank_world

__all__ = ["Recorder", "HFCallback", "LightningCallback", "hf_callback", "lightning_callback", "dist_rank_world"]
