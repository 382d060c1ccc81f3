"""Locate the bundled `rules/` and `templates/` folders.

In a source checkout (and an editable install) they sit at the top of the
repository, next to the package; a built wheel carries them inside the package as
`spikeforensics/_data/{rules,templates}` (see pyproject.toml). Both layouts are
looked up the same way so behaviour does not depend on how the tool was installed.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def _resource_dir(name: str) -> Path:
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"bundled '{name}/' folder not found next to {_PACKAGE_DIR}")


def rules_dir() -> Path:
    return _resource_dir("rules")


def templates_dir() -> Path:
    return _resource_dir("templates")
