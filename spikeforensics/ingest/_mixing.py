"""Parsing by line, not by file: a text log may mix grammars.

Real logs are rarely one format from top to bottom: the training script's own source,
a config dump, `nvidia-smi` output, progress bars, the framework's lines and the user's
own `print(f"step {i} loss {loss}")` all land in one stdout. The driver parses a text file
with the grammar that sniffs best (the *primary*); this module then offers every line the
primary did not read as a record to the other line grammars, best-sniffing first, each
taking only the lines of its own grammar, until no grammar takes any more:

    lines ──primary──> records A ──rest──> grammar 2 ──> records B ──rest──> grammar 3 ...

The results are merged into one `ParseResult`: metrics of every grammar (train records
renumbered in file order), the primary's events plus any event another grammar found on a
line the primary had no event for, event steps attached to the merged records, and the
unparsed lines that no grammar read in the end. `--format` forces the primary and turns
mixing off (the user said what the file is).

Whole-file formats (JSON/CSV tables, side files, TensorBoard, kernel logs, the events-only
parser) never join a mix: their content is not a set of independent lines.
"""

from __future__ import annotations

from types import ModuleType

import polars as pl

from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    attach_steps,
    prepared_lines,
    step_records,
    to_float,
)

# Formats whose file is one structure (a table, a JSON document, a binary), or whose only
# job is events: never offered the rest lines of a text log.
WHOLE_FILE_FORMATS = frozenset(
    {
        "batches",
        "csv_metrics",
        "jsonl_metrics",
        "layers",
        "telemetry",
        "tensorboard",
        "hf_trainer_state",
        "kernel",
        "stdout_events",
    }
)
# A grammar joins the mix when it sniffs at least this sure on the rest lines.
MIN_SECONDARY_CONFIDENCE = 0.3
# Rest lines shown to a sniffer: those that could hold a record (a digit and a word a
# record prints), at most this many (sniffers look at a few hundred lines at most).
SNIFF_REST_LINES = 2000
# (the last two: a fastprogress bar, and makemore's bare `  10000/ 200000: 2.1775`)
RECORD_HINT = r"(?i)loss|iter|step|epoch|update|\blr\b|norm|% \[\d+/\d+ [\d:]+<|^\s*\d+\s*/\s*\d+\s*:\s*[-+\d.]"
# A continuation line of a multi-line record: indented, no grammar read it, and it prints
# `name: number` pairs (faster-rcnn's `\t\t\trpn_cls: 0.6902, rpn_box: nan, ...` under its
# `[session 1][epoch 1][iter 100/2892] loss: nan` line). Names are one or two words.
CONTINUATION_PAIR = r"([A-Za-z][\w./-]*(?: [A-Za-z][\w./-]*)?)\s*:\s*([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|[Nn]a[Nn]|-?[Ii]nf))(?:[\s,;|]|$)"


def is_line_grammar(name: str | None) -> bool:
    return name is not None and name not in WHOLE_FILE_FORMATS


