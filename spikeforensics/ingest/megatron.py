"""Megatron-LM family stdout: Megatron-LM / Megatron-Core / NeMo-Megatron / Megatron-DeepSpeed
`iteration N/ M | name: value | ...` lines, the colon-less 2019 forks
(`| learning rate 9.773E-06 | lm loss NAN |`), nanotron `iteration: N / M | key: 634K | ...`,
and validation blocks (` validation loss at iteration N | lm loss value: X |`).

Steps: `iteration` is the number of optimizer steps done (1-based), stored as printed;
events (overflow messages, OOMs, ...) take the preceding record's step (`attach_steps`,
mode "done"). A NaN interval loss is omitted by Megatron, so such a record has no
`loss` row. `number of skipped/nan iterations` are per-interval counts (`skipped_iters`,
`nan_iters`); loss-scale halvings between two records yield one `overflow` event with
`old_scale`, `new_scale`, `halvings` and `count` (skipped iterations, else halvings).

Lines a terminal wrapped mid-field are joined back (up to two continuation lines); a
record line that still does not parse, or lost its tail, is counted as unparsed.

Fields: a log prints the same fields in the same order on every train record, so each
chunk's records are read by layout (`_layout_values`: cut once at the pipes into one
column per field, values cast as columns, names aliased once per layout) and go to long
form after numbering; records of no common layout (eval blocks, colon-less 2019 fields,
odd values such as `634K`) are split field by field as before. Both read the same values.

The file is read in chunks (`SourceFile.iter_line_chunks`, the next chunk read in a
background thread), so memory does not grow with the log: `parse_chunks` yields one set
of tables per chunk, numbering carried over, and the ingest driver writes each chunk as
it comes. Chunks overlap by a few lines so a wrapped record is never cut. Events are
looked for in the lines that are not step records (a record line is never an event).
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from spikeforensics.ingest.base import (
    NUM_TOKEN,
    STEP_OUT_OF_RANGE,
    TIME_ISO_RE,
    ParseResult,
    RecordState,
    SniffSample,
    SourceFile,
    attach_steps,
    detail_expr,
    extract_time,
    iso_time,
    metrics_from_long,
    named_values,
    prefetched,
    split_colon_fields,
    split_fields,
    split_segments,
    step_int,
    step_records,
    strip_prefixes,
)
from spikeforensics.ingest.text_events import extract_events

NAME = "megatron"

# `iteration     7000/  159576 |` (Megatron), ` iteration 700/ 3000 |` (2019), `iteration: 991 / 1000 |` (nanotron),
# `iteration=       1/  635782 | ... | lm loss=11.16 |` (ALCF Megatron-DeepSpeed with the ezpz logger: `key=value` fields)
# (ASCII classes: a third less time than Unicode ones on every record line)
ITER_RE = r"(?-u)\biteration([:=]?)\s*(\d+)\s*/\s*(\d+)\s*\|"
# ` validation loss at iteration 7000 | ...` / `... at iteration N on validation set | ...`
VALID_RE = r"\b(validation|test) loss at iteration\s+(\d+)"
# one `name: value` (or colon-less `name value`) field between pipes
FIELD_RE = rf"^\s*(?P<k>[A-Za-z_(\[][^:=|]*?[^\s:=|])\s*(?::\s*|=\s*|\s)\s*(?P<v>{NUM_TOKEN})\s*$"
# a colon-less field (2019 forks: `| learning rate 9.773E-06 | lm loss NAN |`)
LEGACY_FIELD = r"\|\s*[A-Za-z][\w ()/-]*[A-Za-z)]\s+[-+]?(?:\d[\d.eE+-]*|nan|NAN|inf|INF)\s*\|"
# lines that look like a record even when they do not parse
# NeMo 2 (nemo.lightning ProgressPrinter) prints Megatron-style fields after its own header and ends
# the line with the last value, not a pipe: `Training epoch 0, iteration 120/149 | lr: 3e-05 | ...
# | reduced_train_loss: 1.233 | train_step_timing in s: 0.03146 | val_loss: 4.106`
NEMO2_HEADER = r"^\s*Training epoch \d+, iteration \d+\s*/\s*\d+\s*\|"
LOOKS_LIKE = r"\biteration[:=]?\s*\d+\s*/|\| (?:lm loss|learning rate|loss scale|consumed samples)\b"
MAX_EXAMPLES = 5


def sniff(sample: SniffSample) -> float:
    text = "\n".join(sample.lines)
    strong = (
        pl.Series(sample.lines, dtype=pl.String)
        .str.contains(
            r"\biteration[:=]?\s*\d+\s*/\s*\d+\s*\|.*\b(?:lm loss|lm_loss|learning rate|learning_rate|lr|consumed samples|consumed_tokens)\b"
        )
        .sum()
        if sample.lines
        else 0
    )
    if strong:
        return 0.95
    if "validation loss at iteration" in text and "lm loss" in text:
        return 0.8
    return 0.0


def _join_wrapped(seg: pl.DataFrame) -> pl.DataFrame:
    """Terminal-wrapped record lines: a Megatron record (pipe style) that does not end
    with `|` continues on the next one or two lines; join them without a separator (the
    wrap can cut a word) and mark the continuation lines `_cont`."""
    text = pl.col("text")
    # the common case, nothing wrapped, checked on the few lines that do not end with `|`
    maybe = seg.filter(~text.str.ends_with("|") & text.str.contains("iteration", literal=True))
    g = text.str.extract_groups(ITER_RE)
    if not maybe.select(
        (
            g.struct.field("2").is_not_null()
            & (g.struct.field("1") == "")
            & ~text.str.strip_chars_end().str.ends_with("|")
        ).any()
    ).item():
        return seg.with_columns(pl.lit(False).alias("_cont"))
    start = g.struct.field("2").is_not_null()
    pipe_style = start & (g.struct.field("1") == "")
    seg = seg.with_columns(
        start.alias("_start"),
        (pipe_style & ~text.str.strip_chars_end().str.ends_with("|")).alias("_open"),
    )
    n1, n2 = text.shift(-1), text.shift(-2)
    join1 = pl.col("_open") & ~pl.col("_start").shift(-1).fill_null(True)
    join2 = join1 & ~n1.str.strip_chars_end().str.ends_with("|") & ~pl.col("_start").shift(-2).fill_null(True)
    seg = seg.with_columns(join1.alias("_j1"), join2.alias("_j2"))
    joined = (
        pl.when(pl.col("_j2"))
        .then(pl.concat_str(text, n1, n2))
        .when(pl.col("_j1"))
        .then(pl.concat_str(text, n1))
        .otherwise(text)
    )
    cont = pl.col("_j1").shift(1).fill_null(False) | pl.col("_j2").shift(2).fill_null(False)
    return seg.with_columns(joined.alias("text"), cont.alias("_cont")).drop("_start", "_open", "_j1", "_j2")


def _records(seg: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(records, long values, wide values, unparsed lines, other lines) of one chunk of
    prepared segments (wide: `line` + one Float64 column per metric, for the records read
    by layout, see `_layout_values`); `other` (not a record, not a continuation) is where
    events are looked for."""
    text = pl.col("text")
    cand = seg.filter(text.str.contains("iteration", literal=True) & ~pl.col("_cont"))
    it = text.str.extract_groups(ITER_RE)
    cand = cand.with_columns(
        step_int(it.struct.field("2")).alias("_it"),
        (it.struct.field("1") != ":").alias("_pipe_style"),
        (it.struct.field("1") == "=").alias("_kv_style"),
    )
    # validation records, among the few candidates that are not train records
    evals = (
        cand.filter(pl.col("_it").is_null())
        .with_columns(text.str.extract(VALID_RE, 2).cast(pl.Int64, strict=False).alias("_va"))
        .filter(pl.col("_va").is_not_null())
    )
    train = cand.filter(pl.col("_it").is_not_null()).with_columns(pl.lit(None, dtype=pl.Int64).alias("_va"))
    rec = pl.concat([train, evals]).sort("line") if evals.height else train
    rec = rec.with_columns(
        pl.coalesce("_it", "_va").alias("step"),
        pl.when(pl.col("_it").is_not_null()).then(pl.lit("train")).otherwise(pl.lit("eval")).alias("record_kind"),
        # a pipe-style record that lost its tail: its last field may be cut, drop it
        (
            pl.col("_pipe_style").fill_null(True)
            & ~text.str.strip_chars_end().str.ends_with("|")
            & ~text.str.contains(NEMO2_HEADER)  # NeMo 2's ProgressPrinter never ends a line with `|`
        ).alias("_cut"),
    )
    # the part after the iteration counter / validation header; a record that lost its
    # tail loses its last (possibly cut) field
    body = text.str.replace(r"^.*?(?:\biteration[:=]?\s*\d+\s*/\s*\d+|\bloss at iteration\s+\d+[^|]*)\s*\|", "")
    body = pl.when(pl.col("_cut")).then(body.str.replace(r"[^|]*$", "")).otherwise(body)
    rec = rec.with_columns(body.alias("_body"))
    bodies = rec.select(
        "line",
        pl.col("_body").alias("text"),
        pl.col("_it").is_null().alias("_eval"),
        pl.col("_kv_style").fill_null(False).alias("_legacy"),
        (pl.col("_it").is_not_null() & ~pl.col("_kv_style").fill_null(False) & ~pl.col("_cut")).alias("_plain"),
    )
    # the usual records (train, `name: value |` fields, whole): typed captures of their field
    # layout; the others (and records of a layout seen too rarely) split field by field. A record
    # read by a layout has only `name: value` fields, so the colon-less test runs on the others only.
    wide, rest = _layout_values(bodies.filter(pl.col("_plain")).select("line", "text"))
    bodies = bodies.filter(~pl.col("_plain") | pl.col("line").is_in(rest.get_column("line").implode()))
    colonless = pl.concat_str(pl.lit("|"), pl.col("text")).str.contains(LEGACY_FIELD)
    bodies = bodies.with_columns(pl.col("_legacy") | colonless)
    fast = split_colon_fields(bodies.filter(~pl.col("_legacy")).drop("_legacy", "_plain"), "|")
    slow = split_fields(bodies.filter(pl.col("_legacy")).drop("_legacy", "_plain"), "|", FIELD_RE)
    fields = pl.concat([fast, slow]) if slow.height else fast
    values = named_values(fields, eval_rows=pl.col("_eval")).select("line", "name", "value")
    has_values = pl.concat(
        [
            values.select("line").unique(),
            wide.filter(pl.any_horizontal(pl.exclude("line").is_not_null())).select("line")
            if wide.width > 1
            else wide.clear(),
        ]
    )
    out_of_range = (pl.col("step") == STEP_OUT_OF_RANGE).fill_null(False)
    records = (
        _with_time(rec)
        .select("line", "step", "prefix_rank", "record_kind", "time")
        .join(has_values, on="line", how="semi")
        .filter(~out_of_range)
    )
    other = seg.filter(~pl.col("_cont")).join(rec.select("line"), on="line", how="anti")
    bad = (
        pl.concat(
            [
                rec.join(has_values, on="line", how="anti").select("line", "text"),
                rec.filter(out_of_range).select("line", "text"),
                rec.filter(pl.col("_cut")).join(has_values, on="line", how="semi").select("line", "text"),
                other.filter(text.str.contains(LOOKS_LIKE)).select("line", "text"),
            ]
        )
        .unique("line")
        .sort("line")
    )
    return records, values, wide, bad, other


