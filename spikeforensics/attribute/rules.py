"""Root-cause rules: TOML files of declarative conditions on evidence features.

A rule file (`rules/*.toml`, or a user folder given with `--rules DIR`) holds

    [[rule]]
    name = "xid-in-window"                  # unique across all loaded files
    label = "hardware_fault"                # a root-cause label of CONTRACT.md
    weight = 3.0                            # evidence strength; negative = evidence against
    when = [                                # all items must hold
      {feature = "xid_hw_weight", op = ">=", value = 0.8},
      {any = [{feature = "rank_confined", op = "==", value = true},
              {feature = "replay_recurred", op = "==", value = false}]},
    ]
    explanation = "Xid {xid_codes} in the incident window"   # {feature} placeholders only
    actions = ["Check the GPU ({ecc_gpu}) ..."]
    detail = "transient"                    # optional root_cause_detail

    [[gate]]                                # a label is only possible when its gate holds
    label = "hardware_fault"
    reason = "..."
    when = [...]

Conditions: `{feature, op, value}` with op one of == != < <= > >= in, or a group
`{any = [...]}`, `{all = [...]}`, `{not = {...}}`. A threshold on a number feature that is a
tunable parameter names it instead of repeating its value: `value = "param:attribution.drift_ratio"`
(any numeric parameter of spikeforensics/params.py; `--set` and `--params` then move the rule too).
Everything is checked on load:
unknown keys, features, ops, labels, value types and template placeholders raise
`RuleError("file: rule 'name': message")`. Conditions are evaluated by a small
interpreter over the feature dict; nothing is ever `eval`ed. A condition on a feature
whose value is None (no data) is false.
"""

from __future__ import annotations

import math
import re
import string
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from spikeforensics.attribute.features import FEATURES

LABELS = (
    "data_outlier",
    "data_drift",
    "hardware_fault",
    "lr_too_high",
    "lr_schedule",
    "fp16_overflow",
    "fp16_underflow",
    "clip_misconfigured",
    "layer_instability",
    "vanishing_gradients",
    "model_bug",
    "unknown",
)
OPS = ("==", "!=", "<", "<=", ">", ">=", "in")
RULE_KEYS = {"name", "label", "weight", "when", "explanation", "actions", "detail"}
GATE_KEYS = {"label", "reason", "when"}
GROUPS = ("any", "all", "not")
PARAM_PREFIX = "param:"  # a condition value "param:SECTION.NAME" is that parameter's value (validated on load)
# Bounds on what a rules file can make the tool do (rules come from users' folders):
MAX_RULES_FILE_BYTES = 1 << 20  # why: the bundled rules are ~40 KB together; a 1 MB file is hundreds of rules
MAX_NESTING = 12  # why: any/all/not groups nest 2-3 deep in practice; deeper is a generated or hostile file
MAX_FORMAT_WIDTH = 64  # why: a placeholder pads a number or a short list, never beyond a line
MAX_FORMAT_PRECISION = 20  # why: a float64 has 17 significant digits
# Python's format-spec mini-language: [[fill]align][sign][z][#][0][width][grouping][.precision][type]
_FORMAT_SPEC_RE = re.compile(
    r"(?:(?P<fill>.)?(?P<align>[<>=^]))?[-+ ]?z?#?0?(?P<width>\d+)?[,_]?(?:\.(?P<precision>\d+))?[bcdeEfFgGnosxX%]?",
    re.S,
)


class RuleError(ValueError):
    """A rule file is malformed; the message names the file and the rule."""


@dataclass(frozen=True)
class Rule:
    name: str
    label: str
    weight: float
    when: tuple  # validated condition tree (dicts)
    explanation: str
    actions: tuple[str, ...]
    detail: str
    origin: str  # file it came from


@dataclass(frozen=True)
class Gate:
    label: str
    reason: str
    when: tuple
    origin: str


@dataclass
class RuleSet:
    rules: list[Rule] = field(default_factory=list)
    gates: list[Gate] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def __iter__(self):
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)


# --- validation --------------------------------------------------------------------------------


