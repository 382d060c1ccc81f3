"""Shared machinery for parsers: reading lines, stripping launcher prefixes, and
turning a parser's wide per-record frame into the canonical long `metrics` table.

A parser module (one per format family) exposes:

    NAME: str                                   # format id, e.g. "megatron"
    def sniff(sample: SniffSample) -> float     # 0..1, how sure it is the file is this format
    def parse(src: SourceFile) -> ParseResult   # the tables it found

Everything per-line is done with polars expressions; no Python loop per line.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import polars as pl

from spikeforensics import schema

# ANSI colour / cursor codes (torchtitan colours every field).
ANSI_RE = r"\x1b\[[0-9;?]*[A-Za-z]"
# Launcher and paste prefixes in front of the framework's own text. The named group
# `rank` keeps the rank number where the prefix has one.
PREFIX_RE = (
    r"^(?:(?:\+?> ?)+)?"  # markdown quoting of pasted logs: '> ', '+> '
    r"(?:\[\d{2,}\] )?"  # log-viewer line numbers '[80746] '
    r"(?:"
    r"\[(?:rank|default)(?P<rank>\d+)\]:"  # torchrun --tee / --role: [rank3]: [default3]:
    r"|\[\d+:(?P<rank2>\d+)\]:"  # nanotron [node:rank]:
    r"|(?P<rank3>\d{1,4}): "  # srun --label '3: '
    r")?"
)

SNIFF_LINES = 400


@dataclass
class SniffSample:
    """The head of a file, as parsers see it when guessing the format."""

    path: Path
    text: str  # first ~64 KiB decoded with replacement, prefixes and ANSI kept
    lines: list[str]  # the same, split into lines (\n and \r), stripped of prefixes/ANSI

    @property
    def suffix(self) -> str:
        return self.path.suffix.lower()


@dataclass
class ParseResult:
    """What a parser found in one file. Frames may carry a subset of the table's columns."""

    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    records: int = 0  # training-step (and eval) records recognised
    unparsed: int = 0  # lines that looked like records but could not be parsed
    unparsed_examples: list[tuple[int, str]] = field(default_factory=list)  # (line, text)
    notes: list[str] = field(default_factory=list)  # warnings for the user

    def add(self, table: str, frame: pl.DataFrame | None) -> None:
        if frame is None or frame.height == 0:
            return
        if table in self.tables:
            self.tables[table] = pl.concat([self.tables[table], frame], how="diagonal_relaxed")
        else:
            self.tables[table] = frame

    @property
    def total_rows(self) -> int:
        return sum(f.height for f in self.tables.values())


@dataclass
class SourceFile:
    """A file being ingested: its path, the name it is stored under, and line access."""

    path: Path
    name: str  # `source` column value: the file name as ingested
    year: int | None = None  # for syslog times without a year

    def read_bytes(self) -> bytes:
        return self.path.read_bytes()

    def lines(self) -> pl.DataFrame:
        """All physical lines as (line: 1-based Int64, text: String), bad UTF-8 replaced."""
        return lines_from_bytes(self.read_bytes())

    def iter_line_chunks(self, chunk_bytes: int = 32 << 20) -> Iterator[pl.DataFrame]:
        """The same as `lines()`, in chunks cut at newlines, for files too big to hold twice."""
        offset = 0
        tail = b""
        with open(self.path, "rb") as fh:
            while True:
                block = fh.read(chunk_bytes)
                if not block:
                    break
                block = tail + block
                cut = block.rfind(b"\n")
                if cut < 0:
                    tail = block
                    continue
                tail = block[cut + 1 :]
                frame = lines_from_bytes(block[: cut + 1], first_line=offset + 1)
                offset += frame.height
                yield frame
        if tail:
            yield lines_from_bytes(tail, first_line=offset + 1)


def lines_from_bytes(data: bytes, first_line: int = 1) -> pl.DataFrame:
    """Split bytes into physical lines; CRLF, invalid UTF-8 and NUL bytes are tolerated."""
    if not data:
        return pl.DataFrame(schema={"line": pl.Int64, "text": pl.String})
    frame = pl.read_csv(
        io.BytesIO(data),
        has_header=False,
        separator="\x1f",
        quote_char=None,
        new_columns=["text"],
        schema={"text": pl.String},
        encoding="utf8-lossy",
        truncate_ragged_lines=True,
    )
    return frame.with_row_index("line", offset=first_line).select(
        pl.col("line").cast(pl.Int64), pl.col("text").fill_null("")
    )


