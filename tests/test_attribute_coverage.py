"""Coverage-aware verdicts: healthy only when a loss/grad-norm series was read, inconclusive when nothing
was, incomplete (exit 4) when a detector or stage failed; events alone convict; reports say what was read."""

import json
from pathlib import Path

from _detect_synth import curves, run_from
from click.testing import CliRunner

from spikeforensics import detect as det
from spikeforensics.attribute import diagnose_run
from spikeforensics.attribute.diagnosis import verdict
from spikeforensics.cli import cli
from spikeforensics.params import Params
from spikeforensics.report.markdown import render_markdown
from spikeforensics.report.terminal import summary_lines
from spikeforensics.rundata import RunData

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / "sample_logs" / "real" / "dev"
REAL = ROOT / "tests" / "data" / "real"


def test_clean_run_is_healthy_with_coverage():
    d = diagnose_run(run_from(curves(500)), Params())
    v = d["verdict"]
    assert v["status"] == "healthy"
    cov = v["coverage"]
    assert cov["signals"][:3] == ["loss", "grad_norm", "lr"] and cov["records"] == {"train.log": 500}
    assert cov["detectors_failed"] == [] and "events" in cov["detectors_run"] and "divergence" in cov["detectors_run"]
    assert "Read: loss (500 records), grad_norm (500 records), lr." in summary_lines(d)[1]


def test_a_single_record_is_not_a_series_and_nothing_read_is_inconclusive():
    one = run_from({"step": [1], "loss": [2.0]})
    d = diagnose_run(one, Params())
    assert d["verdict"]["status"] == "inconclusive"
    # the one loss record was read, too few to judge: the report says so instead of "not read"
    assert "Too few records to judge: loss (1 record)." in render_markdown(d)
    assert "Not read: grad_norm, lr" in render_markdown(d)
    empty = diagnose_run(RunData.from_frames(), Params())
    assert empty["verdict"]["status"] == "inconclusive" and empty["verdict"]["summary"].startswith(
        "Inconclusive: no loss"
    )
    assert "Inconclusive" in render_markdown(empty) and "Not read: loss, grad_norm, lr" in render_markdown(empty)


def test_failed_detector_makes_the_diagnosis_incomplete_never_healthy(monkeypatch):
    def broken(run, params):
        raise RuntimeError("boom")

    monkeypatch.setattr(det, "DETECTORS", (*det.DETECTORS, ("sign_ratio_anomaly", broken)))
    d = diagnose_run(run_from(curves(500)), Params())
    assert d["verdict"]["status"] == "incomplete"
    assert d["verdict"]["coverage"]["detectors_failed"] == ["sign_ratio_anomaly"]
    note = next(n for n in d["notes"] if n.get("traceback"))
    assert note["kind"] == "detector_error" and "RuntimeError: boom" in note["traceback"]


def test_failed_attribution_stage_makes_the_diagnosis_incomplete(monkeypatch):
    import spikeforensics.attribute.diagnosis as diag

    def broken(*a, **k):
        raise ValueError("bad feature")

    monkeypatch.setattr(diag, "incident_features", broken)
    c = curves(1000)
    c["loss"][600] *= 3
    c["grad_norm"][600] *= 30
    d = diagnose_run(run_from(c), Params())
    assert d["verdict"]["status"] == "incomplete" and d["incidents"][0]["root_cause"] == "unknown"
    assert d["verdict"]["coverage"]["stages_failed"] == ["attribution of inc-1"]


def test_verdict_headline_is_the_first_nonfinite_step():
    incs = [
        {
            "id": "inc-1",
            "kind": "hard_spike",
            "severity": "critical",
            "peak_step": 10,
            "root_cause": "unknown",
            "confidence": 0.5,
        },
        {
            "id": "inc-2",
            "kind": "nonfinite",
            "severity": "critical",
            "peak_step": 90,
            "root_cause": "fp16_overflow",
            "confidence": 0.7,
            "first_nonfinite_step": 88,
        },
    ]
    v = verdict(incs, {"count": 100}, {"signals": ["loss"], "detectors_failed": []})
    assert v["root_cause"] == "fp16_overflow" and "first non-finite value at step 88" in v["summary"]


def _cli(tmp_path, path, *extra):
    return CliRunner().invoke(
        cli, ["diagnose", str(path), "--store", str(tmp_path / "s"), "-q", "--out", str(tmp_path / "r.html"), *extra]
    )


def test_real_ecc_crash_with_one_record_is_unstable_hardware(tmp_path):
    res = _cli(tmp_path, DEV / "megatron-deepspeed-tr1-13b-ecc-uncorrectable-crash" / "chronicles_excerpt.log")
    assert res.exit_code == 0, res.output
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["verdict"]["status"] == "unstable" and d["verdict"]["root_cause"] == "hardware_fault"
    assert d["incidents"][0]["kind"] == "hardware_error" and "ECC" in d["incidents"][0]["explanation"]


def test_real_log_without_loss_is_inconclusive_not_healthy(tmp_path):
    # fairscale model-parallel inner lines: wps/ups/lr counters but no loss or grad norm at all
    res = _cli(tmp_path, DEV / "fairseq-fairscale-pr121-model-parallel-inner-lines-no-loss")
    assert res.exit_code == 0
    assert "Inconclusive: no loss or grad-norm series" in res.output and "Healthy" not in res.output
    html = (tmp_path / "r.html").read_text()
    assert 'class="verdict status-inconclusive"' in html and 'class="badge status-healthy"' not in html
    assert 'id="coverage"' in html


def test_real_nccl_watchdog_dump_convicts_on_its_events(tmp_path):
    # the watchdog takes the job down: no training record follows the timeouts
    res = _cli(tmp_path, REAL / "hardware" / "llamafactory_6269_nccl_watchdog_reduce_scatter.log")
    assert res.exit_code == 0
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["verdict"]["status"] == "unstable"
    inc = d["incidents"][0]
    assert inc["kind"] == "hardware_error" and inc["root_cause"] in ("hardware_fault", "unknown")
    assert "NCCL" in inc["explanation"] or "collective" in inc["explanation"]


def test_incomplete_exits_4_and_says_where_the_traceback_is(tmp_path, monkeypatch):
    def broken(run, params):
        raise RuntimeError("boom")

    monkeypatch.setattr(det, "DETECTORS", (*det.DETECTORS, ("sign_ratio_anomaly", broken)))
    log = tmp_path / "train.log"
    log.write_text("".join(f"step {s} | loss {3 - s / 100:.3f} | lr 1e-4 | grad_norm 0.5\n" for s in range(1, 80)))
    res = _cli(tmp_path, log)
    assert res.exit_code == 4
    assert "bug in spikeforensics" in res.stderr and "r.json" in res.stderr and "Traceback" not in res.stderr
    res = CliRunner().invoke(
        cli,
        [
            "diagnose",
            "--run",
            "train",
            "--store",
            str(tmp_path / "s"),
            "-q",
            "--out",
            str(tmp_path / "r2.html"),
            "--debug",
        ],
    )
    assert res.exit_code == 4 and "Traceback" in res.stderr
