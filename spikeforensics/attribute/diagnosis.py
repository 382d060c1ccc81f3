"""Incidents -> diagnosis.json (CONTRACT.md, schema_version 1) and skiplist.json.

`build_diagnosis(run, incidents, notes, params, rule_dirs)` computes, per warning+
incident, the evidence features, the rule-based attribution, the traced samples and
the raw log lines around the peak; adds the verdict, the step range and the clip
calibration. Contract fields come first in every object; extras (`notes`,
`skiplist`, `root_cause_detail`, `features`, `samples`, `consumed_samples_range`,
`log_lines`, `matched_rules`, ...) follow. `json_safe` is the one place non-finite
numbers become "nan"/"inf"/"-inf"; every JSON writer goes through it.
"""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path

import polars as pl

from spikeforensics import __version__
from spikeforensics.attribute.calibration import calibrate
from spikeforensics.attribute.context import build_context
from spikeforensics.attribute.features import incident_features, rank_features
from spikeforensics.attribute.model import (
    Alternative,
    Calibration,
    DiagnosedIncident,
    Diagnosis,
    EvidenceRow,
    SampleRow,
    SkipList,
    StepRange,
    Verdict,
    dumps,
    json_safe,
)
from spikeforensics.attribute.raw_lines import peak_lines_from_metrics, read_windows
from spikeforensics.attribute.rules import load_rules
from spikeforensics.attribute.scoring import attribute
from spikeforensics.attribute.tracing import (
    build_trace_context,
    consumed_samples_range,
    implicated_steps,
    listed_count,
    rank_samples,
    skip_candidates,
)
from spikeforensics.detect.base import SEVERITIES, Evidence, Finding, Incident, severity_rank
from spikeforensics.frames import in_slices
from spikeforensics.params import Params
from spikeforensics.rundata import RunData
from spikeforensics.schema import CANONICAL_METRICS

SCHEMA_VERSION = 1
DATA_LABELS = ("data_outlier", "data_drift")
LOG_CONTEXT = 3  # raw log lines either side of the evidence line


# --- pieces ------------------------------------------------------------------------------------


def log_lines(run: RunData, inc: Incident) -> list[dict]:
    """Raw lines around the peak's record in the main log (empty when the file is gone); one incident's
    share of `log_lines_all` (raw_lines.py: only from the file that was ingested, hash-checked)."""
    return log_lines_all(run, [inc])[0]


def log_lines_all(run: RunData, incidents: list[Incident]) -> list[list[dict]]:
    """`log_lines` of every incident, located with one filter per signal and read in one pass per file."""
    peaks = peak_lines_from_metrics(run, [(int(i.peak_step), i.attempt) for i in incidents])
    return read_windows(run, peaks, LOG_CONTEXT)


def _finding_note(f: Finding) -> dict:
    if f.facts.get("detector_failed"):
        return {
            "kind": "detector_error",
            "severity": "info",
            "step_start": f.step_start,
            "step_end": f.step_end,
            "peak_step": f.peak_step,
            "summary": f.summary,
            "rank": None,
            "layer": None,
            "detector": f.facts["detector_failed"],
            "traceback": f.facts.get("traceback", ""),
            "evidence": [],
        }
    return {
        "kind": f.facts.get("note_kind", f.kind),
        "severity": f.severity,
        "step_start": f.step_start,
        "step_end": f.step_end,
        "peak_step": f.peak_step,
        "summary": f.summary,
        "rank": f.rank,
        "layer": f.layer,
        "evidence": [e.as_dict() for e in ordered_evidence(f)],
        **({"pattern": f.facts["blip_pattern"]} if f.facts.get("blip_pattern") else {}),
    }


