"""Score diagnoses against labelled ground truth (the accuracy benchmark's arithmetic).

Pure functions, no I/O: `score_run(diagnosis, truth)` compares one run's diagnosis
(the `diagnosis.json` dict of CONTRACT.md, or any dict with an `incidents` list) with
its `ground_truth.json` dict and returns a `RunScore`; `aggregate(scores)` pools many
runs into the tables of `benchmarks/README.md`; `render_markdown(table)` prints them.

Definitions (also written into the README by `benchmarks/accuracy.py`):

- Only predicted incidents at severity `warning` or `critical` count (CONTRACT.md).
- A predicted incident P *matches* a truth incident T when P's steps overlap
  `[T.step_start - tol, T.step_end + tol]` and the two `kinds` lists share a kind
  (a `nonfinite` found inside a labelled `hard_spike` window whose truth lists both
  kinds is a hit, not a miss plus a false alarm).
- Recall of kind K: truth incidents whose primary `kind` is K that some prediction
  matches, over all truth incidents of primary kind K. Each truth incident counts once.
- Precision of kind K: predicted incidents of primary `kind` K (all runs, clean runs
  included) that match some truth incident, over all predicted incidents of kind K.
  Several predictions matching one truth incident all count as correct; the extra
  ones are reported as `split`.
- False incidents on clean runs: predicted incidents on runs with `healthy: true`.
- Root cause top-1: for each matched truth incident, the best matching prediction
  (same primary kind first, then higher severity, then closest peak) has
  `root_cause` equal to the truth label.
- Hardware blamed on data: matched truth `hardware_fault` incidents whose prediction
  says `data_*`.
- Sample recall@k (k=5): for matched truth `data_outlier` incidents with
  `sample_ids`: |first k predicted sample_ids ∩ truth| / min(k, |truth|); also split by
  the truth file's `per_sample_losses` (did the manifest record them).
- Expected recall@k with ties in random order: suspects with equal scores form a tie
  group (the product breaks it by sample ID); a group that straddles position k
  contributes its labelled share of the slots it gets.
- Skip-list recall: for the same incidents, |skip-list samples of the matched prediction
  ∩ truth| / |truth| (the `skiplist.reasons` entry of that incident), with its size.
- Peak error: |predicted peak_step - truth peak_step| of the best match (median per kind).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

COUNTED_SEVERITIES = ("warning", "critical")
SEVERITY_ORDER = {"info": 0, "warning": 1, "critical": 2}
DEFAULT_TOL_STEPS = 5  # a detector's window may start a few steps off the labelled onset
DEFAULT_K = 5  # implicated samples a user would inspect first
HEADLINE_KINDS = ("hard_spike", "nonfinite")  # the kinds the baselines also detect

# Targets of the tracker issues: reported in the README, never asserted by CI.
TARGET_F1 = 0.95
TARGET_TOP1 = 0.90
TARGET_SAMPLE_RECALL = 0.95


@dataclass
class TruthOutcome:
    """One ground-truth incident and what the diagnosis made of it."""

    kind: str
    kinds: list[str]
    step_start: int
    step_end: int
    peak_step: int
    root_cause: str | None
    detected: bool = False
    pred_id: str | None = None  # best matching prediction
    pred_kind: str | None = None
    pred_root_cause: str | None = None
    n_matches: int = 0  # predictions matching it (> 1: the detector split it)
    peak_error: int | None = None  # |predicted peak - truth peak| in steps, when detected
    truth_sample_ids: list[str] = field(default_factory=list)
    sample_recall: float | None = None  # None when not applicable
    sample_recall_ties: float | None = None  # recall@k expected with tied suspects in random order
    skip_recall: float | None = None  # share of the truth samples the skip list of the matched prediction holds
    skip_hits: int | None = None  # truth samples in that skip-list entry
    skip_size: int | None = None  # samples in that skip-list entry
    per_sample_losses: bool | None = None  # the run's manifest recorded per-sample losses (from the truth file)


@dataclass
class PredOutcome:
    """One counted predicted incident and whether it matched some truth incident."""

    id: str
    kind: str
    kinds: list[str]
    severity: str
    step_start: int
    step_end: int
    peak_step: int
    root_cause: str | None
    matched: bool = False
    truth_index: int | None = None


@dataclass
class RunScore:
    run: str
    set: str
    healthy: bool
    detector: str
    truths: list[TruthOutcome]
    preds: list[PredOutcome]
    error: str | None = None  # the diagnosis could not be made (scored as no predictions)

    @property
    def false_on_clean(self) -> int:
        return len(self.preds) if self.healthy else 0

    def as_dict(self) -> dict:
        return asdict(self) | {"false_on_clean": self.false_on_clean}


# -- one run ----------------------------------------------------------------------------


def _kinds(item: dict) -> list[str]:
    kinds = list(item.get("kinds") or [])
    if item.get("kind") and item["kind"] not in kinds:
        kinds.insert(0, item["kind"])
    return kinds


def _int(value, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _pred(item: dict, index: int) -> PredOutcome:
    start = _int(item.get("step_start"))
    end = _int(item.get("step_end"), start)
    return PredOutcome(
        id=str(item.get("id") or f"pred-{index + 1}"),
        kind=str(item.get("kind")),
        kinds=_kinds(item),
        severity=str(item.get("severity", "warning")),
        step_start=start,
        step_end=end,
        peak_step=_int(item.get("peak_step"), start),
        root_cause=item.get("root_cause"),
    )


def _truth(item: dict) -> TruthOutcome:
    start = _int(item.get("step_start"))
    end = _int(item.get("step_end"), start)
    return TruthOutcome(
        kind=str(item.get("kind")),
        kinds=_kinds(item),
        step_start=start,
        step_end=end,
        peak_step=_int(item.get("peak_step"), start),
        root_cause=item.get("root_cause"),
        truth_sample_ids=[str(s) for s in item.get("sample_ids") or []],
    )


def _matches(p: PredOutcome, t: TruthOutcome, tol: int) -> bool:
    overlaps = p.step_start <= t.step_end + tol and p.step_end >= t.step_start - tol
    return overlaps and bool(set(p.kinds) & set(t.kinds))


def sample_recall_at_k(predicted: list, truth: list, k: int = DEFAULT_K) -> float | None:
    """|first k predicted ∩ truth| / min(k, |truth|); None when the truth lists no sample."""
    truth_set = {str(s) for s in truth}
    if not truth_set:
        return None
    top = {str(s) for s in list(predicted or [])[:k]}
    return len(top & truth_set) / min(k, len(truth_set))


def expected_recall_at_k(samples: list[dict], truth: list, k: int = DEFAULT_K, tie_tol: float = 1e-9) -> float | None:
    """recall@k expected when samples with equal scores (within `tie_tol` of the previous one) are put
    in random order, i.e. without the luck of the tie-break by ID: a tie group that straddles position k
    contributes its labelled share of the slots it gets. `samples`: the prediction's ranked `samples`
    (`sample_id`, `score`). None when the truth lists no sample."""
    truth_set = {str(s) for s in truth}
    if not truth_set:
        return None
    groups: list[list[str]] = []
    last = None
    for row in samples:
        score = row.get("score")
        if groups and score is not None and last is not None and last - score <= tie_tol:
            groups[-1].append(str(row["sample_id"]))
        else:
            groups.append([str(row["sample_id"])])
        last = score
    hits, slots = 0.0, k
    for group in groups:
        if slots <= 0:
            break
        take = min(slots, len(group))
        hits += take * sum(x in truth_set for x in group) / len(group)
        slots -= take
    return hits / min(k, len(truth_set))


def skiplist_samples(diagnosis: dict, incident_id) -> list[str]:
    """Sample IDs the diagnosis' skip list holds for one incident (its `reasons` entry)."""
    reasons = ((diagnosis or {}).get("skiplist") or {}).get("reasons") or []
    return [str(x) for r in reasons if r.get("incident") == incident_id for x in r.get("sample_ids") or []]