def _with_time(rec: pl.DataFrame) -> pl.DataFrame:
    """`extract_time` of each record, cheaper when every record has an ISO time (the
    usual `[2024-05-01 12:00:00]` prefix): then only that short piece is parsed and
    the line is not searched again for other time formats."""
    rec = rec.with_columns(pl.col("text").str.extract(TIME_ISO_RE, 1).alias("_iso"))
    found = rec.get_column("_iso").null_count() == 0
    return rec.with_columns((iso_time(pl.col("_iso")) if found else extract_time(pl.col("text"))).alias("time")).drop(
        "_iso"
    )


# Field layouts tried per chunk: a log prints one or two (train records with and without
# `grad norm`, ...); a layout that is not tried leaves its records to the field splitter.
MAX_LAYOUTS = 6
# A layout that reads fewer records than this is not worth another pass over the rest.
MIN_LAYOUT_RECORDS = 64
# Records looked at for a layout when the first ones have pieces that are not `name: value`.
MAX_LAYOUT_TRIES = 16


def _layout(body: str) -> list[str] | None:
    """The raw field names of one record body (`name: value |` fields, in order), or None
    when a piece is not such a field (the splitter handles that record)."""
    pieces = body.split("|")
    if len(pieces) < 2 or pieces[-1].strip():
        return None
    keys = []
    for piece in pieces[:-1]:
        key, colon, value = piece.partition(":")
        value = value.strip()
        if not colon or not value or " " in value or ":" in value:
            return None
        keys.append(key)
    return keys


