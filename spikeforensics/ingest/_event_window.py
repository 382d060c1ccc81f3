"""Events of a text log read in chunks, as a whole read finds them (`EventWindow`).

Two things about an event may lie beyond the chunk it is printed in: its own detail (a
traceback's exception line, an NCCL timeout's last completed operation, both looked up
forward by `text_events.extract_events`) and its step (a resume takes the step of the next
record; the k-th overflow message after record N is step N + k, so overflows after a chunk's
last record go on counting in the next chunk). Such an event is held back with the lines
after it, and the records from the last one before it, and is read again with the next
chunk; what comes before it is final. A window holds at most `MAX_HELD_LINES` lines: past
that (a traceback whose exception line never comes), its events are given as they stand.
Not covered: tracebacks of several ranks interleaved across a cut (one rank's resolved
traceback claims an exception line past another's unresolved one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from spikeforensics.ingest.base import OVERFLOW_KINDS, attach_steps
from spikeforensics.ingest.text_events import extract_events

# The longest real tracebacks are a few hundred lines (chained exceptions of a distributed
# launch); a window holding more is a log whose pending event will not be resolved by more lines.
MAX_HELD_LINES = 20_000

RECORDS = {"line": pl.Int64, "step": pl.Int64, "attempt": pl.Int32}


@dataclass
class EventWindow:
    """The lines and records held back from the chunks read so far (see the module docstring)."""

    mode: str = "done"  # `attach_steps`' mode
    lines: pl.DataFrame | None = None  # held lines: `line`, `text`, `prefix_rank` and any carried columns
    records: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=RECORDS))  # from the last one before them

    def feed(self, lines: pl.DataFrame, records: pl.DataFrame, last: bool = False) -> pl.DataFrame:
        """The final events of the window (the held lines, then `lines`), with steps from the held
        records and `records` (numbered step records, `line`, `step`, `attempt`, in line order, each
        after the held ones). Columns of `lines` beyond `line`, `text`, `prefix_rank` are joined to
        the events on `line`. `last`: no more lines come, nothing is held."""
        window = lines if self.lines is None else pl.concat([self.lines, lines])
        recs = pl.concat([self.records, records.select(list(RECORDS)).cast(RECORDS)])
        events = extract_events(window.select("line", "text", "prefix_rank"))
        cut = None if last else _cut(events, recs)
        if cut is not None and window.filter(pl.col("line") >= cut).height > MAX_HELD_LINES:
            cut = None
        if cut is not None:
            events = events.filter(pl.col("line") < cut)
            self.lines = window.filter(pl.col("line") >= cut)
            self.records = pl.concat([recs.filter(pl.col("line") < cut).tail(1), recs.filter(pl.col("line") >= cut)])
        else:
            self.lines = None
            self.records = recs.tail(1)
        if events.height == 0:
            return events
        extra = [c for c in window.columns if c not in ("text", "prefix_rank")]
        return attach_steps(events, recs, mode=self.mode).join(window.select(extra), on="line", how="left")


def _cut(events: pl.DataFrame, records: pl.DataFrame) -> int | None:
    """The line from which the window is held: the last record before the first event that
    lines still to come may change (see the module docstring), or that event's line."""
    detail = pl.col("detail").fill_null("")
    kind = pl.col("kind")
    unresolved = ((kind == "error") & detail.str.contains('"traceback": true', literal=True)) & ~detail.str.contains(
        '"exception":', literal=True
    ) | ((kind == "nccl_timeout") & ~detail.str.contains('"last_completed":', literal=True))
    last_record = records.get_column("line").max() if records.height else None
    if last_record is None:  # no record yet: only a resume looks forward for one
        counting = kind == "resume"
    else:
        counting = (kind == "resume") | kind.is_in(list(OVERFLOW_KINDS))
        counting = counting & (pl.col("line") > last_record)
    need = events.filter(unresolved | counting).get_column("line").min()
    if need is None:
        return None
    before = records.filter(pl.col("line") < need).get_column("line").max()
    return need if before is None else before
