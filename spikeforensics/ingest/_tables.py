"""Shared helpers of the structured-file parsers (JSONL, CSV, Parquet, NPZ side files).

Not a parser (the leading underscore keeps it out of discovery). Everything here is
vectorized: a JSONL file is validated and decoded by polars in one pass per step, a
CSV file is read by polars' CSV reader; no Python loop per line.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from spikeforensics.ingest.aliases import METRIC_ALIASES
from spikeforensics.ingest.base import (
    MAX_STEP,
    ParseResult,
    SniffSample,
    SourceFile,
    json_safe,
    lines_from_bytes,
    normalise_name,
    split_segments,
    strip_prefixes,
    to_float,
)

# Keys per JSON record / columns per CSV header: the widest real metrics files (W&B history
# exports with per-layer series) have a few thousand; more is not a log but a fuzzed or
# broken file, refused with one line instead of building a frame that wide.
MAX_KEYS = 4096
# A JSON record nested deeper than this is an unparsed line: real records nest 2-3 levels, and
# polars' schema inference is superlinear in depth (512 levels: 32 s and 1.8 GB for one line).
MAX_JSON_DEPTH = 64
_JSON_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET_RE = re.compile(r"[\[\]{}]")

# Decompression caps for binary side files (Parquet manifests/dumps, NPZ dumps): what they
# claim to expand to is checked before anything is decompressed. Absolute: 2 GiB of
# uncompressed columns is ~100M layer rows, beyond any dump diagnose can use in memory.
# Ratio: real dumps compress 3-30x (floats barely compress); over 200x on a file that
# expands beyond 64 MiB is a decompression bomb, not data (small files may compress more).
MAX_DECOMPRESSED_BYTES = 2 << 30
MAX_DECOMPRESSION_RATIO = 200
RATIO_CHECK_FROM_BYTES = 64 << 20

PARQUET_MAGIC = b"PAR1"
ZIP_MAGIC = b"PK\x03\x04"

# Upper-case spellings json.dumps never writes but hand-written/other tools do (NAN, INF).
_EXTRA_NONFINITE_RE = r"([:\[,]\s*)(-?(?:NAN|INF|INFINITY|Nan|Inf|-NaN))([,\]}\s])"

# Bare non-finite tokens in JSON (json.dumps writes NaN, Infinity, -Infinity; other writers nan,
# inf, NAN, INF) become these numbers before decoding, so their column keeps its float type and
# polars' typed decoder reads every line in one pass (quoted, they would make the column text
# and the decode fail over to a validation pass and per-key extraction); `_restore_nonfinite`
# turns them back in the rows that had a token. Why these values: within 2x of the largest double,
# which no metric is, and short, so every JSON reader (polars' path matcher too) reads them back
# exactly; a quoted token (`"nan"`) stays text and `numeric` reads it.
NONFINITE_SENTINELS = {
    1.1e308: (float("nan"), "NaN"),
    1.2e308: (float("inf"), "Infinity"),
    -1.2e308: (float("-inf"), "-Infinity"),
}
_NAN_TOKEN = r"([:\[,]\s*)-?(?:NaN|nan|NAN|Nan)\b"
_INF_TOKEN = r"(?:Infinity|INFINITY|inf|INF|Inf)\b"
_NONFINITE_TOKENS = (
    (_NAN_TOKEN, 1.1e308),
    (r"([:\[,]\s*)-" + _INF_TOKEN, -1.2e308),
    (r"([:\[,]\s*)" + _INF_TOKEN, 1.2e308),
)
_JSON = "__sf_json"  # working columns of `json_objects` (no metric key is named so)
_NF = "__sf_nonfinite"

# Name prefixes of evaluation metrics, after `normalise_name`.
EVAL_PREFIXES = ("eval_", "val_", "vali_", "valid_", "validation_", "test_", "predict_")  # `vali_`: thuml's `Vali Loss`
# Keys that mark the end-of-training summary dict of HF-style trainers.
SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos")


def ingest_error(message: str) -> Exception:
    """The driver's one-line user error (imported lazily: the driver imports parsers)."""
    from spikeforensics.ingest import IngestError

    return IngestError(message)