def score_run(
    diagnosis: dict,
    truth: dict,
    tol_steps: int = DEFAULT_TOL_STEPS,
    k: int = DEFAULT_K,
    detector: str = "spikeforensics",
    run: str | None = None,
    error: str | None = None,
) -> RunScore:
    """Score one run's diagnosis against its ground truth (see the module docstring)."""
    raw_preds = [
        i for i in (diagnosis or {}).get("incidents", []) if i.get("severity", "warning") in COUNTED_SEVERITIES
    ]
    preds = [_pred(item, n) for n, item in enumerate(raw_preds)]
    raw_truths = truth.get("incidents") or []
    truths = [_truth(item) for item in raw_truths]
    for t in truths:
        hits = [(pi, p) for pi, p in enumerate(preds) if _matches(p, t, tol_steps)]
        t.n_matches = len(hits)
        if not hits:
            continue
        pi, best = min(
            hits,
            key=lambda h: (
                h[1].kind != t.kind,
                -SEVERITY_ORDER.get(h[1].severity, 0),
                abs(h[1].peak_step - t.peak_step),
                h[1].step_start,
            ),
        )
        t.detected = True
        t.pred_id, t.pred_kind, t.pred_root_cause = best.id, best.kind, best.root_cause
        t.peak_error = abs(best.peak_step - t.peak_step)
        if t.root_cause == "data_outlier" and t.truth_sample_ids:
            t.sample_recall = sample_recall_at_k(raw_preds[pi].get("sample_ids") or [], t.truth_sample_ids, k)
            t.sample_recall_ties = expected_recall_at_k(raw_preds[pi].get("samples") or [], t.truth_sample_ids, k)
            skipped = skiplist_samples(diagnosis, raw_preds[pi].get("id"))
            t.skip_hits = len(set(skipped) & set(t.truth_sample_ids))
            t.skip_recall = t.skip_hits / len(set(t.truth_sample_ids))
            t.skip_size = len(skipped)
            if "per_sample_losses" in truth:
                t.per_sample_losses = bool(truth["per_sample_losses"])
    for p in preds:
        hits = [ti for ti, t in enumerate(truths) if _matches(p, t, tol_steps)]
        if hits:
            p.matched = True
            p.truth_index = min(hits, key=lambda ti: abs(truths[ti].peak_step - p.peak_step))
    return RunScore(
        run=run or str(truth.get("scenario") or diagnosis.get("run_id") or "run"),
        set=str(truth.get("set") or ""),
        healthy=bool(truth.get("healthy", not truths)),
        detector=detector,
        truths=truths,
        preds=preds,
        error=error,
    )