def _check_condition(cond, where: str, depth: int = 1) -> None:
    if depth > MAX_NESTING:
        raise RuleError(f"{where}: conditions nested more than {MAX_NESTING} deep")
    if not isinstance(cond, dict):
        raise RuleError(f"{where}: a condition must be a table, got {cond!r}")
    groups = [g for g in GROUPS if g in cond]
    if groups:
        if len(cond) != 1:
            raise RuleError(f"{where}: a group condition has exactly one key (any, all or not), got {sorted(cond)}")
        inner = cond[groups[0]]
        if groups[0] == "not":
            _check_condition(inner, where, depth + 1)
            return
        if not isinstance(inner, list) or not inner:
            raise RuleError(f"{where}: '{groups[0]}' needs a non-empty list of conditions")
        for c in inner:
            _check_condition(c, where, depth + 1)
        return
    unknown = set(cond) - {"feature", "op", "value"}
    if unknown or set(cond) != {"feature", "op", "value"}:
        raise RuleError(f"{where}: a condition needs exactly feature, op, value (got {sorted(cond)})")
    feature, op, value = cond["feature"], cond["op"], cond["value"]
    if feature not in FEATURES:
        raise RuleError(f"{where}: unknown feature {feature!r} (see spikeforensics/attribute/features.py FEATURES)")
    if op not in OPS:
        raise RuleError(f"{where}: unknown op {op!r} (allowed: {', '.join(OPS)})")
    ftype = FEATURES[feature][0]
    if isinstance(value, str) and value.startswith(PARAM_PREFIX):
        _check_param_ref(value, feature, ftype, op, where)
        return
    values = value if op == "in" else [value]
    if op == "in" and not isinstance(value, list):
        raise RuleError(f"{where}: op 'in' needs a list value for feature {feature!r}")
    for v in values:
        ok = (
            (ftype == "bool" and isinstance(v, bool))
            or (ftype == "number" and isinstance(v, (int, float)) and not isinstance(v, bool))
            or (ftype == "str" and isinstance(v, str))
        )
        if not ok:
            raise RuleError(f"{where}: feature {feature!r} is a {ftype}, value {v!r} does not fit")
        if isinstance(v, float) and math.isnan(v):
            raise RuleError(f"{where}: feature {feature!r}: a NaN value never compares")
    if ftype in ("bool", "str") and op in ("<", "<=", ">", ">="):
        raise RuleError(f"{where}: op {op!r} makes no sense on {ftype} feature {feature!r}")


def _check_param_ref(value: str, feature: str, ftype: str, op: str, where: str) -> None:
    """`param:SECTION.NAME` must name a numeric parameter, on a number feature, with a comparison op."""
    from spikeforensics.params import Params

    dotted = value[len(PARAM_PREFIX) :]
    if ftype != "number" or op == "in":
        raise RuleError(
            f"{where}: {value!r}: a parameter reference is a threshold on a number feature "
            f"(feature {feature!r} is a {ftype}, op {op!r})"
        )
    section, _, key = dotted.partition(".")
    sec = getattr(Params(), section, None)
    current = getattr(sec, key, None) if sec is not None and hasattr(sec, "__dataclass_fields__") else None
    if not isinstance(current, (int, float)) or isinstance(current, bool):
        raise RuleError(
            f"{where}: {value!r} names no numeric parameter (expected param:SECTION.NAME, "
            f"e.g. param:attribution.drift_ratio; see spikeforensics/params.py)"
        )


def _threshold(target, params):
    """A condition's value, with a `param:SECTION.NAME` reference read from `params` (default Params())."""
    if isinstance(target, str) and target.startswith(PARAM_PREFIX):
        section, _, key = target[len(PARAM_PREFIX) :].partition(".")
        return getattr(getattr(params if params is not None else _default_params(), section), key)
    return target


_DEFAULTS: list = []


def _default_params():
    if not _DEFAULTS:
        from spikeforensics.params import Params

        _DEFAULTS.append(Params())
    return _DEFAULTS[0]


