"""Drive Debian's headless chromium with its own flags (no node, no driver).

`load(page)` opens a file with `--dump-dom` and returns the DOM after the page's
scripts ran; the report's own script writes what a test needs into
`#sf-status` (charts expected / rendered, errors caught by window.onerror and
console.error, non-local resources the page fetched). `screenshot(page, png)`
saves a full-width picture. Used by tests/test_report_browser.py and
benchmarks/report_size.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--mute-audio",
    "--disable-features=MediaRouter,OptimizationHints,Translate",
    "--hide-scrollbars",
    # belt and braces: any host name resolves nowhere, so a stray request fails fast instead of leaving the machine
    "--host-resolver-rules=MAP * ~NOTFOUND",
]


def find() -> str | None:
    """The chromium binary: $SPIKEFORENSICS_CHROMIUM, else chromium / chromium-browser on PATH."""
    env = os.environ.get("SPIKEFORENSICS_CHROMIUM")
    if env:
        return env
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageStatus:
    dom: str
    charts_expected: int
    charts_rendered: int
    errors: list
    external: list
    done: bool
    render_ms: int | None
    seconds: float  # wall time of the whole chromium run

    def ok(self) -> bool:
        return self.done and self.charts_rendered == self.charts_expected and not self.errors and not self.external


def _run(binary: str, args: list[str], timeout: float) -> tuple[str, float]:
    # chromium's helper processes (crashpad, zygote) can outlive the main one and still write to the
    # profile as it is removed (seen under memory pressure): a throwaway profile left behind is harmless
    with tempfile.TemporaryDirectory(prefix="sf-chromium-", ignore_cleanup_errors=True) as profile:
        start = time.perf_counter()
        proc = subprocess.run(
            [binary, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return proc.stdout, time.perf_counter() - start


def _attr(tag: str, name: str) -> str | None:
    m = re.search(rf'\s{name}="([^"]*)"', tag)
    return None if m is None else m.group(1).replace("&quot;", '"').replace("&amp;", "&")


def load(page: Path, binary: str | None = None, budget_ms: int = 20000, timeout: float = 120) -> PageStatus:
    binary = binary or find()
    dom, seconds = _run(
        binary, [f"--virtual-time-budget={budget_ms}", "--dump-dom", Path(page).resolve().as_uri()], timeout
    )
    m = re.search(r'<div id="sf-status"[^>]*>', dom)
    tag = m.group(0) if m else ""
    errors = _attr(tag, "data-errors") or ""
    external = _attr(tag, "data-external") or "[]"
    render_ms = _attr(tag, "data-render-ms")
    return PageStatus(
        dom=dom,
        charts_expected=int(_attr(tag, "data-charts-expected") or -1),
        charts_rendered=int(_attr(tag, "data-charts-rendered") or 0),
        errors=json.loads(errors) if errors else [],
        external=json.loads(external),
        done=_attr(tag, "data-done") == "1",
        render_ms=int(render_ms) if render_ms else None,
        seconds=seconds,
    )


def screenshot(
    page: Path,
    png: Path,
    binary: str | None = None,
    width: int = 1280,
    height: int = 4000,
    budget_ms: int = 20000,
    timeout: float = 120,
) -> Path:
    binary = binary or find()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    _run(
        binary,
        [
            f"--virtual-time-budget={budget_ms}",
            f"--window-size={width},{height}",
            f"--screenshot={png.resolve()}",
            Path(page).resolve().as_uri(),
        ],
        timeout,
    )
    return png
