"""What sample_logs/real/fresh50 first needed: W&B `output.log` captures of two loops the tool did not read. zett's
JAX trainer prints HF-style dicts under W&B section names with NumPy 2 scalar reprs (`{'train/loss':
np.float32(5.414587), ...}`) after a tqdm bar (and AlgoPerf's evaluation summaries, `{'train/loss': ...,
'validation/loss': ...}`, stay no records); a deep-decoder fit prints `ite N, loss is L`."""

from __future__ import annotations

import polars as pl
from _ingest_helpers import REAL

from spikeforensics import api
from spikeforensics.ingest import detect_format

ZETT = REAL / "fresh50" / "zett-llama3-8b-ru-hypernet-jax-wandb-output-healthy-136-records-68000-steps" / "output.log"
DECODER = (
    REAL
    / "fresh50"
    / "custom-pytorch-deepdecoder-spectrum-cartography-wandb-output-recurring-loss-bumps-3370-iters"
    / "output.log"
)


def _run(path, tmp_path, run_id: str):
    api.ingest([str(path)], run_id=run_id, store=tmp_path)
    return api.load_run(run_id, tmp_path)


def test_hf_style_dicts_under_a_section_name_with_numpy_scalars(tmp_path):
    assert detect_format(ZETT)[0] == "hf_trainer"
    run = _run(ZETT, tmp_path, "zett")
    loss = run.series("loss")
    assert loss.height == 116  # `train/loss` from step 10499; the identity phase before prints its own loss
    assert loss.get_column("step")[0] == 10499 and loss.get_column("value")[0] == 5.414587
    records = run.metrics.filter(pl.col("record").is_not_null()).get_column("record").n_unique()
    assert records == 136
    assert api.diagnose(run)["verdict"]["status"] == "healthy"


def test_ite_counter_with_loss_is(tmp_path):
    """`ite N, loss is L`: 3,370 records. The first update doubles the loss (541 -> 1054, back at the third record):
    an unstable start; the later 1.4-2.5x jumps, at 0.4-1.7% of the loss the fit started from, stay notes (a loss
    trained towards 0, detect/converged.py), each at its step."""
    run = _run(DECODER, tmp_path, "dd")
    loss = run.series("loss")
    assert loss.height == 3370 and loss.get_column("step").to_list() == list(range(3370))
    d = api.diagnose(run)
    assert d["verdict"]["status"] == "degraded"
    warned = [i for i in d["incidents"] if i["severity"] in ("warning", "critical")]
    assert [(i["kind"], i["peak_step"]) for i in warned] == [("hard_spike", 1)]
    noted = {n["peak_step"] for n in d["notes"] if n["kind"] == "hard_spike"}
    assert {899, 1254, 1339, 2392} <= noted


BILSTM = (
    REAL
    / "fresh52"
    / "pytorch-rasbt-bilstm-agnews-50-epochs-healthy-900-records"
    / "rnn_bi_multilayer_lstm_own_csv_agnews_cell39_stdout.txt"
)


def test_a_loop_that_names_its_loss_cost(tmp_path):
    """rasbt's notebooks print `Epoch: 001/050 | Batch 050/891 | Cost: 1.2299` (fresh52): the cost a line that names
    no loss prints is its loss, as an RMSE or MSE already was; 900 records, (E - 1) * 891 + batch."""
    run = _run(BILSTM, tmp_path, "bilstm")
    loss = run.series("loss")
    assert loss.height == 900
    assert loss.get_column("step")[:3].to_list() == [0, 50, 100] and loss.get_column("value")[1] == 1.2299
    assert api.diagnose(run)["verdict"]["status"] == "healthy"
