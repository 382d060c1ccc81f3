"""A loop's own `print(i, loss)` of its loss tensor (torch_print) and Jupyter notebook output lines
(`_lines.unwrap_json_strings`), first met in sample_logs/real/fresh4 (mamba-malaya: a notebook
excerpt whose cells print `i tensor(nan, device='cuda:0', dtype=torch.bfloat16, grad_fn=<NllLossBackward0>)`).
The real case as the driver ingests it, a whole notebook, variants the printing code prints, and
tensors that are not a loss."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import polars as pl
import pytest
from _ingest_helpers import ingest, write

from spikeforensics.ingest import IngestError, ingest_paths
from spikeforensics.ingest._lines import unwrap_json_strings

FRESH4 = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "fresh4"
MAMBA = FRESH4 / "mamba-malaya-130m-pure-bf16-adam-loss-nan-step2-fp32-params"


def losses(metrics):
    rows = metrics.filter(pl.col("record").is_not_null() & (pl.col("name") == "loss")).sort("record")
    return rows.get_column("step").to_list(), rows.get_column("value").to_list()


def test_notebook_excerpt_of_loss_tensor_prints_is_read_with_its_steps_and_dtype(store, tmp_path):
    facts = tomllib.loads((MAMBA / "FACTS.toml").read_text())
    metrics, events, f = ingest(store, MAMBA / facts["files"][0])
    steps, values = losses(metrics)
    assert len(steps) == facts["step_records"] == 10
    assert steps == list(range(0, 20, 2))  # `print(i, loss)`: the bare forward prints are not records
    assert values[0] == 10.4375  # the first repr wraps before `grad_fn=` onto the next line
    assert math.isnan(values[1]) and steps[1] == facts["first_nonfinite_step"]
    prec = events.filter(pl.col("kind") == "precision").get_column("detail").to_list()
    assert prec and '"mode":"bf16"' in prec[0].replace(" ", "")  # `dtype=torch.bfloat16` of the printed loss
    assert f.unparsed == 0


def test_a_whole_notebook_is_read_through_its_output_lines(store, tmp_path):
    out = [f"{i} tensor({v}, device='cuda:0', grad_fn=<NllLossBackward0>)\n" for i, v in enumerate([2.5, 2.4, 2.3])]
    hf = [
        f"{{'loss': {v}, 'grad_norm': 1.5, 'learning_rate': 5e-05, 'epoch': {e}}}\n"
        for v, e in [(2.2, 0.1), (2.1, 0.2)]
    ]
    cells = [
        {
            "cell_type": "code",
            "source": ["for i in range(3):\n", "    print(i, loss)\n"],
            "outputs": [{"name": "stdout", "output_type": "stream", "text": out}],
        },
        {
            "cell_type": "code",
            "source": ["trainer.train()"],
            "outputs": [
                {
                    "name": "stderr",
                    "output_type": "stream",
                    "text": ["\r  0%|   | 0/2 [00:00<?, ?it/s]\r 50%|#  | 1/2"],
                },
                {"name": "stdout", "output_type": "stream", "text": hf},
            ],
        },
    ]
    path = tmp_path / "train.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1))
    metrics, _, f = ingest(store, path)
    assert losses(metrics)[1][:3] == [2.5, 2.4, 2.3]
    grad = metrics.filter(pl.col("name") == "grad_norm")
    assert grad.height == 2  # the HF Trainer dicts of the second cell, tqdm redraws (`\r` escapes) aside
    assert "torch_print" in f.format and "hf_trainer" in f.format


def test_json_string_lines_are_decoded_and_other_lines_kept():
    lines = pl.DataFrame(
        {
            "line": [1, 2, 3, 4, 5],
            "text": [
                '      "step 1 loss 2.5\\n",',
                '   "a \\"quoted\\" \\u00e9 50%\\r60%"',
                '"name": "stdout",',  # a key, not a string line
                '"unterminated \\x escape",',  # not valid JSON: left as it is
                "plain line",
            ],
        }
    )
    got = unwrap_json_strings(lines).get_column("text").to_list()
    assert got == [
        "step 1 loss 2.5",
        'a "quoted" é 50%\r60%',
        '"name": "stdout",',
        '"unterminated \\x escape",',
        "plain line",
    ]


def test_bare_loss_prints_without_counter_are_step_less_records(store, tmp_path):
    path = write(
        tmp_path,
        "loop.log",
        "epoch 0 start\n"
        "tensor(0.6931, grad_fn=<BinaryCrossEntropyWithLogitsBackward0>)\n"
        "tensor(0.6012, grad_fn=<BinaryCrossEntropyWithLogitsBackward0>)\n"
        "tensor(inf, grad_fn=<BinaryCrossEntropyWithLogitsBackward0>)\n",
    )
    metrics, _, _ = ingest(store, path)
    steps, values = losses(metrics)
    assert steps == [None, None, None] and values[:2] == [0.6931, 0.6012] and math.isinf(values[2])


def test_tensors_that_are_not_a_loss_are_no_records(store, tmp_path):
    # activations, weights and accuracies print as tensors too; without a loss's autograd node they are not the loss
    path = write(
        tmp_path,
        "debug.log",
        "0 tensor(0.5123, device='cuda:0', grad_fn=<MeanBackward0>)\n"
        "1 tensor(0.5011, device='cuda:0', grad_fn=<MeanBackward0>)\n"
        "2 tensor([0.1, 0.2], grad_fn=<AddmmBackward0>)\n",
    )
    with pytest.raises(IngestError, match="not a recognised training log"):
        ingest_paths([path], "r", store)
