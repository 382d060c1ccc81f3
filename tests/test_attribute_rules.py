"""Rule files: loading, validation messages, the condition interpreter and scoring."""

from __future__ import annotations

import pytest
from attribute_synth import rule_toml

from spikeforensics.attribute.features import FEATURES
from spikeforensics.attribute.rules import LABELS, RuleError, check, holds, load_rules, parse_rules, render
from spikeforensics.attribute.scoring import attribute
from spikeforensics.params import AttributionParams

GOOD = """
[[rule]]
name = "my-rule"
label = "data_outlier"
weight = 2.0
when = [{feature = "rank_confined", op = "==", value = true}, {feature = "xid_hw_weight", op = ">=", value = 0.5}]
explanation = "rank {peak_rank} and xid {xid_codes}"
actions = ["look at {top_samples}"]
"""


def features(**over):
    base = {name: None for name in FEATURES}
    base.update(over)
    return base


def test_bundled_rules_load_and_use_known_labels():
    rs = load_rules()
    assert len(rs) >= 30
    assert {r.label for r in rs.rules} <= set(LABELS)
    names = [r.name for r in rs.rules]
    assert len(names) == len(set(names))
    # one file per root-cause family
    assert {p.rsplit("/", 1)[-1] for p in rs.files} >= {
        "data.toml",
        "hardware.toml",
        "precision.toml",
        "optimization.toml",
        "structure.toml",
    }


def test_good_rule_parses():
    rs = parse_rules(GOOD, "x.toml")
    assert rs.rules[0].name == "my-rule" and rs.rules[0].weight == 2.0


@pytest.mark.parametrize(
    "bad, message",
    [
        (
            GOOD.replace('"rank_confined"', '"rank_confinedd"'),
            "x.toml: rule 'my-rule': unknown feature 'rank_confinedd'",
        ),
        (GOOD.replace('op = "=="', 'op = "==="'), "x.toml: rule 'my-rule': unknown op '==='"),
        (GOOD.replace('"data_outlier"', '"cosmic_rays"'), "x.toml: rule 'my-rule': unknown label 'cosmic_rays'"),
        (GOOD.replace("value = true", 'value = "yes"'), "x.toml: rule 'my-rule': feature 'rank_confined' is a bool"),
        (GOOD.replace("value = 0.5", "value = true"), "x.toml: rule 'my-rule': feature 'xid_hw_weight' is a number"),
        (GOOD.replace("weight = 2.0", 'weight = "heavy"'), "x.toml: rule 'my-rule': 'weight' must be a number"),
        (GOOD.replace("weight = 2.0\n", ""), "x.toml: rule 'my-rule': missing 'weight'"),
        (
            GOOD.replace("{peak_rank}", "{peak_rnk}"),
            "x.toml: rule 'my-rule': explanation names unknown feature {peak_rnk}",
        ),
        (GOOD.replace("{peak_rank}", "{peak_rank.__class__}"), "explanation names unknown feature"),
        (GOOD.replace("{top_samples}", "{top_samples!r}"), "only {feature}"),
        (GOOD + 'colour = "red"\n', "x.toml: rule 'my-rule': unknown key(s) ['colour']"),
        (GOOD.replace("when = [", "when = []\nx_when = ["), "unknown key(s) ['x_when']"),
        (GOOD.replace('name = "my-rule"\n', ""), "x.toml: rule #1: needs a non-empty 'name'"),
        (GOOD.replace('op = ">=", value = 0.5', 'op = "in", value = 0.5'), "op 'in' needs a list"),
        (GOOD.replace('op = "==", value = true', 'op = ">", value = true'), "op '>' makes no sense on bool"),
        (GOOD.replace("[{feature", "[{anyy = [], feature"), "a condition needs exactly feature, op, value"),
        (GOOD.replace("when = [{feature", "when = [{any = []}, {feature"), "'any' needs a non-empty list"),
        (GOOD + "[oops]\n", "x.toml: unknown top-level key(s) ['oops']"),
        ("[[rule]\nname=", "x.toml: not valid TOML"),
    ],
)
def test_malformed_rules_are_rejected_with_file_and_rule(bad, message):
    with pytest.raises(RuleError) as exc:
        parse_rules(bad, "x.toml")
    assert message in str(exc.value)


def test_user_rule_dir_is_added_and_duplicate_names_rejected(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "extra.toml").write_text(GOOD, encoding="utf-8")
    rs = load_rules([d])
    assert "my-rule" in [r.name for r in rs.rules] and str(d / "extra.toml") in rs.files
    (d / "dup.toml").write_text(GOOD, encoding="utf-8")
    with pytest.raises(RuleError, match=r"extra.toml: rule .my-rule.: name already used in .*dup.toml"):
        load_rules([d])
    ruleset, errors = check([d])
    assert ruleset is None and "already used" in errors[0]


def test_missing_rules_dir_is_an_error(tmp_path):
    with pytest.raises(RuleError, match="no such rules file or folder"):
        load_rules([tmp_path / "nope"])


def test_condition_interpreter_groups_and_none():
    f = features(rank_confined=True, xid_hw_weight=0.3, kind="hard_spike", replay_recurred=None)
    assert holds({"feature": "rank_confined", "op": "==", "value": True}, f)
    assert not holds({"feature": "xid_hw_weight", "op": ">=", "value": 0.5}, f)
    assert holds(
        {
            "any": [
                {"feature": "xid_hw_weight", "op": ">=", "value": 0.5},
                {"feature": "kind", "op": "in", "value": ["hard_spike", "nonfinite"]},
            ]
        },
        f,
    )
    assert not holds(
        {
            "all": [
                {"feature": "rank_confined", "op": "==", "value": True},
                {"feature": "kind", "op": "!=", "value": "hard_spike"},
            ]
        },
        f,
    )
    # None means "no data": every comparison is false, also != ...
    assert not holds({"feature": "replay_recurred", "op": "==", "value": False}, f)
    assert not holds({"feature": "replay_recurred", "op": "!=", "value": True}, f)
    # ... and `not` of it is true
    assert holds({"not": {"feature": "replay_recurred", "op": "==", "value": False}}, f)