def param_refs(ruleset: RuleSet) -> set[str]:
    """Every `SECTION.NAME` the rules and gates of `ruleset` reference."""
    found: set[str] = set()

    def walk(cond):
        if isinstance(cond, dict):
            for key in GROUPS:
                if key in cond:
                    inner = cond[key]
                    for c in inner if isinstance(inner, list) else [inner]:
                        walk(c)
                    return
            v = cond.get("value")
            if isinstance(v, str) and v.startswith(PARAM_PREFIX):
                found.add(v[len(PARAM_PREFIX) :])

    for item in [*ruleset.rules, *ruleset.gates]:
        for c in item.when:
            walk(c)
    return found


def _check_template(text, where: str, what: str) -> str:
    if not isinstance(text, str):
        raise RuleError(f"{where}: {what} must be a string")
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise RuleError(f"{where}: {what} is not a valid template: {exc}") from exc
    for _, name, spec, conv in parts:
        if name is None:
            continue
        if name not in FEATURES:
            raise RuleError(f"{where}: {what} names unknown feature {{{name}}}")
        if conv is not None or (spec and any(c in spec for c in "{}")):
            raise RuleError(f"{where}: {what}: only {{feature}} or {{feature:format}} placeholders are allowed")
        if spec:
            m = _FORMAT_SPEC_RE.fullmatch(spec)
            if m is None:
                raise RuleError(f"{where}: {what}: {{{name}:{spec}}} is not a format spec")
            if int(m.group("width") or 0) > MAX_FORMAT_WIDTH or int(m.group("precision") or 0) > MAX_FORMAT_PRECISION:
                raise RuleError(
                    f"{where}: {what}: {{{name}:{spec}}}: width at most {MAX_FORMAT_WIDTH}, "
                    f"precision at most {MAX_FORMAT_PRECISION}"
                )
    return text


def _check_when(when, where: str) -> tuple:
    if not isinstance(when, list) or not when:
        raise RuleError(f"{where}: 'when' must be a non-empty list of conditions")
    for cond in when:
        _check_condition(cond, where, 2)
    return tuple(when)