# a name shown in an error message is cut to this many characters (a fuzzed header's "name" was 1.4 MB), at most
# SHOWN_NAMES of them
SHOWN_NAME_CHARS = 40
SHOWN_NAMES = 12


def shown_names(names) -> str:
    """Column or key names for a one-line error message: the first SHOWN_NAMES, each cut to SHOWN_NAME_CHARS
    characters, control characters dropped; 'none' when there are none."""
    from spikeforensics.ingest.base import strip_controls

    names = list(names)
    cut = [strip_controls(str(n)) for n in names[:SHOWN_NAMES]]
    cut = [n if len(n) <= SHOWN_NAME_CHARS else n[: SHOWN_NAME_CHARS - 3] + "..." for n in cut]
    more = len(names) - SHOWN_NAMES
    return (", ".join(cut) + (f", ... ({more} more)" if more > 0 else "")) or "none"


# ---------------------------------------------------------------------------
# File kinds


def head_bytes(path: Path, n: int = 8) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(n)


def file_kind(path: Path) -> str:
    """'parquet', 'npz', 'jsonl' or 'csv', from the content (not the name)."""
    head = head_bytes(path, 4096)
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    if head.startswith(ZIP_MAGIC):
        return "npz"
    first = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if first == b"{":
        return "jsonl"
    # a pasted JSONL whose first line carries an artefact (`_**{"current_steps": ...`), or JSON lines behind a
    # launcher prefix (`[rank0]: {"step": 50, ...}`, Ray's `(pid=...)`, colour codes): most lines are objects
    cleaned = strip_prefixes(split_segments(lines_from_bytes(head))).get_column("text")
    lines = [ln.strip().encode() for ln in cleaned.to_list() if ln.strip()][:20]
    objects = sum(1 for ln in lines if ln.startswith(b"{") and ln.endswith(b"}"))
    if len(lines) >= 3 and objects * 2 >= len(lines):
        return "jsonl"
    # a paste of one or two records in markdown emphasis or code marks (`**{"mode": "train", ...}**`)
    wrapped = [ln.strip(b"*_`> ") for ln in lines]
    whole = bool(wrapped) and all(ln.startswith(b"{") and ln.endswith(b"}") for ln in wrapped)
    return "jsonl" if whole and len(lines) < 3 else "csv"


def check_expansion(path: Path, expanded: int, what: str) -> None:
    """Refuse a side file whose content claims to expand beyond the caps above."""
    size = max(path.stat().st_size, 1)
    if expanded > MAX_DECOMPRESSED_BYTES:
        raise ingest_error(f"{path}: {what} expands to {expanded:,} bytes; at most {MAX_DECOMPRESSED_BYTES:,} are read")
    if expanded > RATIO_CHECK_FROM_BYTES and expanded / size > MAX_DECOMPRESSION_RATIO:
        raise ingest_error(
            f"{path}: {what} expands {expanded / size:,.0f}x ({size:,} -> {expanded:,} bytes); "
            f"at most {MAX_DECOMPRESSION_RATIO}x is read (a decompression bomb?)"
        )


def parquet_expansion(path: Path) -> int:
    """Uncompressed bytes a Parquet file's footer claims (its row groups' total)."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))


def npz_expansion(path: Path) -> int:
    """Uncompressed bytes of an NPZ (zip) file's members, from its directory."""
    import zipfile

    with zipfile.ZipFile(path) as zf:
        return sum(info.file_size for info in zf.infolist())


# ---------------------------------------------------------------------------
# JSON lines


def safe_json(expr: pl.Expr) -> pl.Expr:
    """`base.json_safe` plus upper-case NAN/INF tokens, so strict JSON decoding accepts it."""
    return json_safe(expr).str.replace_all(_EXTRA_NONFINITE_RE, '$1"$2"$3')


