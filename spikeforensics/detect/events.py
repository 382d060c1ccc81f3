"""Runs that their events alone convict: no loss or grad-norm series is needed.

Five event patterns are decisive on their own (CONTRACT.md: "events alone can make a run
unstable"), each a critical finding:

- **fp16 overflow at the loss-scale floor** (`loss_scale_collapse`, fact `cause` =
  `loss_scale_floor`): an `overflow` event whose new scale is at or below
  `events.floor_scale` (DeepSpeed's `Attempted loss scale: 1, reducing to 1`), or any event
  whose text says the scale cannot fall further (`Current loss scale already at minimum`,
  `Minimum loss scale reached`), or an overflow that halves the scale to `events.exploded_scale` or
  below, past the lowest floor any scaler keeps (apex's `reducing loss scale to 1.52587890625e-05`).
- **every logged step overflowing** (`loss_scale_collapse`, `cause` = `all_steps_overflow`):
  overflow-skipped steps make up >= `all_overflow_frac` of the logged steps, over more steps
  than a scaler's calibration takes (or at a scale already below 1, past any calibration).
- **every logged step skipped by a gradient-norm guard** (`clip_rate_anomaly`, `cause` =
  `guard_skips_every_step`): a trainer's own guard (`detected nan/inf/spiky gradient (norm=2.19);
  skipping optimizer step`) skips >= `all_overflow_frac` of the logged steps, >= `guard_min_skips` of
  them, at finite norms that stay within `guard_norm_spread` of each other: ordinary norms above a
  threshold set too tight, not a spike, so no update is applied.
- **a hardware error, then nothing** (`hardware_error`, `cause` = `hardware_death`): an `xid`
  event with a hardware code, an `ecc` event, or an `error` whose message names ECC / an Xid,
  with no training-step record after it (same file: a later line; another file: a later
  time; a run without step records: nothing after it by definition).
- **a collective that hung, then nothing** (`hardware_error`, `cause` = `collective_timeout`): an
  NCCL watchdog timeout with no training-step record after it (the watchdog takes the job down).
- **training stopped on a non-finite loss** (`nonfinite`, `cause` = `stopped_nonfinite`): a
  `nan` or `error` event whose text says training stopped and names NaN/Inf, or the exception that
  ends a traceback naming NaN/Inf (the process died on it); and `nan` events that the nonfinite
  detector cannot place (no step).

Pure: `detect(run, params)` reads `run.events` / `run.metrics` only.
"""

from __future__ import annotations

import json

import polars as pl

from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData


def _text() -> pl.Expr:
    return pl.col("detail").fill_null("")


def _num(key: str) -> pl.Expr:
    return _text().str.json_path_match(f"$.{key}").cast(pl.Float64, strict=False)


def _records(run: RunData) -> pl.DataFrame:
    """One row per training-step record: source, line, step, attempt, time."""
    # lazily: only the six columns read are taken out of the long table, not a filtered copy of it
    return (
        run.metrics.lazy()
        .filter(pl.col("record").is_not_null())
        .group_by("source", "record", "attempt")
        .agg(pl.col("line").min(), pl.col("step").first(), pl.col("time").min())
        .collect()
    )


class _Records:
    """The training-step records (`_records`), queried when an event first needs them: most runs' events (a NaN
    at a logged step) never do, and on a long run the query groups every metric row by its record (~0.5 GB
    at 5M steps)."""

    def __init__(self, run: RunData):
        self.run = run
        self._frame: pl.DataFrame | None = None

    @property
    def frame(self) -> pl.DataFrame:
        if self._frame is None:
            self._frame = _records(self.run)
        return self._frame


def _fallback_step(run: RunData, records: pl.DataFrame) -> int:
    """Where an event without a step is placed: the last logged step, else the last record index, else 0
    (the nonfinite detector numbers a log without step counters by record index too)."""
    steps = records.get_column("step").drop_nulls()
    if steps.len():
        return int(steps.max())
    return int(records.get_column("record").max()) if records.height else 0


def _placed(ev: pl.DataFrame, fallback: int) -> pl.DataFrame:
    return ev.with_columns(pl.col("step").fill_null(fallback).alias("at"))