def parse_rules(text: str, origin: str) -> RuleSet:
    """Parse and validate one rule file's text."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{origin}: not valid TOML: {exc}") from exc
    except RecursionError:
        raise RuleError(f"{origin}: not valid TOML: nested too deeply") from None
    unknown = set(data) - {"rule", "gate"}
    if unknown:
        raise RuleError(f"{origin}: unknown top-level key(s) {sorted(unknown)} (expected [[rule]] and [[gate]] tables)")
    out = RuleSet(files=[origin])
    for i, raw in enumerate(data.get("rule", [])):
        name = raw.get("name") if isinstance(raw, dict) else None
        where = f"{origin}: rule {name!r}" if isinstance(name, str) and name else f"{origin}: rule #{i + 1}"
        if not isinstance(raw, dict):
            raise RuleError(f"{where}: must be a table")
        if not isinstance(name, str) or not name:
            raise RuleError(f"{where}: needs a non-empty 'name'")
        extra = set(raw) - RULE_KEYS
        if extra:
            raise RuleError(f"{where}: unknown key(s) {sorted(extra)} (allowed: {', '.join(sorted(RULE_KEYS))})")
        for key in ("label", "weight", "when", "explanation"):
            if key not in raw:
                raise RuleError(f"{where}: missing '{key}'")
        if raw["label"] not in LABELS:
            raise RuleError(f"{where}: unknown label {raw['label']!r} (labels: {', '.join(LABELS)})")
        weight = raw["weight"]
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not math.isfinite(weight):
            raise RuleError(f"{where}: 'weight' must be a number (a finite one)")
        actions = raw.get("actions", [])
        if not isinstance(actions, list):
            raise RuleError(f"{where}: 'actions' must be a list of strings")
        detail = raw.get("detail", "")
        if not isinstance(detail, str):
            raise RuleError(f"{where}: 'detail' must be a string")
        out.rules.append(
            Rule(
                name=name,
                label=raw["label"],
                weight=float(weight),
                when=_check_when(raw["when"], where),
                explanation=_check_template(raw["explanation"], where, "explanation"),
                actions=tuple(_check_template(a, where, "action") for a in actions),
                detail=detail,
                origin=origin,
            )
        )
    for i, raw in enumerate(data.get("gate", [])):
        where = f"{origin}: gate #{i + 1}"
        if not isinstance(raw, dict):
            raise RuleError(f"{where}: must be a table")
        extra = set(raw) - GATE_KEYS
        if extra or "label" not in raw or "when" not in raw:
            raise RuleError(f"{where}: a gate has label, when and optional reason (got {sorted(raw)})")
        if raw["label"] not in LABELS:
            raise RuleError(f"{where}: unknown label {raw['label']!r}")
        out.gates.append(Gate(raw["label"], str(raw.get("reason", "")), _check_when(raw["when"], where), origin))
    return out


def load_rules(dirs: list[str | Path] | None = None, include_builtin: bool = True) -> RuleSet:
    """Load the bundled rules plus every `*.toml` in `dirs` (a file path is accepted too)."""
    from spikeforensics.resources import rules_dir

    paths: list[Path] = []
    if include_builtin:
        paths += sorted(rules_dir().glob("*.toml"))
    for d in dirs or []:
        d = Path(d)
        if d.is_dir():
            paths += sorted(d.glob("*.toml"))
        elif d.exists() or d.is_symlink():  # checked by `_read_rules_file`: regular files only
            paths.append(d)
        else:
            raise RuleError(f"{d}: no such rules file or folder")
    merged = RuleSet()
    seen: dict[str, str] = {}
    for path in paths:
        text = _read_rules_file(path)
        part = parse_rules(text, str(path))
        for rule in part.rules:
            if rule.name in seen:
                raise RuleError(f"{path}: rule {rule.name!r}: name already used in {seen[rule.name]}")
            seen[rule.name] = str(path)
        merged.rules += part.rules
        merged.gates += part.gates
        merged.files.append(str(path))
    return merged


def _read_rules_file(path: Path) -> str:
    """A rules file's text: a regular file (a symlink to a device, a pipe or a socket is
    refused without opening it) of at most `MAX_RULES_FILE_BYTES` (`params.read_small_file`)."""
    from spikeforensics.params import read_small_file

    try:
        data = read_small_file(path, MAX_RULES_FILE_BYTES, "rules file")
    except ValueError as exc:
        raise RuleError(str(exc)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RuleError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def check(dirs: list[str | Path] | None = None, include_builtin: bool = True) -> tuple[RuleSet | None, list[str]]:
    """For `spikeforensics rules check`: (rule set, []) or (None, [error message])."""
    try:
        return load_rules(dirs, include_builtin), []
    except RuleError as exc:
        return None, [str(exc)]


# --- evaluation --------------------------------------------------------------------------------


def holds(cond: dict, features: dict, params=None) -> bool:
    """Evaluate one validated condition against a feature dict (no eval); `param:` thresholds are
    read from `params` (a `Params`; the defaults when None)."""
    if "any" in cond:
        return any(holds(c, features, params) for c in cond["any"])
    if "all" in cond:
        return all(holds(c, features, params) for c in cond["all"])
    if "not" in cond:
        return not holds(cond["not"], features, params)
    value = features.get(cond["feature"])
    if value is None:
        return False
    op, target = cond["op"], _threshold(cond["value"], params)
    if op == "==":
        return value == target
    if op == "!=":
        return value != target
    if op == "in":
        return value in target
    if isinstance(value, str) or isinstance(value, bool):
        return False
    return {"<": value < target, "<=": value <= target, ">": value > target, ">=": value >= target}[op]


def matches(when: tuple, features: dict, params=None) -> bool:
    return all(holds(c, features, params) for c in when)


class _Fmt(dict):
    def __missing__(self, key):
        return "n/a"


def render(template: str, features: dict) -> str:
    """Fill {feature} placeholders; None -> 'n/a', floats get a compact form unless a format is given."""
    values = _Fmt()
    for k, v in features.items():
        if v is None:
            values[k] = _NA()
        elif isinstance(v, float):
            values[k] = _Num(v)
        else:
            values[k] = v
    return template.format_map(values)


class _NA:
    def __format__(self, spec):
        return "n/a"


class _Num(float):
    def __format__(self, spec):
        return format(float(self), spec) if spec else f"{float(self):.3g}"