def _layout_values(bodies: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(wide, rest) of train record bodies (`line`, `text`): `wide` has `line` and one
    Float64 column per canonical metric for the bodies of one of the chunk's layouts
    (the same field names, verbatim, in the same order); `rest` is the others.

    A body of a layout is cut once at its pipes into a fixed number of columns (no row
    per field); it matches when every piece starts with its field name and a colon, no
    piece has a second colon, every value is a plain number (`parse_numbers`' fast cast)
    and nothing follows the last pipe: then it reads exactly as `split_colon_fields` and
    `named_values` read it. Fields whose names land on the same metric coalesce (the first
    wins, as the splitter's dedupe does)."""
    from spikeforensics.ingest.aliases import canonical_metric

    parts: list[pl.DataFrame] = []
    rest = bodies
    for _ in range(MAX_LAYOUTS):
        if rest.height == 0:
            break
        keys = next(filter(None, map(_layout, rest.get_column("text").head(MAX_LAYOUT_TRIES))), None)
        if keys is None:
            break
        n = len(keys)
        cut = rest.select(
            "line",
            pl.col("text").str.count_matches(":", literal=True).alias("_colons"),
            pl.col("text").str.splitn("|", n + 2).struct.rename_fields([f"p{i}" for i in range(n + 2)]).alias("_p"),
        ).unnest("_p")
        raw = [pl.col(f"p{i}").str.strip_prefix(key + ":").str.strip_chars() for i, key in enumerate(keys)]
        fits = [pl.col(f"p{i}").str.starts_with(key + ":") for i, key in enumerate(keys)]
        fits += [
            pl.col(f"f{i}").is_not_null() for i in range(n)
        ]  # a plain number (else `to_float`'s cases: the splitter)
        fits += [pl.col(f"p{n}").str.strip_chars() == "", pl.col(f"p{n + 1}").is_null(), pl.col("_colons") == n]
        cut = cut.with_columns(*[r.cast(pl.Float64, strict=False).alias(f"f{i}") for i, r in enumerate(raw)])
        matched = cut.filter(pl.all_horizontal(fits).fill_null(False))
        if matched.height == 0:
            break
        groups: dict[str, list[str]] = {}
        for i, key in enumerate(keys):
            name = canonical_metric(key.strip())
            if name:
                groups.setdefault(name, []).append(f"f{i}")
        parts.append(matched.select("line", *[pl.coalesce(cols).alias(name) for name, cols in groups.items()]))
        rest = rest.join(matched.select("line"), on="line", how="anti", maintain_order="left")
        if matched.height < MIN_LAYOUT_RECORDS:
            break
    if not parts:
        return bodies.select("line").clear(), rest
    wide = parts[0] if len(parts) == 1 else pl.concat(parts, how="diagonal_relaxed").sort("line")
    return wide, rest


SCALE_COLUMNS = ["loss_scale", "skipped_iters", "nan_iters"]


def _scale_events(records: pl.DataFrame, values: pl.DataFrame, by_layout: pl.DataFrame, carry: dict) -> pl.DataFrame:
    """`overflow` events inferred from loss-scale drops between train records, `hysteresis`
    events from skipped iterations while the (fp16) scale held, and `nan` events from
    `number of nan iterations` > 0. `carry` holds the last loss scale seen. `values` (long)
    and `by_layout` (wide) hold the values of different records."""
    wanted = values.filter(pl.col("name").is_in(SCALE_COLUMNS))
    parts = [wanted.pivot(on="name", index="line", values="value", aggregate_function="first")] if wanted.height else []
    cols = [c for c in SCALE_COLUMNS if c in by_layout.columns]
    if cols:
        parts.append(by_layout.select("line", *cols).filter(pl.any_horizontal(pl.col(cols).is_not_null())))
    if not parts or not sum(p.height for p in parts):
        return pl.DataFrame()
    found = parts[0] if len(parts) == 1 else pl.concat(parts, how="diagonal_relaxed")
    wide = (
        records.filter(pl.col("record_kind") == "train")
        .select("line", "step", "prefix_rank", "time")
        .join(found, on="line")
    )
    for col in ("loss_scale", "skipped_iters", "nan_iters"):
        if col not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(col))
    wide = wide.sort("line").with_columns(
        pl.col("loss_scale").shift(1).fill_null(pl.lit(carry.get("loss_scale"), dtype=pl.Float64)).alias("_prev")
    )
    last = wide.get_column("loss_scale").drop_nulls()
    if last.len():
        carry["loss_scale"] = float(last[-1])
    halvings = (pl.col("_prev") / pl.col("loss_scale")).log(2).round(0)
    fell = (pl.col("_prev") > pl.col("loss_scale")).fill_null(False)
    skipped = pl.col("skipped_iters").fill_null(0)
    startup = pl.col("_prev").is_null() & (skipped > 0) & (pl.col("loss_scale") > 1)
    count = pl.when(skipped > 0).then(skipped).otherwise(halvings)
    ovf = wide.filter(fell | startup).select(
        "line",
        "step",
        pl.col("prefix_rank").alias("rank"),
        "time",
        pl.lit("overflow").alias("kind"),
        detail_expr(
            floats={"old_scale": pl.col("_prev"), "new_scale": pl.col("loss_scale")},
            ints={"count": count, "halvings": halvings},
            strings={"inferred_from": pl.lit("loss_scale")},
        ).alias("detail"),
    )
    nan = wide.filter(pl.col("nan_iters").fill_null(0) > 0).select(
        "line",
        "step",
        pl.col("prefix_rank").alias("rank"),
        "time",
        pl.lit("nan").alias("kind"),
        detail_expr(ints={"nan_iters": pl.col("nan_iters")}, strings={"metric": pl.lit("nan_iters")}).alias("detail"),
    )
    # iterations skipped while the scale held (the scaler's hysteresis absorbed the overflow, or the
    # scale sits at its floor): one `hysteresis` event per record, `count` = skipped iterations
    held = wide.filter((skipped > 0) & ~fell & ~startup & (pl.col("loss_scale").fill_null(1.0) != 1.0)).select(
        "line",
        "step",
        pl.col("prefix_rank").alias("rank"),
        "time",
        pl.lit("hysteresis").alias("kind"),
        detail_expr(
            floats={"old_scale": pl.col("loss_scale"), "new_scale": pl.col("loss_scale")},
            ints={"count": skipped},  # detail_expr casts leniently: a garbled count past Int64 is null, not a lost file
            strings={"inferred_from": pl.lit("skipped_iters")},
        ).alias("detail"),
    )
    return pl.concat([ovf, held, nan])


# Bytes of the file parsed at once. A 200 MB Megatron-DeepSpeed log (a real one repeated): 32 MiB chunks peaked at
# 662-676 MB, 8 MiB at 336-340 MB, in the same 7-9 s (two rounds each, beside other jobs); a 335 MB one of long
# lines (fuzz seed 18's input 1027) 446 -> 196 MB.
CHUNK_BYTES = 8 << 20


def parse_chunks(src: SourceFile, chunk_bytes: int | None = None) -> Iterator[ParseResult]:
    """One ParseResult per chunk of the file (metrics with `rank` = prefix rank; see
    `finish_ranks`), record numbering and loss-scale tracking carried across chunks."""
    state = RecordState()
    carry: dict = {}
    tail = pl.DataFrame(schema={"line": pl.Int64, "step": pl.Int64, "attempt": pl.Int32})
    for lines, own_from, own_to in _overlapping_chunks(src, chunk_bytes or CHUNK_BYTES):
        seg = _join_wrapped(strip_prefixes(split_segments(lines)))
        owned = pl.col("line") >= own_from
        seg = seg.filter(owned if own_to is None else owned & (pl.col("line") <= own_to))
        records, values, wide, bad, other = _records(seg)
        out = ParseResult()
        metrics = metrics_from_long(records, values, src.name, state, multi_rank=True, wide=wide)
        out.add("metrics", metrics)
        out.records = records.height
        out.unparsed = bad.height
        out.unparsed_examples = list(bad.head(MAX_EXAMPLES).iter_rows())
        # events: text events + inferred ones, steps from this chunk's records (and the
        # last record of the previous chunk)
        recs = step_records(metrics)
        recs = pl.concat([tail, recs.cast(tail.schema)]).sort("line")
        events = extract_events(other.select("line", "text", "prefix_rank"))
        if events.height:
            out.add("events", attach_steps(events, recs, mode="done"))
        inferred = _scale_events(records, values, wide, carry)
        if inferred.height:
            attempts = recs.select("line", "attempt")
            out.add("events", inferred.join(attempts, on="line", how="left"))
        if "events" in out.tables:
            out.tables["events"] = out.tables["events"].sort("line")
        if recs.height:
            tail = recs.tail(1)
        out.notes = []
        yield out


# A terminal-wrapped record spans at most 1 + CONTEXT lines.
CONTEXT = 2


def _overlapping_chunks(src: SourceFile, chunk_bytes: int) -> Iterator[tuple[pl.DataFrame, int, int | None]]:
    """(lines, first owned line, last owned line or None) per chunk of the file. Each
    chunk after the first starts with the last 2 * CONTEXT lines of the one before, so a
    record wrapped across the cut is joined as in a whole-file read; the last CONTEXT
    lines of a chunk are owned by the next one. A file of one chunk is read whole."""
    chunks = prefetched(src.iter_line_chunks(chunk_bytes))
    lines = next(chunks, None)
    own_from = 1
    while lines is not None:
        following = next(chunks, None)
        if following is None:
            yield lines, own_from, None
            return
        last = int(lines.get_column("line")[-1])
        yield lines, own_from, last - CONTEXT
        own_from = last - CONTEXT + 1
        lines = pl.concat([lines.tail(2 * CONTEXT), following])


def finish_ranks(metrics: pl.DataFrame, ranks: set[int]) -> pl.DataFrame:
    """The contract keeps the prefix rank only when several ranks print records."""
    if len(ranks) > 1:
        return metrics
    return metrics.with_columns(pl.lit(None, dtype=pl.Int32).alias("rank"))


def parse(src: SourceFile) -> ParseResult:
    """The whole file at once: the chunks of `parse_chunks` concatenated (tests, notebooks;
    `ingest` streams them instead)."""
    result = ParseResult()
    ranks: set[int] = set()
    examples: list[tuple[int, str]] = []
    for part in parse_chunks(src):
        for table, frame in part.tables.items():
            result.add(table, frame)
        result.records += part.records
        result.unparsed += part.unparsed
        examples += part.unparsed_examples
        if "metrics" in part.tables:
            ranks.update(part.tables["metrics"].get_column("rank").drop_nulls().unique().to_list())
    if "metrics" in result.tables:
        result.tables["metrics"] = finish_ranks(result.tables["metrics"], ranks)
    result.unparsed_examples = examples[:MAX_EXAMPLES]
    if result.unparsed:
        result.notes.append(f"{result.unparsed} record-like line(s) could not be parsed fully")
    return result
