"""Kill-point benchmark (issue 14): kill -9 an ingest or a diagnose at 23 points, then check the store.

    python benchmarks/kill_points.py [--run-dir sample_logs/tune/hardware_fault_ddp] [--json OUT] [--keep DIR]

A store first holds an earlier run (`base`, one fixture run folder, ingested and diagnosed). Then,
at each kill point, a copy of that store gets one more command that is killed with SIGKILL:

- named points inside the store's commit (`SPIKEFORENSICS_KILL_AT=<point>:<n>`, the test hook of
  `spikeforensics/store.py`): while staging, after staging, manifest staged, data moved beside
  its place, before/after the manifest rename (the commit point), between data renames, before
  and inside the removal of a replaced copy (a log that grew, ingested again);
- time offsets: an ingest killed as its first staging folder appears, and 0.1 s, 0.5 s, 2 s later;
- a diagnose of `base` killed when a report's temporary file appears (mid-write): the first one,
  then `report.json`'s, `report.md`'s and `report.html`'s; and at 50% of its clean duration (a
  point the command outlived, as a small file written between two polls, is listed as `late`).

After each kill the next command (`spikeforensics runs`) runs, and the checks are:
1. no staged bytes: `.tmp/` empty, no pending data file in `tables/`, no report temporary in `runs/`;
2. the direct read documented in docs/store.md (`pl.scan_parquet("tables/<t>/**/*.parquet",
   hive_partitioning=True)`) returns per run exactly the rows the tool reads (no uncommitted rows);
3. the earlier run intact: `base`'s tables row-for-row as before, its reports whole (`report.json`
   parses, `report.html` ends with `</html>`);
4. the killed run absent or whole: every source it holds has exactly the rows a clean ingest gives
   (a folder commits file by file, so some sources may be missing, none partial);
5. the killed command run again to completion gives exactly the clean result.
Prints one line per kill point; exit code 0 unless the harness fails (findings are reported).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
DATA_TABLES = ("metrics", "events", "layers", "batches", "telemetry")
POLL_S = 0.002  # how often the report folder is polled for a temporary file


def sf(args: list[str], env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "spikeforensics", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
        **kw,
    )


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate()
    return proc.returncode, err.decode(errors="replace")


def fingerprint(store: Path, run: str) -> dict:
    """Per table, per source: the sorted row hashes of what the tool reads."""
    from spikeforensics.store import Store

    st = Store(store)
    out = {}
    for t in DATA_TABLES:
        frame = st.table(run, t)
        for src in frame.get_column("source").unique().to_list():
            rows = frame.filter(pl.col("source") == src)
            out[(t, src)] = sorted(rows.hash_rows(seed=1).to_list())
    return out


def direct_counts(store: Path) -> dict:
    """Rows per (table, run) as the direct Parquet read of docs/store.md sees them."""
    out = {}
    for t in DATA_TABLES:
        if not list((store / "tables" / t).glob("*/*.parquet")):
            continue
        frame = pl.scan_parquet(str(store / "tables" / t / "**" / "*.parquet"), hive_partitioning=True)
        for run, n in frame.group_by("run").len().collect().iter_rows():
            out[(t, run)] = n
    return out


def tool_counts(store: Path) -> dict:
    from spikeforensics.store import Store

    st = Store(store)
    return {(t, run): st.table(run, t).height for run in st.runs() for t in DATA_TABLES if st.table(run, t).height}


def leftovers(store: Path) -> list[str]:
    found = [str(p.relative_to(store)) for p in (store / ".tmp").rglob("*")] if (store / ".tmp").is_dir() else []
    found += [str(p.relative_to(store)) for p in (store / "tables").rglob(".*.pending")]
    found += [str(p.relative_to(store)) for p in (store / "runs").rglob(".*.tmp")]
    return found


def reports_whole(store: Path, run: str) -> bool:
    folder = store / "runs" / run
    try:
        json.loads((folder / "report.json").read_text())
        return (folder / "report.html").read_text().rstrip().endswith("</html>")
    except (OSError, ValueError):
        return False


def compare(got: dict, ref: dict) -> str:
    """'absent', 'whole', 'k of n sources (each whole)' or what is wrong."""
    if not got:
        return "absent"
    bad = [k for k in got if got[k] != ref.get(k)]
    if bad:
        return f"PARTIAL/WRONG {bad[:3]}"
    sources = {s for _, s in ref}
    have = {s for _, s in got}
    missing_tables = [k for k in ref if k[1] in have and k not in got]
    if missing_tables:
        return f"PARTIAL (tables missing {missing_tables[:3]})"
    return "whole" if have == sources else f"{len(have)} of {len(sources)} sources (each whole)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", default=str(ROOT / "sample_logs" / "tune" / "hardware_fault_ddp"))
    ap.add_argument("--json")
    ap.add_argument("--keep", help="keep the stores here")
    args = ap.parse_args(argv)
    work = Path(args.keep or tempfile.mkdtemp(prefix="sf-kill-"))
    work.mkdir(parents=True, exist_ok=True)
    run_dir = Path(args.run_dir)
    inputs = work / "inputs"
    shutil.rmtree(inputs, ignore_errors=True)
    shutil.copytree(run_dir, inputs / "k", ignore=shutil.ignore_patterns("ground_truth.json"))
    log = max((p for p in (inputs / "k").iterdir() if p.suffix == ".log"), key=lambda p: p.stat().st_size)
    grown = inputs / "grown" / log.name  # base's log, later grown by 10% of its lines
    grown.parent.mkdir()
    lines = log.read_text().splitlines(keepends=True)
    grown.write_text("".join(lines[: len(lines) * 9 // 10]))

    base = work / "base"
    shutil.rmtree(base, ignore_errors=True)
    t0 = time.monotonic()
    assert finish(sf(["ingest", str(inputs / "k"), str(grown), "--run", "base", "--store", str(base)]))[0] == 0
    assert finish(sf(["diagnose", "--run", "base", "--store", str(base)]))[0] == 0
    base_print = fingerprint(base, "base")
    # references: a clean ingest of the killed commands' inputs
    ref_store = work / "ref"
    shutil.rmtree(ref_store, ignore_errors=True)
    shutil.copytree(base, ref_store)
    t = time.monotonic()
    assert finish(sf(["ingest", str(inputs / "k"), "--run", "k", "--store", str(ref_store)]))[0] == 0
    ingest_s = time.monotonic() - t
    ref_k = fingerprint(ref_store, "k")
    t = time.monotonic()
    assert finish(sf(["diagnose", "--run", "base", "--store", str(ref_store)]))[0] == 0
    diagnose_s = time.monotonic() - t
    grown.write_text("".join(lines) + "\n")  # grown: not the same bytes as k/ (that would be a no-op)
    ref_grow = work / "ref_grow"
    shutil.rmtree(ref_grow, ignore_errors=True)
    shutil.copytree(base, ref_grow)
    assert finish(sf(["ingest", str(grown), "--run", "base", "--store", str(ref_grow)]))[0] == 0
    ref_grown_base = fingerprint(ref_grow, "base")
    print(
        f"setup {time.monotonic() - t0:.1f} s; clean ingest {ingest_s:.1f} s, diagnose {diagnose_s:.1f} s; "
        f"{len(ref_k)} (table, source) parts in the killed run",
        file=sys.stderr,
    )

    ingest_k = ["ingest", str(inputs / "k"), "--run", "k"]
    ingest_grown = ["ingest", str(grown), "--run", "base"]
    diagnose_base = ["diagnose", "--run", "base"]
    points = [
        ("staging, first chunk", ingest_k, {"hook": "staging_append:1"}),
        ("staging, third chunk", ingest_k, {"hook": "staging_append:3"}),
        ("staging closed", ingest_k, {"hook": "staging_finished:1"}),
        ("manifest staged", ingest_k, {"hook": "manifest_staged:1"}),
        ("first data file moved", ingest_k, {"hook": "data_pending:1"}),
        ("second data file moved", ingest_k, {"hook": "data_pending:2"}),
        ("just before the manifest rename", ingest_k, {"hook": "before_manifest:1"}),
        ("just after the manifest rename", ingest_k, {"hook": "after_manifest:1"}),
        ("between data renames", ingest_k, {"hook": "data_renamed:1"}),
        ("second file, staging closed", ingest_k, {"hook": "staging_finished:2"}),
        ("third file, after its manifest", ingest_k, {"hook": "after_manifest:3"}),
        ("grown log: after the new manifest", ingest_grown, {"hook": "after_manifest:1"}),
        ("grown log: before the old copy's removal", ingest_grown, {"hook": "before_drop:1"}),
        ("grown log: old data removed, old manifest not", ingest_grown, {"hook": "drop_data_removed:1"}),
        ("ingest, as its first staging appears", ingest_k, {"after_staging": 0.0}),
        ("ingest, 0.1 s after its first staging", ingest_k, {"after_staging": 0.1}),
        ("ingest, 0.5 s after its first staging", ingest_k, {"after_staging": 0.5}),
        ("ingest, 2 s after its first staging", ingest_k, {"after_staging": 2.0}),
        ("diagnose: report temporary being written", diagnose_base, {"tmp": True}),
        ("diagnose: report.json being written", diagnose_base, {"tmp": "report.json"}),
        ("diagnose: report.md being written", diagnose_base, {"tmp": "report.md"}),
        ("diagnose: report.html being written", diagnose_base, {"tmp": "report.html"}),
        ("diagnose at 50% of its time", diagnose_base, {"at": 0.5}),
    ]
    results = []
    for name, cmd, how in points:
        store = work / "kill"
        shutil.rmtree(store, ignore_errors=True)
        shutil.copytree(base, store)
        if cmd is ingest_grown:
            grown.write_text("".join(lines) + "\n")  # grown: not the same bytes as k/ (that would be a no-op)
        full = [*cmd, "--store", str(store)]
        env = {"SPIKEFORENSICS_KILL_AT": how["hook"]} if "hook" in how else {}
        proc = sf(full, env)
        if "at" in how:
            time.sleep(how["at"] * (diagnose_s if cmd is diagnose_base else ingest_s))
            proc.send_signal(signal.SIGKILL)
        elif "after_staging" in how:  # time offsets from where the work starts (interpreter start varies)
            while proc.poll() is None and not any((store / ".tmp").glob("*")):
                time.sleep(POLL_S)
            time.sleep(how["after_staging"])
            proc.send_signal(signal.SIGKILL)
        elif how.get("tmp"):
            folder = store / "runs" / "base"
            pattern = f".{how['tmp']}.*.tmp" if isinstance(how["tmp"], str) else ".*.tmp"
            while proc.poll() is None and not any(folder.glob(pattern)):
                time.sleep(POLL_S)
            proc.send_signal(signal.SIGKILL)
        code, _ = finish(proc)
        killed = code == -signal.SIGKILL
        before_next = leftovers(store)
        nxt, nxt_err = finish(sf(["runs", "--store", str(store)]))
        left = leftovers(store)
        direct, tool = direct_counts(store), tool_counts(store)
        base_now = fingerprint(store, "base")
        if cmd is ingest_grown:
            base_state = compare(base_now, ref_grown_base) if base_now != base_print else "as before"
            base_ok = base_state in ("as before", "whole")
            killed_state = base_state
        else:
            base_ok = base_now == base_print
            killed_state = compare(fingerprint(store, "k"), ref_k) if cmd is ingest_k else "-"
        reports_ok = reports_whole(store, "base")
        # the killed command again, to completion
        again, again_err = finish(sf(full))
        if cmd is ingest_k:
            recovered = fingerprint(store, "k") == ref_k
        elif cmd is ingest_grown:
            recovered = fingerprint(store, "base") == ref_grown_base
        else:
            recovered = reports_whole(store, "base")
        recovered = recovered and again == 0 and not leftovers(store) and direct_counts(store) == tool_counts(store)
        ok = (
            nxt == 0
            and not left
            and direct == tool
            and base_ok
            and reports_ok
            and recovered
            and not killed_state.startswith("PARTIAL")
        )
        row = {
            "point": name,
            "killed": killed,
            "exit": code,
            "staged_before_next": len(before_next),
            "staged_after_next": left,
            "direct_equals_tool": direct == tool,
            "direct_minus_tool": {
                f"{t}/{r}": direct.get((t, r), 0) - tool.get((t, r), 0)
                for t, r in set(direct) | set(tool)
                if direct.get((t, r), 0) != tool.get((t, r), 0)
            },
            "earlier_run_intact": base_ok,
            "reports_whole": reports_ok,
            "killed_run": killed_state,
            "rerun_exit": again,
            "recovered": recovered,
            "ok": ok,
        }
        if nxt != 0:
            row["next_command_error"] = nxt_err.strip()[-300:]
        if again != 0:
            row["rerun_error"] = again_err.strip()[-300:]
        results.append(row)
        print(
            f"{('ok  ' if killed else 'late') if ok else 'FAIL'} {name:48s} killed={killed} staged {len(before_next)}->{len(left)} "
            f"direct=tool:{direct == tool} earlier:{base_ok} reports:{reports_ok} killed run:{killed_state} "
            f"rerun:{again}/{recovered}"
        )
    n_ok = sum(r["ok"] for r in results)
    late = [r["point"] for r in results if not r["killed"]]
    print(
        f"{n_ok} of {len(results)} kill points ok; {len(results) - len(late)} killed before the command ended"
        + (f" (ended first: {late})" if late else "")
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
