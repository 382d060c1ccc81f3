"""Many isolated grad-norm blips on a long run: one grouped pattern, not a hundred incidents (issue 12).

    python benchmarks/many_blips.py [--iterations 1000000] [--blips 100] [--moving 5] [--seed 0]
                                    [--variant quiet|mixed|both] [--report] [--keep]

Writes a synthetic Megatron-LM log (the line format of `benchmarks/ingest_speed.py` in session 4: one `iteration`
record per step, timer lines, warnings, a validation block every 1000 steps, rare fp16 overflows
(their chance proportional to the scale) with the loss scale growing back as a dynamic scaler does)
with `--blips` isolated single-step grad-norm blips of 50x at random steps (seeded, at least 500 steps
apart, none in the first 5,000),
the loss untouched; `mixed` makes `--moving` of them real spikes (the loss jumps 2.5x and decays over
about 20 steps). It ingests and diagnoses the log with the library (`api.ingest`, `api.diagnose`) and
prints the incidents by severity, kind and root cause, the grouped blip note, and times.

What should come out: no critical spike incident and no spike incident at all for the quiet blips; one `info`
note of kind `hard_spike` with the extra `pattern` (count, steps, first/last, median/max size,
loss effect) in `diagnosis["notes"]`; in `mixed`, each loss-moving blip its own incident. Exit 1 when
that is not what came out (so it can gate a CI run), 0 otherwise.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the same Megatron-LM lines as the speed benchmark
from ingest_speed import megatron_extras, megatron_record, overflow_line  # noqa: E402

BLIP_SIZE = 50.0  # the blips: 50x the grad norm's level
MIN_GAP = 500  # steps between two blips: isolated events
START = 5000  # no blip in the first records (warmup, no baseline yet)
# an fp16 overflow is the scaled gradient leaving the fp16 range: its chance grows with the scale (1 in 2,000
# steps at the top scale 2^16, half that a halving lower), so a dip makes the next overflow rarer, as in a
# real scaler; a chance that ignores the scale is a random walk that wanders down for thousands of steps
OVERFLOW_P = 0.0005


def blip_steps(iterations: int, blips: int, seed: int) -> list[int]:
    """`blips` distinct steps, at least MIN_GAP apart, uniform over the run after START."""
    rng = random.Random(seed + 1)
    lo, hi = min(START, iterations // 4), iterations - 100
    out: list[int] = []
    while len(out) < blips:
        s = rng.randint(lo, hi)
        if all(abs(s - x) >= min(MIN_GAP, (hi - lo) // (2 * blips)) for x in out):
            out.append(s)
    return sorted(out)


def generate(path: Path, iterations: int, blips: list[int], moving: list[int], seed: int = 0) -> int:
    """Write the log; returns its size in bytes. `moving` is the subset of `blips` the loss answers."""
    rng = random.Random(seed)
    blip_set, moving_set = set(blips), set(moving)
    last_move = -(10**9)
    scale, clean = 65536.0, 0
    with open(path, "w", buffering=1 << 22) as fh:
        buf = []
        for it in range(1, iterations + 1):
            sk = 0
            if rng.random() < OVERFLOW_P * scale / 65536.0:
                buf.append(overflow_line(scale))
                scale, clean, sk = max(scale / 2, 1.0), 0, 1
            else:
                clean += 1
                if clean % 1000 == 0:
                    scale = min(scale * 2, 65536.0)
            loss = 2.0 + 8.0 / (1 + it / 1000) + rng.gauss(0, 0.05)
            gn = 0.5 + rng.random()
            if it in blip_set:
                gn *= BLIP_SIZE
            if it in moving_set:
                last_move = it
            if it - last_move < 60:
                loss *= 1 + 1.5 * math.exp(-(it - last_move) / 5.0)
            buf.append(megatron_record(rng, it, iterations, loss, scale, sk, gn=gn))
            buf.extend(megatron_extras(it, loss))
            if len(buf) > 4096:
                fh.write("".join(buf))
                buf = []
        fh.write("".join(buf))
    return path.stat().st_size


def blip_note(diagnosis: dict) -> list[dict]:
    """The grouped blip pattern notes of a diagnosis."""
    return [n for n in diagnosis.get("notes", []) if n.get("pattern")]


def summarize(diagnosis: dict, blips: list[int], moving: list[int]) -> tuple[list[str], bool]:
    """Printable lines and whether the outcome is the expected one."""
    incs = diagnosis["incidents"]
    by_sev: dict[str, int] = {}
    for i in incs:
        by_sev[i["severity"]] = by_sev.get(i["severity"], 0) + 1
    kinds: dict[str, int] = {}
    causes: dict[str, int] = {}
    for i in incs:
        kinds[i["kind"]] = kinds.get(i["kind"], 0) + 1
        causes[i["root_cause"]] = causes.get(i["root_cause"], 0) + 1
    lines = [
        f"verdict: {diagnosis['verdict']['status']} ({diagnosis['verdict'].get('root_cause')})",
        f"incidents: {len(incs)} by severity {by_sev or '{}'}; kinds {kinds or '{}'}; root causes {causes or '{}'}",
    ]
    # the blips are judged against the spike incidents (other detectors' incidents, e.g. the loss scale's, may
    # span a blip by chance and are reported above, not scored here)
    spikes = [i for i in incs if "hard_spike" in i["kinds"]]
    found_moving = [s for s in moving if any(i["step_start"] - 3 <= s <= i["step_end"] + 3 for i in spikes)]
    quiet = sorted(set(blips) - set(moving))
    quiet_as_incident = [s for s in quiet if any(i["step_start"] - 3 <= s <= i["step_end"] + 3 for i in spikes)]
    crit_spikes = sum(i["severity"] == "critical" for i in spikes)
    notes = blip_note(diagnosis)
    hs_notes = [n for n in diagnosis.get("notes", []) if n.get("kind") == "hard_spike"]
    lines.append(
        f"notes: {len(diagnosis.get('notes', []))} ({len(hs_notes)} hard_spike); grouped blip notes: {len(notes)}"
    )
    for n in notes:
        p = n["pattern"]
        lines.append(
            f"  pattern: severity {n['severity']}, count {p['count']}, first {p['first_step']}, last {p['last_step']}, "
            f"median {p['median_ratio']}x, max {p['max_ratio']}x, loss moved {p['loss_moved']}, steps listed "
            f"{len(p['steps'])}"
        )
        lines.append(f"  summary: {n.get('summary', '')[:200]}")
    counted = notes[0]["pattern"]["count"] if notes else 0
    lines.append(
        f"hard-spike incidents: {len(spikes)} ({crit_spikes} critical); loss-moving blips found as incidents: "
        f"{len(found_moving)}/{len(moving)}; quiet blips inside a spike incident: {len(quiet_as_incident)}/{len(quiet)}; "
        f"pattern count {counted} for {len(quiet)} quiet blips"
    )
    ok = (
        crit_spikes <= len(moving)
        and len(found_moving) == len(moving)
        and not quiet_as_incident
        and len(notes) == 1
        and abs(counted - len(quiet)) <= max(1, len(quiet) // 20)
    )
    return lines, ok


def run_variant(name: str, args, tmp: Path) -> bool:
    from spikeforensics import api
    from spikeforensics.store import Store

    steps = blip_steps(args.iterations, args.blips, args.seed)
    rng = random.Random(args.seed + 2)
    moving = sorted(rng.sample(steps, args.moving)) if name == "mixed" else []
    log = tmp / f"blips_{name}.log"
    t0 = time.perf_counter()
    size = generate(log, args.iterations, steps, moving, args.seed)
    t1 = time.perf_counter()
    store = Store(tmp / f"store_{name}")
    api.ingest([log], run_id=f"blips-{name}", store=store)
    t2 = time.perf_counter()
    diagnosis = api.diagnose(f"blips-{name}", store=store)
    t3 = time.perf_counter()
    print(
        f"== {name}: {args.iterations:,} iterations, {len(steps)} blips of {BLIP_SIZE:g}x, {len(moving)} moving the loss "
        f"({size / 1e6:.0f} MB; generate {t1 - t0:.1f} s, ingest {t2 - t1:.1f} s, diagnose {t3 - t2:.1f} s)"
    )
    lines, ok = summarize(diagnosis, steps, moving)
    for line in lines:
        print("  " + line)
    if args.report:
        t4 = time.perf_counter()
        paths = api.write_reports(diagnosis, f"blips-{name}", out=tmp / f"report_{name}.html", store=store)
        html, md = paths["html"].read_text(), paths["markdown"].read_text() if "markdown" in paths else ""
        print(
            f"  report ({time.perf_counter() - t4:.1f} s): the pattern's sentence appears {html.count('isolated grad-norm blips')}x "
            f"in the HTML, {md.count('isolated grad-norm blips')}x in the Markdown"
        )
    print(f"  {'OK' if ok else 'NOT AS EXPECTED'}")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=1_000_000)
    ap.add_argument("--blips", type=int, default=100)
    ap.add_argument("--moving", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variant", choices=["quiet", "mixed", "both"], default="both")
    ap.add_argument("--report", action="store_true", help="also write the HTML report and count the pattern in it")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (log, store, report)")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="many_blips_"))
    ok = True
    try:
        for name in ["quiet", "mixed"] if args.variant == "both" else [args.variant]:
            ok &= run_variant(name, args, tmp)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
