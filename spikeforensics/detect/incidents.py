"""Group findings that overlap in steps into incidents with one severity.

Findings at warning or above that overlap (or come within `merge_gap` steps, at least one record) on the same
attempt form one incident: severity = the highest, kind = the strongest finding's kind
(severity, then `kind_priority`, then score). Findings that span a stretch of the run
(`facts["scope"] == "run"`: a clip rate, a rising zero share) join an event only when they
start with it (within `merge_gap`), else group with each other, so a run-wide condition
does not swallow every spike that happens during it. `info` findings never join an
incident: they stay notes (see `detect_incidents`).

Two shapes override the priority order: a `divergence` is the incident's kind (the spikes
inside it are its symptoms, not separate events; the peak stays the strongest finding's), and the first non-finite step anchors the
incident when it comes at or before the strongest finding's peak (NaN from the first
optimizer steps is not headlined as a spike): kind `nonfinite`, peak = that step. A NaN that
follows a spike (the propagation DOMAIN describes) leaves the spike as the kind and peak.
Fact `first_nonfinite_step` is set on every incident with a non-finite finding.
"""

from __future__ import annotations

from spikeforensics.detect.base import Finding, Incident, severity_rank


def strength(finding: Finding, priority: tuple) -> tuple:
    order = priority.index(finding.kind) if finding.kind in priority else len(priority)
    return severity_rank(finding.severity), -order, finding.score


def _clusters(findings: list[Finding], gap: int) -> list[list[Finding]]:
    out: list[list[Finding]] = []
    for f in sorted(findings, key=lambda f: (f.attempt, f.step_start, f.step_end)):
        last = out[-1] if out else None
        if last and last[0].attempt == f.attempt and f.step_start <= max(x.step_end for x in last) + gap:
            last.append(f)
        else:
            out.append([f])
    return out


RECOVERY_ORDER = ("fast", "slow", "never")  # from the best outcome to the worst


def _incident(group: list[Finding], priority: tuple) -> Incident:
    group = sorted(group, key=lambda f: strength(f, priority), reverse=True)
    top = group[0]
    kinds = sorted({f.kind for f in group}, key=lambda k: priority.index(k) if k in priority else len(priority))
    kinds.remove(top.kind)
    ranks, layers, facts = [], [], {}
    for f in group:
        if f.rank is not None and f.rank not in ranks:
            ranks.append(f.rank)
        for layer in [f.layer, *f.facts.get("layers", [])]:
            if layer is not None and layer not in layers:
                layers.append(layer)
        for key, value in f.facts.items():
            facts.setdefault(key, value)
    # the incident's recovery is its findings' worst known one: a spike whose log ends before it could recover
    # ("unknown") merged with a climb still rising at the end ("never") did not recover
    known = [f.facts["recovery"] for f in group if f.facts.get("recovery") in RECOVERY_ORDER]
    if known:
        facts["recovery"] = max(known, key=RECOVERY_ORDER.index)
    kind, peak = top.kind, top.peak_step
    nonfinite = [f.step_start for f in group if f.kind == "nonfinite"]
    first_nf = min(nonfinite) if nonfinite else None
    div = [f for f in group if f.kind == "divergence"]
    if div and (first_nf is None or first_nf >= div[0].step_start):
        kind = "divergence"  # the peak stays the strongest finding's (a spike or the scale's low inside it)
        facts["onset_step"] = div[0].step_start
    elif first_nf is not None and first_nf <= peak:
        kind, peak = "nonfinite", first_nf
    if first_nf is not None:
        facts["first_nonfinite_step"] = first_nf
    if kind != top.kind:
        kinds = [k for k in [top.kind, *kinds] if k != kind]
    return Incident(
        id="",
        kind=kind,
        kinds=[kind, *kinds],
        severity=max((f.severity for f in group), key=severity_rank),
        step_start=min(f.step_start for f in group),
        step_end=max(f.step_end for f in group),
        peak_step=peak,
        findings=group,
        ranks=ranks,
        layers=layers,
        attempt=top.attempt,
        facts=facts,
    )


def group_incidents(findings: list[Finding], params, interval: int = 1) -> list[Incident]:
    """Incidents (warning and above) in step order, ids inc-1, inc-2, ... Findings of neighbouring records
    merge also in a log that prints every `interval` steps (the gap is at least one record)."""
    ip = params.incidents
    gap = max(ip.merge_gap, interval)
    serious = [f for f in findings if severity_rank(f.severity) >= severity_rank("warning")]
    point = [f for f in serious if f.facts.get("scope") != "run"]
    wide = [f for f in serious if f.facts.get("scope") == "run"]
    clusters = _clusters(point, gap)
    alone = []
    for f in wide:  # a run-wide condition joins the event it starts with, else stands apart
        home = next(
            (
                c
                for c in clusters
                if c[0].attempt == f.attempt and abs(min(x.step_start for x in c) - f.step_start) <= gap
            ),
            None,
        )
        (home if home is not None else alone).append(f)
    clusters += _clusters(alone, gap)
    incidents = [_incident(g, ip.kind_priority) for g in clusters]
    # run order: a restarted counter (a new attempt) comes after the attempt before it, whatever its steps
    incidents.sort(key=lambda i: (i.attempt, i.step_start, i.step_end))
    for n, inc in enumerate(incidents, 1):
        inc.id = f"inc-{n}"
    return incidents