# -- many runs --------------------------------------------------------------------------


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _mean(values: list) -> float | None:
    return sum(values) / len(values) if values else None


def _median(values: list) -> float | None:
    if not values:
        return None
    v = sorted(values)
    mid = len(v) // 2
    return float(v[mid]) if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def _f1(p: float | None, r: float | None) -> float | None:
    """F1; an undefined side (no truth, or no prediction, of the kind) counts as 0; None if both are."""
    if p is None and r is None:
        return None
    p, r = p or 0.0, r or 0.0
    return 2 * p * r / (p + r) if p + r else 0.0


def detection_rows(scores: list[RunScore]) -> dict[str, dict]:
    """Per kind: n_truth, detected, recall, n_pred, correct, precision, f1, split, peak_error (median)."""
    kinds = sorted({t.kind for s in scores for t in s.truths} | {p.kind for s in scores for p in s.preds})
    rows = {}
    for kind in kinds + ["all"]:

        def of(x, kind=kind) -> bool:
            return kind == "all" or x.kind == kind

        truths = [t for s in scores for t in s.truths if of(t)]
        preds = [p for s in scores for p in s.preds if of(p)]
        detected = sum(t.detected for t in truths)
        correct = sum(p.matched for p in preds)
        recall, precision = _ratio(detected, len(truths)), _ratio(correct, len(preds))
        rows[kind] = {
            "n_truth": len(truths),
            "detected": detected,
            "recall": recall,
            "n_pred": len(preds),
            "correct": correct,
            "precision": precision,
            "f1": _f1(precision, recall),
            "split": sum(max(0, t.n_matches - 1) for t in truths),
            "peak_error": _median([t.peak_error for t in truths if t.peak_error is not None]),
        }
    return rows


