"""diagnosis.json / skiplist.json in the CONTRACT.md shape, and end-to-end attribution cases."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from attribute_synth import bad_sample_id, events, incident, make_run, rule_toml, step_time
from conftest import CONTRACT_INCIDENT_KEYS

from spikeforensics.attribute import diagnose_run
from spikeforensics.attribute.diagnosis import (
    build_diagnosis,
    dumps,
    fail_on_exit_code,
    json_safe,
    ordered_evidence,
    write_outputs,
)
from spikeforensics.attribute.rules import LABELS
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.params import Params
from spikeforensics.rundata import RunData


def check_contract(d: dict) -> None:
    assert d["schema_version"] == 1 and isinstance(d["tool_version"], str) and isinstance(d["run_id"], str)
    assert set(d["steps"]) >= {"first", "last", "count"}
    assert d["verdict"]["status"] in ("healthy", "degraded", "unstable")
    for inc in d["incidents"]:
        assert all(k in inc for k in CONTRACT_INCIDENT_KEYS)
        assert inc["severity"] in ("warning", "critical")
        assert all(type(inc[k]) is int for k in ("step_start", "step_end", "peak_step"))
        assert 0 <= inc["confidence"] <= 1 and inc["root_cause"] in LABELS
        assert all(a["root_cause"] in LABELS and 0 <= a["confidence"] <= 1 for a in inc["alternatives"])
        assert all(isinstance(s, str) for s in inc["sample_ids"])
    assert set(d["calibration"]) >= {"recommended_clip_norm", "basis", "current_clip_norm", "clip_rate"}
    json.dumps(d, allow_nan=False)  # no NaN/Inf left anywhere


def test_json_safe_turns_non_finite_into_strings():
    out = json_safe({"a": float("nan"), "b": [float("inf"), -math.inf, 1.5], "c": (1, None), "d": np.float64(2.0)})
    assert out == {"a": "nan", "b": ["inf", "-inf", 1.5], "c": [1, None], "d": 2.0}
    assert json.loads(dumps({"x": float("nan")})) == {"x": "nan"}


def test_data_outlier_with_manifest():
    run = make_run(spike_at=150, ranks=2, spike_rank=1, bad_sample_loss=40.0)
    bad = bad_sample_id(run, 150, rank=1)
    d = build_diagnosis(run, [incident(150)], [], Params())
    check_contract(d)
    inc = d["incidents"][0]
    assert inc["root_cause"] == "data_outlier" and inc["confidence"] >= 0.7
    assert inc["sample_ids"][0] == bad
    assert bad in inc["explanation"] and any(bad in a for a in inc["actions"])
    assert {k: v for k, v in d["verdict"].items() if k != "coverage"} == {
        "status": "unstable",
        "root_cause": "data_outlier",
        "summary": d["verdict"]["summary"],
    }
    assert "loss" in d["verdict"]["coverage"]["signals"]
    assert d["skiplist"]["steps"] == [149, 150] and d["skiplist"]["sample_ids"] == [bad]
    assert inc["samples"][0]["sample_id"] == bad and inc["features"]["top_sample_loss_ratio"] > 10


def test_hardware_fault_from_rank_mismatch_and_xid_is_not_blamed_on_data():
    xid = ("xid", None, step_time(150), json.dumps({"code": 79, "pci": "0000:cb:00"}))
    run = make_run(
        spike_at=150,
        ranks=4,
        per_rank_grad=True,
        spike_rank=2,
        per_rank_mode="mismatch",
        extra={"events": events([xid])},
    )
    d = build_diagnosis(run, [incident(150)], [], Params())
    check_contract(d)
    inc = d["incidents"][0]
    assert inc["root_cause"] == "hardware_fault" and inc["confidence"] >= 0.7
    assert inc["ranks"] == [2] and inc["sample_ids"] == []
    assert "79" in inc["explanation"]
    assert d["skiplist"]["steps"] == [] and d["skiplist"]["sample_ids"] == []
    assert all(not a["root_cause"].startswith("data_") or a["confidence"] < 0.1 for a in inc["alternatives"])


def test_single_rank_nan_without_telemetry_is_not_hardware():
    run = make_run(spike_at=150, spike_grad=float("nan"), spike_loss=float("nan"), manifest=False)
    d = build_diagnosis(run, [incident(150, kind="nonfinite", ranks=[0])], [], Params())
    check_contract(d)
    inc = d["incidents"][0]
    assert inc["root_cause"] != "hardware_fault" and "hardware_fault" in inc["gated_labels"]
    assert inc["features"]["rank_confined"] is False


def test_zero_layer_without_low_precision_is_model_bug():
    layers = pl.DataFrame(
        [
            {
                "step": s,
                "layer": name,
                "grad_norm": 0.0 if (name == "h.1" and s >= 100) else 0.2,
                "zero_frac": 1.0 if (name == "h.1" and s >= 100) else 0.0,
            }
            for s in range(1, 301)
            for name in ("h.0", "h.1")
        ]
    )
    run = make_run(extra={"layers": layers})
    d = build_diagnosis(
        run, [incident(200, kind="underflow_zeros", severity="warning", start=100, end=300)], [], Params()
    )
    check_contract(d)
    assert d["incidents"][0]["root_cause"] == "model_bug"
    assert d["verdict"]["status"] == "degraded"


def test_healthy_run_notes_and_fail_on():
    run = make_run()
    note = Finding("clip_rate_anomaly", 10, 20, 15, "info", 1.0, "3 clipped steps in a row")
    d = build_diagnosis(run, [], [note], Params())
    check_contract(d)
    assert {k: v for k, v in d["verdict"].items() if k != "coverage"} == {
        "status": "healthy",
        "root_cause": None,
        "summary": d["verdict"]["summary"],
    }
    assert d["notes"][0]["summary"] == "3 clipped steps in a row"
    assert fail_on_exit_code(d, "warning") == 0 and fail_on_exit_code(d, "info") == 0
    bad = build_diagnosis(make_run(spike_at=150), [incident(150, severity="warning")], [], Params())
    assert fail_on_exit_code(bad, "warning") == 3 and fail_on_exit_code(bad, "critical") == 0
    assert fail_on_exit_code(bad, None) == 0
    with pytest.raises(ValueError):
        fail_on_exit_code(bad, "fatal")


def test_write_outputs_and_log_lines(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join(f"line {i}\n" for i in range(1, 1001)), encoding="utf-8")
    run = make_run(spike_at=150, bad_sample_loss=50.0)
    sources = pl.DataFrame({"source": ["train.log"], "path": [str(log)]})
    run = RunData.from_frames("w", metrics=run.metrics, batches=run.batches, sources=sources)
    d = build_diagnosis(run, [incident(150)], [], Params())
    lines = d["incidents"][0]["log_lines"]
    peak_line = 150 * 3  # attribute_synth puts step s on line 3s
    assert [x["line"] for x in lines] == list(range(peak_line - 3, peak_line + 4))
    assert [x for x in lines if x["peak"]][0]["text"] == f"line {peak_line}"
    js, skip = write_outputs(d, tmp_path / "out" / "diagnosis.json")
    assert json.loads(js.read_text())["run_id"] == "w"
    sk = json.loads(skip.read_text())
    assert sk["run_id"] == "w" and sk["steps"] == [149, 150] and len(sk["sample_ids"]) == 1
    log.unlink()
    assert build_diagnosis(run, [incident(150)], [], Params())["incidents"][0]["log_lines"] == []


def test_user_rules_change_the_attribution(tmp_path):
    (tmp_path / "mine.toml").write_text(
        rule_toml("everything-is-lr", "lr_too_high", 50, "has_hard_spike", "site policy"), encoding="utf-8"
    )
    run = make_run(spike_at=150, bad_sample_loss=40.0)
    d = build_diagnosis(run, [incident(150)], [], Params(), rule_dirs=[tmp_path])
    assert d["incidents"][0]["root_cause"] == "lr_too_high"
    assert str(tmp_path / "mine.toml") in d["rules"]


def test_diagnose_run_end_to_end_with_the_detector():
    run = make_run(n=400, spike_at=250, spike_grad=60.0, spike_loss=9.0, bad_sample_loss=60.0)
    d = diagnose_run(run, Params())
    check_contract(d)
    spikes = [i for i in d["incidents"] if 245 <= i["peak_step"] <= 255]
    assert spikes, d["incidents"]
    assert spikes[0]["root_cause"] == "data_outlier"
    assert spikes[0]["sample_ids"][0] == bad_sample_id(run, 250)


def test_tied_suspects_are_said_to_tie():
    from spikeforensics.attribute.diagnosis import sample_ranking_note

    tied = pl.DataFrame({"sample_id": ["a", "b", "c", "d"], "score": [3.0, 3.0, 3.0, 1.0]})
    note = sample_ranking_note(tied, has_sample_losses=False, tie_tol=0.1)
    assert note.startswith("the top 3 samples tie (the manifest has no per-sample losses)")
    ranked = pl.DataFrame({"sample_id": ["a", "b"], "score": [5.0, 3.0]})
    assert sample_ranking_note(ranked, has_sample_losses=True, tie_tol=0.1) is None
    # end to end: a clear bad sample by its own loss is not a tie; without per-sample losses it is
    run = make_run(spike_at=150, bad_sample_loss=40.0, micro=1, per_micro=4)
    assert build_diagnosis(run, [incident(150)], [], Params())["incidents"][0]["sample_ranking_note"] is None
    blind = RunData.from_frames(
        "r",
        metrics=run.metrics,
        batches=run.batches.with_columns(pl.lit(None, pl.Float64).alias("sample_loss"), pl.lit(100).alias("tokens")),
    )
    inc = build_diagnosis(blind, [incident(150)], [], Params())["incidents"][0]
    assert "4 samples tie" in inc["sample_ranking_note"]


def test_evidence_order_is_the_runs_series_then_derived_rows_per_rank_after_global():
    # the order a detector may hand over when its rows come from polars groups in no fixed order
    given = [
        Evidence("layer_grad_norm", 9, 5.0, layer="h.1"),
        Evidence("grad_norm", 9, 4.0, rank=3),
        Evidence("clip_rate", 9, 0.5),
        Evidence("grad_norm", 9, 3.0, rank=1),
        Evidence("loss", 9, 2.0),
        Evidence("layer_grad_norm", 9, 4.5, layer="h.0"),
        Evidence("grad_norm", 9, 3.5),
    ]
    f = Finding("hard_spike", 9, 9, 9, "critical", 3.0, "spike", evidence=given)
    got = [(e.signal, e.rank, e.layer) for e in ordered_evidence(f)]
    assert got == [
        ("loss", None, None),
        ("grad_norm", None, None),
        ("grad_norm", 1, None),
        ("grad_norm", 3, None),
        # derived rows keep the detector's order (strongest layer first)
        ("layer_grad_norm", None, "h.1"),
        ("clip_rate", None, None),
        ("layer_grad_norm", None, "h.0"),
    ]
    shuffled = Finding(
        "hard_spike", 9, 9, 9, "critical", 3.0, "spike", evidence=[given[i] for i in (4, 6, 3, 1, 0, 2, 5)]
    )
    assert [(e.signal, e.rank) for e in ordered_evidence(shuffled)][:4] == [(s, r) for s, r, _ in got[:4]]
