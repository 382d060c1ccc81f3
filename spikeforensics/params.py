"""Every threshold and window of detection, attribution and calibration, in one place.

Each field carries its default and, in the comment beside it, why. Defaults come
from shared/DOMAIN.md and shared/DETECTION-ANCHORS.md. Users override them with a
TOML file (`--params FILE`, sections named like the dataclasses below, e.g.
`[hard_spike] z_threshold = 7`) or `--set hard_spike.z_threshold=7`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path

# --- detection sections (owned by the detectors; one dataclass per detector) ------------
# (filled in by the detector modules' author)


# --- attribution / calibration sections ----------------------------------------------


@dataclass
class Params:
    """All sections. Add a section by adding a field with a dataclass default_factory."""

    def section(self, name: str):
        return getattr(self, name)

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: list[str] | None = None) -> "Params":
        params = cls()
        if path:
            try:
                data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ValueError(f"{path}: cannot read parameters: {exc}") from exc
            for section, values in data.items():
                if not isinstance(values, dict):
                    raise ValueError(f"{path}: [{section}] must be a table")
                for key, value in values.items():
                    params.set(f"{section}.{key}", value, origin=str(path))
        for item in overrides or []:
            if "=" not in item:
                raise ValueError(f"--set {item!r}: expected SECTION.NAME=VALUE")
            key, raw = item.split("=", 1)
            params.set(key.strip(), _parse_value(raw.strip()), origin="--set")
        return params

    def set(self, dotted: str, value, origin: str = "") -> None:
        section_name, _, key = dotted.partition(".")
        section = getattr(self, section_name, None)
        if section is None or not is_dataclass(section):
            known = ", ".join(f.name for f in fields(self))
            raise ValueError(f"{origin}: unknown parameter section {section_name!r} (known: {known})")
        names = {f.name: f for f in fields(section)}
        if key not in names:
            raise ValueError(f"{origin}: unknown parameter {dotted!r} (known in [{section_name}]: {', '.join(names)})")
        current = getattr(section, key)
        if isinstance(current, bool) and not isinstance(value, bool):
            raise ValueError(f"{origin}: {dotted} must be true or false")
        if isinstance(current, (int, float)) and not isinstance(current, bool):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ValueError(f"{origin}: {dotted} must be a number")
            value = type(current)(value) if isinstance(current, float) or float(value).is_integer() else value
        setattr(section, key, value)

    def as_dict(self) -> dict:
        return {f.name: dict(vars(getattr(self, f.name))) for f in fields(self)}


def _parse_value(raw: str):
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
