"""Rules -> confidence per root-cause label, ranked alternatives, explanation and actions.

Score of a label = sum of the weights of its matched rules (negative weights are
evidence against), floored at 0; a label whose gate does not hold scores 0 (e.g.
`hardware_fault` needs rank, replay or telemetry evidence). `unknown` always gets
`unknown_floor` on top of its own rules, so one weak rule cannot claim certainty.
Confidence = score / sum of scores (in [0, 1], summing to 1 over labels).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spikeforensics.attribute.rules import LABELS, Rule, RuleSet, matches, render
from spikeforensics.params import AttributionParams


@dataclass
class Attribution:
    root_cause: str
    confidence: float
    alternatives: list[dict]  # [{"root_cause", "confidence"}], best first, excluding the winner
    explanation: str
    actions: list[str]
    detail: str | None
    matched: list[dict] = field(default_factory=list)  # [{"rule", "label", "weight", "file"}]
    gated: list[str] = field(default_factory=list)  # labels ruled out by their gate
    scores: dict = field(default_factory=dict)


def score_labels(
    ruleset: RuleSet, features: dict, ap: AttributionParams, params=None
) -> tuple[dict[str, float], list[Rule], list[str]]:
    """`params` (a `Params`) supplies the rules' `param:` thresholds; the defaults when None."""
    matched = [r for r in ruleset.rules if matches(r.when, features, params)]
    raw = {label: 0.0 for label in LABELS}
    for r in matched:
        raw[r.label] += r.weight
    gated = []
    for label in {g.label for g in ruleset.gates}:
        if not any(matches(g.when, features, params) for g in ruleset.gates if g.label == label):
            gated.append(label)
            raw[label] = 0.0
    scores = {k: max(0.0, v) for k, v in raw.items()}
    scores["unknown"] += ap.unknown_floor
    return scores, matched, sorted(gated)


def attribute(ruleset: RuleSet, features: dict, ap: AttributionParams, params=None) -> Attribution:
    scores, matched, gated = score_labels(ruleset, features, ap, params)
    total = sum(scores.values()) or 1.0
    conf = {k: v / total for k, v in scores.items()}
    # a label must beat `unknown` (whose floor is one weak rule's weight), not tie with it
    order = sorted(LABELS, key=lambda k: (-conf[k], k != "unknown", LABELS.index(k)))
    best = order[0]
    alternatives = [
        {"root_cause": k, "confidence": round(conf[k], 4)}
        for k in order[1:]
        if conf[k] >= ap.min_alternative_confidence
    ][: ap.max_alternatives]
    own = sorted((r for r in matched if r.label == best and r.weight > 0), key=lambda r: -r.weight)
    if own:
        explanation = "; ".join(render(r.explanation, features) for r in own[:3])
        explanation = explanation[0].upper() + explanation[1:] + "."
    else:
        explanation = "The evidence does not clearly support any root cause."
    actions: list[str] = []
    for r in own:
        for a in r.actions:
            text = render(a, features)
            if text not in actions:
                actions.append(text)
    detail = next((r.detail for r in own if r.detail), None)
    return Attribution(
        root_cause=best,
        confidence=round(conf[best], 4),
        alternatives=alternatives,
        explanation=explanation,
        actions=actions,
        detail=detail,
        matched=[{"rule": r.name, "label": r.label, "weight": r.weight, "file": r.origin} for r in matched],
        gated=gated,
        scores={k: round(v, 4) for k, v in scores.items() if v > 0},
    )