def clean_row(scores: list[RunScore]) -> dict:
    clean = [s for s in scores if s.healthy]
    return {
        "runs": len(clean),
        "false_incidents": sum(s.false_on_clean for s in clean),
        "runs_with_false": sum(s.false_on_clean > 0 for s in clean),
        "worst": max(clean, key=lambda s: s.false_on_clean).run
        if clean and any(s.false_on_clean for s in clean)
        else None,
    }


def root_cause_rows(scores: list[RunScore]) -> dict[str, dict]:
    """Per truth label: n_truth, matched, correct, accuracy (top-1 over matched), confusions."""
    truths = [t for s in scores for t in s.truths if t.root_cause]
    rows = {}
    for label in sorted({t.root_cause for t in truths}) + ["all"]:
        group = [t for t in truths if label == "all" or t.root_cause == label]
        matched = [t for t in group if t.detected]
        correct = sum(t.pred_root_cause == t.root_cause for t in matched)
        wrong: dict[str, int] = {}
        for t in matched:
            if t.pred_root_cause != t.root_cause:
                wrong[str(t.pred_root_cause)] = wrong.get(str(t.pred_root_cause), 0) + 1
        rows[label] = {
            "n_truth": len(group),
            "matched": len(matched),
            "correct": correct,
            "accuracy": _ratio(correct, len(matched)),
            "predicted_instead": dict(sorted(wrong.items(), key=lambda kv: -kv[1])),
        }
    return rows


def _hardware_blamed_on_data(group: list[RunScore]) -> dict:
    """Detected hardware-fault truths, and how many of them the prediction blamed on data."""
    hw = [t for s in group for t in s.truths if t.root_cause == "hardware_fault" and t.detected]
    return {"matched": len(hw), "blamed_on_data": sum(str(t.pred_root_cause or "").startswith("data_") for t in hw)}


def _sample_recall_row(group: list[RunScore]) -> dict:
    """Sample recall@k over the traced data incidents, split by input property, and the skip list's hold."""
    traced = [t for s in group for t in s.truths if t.sample_recall is not None]
    recalls = [t.sample_recall for t in traced]
    with_losses = [t.sample_recall for t in traced if t.per_sample_losses is True]
    without_losses = [t.sample_recall for t in traced if t.per_sample_losses is False]
    eligible = [t for s in group for t in s.truths if t.root_cause == "data_outlier" and t.truth_sample_ids]
    return {
        "eligible": len(eligible),
        "matched": len(recalls),
        "mean": sum(recalls) / len(recalls) if recalls else None,
        # the same, split by whether the manifest had per-sample losses (an input property)
        "with_sample_losses": _mean(with_losses),
        "n_with_sample_losses": len(with_losses),
        "without_sample_losses": _mean(without_losses),
        "n_without_sample_losses": len(without_losses),
        # the same with tied suspects in random order (what the ranking knows, without the tie-break's luck)
        "mean_ties_random": _mean([t.sample_recall_ties for t in traced if t.sample_recall_ties is not None]),
        # the skip list is what a user acts on: how many culprits it holds, and at what size
        "skip_recall": _mean([t.skip_recall for t in traced if t.skip_recall is not None]),
        "skip_labelled": sum(len(set(t.truth_sample_ids)) for t in traced),
        "skip_held": sum(t.skip_hits or 0 for t in traced),
        "skip_size": sum(t.skip_size or 0 for t in traced),
    }