def json_depth(text: str) -> int:
    """How deep the brackets of one JSON text nest (brackets inside strings do not count)."""
    depth = deepest = 0
    for m in _BRACKET_RE.finditer(_JSON_STRING_RE.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def json_objects(lines: pl.DataFrame, keep: tuple[str, ...] = ()) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Decode the JSON object on each line of `lines` (line, text[, keep...]).

    Returns (objects, bad): `objects` has `line`, the `keep` columns and one column per
    top-level key (String or numeric; lists/structs kept as such); `bad` has the
    (line, text) of lines that hold a `{` but no valid JSON object (truncated,
    garbled). Text before the first `{` (a logger prefix) is ignored, and so are markdown marks after the
    last `}` of a line with such a prefix (a paste's `**{...}**`). Bare non-finite
    tokens (`NaN`, `Infinity`, `-Infinity`, `nan`, `inf`, `NAN`, `INF`) read as the float
    values: they are decoded on the typed fast path (see `NONFINITE_SENTINELS`).
    """
    cols = ["line", *keep]
    cand = lines.filter(pl.col("text").str.contains("{", literal=True)).with_columns(
        pl.col("text").str.starts_with("{").alias(_JSON)
    )
    # a line that starts with `{` is its own JSON text (trailing blanks cut): the regex
    # runs only on lines with a logger prefix
    bare = pl.col("text").str.strip_chars_end()
    plain = cand.filter(pl.col(_JSON)).with_columns(pl.when(bare.str.ends_with("}")).then(bare).alias(_JSON))
    if plain.height < cand.height:
        prefixed = cand.filter(~pl.col(_JSON)).with_columns(
            pl.col("text").str.extract(r"(\{.*\})[\s*_`]*$", 1).alias(_JSON)
        )
        cand = pl.concat([plain, prefixed]).sort("line", maintain_order=True)
    else:
        cand = plain
    # a key is at least `":` (2 bytes): only lines longer than 2 * MAX_KEYS can have too many (the count is a regex
    # pass that cost as much as the decoding)
    long = cand.filter(pl.col(_JSON).str.len_bytes() > 2 * MAX_KEYS)
    keys = long.select(pl.col(_JSON).str.count_matches(r'"\s*:').max()).item() if long.height else 0
    if keys and keys > MAX_KEYS:
        raise ingest_error(
            f"a JSON record with {keys:,} keys; at most {MAX_KEYS:,} are read per record "
            "(a metrics, gradient or manifest record has far fewer)"
        )
    unclosed = cand.filter(pl.col(_JSON).is_null()).select("line", "text")  # a `{` but no `{...}` ending the line
    cand = cand.filter(pl.col(_JSON).is_not_null())
    many = cand.filter(pl.col(_JSON).str.count_matches(r"[\[{]") > MAX_JSON_DEPTH)  # only these can be too deep
    if many.height:
        deep = [line for line, text in many.select("line", _JSON).iter_rows() if json_depth(text) > MAX_JSON_DEPTH]
        if deep:
            unclosed = pl.concat([unclosed, cand.filter(pl.col("line").is_in(deep)).select("line", "text")]).sort(
                "line"
            )
            cand = cand.filter(~pl.col("line").is_in(deep))
    # bare NaN/Infinity tokens -> sentinel numbers, only on the few lines that may hold one
    nonfinite = pl.col(_JSON).str.contains_any(["nan", "inf"], ascii_case_insensitive=True)
    cand = cand.with_columns(nonfinite.alias(_NF))
    flagged = bool(cand.get_column(_NF).any())
    if flagged:  # rewritten on the flagged rows alone (a when/then would run the regexes on every row)
        rows = cand.get_column(_NF).arg_true()
        texts = cand.get_column(_JSON).clone()
        fixed = texts.gather(rows).to_frame().select(_to_sentinels(pl.col(_JSON))).to_series()
        cand = cand.with_columns(texts.scatter(rows, fixed))
    if cand.height == 0:
        return cand.select(cols), unclosed
    obj = None
    try:  # every candidate decodes (the common case): no validation pass
        obj = cand.get_column(_JSON).str.json_decode()  # schema inferred from the first rows
        good, bad = cand, unclosed
    except pl.exceptions.PolarsError:
        valid = cand.get_column(_JSON).str.json_path_match("$").is_not_null()
        bad = pl.concat([unclosed, cand.filter(~valid).select("line", "text")]).sort("line")
        good = cand.filter(valid)
    if good.height == 0:
        return good.select(cols), bad
    inner = [*cols, _NF, _JSON]
    try:
        obj = (obj if obj is not None else good.get_column(_JSON).str.json_decode()).alias("_obj")
        decoded = good.select(inner).with_columns(obj)
        if not isinstance(decoded.schema["_obj"], pl.Struct) or not decoded.schema["_obj"].fields:
            return good.select(cols), bad
        out = decoded.unnest("_obj")
    except pl.exceptions.PolarsError:
        out = None
        # a key first seen after the first rows (an HF log's closing summary dict, one record of many keys): the
        # schema inferred from every row, values typed (as text, a record of 500 keys made 5,000 rows of 500
        # string columns: 400 MB for a 1.5 MB file)
        with contextlib.suppress(pl.exceptions.PolarsError):
            obj = good.get_column(_JSON).str.json_decode(infer_schema_length=None).alias("_obj")
            if isinstance(obj.dtype, pl.Struct) and obj.dtype.fields:
                out = good.select(inner).with_columns(obj).unnest("_obj")
    if out is None:
        # Types too mixed to infer one schema (a key that is a number here and text there): every key as text,
        # decoded whole (exact digits); with lists or
        # objects among the values, key by key (the path matcher re-renders a float, one ulp off at times).
        keys = [k for k in _json_keys(good.get_column(_JSON)) if k not in inner]
        try:
            texts = good.get_column(_JSON).str.json_decode(pl.Struct({k: pl.String for k in keys}))
            out = good.select(inner).with_columns(texts.alias("_obj")).unnest("_obj")
        except pl.exceptions.PolarsError:
            exprs = [pl.col(_JSON).str.json_path_match("$['" + k.replace("'", "\\'") + "']").alias(k) for k in keys]
            out = good.select(*inner, *exprs)
    if flagged:
        out = _restore_nonfinite(out, [c for c in out.columns if c not in inner])
    return out.drop(_NF, _JSON), bad


# The field of a nested statistic summary that stands for its value: StyleGAN2-ADA/StyleGAN3's
# `training_stats` write every metric of a tick as {"num": n, "mean": m, "std": s}
SUMMARY_FIELDS = ("mean", "value", "avg")
# Nested objects flattened at most this deep (`key/field/field`): metric logs nest 1-2 levels
FLATTEN_DEPTH = 3


def flatten_structs(objects: pl.DataFrame, depth: int = FLATTEN_DEPTH) -> pl.DataFrame:
    """Struct columns (nested JSON objects) as plain columns: a statistic summary (a struct with a
    `SUMMARY_FIELDS` field beside counts and spreads) becomes that field under the key's own name; any
    other object becomes one column per field, named `key/field` (W&B-style nesting), `depth` levels
    down. Non-struct columns are untouched; the column order follows the keys'."""
    for _ in range(depth):
        structs = [c for c, t in objects.schema.items() if isinstance(t, pl.Struct)]
        if not structs:
            return objects
        exprs = []
        for col in objects.columns:
            dtype = objects.schema[col]
            if col not in structs:
                exprs.append(pl.col(col))
                continue
            names = [f.name for f in dtype.fields]
            summary = next((f for f in SUMMARY_FIELDS if f in names), None)
            if summary is not None:
                exprs.append(pl.col(col).struct.field(summary).alias(col))
            else:
                exprs.extend(
                    pl.col(col).struct.field(n).alias(f"{col}/{n}")
                    for n in names
                    if f"{col}/{n}" not in objects.columns
                )
        objects = objects.select(exprs)
    return objects


def _to_sentinels(expr: pl.Expr) -> pl.Expr:
    for pattern, value in _NONFINITE_TOKENS:
        expr = expr.str.replace_all(pattern, "${1}" + repr(value))
    return expr


def _restored(col: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """`col` (float or text values) with the sentinel numbers turned back."""
    num = col if dtype.is_float() else col.cast(pl.Float64, strict=False)
    expr = pl.when(False).then(col)
    for value, (back, text) in NONFINITE_SENTINELS.items():
        expr = expr.when(num == value).then(pl.lit(back, dtype=dtype) if dtype.is_float() else pl.lit(text))
    return expr.otherwise(col)


def _restore_nonfinite(out: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The sentinel numbers of flagged rows back to NaN/+-inf (float columns), to the text
    `NaN`/`Infinity`/`-Infinity` (text columns, read by `numeric` as today); a sentinel that
    an integer column could not hold (decoded as null) is read from the row's text."""
    flag = pl.col(_NF)
    fixes = []
    for key in keys:
        dtype = out.get_column(key).dtype
        col = pl.col(key)
        if dtype.is_float() or dtype == pl.String:
            fixes.append(pl.when(flag).then(_restored(col, dtype)).otherwise(col).alias(key))
        elif isinstance(dtype, pl.List) and (dtype.inner.is_float() or dtype.inner == pl.String):
            fixes.append(
                pl.when(flag).then(col.list.eval(_restored(pl.element(), dtype.inner))).otherwise(col).alias(key)
            )
        elif dtype.is_integer():
            lost = out.select(pl.arg_where(flag & col.is_null())).to_series()
            if lost.len() == 0:
                continue
            path = "$['" + key.replace("'", "\\'") + "']"
            text = out.get_column(_JSON).gather(lost).str.json_path_match(path).cast(pl.Float64, strict=False)
            if text.is_null().all():
                continue
            text = text.replace(list(NONFINITE_SENTINELS), [v for v, _ in NONFINITE_SENTINELS.values()])
            fixes.append(out.get_column(key).cast(pl.Float64).scatter(lost, text).alias(key))
    return out.with_columns(fixes) if fixes else out


def _json_keys(texts: pl.Series) -> list[str]:
    keys = (
        texts.str.extract_all(r'"((?:[^"\\]|\\.)*)"\s*:')
        .explode()
        .drop_nulls()
        .str.extract(r'^"(.*)"', 1)
        .unique(maintain_order=True)
    )
    return keys.to_list()


def numeric(frame: pl.DataFrame, col: str) -> pl.Expr:
    """A column as Float64: strings through `to_float` (nan/inf/quoted), numbers cast,
    booleans as 0/1; lists and structs become null."""
    return numerics(frame, [col])[0]


def numerics(frame: pl.DataFrame, cols: list[str]) -> list[pl.Expr]:
    """`numeric` of each of `cols`, the misses of every string column found in one select (a header of thousands
    of columns costs one pass, not one per column)."""
    # not `frame.schema[col]`: that builds the whole schema, per column
    dtypes = {c: frame.get_column(c).dtype for c in cols}
    # the plain cast reads most columns (and nan/inf); `to_float` only when it misses values
    plain = {c: pl.col(c).str.strip_chars().cast(pl.Float64, strict=False) for c in cols if dtypes[c] == pl.String}
    misses = (
        frame.select((e.is_null() & pl.col(c).is_not_null()).any().alias(c) for c, e in plain.items()).row(
            0, named=True
        )
        if plain
        else {}
    )

    def one(c: str) -> pl.Expr:
        if c in plain:
            return to_float(pl.col(c)) if misses[c] else plain[c]
        if dtypes[c].is_numeric() or dtypes[c] == pl.Boolean:
            return pl.col(c).cast(pl.Float64)
        return pl.lit(None, dtype=pl.Float64)

    return [one(c) for c in cols]


def integer(frame: pl.DataFrame, col: str) -> pl.Expr:
    """A step/rank-like column as Int64 (`'445'`, `445.0`, `3.2e+4` -> 32000); others null,
    and so is a value beyond +-`MAX_STEP` (see base.py: not a step any run reaches)."""
    f = numeric(frame, col)
    return pl.when(f.is_finite() & (f == f.round(0)) & (f.abs() <= MAX_STEP)).then(f).cast(pl.Int64, strict=False)


def out_of_range(frame: pl.DataFrame, col: str) -> pl.Expr:
    """Rows whose `col` holds a number beyond +-`MAX_STEP` (Inf included)."""
    return (numeric(frame, col).abs() > MAX_STEP).fill_null(False)


# ---------------------------------------------------------------------------
# CSV


def read_csv_lines(src: SourceFile, result: ParseResult | None = None) -> pl.DataFrame:
    """Read a CSV file as all-String columns plus `line` (1-based physical line).

    Blank lines are skipped; bad UTF-8 is replaced; ragged rows are tolerated (short
    rows padded with nulls, long rows cut). Repeated header rows stay in (callers drop
    them: the first column equals its own name). A row the CSV reader cannot read (an
    unbalanced quote) costs that row: it is counted into `result` as unparsed.
    """
    lines = src.lines().filter(pl.col("text").str.strip_chars() != "")
    return csv_from_lines(lines, result)


def csv_from_lines(lines: pl.DataFrame, result: ParseResult | None = None) -> pl.DataFrame:
    if lines.height == 0:
        return pl.DataFrame(schema={"line": pl.Int64})
    _check_header_width(lines)
    try:
        frame = _read_csv_text(lines)
    except pl.exceptions.PolarsError:
        # a row with an unbalanced quote swallows the rest of the file: drop such rows
        # (an odd number of quote characters; the header is kept) and read the others
        odd = (pl.col("text").str.count_matches('"', literal=True) % 2 == 1) & (pl.int_range(pl.len()) > 0)
        bad = lines.filter(odd)
        if bad.height == 0:
            raise
        if result is not None:
            unparsed(result, bad)
        lines = lines.filter(~odd)
        frame = _read_csv_text(lines)
    frame = frame.rename({c: c.strip() for c in frame.columns})
    row_lines = lines.get_column("line").slice(1)
    if row_lines.len() == frame.height:
        return frame.with_columns(row_lines.alias("line"))
    # a quoted field spanning lines: physical lines no longer map one-to-one
    return frame.with_columns(pl.lit(None, dtype=pl.Int64).alias("line"))


def _check_header_width(lines: pl.DataFrame) -> None:
    """Refuse a CSV header of more than `MAX_KEYS` columns (one clear line, not a hang)."""
    header = lines.get_column("text")[0]
    if header.count(",") >= MAX_KEYS:
        raise ingest_error(
            f"CSV header with {header.count(',') + 1:,} columns; at most {MAX_KEYS:,} are read "
            "(a metrics, gradient or manifest file has far fewer)"
        )


def _read_csv_text(lines: pl.DataFrame) -> pl.DataFrame:
    data = "\n".join(lines.get_column("text").to_list()).encode("utf-8")
    return pl.read_csv(
        io.BytesIO(data),
        infer_schema=False,
        truncate_ragged_lines=True,
        raise_if_empty=False,
        encoding="utf8-lossy",
    )


def sample_columns(sample: SniffSample) -> list[str] | None:
    """Column names of a tabular side file from its head (None when it is not tabular)."""
    head = sample.text[:8].encode("utf-8", errors="replace")
    if head.startswith(PARQUET_MAGIC):
        try:
            import pyarrow.parquet as pq

            return list(pq.read_schema(sample.path).names)
        except Exception:
            return None
    if sample.text.startswith("PK\x03\x04"):
        try:
            import numpy as np

            with np.load(sample.path, allow_pickle=False) as npz:
                return list(npz.files)
        except Exception:
            return None
    lines = [ln for ln in sample.lines if ln.strip()]
    if not lines:
        return None
    if lines[0].lstrip().startswith("{") or file_kind(sample.path) == "jsonl":
        lines = [ln for ln in lines if ln.lstrip().startswith("{")] or lines
        frame = pl.DataFrame({"line": range(1, min(len(lines), 50) + 1), "text": lines[:50]})
        objects, _ = json_objects(frame.with_columns(pl.col("line").cast(pl.Int64)))
        return [c for c in flatten_structs(objects).columns if c != "line"] or None
    header = lines[0]
    if "," not in header:
        return None
    return [c.strip().strip('"') for c in header.split(",")]


def whole_file(parts: Iterable[ParseResult]) -> ParseResult:
    """A streaming parser's chunks (`parse_chunks`) as one result, the one-rank rule applied
    to `metrics` (a source in which at most one rank prints values is global: rank null)."""
    result = ParseResult()
    for part in parts:
        for table, frame in part.tables.items():
            result.add(table, frame)
        result.records += part.records
        result.unparsed += part.unparsed
        result.unparsed_examples += part.unparsed_examples[: UNPARSED_EXAMPLES - len(result.unparsed_examples)]
        if part.unparsed_lines is not None:
            result.unparsed_lines = (
                part.unparsed_lines
                if result.unparsed_lines is None
                else pl.concat([result.unparsed_lines, part.unparsed_lines])
            )
    metrics = result.tables.get("metrics")
    if metrics is not None and metrics.get_column("rank").drop_nulls().n_unique() <= 1:
        result.tables["metrics"] = metrics.with_columns(pl.lit(None, dtype=pl.Int32).alias("rank"))
    return result


# Unparsed lines kept as examples per parse result (the driver keeps 20 in the manifest too).
UNPARSED_EXAMPLES = 20


def unparsed(result: ParseResult, bad: pl.DataFrame, limit: int = UNPARSED_EXAMPLES) -> None:
    """Count unparseable lines into a ParseResult, with (line, text) examples."""
    if bad.height == 0:
        return
    result.unparsed += bad.height
    lines = bad.get_column("line").cast(pl.Int64)
    result.unparsed_lines = lines if result.unparsed_lines is None else pl.concat([result.unparsed_lines, lines])
    rows = bad.head(limit).select(pl.col("line"), pl.col("text").str.slice(0, 200))
    result.unparsed_examples.extend((int(a) if a is not None else 0, b) for a, b in rows.iter_rows())


# ---------------------------------------------------------------------------
# Metric columns -> canonical wide records


def metric_target(col: str, kind: str) -> str:
    """Canonical name of a metric column for a record of `kind`.

    Train and eval records go through the alias table (a Lightning `*_step` column
    uses the alias of its stem); summary records keep their normalised name, so an HF
    summary's `train_loss` is not mistaken for a step loss.
    """
    key = normalise_name(col)
    if kind == "summary" or (kind == "eval" and METRIC_ALIASES.get(key) == "loss"):
        return key  # (an evaluation row's `train/loss` is the model measured on the training set, no step's loss)
    if key in METRIC_ALIASES:
        return METRIC_ALIASES[key]
    if key.endswith("_step") and key[: -len("_step")] in METRIC_ALIASES:
        return METRIC_ALIASES[key[: -len("_step")]]
    return key


# an evaluation named at the end (`loss_val`, a TensorBoard tag `IoU (avg on test)` -> `iou_avg_on_test`)
EVAL_SUFFIX = r"_(?:on_)?(?:test|val|valid|validation|eval)$"


def is_eval_name(col: str) -> bool:
    key = normalise_name(col)
    return key.startswith(EVAL_PREFIXES) or key in ("val", "eval", "valid") or bool(re.search(EVAL_SUFFIX, key))


# what only a training step prints (a loss, the LR, a grad norm) and what an evaluation prints (a quality
# metric): see `classify_rows`
TRAIN_SIGNAL = r"loss|^lr$|learning_rate|grad_norm"
# (and an RL agent's environment statistics, written when episodes end, not with the updates: ML-Agents'
# `Environment/Cumulative Reward`, `Environment/Episode Length`, `Self-play/ELO`, SB3's `rollout/ep_rew_mean`)
QUALITY_METRIC = (
    r"(?:^|[_/])(?:acc\w*|accuracy\w*|top\d\w*|m?ap\w*|bleu\w*|f1\w*|precision|recall|wer|cer|psnr|ssim|auc\w*|miou\w*"
    r"|pck\w*|\w*reward\w*|episode_length|ep_len\w*|ep_rew\w*|elo)(?:$|[_/])"
)


def _column_roles(metric_cols: list[str], neutral: tuple[str, ...]) -> dict[str, list[str]]:
    """The metric columns by role: summary, epoch aggregate, eval, neutral, train, and of the train
    columns those with a training signal and those with a quality metric."""
    norm = {c: normalise_name(c) for c in metric_cols}
    roles = {
        "summary": [c for c in metric_cols if norm[c] in SUMMARY_KEYS],
        "epoch_agg": [c for c in metric_cols if norm[c] != "epoch" and re.search(r"(^|_)epoch(_|$)", norm[c])],
        "eval": [c for c in metric_cols if is_eval_name(c)],
        "neutral": [c for c in metric_cols if norm[c] in neutral],
    }
    taken = {c for cols in roles.values() for c in cols}
    roles["train"] = [c for c in metric_cols if c not in taken]
    roles["signal"] = [c for c in roles["train"] if re.search(TRAIN_SIGNAL, norm[c])]
    roles["quality"] = [c for c in roles["train"] if re.search(QUALITY_METRIC, norm[c])]
    return roles


def has_signal(metric_cols: list[str], neutral: tuple[str, ...] = ("epoch",)) -> bool:
    """Whether any of `metric_cols` is a training signal of train rows (loss, LR, grad norm)."""
    return bool(_column_roles(metric_cols, neutral)["signal"])


def classify_rows(
    frame: pl.DataFrame, metric_cols: list[str], neutral: tuple[str, ...] = ("epoch",), file_signal: bool | None = None
) -> pl.Expr:
    """'train', 'eval', 'summary' or null (no values) per row, from which columns hold values.

    summary: an HF train-summary key is present, or every value is a Lightning epoch
    aggregate (`*_epoch`, `epoch_*`, `*_epoch_*`); eval: only evaluation metrics (and neutral
    columns such as `epoch`) carry values; train: anything else with a value. `file_signal`
    says whether the whole file has training-signal columns, for a frame that is one chunk of it.
    """
    roles = _column_roles(metric_cols, neutral)
    present = {c: pl.col(c).is_not_null() for c in metric_cols}
    false = pl.lit(False)

    def any_of(cols):
        return pl.any_horizontal([present[c] for c in cols]) if cols else false

    summary_cols, epoch_agg, eval_cols, train_cols = roles["summary"], roles["epoch_agg"], roles["eval"], roles["train"]
    has_any = any_of(metric_cols)
    # a row with a quality metric and no training signal, in a file whose other rows carry one, is an
    # evaluation (MMEngine's `scalars.json`: `{"accuracy/top1": 43.1, "data_time": ..., "step": 1}` between
    # the train rows, its `step` the epoch)
    signal_cols, quality_cols = roles["signal"], roles["quality"]
    signal = bool(signal_cols) if file_signal is None else file_signal
    quality_only = any_of(quality_cols) & ~any_of(signal_cols) if signal and quality_cols else false
    # a row with evaluation metrics and none of the training signals that the file's training rows (rows without
    # evaluation metrics) print is an evaluation (AlgoPerf's `measurements.csv`: `global_step,grad_norm,loss`
    # rows every step, and rows of `train/loss`, `validation/loss`, `test/loss`, `score` after each evaluation
    # pass: that `train/loss` is the model measured on the training set, not a step's loss); a row printing a
    # step's own signals beside a test metric (a per-epoch dict with `test_f1`) stays a training record
    evaluates = any_of(eval_cols)
    step_signals = [c for c in signal_cols if frame.select((present[c] & ~evaluates).any()).item()] if eval_cols else []
    evaluation_row = evaluates & ~any_of(step_signals) if step_signals else false
    return (
        pl.when(any_of(summary_cols))
        .then(pl.lit("summary"))
        .when(quality_only | evaluation_row)
        .then(pl.lit("eval"))
        .when(any_of(train_cols))
        .then(pl.lit("train"))
        .when(any_of(eval_cols))
        .then(pl.lit("eval"))
        .when(any_of(epoch_agg))
        .then(pl.lit("summary"))
        .when(has_any)
        .then(pl.lit("train"))
        .otherwise(pl.lit(None, dtype=pl.String))
    )


def canonical_wide(frame: pl.DataFrame, metric_cols: list[str], meta: list[str]) -> tuple[pl.DataFrame, list[str]]:
    """Rename metric columns to canonical names per record kind (see `metric_target`).

    `frame` has `record_kind` and Float64 metric columns. Columns that land on the
    same name are coalesced (first in column order wins). Returns the wide frame for
    `records_to_metrics` and its value column names.
    """
    parts = []
    names: list[str] = []
    for kind in ("train", "eval", "summary"):
        part = frame.filter(pl.col("record_kind") == kind)
        if part.height == 0:
            continue
        groups: dict[str, list[str]] = {}
        for col in metric_cols:
            groups.setdefault(metric_target(col, kind), []).append(col)
        exprs = [pl.coalesce([pl.col(c) for c in cols]).alias(name) for name, cols in groups.items()]
        parts.append(part.select(*meta, "record_kind", *exprs))
        names.extend(n for n in groups if n not in names)
    if not parts:
        return frame.select(*meta, "record_kind").clear(), []
    return pl.concat(parts, how="diagonal_relaxed").sort("line"), names


def drop_empty_columns(frame: pl.DataFrame, cols: list[str]) -> list[str]:
    """The columns of `cols` that carry at least one non-null value."""
    if not cols or frame.height == 0:
        return []
    counts = frame.select(pl.col(c).is_not_null().sum() for c in cols).row(0)
    return [c for c, n in zip(cols, counts) if n]
