"""The runs one log holds, each judged on its own, at a cost bounded by the distinct runs, not the copies.

A run started again from scratch and appended to the same log (`RunData.fresh_starts`: a loguru file, MACE's
results file, a script re-run into `>> train.log`) is no spike or drift of the run before it: its loss starts
again at the untrained level. `split_runs` cuts the metrics and events once into those runs (one pass, not a
filter of the whole table per run), and

- a run whose records repeat another's exactly (the same steps, names, ranks and values, the same step-keyed
  events: a log concatenated to itself, a re-run that replayed a cached result) is judged once, as its last copy;
  a note says how many copies there were;
- of the distinct runs, at most `coverage.max_runs_in_log` are judged, the latest ones (a log with thousands of
  fresh starts is a loop around the script, and the last runs are the ones the reader came for); a note names
  the runs left unjudged and the verdict's coverage says the log was judged in part.

Only metrics and events are split: a run with layer dumps, batch manifests or telemetry (keyed by step, not
attempt) is judged whole. Run in, (runs, notes) out; the split is cached on the run, and `judged_run` gives
attribution the same runs as one view.
"""

from __future__ import annotations

from bisect import bisect_right

import polars as pl

from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.frames import in_slices
from spikeforensics.rundata import RunData

# a row's content as one number: the hash of the columns that make two runs the same run, reduced below 2^32 so
# that a sum over millions of rows stays exact in UInt64 (order-free: a run's rows may be numbered differently)
_ROW_MOD = 4_294_967_291


def _signature(rows: pl.LazyFrame, columns: list[str], part: pl.Expr) -> pl.DataFrame:
    """Per part: (rows, order-free content sum) of `columns`. Summed per attempt over slices of the table first
    (`in_slices`), then per part over those few rows: mapping every row to its part held a 7.2M-record log whole."""
    per_attempt = in_slices(
        rows,
        lambda piece: (
            piece.filter(pl.col("attempt").is_not_null())
            .group_by("attempt")
            .agg(pl.len().cast(pl.UInt64).alias("n"), (pl.struct(columns).hash(seed=7) % _ROW_MOD).sum().alias("h"))
        ),
        lambda parts: parts.group_by("attempt").agg(pl.col("n").sum(), pl.col("h").sum()),
    )
    return (
        per_attempt.with_columns(part)
        .filter(pl.col("part").is_not_null())
        .group_by("part")
        .agg(pl.col("n").sum().cast(pl.UInt32), pl.col("h").sum())
    )


def _note(summary: str, step: int, signal: str, value: float, facts: dict) -> Finding:
    return Finding(
        kind="divergence",  # any kind: the note is keyed by facts["note_kind"] (attribute/diagnosis._finding_note)
        step_start=step,
        step_end=step,
        peak_step=step,
        severity="info",
        score=0.0,
        summary=summary,
        evidence=[Evidence(signal=signal, step=None, value=value)],
        facts={"note_kind": "runs_in_log", "scope": "run", **facts},
    )


def split_runs(run: RunData, params) -> tuple[list[RunData], list[Finding]]:
    """The runs of `run` to judge, in log order, and the notes on runs merged or left out."""
    ranges, notes = _judged_ranges(run, params)
    if ranges is None:
        return [run], notes
    return [run.attempts_between(lo, hi) for lo, hi in ranges], notes


def judged_run(run: RunData, params) -> RunData:
    """`run` restricted to the runs that are judged (their metrics and events; the other tables as they are):
    the run itself when every run of the log is judged. Attribution reads this view, so a log copied 20,000 times
    is attributed on the copy that was judged, at the cost of one copy (issue 14: 2.3 GB for 7.2M records)."""
    ranges, _ = _judged_ranges(run, params)
    if ranges is None or len(ranges) == len(run.fresh_starts()):
        return run
    keep = pl.lit(False)
    for lo, hi in ranges:
        keep = keep | (pl.col("attempt") >= lo if hi is None else pl.col("attempt").is_between(lo, hi - 1))
    return run.attempts_where(keep)


def _judged_ranges(run: RunData, params) -> tuple[list[tuple[int, int | None]] | None, list[Finding]]:
    """([lo, hi) attempt ranges of the runs to judge, or None when the whole run is judged as one), notes; cached
    per run (detection and attribution both ask)."""
    key = ("sf-judged-runs", params.coverage.max_runs_in_log)
    if key not in run._cache:
        run._cache[key] = _split(run, params)
    ranges, notes = run._cache[key]
    return ranges, list(notes)


def _split(run: RunData, params) -> tuple[list[tuple[int, int | None]] | None, list[Finding]]:
    starts = run.fresh_starts()
    if len(starts) < 2 or run.layers.height or run.batches.height or run.telemetry.height:
        return None, []
    attempts = run.metrics.lazy().select(pl.col("attempt").unique().drop_nulls()).collect().to_series().to_list()
    to_part = {int(a): bisect_right(starts, int(a)) - 1 for a in attempts}
    part = pl.col("attempt").replace_strict(to_part, default=None, return_dtype=pl.Int64).alias("part")
    sig = _signature(run.metrics.lazy(), ["step", "name", "rank", "value"], part).join(
        _signature(run.events.lazy(), ["step", "kind"], part).rename({"n": "en", "h": "eh"}),
        on="part",
        how="left",
    )
    # runs with the same content: each distinct run judged once, as its last copy
    distinct = sig.group_by("n", "h", "en", "eh").agg(pl.col("part").max())
    judged = sorted(distinct.get_column("part").to_list())
    n_copies = sig.height - distinct.height
    notes = []
    first_step = run.step_range()[0] or 0
    if n_copies:
        notes.append(
            _note(
                f"{len(starts)} runs from scratch in this log; {n_copies} of them repeat another run's records "
                f"exactly (the same steps and values): each distinct run was judged once, as its last copy",
                first_step,
                "repeated_runs",
                float(n_copies),
                {"runs_in_log": len(starts), "repeated_runs": n_copies},
            )
        )
    cap = params.coverage.max_runs_in_log
    if len(judged) > cap:
        left = judged[:-cap]
        judged = judged[-cap:]
        notes.append(
            _note(
                f"{len(left)} of this log's {len(left) + cap} distinct runs from scratch were not judged: only the "
                f"last {cap} are (coverage.max_runs_in_log); the earliest unjudged run starts at attempt "
                f"{starts[left[0]]}",
                first_step,
                "unjudged_runs",
                float(len(left)),
                {"runs_in_log": len(starts), "unjudged_runs": len(left)},
            )
        )
    ends = [*starts[1:], None]
    return [(starts[p], ends[p]) for p in judged], notes  # at most max_runs_in_log of them