def aggregate(scores: list[RunScore]) -> dict:
    """Pool run scores into the benchmark tables, one block per detector.

    Returns {"runs": n, "errors": [...], "detectors": {name: {"detection", "clean",
    "root_cause", "hardware_blamed_on_data", "sample_recall"}}, "targets": [...]}.
    """
    by_detector: dict[str, list[RunScore]] = {}
    for s in scores:
        by_detector.setdefault(s.detector, []).append(s)
    out: dict = {
        "runs": len({(s.set, s.run) for s in scores}),
        "errors": sorted({f"{s.set}/{s.run}: {s.error}" for s in scores if s.error}),
        "detectors": {},
    }
    for name, group in by_detector.items():
        out["detectors"][name] = {
            "detection": detection_rows(group),
            "clean": clean_row(group),
            "root_cause": root_cause_rows(group),
            "has_root_cause": any(p.root_cause for s in group for p in s.preds),
            "hardware_blamed_on_data": _hardware_blamed_on_data(group),
            "sample_recall": _sample_recall_row(group),
        }
    out["targets"] = targets(out)
    return out


def targets(table: dict, product: str = "spikeforensics") -> list[dict]:
    """The tracker issues' targets, each {name, value, target, met} (met None: not measurable)."""
    dets = table["detectors"]
    if product not in dets:
        return []
    me = dets[product]
    found = []
    for kind in HEADLINE_KINDS:
        f1 = me["detection"].get(kind, {}).get("f1")
        found.append(
            {
                "name": f"F1 {kind}",
                "value": f1,
                "target": f">= {TARGET_F1}",
                "met": None if f1 is None else f1 >= TARGET_F1,
            }
        )
        for base, block in dets.items():
            if base == product:
                continue
            other = block["detection"].get(kind, {}).get("f1")
            # strictly better, except that a perfect score cannot beat another perfect score
            met = None if f1 is None else (f1 > (other or 0.0) or f1 == other == 1.0)
            found.append({"name": f"F1 {kind} > {base}", "value": f1, "target": f"> {_fmt(other)}", "met": met})
    clean = me["clean"]
    found.append(
        {
            "name": "false incidents on clean runs",
            "value": clean["false_incidents"],
            "target": "0",
            "met": clean["false_incidents"] == 0 if clean["runs"] else None,
        }
    )
    if me["has_root_cause"]:
        top1 = me["root_cause"].get("all", {}).get("accuracy")
        found.append(
            {
                "name": "root cause top-1",
                "value": top1,
                "target": f">= {TARGET_TOP1:.0%}",
                "met": None if top1 is None else top1 >= TARGET_TOP1,
            }
        )
        hw = me["hardware_blamed_on_data"]
        found.append(
            {
                "name": "hardware faults blamed on data",
                "value": hw["blamed_on_data"],
                "target": "0",
                "met": hw["blamed_on_data"] == 0 if hw["matched"] else None,
            }
        )
        rec = me["sample_recall"]["mean"]
        found.append(
            {
                "name": "sample recall@5 (data_outlier)",
                "value": rec,
                "target": f">= {TARGET_SAMPLE_RECALL:.0%}",
                "met": None if rec is None else rec >= TARGET_SAMPLE_RECALL,
            }
        )
    return found


# -- rendering (pure: table in, Markdown out) -------------------------------------------


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.2f}"
    return str(x)


def _mark(met) -> str:
    return {True: "met", False: "**missed**", None: "n/a"}[met]


