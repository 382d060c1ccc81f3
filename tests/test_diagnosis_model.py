"""The typed diagnosis (attribute/model.py): the JSON it writes keeps the contract's shape, and
reading it back and writing it again gives the same bytes."""

import json
from pathlib import Path

import pytest
from conftest import CONTRACT_INCIDENT_KEYS

from spikeforensics import api
from spikeforensics.attribute.model import DiagnosedIncident, Diagnosis, as_diagnosis, dumps

ROOT = Path(__file__).resolve().parents[1]
CONTRACT_TOP = ["schema_version", "tool_version", "run_id", "steps", "verdict", "incidents", "calibration"]


@pytest.fixture(
    scope="module",
    params=[
        "sample_logs/tune/data_outlier_clip",
        "sample_logs/real/dev/colossalai-examples-37-zero3-overflow-loss-nan",
    ],
)
def diagnosis(request, tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    api.ingest([ROOT / request.param], run_id="r", store=store)
    return api.diagnose("r", store)


def test_json_round_trips_byte_for_byte(diagnosis):
    text = dumps(diagnosis, indent=2)
    again = dumps(Diagnosis.from_dict(json.loads(text)), indent=2)
    assert again == text


def test_contract_fields_come_first_in_order(diagnosis):
    assert list(diagnosis)[: len(CONTRACT_TOP)] == CONTRACT_TOP
    assert list(diagnosis["steps"]) == ["first", "last", "count"]
    assert list(diagnosis["verdict"])[:3] == ["status", "root_cause", "summary"]
    assert diagnosis["incidents"], "the fixture runs have incidents"
    for inc in diagnosis["incidents"]:
        assert list(inc)[: len(CONTRACT_INCIDENT_KEYS)] == CONTRACT_INCIDENT_KEYS
        assert all(isinstance(inc[k], int) for k in ("step_start", "step_end", "peak_step"))


def test_attributes_read_what_the_json_holds(diagnosis):
    typed = as_diagnosis(diagnosis)
    assert typed.run_id == diagnosis["run_id"] and typed.verdict.status == diagnosis["verdict"]["status"]
    assert [i.peak_step for i in typed.incidents] == [i["peak_step"] for i in diagnosis["incidents"]]
    assert [i.log_lines for i in typed.incidents] == [i["log_lines"] for i in diagnosis["incidents"]]


def test_hand_made_dicts_keep_unknown_keys_and_leave_absent_extras_out():
    inc = DiagnosedIncident.from_dict(
        {
            "id": "inc-1",
            "kind": "hard_spike",
            "severity": "warning",
            "step_start": 5,
            "step_end": 9,
            "peak_step": 7,
            "summary": "from an older file",
        }
    )
    assert inc.kinds == ["hard_spike"] and inc.other == {"summary": "from an older file"}
    out = inc.to_dict()
    assert list(out)[-1] == "summary" and "features" not in out and "log_lines" not in out
    with pytest.raises(TypeError):
        DiagnosedIncident(
            id="x",
            kind="k",
            kinds=[],
            severity="info",
            step_start=0,
            step_end=0,
            peak_step=0,
            root_cause_details="a misspelt field",
        )
