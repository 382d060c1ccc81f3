"""Fuzz benchmark (issue 14): mutated real inputs through `ingest` then `diagnose`, bounded and seeded.

    python benchmarks/fuzz.py [--inputs 2000] [--seed 14] [--jobs 1] [--timeout 180]
                              [--rss-limit-mb 500] [--out DIR] [--keep-all] [--json OUT]
    python benchmarks/fuzz.py --replay DIR/failing/<case>     # one saved input, isolated

Seeds: every real log under `sample_logs/real/*/*/`, the files of the labelled fixture runs of
`sample_logs/tune` and `sample_logs/holdout` (logs, JSONL metrics, batch manifests in JSONL and
Parquet, layer dumps in CSV, JSONL and Parquet, nvidia-smi CSV, kernel logs), and side files made
here from them (an NPZ layer dump, a TensorBoard event file, a CSV batch manifest). Input `i` of
seed `S` is made by `random.Random(f"{S}:{i}")` alone, so any input can be made again. It applies
1-3 mutations: byte flips, truncation, line duplication and shuffles, huge numbers (2^63, 1e309,
400 digits), NaN/Inf tokens, binary garbage, very long lines (up to 16 MB), deep JSON, CSV/JSONL
header bombs, lone CR and mixed line endings, BOMs, UTF-16 and mixed encodings, control and Unicode
line-separator characters; and for side files, structural ones (Parquet columns retyped, nulled,
nested, emptied, huge or non-finite, one row group per row; NPZ arrays retyped, reshaped,
mismatched, pickled; TensorBoard events with non-finite values and wall times, huge steps, odd
tensors, record lengths claiming 2^62 bytes, bad CRCs). A log is fuzzed alone; a side file sits
in a folder beside its run's unmutated log (so `diagnose` joins it). One input in seven forces the
seed's format with `--format` (garbage straight into one parser).

Each input is ingested (`spikeforensics ingest PATH --run f --store S`) and, when that exits 0,
diagnosed (`spikeforensics diagnose --run f --store S --out R/report.html`), with a timeout per
input and its peak RSS. For throughput the commands run through the click CLI in long-lived
worker processes (`--worker`; one interpreter start per 150 inputs, not two per input), each
input's peak RSS read from `VmHWM` after resetting it (`/proc/self/clear_refs`; the worker's
baseline is included, so it over-states a fresh process); fd 2 goes to a file per input, so a
Rust panic or a C-level message is seen too. A worker that hangs (past `--timeout`), dies (a
signal, an abort) or passes a hard memory cap is killed and the input in flight is a failure.
Every failing input is then run again isolated, as a user would: two real `python -m
spikeforensics` processes, peak RSS from `wait4`, and saved with a `repro.txt` under
`<out>/failing/`. `--replay` runs one saved input that way.

A failure: a hang, a death, an exit other than 0/1/3 (2 is usage: counted apart, a failure for
inputs that pass no bad option), a traceback or panic on stderr, an RSS over `--rss-limit-mb`
(in the worker and again in the isolated re-run: the worker's figure includes its own baseline).
Reported also (not failures): exit-1 messages that do not name the input file. Exit code 0 unless
the harness itself fails; findings are printed (and written with `--json`), never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_mutators import (  # noqa: E402
    BINARY_MUTATORS,
    SIDE_ROWS_MAX,
    TB_MUTATIONS,
    TEXT_MUTATORS,
    WEIGHTS,
    mutate_npz,
    mutate_parquet,
    tb_events_from_log,
    tb_file,
)

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
FIXTURE_SETS = ("tune", "holdout")
# A worker is replaced after this many inputs: caches and heap growth of one process
# should not pile up into the RSS of later inputs.
WORKER_INPUTS = 150
# A worker above this RSS is killed at once (the machine is shared); the target is lower.
HARD_RSS_MB = 2000
MAIN_LOG_NAMES = ("stdout.log", "train.log", "metrics.jsonl")
SIDE_NAMES = (
    "batches.jsonl",
    "batches.parquet",
    "grads.csv",
    "grad_stats.parquet",
    "layer_grads.jsonl",
    "nvidia_smi.csv",
    "kern.log",
)
TRACEBACK_RE = re.compile(r"Traceback \(most recent call last\)|panicked at|RUST_BACKTRACE|Fatal Python error")


# -- seeds ------------------------------------------------------------------------------------------


def collect_seeds(synth_dir: Path) -> list[dict]:
    """Seed inputs: {'path', 'kind' ('log' or 'side'), 'main' (the run's log for a side file)}."""
    seeds = []
    for f in sorted((SAMPLES / "real").glob("*/*/*")):
        if f.is_file() and f.name != "FACTS.toml":
            seeds.append({"path": f, "kind": "log", "main": None})
    for fixture_set in FIXTURE_SETS:
        for run in sorted((SAMPLES / fixture_set).iterdir()):
            if not run.is_dir():
                continue
            main = next((run / n for n in MAIN_LOG_NAMES if (run / n).exists()), None)
            for f in sorted(run.iterdir()):
                if f.name == "ground_truth.json" or not f.is_file():
                    continue
                if f == main:
                    seeds.append({"path": f, "kind": "log", "main": None})
                elif main is not None:
                    seeds.append({"path": f, "kind": "side", "main": main})
    seeds += synth_seeds(synth_dir)
    return seeds


def synth_seeds(out: Path) -> list[dict]:
    """Side-file formats no fixture holds: an NPZ layer dump, a TensorBoard event file, a CSV manifest."""
    import numpy as np
    import polars as pl

    out.mkdir(parents=True, exist_ok=True)
    run = SAMPLES / "tune" / "data_outlier_clip"
    main = run / "train.log"
    grads = pl.read_csv(run / "grads.csv").head(SIDE_ROWS_MAX)
    npz = out / "grads.npz"
    np.savez(
        npz,
        **{
            c: np.asarray(grads.get_column(c).to_list(), dtype=str if grads.schema[c] == pl.String else None)
            for c in grads.columns
        },
    )
    batches = pl.read_ndjson(run / "batches.jsonl").head(400)
    rows = ["step,rank,micro,sample_id,sample_loss"]
    for r in batches.iter_rows(named=True):
        for sid, loss in zip(r["sample_ids"], r.get("sample_losses") or [None] * len(r["sample_ids"])):
            rows.append(f"{r['step']},{r['rank']},{r['micro']},{sid},{'' if loss is None else loss}")
    manifest = out / "batches.csv"
    manifest.write_text("\n".join(rows) + "\n")
    tb = out / "events.out.tfevents.1700000000.host"
    tb.write_bytes(tb_file(random.Random(0), events=tb_events_from_log(main)))
    return [{"path": p, "kind": "side", "main": main} for p in (npz, manifest, tb)]


# -- making an input ------------------------------------------------------------------------------


def make_case(seeds: list[dict], seed: int, index: int, case_dir: Path, formats: dict) -> dict:
    """Write input `index` under case_dir/in; its description (what to run, how it was made)."""
    rng = random.Random(f"{seed}:{index}")
    s = rng.choice(seeds)
    path: Path = s["path"]
    data = path.read_bytes()
    applied = []
    binary = path.suffix in (".parquet", ".npz") or "tfevents" in path.name
    if path.suffix == ".parquet" and rng.random() < 0.7:
        data, what = mutate_parquet(path, rng)
        applied.append(what)
    elif path.suffix == ".npz" and rng.random() < 0.7:
        data, what = mutate_npz(path, rng)
        applied.append(what)
    elif "tfevents" in path.name and s["main"] is not None and rng.random() < 0.7:  # (a real event file: no log)
        mutation = rng.choice(TB_MUTATIONS)
        data = tb_file(rng, tb_events_from_log(s["main"]), mutation)
        applied.append(mutation)
    names = list(BINARY_MUTATORS) if binary else list(TEXT_MUTATORS)
    weights = [WEIGHTS.get(n, 1.0) for n in names]
    for name in rng.choices(names, weights, k=rng.randint(0 if applied else 1, 2 if applied else 3)):
        data = TEXT_MUTATORS[name](data, rng) if data or name in ("garbage", "empty") else data
        applied.append(name)
    inp = case_dir / "in"
    inp.mkdir(parents=True)
    if s["kind"] == "side":
        shutil.copyfile(s["main"], inp / s["main"].name)
        (inp / path.name).write_bytes(data)
        target, fmt = inp, None
    else:
        (inp / path.name).write_bytes(data)
        target = inp / path.name
        fmt = formats.get(str(path)) if rng.random() < 1 / 7 else None
    return {
        "index": index,
        "seed": seed,
        "seed_file": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name,
        "mutations": applied,
        "target": str(target),
        "format": fmt,
        "case": str(case_dir),
        "names": sorted({path.name, target.name, path.stem}),
    }


def commands(case: dict, store: str, report: str) -> tuple[list[str], list[str]]:
    ingest = ["ingest", case["target"], "--run", "f", "--store", store]
    if case.get("format"):
        ingest += ["--format", case["format"]]
    return ingest, ["diagnose", "--run", "f", "--store", store, "--out", report]


# -- the worker: commands through the click CLI, one input at a time -------------------------------


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _invoke(runner, cli, args: list[str], err_path: Path) -> dict:
    """One CLI command in this process; fd 2 to a file (C-level messages); SystemExit -> exit code."""
    saved = os.dup(2)
    with open(err_path, "ab") as err:
        os.dup2(err.fileno(), 2)
    try:
        result = runner.invoke(cli, args, catch_exceptions=True)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    out = {
        "exit": result.exit_code,
        "stderr": (result.stderr or "")[-4000:],
        "fd2": err_path.read_text(errors="replace")[-4000:],
    }
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        out["traceback"] = "".join(traceback.format_exception(*result.exc_info))[-4000:]
    return out


def worker() -> None:
    """Read one case JSON a line on stdin, write its result JSON a line on the saved stdout."""
    os.nice(5)
    results = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    from click.testing import CliRunner

    from spikeforensics.cli import cli

    runner = CliRunner()
    for line in sys.stdin:
        case = json.loads(line)
        case_dir = Path(case["case"])
        ingest, diagnose = commands(case, str(case_dir / "store"), str(case_dir / "report" / "report.html"))
        _reset_peak()
        start = time.monotonic()
        res = {"index": case["index"], "ingest": _invoke(runner, cli, ingest, case_dir / "ingest.fd2")}
        if res["ingest"]["exit"] == 0:
            res["diagnose"] = _invoke(runner, cli, diagnose, case_dir / "diagnose.fd2")
        res["seconds"] = round(time.monotonic() - start, 2)
        res["rss_mb"] = round(_peak_rss_mb(), 1)
        results.write(json.dumps(res) + "\n")


# -- isolated: real processes, as a user runs them ------------------------------------------------


def _rss_of(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_isolated(case: dict, timeout: float) -> dict:
    """Both commands as `python -m spikeforensics` processes; peak RSS from wait4."""
    case_dir = Path(case["case"])
    iso = case_dir / "isolated"
    shutil.rmtree(iso, ignore_errors=True)
    iso.mkdir()
    ingest, diagnose = commands(case, str(iso / "store"), str(iso / "report" / "report.html"))
    out = {}
    for name, args in (("ingest", ingest), ("diagnose", diagnose)):
        proc = subprocess.Popen(
            [sys.executable, "-m", "spikeforensics", *args],
            stdout=subprocess.DEVNULL,
            stderr=open(iso / f"{name}.stderr", "wb"),
            cwd=iso,
            preexec_fn=lambda: os.nice(5),
        )
        deadline = time.monotonic() + timeout
        status = rusage = None
        while status is None:
            pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status, rusage = st, ru
                break
            if time.monotonic() > deadline or _rss_of(proc.pid) > HARD_RSS_MB:
                os.kill(proc.pid, signal.SIGKILL)
                _, status, rusage = os.wait4(proc.pid, 0)
                out[f"{name}_killed"] = "timeout" if time.monotonic() > deadline else "rss"
                break
            time.sleep(0.1)
        proc.returncode = os.waitstatus_to_exitcode(status)
        stderr = (iso / f"{name}.stderr").read_text(errors="replace")
        out[name] = {"exit": proc.returncode, "stderr": stderr[-4000:], "rss_mb": round(rusage.ru_maxrss / 1024, 1)}
        if proc.returncode != 0:
            break
    return out


# -- the parent ---------------------------------------------------------------------------------


class Worker:
    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.case = None
        self.started = 0.0
        self.done = 0

    def send(self, case: dict) -> None:
        self.case = case
        self.started = time.monotonic()
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()


def failures_of(res: dict, rss_limit: float) -> list[str]:
    why = []
    if res.get("killed"):
        why.append(res["killed"])
    for step in ("ingest", "diagnose"):
        r = res.get(step)
        if not r:
            continue
        if r["exit"] not in (0, 1, 3):
            why.append(f"{step}_exit_{r['exit']}")
        if r.get("traceback") or TRACEBACK_RE.search(r.get("stderr", "") + r.get("fd2", "")):
            why.append(f"{step}_traceback")
    if res.get("rss_mb", 0) > rss_limit:
        why.append("rss")
    return why


def confirmed(res: dict, rss_limit: float) -> list[str]:
    """The failures that stand: a worker's RSS includes its baseline and earlier inputs' heap,
    so an RSS failure stands only if the isolated run (a fresh process per command) also passes the limit."""
    why = list(res.get("failures") or [])
    iso = res.get("isolated") or {}
    iso_rss = max([v.get("rss_mb", 0) for v in iso.values() if isinstance(v, dict)] or [0])
    if "rss" in why and iso and iso_rss <= rss_limit and not any(k.endswith("_killed") for k in iso):
        why.remove("rss")
        res["rss_worker_only"] = {"worker_mb": res.get("rss_mb"), "isolated_mb": iso_rss}
    return why


def unnamed_error(case: dict, res: dict) -> str | None:
    """An exit-1 ingest message that does not name the input file (informational)."""
    r = res.get("ingest") or {}
    if r.get("exit") != 1:
        return None
    last = [line for line in r.get("stderr", "").splitlines() if line.strip()][-1:] or [""]
    return None if any(n and n in last[0] for n in case["names"]) else last[0][:200]


def run(args, indices: list[int]) -> dict:
    out = Path(args.out or tempfile.mkdtemp(prefix="sf-fuzz-"))
    (out / "cases").mkdir(parents=True, exist_ok=True)
    seeds = collect_seeds(out / "synth")
    from spikeforensics.ingest import detect_format

    formats = {str(s["path"]): detect_format(s["path"])[0] for s in seeds if s["kind"] == "log"}
    print(f"fuzz: {len(seeds)} seed files, {len(indices)} inputs, seed {args.seed}, out {out}", file=sys.stderr)
    done = load_results(out)
    pending = [i for i in indices if i not in done]
    workers = [Worker() for _ in range(args.jobs)]
    cases = {i: done[i][0] for i in indices if i in done}
    results = {i: done[i][1] for i in indices if i in done}
    t0 = time.monotonic() - sum(r.get("seconds", 0) for r in results.values()) / max(args.jobs, 1)
    while pending or any(w.case for w in workers):
        for i, w in enumerate(workers):
            if w.case is None and pending:
                if w.done >= WORKER_INPUTS or w.proc.poll() is not None:
                    w.kill()
                    w = workers[i] = Worker()
                index = pending.pop(0)
                case_dir = out / "cases" / f"{index:05d}"
                shutil.rmtree(case_dir, ignore_errors=True)
                cases[index] = make_case(seeds, args.seed, index, case_dir, formats)
                w.send(cases[index])
        busy = [w for w in workers if w.case]
        ready, _, _ = select.select([w.proc.stdout for w in busy], [], [], 0.5)
        for w in busy:
            case = w.case
            res = None
            if w.proc.stdout in ready:
                line = w.proc.stdout.readline()
                if line:
                    res = json.loads(line)
                else:  # died with the input in flight
                    code = w.proc.wait()
                    res = {"index": case["index"], "killed": f"worker_died_{code}"}
            elif time.monotonic() - w.started > args.timeout:
                w.kill()
                res = {"index": case["index"], "killed": "timeout", "seconds": args.timeout}
            elif _rss_of(w.proc.pid) > HARD_RSS_MB:
                w.kill()
                res = {"index": case["index"], "killed": "rss_hard_cap", "rss_mb": HARD_RSS_MB}
            if res is None:
                continue
            w.case = None
            w.done += 1
            if w.proc.poll() is not None:
                w.done = WORKER_INPUTS  # replace it
            results[case["index"]] = res
            finish_case(case, res, args, out)
            with open(out / "results.jsonl", "a") as log:  # a stopped run can be summarized or resumed
                log.write(json.dumps({"case": case, "result": res}) + "\n")
            n = len(results)
            if n % 100 == 0:
                print(f"  {n}/{len(indices)} inputs, {time.monotonic() - t0:.0f} s", file=sys.stderr)
    for w in workers:
        w.proc.stdin.close()
        w.kill()
    return summarize(cases, results, args, out, time.monotonic() - t0)


def finish_case(case: dict, res: dict, args, out: Path) -> None:
    why = failures_of(res, args.rss_limit_mb)
    res["failures"] = why
    case_dir = Path(case["case"])
    if why:
        res["isolated"] = run_isolated(case, args.timeout)
        dest = out / "failing" / f"{case['index']:05d}-{'+'.join(sorted(set(why)))}"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        shutil.copytree(case_dir / "in", dest / "in")
        (dest / "case.json").write_text(
            json.dumps(
                {**case, "target": str(dest / "in" / Path(case["target"]).relative_to(case_dir / "in"))}, indent=1
            )
        )
        ingest, diagnose = commands(case, "STORE", "REPORT/report.html")
        (dest / "repro.txt").write_text(
            f"python benchmarks/fuzz.py --seed {case['seed']} --only {case['index']}   (makes it again)\n"
            f"python benchmarks/fuzz.py --replay {dest}\n"
            f"seed file: {case['seed_file']}\nmutations: {', '.join(case['mutations'])}\nfailures: {why}\n"
            f"commands: spikeforensics {' '.join(ingest)}; spikeforensics {' '.join(diagnose)}\n\n"
            + json.dumps(res, indent=1)[:20000]
        )
    if not args.keep_all:
        shutil.rmtree(case_dir, ignore_errors=True)


def load_results(out: Path) -> dict[int, tuple[dict, dict]]:
    """index -> (case, result) of the inputs a run in `out` already finished."""
    done = {}
    path = out / "results.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # the last line of a stopped run
                continue
            done[row["case"]["index"]] = (row["case"], row["result"])
    return done


def summarize(cases: dict, results: dict, args, out: Path, seconds: float) -> dict:
    exits = {"ingest": Counter(), "diagnose": Counter()}
    fails, unnamed, mutation_count = [], [], Counter()
    max_rss = max_iso = (0.0, None)
    for index, res in sorted(results.items()):
        case = cases[index]
        mutation_count.update(m.split(":")[0] for m in case["mutations"])
        for step in exits:
            if step in res:
                exits[step][res[step]["exit"]] += 1
        if res.get("rss_mb", 0) > max_rss[0]:
            max_rss = (res["rss_mb"], index)
        iso_rss = [v.get("rss_mb", 0) for v in (res.get("isolated") or {}).values() if isinstance(v, dict)]
        if iso_rss and max(iso_rss) > max_iso[0]:
            max_iso = (max(iso_rss), index)
        res["failures"] = confirmed(res, args.rss_limit_mb)
        if res["failures"]:
            iso = res.get("isolated", {})
            fails.append(
                {
                    "index": index,
                    "failures": res["failures"],
                    "seed_file": case["seed_file"],
                    "mutations": case["mutations"],
                    "isolated": {k: (v["exit"], v["rss_mb"]) if isinstance(v, dict) else v for k, v in iso.items()},
                    "message": _last_line(res),
                }
            )
        msg = unnamed_error(case, res)
        if msg:
            unnamed.append({"index": index, "seed_file": case["seed_file"], "message": msg})
    kinds = Counter(f for x in fails for f in x["failures"])
    summary = {
        "inputs": len(results),
        "seed": args.seed,
        "seconds": round(seconds),
        "jobs": args.jobs,
        "ingest_exits": dict(sorted(exits["ingest"].items())),
        "diagnose_exits": dict(sorted(exits["diagnose"].items())),
        "hangs": kinds.get("timeout", 0),
        "max_rss_mb": max_rss[0],
        "max_rss_input": max_rss[1],
        "max_isolated_rss_mb": max_iso[0],
        "max_isolated_rss_input": max_iso[1],
        "rss_worker_only": {i: r["rss_worker_only"] for i, r in results.items() if r.get("rss_worker_only")},
        "tracebacks": sum(v for k, v in kinds.items() if k.endswith("traceback")),
        "failing_inputs": len(fails),
        "failure_kinds": dict(kinds),
        "failing": fails,
        "exit1_messages_not_naming_the_file": unnamed,
        "mutations": dict(mutation_count.most_common()),
        "out": str(out),
    }
    return summary


def _last_line(res: dict) -> str:
    for step in ("diagnose", "ingest"):
        r = res.get(step)
        if r:
            lines = [x for x in (r.get("traceback") or r.get("stderr") or "").splitlines() if x.strip()]
            if lines:
                return lines[-1][:300]
    return res.get("killed", "")


def print_summary(s: dict) -> None:
    print(f"{s['inputs']} inputs (seed {s['seed']}) in {s['seconds']} s with {s['jobs']} worker(s)")
    print(f"  ingest exits:   {s['ingest_exits']}")
    print(f"  diagnose exits: {s['diagnose_exits']}")
    print(
        f"  hangs: {s['hangs']}; tracebacks: {s['tracebacks']}; max RSS {s['max_rss_mb']} MB in a worker "
        f"(input {s['max_rss_input']}); isolated re-runs: max {s['max_isolated_rss_mb']} MB "
        f"(input {s['max_isolated_rss_input']}); over the limit in a worker only: {s['rss_worker_only']}"
    )
    print(f"  failing inputs: {s['failing_inputs']} {s['failure_kinds']}")
    for f in s["failing"]:
        print(f"    #{f['index']} {'+'.join(f['failures'])} {f['seed_file']} {f['mutations']} isolated={f['isolated']}")
        print(f"       {f['message']}")
    print(f"  exit-1 messages not naming the file: {len(s['exit1_messages_not_naming_the_file'])}")
    for u in s["exit1_messages_not_naming_the_file"][:10]:
        print(f"    #{u['index']} {u['seed_file']}: {u['message']}")
    print(f"  saved failing inputs under {s['out']}/failing")


def replay(folder: Path, timeout: float) -> None:
    case = json.loads((folder / "case.json").read_text())
    case["case"] = str(folder)
    print(json.dumps(run_isolated(case, timeout), indent=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per input (ingest + diagnose)")
    ap.add_argument("--rss-limit-mb", type=float, default=500.0)
    ap.add_argument("--out", help="folder for inputs and failing cases (default: a new temp folder)")
    ap.add_argument("--keep-all", action="store_true", help="keep every input, not only the failing ones")
    ap.add_argument("--only", type=int, nargs="*", help="run only these input indices")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--replay", help="run one saved failing input isolated")
    ap.add_argument(
        "--summarize",
        action="store_true",
        help="only summarize what the run in --out finished (a stopped run); run again to resume it",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker()
        return 0
    if args.replay:
        replay(Path(args.replay), args.timeout)
        return 0
    indices = sorted(set(args.only)) if args.only else list(range(args.inputs))
    if args.summarize:
        done = load_results(Path(args.out))
        summary = summarize(
            {i: c for i, (c, _) in done.items()}, {i: r for i, (_, r) in done.items()}, args, Path(args.out), 0
        )
    else:
        summary = run(args, indices)
    print_summary(summary)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
