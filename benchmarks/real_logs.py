"""Real-log benchmark: what spikeforensics reads and concludes on real public training logs.

    python benchmarks/real_logs.py [--set dev|sealed|fresh|fresh2|...|fresh61|all] [--corpus sample_logs/real]
                                   [--json OUT] [--write-readme] [--case ID ...] [-v]

Every case folder of the corpus (`sample_logs/real/<set>/<case>/`, see its README) holds the
log file(s) as found and `FACTS.toml`, what a person read off the log. Each case's files are
ingested together into a temporary store (formats detected from content, as a user would),
diagnosed, and compared with the facts:

- **records**: training-step records read / `step_records` (the share of the log's records the
  tool read; >= 0.95 counts as read, more than 1.05 as over-read);
- **events**: events read by kind; overflow/skipped-step events against `overflow_count`;
- **verdict**: right when a healthy log is `healthy` and an unhealthy one `degraded` or
  `unstable`; on a log without a series to judge (fewer than 2 step records, or facts
  `series_printed = false`) `inconclusive` is right too; `incomplete` never is;
- **located**: the share of the facts' incident steps (`first_nonfinite_step`,
  `spike_peak_steps`, `divergence_start`) inside a warning+ incident, widened by one logging
  interval (the median step between records) on each side;
- **false alarms**: warning+ incidents on healthy logs;
- **stated cause**: on logs whose source states a cause, the headline incident's root cause
  (`verdict.root_cause`) is the stated label (top-1), or it or the headline's first
  alternative is (top-2).

Targets (issue 11) are printed beside the totals, never asserted: the exit code is 0 unless
the harness itself crashed (a case that fails to ingest or diagnose is scored as wrong and
listed). `--write-readme` replaces the section between the real-log markers of
`benchmarks/README.md`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import tomllib
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
README = HERE / "README.md"
BEGIN, END = "<!-- real-logs:begin -->", "<!-- real-logs:end -->"
SKIP_KINDS = ("overflow", "hysteresis", "skipped_step")
TARGETS = {"records_read": 1.0, "verdict": 0.90, "false_alarms": 0, "top1": 0.70, "top2": 0.85}


@dataclass
class CaseScore:
    id: str
    split: str
    framework: str
    healthy: bool
    step_records: int | None
    records: int = 0
    records_ratio: float | None = None
    formats: str = ""
    unparsed: int = 0
    events: dict = field(default_factory=dict)
    overflow_expected: int | None = None
    overflow_read: int = 0
    status: str = "error"
    verdict_right: bool = False
    warnings_plus: int = 0
    expected_steps: list = field(default_factory=list)
    located: int = 0
    stated_label: str | None = None
    root_cause: str | None = None
    top2: list = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0
    steps_covered: int = 0

    @property
    def records_ok(self) -> bool:
        return self.records_ratio is not None and 0.95 <= self.records_ratio <= 1.05


# dev, the sealed third (scored once in session 4), and the first-look sets of later sessions
# (`fresh`: session 6, `fresh2`: session 7, ..., `fresh9`, `fresh10`, `fresh11`: session 14, `fresh12` to `fresh16`: session 15, `fresh17`, `fresh18`, `fresh19`: session 16, `fresh20`, `fresh21`, `fresh22`: session 17, `fresh23`, `fresh24`: session 18, `fresh25`, `fresh26`, `fresh27`: session 19, `fresh28`, `fresh29`: session 20, `fresh30`, `fresh31`: session 21, `fresh32`: session 22, `fresh33`, `fresh34`: session 23, `fresh35`, `fresh36`: session 24, `fresh37` to `fresh41`: session 25, `fresh42` to `fresh47`: session 26, `fresh48` to `fresh52`: session 27, `fresh53` to `fresh58`: session 28, `fresh59` to `fresh61`: session 29), each a development set after its one scoring
SPLITS = (
    "dev",
    "sealed",
    "fresh",
    "fresh2",
    "fresh3",
    "fresh4",
    "fresh5",
    "fresh6",
    "fresh7",
    "fresh8",
    "fresh9",
    "fresh10",
    "fresh11",
    "fresh12",
    "fresh13",
    "fresh14",
    "fresh15",
    "fresh16",
    "fresh17",
    "fresh18",
    "fresh19",
    "fresh20",
    "fresh21",
    "fresh22",
    "fresh23",
    "fresh24",
    "fresh25",
    "fresh26",
    "fresh27",
    "fresh28",
    "fresh29",
    "fresh30",
    "fresh31",
    "fresh32",
    "fresh33",
    "fresh34",
    "fresh35",
    "fresh36",
    "fresh37",
    "fresh38",
    "fresh39",
    "fresh40",
    "fresh41",
    "fresh42",
    "fresh43",
    "fresh44",
    "fresh45",
    "fresh46",
    "fresh47",
    "fresh48",
    "fresh49",
    "fresh50",
    "fresh51",
    "fresh52",
    "fresh53",
    "fresh54",
    "fresh55",
    "fresh56",
    "fresh57",
    "fresh58",
    "fresh59",
    "fresh60",
    "fresh61",
)
ALL = SPLITS  # every set, each after its first look (a new set is scored once with --set before it joins)


def load_cases(corpus: Path, split: str, only: list[str] | None) -> list[tuple[Path, dict, str]]:
    splits = ALL if split == "all" else (split,)
    out = []
    for sp in splits:
        for facts_file in sorted((corpus / sp).glob("*/FACTS.toml")):
            facts = tomllib.loads(facts_file.read_text(encoding="utf-8"))
            if only and facts.get("id", facts_file.parent.name) not in only:
                continue
            out.append((facts_file.parent, facts, sp))
    return out


def expected_steps(facts: dict) -> list[int]:
    steps = list(facts.get("spike_peak_steps") or [])
    for key in ("first_nonfinite_step", "divergence_start"):
        if facts.get(key) is not None:
            steps.append(facts[key])
    return sorted({int(s) for s in steps})


def train_records(metrics: pl.DataFrame) -> tuple[int, float | None]:
    """(training-step records read, median step between consecutive records)."""
    recs = (
        metrics.filter(pl.col("record").is_not_null()).select("source", "record", "step").unique(["source", "record"])
    )
    steps = recs.get_column("step").drop_nulls().unique().sort()
    interval = float(steps.diff().drop_nulls().median()) if steps.len() > 1 else None
    return recs.height, interval


def score_case(folder: Path, facts: dict, split: str, store_root: Path) -> CaseScore:
    from spikeforensics import api
    from spikeforensics.ingest import IngestError

    case = CaseScore(
        id=facts.get("id", folder.name),
        split=split,
        framework=facts.get("framework", "?"),
        healthy=bool(facts.get("healthy")),
        step_records=facts.get("step_records"),
        overflow_expected=facts.get("overflow_count"),
        expected_steps=expected_steps(facts),
        stated_label=facts.get("stated_label"),
        steps_covered=int((facts.get("last_step") or 0) - (facts.get("first_step") or 0)),
    )
    start = time.perf_counter()
    files = [folder / f for f in facts.get("files", [])] or [p for p in folder.iterdir() if p.name != "FACTS.toml"]
    run_id = re.sub(r"[^A-Za-z0-9._-]", "-", case.id)[:120]
    try:
        report = api.ingest([str(f) for f in files], run_id=run_id, store=store_root)
        case.formats = ",".join(sorted({f.format or "?" for f in report.files}))
        case.unparsed = sum(f.unparsed for f in report.files)
        run = api.load_run(run_id, store_root)
        n, interval = train_records(run.metrics)
        case.records = n
        if case.step_records:
            case.records_ratio = n / case.step_records
        if run.events.height:
            case.events = dict(run.events.group_by("kind").len().sort("kind").iter_rows())
        case.overflow_read = sum(case.events.get(k, 0) for k in SKIP_KINDS)
        diagnosis = api.diagnose(run)
        verdict = diagnosis["verdict"]
        case.status = verdict["status"]
        real = [i for i in diagnosis["incidents"] if i["severity"] in ("warning", "critical")]
        case.warnings_plus = len(real)
        case.verdict_right = verdict_right(case.status, case.healthy, readable(facts))
        tol = interval or 1.0
        case.located = sum(
            any(i["step_start"] - tol <= s <= i["step_end"] + tol for i in real) for s in case.expected_steps
        )
        case.root_cause = verdict.get("root_cause")
        headline = _headline(real)
        if headline is not None:
            alts = [a["root_cause"] for a in headline.get("alternatives", [])]
            case.top2 = [case.root_cause] + alts[:1]
    except IngestError as exc:  # "nothing usable" (exit 1 at the command line): the tool read nothing
        case.status = "unreadable"
        case.error = str(exc).split(": ", 1)[-1][:120]
        case.verdict_right = verdict_right("inconclusive", case.healthy, readable(facts))
    except Exception as exc:  # noqa: BLE001 - a case that breaks the tool is scored, not fatal
        case.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
        if "-v" in sys.argv:
            traceback.print_exc()
    case.seconds = time.perf_counter() - start
    return case


def readable(facts: dict) -> bool:
    """A log whose facts give it a loss or grad-norm series to judge: >= 2 step records that print
    one (`series_records` when the facts give it, as when overflow-skipped records print only a
    loss scale; else `step_records`), and not marked `series_printed = false` (only a loss scale,
    throughput, events ...)."""
    with_series = facts.get("series_records", facts.get("step_records")) or 0
    return facts.get("series_printed", True) is not False and with_series >= 2


def verdict_right(status: str, healthy: bool, can_read: bool) -> bool:
    """Healthy logs must be `healthy`, unhealthy ones `degraded` or `unstable`. A log with no series to
    judge cannot be called healthy: there `inconclusive` is right too (and an unhealthy one that its
    events convict may still be `unstable`)."""
    if not can_read and status == "inconclusive":
        return True
    return status == "healthy" if healthy else status in ("degraded", "unstable")


def _headline(real: list[dict]) -> dict | None:
    """The incident the verdict names: the earliest of the most severe."""
    if not real:
        return None
    worst = "critical" if any(i["severity"] == "critical" for i in real) else "warning"
    return next(i for i in real if i["severity"] == worst)


def totals(cases: list[CaseScore]) -> dict:
    n = len(cases)
    with_records = [c for c in cases if c.step_records]
    healthy = [c for c in cases if c.healthy]
    stated = [c for c in cases if c.stated_label]
    expected = sum(len(c.expected_steps) for c in cases)
    return {
        "cases": n,
        "frameworks": len({c.framework for c in cases}),
        "records_read": sum(c.records_ok for c in with_records),
        "records_cases": len(with_records),
        "records_share_min": min((c.records_ratio or 0.0 for c in with_records), default=None),
        "verdict_right": sum(c.verdict_right for c in cases),
        "healthy_cases": len(healthy),
        "healthy_long": sum(c.steps_covered >= 1000 for c in healthy),
        "false_alarm_cases": sum(c.warnings_plus > 0 for c in healthy),
        "false_alarms": sum(c.warnings_plus for c in healthy),
        "located": sum(c.located for c in cases),
        "expected_steps": expected,
        "stated_cases": len(stated),
        "top1": sum(c.root_cause == c.stated_label for c in stated),
        "top2": sum(c.stated_label in c.top2 or c.root_cause == c.stated_label for c in stated),
        "errors": sum(bool(c.error) and c.status != "unreadable" for c in cases),
        "unreadable": sum(c.status == "unreadable" for c in cases),
        "inconclusive": sum(c.status == "inconclusive" for c in cases),
    }


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({a / b:.0%})" if b else "-"


def render(label: str, cases: list[CaseScore]) -> str:
    t = totals(cases)
    lines = [
        f"### {label}: {t['cases']} logs, {t['frameworks']} frameworks",
        "",
        "| measure | result | target |",
        "|---|---|---|",
        f"| logs with >= 95% of their step records read | {_pct(t['records_read'], t['records_cases'])} | every log |",
        f"| verdict right (healthy vs degraded/unstable) | {_pct(t['verdict_right'], t['cases'])} | >= 90% |",
        f"| healthy logs with a warning+ incident | {t['false_alarm_cases']} of {t['healthy_cases']} ({t['false_alarms']} incidents; "
        f"{t['healthy_long']} of them cover >= 1,000 steps) | 0 |",
        f"| incident steps located (within one logging interval) | {_pct(t['located'], t['expected_steps'])} | |",
        f"| stated cause top-1 | {_pct(t['top1'], t['stated_cases'])} | >= 70% |",
        f"| stated cause top-2 | {_pct(t['top2'], t['stated_cases'])} | >= 85% |",
        f"| inconclusive / unreadable (exit 1) / tool errors | {t['inconclusive']} / {t['unreadable']} / {t['errors']} | |",
        "",
        "| case | framework | records read | status | expected | root cause (top-2) | stated |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        ratio = f"{c.records}/{c.step_records}" if c.step_records else str(c.records)
        mark = "" if c.records_ok or not c.step_records else " ✗"
        want = "healthy" if c.healthy else "unhealthy"
        ok = "" if c.verdict_right else " ✗"
        cause = " / ".join(str(x) for x in c.top2) if c.top2 else str(c.root_cause)
        stated = c.stated_label or ""
        if stated:
            stated += "" if c.root_cause == stated else (" (top-2)" if stated in c.top2 else " ✗")
        status = c.status + (f" ({c.error})" if c.error else "")
        lines.append(f"| {c.id} | {c.framework} | {ratio}{mark} | {status}{ok} | {want} | {cause} | {stated} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", default="dev", choices=(*SPLITS, "all"))
    ap.add_argument("--corpus", default=str(ROOT / "sample_logs" / "real"))
    ap.add_argument("--case", nargs="*", help="only these case ids")
    ap.add_argument("--json", help="write the per-case scores and totals here")
    ap.add_argument("--write-readme", action="store_true")
    ap.add_argument("-v", action="store_true", help="print tracebacks of cases that fail")
    args = ap.parse_args(argv)
    cases = load_cases(Path(args.corpus), args.set, args.case)
    if not cases:
        print(f"no cases under {args.corpus}/{args.set}", file=sys.stderr)
        return 1
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sf-real-") as tmp:
        scores = [score_case(folder, facts, split, Path(tmp)) for folder, facts, split in cases]
    text = render(f"Real logs, {args.set}", scores)
    print(text)
    print(f"({len(scores)} logs in {time.perf_counter() - started:.0f} s)", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"totals": totals(scores), "cases": [asdict(c) for c in scores]}, indent=2, default=str) + "\n",
            encoding="utf-8",
        )
    if args.write_readme:
        body = README.read_text(encoding="utf-8")
        block = f"{BEGIN}\n{text}{END}"
        if BEGIN in body and END in body:
            body = body[: body.index(BEGIN)] + block + body[body.index(END) + len(END) :]
        else:
            body += f"\n## Real logs\n\n`python benchmarks/real_logs.py --set {args.set} --write-readme`\n\n{block}\n"
        README.write_text(body, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
