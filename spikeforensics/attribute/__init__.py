"""Root-cause attribution: evidence features -> rules -> confidence, sample tracing, clip calibration.

    from spikeforensics.attribute import diagnose_run
    diagnosis = diagnose_run(run, params)          # the diagnosis.json dict (CONTRACT.md)

Modules: `context` (run-level views), `features` (named evidence per incident),
`rules` (TOML loader/validator and condition interpreter), `scoring` (rules ->
confidence per label), `tracing` (steps -> sample IDs), `calibration` (clip
threshold), `diagnosis` (the JSON and skip list).
"""

from __future__ import annotations

from pathlib import Path

from spikeforensics.attribute.diagnosis import build_diagnosis, fail_on_exit_code, json_safe, write_outputs
from spikeforensics.params import Params
from spikeforensics.rundata import RunData

__all__ = ["diagnose_run", "build_diagnosis", "json_safe", "write_outputs", "fail_on_exit_code"]


def diagnose_run(run: RunData, params: Params | None = None, rule_dirs: list[str | Path] | None = None) -> dict:
    """Detect incidents in `run`, then attribute, trace and calibrate them."""
    from spikeforensics.detect import detect_incidents, runs_in_log

    params = params or Params()
    with run.engine():
        incidents, notes = detect_incidents(run, params)
        # attributed on the runs that were judged (a log copied N times: its last copy), covered as read
        judged = runs_in_log.judged_run(run, params)
        return build_diagnosis(judged, incidents, notes, params, rule_dirs, whole=run)
