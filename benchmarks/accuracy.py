"""Accuracy benchmark: score spikeforensics (and five reference baselines) on the labelled runs.

    python benchmarks/accuracy.py --set tune|holdout|fresh|all [--runs sample_logs]
                                  [--write-readme] [--json OUT] [--check] [--tol 5]

For every run folder with a `ground_truth.json` under `--runs`, the other files of the
folder are ingested into a temporary store, diagnosed (`attribute.diagnose_run`; until
it exists `detect.detect_incidents`, detection only; if neither exists, baselines only),
and scored with `spikeforensics.evaluate`. Prints the per-kind table and a per-run table
for each set; `--write-readme` replaces the section between the accuracy markers of
`benchmarks/README.md`. Targets are reported, never asserted: exit 0 unless the
harness crashed or, with `--check`, a run (or one of its detectors) raised while being
ingested or diagnosed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # baselines.py beside this script

import baselines  # noqa: E402

from spikeforensics import evaluate  # noqa: E402
from spikeforensics.ingest import ingest_paths  # noqa: E402
from spikeforensics.params import Params  # noqa: E402
from spikeforensics.rundata import RunData  # noqa: E402
from spikeforensics.store import Store  # noqa: E402

TRUTH_FILE = "ground_truth.json"
README = HERE / "README.md"
BEGIN, END = "<!-- accuracy:begin -->", "<!-- accuracy:end -->"
SETS = ("tune", "holdout", "fresh", "final", "blind", "sealed")
PRODUCT = "spikeforensics"


# -- finding the product's entry point ---------------------------------------------------


def product_entry():
    """(mode, function): the best diagnosis entry point that exists today."""
    try:
        from spikeforensics.attribute import diagnose_run

        return "diagnose_run", diagnose_run
    except ImportError:
        pass
    try:
        from spikeforensics.detect import detect_incidents

        return "detect_incidents", detect_incidents
    except ImportError:
        return "baselines only", None


def _plain(obj):
    """A dataclass or object with as_dict() -> plain dict."""
    if isinstance(obj, dict):
        return obj
    for method in ("as_dict", "to_dict"):
        if hasattr(obj, method):
            return getattr(obj, method)()
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.name != "findings"}
    raise TypeError(f"cannot read a diagnosis from {type(obj).__name__}")


def to_diagnosis(result) -> dict:
    """diagnose_run's result (dict or object), a list of Incidents, or detect_incidents'
    (incidents, notes) pair -> diagnosis-like dict."""
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], list):
        result = result[0]
    if isinstance(result, (list, tuple)):
        return {"incidents": [_plain(i) for i in result]}
    out = _plain(result)
    out["incidents"] = [_plain(i) for i in out.get("incidents", [])]
    return out


def diagnose(mode: str, fn, run: RunData, params: Params) -> dict | None:
    if fn is None:
        return None
    return to_diagnosis(fn(run, params))


# -- runs ------------------------------------------------------------------------------------


def find_runs(root: Path, which: str) -> list[tuple[str, Path, dict]]:
    """(set, folder, truth) of every labelled run folder under `root`, in a stable order."""
    found = []
    for truth_path in sorted(root.rglob(TRUTH_FILE)):
        truth = json.loads(truth_path.read_text(encoding="utf-8"))
        folder = truth_path.parent
        set_name = str(truth.get("set") or folder.parent.name)
        if which in ("all", set_name):
            found.append((set_name, folder, truth))
    order = {name: i for i, name in enumerate(SETS)}
    return sorted(found, key=lambda f: (order.get(f[0], len(SETS)), f[0], str(f[1])))


def run_id_for(set_name: str, folder: Path) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{set_name}-{folder.name}").strip("-._")[:128] or "run"


def score_folder(
    set_name: str, folder: Path, truth: dict, store: Store, entry, params: Params, tol: int
) -> tuple[list, dict]:
    """Ingest, diagnose and score one run; (RunScores of the product and baselines, timing/info)."""
    mode, fn = entry
    run_id = run_id_for(set_name, folder)
    name = str(truth.get("scenario") or folder.name)
    info = {"run": name, "set": set_name, "mode": mode, "error": None, "crash": False}
    t0 = time.perf_counter()
    diagnosis, error, run = None, None, None
    try:
        # the folder as a user would pass it, minus the answer key: links in a scratch folder
        view = Path(store.root).parent / "views" / run_id
        view.mkdir(parents=True)
        for path in sorted(folder.iterdir()):
            if path.is_file() and path.name != TRUTH_FILE and not path.name.startswith("."):
                (view / path.name).symlink_to(path.resolve())
        report = ingest_paths([view], run_id, store, follow_symlinks=True)  # the links lead to sample_logs/
        info["skipped"] = [f.message for f in report.files if f.status == "failed"]
        if info["skipped"]:
            # a run whose files were not all read scores as "nothing found": a harness fault, not a figure
            raise RuntimeError(f"input files of {folder} not read: {info['skipped']}")
        run = RunData.load(store, run_id) if store.has_run(run_id) else RunData.from_frames(run_id)
        diagnosis = diagnose(mode, fn, run, params)
        # a detector that raised is kept by the product as a note (the others still run); here it is a crash
        failed = [
            n["summary"]
            for n in (diagnosis or {}).get("notes", [])
            if any(e.get("signal") == "detector_error" for e in n.get("evidence", []))
        ]
        if failed:
            info["crash"], info["traceback"] = True, "\n".join(failed)
            error = "; ".join(failed)
    except Exception as exc:  # scored as "no predictions", reported, and fails --check
        error = f"{type(exc).__name__}: {exc}"
        info["crash"], info["traceback"] = True, traceback.format_exc()
    info["seconds_product"] = time.perf_counter() - t0
    info["error"] = info.get("error") or error
    scores = []
    if fn is not None:
        scores.append(
            evaluate.score_run(diagnosis or {}, truth, tol_steps=tol, detector=PRODUCT, run=name, error=error)
        )
    t1 = time.perf_counter()
    found = baselines.run_baselines(run) if run is not None else {}
    for base, diag in found.items():
        score = evaluate.score_run(diag, truth, tol_steps=tol, detector=base, run=name)
        score.set = set_name
        scores.append(score)
    for s in scores:
        s.set = set_name
    info["seconds_baselines"] = time.perf_counter() - t1
    return scores, info


# -- output ---------------------------------------------------------------------------------


def _incident_text(t) -> str:
    steps = f"{t.step_start}" if t.step_start == t.step_end else f"{t.step_start}-{t.step_end}"
    return f"{t.kind}@{steps}"


def per_run_table(scores: list, infos: list[dict]) -> str:
    """One line per run: truth vs the product's matches, false incidents, and baseline hits."""
    lines = [
        "| set | run | healthy | truth incidents | detected | root cause ok | predicted (warning+) | baselines detected |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by_run: dict[tuple, dict[str, evaluate.RunScore]] = {}
    for s in scores:
        by_run.setdefault((s.set, s.run), {})[s.detector] = s
    for info in infos:
        group = by_run.get((info["set"], info["run"]), {})
        me = group.get(PRODUCT)
        any_score = me or next(iter(group.values()), None)
        if any_score is None:
            continue
        truth = ", ".join(f"{_incident_text(t)} ({t.root_cause})" for t in any_score.truths) or "-"
        if me is None:
            det = rc = pred = "n/a"
        else:
            det = f"{sum(t.detected for t in me.truths)}/{len(me.truths)}"
            rcs = [t for t in me.truths if t.detected and t.root_cause]
            rc = f"{sum(t.pred_root_cause == t.root_cause for t in rcs)}/{len(rcs)}" if rcs else "-"
            pred = ", ".join(f"{_incident_text(p)}{'' if p.matched else ' (false)'}" for p in me.preds[:6]) or "-"
            if len(me.preds) > 6:
                pred += f", +{len(me.preds) - 6} more"
            if info.get("error"):
                pred = f"ERROR {info['error'][:80]}"
        base = " ".join(
            f"{d}:{sum(t.detected for t in s.truths)}/{len(s.truths)}+{sum(not p.matched for p in s.preds)}f"
            for d, s in sorted(group.items())
            if d != PRODUCT
        )
        lines.append(
            f"| {info['set']} | {info['run']} | {any_score.healthy} | {truth} | {det} | {rc} | {pred} | {base} |"
        )
    return "\n".join(lines) + "\n"


DEFINITIONS = """\
How it is scored (`spikeforensics/evaluate.py`; the tolerance is `--tol`, default 5 steps):

- Only predicted incidents at severity `warning` or `critical` count. Baseline incidents all count.
- A predicted incident **matches** a ground-truth incident when its steps overlap
  `[step_start - tol, step_end + tol]` of the truth incident **and** the predicted `kinds` list
  shares a kind with the truth `kinds` list (so a `nonfinite` found inside a labelled spike whose
  truth lists both kinds is a hit, not a miss plus a false alarm).
- **Recall** of kind K: truth incidents of primary `kind` K matched by some prediction / truth
  incidents of primary kind K (each truth incident counts once, under its primary kind).
- **Precision** of kind K: predictions of primary `kind` K that match some truth incident /
  all predictions of kind K, **on every run, clean runs included**. Several predictions on one
  truth incident all count as correct; the extras are the `split` column. F1 = 2PR/(P+R), with
  an undefined side (no truth or no prediction of the kind) taken as 0.
- **False incidents on clean runs**: predictions on runs whose truth says `healthy: true`
  (total, and runs with at least one).
- **Root cause top-1**, per truth label and overall: over matched truth incidents, the best
  matching prediction (same primary kind first, then higher severity, then closest peak) has
  `root_cause` equal to the truth label. Missed incidents are counted in recall, not here.
- **Hardware faults blamed on data**: matched truth `hardware_fault` incidents predicted `data_*`.
- **Sample recall@5**: over matched truth `data_outlier` incidents that list `sample_ids`:
  |first 5 predicted `sample_ids` ∩ truth| / min(5, |truth|), averaged; also split by whether the
  run's manifest recorded per-sample losses (the truth file's `per_sample_losses`, a property of the
  input); and its expectation when suspects with equal scores are put in random order, which
  removes the luck of the product's tie-break by sample ID. **Skip list**: how many of the labelled samples the diagnosis' skip list
  (`skiplist.reasons` of the matched incident, what a training script reads on resume) holds, and
  how many unlabelled ones it adds.
- **Peak error**: |predicted `peak_step` - truth `peak_step`| of the best match, median per kind
  (how well the incident is localised; a wide predicted window can match a short truth incident).
- Baselines (`benchmarks/baselines.py`, not in the product path) score detection only, with the
  same rules, on the run's loss and grad-norm series: `static` (grad norm > 100x its initial level,
  loss > 2x its 20-step mean; misses NaN), `megatron` (>= 10x the max of the first 100 values of loss
  and grad norm, plus its NaN/Inf check), `llm_foundry` (loss >= 2x the 100-step mean, 5 in a row;
  misses NaN and is blind while one is in its window), `olmo_core` (6 sigma over 128 steps, loss or
  grad norm, one-sided; a NaN is flagged and poisons the next 128 steps), `zclip` (EMA z-score of the
  grad norm, alpha 0.97, z > 2.5; misses NaN and is blind after one). Flags closer than 5 steps
  form one incident, `nonfinite` when it holds a NaN/Inf, else `hard_spike`.
- Sets: `tune` (what thresholds and rules are developed on); `holdout` (other seeds, formats, batch
  sizes, depths and fault magnitudes); `fresh`, `final`, `blind` and `sealed` (the holdout variants
  again with new seeds, widths, batches, LRs and data mixes, each generated before it was first scored;
  `sealed` with a per-sample CSV manifest). How often each
  non-tune set was looked at, and what changed after, is recorded below the table: a set that
  informed a change no longer gives an independent figure. Targets: F1 >= 0.95 on `hard_spike` and
  `nonfinite` and above every baseline (a tie at 1.00 counts as met), zero false incidents on every clean run, top-1 >= 90%,
  sample recall@5 >= 95%, no hardware fault blamed on data.
"""


def readme_section(tables: dict[str, dict], meta: dict, runs_table: str = "") -> str:
    parts = [
        "## Accuracy",
        "",
        "Generated by `python benchmarks/accuracy.py --set all --write-readme`; do not edit by hand.",
        "",
        f"Diagnosis entry point: `{meta['mode']}`. {meta['runs']} labelled runs under `{meta['root']}`, "
        f"scored in {meta['seconds']:.1f} s.",
        "",
        DEFINITIONS,
    ]
    for name, table in tables.items():
        parts.append(evaluate.render_markdown(table, title=f"Set `{name}`", product=PRODUCT))
    if runs_table:
        parts += [
            "<details><summary>Per run</summary>",
            "",
            "Baselines column: `name:detected/truth+false` incidents.",
            "",
            runs_table,
            "</details>",
            "",
        ]
    return "\n".join(parts).rstrip() + "\n"


def write_readme(section: str, path: Path = README) -> None:
    """Replace the text between the accuracy markers (append the markers if missing)."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    block = f"{BEGIN}\n{section}{END}"
    if BEGIN in text and END in text and text.index(BEGIN) < text.index(END):
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


# -- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", dest="which", choices=[*SETS, "all"], default="all")
    ap.add_argument("--runs", default="sample_logs", help="folder holding <set>/<scenario>/ground_truth.json")
    ap.add_argument("--write-readme", action="store_true", help=f"rewrite the accuracy section of {README.name}")
    ap.add_argument("--readme", default=str(README), help=argparse.SUPPRESS)
    ap.add_argument("--json", dest="json_out", help="write scores and tables as JSON")
    ap.add_argument("--check", action="store_true", help="CI mode: exit 1 if a run crashed; targets are only reported")
    ap.add_argument("--tol", type=int, default=evaluate.DEFAULT_TOL_STEPS, help="step tolerance of a match")
    ap.add_argument("--quiet", action="store_true", help="no per-run table")
    args = ap.parse_args(argv)

    root = Path(args.runs)
    started = time.perf_counter()
    runs = find_runs(root, args.which)
    entry = product_entry()
    params = Params.load()
    print(
        f"accuracy: {len(runs)} labelled runs under {root} (set {args.which}); entry point: {entry[0]}", file=sys.stderr
    )
    scores, infos = [], []
    with tempfile.TemporaryDirectory(prefix="sf-accuracy-") as tmp:
        store = Store(Path(tmp) / "store")
        for set_name, folder, truth in runs:
            run_scores, info = score_folder(set_name, folder, truth, store, entry, params, args.tol)
            scores += run_scores
            infos.append(info)
            flag = f" ERROR {info['error']}" if info["error"] else ""
            print(
                f"  {set_name}/{folder.name}: {info['seconds_product']:.2f}s + {info['seconds_baselines']:.2f}s{flag}",
                file=sys.stderr,
            )
    seconds = time.perf_counter() - started
    set_names = [s for s in SETS if any(i["set"] == s for i in infos)]
    set_names += sorted({i["set"] for i in infos} - set(set_names))
    tables = {name: evaluate.aggregate([s for s in scores if s.set == name]) for name in set_names}

    for name, table in tables.items():
        print(evaluate.render_markdown(table, title=f"Set `{name}`", product=PRODUCT))
    if not args.quiet and infos:
        print(per_run_table(scores, infos))
    print(f"{len(runs)} runs in {seconds:.1f} s (entry point: {entry[0]})")

    meta = {"mode": entry[0], "runs": len(runs), "root": args.runs, "seconds": seconds}
    crashed = [i for i in infos if i["crash"]]
    if args.write_readme and crashed:
        print(f"not writing {args.readme}: {len(crashed)} run(s) crashed (see below)", file=sys.stderr)
    elif args.write_readme:
        write_readme(readme_section(tables, meta, per_run_table(scores, infos)), Path(args.readme))
        print(f"wrote the accuracy section of {args.readme}", file=sys.stderr)
    if args.json_out:
        out = {"meta": meta, "tables": tables, "runs": infos, "scores": [s.as_dict() for s in scores]}
        Path(args.json_out).write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")
    for info in crashed:
        print(f"crash in {info['set']}/{info['run']}:\n{info['traceback']}", file=sys.stderr)
    return 1 if (args.check and crashed) else 0


if __name__ == "__main__":
    sys.exit(main())