def floor_events(run: RunData, ep) -> pl.DataFrame:
    """The events that put the fp16 loss scale at its floor (with `new_scale`, `old_scale` and `exploded`: the
    overflow went past every scaler's floor), empty when none did. The attribution's `loss_scale_floor` log fact
    reads the same events (attribute/log_facts.py)."""
    ov = run.events_of("overflow", "hysteresis", "error", "nan", "skipped_step")
    if ov.height == 0:
        return ov
    ov = ov.with_columns(_num("new_scale").alias("new_scale"), _num("old_scale").alias("old_scale"))
    # a scale at `floor_scale` is the floor only for the scalers whose minimum that is (DeepSpeed's and
    # Megatron's min_loss_scale default 1); fairseq's halves on to 1e-4, apex's and torch's have none.
    # Elsewhere only the words (`at_floor`, "Minimum loss scale reached") or a halving that could not
    # happen ("reducing to 1" from 1) say so.
    lowest = ov.get_column("new_scale").drop_nulls().min()
    floor_framework = _text().str.contains(ep.floor_formats_pattern)
    value_floor = lowest is not None and lowest >= ep.floor_scale
    overflow = pl.col("kind") == "overflow"
    stuck = overflow & (pl.col("new_scale") == pl.col("old_scale")) & (pl.col("new_scale") <= ep.floor_scale)
    at_value = overflow & (pl.col("new_scale") <= ep.floor_scale) & pl.lit(value_floor) & floor_framework
    # past every scaler's floor: an overflow at a scale below `exploded_scale` (apex halving on to 1.5e-5)
    exploded = (overflow & (pl.col("new_scale") <= ep.exploded_scale)).fill_null(False)
    return ov.with_columns(exploded.alias("exploded")).filter(
        at_value
        | stuck.fill_null(False)
        | pl.col("exploded")
        | _text().str.contains(ep.floor_pattern)
        | _text().str.contains(r'"at_floor":\s*true')
    )


def _floor(run: RunData, params, fallback: int) -> list[Finding]:
    ep = params.events
    hit = floor_events(run, ep)
    if hit.height == 0:
        return []
    hit = _placed(hit, fallback).sort("at", "line")
    first = hit.row(0, named=True)
    n = hit.height
    worded = hit.filter(_text().str.contains(ep.floor_pattern))
    below_every_floor = bool(hit.get_column("exploded").any()) and not worded.height
    lowest = hit.get_column("new_scale").min()
    where = (
        f"below {ep.exploded_scale:g}, every scaler's floor"
        if below_every_floor
        else f"at the loss-scale floor ({ep.floor_scale:g})"
    )
    ev = [
        Evidence(
            signal="loss_scale",
            step=first["at"],
            value=first["new_scale"],
            baseline=first["old_scale"],
            note=f"{n} overflow/minimum-scale event(s) {where}",
        )
    ]
    if worded.height:
        w = worded.row(0, named=True)
        ev.append(Evidence(signal="event", step=w["at"], value=None, note=_message(w["detail"])))
    lo, hi = int(hit.get_column("at").min()), int(hit.get_column("at").max())
    return [
        Finding(
            kind="loss_scale_collapse",
            step_start=lo,
            step_end=hi,
            peak_step=int(first["at"]),
            severity="critical",
            # score 0: when the loss-scale detector saw the same floor, its finding (halvings, onset) leads
            score=0.0,
            evidence=ev,
            attempt=int(first["attempt"] or 0),
            summary=(
                f"fp16 loss scale down to {lowest:.3g} from step {first['at']}: {n} overflow event(s) below "
                f"{ep.exploded_scale:g}, the lowest floor a scaler keeps (fairseq stops there: 'your loss is "
                "probably exploding'); the fp16 values overflow with the loss scaled down 10,000x"
                if below_every_floor
                else f"fp16 loss scale at its floor ({ep.floor_scale:g}) from step {first['at']}: {n} overflow "
                "event(s) with nowhere left to halve; the scaler cannot recover"
            ),
            facts={
                "cause": "loss_scale_floor",
                "at_floor": True,
                "min_scale": lowest if below_every_floor else ep.floor_scale,
                "onset_step": lo,
                "floor_events": n,
                "decisive_event": True,
            },
        )
    ]