def render_markdown(table: dict, title: str = "", product: str = "spikeforensics") -> str:
    """The tables of one aggregate (one set) as Markdown."""
    dets = table["detectors"]
    lines = [f"#### {title}" if title else "", ""]
    lines.append(f"{table['runs']} runs scored.")
    if table["errors"]:
        lines.append(f"Runs that could not be diagnosed (scored as no predictions): {len(table['errors'])}.")
    lines.append("")
    if table.get("targets"):
        lines += ["| target | value | goal | status |", "|---|---|---|---|"]
        lines += [f"| {t['name']} | {_fmt(t['value'])} | {t['target']} | {_mark(t['met'])} |" for t in table["targets"]]
        lines.append("")
    # detection: the product and the baselines on the headline kinds
    order = ([product] if product in dets else []) + sorted(d for d in dets if d != product)
    lines += [
        "| detector | kind | truth | detected | recall | predicted | precision | F1 | false on clean (runs) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in order:
        block = dets[name]
        clean = block["clean"]
        for kind in HEADLINE_KINDS:
            r = block["detection"].get(kind) or {
                "n_truth": 0,
                "detected": 0,
                "recall": None,
                "n_pred": 0,
                "precision": None,
                "f1": None,
            }
            lines.append(
                f"| {name} | {kind} | {r['n_truth']} | {r['detected']} | {_fmt(r['recall'])} | {r['n_pred']} | "
                f"{_fmt(r['precision'])} | {_fmt(r['f1'])} | {clean['false_incidents']} ({clean['runs_with_false']}/{clean['runs']}) |"
            )
    lines.append("")
    if product in dets:
        me = dets[product]
        lines += [
            f"{product}, every kind:",
            "",
            "| kind | truth | detected | recall | predicted | correct | precision | F1 | split | peak error (median steps) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for kind, r in me["detection"].items():
            lines.append(
                f"| {kind} | {r['n_truth']} | {r['detected']} | {_fmt(r['recall'])} | {r['n_pred']} | {r['correct']} | "
                f"{_fmt(r['precision'])} | {_fmt(r['f1'])} | {r['split']} | {_fmt(r['peak_error'])} |"
            )
        lines.append("")
        if me["has_root_cause"]:
            lines += [
                "| truth root cause | incidents | matched | top-1 correct | accuracy | predicted instead |",
                "|---|---|---|---|---|---|",
            ]
            for label, r in me["root_cause"].items():
                instead = ", ".join(f"{k} x{v}" for k, v in r["predicted_instead"].items()) or "-"
                lines.append(
                    f"| {label} | {r['n_truth']} | {r['matched']} | {r['correct']} | {_fmt(r['accuracy'])} | {instead} |"
                )
            hw, sr = me["hardware_blamed_on_data"], me["sample_recall"]
            lines += [
                "",
                f"Hardware faults blamed on data: {hw['blamed_on_data']} of {hw['matched']} matched. "
                f"Sample recall@5: {_fmt(sr['mean'])} over {sr['matched']} matched of {sr['eligible']} "
                "data_outlier incidents with labelled samples"
                f" ({_fmt(sr.get('with_sample_losses'))} over {sr.get('n_with_sample_losses', 0)} whose manifest has "
                f"per-sample losses, {_fmt(sr.get('without_sample_losses'))} over {sr.get('n_without_sample_losses', 0)} "
                "without); expected with tied suspects in random order "
                f"{_fmt(sr.get('mean_ties_random'))}. "
                f"Skip list: holds {sr.get('skip_held', 0)} of the {sr.get('skip_labelled', 0)} labelled samples "
                f"(mean per incident {_fmt(sr.get('skip_recall'))}) and "
                f"{sr.get('skip_size', 0) - sr.get('skip_held', 0)} unlabelled ones.",
                "",
            ]
        else:
            lines += ["(No root causes in these diagnoses: attribution not available, detection only.)", ""]
    return "\n".join(lines).strip("\n") + "\n"