def record_like_sample(path, lines: pl.DataFrame, limit: int) -> SniffSample:
    """A sniff sample of the lines that could hold a record (a digit and a word records print),
    at most `limit` of them; the driver's wide sniff and the mix both look at these."""
    hinted = lines.filter(pl.col("text").str.contains(RECORD_HINT) & pl.col("text").str.contains(r"\d"))
    texts = hinted.get_column("text")
    if texts.len() > limit:  # the first half, then the rest evenly: a log whose first hundreds of such lines
        # are config dumps of several launches still shows the sniffers its records
        half = limit // 2
        rest = texts.slice(half)
        texts = pl.concat([texts.head(half), rest.gather_every(max(1, -(-rest.len() // (limit - half))))])
    chosen = texts.head(limit).to_list()
    return SniffSample(path=path, text="\n".join(chosen), lines=chosen)


def sniff_scores(sample: SniffSample, grammars: dict[str, ModuleType]) -> list[tuple[float, str]]:
    """(confidence, name) of every grammar on `sample`; a sniffer that raises scores 0 (it must
    never break ingest of an unrelated file)."""
    out = []
    for name, mod in grammars.items():
        try:
            out.append((float(mod.sniff(sample)), name))
        except Exception:  # noqa: BLE001
            out.append((0.0, name))
    return out


def _record_lines(result: ParseResult) -> pl.Series:
    metrics = result.tables.get("metrics")
    if metrics is None or metrics.height == 0:
        return pl.Series("line", [], dtype=pl.Int64)
    lines = metrics.get_column("line").drop_nulls().cast(pl.Int64)
    if result.body_lines is not None:
        lines = pl.concat([lines, result.body_lines.cast(pl.Int64).rename("line")])
    return lines.unique()


def mix(
    primary_name: str,
    src: SourceFile,
    primary: ParseResult,
    grammars: dict[str, ModuleType],
    chosen: list[str] | None = None,
) -> tuple[ParseResult, list[str]]:
    """Offer the lines `primary` did not read as records to the other line grammars: those that sniff
    surest on them, or the `chosen` ones, in order and unsniffed (a big file's later windows take the
    grammars its first window chose: `_windows.py`). Returns the merged result and the names of the
    grammars that read records (primary first)."""
    lines = prepared_lines(src)  # cached on `src`: the primary already computed it
    rest = lines.join(_record_lines(primary).to_frame(), on="line", how="anti")
    # a line the event catalogue read (an overflow, a checkpoint, a traceback) is no record for a
    # catch-all grammar (a specific grammar may still find its record glued before the event)
    events = primary.tables.get("events")
    event_lines = (
        events.select(pl.col("line").cast(pl.Int64)).drop_nulls().unique()
        if events is not None and events.height
        else pl.DataFrame(schema={"line": pl.Int64})
    )
    parts: list[tuple[str, ParseResult]] = []
    tried = {primary_name}
    queue = None if chosen is None else [n for n in chosen if n in grammars and n != primary_name]
    while rest.height:
        if queue is not None:
            if not queue:
                break
            name = queue.pop(0)
        else:
            sample = record_like_sample(src.path, rest, SNIFF_REST_LINES)
            if not sample.lines:
                break
            candidates = {n: m for n, m in grammars.items() if n not in tried and is_line_grammar(n)}
            scores = [(s, n) for s, n in sniff_scores(sample, candidates) if s >= MIN_SECONDARY_CONFIDENCE]
            if not scores:
                break
            _, name = max(scores)
        tried.add(name)
        offered = rest.join(event_lines, on="line", how="anti") if getattr(grammars[name], "CATCH_ALL", False) else rest
        sub = grammars[name].parse(SourceFile(path=src.path, name=src.name, year=src.year, only_lines=offered))
        taken = _record_lines(sub)
        if taken.len() == 0:
            continue
        keep = taken.to_frame()
        sub.tables["metrics"] = sub.tables["metrics"].join(keep, on="line", how="semi")
        parts.append((name, sub))
        rest = rest.join(keep, on="line", how="anti")
    if not parts:
        return attach_continuations(primary, lines), [primary_name]
    merged = _merge(primary, parts)
    kept = merged.tables["metrics"].get_column("line").drop_nulls().cast(pl.Int64).unique().implode()
    names = [n for n, sub in parts if _record_lines(sub).is_in(kept).any()]
    return attach_continuations(merged, lines), [primary_name] + names


def attach_continuations(result: ParseResult, lines: pl.DataFrame) -> ParseResult:
    """Values printed on indented lines right under a train record (and under each other) belong to
    that record: they take its step, record, attempt and rank. A name the record already holds is
    not taken twice. The lines read this way leave the unparsed count."""
    metrics = result.tables.get("metrics")
    if metrics is None or metrics.height == 0 or lines.height == 0 or "record" not in metrics.columns:
        return result
    read = _record_lines(result).implode()
    owners = (
        metrics.filter(pl.col("record").is_not_null())
        .group_by("line")
        .agg(pl.col("record").first().alias("_owner"))
        .with_columns(pl.col("line").cast(pl.Int64))
    )
    text = pl.col("text")
    cont = text.str.contains(r"^\s+\S") & text.str.contains(CONTINUATION_PAIR) & ~pl.col("line").is_in(read)
    marked = (
        lines.select(pl.col("line").cast(pl.Int64), "text")
        .sort("line")
        .join(owners, on="line", how="left")
        .with_columns(cont.alias("_cont"))
        .with_columns(
            pl.when(pl.col("_owner").is_not_null())
            .then(pl.col("_owner"))
            .when(pl.col("_cont"))
            .then(None)
            .otherwise(-1)
            .forward_fill()
            .alias("_owner")
        )
    )
    taken = marked.filter(pl.col("_cont") & (pl.col("_owner") >= 0))
    if taken.height == 0:
        return result
    pairs = (
        taken.with_columns(text.str.extract_all(CONTINUATION_PAIR).alias("_p"))
        .explode("_p")
        .with_columns(
            pl.col("_p").str.extract(CONTINUATION_PAIR, 1).alias("name"),
            to_float(pl.col("_p").str.extract(CONTINUATION_PAIR, 2)).alias("value"),
        )
        .filter(pl.col("value").is_not_null())
    )
    heads = (
        metrics.filter(pl.col("record").is_not_null())
        .group_by("record")
        .agg(pl.all().exclude("name", "value", "line").first())
    )
    held = metrics.filter(pl.col("record").is_not_null()).select("record", "name").unique()
    rows = (
        pairs.select(pl.col("_owner").alias("record"), "line", "name", "value")
        .unique(["record", "name"], keep="first", maintain_order=True)
        .join(held, on=["record", "name"], how="anti")
        .join(heads, on="record", how="inner")
    )
    if rows.height == 0:
        return result
    line_type = metrics.schema["line"]
    rows = rows.with_columns(pl.col("line").cast(line_type)).select([c for c in metrics.columns if c in rows.columns])
    result.tables["metrics"] = pl.concat([metrics, rows], how="diagonal_relaxed").sort("line", maintain_order=True)
    if result.unparsed_lines is not None:
        left = result.unparsed_lines.filter(
            ~result.unparsed_lines.is_in(rows.get_column("line").cast(pl.Int64).implode())
        )
        result.unparsed = left.len()
        result.unparsed_lines = left
        keep = set(left.to_list())
        result.unparsed_examples = [e for e in result.unparsed_examples if e[0] in keep]
    return result


def _merge(primary: ParseResult, parts: list[tuple[str, ParseResult]]) -> ParseResult:
    out = ParseResult(notes=list(primary.notes))
    metrics = [primary.tables["metrics"]] if "metrics" in primary.tables else []
    events = [primary.tables["events"]] if "events" in primary.tables else []
    for _, sub in parts:
        metrics.append(sub.tables["metrics"])
        if "events" in sub.tables:
            events.append(sub.tables["events"])
        out.notes += [n for n in sub.notes if n not in out.notes and "could not be parsed" not in n]
        for table, frame in sub.tables.items():
            if table not in ("metrics", "events"):
                out.add(table, frame)
    metrics = [m.with_columns(pl.lit(i, dtype=pl.Int32).alias("_part")) for i, m in enumerate(metrics)]
    merged = pl.concat(metrics, how="diagonal_relaxed").sort("line", maintain_order=True)
    merged = _renumber(_drop_repeats(merged)).drop("_part")
    out.add("metrics", merged)
    out.records = primary.records + sum(sub.records for _, sub in parts)
    counted = [r.record_lines for r in (primary, *[s for _, s in parts])]
    if all(c is not None for c in counted):
        out.record_lines = pl.concat([c.cast(pl.Int64) for c in counted])
    if events:
        ev = pl.concat(events, how="diagonal_relaxed")
        ev = ev.unique(["line", "kind"], keep="first", maintain_order=True) if "line" in ev.columns else ev
        # events the primary found before it had any record to attach them to take the merged records' steps
        ev = attach_steps(ev, step_records(merged)).sort("line")
        out.add("events", ev)
    _merge_unparsed(out, primary, parts, merged)
    return out


def _drop_repeats(metrics: pl.DataFrame) -> pl.DataFrame:
    """The contract's rule across grammars: consecutive train records of one stream with the same
    step are one record. A line the primary merged into its previous record (the same step printed
    by several ranks without a prefix) must not come back as another grammar's record; the names such
    a line prints that its record's first line does not are kept, on that record (DeepSpeed's
    `step=17, skipped=0, lr=[1e-06]` then the trainer's own `steps: 17 loss: 0.5994`: one record with both)."""
    stream = pl.col("rank").fill_null(-1)
    train = (
        metrics.filter(pl.col("record").is_not_null())
        .group_by("line")
        .agg(pl.col("step").first(), pl.col("rank").first(), pl.col("_part").first())
        .sort("line")
        .with_columns(
            pl.col("step").shift(1).over(stream).alias("_prev"),
            pl.col("line").shift(1).over(stream).alias("_into"),
            pl.col("_part").shift(1).over(stream).alias("_prev_part"),
        )
    )
    # (a primary record repeats the record before it only when another grammar printed that one: a custom loop's
    # `Epoch: 1  Training Loss: 3.179975` then its own `{'Epoch': 1, 'loss': 3.1799750099...}` dict)
    other = (pl.col("_part") > 0) | (pl.col("_prev_part") != pl.col("_part")).fill_null(False)
    repeats = train.filter(other & pl.col("step").is_not_null() & (pl.col("step") == pl.col("_prev")))
    if repeats.height == 0:
        return metrics
    # a run of repeats belongs to the record that opened it (its first line, not the repeat before)
    opened = train.filter(~pl.col("line").is_in(repeats.get_column("line").implode())).select(
        "line", stream.alias("_s")
    )
    repeats = repeats.select("line", stream.alias("_s")).join_asof(
        opened.with_columns(pl.col("line").alias("_into")),
        on="line",
        by="_s",
        strategy="backward",
        allow_exact_matches=False,
        check_sortedness=False,  # sorted by line: `train` is
    )
    rest = metrics.join(repeats.select("line"), on="line", how="anti")
    targets = rest.join(repeats.select(pl.col("_into").alias("line")).unique(), on="line", how="semi")
    record_of = targets.group_by("line").agg(pl.col("step", "record", "attempt", "time").first())
    moved = (
        metrics.join(repeats.select("line", "_into"), on="line", how="inner")
        .drop("line", "step", "record", "attempt", "time")
        .rename({"_into": "line"})
        .join(record_of, on="line", how="inner")
        .join(targets.select("line", "name"), on=["line", "name"], how="anti")
        .unique(["line", "name"], keep="first", maintain_order=True)
    )
    if moved.height == 0:
        return rest
    return pl.concat([rest, moved.select(rest.columns)], how="vertical_relaxed").sort("line", maintain_order=True)


def _renumber(metrics: pl.DataFrame) -> pl.DataFrame:
    """`record` numbers train records 0.. in file order across every grammar of the file."""
    train_lines = metrics.filter(pl.col("record").is_not_null()).select(pl.col("line").unique().sort())
    order = train_lines.with_row_index("_rec").with_columns(pl.col("_rec").cast(pl.Int64))
    return (
        metrics.join(order, on="line", how="left", maintain_order="left")
        .with_columns(pl.when(pl.col("record").is_not_null()).then(pl.col("_rec")).alias("record"))
        .drop("_rec")
    )


def _merge_unparsed(
    out: ParseResult, primary: ParseResult, parts: list[tuple[str, ParseResult]], merged: pl.DataFrame
) -> None:
    """Unparsed lines of every grammar, less the lines another grammar did read."""
    read = merged.get_column("line").drop_nulls().cast(pl.Int64).unique()
    pools = [r.unparsed_lines for r in (primary, *[s for _, s in parts]) if r.unparsed_lines is not None]
    examples = [e for r in (primary, *[s for _, s in parts]) for e in r.unparsed_examples]
    if pools:
        left = pl.concat(pools).unique().sort()
        left = left.filter(~left.is_in(read.implode()))
        out.unparsed = left.len()
        out.unparsed_lines = left
        keep = set(left.to_list())
        out.unparsed_examples = sorted({e for e in examples if e[0] in keep})[:5]
    else:  # a grammar that counts but does not say which lines: keep its count
        out.unparsed = primary.unparsed + sum(s.unparsed for _, s in parts)
        out.unparsed_examples = examples[:5]
    if out.unparsed:
        out.notes = [n for n in out.notes if "could not be parsed" not in n]
        out.notes.append(f"{out.unparsed} record-like line(s) could not be parsed")
