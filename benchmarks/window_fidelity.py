"""How close a big text log read in windows comes to a whole-file read (issue 14, `ingest/_windows.py`).

    python benchmarks/window_fidelity.py [--pieces 3 | --window-bytes N] [--corpus sample_logs/real]

Every real log whose format is read by a whole-file line grammar (the grammars that are windowed for files of
WINDOW_MIN_BYTES or more) is parsed twice: whole (the grammar, then the mix, as `ingest` reads a small file) and in
windows (`parse_windows`, with the mix), each window `size / pieces` bytes (or `--window-bytes`). The real corpus
has no log big enough to be windowed by `ingest` itself, so the windows are made small to put several edges in
every log. Prints how many logs give the same metrics and events rows (all columns), records and unparsed counts,
and for each one that differs, what differs and by how many rows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spikeforensics.ingest import _finish, detect_format, parsers  # noqa: E402
from spikeforensics.ingest._mixing import mix  # noqa: E402
from spikeforensics.ingest._windows import parse_windows, windowed  # noqa: E402
from spikeforensics.ingest.base import SourceFile  # noqa: E402


def _table(parts, name: str) -> pl.DataFrame | None:
    frames = [p.tables[name] for p in parts if name in p.tables and p.tables[name].height]
    return pl.concat(frames, how="diagonal_relaxed") if frames else None


def compare(path: Path, window_bytes: int) -> list[str]:
    """What differs between the whole and the windowed read of `path` ([] when nothing)."""
    fmt, _ = detect_format(path)
    grammars = parsers()
    src = SourceFile(path=path, name=path.name)
    whole, _ = mix(fmt, src, grammars[fmt].parse(src), grammars)
    whole = _finish(whole, path.name)
    parts = [
        _finish(p, path.name)
        for p in parse_windows(grammars[fmt], SourceFile(path=path, name=path.name), grammars, [], window_bytes)
    ]
    diffs = []
    for name in ("metrics", "events"):
        a, b = whole.tables.get(name), _table(parts, name)
        a = a if a is not None and a.height else None
        if a is None or b is None:
            if (a is None) != (b is None):
                diffs.append(f"{name}: {0 if a is None else a.height} vs {0 if b is None else b.height} rows")
            continue
        cols = [c for c in a.columns if c != "detail"]
        a, b = a.select(cols).sort(cols, nulls_last=True), b.select(cols).sort(cols, nulls_last=True)
        if a.height != b.height:
            diffs.append(f"{name}: {a.height} vs {b.height} rows")
        elif not a.equals(b, null_equal=True):
            differing = [c for c in cols if not a.get_column(c).equals(b.get_column(c), null_equal=True)]
            diffs.append(f"{name}: {', '.join(differing)}")
    records = sum(p.records for p in parts)
    if records != whole.records:
        diffs.append(f"records {whole.records} vs {records}")
    unparsed = sum(p.unparsed for p in parts)
    if unparsed != whole.unparsed:
        diffs.append(f"unparsed {whole.unparsed} vs {unparsed}")
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pieces", type=int, default=3, help="windows of size / PIECES bytes (default 3)")
    ap.add_argument("--window-bytes", type=int, help="a fixed window size instead")
    ap.add_argument("--corpus", default=str(ROOT / "sample_logs" / "real"))
    args = ap.parse_args()
    grammars = parsers()
    files = [
        p
        for p in sorted(Path(args.corpus).rglob("*"))
        if p.is_file() and p.name != "FACTS.toml" and p.suffix != ".md" and "PROVENANCE" not in p.name
    ]
    same, differ = 0, []
    for path in files:
        fmt, _ = detect_format(path)
        size = path.stat().st_size
        window = args.window_bytes or size // args.pieces + 1
        if fmt is None or size <= window or not windowed(grammars[fmt], 1 << 62):
            continue
        try:
            diffs = compare(path, window)
        except Exception as exc:  # noqa: BLE001 (a failure is a finding, not the end of the run)
            diffs = [f"error: {type(exc).__name__}: {exc}"]
        if diffs:
            differ.append((str(path.relative_to(args.corpus)), fmt, diffs))
        else:
            same += 1
    label = f"{args.window_bytes} B windows" if args.window_bytes else f"{args.pieces} windows each"
    print(f"{same + len(differ)} logs read by windowed grammars, {label}: {same} the same rows, {len(differ)} differ")
    for rel, fmt, diffs in differ:
        print(f"  {rel} [{fmt}]: {'; '.join(diffs)}")


if __name__ == "__main__":
    main()