def _all_overflow(run: RunData, params, records: _Records) -> list[Finding]:
    ep = params.events
    ov = run.events_of("overflow", "hysteresis")  # both are a step the fp16 scaler skipped
    if ov.height == 0:
        return []
    count = _text().str.json_path_match("$.count").cast(pl.Int64, strict=False).fill_null(1)
    placed = ov.filter(pl.col("step").is_not_null())
    skipped = (
        placed.select("attempt", "step").unique().height
        + int(ov.filter(pl.col("step").is_null()).select(count).sum().item() or 0)
        if placed.height
        else int(ov.select(count).sum().item() or 0)
    )
    logged = records.frame.select("attempt", "step").unique().height
    denom = max(logged, skipped)
    stuck = _longest_same_scale_run(placed)
    # a scale already below 1 has halved far past any calibration (scalers start at 2^15-2^32): however
    # few records the log shows, the skips are not a scaler finding its level
    lowest = ov.select(_text().str.json_path_match("$.new_scale").cast(pl.Float64, strict=False).min()).item()
    below_one = lowest is not None and lowest < ep.floor_scale
    calibrating = skipped < ep.all_overflow_min_steps and stuck < ep.all_overflow_stuck_skips and not below_one
    if calibrating or skipped < ep.all_overflow_frac * denom:
        return []
    steps = placed.get_column("step")
    lo = int(steps.min()) if steps.len() else 0
    hi = int(steps.max()) if steps.len() else 0
    summary = f"every logged step overflows: {skipped} of {denom} steps skipped by the fp16 loss scaler" + (
        f" ({stuck} in a row at one loss scale: the scale is not falling)"
        if stuck >= ep.all_overflow_stuck_skips
        else ""
    )
    note = f"{skipped} overflow-skipped steps of {denom} logged"
    facts = {"cause": "all_steps_overflow", "overflow_skips": skipped, "same_scale_skips": stuck}
    return [_every_step("loss_scale_collapse", "overflow_skips", lo, hi, skipped, denom, note, summary, facts)]


def _every_step(
    kind: str, signal: str, lo: int, hi: int, skipped: int, denom: int, note: str, summary: str, facts: dict
) -> Finding:
    """A critical finding that `skipped` of the run's `denom` logged steps (steps lo-hi) were skipped: the run
    applied (almost) no update. Its facts carry `onset_step` and `decisive_event` (the events alone convict)."""
    return Finding(
        kind=kind,
        step_start=lo,
        step_end=hi,
        peak_step=lo,
        severity="critical",
        score=float(skipped),
        evidence=[
            Evidence(
                signal=signal,
                step=lo,
                value=float(skipped),
                baseline=float(denom),
                ratio=round(skipped / denom, 4) if denom else None,
                note=note,
            )
        ],
        summary=summary,
        facts={**facts, "onset_step": lo, "decisive_event": True},
    )


def _guard_skips(run: RunData, params, records: _Records) -> list[Finding]:
    ep = params.events
    sk = run.events_of("skipped_step")
    if sk.height == 0:
        return []
    sk = sk.with_columns(_num("value").alias("_norm")).filter(
        pl.col("step").is_not_null() & pl.col("_norm").is_finite() & (pl.col("_norm") > 0)
    )
    per_step = sk.group_by("attempt", "step").agg(pl.col("_norm").max()).sort("attempt", "step")
    skipped = per_step.height
    if skipped < ep.guard_min_skips:
        return []
    # (the skip warnings' steps count as logged: minFM prints a record only every few steps)
    denom = pl.concat([records.frame.select("attempt", "step"), per_step.select("attempt", "step")]).unique().height
    lo_norm, hi_norm = per_step.get_column("_norm").min(), per_step.get_column("_norm").max()
    if skipped < ep.all_overflow_frac * denom or hi_norm > ep.guard_norm_spread * lo_norm:
        return []
    lo, hi = int(per_step.get_column("step").min()), int(per_step.get_column("step").max())
    norms = f"{lo_norm:.4g}-{hi_norm:.4g}"
    note = f"{skipped} of {denom} logged steps skipped by a gradient-norm guard at norms {norms}"
    summary = (
        f"every logged step is skipped: {skipped} of {denom} steps skipped by the trainer's gradient-norm guard at "
        f"steady, finite norms ({norms}): no update is applied"
    )
    facts = {
        "cause": "guard_skips_every_step",
        "guard_skips": skipped,
        "skipped_norm_min": lo_norm,
        "skipped_norm_max": hi_norm,
    }
    return [_every_step("clip_rate_anomaly", "guard_skips", lo, hi, skipped, denom, note, summary, facts)]