def split_segments(lines: pl.DataFrame) -> pl.DataFrame:
    """Split each physical line on carriage returns (tqdm redraws) and on the literal
    two characters `^M` of pasted logs, keeping the physical line number of every piece.
    Empty pieces are dropped."""
    return (
        lines.with_columns(pl.col("text").str.replace_all(r"\^M", "\r").str.split("\r"))
        .explode("text")
        .filter(pl.col("text").str.strip_chars() != "")
    )


def strip_prefixes(lines: pl.DataFrame) -> pl.DataFrame:
    """Remove ANSI codes and launcher/paste prefixes; add `prefix_rank` (Int32, null if none)."""
    text = pl.col("text").str.replace_all(ANSI_RE, "")
    caps = text.str.extract_groups(PREFIX_RE)
    return (
        lines.with_columns(text.alias("text"))
        .with_columns(
            pl.coalesce(
                caps.struct.field("rank"), caps.struct.field("rank2"), caps.struct.field("rank3")
            )
            .cast(pl.Int32, strict=False)
            .alias("prefix_rank"),
            pl.col("text").str.replace(PREFIX_RE, "").alias("text"),
        )
    )


def prepared_lines(src: SourceFile) -> pl.DataFrame:
    """lines() -> split on CR -> prefixes stripped: (line, text, prefix_rank)."""
    return strip_prefixes(split_segments(src.lines()))


def to_float(expr: pl.Expr) -> pl.Expr:
    """Parse a number token as printed by a training log into Float64.

    Handles `nan`/`NaN`/`NAN`/`-nan`, `inf`/`Infinity`, upper/lower-case exponents,
    thousands separators, a trailing `%`, and K/M/G/T/B suffixes (nanotron, OLMo-core).
    Anything else becomes null (never an exception).
    """
    s = expr.str.strip_chars().str.strip_chars("'\"").str.replace_all(",", "")
    lower = s.str.to_lowercase()
    special = (
        pl.when(lower.is_in(["nan", "-nan", "+nan"]))
        .then(float("nan"))
        .when(lower.is_in(["inf", "+inf", "infinity", "+infinity"]))
        .then(float("inf"))
        .when(lower.is_in(["-inf", "-infinity"]))
        .then(float("-inf"))
    )
    suffix = s.str.extract(r"^[-+]?[0-9.]+(?:[eE][-+]?\d+)?\s*([KMGTB])$", 1)
    mantissa = s.str.extract(r"^([-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*[KMGTB]$", 1).cast(
        pl.Float64, strict=False
    )
    scale = (
        pl.when(suffix == "K").then(1e3).when(suffix == "M").then(1e6)
        .when(suffix.is_in(["G", "B"])).then(1e9).when(suffix == "T").then(1e12)
    )
    plain = s.str.strip_suffix("%").cast(pl.Float64, strict=False)
    return special.otherwise(pl.coalesce(plain, mantissa * scale))


NONFINITE_JSON_RE = r"([:\[,]\s*)(-?(?:NaN|nan|Infinity|inf|-nan))\b"


def json_safe(expr: pl.Expr) -> pl.Expr:
    """Quote the bare NaN/Infinity tokens Python's json.dumps writes, so polars'
    `json_decode` (strict JSON) accepts the text; numbers then need `to_float`."""
    return expr.str.replace_all(NONFINITE_JSON_RE, '$1"$2"')


# ---------------------------------------------------------------------------
# From a wide per-record frame to the canonical long metrics table


