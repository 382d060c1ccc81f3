"""Mixed precision switched on without a dtype (ingest/run_facts.py PREC_AMP, mode `amp`) and what it
means for a run's precision (attribute/log_facts.py: fp16 unless the log also declares bf16), on the
wordings frameworks print and on a real mmengine log whose only word on precision is its config name."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from spikeforensics import api
from spikeforensics.attribute.log_facts import log_facts
from spikeforensics.ingest.run_facts import run_fact_events
from spikeforensics.params import Params
from tests.test_attribute_log_facts import run_of

REAL = Path(__file__).parents[1] / "sample_logs" / "real"


def modes(*lines: str) -> list[str]:
    frame = pl.DataFrame(
        {"line": list(range(1, len(lines) + 1)), "text": list(lines), "prefix_rank": [None] * len(lines)},
        schema_overrides={"prefix_rank": pl.Int32},
    )
    prec = run_fact_events(frame)[0]
    return [json.loads(d)["mode"] for d in prec.get_column("detail")] if prec.height else []


@pytest.mark.parametrize(
    "line",
    [
        "optim_wrapper = dict(type='AmpOptimWrapper', loss_scale='dynamic', optimizer=dict(type='AdamW', lr=0.0015))",
        "fp16 = dict(loss_scale=512.0)",
        "Namespace(batch_size=128, amp=True, model='resnet50')",
        "use_amp: true",
        "python train.py /data/imagenet --model vit_base_patch16_224 --amp --lr 0.001",
        "2023/06/11 04:03:50 - mmengine - INFO - Exp name: mae_vit-base-p16_8xb512-amp-coslr-1600e_pathology_20230609_120904",
        "python tools/train.py configs/retinanet/retinanet_r50_fpn_fp16_1x_coco.py --work-dir out",
    ],
)
def test_mixed_precision_without_a_dtype_is_amp(line):
    assert modes(line) == ["amp"]


@pytest.mark.parametrize(
    "line",
    [
        "amp=False",
        "Namespace(batch_size=128, amp=False)",
        "2023/06/11 04:03:50 - mmengine - INFO - Exp name: mae_vit-base-p16_8xb512-coslr-1600e_in1k_20230609_120904",
        "timestamp=2023-06-11 loss=2.31 sample_amplitude=0.5",
        "Epoch [3][100/625] lr: 1.0e-03, example_amp: 2.0, loss: 0.54",
    ],
)
def test_other_lines_declare_nothing(line):
    assert modes(line) == []


def test_amp_is_fp16_unless_bf16_is_declared():
    p = Params.load()
    amp = log_facts(run_of(loss=[2.0] * 5, events=[("precision", '{"mode": "amp"}')]), p)
    assert amp["precision"] == "fp16" and amp["fp16"] and amp["precision_declared"]
    with_bf16 = [("precision", '{"mode": "amp"}'), ("precision", '{"mode": "bf16"}')]
    assert log_facts(run_of(loss=[2.0] * 5, events=with_bf16), p)["precision"] == "bf16"


def test_real_mmengine_amp_config_name_makes_a_mid_run_nan_an_fp16_suspect(tmp_path):
    # mmpretrain#1632: MAE on the `-amp-` config, NaN at epoch 165; the reporter: "disable AMP solves it"
    case = REAL / "fresh5" / "mmpretrain-1632-mae-vit-b-amp-pathology-loss-nan-epoch165"
    files = sorted(str(p) for p in case.glob("*.log"))
    api.ingest(files, run_id="r", store=tmp_path)
    run = api.load_run("r", tmp_path)
    prec = run.events.filter(pl.col("kind") == "precision")
    assert prec.height >= 1 and json.loads(prec.item(0, "detail"))["mode"] == "amp"
    diagnosis = api.diagnose(run)
    head = diagnosis["incidents"][0]
    assert head["kind"] == "nonfinite" and head["root_cause"] == "fp16_overflow"
    assert [a["root_cause"] for a in head["alternatives"]][:1] == ["lr_too_high"]