def _longest_same_scale_run(placed: pl.DataFrame) -> int:
    """The longest run of consecutive overflow-skipped steps (one per step, in step order) that all
    report the same loss scale. A calibrating dynamic scaler lowers its scale at least every
    `hysteresis` (2) skips; skips that leave the scale where it is mean it cannot fall."""
    if placed.height == 0:
        return 0
    per_step = (
        placed.with_columns(_num("new_scale").alias("_scale"))
        .group_by("attempt", "step")
        .agg(pl.col("_scale").min())
        .sort("attempt", "step")
    )
    runs = per_step.with_columns(
        (
            (pl.col("_scale") != pl.col("_scale").shift(1))
            | pl.col("_scale").is_null()
            | (pl.col("attempt") != pl.col("attempt").shift(1))
            | (pl.col("step") - pl.col("step").shift(1) > 1)
        )
        .fill_null(True)
        .cum_sum()
        .alias("_run")
    )
    sized = runs.filter(pl.col("_scale").is_not_null()).group_by("_run").len()
    return int(sized.get_column("len").max()) if sized.height else 0


def _hardware(run: RunData, params, records: _Records, fallback: int) -> list[Finding]:
    ep = params.events
    ev = run.events_of("xid", "ecc", "error")
    if ev.height == 0:
        return []
    code = _num("code").cast(pl.Int64, strict=False)
    uncorrected = (
        _text().str.contains(r"(?i)uncorrect|double.bit|\bdbe\b")
        | (_num("uncorrected").fill_null(0) > 0)
        | (_num("ecc_uncorrected").fill_null(0) > 0)
    )
    hw = ev.filter(
        ((pl.col("kind") == "xid") & code.is_in(list(ep.hardware_xid_codes)))
        | ((pl.col("kind") == "ecc") & uncorrected)
        | ((pl.col("kind") == "error") & _text().str.contains(ep.hardware_pattern))
    )
    if hw.height == 0:
        return []
    hw = _after_last_record(hw, records)  # only an error after which no training-step record follows convicts
    if hw.height == 0:
        return []
    hw = _placed(hw, fallback).sort("at", "line")
    first = hw.row(0, named=True)
    code0 = _json_code(first["detail"])
    what = {"xid": f"Xid {int(code0 or 0)}", "ecc": "uncorrectable ECC error"}.get(first["kind"], "hardware error")
    note = _message(first["detail"])
    return [
        Finding(
            kind="hardware_error",
            step_start=int(first["at"]),
            step_end=int(hw.get_column("at").max()),
            peak_step=int(first["at"]),
            severity="critical",
            score=float(hw.height),
            attempt=int(first["attempt"] or 0),
            rank=first["rank"],
            evidence=[
                Evidence(signal=first["kind"], step=first["at"], value=code0, rank=first["rank"], note=note or what)
            ],
            summary=(
                f"{what} at step {first['at']} and no training record after it: the run died on a hardware fault"
                + (f" ({note[:120]})" if note else "")
            ),
            facts={
                "cause": "hardware_death",
                "onset_step": int(first["at"]),
                "decisive_event": True,
                "hardware_events": hw.height,
            },
        )
    ]


def _after_last_record(ev: pl.DataFrame, records: _Records) -> pl.DataFrame:
    """The events after which no training-step record follows: in their own file a later line, in
    another file a later time; a run without step records has nothing after anything."""
    records = records.frame
    if records.height == 0:
        return ev
    last = records.group_by("source").agg(pl.col("line").max().alias("_last_line"))
    ev = ev.join(last, on="source", how="left")
    last_time = records.get_column("time").drop_nulls().max()
    after_own = pl.col("_last_line").is_not_null() & (pl.col("line") > pl.col("_last_line"))
    after_clock = (
        pl.col("_last_line").is_null() & pl.col("time").is_not_null() & (pl.col("time") >= pl.lit(last_time))
        if last_time is not None
        else pl.lit(False)
    )
    return ev.filter(after_own | after_clock).drop("_last_line")


def _collective_timeout(run: RunData, records: _Records, fallback: int) -> list[Finding]:
    """An NCCL watchdog timeout with no training record after it: the job was taken down on a hung
    collective (one rank stopped answering: a GPU or link fault, or a rank stuck elsewhere)."""
    ev = run.events_of("nccl_timeout")
    if ev.height == 0:
        return []
    ev = _after_last_record(ev, records)
    if ev.height == 0:
        return []
    ev = _placed(ev, fallback).sort("at", "line")
    first = ev.row(0, named=True)
    ranks = sorted({int(r) for r in ev.get_column("rank").drop_nulls().to_list()})
    who = f" on rank(s) {', '.join(map(str, ranks))}" if ranks else ""
    return [
        Finding(
            kind="hardware_error",
            step_start=int(first["at"]),
            step_end=int(ev.get_column("at").max()),
            peak_step=int(first["at"]),
            severity="critical",
            score=float(ev.height),
            attempt=int(first["attempt"] or 0),
            rank=first["rank"],
            evidence=[
                Evidence(
                    signal="nccl_timeout",
                    step=first["at"],
                    value=None,
                    rank=first["rank"],
                    note=f"{ev.height} NCCL watchdog timeout(s){who}",
                )
            ],
            summary=(
                f"an NCCL collective timed out{who} at step {first['at']} and no training record follows: "
                "the job was taken down on a hung collective"
            ),
            facts={
                "cause": "collective_timeout",
                "onset_step": int(first["at"]),
                "decisive_event": True,
                "timeout_events": ev.height,
            },
        )
    ]