def test_render_formats_numbers_and_missing_values():
    f = features(clip_rate=0.4567, top_samples="a-1, b-2", peak_rank=None, ecc_delta=3.0)
    assert render("{clip_rate:.0%} of {top_samples}; rank {peak_rank}", f) == "46% of a-1, b-2; rank n/a"
    assert render("{ecc_delta}", f) == "3"


def test_scoring_gate_blocks_hardware_without_evidence():
    rs = parse_rules(
        """
[[gate]]
label = "hardware_fault"
when = [{feature = "hw_evidence", op = "==", value = true}]
[[rule]]
name = "nan"
label = "hardware_fault"
weight = 5
when = [{feature = "nonfinite", op = "==", value = true}]
explanation = "nan"
""",
        "g.toml",
    )
    ap = AttributionParams()
    blocked = attribute(rs, features(nonfinite=True, hw_evidence=False), ap)
    assert blocked.root_cause == "unknown" and blocked.gated == ["hardware_fault"]
    allowed = attribute(rs, features(nonfinite=True, hw_evidence=True), ap)
    assert allowed.root_cause == "hardware_fault"
    assert allowed.confidence == pytest.approx(5 / 6, abs=1e-3)
    assert allowed.alternatives == [{"root_cause": "unknown", "confidence": pytest.approx(1 / 6, abs=1e-3)}]
    assert allowed.explanation == "Nan."


def test_negative_weights_and_ranked_alternatives():
    rs = parse_rules(
        """
[[rule]]
name = "a"
label = "data_outlier"
weight = 3
when = [{feature = "nonfinite", op = "==", value = true}]
explanation = "a"
actions = ["drop {top_samples}"]
detail = "bad sample"
[[rule]]
name = "b"
label = "data_outlier"
weight = -2
when = [{feature = "replay_recurred", op = "==", value = false}]
explanation = "b"
[[rule]]
name = "c"
label = "hardware_fault"
weight = 2
when = [{feature = "replay_recurred", op = "==", value = false}]
explanation = "c"
""",
        "n.toml",
    )
    att = attribute(rs, features(nonfinite=True, replay_recurred=False, top_samples="s-1"), AttributionParams())
    assert att.root_cause == "hardware_fault"  # 2 vs data 3-2=1 vs unknown 1
    assert [a["root_cause"] for a in att.alternatives] == ["unknown", "data_outlier"]  # a tie goes to unknown
    assert sum([att.confidence] + [a["confidence"] for a in att.alternatives]) == pytest.approx(1.0, abs=1e-3)
    att2 = attribute(rs, features(nonfinite=True, replay_recurred=True, top_samples="s-1"), AttributionParams())
    assert att2.root_cause == "data_outlier" and att2.actions == ["drop s-1"] and att2.detail == "bad sample"


def _base_spike(**over):
    """Bundled-rule features of a short warning spike with a manifest but no sample evidence."""
    f = features(
        kind="hard_spike",
        severity="critical",
        has_hard_spike=True,
        duration_steps=1,
        recovery="fast",
        n_ranks=1,
        rank_confined=False,
        has_manifest=True,
        has_sample_losses=False,
        sample_loss_outlier=False,
        sample_loss_nonfinite=False,
        sample_recurrence=0,
        sample_exonerated=0,
        recurring_spikes=0,
        run_recurring_spikes=0,
        n_spike_incidents=2,
        early=False,
    )
    f.update(over)
    return f


def test_a_lone_short_spike_is_not_the_lr_but_one_of_a_spiky_run_is():
    rs, ap = load_rules(), AttributionParams()
    assert attribute(rs, _base_spike(), ap).root_cause in ("data_outlier", "unknown")
    assert attribute(rs, _base_spike(run_recurring_spikes=4), ap).root_cause == "lr_too_high"
    # ... unless a sample explains it
    assert attribute(rs, _base_spike(run_recurring_spikes=4, sample_recurrence=2), ap).root_cause == "data_outlier"
    assert attribute(rs, _base_spike(run_recurring_spikes=4, sample_loss_outlier=True), ap).root_cause == "data_outlier"


def test_vanishing_gradients_under_a_rising_lr_is_the_schedule():
    rs, ap = load_rules(), AttributionParams()
    f = features(
        kind="hard_spike",
        has_vanishing_gradients=True,
        has_soft_drift=True,
        lr_rising_late=True,
        lr_late_rise=9.5,
        n_ranks=1,
        rank_confined=False,
    )
    assert attribute(rs, f, ap).root_cause == "lr_schedule"
    f.update(lr_rising_late=False, lr_late_rise=1.0)
    assert attribute(rs, f, ap).root_cause == "vanishing_gradients"


def test_a_label_must_beat_unknown_not_tie_with_it():
    rs = parse_rules(rule_toml("weak", "data_outlier", 1, "nonfinite", "weak"), "t.toml")
    ap = AttributionParams()  # unknown_floor 1.0 = one weak rule
    tie = attribute(rs, features(nonfinite=True), ap)
    assert tie.root_cause == "unknown" and tie.alternatives[0]["root_cause"] == "data_outlier"
    assert tie.explanation == "The evidence does not clearly support any root cause."
    ap.unknown_floor = 0.5
    assert attribute(rs, features(nonfinite=True), ap).root_cause == "data_outlier"