def _alignment_notes(run: RunData, params: Params) -> list[dict]:
    """A note when the batch manifest's steps had to be shifted to match the log's."""
    found = run.manifest_alignment(params.tracing)
    if found is None or not found.offset:
        return []
    steps = run.manifest(params.tracing)[0].get_column("step")
    first, last = int(steps.min()), int(steps.max())  # a run-wide note spans the manifest's steps
    return [
        {
            "kind": "manifest_alignment",
            "severity": "info",
            "step_start": first,
            "step_end": last,
            "peak_step": first,
            "summary": found.summary,
            "rank": None,
            "layer": None,
            "evidence": [
                {
                    "signal": "manifest_step_offset",
                    "value": found.offset,
                    "ratio": found.corr,
                    "baseline": found.corr_as_written,
                    "note": "correlation of step-to-step loss changes",
                }
            ],
        }
    ]


def evidence_order(e: Evidence) -> tuple:
    """Sort key of one finding's evidence rows: the run's own series first, in the contract's metric order
    (`loss`, `grad_norm`, `lr`, ...), then the detector's derived measurements in the order it gave them
    (strongest layer first, ...); a per-rank row after the global one, by rank. Detectors build some rows
    from polars groups whose order is not fixed; this key makes diagnosis.json the same on every run."""
    canonical = CANONICAL_METRICS.index(e.signal) if e.signal in CANONICAL_METRICS else len(CANONICAL_METRICS)
    return canonical, e.rank is not None, e.rank if e.rank is not None else -1


def ordered_evidence(f: Finding) -> list[Evidence]:
    """A finding's evidence in `evidence_order` (stable: equal keys keep the detector's order)."""
    return sorted(f.evidence, key=evidence_order)