def records_to_metrics(
    wide: pl.DataFrame, source: str, value_columns: list[str] | None = None
) -> pl.DataFrame:
    """Turn one row per record into the `metrics` table (one row per record x metric).

    `wide` has `line` and optionally `step` (Int64), `prefix_rank` (Int32), `time`,
    `record_kind` ("train" default, "eval", "summary"), plus one Float64 column per
    metric (canonical names). Applies the contract's rules:

    - consecutive train rows of one stream (same prefix rank) with the same step are one
      record, the first line's values;
    - `record` numbers train records 0.. in file order; eval/summary rows get null;
    - `attempt` goes up each time the step counter goes back within a stream;
    - `rank` is the prefix rank only when more than one rank prints values in the source;
    - a metric a record does not carry produces no row (NaN does produce a row).
    """
    if wide.height == 0:
        return schema.empty("metrics")
    frame = wide
    for col, dtype in (("step", pl.Int64), ("prefix_rank", pl.Int32), ("time", schema.TIME)):
        if col not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=dtype).alias(col))
    if "record_kind" not in frame.columns:
        frame = frame.with_columns(pl.lit("train").alias("record_kind"))
    meta = {"line", "step", "prefix_rank", "time", "record_kind", "record", "attempt", "rank"}
    if value_columns is None:
        value_columns = [c for c in frame.columns if c not in meta]
    frame = frame.sort("line")
    is_train = pl.col("record_kind") == "train"
    stream = pl.col("prefix_rank").fill_null(-1)

    train = frame.filter(is_train)
    prev_step = pl.col("step").shift(1).over(stream.alias("_s"))
    train = train.filter(
        pl.col("step").is_null() | prev_step.is_null() | (pl.col("step") != prev_step)
    )
    went_back = (pl.col("step") < pl.col("step").shift(1)).fill_null(False)
    train = train.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("record"),
        went_back.cum_sum().over(stream.alias("_s")).cast(pl.Int32).alias("attempt"),
    )
    other = frame.filter(~is_train).with_columns(
        pl.lit(None, dtype=pl.Int64).alias("record"), pl.lit(None, dtype=pl.Int32).alias("attempt")
    )
    both = pl.concat([train, other], how="diagonal_relaxed").sort("line")
    # eval/summary rows inherit the attempt of the train record before them
    both = both.with_columns(pl.col("attempt").forward_fill().fill_null(0))
    multi_rank = train.get_column("prefix_rank").drop_nulls().n_unique() > 1
    rank = pl.col("prefix_rank") if multi_rank else pl.lit(None, dtype=pl.Int32)
    both = both.with_columns(rank.cast(pl.Int32).alias("rank"))
    long = both.unpivot(
        index=["line", "step", "record", "attempt", "rank", "time"],
        on=[c for c in value_columns if c in both.columns],
        variable_name="name",
        value_name="value",
    ).filter(pl.col("value").is_not_null())
    long = long.with_columns(pl.lit(source).alias("source"))
    return schema.conform("metrics", long).sort("line", "name")


def nan_events(metrics: pl.DataFrame) -> pl.DataFrame:
    """`nan` events for step records whose loss or grad norm is non-finite."""
    bad = metrics.filter(
        pl.col("record").is_not_null()
        & pl.col("name").is_in(["loss", "grad_norm"])
        & ~pl.col("value").is_finite()
    )
    if bad.height == 0:
        return schema.empty("events")
    detail = pl.concat_str(
        pl.lit('{"metric": "'), pl.col("name"), pl.lit('", "value": "'),
        pl.col("value").cast(pl.String).str.to_lowercase(), pl.lit('"}'),
    )
    out = bad.group_by("source", "line", "step", "attempt", "rank", "time", maintain_order=True).agg(
        detail.first().alias("detail")
    )
    return schema.conform("events", out.with_columns(pl.lit("nan").alias("kind")))


def normalise_name(name: str) -> str:
    """Field names that are not canonical: lower-cased, non-alphanumerics as `_`."""
    out = []
    for ch in name.lower():
        out.append(ch if ch.isalnum() else "_")
    return "_".join(part for part in "".join(out).split("_") if part)


def normalise_name_expr(expr: pl.Expr) -> pl.Expr:
    return (
        expr.str.to_lowercase()
        .str.replace_all(r"[^a-z0-9]+", "_")
        .str.strip_chars("_")
    )


def detail_json(**fields) -> str:
    """Serialise an event's `detail` object (non-finite floats as strings)."""

    def clean(v):
        if isinstance(v, float) and v != v:
            return "nan"
        if isinstance(v, float) and v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
        return v

    return json.dumps({k: clean(v) for k, v in fields.items() if v is not None}, sort_keys=True)
