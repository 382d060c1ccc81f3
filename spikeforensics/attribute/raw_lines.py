"""Raw log lines around incident peaks, for every incident at once, only from the ingested file.

Two steps, each independent of how many incidents there are:

- `peak_lines_from_metrics` / `peak_lines_from_series` find the (source, line) of each incident's
  peak record with one filter of the run's table per signal (not one per incident);
- `read_windows` reads the windows of every incident in one pass over each source file (the windows
  sorted, the lines in between skipped at C speed), after checking once per file that it is still
  the file that was ingested (size, then SHA-256 against the store's manifest). A file that has
  changed gives no line, only a note saying so (an item without `line`); a run built in memory
  without a hash has nothing to check against and is read as it is.

Lines are numbered as ingest numbered them (LF, CRLF, or lone CR for a file without LF) and control
characters are removed.
"""

from __future__ import annotations

import tempfile
from collections import deque
from itertools import islice
from pathlib import Path

import polars as pl

from spikeforensics.rundata import RunData

# (peak step, attempt or None) of one incident; (source, line) of its peak record
PeakRequest = tuple[int, "int | None"]
PeakLine = tuple[str, int]

RAW_CHUNK_BYTES = 4 << 20  # why: a lone-CR file is read in chunks of this size to find its lines (memory ~5x it)
_SHA_CACHE: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: one hash per file and process


def peak_lines_from_metrics(
    run: RunData, peaks: list[PeakRequest], names: tuple[str, ...] = ("loss", "grad_norm")
) -> list[PeakLine | None]:
    """Per peak: the first metrics row of `names[0]` (else the next name) in that signal's primary
    source at the peak step with a line, preferring the peak's attempt. One filter per name."""
    found: list[PeakLine | None] = [None] * len(peaks)
    pending = list(range(len(peaks)))
    for name in names:
        if not pending:
            break
        src = run.primary_source(name)
        if src is None:
            continue
        wanted = sorted({int(peaks[k][0]) for k in pending})
        rows = (
            run.metrics.lazy()
            .filter(
                (pl.col("source") == src)
                & (pl.col("name") == name)
                & pl.col("step").is_in(wanted)
                & pl.col("line").is_not_null()
            )
            .select("step", "attempt", "source", "line")
            .collect()
        )
        by_step: dict[int, list[tuple[int, str, int]]] = {}
        for step, attempt, source, line in rows.select("step", "attempt", "source", "line").iter_rows():
            by_step.setdefault(int(step), []).append((attempt, source, int(line)))
        still = []
        for k in pending:
            hits = by_step.get(int(peaks[k][0]))
            if not hits:
                still.append(k)
                continue
            same = [h for h in hits if h[0] == peaks[k][1]]
            _, source, line = (same or hits)[0]
            found[k] = (source, line)
        pending = still
    return found


def peak_lines_from_series(run: RunData, steps: list[int]) -> list[PeakLine | None]:
    """Per step: the line of the loss (else grad norm) step record in its series, else of an event at
    that step. One filter of each series and of the events for all steps."""
    found: dict[int, PeakLine] = {}
    wanted = sorted({int(s) for s in steps})
    for name in ("loss", "grad_norm"):
        hit = run.series(name).filter(pl.col("step").is_in(wanted))
        first_rows: dict[int, PeakLine | None] = {}
        for step, source, line in hit.select("step", "source", "line").iter_rows():
            # the step's first record decides: a first record without a line falls through to the next signal
            first_rows.setdefault(int(step), None if line is None else (source, int(line)))
        found.update({s: p for s, p in first_rows.items() if p is not None})
        wanted = [s for s in wanted if s not in found]
    if wanted and run.events.height:
        hit = run.events.filter(pl.col("step").is_in(wanted) & pl.col("line").is_not_null())
        for step, source, line in hit.select("step", "source", "line").iter_rows():
            found.setdefault(int(step), (source, int(line)))
    return [found.get(int(s)) for s in steps]


