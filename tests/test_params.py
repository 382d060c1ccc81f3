"""Parameters you can trust: every one is read, every one has a checked range, rules name them."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from spikeforensics.attribute.rules import RuleError, holds, load_rules, param_refs, parse_rules
from spikeforensics.cli import cli
from spikeforensics.params import ParamError, Params, allowed_range, range_spec

ROOT = Path(__file__).resolve().parents[1]


def _all_params():
    p = Params()
    for sec in dataclasses.fields(p):
        for f in dataclasses.fields(getattr(p, sec.name)):
            yield sec.name, f.name, getattr(getattr(p, sec.name), f.name)


def test_every_parameter_is_read_somewhere():
    """A parameter nobody reads is a knob that does nothing (`--set` on it would be silently ignored).
    Read = an attribute access `.name` or a `"name"` string in the package outside params.py, or a
    `param:SECTION.NAME` threshold in the bundled rules."""
    src = "\n".join(
        p.read_text(encoding="utf-8") for p in (ROOT / "spikeforensics").rglob("*.py") if p.name != "params.py"
    )
    refs = param_refs(load_rules())
    dead = [
        f"{sec}.{name}"
        for sec, name, _ in _all_params()
        if f"{sec}.{name}" not in refs and not re.search(rf"\.{name}\b|[\"']{name}[\"']", src)
    ]
    assert dead == [], f"parameters nobody reads: {dead}"


def test_rule_thresholds_name_their_parameters_and_follow_them():
    rules = load_rules()
    refs = param_refs(rules)
    for dotted in (
        "attribution.drift_ratio",
        "attribution.layer_share_high",
        "attribution.astronomical_norm",
        "attribution.oscillation_spikes",
        "clipping.unscale_factor",
    ):
        assert dotted in refs
    cond = {"feature": "drift_before", "op": ">=", "value": "param:attribution.drift_ratio"}
    assert holds(cond, {"drift_before": 1.6})  # default 1.5
    assert not holds(cond, {"drift_before": 1.6}, Params.load(overrides=["attribution.drift_ratio=1.7"]))
    assert holds(cond, {"drift_before": 1.45}, Params.load(overrides=["attribution.drift_ratio=1.4"]))


@pytest.mark.parametrize(
    "value, message",
    [
        ('"param:attribution.no_such"', "names no numeric parameter"),
        ('"param:nosection.x"', "names no numeric parameter"),
        ('"param:events.floor_pattern"', "names no numeric parameter"),
        ('"1.5"', "is a number"),
    ],
)
def test_bad_parameter_references_are_refused_on_load(value, message):
    text = (
        f'[[rule]]\nname = "r"\nlabel = "data_outlier"\nweight = 1.0\nexplanation = "x"\n'
        f'when = [{{feature = "drift_before", op = ">=", value = {value}}}]\n'
    )
    with pytest.raises(RuleError, match=message):
        parse_rules(text, "mine.toml")


def test_parameter_reference_needs_a_number_feature():
    text = (
        '[[rule]]\nname = "r"\nlabel = "data_outlier"\nweight = 1.0\nexplanation = "x"\n'
        'when = [{feature = "rank_confined", op = "==", value = "param:attribution.drift_ratio"}]\n'
    )
    with pytest.raises(RuleError, match="threshold on a number feature"):
        parse_rules(text, "mine.toml")


def test_every_numeric_default_is_inside_its_range():
    for sec, name, value in _all_params():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            lo, hi, lo_open, hi_open = allowed_range(f"{sec}.{name}")
            assert (lo < value if lo_open else lo <= value) and (value < hi if hi_open else value <= hi), (sec, name)
            assert range_spec(f"{sec}.{name}")[1], (sec, name)  # every range says why


@pytest.mark.parametrize(
    "setting, shown",
    [
        ("attribution.lr_rise_after_decay=0.9", "[1, 1e+15]"),
        ("calibration.quantile=1.04", "(0, 1)"),
        ("calibration.quantile=1", "(0, 1)"),
        ("hard_spike.z_threshold=0", "(0, 1e+15]"),
        ("hard_spike.corroborate_chance=0", "(0, 1)"),
        ("vanishing.ratio=1.2", "(0, 1)"),
        ("series.mad_window=2", "[5, 1e+06]"),
        ("hard_spike.loss_ratio_floor=0.8", "[1, 1e+15]"),
    ],
)
def test_out_of_range_values_exit_2_naming_parameter_and_range(tmp_path, runner, setting, shown):
    log = tmp_path / "train.log"
    log.write_text("".join(f"iter {i}: loss {3.0 - i * 0.01:.4f}, time 10.0ms\n" for i in range(30)))
    res = runner.invoke(cli, ["diagnose", str(log), "--store", str(tmp_path / "st"), "--set", setting, "-q"])
    assert res.exit_code == 2, res.output
    name = setting.split("=")[0]
    assert name in res.output and shown in res.output
    assert not (tmp_path / "st").exists()  # refused before any work


def test_params_file_values_are_checked_the_same_way(tmp_path, runner):
    log = tmp_path / "train.log"
    log.write_text("".join(f"iter {i}: loss {3.0 - i * 0.01:.4f}, time 10.0ms\n" for i in range(30)))
    pf = tmp_path / "p.toml"
    pf.write_text("[attribution]\nlr_rise_after_decay = 0.95\n")
    res = runner.invoke(cli, ["diagnose", str(log), "--store", str(tmp_path / "st"), "--params", str(pf), "-q"])
    assert res.exit_code == 2, res.output
    assert "attribution.lr_rise_after_decay" in res.output and "[1, 1e+15]" in res.output
    with pytest.raises(ParamError, match=r"calibration.quantile = 0.0 is out of range: allowed \(0, 1\)"):
        Params.load(overrides=["calibration.quantile=0.0"])
    # a value inside the range is taken
    assert Params.load(overrides=["attribution.lr_rise_after_decay=1.0"]).attribution.lr_rise_after_decay == 1.0