def _stopped(run: RunData, params, records: _Records, fallback: int, fallback_free: bool) -> list[Finding]:
    ep = params.events
    ev = run.events_of("nan", "error")
    if ev.height == 0:
        return []
    names_nonfinite = _text().str.contains(ep.nonfinite_pattern)
    # the exception that ends a traceback after the last training record ended the process: one that names a
    # non-finite value (Shampoo's `ValueError: Encountered nan values in bias-corrected factor matrix`,
    # torch.distributions' `found invalid values: tensor([nan, ...])`, anomaly mode's `returned nan values`) is
    # training stopped on it (a traceback the run went on after was logged and survived)
    tracebacks = ev.filter((pl.col("kind") == "error") & _text().str.contains(r'"traceback":\s*true') & names_nonfinite)
    where = pl.concat_str(pl.col("source"), pl.col("line").cast(pl.String), separator=":")
    crashed = where.is_in(_after_last_record(tracebacks, records).select(where).to_series().implode())
    said = (
        (_text().str.contains(ep.stop_pattern) & names_nonfinite)
        | ((pl.col("kind") == "nan") & _text().str.contains(r'"stopped":\s*true'))
        | ((pl.col("kind") == "error") & crashed)
    )
    # a nan event the nonfinite detector cannot place: no step, and no step record to carry it
    unplaced_nan = (pl.col("kind") == "nan") & pl.col("step").is_null() & pl.lit(fallback_free)
    hit = ev.filter(said | unplaced_nan)
    if hit.height == 0:
        return []
    hit = _placed(hit, fallback).sort("at", "line")
    first = hit.row(0, named=True)
    stopped = hit.filter(said)
    note = _message((stopped.row(0, named=True) if stopped.height else first)["detail"])
    lo, hi = int(hit.get_column("at").min()), int(hit.get_column("at").max())
    return [
        Finding(
            kind="nonfinite",
            step_start=lo,
            step_end=hi,
            peak_step=lo,
            severity="critical",
            score=float(hit.height),
            attempt=int(first["attempt"] or 0),
            rank=first["rank"],
            evidence=[
                Evidence(signal="nan_event", step=first["at"], value=float("nan"), note=note or "non-finite loss")
            ],
            summary=(
                f"training stopped on a non-finite loss at step {lo}"
                if stopped.height
                else f"non-finite loss reported (step {lo})"
            )
            + (f": {note[:120]}" if note else ""),
            facts={
                "cause": "stopped_nonfinite" if stopped.height else "nonfinite_event",
                "onset_step": lo,
                "recovery": "never" if stopped.height else "unknown",
                "decisive_event": True,
                "signals": ["nan_event"],
            },
        )
    ]


def _message(detail) -> str:
    try:
        d = json.loads(detail or "{}")
    except ValueError:
        return str(detail or "")[:200]
    parts = [str(d[k]) for k in ("exception", "message") if d.get(k)]
    return ": ".join(parts)[:200]


def _json_code(detail) -> float | None:
    try:
        value = json.loads(detail or "{}").get("code")
        return float(value) if value is not None else None
    except (ValueError, TypeError, AttributeError):
        return None


def detect(run: RunData, params) -> list[Finding]:
    if run.events.height == 0:
        return []
    records = _Records(run)
    # the fallback step places only events without a step (`_placed`, `_stopped`'s unplaced NaN)
    unplaced = run.events.get_column("step").null_count() > 0
    fallback = _fallback_step(run, records.frame) if unplaced else 0
    findings = _floor(run, params, fallback) + _all_overflow(run, params, records) + _guard_skips(run, params, records)
    hardware = _hardware(run, params, records, fallback)
    findings += hardware + _stopped(run, params, records, fallback, unplaced and records.frame.height == 0)
    if not hardware:  # a hardware error that killed the job explains its watchdog timeouts too
        findings += _collective_timeout(run, records, fallback)
    return findings