def read_windows(run: RunData, peaks: list[PeakLine | None], context: int) -> list[list[dict]]:
    """Per peak line: the lines `context` either side as `{"source", "line", "text", "peak"}` items, a
    one-item note when the file has changed since ingest, or [] when it cannot be read."""
    out: list[list[dict]] = [[] for _ in peaks]
    by_source: dict[str, list[int]] = {}
    for k, peak in enumerate(peaks):
        if peak is not None:
            by_source.setdefault(peak[0], []).append(k)
    if not by_source or run.sources.height == 0:
        return out
    with tempfile.TemporaryDirectory(prefix="sf-raw-") as scratch:  # (an encoded file is read from a decoded copy)
        for source, ks in by_source.items():
            path, verdict = _checked_path(run, source, Path(scratch))
            if verdict == "missing":
                continue
            if verdict == "changed":
                note = {
                    "source": source,
                    "peak": False,
                    "text": f"(raw lines not shown: {source} has changed since it was ingested)",
                }
                for k in ks:
                    out[k] = [dict(note)]
                continue
            spans = {peaks[k][1]: (max(1, peaks[k][1] - context), peaks[k][1] + context) for k in ks}
            try:
                lines = _read_spans(path, list(spans.values()))
            except OSError:
                continue
            for k in ks:
                line = peaks[k][1]
                first, last = spans[line]
                out[k] = [
                    {"source": source, "line": n, "text": lines[n], "peak": n == line}
                    for n in range(first, last + 1)
                    if n in lines
                ]
    return out


def _checked_path(run: RunData, source: str, scratch: Path | None = None) -> tuple[Path | None, str]:
    """The ingested file of `source` (an encoded one's decoded copy in `scratch`, as ingest read it) and
    whether it can be read: "ok", "changed" or "missing"."""
    from spikeforensics.ingest import encoded

    known = run.sources.filter((pl.col("source") == source) & pl.col("path").is_not_null())
    if known.height == 0 or not Path(known.get_column("path")[0]).is_file():
        return None, "missing"
    path = Path(known.get_column("path")[0])
    if scratch is not None and encoded.codec_of(path):
        try:
            path = encoded.decompress_to(path, scratch / source.replace("/", "_"))
        except encoded.DecompressionError:
            return path, "changed"
    # a store's manifest always has the hash; a run built in memory without one has nothing to check against
    sha = known.get_column("sha256")[0] if "sha256" in known.columns else None
    size = known.get_column("bytes")[0] if "bytes" in known.columns else None
    if sha and not file_unchanged(path, sha, size):
        return path, "changed"
    return path, "ok"


def file_unchanged(path: Path, sha: str | None, size: int | None) -> bool:
    """Whether the file at `path` is still the ingested one (size, then SHA-256; hashed once per file)."""
    from spikeforensics.ingest import file_sha256

    if not sha:
        return False
    try:
        st = path.stat()
        if size is not None and st.st_size != size:
            return False
        key = (str(path), st.st_size, st.st_mtime_ns)
        if key not in _SHA_CACHE:
            _SHA_CACHE[key] = file_sha256(path)
    except OSError:
        return False
    return _SHA_CACHE[key] == sha


def _read_spans(path: Path, spans: list[tuple[int, int]]) -> dict[int, str]:
    """Physical lines of every (first, last) span (1-based, inclusive) in one pass over the file,
    split as ingest splits them: {line number: text}."""
    from spikeforensics.ingest.base import CR_HEAD_BYTES, lone_cr_endings, strip_controls

    merged: list[list[int]] = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    raw: dict[int, bytes] = {}
    with open(path, "rb") as fh:
        head = fh.read(CR_HEAD_BYTES)
        fh.seek(0)
        if lone_cr_endings(head):  # split as ingest split it (at every line end), streamed as ingest reads it
            from spikeforensics.ingest.base import SourceFile

            wanted = pl.concat([pl.int_range(a, b + 1, eager=True) for a, b in merged]).alias("line").to_frame()
            last_wanted = merged[-1][1]
            # small chunks, and no further than the last line wanted: a few lines of a 2.6 GB file cost ~30 MB,
            # not ingest's 32 MiB blocks held three times over
            for chunk in SourceFile(path=path, name=path.name).iter_line_chunks(chunk_bytes=RAW_CHUNK_BYTES):
                for n, text in chunk.join(wanted, on="line", how="semi").iter_rows():
                    raw[n] = text.encode()
                if chunk.height and chunk.get_column("line")[-1] >= last_wanted:
                    break
        else:
            at = 1  # the number of the next line the file iterator yields
            for first, last in merged:
                deque(islice(fh, first - at), maxlen=0)  # skip to `first` without keeping the lines
                raw.update((first + i, b) for i, b in enumerate(islice(fh, last - first + 1)))
                at = last + 1
    return {
        n: strip_controls(b.decode("utf-8", errors="replace").rstrip("\r\n").replace("\r", " ")) for n, b in raw.items()
    }