def _evidence(inc: Incident) -> list[EvidenceRow]:
    """The incident's evidence rows: finding by finding (strongest first), each in `evidence_order`,
    an identical row given twice kept once."""
    seen, out = set(), []
    for e in (e for f in inc.findings for e in ordered_evidence(f)):
        d = e.as_dict()
        key = json.dumps(json_safe(d), sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(EvidenceRow.from_dict(d))
    return out


def _sample_rows(samples: pl.DataFrame, limit: int) -> list[SampleRow]:
    return [SampleRow.from_dict(row) for row in samples.head(limit).iter_rows(named=True)]


def sample_ranking_note(
    samples: pl.DataFrame, has_sample_losses: bool, tie_tol: float, in_skiplist: bool = False
) -> str | None:
    """Say so when the top suspects tie (scores within `tie_tol`): their order is then arbitrary, not evidence."""
    if samples.height < 2:
        return None
    scores = samples.get_column("score")
    tied = int((scores >= scores[0] - tie_tol).sum())
    if "place" in samples.columns and samples.get_column("place").null_count() == 0:
        tied = int((samples.get_column("place") == samples.get_column("place")[0]).sum())  # evidence broke the rest
    if tied < 2:
        return None
    why = "the manifest has no per-sample losses" if not has_sample_losses else "nothing in the manifest separates them"
    return f"the top {tied} samples tie ({why}): they share place 1 and their order is not evidence" + (
        "; the skip list keeps all of them" if in_skiplist else ""
    )


def _extent(steps: dict, cov: dict) -> str:
    """What a healthy verdict covered: the logged steps, or the records of a log that prints no step number."""
    if steps["count"]:
        return f"{steps['count']} logged steps"
    records = sum((cov.get("records") or {}).values())
    return f"{records} records (the log prints no step numbers)" if records else "the records read"


def _files(coverage: dict) -> str:
    names = list((coverage.get("records") or {}).keys())
    if not names:
        return "the inputs"
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _headline(real: list[dict]) -> dict:
    """The incident the verdict names: among the most severe, the one holding the run's first non-finite
    step when there is one (a NaN anchors the headline), else the earliest."""
    worst = max(severity_rank(i["severity"]) for i in real)
    top = [i for i in real if severity_rank(i["severity"]) == worst]
    nan = [i for i in top if i.get("first_nonfinite_step") is not None]
    return min(nan, key=lambda i: i["first_nonfinite_step"]) if nan else top[0]


def verdict(incidents: list[dict], steps: dict, coverage: dict | None = None) -> dict:
    """status, root_cause, summary (and `coverage` when given; CONTRACT.md).

    `incomplete` when a detector or stage failed; else `unstable` / `degraded` by the worst incident;
    else `healthy` only when a loss or grad-norm series was read, `inconclusive` when not."""
    real = [i for i in incidents if i["severity"] in ("warning", "critical")]
    cov = coverage or {}
    failed = list(cov.get("detectors_failed") or []) + list(cov.get("stages_failed") or [])
    judged = {"loss", "grad_norm"} & set(cov.get("signals") or []) - set(cov.get("unjudged") or {})
    seen = coverage is None or bool(judged)
    out: dict
    if real:
        top = _headline(real)
        status = "unstable" if top["severity"] == "critical" else "degraded"
        n_crit = sum(1 for i in real if i["severity"] == "critical")
        nf = top.get("first_nonfinite_step")
        where = (
            f"the first non-finite value at step {nf} ({top['id']}, {top['kind']})"
            if nf is not None
            else f"the first most severe ({top['id']}, {top['kind']} peaking at step {top['peak_step']})"
        )
        summary = (
            f"{status.capitalize()}: {len(real)} incident(s), {n_crit} critical; {where} points at "
            f"{top['root_cause']} ({top['confidence']:.0%})."
        )
        out = {"status": status, "root_cause": top["root_cause"], "summary": summary}
    elif not seen and cov.get("unjudged"):
        why = "; ".join(f"{k}: {v}" for k, v in cov["unjudged"].items())
        out = {
            "status": "inconclusive",
            "root_cause": None,
            "summary": f"Inconclusive: the series read cannot be judged ({why}). The run cannot be called healthy.",
        }
    elif not seen:
        unparsed = int(cov.get("unparsed_lines") or 0)
        out = {
            "status": "inconclusive",
            "root_cause": None,
            "summary": (
                f"Inconclusive: no loss or grad-norm series could be read from {_files(cov)}; "
                f"{unparsed} line(s) were not recognised. The run cannot be called healthy."
            ),
        }
    else:
        out = {
            "status": "healthy",
            "root_cause": None,
            "summary": f"No incident at warning or above in {_extent(steps, cov)}.",
        }
        if cov.get("limited"):
            out["summary"] += " Judged with limits: " + "; ".join(f"{k}: {v}" for k, v in cov["limited"].items()) + "."
    if failed:
        out = {
            "status": "incomplete",
            "root_cause": out["root_cause"],
            "summary": (
                f"Incomplete: {', '.join(failed)} failed (a bug in spikeforensics; the traceback is in the "
                f"diagnosis notes); the figures are partial. What ran says: {out['summary']}"
            ),
        }
    if coverage is not None:
        out["coverage"] = coverage
    return out


def coverage(
    run: RunData,
    params: Params,
    detectors_run: list[str],
    detectors_failed: list[str],
    stages_failed: list[str] | None = None,
    judged: RunData | None = None,
) -> dict:
    """What was read (CONTRACT.md `verdict.coverage`): signals with a series, records per source,
    unparsed lines, detectors run and failed; extras: `series_records`, `events`, `stages_failed`,
    `unjudged` (series read that cannot be judged) and `limited` (series judged only in part). `run` is the run
    as read; `judged` (default `run`) the runs that were judged (`detect.runs_in_log.judged_run`)."""

    loss_name = run.resolve("loss")  # a training loss logged under its own name counts as the loss
    name = pl.col("name").replace(loss_name, "loss") if loss_name != "loss" else pl.col("name")

    # lazily, one metric at a time: only the columns read are taken out of the long table, and each
    # distinct-record count hashes one metric's rows (a count over all metrics at once costs ~1 GB
    # per million steps)
    def read(metrics: pl.LazyFrame) -> pl.LazyFrame:
        return metrics.select(name.alias("name"), "source", "attempt", "record", "value").filter(
            pl.col("record").is_not_null() & pl.col("value").is_finite()
        )

    rows = read(run.metrics.lazy())
    held = in_slices(
        run.metrics.lazy(),
        lambda piece: read(piece).filter(pl.col("name").is_in(CANONICAL_METRICS)).select("name", "source").unique(),
        pl.DataFrame.unique,
    )
    series = {}
    for metric in CANONICAL_METRICS:
        # distinct (source, attempt, record): the distinct records of each attempt, summed, one source holding the
        # metric at a time (an integer set per attempt, no strings in the key: ~0.6 GB less at 5M steps than a set
        # of structs, 0.2 GB less at 7.2M records than keying by source too)
        n = sum(
            rows.filter((pl.col("name") == metric) & (pl.col("source") == source))
            .group_by("attempt")
            .agg(pl.col("record").n_unique())
            .select(pl.col("record").sum())
            .collect()
            .item()
            or 0
            for source in held.filter(pl.col("name") == metric).get_column("source").to_list()
        )
        if n:
            series[metric] = int(n)
    # records whose value is NaN/inf, per metric (a loss read but never finite is "read, none finite", not "not read")
    nonfinite = dict(
        run.metrics.lazy()
        .filter(pl.col("record").is_not_null() & pl.col("value").is_not_null() & ~pl.col("value").is_finite())
        .select(name.alias("name"), "source", "attempt", "record")  # renamed after the filter: on the few rows left
        .filter(pl.col("name").is_in(CANONICAL_METRICS))
        .group_by("name")
        .agg(pl.struct("source", "attempt", "record").n_unique().alias("n"))
        .collect()
        .iter_rows()
    )
    ordered = [n for n in CANONICAL_METRICS if series.get(n, 0) >= params.coverage.min_series_records]
    signals = ordered + [t for t in ("layers", "batches", "telemetry", "events") if getattr(run, t).height]
    if run.sources.height:
        src = run.sources.group_by("source", maintain_order=True).agg(pl.col("records").sum(), pl.col("unparsed").sum())
        records = {r["source"]: int(r["records"] or 0) for r in src.iter_rows(named=True)}
        unparsed = int(src.get_column("unparsed").fill_null(0).sum())
    else:  # a run built in memory: step records per source from the metrics
        rec = run.metrics.lazy().filter(pl.col("record").is_not_null()).select("source", "attempt", "record").collect()
        per = rec.group_by("source", maintain_order=True).agg(pl.struct("attempt", "record").n_unique().alias("n"))
        records = {str(r["source"]): int(r["n"]) for r in per.iter_rows(named=True)}
        unparsed = 0
    events = {}
    if run.events.height:
        events = {
            r["kind"]: int(r["len"]) for r in run.events.group_by("kind").len().sort("kind").iter_rows(named=True)
        }
    unjudged, limited = {}, {}
    why = (judged or run).loss_without_ratio() if "loss" in signals else None
    if why == "signed" and _signed_loss_judged(judged or run, params):
        limited["loss"] = (
            f"{loss_name} takes negative values, a signed objective with no ratio scale: judged for non-finite "
            "values, a runaway by orders and jumps far past its whole range, not for spikes or drifts"
        )
    elif why == "signed":
        unjudged["loss"] = (
            f"{loss_name} takes negative values, a signed objective with no ratio scale (spike tests skipped)"
        )
    if why == "adversarial":
        limited["loss"] = (
            f"{loss_name} is one side of a GAN's generator/discriminator pair, a game's score with no ratio "
            "scale: judged for non-finite values and jumps far past its whole range, not for spikes or drifts"
        )
    return {
        "signals": signals,
        "unjudged": unjudged,
        **({"limited": limited} if limited else {}),  # only when a series is judged in part
        "records": records,
        "unparsed_lines": unparsed,
        "detectors_run": list(detectors_run),
        "detectors_failed": list(detectors_failed),
        "stages_failed": list(stages_failed or []),
        "series_records": {n: series[n] for n in CANONICAL_METRICS if n in series},
        **(
            {"series_nonfinite": {n: int(nonfinite[n]) for n in CANONICAL_METRICS if n in nonfinite}}
            if nonfinite
            else {}
        ),
        "events": events,
    }


def _signed_loss_judged(run: RunData, params: Params) -> bool:
    """Is a signed loss judged in part (`limited`: a healthy verdict is possible) rather than not at all? A
    supervised objective that goes negative (nnU-Net's Dice + cross-entropy, a flow's NLL bound) of at least
    `signed_jump.window` finite records: its non-finite values, a runaway and the jumps far past its range are
    what breaks such a run. Not an RL objective (a policy loss's level says nothing of the run's health), nor a
    short excerpt, whose range is too little to call a value impossible: those stay `unjudged` (inconclusive)."""
    if run.loss_is_reinforcement() or run.loss_is_policy():
        return False
    finite = run.series("loss").filter(pl.col("value").is_finite()).height
    return finite >= params.signed_jump.window


def skiplist(run_id: str, incidents: list[dict], params: Params) -> dict:
    """What a training script would skip on resume: steps and samples of data-caused incidents."""
    steps: set[int] = set()
    ids: list[str] = []
    reasons = []
    for inc in incidents:
        if inc["root_cause"] not in DATA_LABELS or inc["confidence"] < params.tracing.skip_min_confidence:
            continue
        listed = pl.DataFrame(
            inc.get("samples") or [], schema_overrides={"score": pl.Float64, "own_outlier": pl.Boolean}
        )
        picked = (
            skip_candidates(
                listed,
                params.tracing.skip_score_frac,
                tie_tol=params.tracing.tie_tol,
                max_outliers=params.tracing.skip_max_outliers,
            )
            if inc.get("samples")
            else []
        )
        seen = set(ids)
        ids += [s for s in picked if s not in seen]
        # implicated_steps already holds the later steps of the samples that stand out on their own loss
        steps.update(inc.get("implicated_steps", []))
        reasons.append({"incident": inc["id"], "steps": inc.get("implicated_steps", []), "sample_ids": picked})
    return {"run_id": run_id, "steps": sorted(steps), "sample_ids": ids, "reasons": reasons}


def fail_on_exit_code(diagnosis: dict, severity: str | None) -> int:
    """3 when an incident at or above `severity` exists (for `--fail-on`), else 0."""
    if not severity:
        return 0
    if severity not in SEVERITIES:
        raise ValueError(f"--fail-on: unknown severity {severity!r} (one of {', '.join(SEVERITIES)})")
    level = severity_rank(severity)
    hit = any(severity_rank(i["severity"]) >= level and i["severity"] != "info" for i in diagnosis["incidents"])
    return 3 if hit else 0


def skiplist_path(json_path: str | Path) -> Path:
    """The skip list beside a diagnosis JSON, named after it (CONTRACT.md): `X.json` -> `X.skiplist.json`."""
    json_path = Path(json_path)
    stem = json_path.name[: -len(".json")] if json_path.name.endswith(".json") else json_path.name
    return json_path.with_name(f"{stem}.skiplist.json")


def write_outputs(diagnosis: dict, json_path: str | Path) -> tuple[Path, Path]:
    """Write the diagnosis JSON and its skip list beside it (`X.json`, `X.skiplist.json`), each
    atomically (a full disk or a kill leaves the old file or none, never half a file)."""
    json_path = Path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(json_path, dumps(diagnosis, indent=2) + "\n")
    skip = diagnosis.get("skiplist") or {"run_id": diagnosis["run_id"], "steps": [], "sample_ids": []}
    skip_path = skiplist_path(json_path)
    write_atomic(skip_path, dumps(skip, indent=2) + "\n")
    return json_path, skip_path


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`."""
    from spikeforensics.store import temp_path  # named so a later command can sweep it after a kill

    tmp = temp_path(path)
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# --- the whole diagnosis -----------------------------------------------------------------------


def _incident_json(
    inc: Incident, run: RunData, ctx, tc, ruleset, params: Params, real: list[Incident], raw_lines: list[dict]
) -> DiagnosedIncident:
    ranks_f = rank_features(inc, ctx, params.attribution)
    confined = ranks_f["peak_rank"] if ranks_f["rank_confined"] and ranks_f["peak_rank"] >= 0 else None
    samples = rank_samples(inc, tc, params.tracing, confined)
    feats = incident_features(inc, run, ctx, tc, params, real, samples=samples)
    att = attribute(ruleset, feats, params.attribution, params)
    ranks = list(inc.ranks) or ([feats["peak_rank"]] if confined is not None else [])
    layers = list(inc.layers)
    if feats["layer_hidden"] and feats["top_layer"] and feats["top_layer"] not in layers:
        layers.append(feats["top_layer"])
    sample_evidence = bool(
        feats["sample_loss_outlier"]
        or feats["sample_loss_nonfinite"]
        or feats["sample_recurrence"]
        or feats["replay_recurred"]
    )
    implicated = att.root_cause in (*DATA_LABELS, "unknown") or (sample_evidence and att.root_cause != "hardware_fault")
    # a data incident lists every sample that stands out on its own loss (they all go to the skip list)
    samples_list = _sample_rows(
        samples, listed_count(samples, params.tracing) if att.root_cause in DATA_LABELS else params.tracing.max_samples
    )
    return DiagnosedIncident(
        **_incident_head(inc),
        ranks=[int(r) for r in ranks],
        layers=layers,
        root_cause=att.root_cause,
        confidence=att.confidence,
        alternatives=[Alternative.from_dict(a) for a in att.alternatives],
        explanation=att.explanation,
        sample_ids=[s.sample_id for s in samples_list] if implicated else [],
        evidence=_evidence(inc),
        actions=att.actions,
        # extras
        root_cause_detail=att.detail,
        attempt=int(inc.attempt),
        first_nonfinite_step=inc.facts.get("first_nonfinite_step"),
        # onset..peak and the step before, plus later steps of the incident holding a sample that stands out
        implicated_steps=sorted(
            set(implicated_steps(inc, params.tracing, tc.interval))
            | {int(s.step) for s in samples_list if s.own_outlier}
        ),
        consumed_samples_range=consumed_samples_range(run, inc, params.tracing, tc.interval),
        samples=samples_list,
        sample_ranking_note=sample_ranking_note(
            samples,
            bool(feats["has_sample_losses"]),
            params.tracing.tie_tol,
            in_skiplist=att.root_cause in DATA_LABELS and att.confidence >= params.tracing.skip_min_confidence,
        )
        if implicated
        else None,
        features=feats,
        matched_rules=att.matched,
        gated_labels=att.gated,
        label_scores=att.scores,
        findings=[f.summary for f in inc.findings],
        log_lines=raw_lines,
    )


def _incident_head(inc: Incident) -> dict:
    return {
        "id": inc.id,
        "kind": inc.kind,
        "kinds": list(inc.kinds),
        "severity": inc.severity,
        "step_start": int(inc.step_start),
        "step_end": int(inc.step_end),
        "peak_step": int(inc.peak_step),
    }


def _bare_incident(inc: Incident, error: str) -> DiagnosedIncident:
    """An incident whose attribution failed: detected, not explained (the diagnosis is `incomplete`)."""
    return DiagnosedIncident(
        **_incident_head(inc),
        ranks=[int(r) for r in inc.ranks],
        layers=list(inc.layers),
        root_cause="unknown",
        confidence=0.0,
        alternatives=[],
        explanation=f"Attribution failed for this incident (a bug in spikeforensics: {error}).",
        sample_ids=[],
        evidence=_evidence(inc),
        actions=[],
        root_cause_detail=None,
        attempt=int(inc.attempt),
        first_nonfinite_step=inc.facts.get("first_nonfinite_step"),
        implicated_steps=[],
        samples=[],
        findings=[f.summary for f in inc.findings],
        log_lines=[],
    )


class _Stages:
    """Runs the diagnosis stages; a stage that raises is recorded (name, traceback) instead of aborting."""

    def __init__(self):
        self.failed: list[str] = []
        self.notes: list[dict] = []

    def run(self, name: str, fn, default):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - a broken stage makes the diagnosis incomplete, never healthy
            self.failed.append(name)
            self.notes.append(
                {
                    "kind": "stage_error",
                    "severity": "info",
                    "step_start": 0,
                    "step_end": 0,
                    "peak_step": 0,
                    "summary": f"stage {name} failed (a bug in spikeforensics): {type(exc).__name__}: {exc}",
                    "rank": None,
                    "layer": None,
                    "detector": name,
                    "traceback": "".join(traceback.format_exception(exc)),
                    "evidence": [],
                }
            )
            return default(exc) if callable(default) else default


def build_diagnosis(
    run: RunData,
    incidents: list[Incident],
    notes: list[Finding],
    params: Params,
    rule_dirs: list[str | Path] | None = None,
    detectors_run: list[str] | None = None,
    whole: RunData | None = None,
) -> dict:
    """The diagnosis.json dict: `run` is what the incidents are attributed on, `whole` (default `run`) the run as
    read, whose step range and coverage the verdict states (they differ for a log holding copies of one run:
    `detect.runs_in_log.judged_run`)."""
    from spikeforensics.detect import DETECTORS, failed_detectors

    whole = run if whole is None else whole

    ruleset = load_rules(rule_dirs)
    stages = _Stages()
    real = [i for i in incidents if i.severity != "info"]  # in run order (detect/incidents.py numbers them so)
    info = [i for i in incidents if i.severity == "info"]
    ctx = build_context(run, real, params)
    tc = build_trace_context(run, real, ctx.unhealthy, params)
    first, last, count = whole.step_range()
    steps = {"first": first, "last": last, "count": count}

    raw = stages.run("log lines", lambda: log_lines_all(run, real), lambda exc: [[] for _ in real])
    out_incidents = [
        stages.run(
            f"attribution of {inc.id}",
            lambda inc=inc, lines=lines: _incident_json(inc, run, ctx, tc, ruleset, params, real, lines),
            lambda exc, inc=inc: _bare_incident(inc, f"{type(exc).__name__}: {exc}"),
        )
        for inc, lines in zip(real, raw)
    ]
    calibration = stages.run("calibration", lambda: calibrate(run, ctx, params.calibration), {})
    extra_notes = stages.run("alignment notes", lambda: _alignment_notes(run, params), [])
    cov = coverage(
        whole,
        params,
        detectors_run if detectors_run is not None else [n for n, _ in DETECTORS],
        failed_detectors(notes),
        stages.failed,
        judged=run,
    )
    incident_dicts = [i.to_dict(safe=False) for i in out_incidents]
    return Diagnosis(
        schema_version=SCHEMA_VERSION,
        tool_version=__version__,
        run_id=run.run_id,
        steps=StepRange(**steps),
        verdict=Verdict.from_dict(verdict(incident_dicts, steps, cov)),
        incidents=out_incidents,
        calibration=Calibration.from_dict(calibration),
        notes=[_finding_note(f) for f in notes]
        + [_finding_note(f) for i in info for f in i.findings]
        + extra_notes
        + stages.notes,
        rules=ruleset.files,
        skiplist=SkipList.from_dict(skiplist(run.run_id, incident_dicts, params)),
    ).to_dict()
