"""The typed rows inside a diagnosis (attribute/model.py): evidence rows, samples, coverage, calibration and
alternatives are read as attributes, written back as the same JSON, and older or hand-made files still load."""

from dataclasses import fields
from pathlib import Path

import pytest

from spikeforensics import api
from spikeforensics.attribute.model import (
    ABSENT,
    Alternative,
    Calibration,
    Coverage,
    DiagnosedIncident,
    Diagnosis,
    EvidenceRow,
    SampleRow,
    SkipList,
    as_diagnosis,
    dumps,
)
from spikeforensics.attribute.tracing import SAMPLE_COLUMNS
from spikeforensics.detect.base import Evidence

ROOT = Path(__file__).resolve().parents[1]


def _names(cls) -> list[str]:
    return [f.name for f in fields(cls) if f.name != "other"]


@pytest.fixture(scope="module")
def diagnosis(tmp_path_factory):
    """A labelled run with a layer dump and a batch manifest: evidence, samples, per-layer calibration."""
    store = tmp_path_factory.mktemp("store")
    api.ingest([ROOT / "sample_logs/tune/data_outlier_clip"], run_id="r", store=store)
    return api.diagnose("r", store)


def test_rows_declare_the_fields_their_producers_write_in_the_same_order():
    # a column added to the sample table or to Evidence must be added here too, or it lands in `other`
    # (still written, but after the declared fields)
    assert _names(SampleRow) == list(SAMPLE_COLUMNS)
    assert _names(EvidenceRow) == [f.name for f in fields(Evidence)]


def test_a_real_diagnosis_reads_as_attributes(diagnosis):
    typed = as_diagnosis(diagnosis)
    inc = typed.incidents[0]
    raw = diagnosis["incidents"][0]
    assert inc.evidence and all(isinstance(e, EvidenceRow) for e in inc.evidence)
    assert [(e.signal, e.step, e.layer) for e in inc.evidence] == [
        (e["signal"], e.get("step"), e.get("layer")) for e in raw["evidence"]
    ]
    assert inc.samples and all(isinstance(s, SampleRow) for s in inc.samples)
    assert [s.sample_id for s in inc.samples] == [s["sample_id"] for s in raw["samples"]]
    assert inc.sample_ids[0] == inc.samples[0].sample_id
    assert all(isinstance(a, Alternative) and 0 <= a.confidence <= 1 for a in inc.alternatives)
    cov = typed.verdict.coverage
    assert isinstance(cov, Coverage) and "loss" in cov.signals and "layers" in cov.signals
    assert cov.records == diagnosis["verdict"]["coverage"]["records"] and cov.failed == []
    cal = typed.calibration
    assert (
        isinstance(cal, Calibration) and cal.recommended_clip_norm == diagnosis["calibration"]["recommended_clip_norm"]
    )
    assert list(cal.layer_clip_norms) == list(diagnosis["calibration"]["layer_clip_norms"])
    skip = typed.skiplist
    assert isinstance(skip, SkipList) and skip.sample_ids == diagnosis["skiplist"]["sample_ids"] and skip.sample_ids
    assert skip.reasons[0]["incident"] == inc.id


def test_the_typed_rows_write_the_same_json(diagnosis):
    text = dumps(diagnosis, indent=2)
    assert dumps(Diagnosis.from_dict(diagnosis), indent=2) == text
    for inc in diagnosis["incidents"]:
        assert [EvidenceRow.from_dict(e).to_dict() for e in inc["evidence"]] == inc["evidence"]
        assert [list(SampleRow.from_dict(s).to_dict()) for s in inc["samples"]] == [list(s) for s in inc["samples"]]


def test_rows_without_a_value_leave_the_field_out_and_keep_unknown_keys():
    row = EvidenceRow.from_dict(
        {"signal": "loss", "step": 7, "value": float("nan"), "rank": None, "note": "", "window": [1, 2]}
    )
    assert row.rank is None and row.other == {"window": [1, 2]}
    assert row.to_dict() == {"signal": "loss", "step": 7, "value": "nan", "window": [1, 2]}
    sample = SampleRow.from_dict({"sample_id": "s1", "score": 2.5, "own_outlier": False, "source": ""})
    assert sample.own_outlier is False and sample.to_dict() == {
        "sample_id": "s1",
        "score": 2.5,
        "source": "",
        "own_outlier": False,
    }


def test_an_older_file_loads_and_writes_back_what_it_held():
    old = {
        "schema_version": 1,
        "run_id": "r",
        "steps": {"first": 1, "last": 9, "count": 9},
        "verdict": {
            "status": "degraded",
            "root_cause": "lr_too_high",
            "summary": "s",
            "coverage": {
                "signals": ["loss"],
                "records": {"train.log": 9},
                "unparsed_lines": 0,
                "detectors_run": ["hard_spike"],
                "detectors_failed": ["stall"],
            },
        },
        "incidents": [
            {
                "id": "inc-1",
                "kind": "hard_spike",
                "severity": "warning",
                "step_start": 3,
                "step_end": 4,
                "peak_step": 3,
                "alternatives": [{"root_cause": "data_outlier", "confidence": 0.2}],
                "evidence": [{"signal": "loss", "step": 3, "value": 9.0}, "a stray string"],
            }
        ],
        "calibration": {},
        "skiplist": {"run_id": "r", "steps": [3], "sample_ids": []},
    }
    typed = Diagnosis.from_dict(old)
    cov = typed.verdict.coverage
    assert cov.failed == ["stall"] and cov.stages_failed is ABSENT and cov.events is ABSENT
    assert "stages_failed" not in cov.to_dict() and "series_records" not in cov.to_dict()
    inc = typed.incidents[0]
    assert inc.samples is ABSENT and [e.signal for e in inc.evidence] == ["loss"]  # the stray entry is dropped
    assert inc.alternatives[0].root_cause == "data_outlier"
    again = typed.to_dict()
    assert again["calibration"] == {} and again["verdict"]["coverage"] == old["verdict"]["coverage"]
    assert typed.skiplist.steps == [3] and typed.skiplist.reasons is ABSENT and again["skiplist"] == old["skiplist"]
    assert "samples" not in again["incidents"][0]


def test_plain_dicts_of_an_incident_hold_no_typed_values(diagnosis):
    inc = DiagnosedIncident.from_dict(diagnosis["incidents"][0])
    plain = inc.to_dict(safe=False)
    assert all(type(e) is dict for e in plain["evidence"]) and all(type(s) is dict for s in plain["samples"])
    assert all(type(a) is dict for a in plain["alternatives"])
