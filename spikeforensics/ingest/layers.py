"""Per-layer gradient dumps (CSV, JSONL, Parquet, NPZ) -> the `layers` table.

Recognised by columns (names through `aliases.LAYER_COLUMN_ALIASES`, extendable by a
user TOML): `step`, optional `rank`, `layer`, the L2 norm (`grad_norm`, `grad_l2`,
`norm`, `l2`, ...), optional `zero_frac`, `pos_frac`, `max_abs`, `numel`,
`param_norm`, `update_norm`.

A *global* gradient dump (no `layer` column: `step[, rank], grad_norm[, grad_norm_clipped]`)
becomes `metrics` rows `grad_norm` / `grad_norm_clipped` per step (and rank when
several ranks are dumped).

NPZ: either one 1-D array per column (all the same length), or a matrix layout:
`step` (S,), `layer` (L,) and `grad_norm` (and other statistics) of shape (S, L).
Pickled object arrays are refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest import _tables as T
from spikeforensics.ingest import aliases
from spikeforensics.ingest.aliases import METRIC_ALIASES, rename_columns
from spikeforensics.ingest.base import ParseResult, SniffSample, SourceFile, normalise_name, records_to_metrics

NAME = "layers"
BINARY = True  # Parquet / NPZ dumps are binary; text dumps are sniffed the same way

# JSONL dumps are decoded this many bytes at a time (decoding holds about 13x the text, as in
# jsonl_metrics.CHUNK_BYTES: 16 MiB keeps a parse near 300 MB whatever the dump's length)
JSONL_CHUNK_BYTES = 16 << 20

STAT_COLUMNS = ("grad_norm", "zero_frac", "pos_frac", "max_abs", "param_norm", "update_norm")
_NPZ_PLURALS = {
    "steps": "step",
    "layers": "layer",
    "names": "layer",
    "layer_names": "layer",
    "ranks": "rank",
    "grad_norms": "grad_norm",
    "norms": "grad_norm",
}
_GLOBAL_OK = {"step", "rank", "grad_norm", "grad_norm_clipped", "time", "timestamp", "attempt"}


def _canonical(columns: list[str]) -> dict[str, str]:
    return rename_columns(columns, aliases.LAYER_COLUMN_ALIASES)


def looks_like_layers(columns: list[str]) -> bool:
    canon = set(_canonical([_NPZ_PLURALS.get(normalise_name(c), c) for c in columns]).values())
    return {"step", "layer", "grad_norm"} <= canon


def looks_like_global_grads(columns: list[str]) -> bool:
    """step[, rank], grad_norm[, grad_norm_clipped] and nothing else of note."""
    canon = _canonical(columns)
    if "layer" in canon.values() or not {"step", "grad_norm"} <= set(canon.values()):
        return False
    rest = [c for c in columns if c not in canon]
    return all(METRIC_ALIASES.get(normalise_name(c), normalise_name(c)) in _GLOBAL_OK for c in rest)


def sniff(sample: SniffSample) -> float:
    cols = T.sample_columns(sample)
    if not cols:
        return 0.0
    if looks_like_layers(cols):
        return 0.9
    if looks_like_global_grads(cols):
        return 0.8
    return 0.0


def parse(src: SourceFile, chunk_bytes: int | None = None) -> ParseResult:
    """The whole dump as one result (tests, notebooks): the chunks of `parse_chunks` put together."""
    result = ParseResult()
    layers, metrics = [], []
    seen: set[tuple] = set()
    for part in parse_chunks(src, chunk_bytes):
        result.unparsed += part.unparsed
        result.unparsed_examples += part.unparsed_examples
        if "metrics" in part.tables:
            metrics.append(part.tables["metrics"])
            result.records += part.records
        if "layers" in part.tables:
            layers.append(part.tables["layers"])
            seen.update(part.tables["layers"].select("step", "rank").unique().iter_rows())
    if metrics:
        result.add("metrics", pl.concat(metrics, how="diagonal_relaxed"))
    if layers:
        result.records += len(seen)  # a step's rows may straddle two chunks
        result.add("layers", pl.concat(layers, how="diagonal_relaxed"))
    return result


def parse_chunks(src: SourceFile, chunk_bytes: int | None = None) -> Iterator[ParseResult]:
    """One result per chunk of a per-layer dump (its `layers` rows, written to the store as they come, so
    a dump of tens of millions of rows never sits in memory as text); a global dump (one row per step,
    numbered as records) and an NPZ come as one result. A chunk's `records` are the (step, rank) pairs it
    holds that the chunk before did not (a step whose rows straddle a boundary counts once)."""
    kind = T.file_kind(src.path)
    reading = ParseResult()  # the table reader's unparsed rows, moved to the result of their chunk
    chunks = [read_npz(src)] if kind == "npz" else side_table_chunks(src, kind, reading, chunk_bytes)
    global_frames: list[tuple[pl.DataFrame, dict]] = []
    rest = ParseResult()  # what no per-layer chunk result carries out: a global dump, unparsed chunks
    global_dump = None  # decided on the first chunk: a per-layer or a global dump
    lacking = None  # (missing, columns) of the first chunk without the per-layer columns
    found = False
    previous: set[tuple] = set()
    for frame in chunks:
        result = ParseResult()
        _move_unparsed(reading, result)
        columns = [c for c in frame.columns if c != "line"]
        rename = _canonical(columns)
        if global_dump is None:
            global_dump = "layer" not in rename.values() and looks_like_global_grads(columns)
        if global_dump:  # numbered as records over the whole file: its chunks are read together (small)
            global_frames.append((frame, rename))
            _move_unparsed(result, rest)
            continue
        missing = [c for c in ("step", "layer", "grad_norm") if c not in rename.values()]
        if missing:  # a chunk without the columns: its rows are unparsed (the file fails if none has them)
            lacking = lacking or (missing, columns)
            T.unparsed(result, frame.select("line", pl.lit(f"no column for {T.shown_names(missing)}").alias("text")))
            _move_unparsed(result, rest)
            continue
        part = _layer_rows(frame.rename(rename), result)
        pairs = set(part.select("step", "rank").unique().iter_rows())
        result.records += len(pairs - previous)  # a step whose rows straddle the chunk boundary counts once
        previous = pairs
        result.add("layers", schema.conform("layers", part))
        found = True
        yield result
    if lacking and not found:
        missing, columns = lacking
        raise T.ingest_error(
            f"{src.path}: not a per-layer gradient dump: no column for {T.shown_names(missing)} "
            f"(found: {T.shown_names(columns)})"
        )
    _move_unparsed(reading, rest)
    if global_frames:
        frame = pl.concat([f for f, _ in global_frames], how="diagonal_relaxed")
        rest.add("metrics", global_grads(frame, global_frames[0][1], src.name, rest))
    if global_frames or rest.unparsed:
        yield rest


def _move_unparsed(source: ParseResult, into: ParseResult) -> None:
    into.unparsed += source.unparsed
    into.unparsed_examples += source.unparsed_examples
    into.records += source.records
    source.unparsed, source.unparsed_examples, source.records = 0, [], 0


def _layer_rows(frame: pl.DataFrame, result: ParseResult) -> pl.DataFrame:
    """A per-layer frame (canonical column names) -> layers rows; rows without a step or layer are unparsed."""
    layers = frame.select(
        "line",
        T.integer(frame, "step").alias("step"),
        (T.integer(frame, "rank") if "rank" in frame.columns else pl.lit(None, dtype=pl.Int64)).alias("rank"),
        pl.col("layer").cast(pl.String).str.strip_chars().alias("layer"),
        *[T.numeric(frame, c).alias(c) for c in STAT_COLUMNS if c in frame.columns],
        *([T.integer(frame, "numel").alias("numel")] if "numel" in frame.columns else []),
    )
    good = pl.col("step").is_not_null() & pl.col("layer").is_not_null() & (pl.col("layer") != "")
    _count_bad(result, frame, layers, good)
    return layers.filter(good)


def side_table_chunks(
    src: SourceFile, kind: str, result: ParseResult, chunk_bytes: int | None = None
) -> Iterator[pl.DataFrame]:
    """CSV / JSONL / Parquet -> frames with `line` (null for Parquet). JSONL is decoded in
    chunks of `JSONL_CHUNK_BYTES` cut at line ends (its rows are independent: a dump of
    millions of rows is never decoded at once); so is a CSV without a quote character in its
    first block, each chunk read under the file's header (any line ending: `iter_line_chunks`
    decides lone-CR files on the first block); a CSV with quotes (a field may span lines) and
    Parquet come whole."""
    if kind == "csv" and src.only_lines is None and not _quoted_head(src):
        yield from _csv_chunks(src, result, chunk_bytes or JSONL_CHUNK_BYTES)
        return
    if kind == "jsonl":
        whole = [src.lines()] if src.only_lines is not None else None
        for lines in whole or src.iter_line_chunks(chunk_bytes or JSONL_CHUNK_BYTES):
            objects, bad = T.json_objects(lines)
            T.unparsed(result, bad)
            if objects.height:
                yield objects
        return
    yield read_side_table(src, kind, result)


def _quoted_head(src: SourceFile) -> bool:
    with open(src.path, "rb") as fh:
        return b'"' in fh.read(1 << 16)


def _csv_chunks(src: SourceFile, result: ParseResult, chunk_bytes: int) -> Iterator[pl.DataFrame]:
    """A quote-free CSV in chunks of whole lines, each read under the header (repeated header rows dropped)."""
    header = None
    for lines in src.iter_line_chunks(chunk_bytes):
        lines = lines.filter(pl.col("text").str.strip_chars() != "")
        if lines.height == 0:
            continue
        if header is None:
            header = lines.head(1)
        else:
            lines = pl.concat([header, lines])
        frame = T.csv_from_lines(lines, result)
        if frame.width > 1:
            first = frame.columns[0]
            frame = frame.filter(pl.col(first).is_null() | (pl.col(first) != first))
        if frame.height:
            yield frame


def read_side_table(src: SourceFile, kind: str, result: ParseResult) -> pl.DataFrame:
    """CSV / JSONL / Parquet -> one frame with `line` (null for Parquet)."""
    if kind == "parquet":
        try:
            expanded = T.parquet_expansion(src.path)
        except Exception as exc:
            raise T.ingest_error(f"{src.path}: not a readable Parquet file: {exc}") from None
        T.check_expansion(src.path, expanded, "Parquet file")
        frame = pl.read_parquet(src.path)
        return frame.with_columns(pl.lit(None, dtype=pl.Int64).alias("line"))
    if kind == "jsonl":
        objects, bad = T.json_objects(src.lines())
        T.unparsed(result, bad)
        return objects
    frame = T.read_csv_lines(src, result)
    if frame.width > 1:
        first = frame.columns[0]
        frame = frame.filter(pl.col(first).is_null() | (pl.col(first) != first))  # repeated headers
    return frame


def _count_bad(result: ParseResult, raw: pl.DataFrame, parsed: pl.DataFrame, good: pl.Expr) -> None:
    """Rows without a usable step/layer count as unparsed, with their text as examples."""
    mask = parsed.select(good.fill_null(False)).to_series()
    bad = raw.filter(~mask)
    if bad.height == 0:
        return
    text = pl.concat_str([pl.col(c).cast(pl.String).fill_null("") for c in raw.columns if c != "line"], separator=",")
    T.unparsed(result, bad.select("line", text.alias("text")))


def global_grads(frame: pl.DataFrame, rename: dict[str, str], source: str, result: ParseResult) -> pl.DataFrame:
    """A dump without `layer`: metrics rows `grad_norm` (and `grad_norm_clipped`)."""
    frame = frame.rename(rename)
    clipped = next((c for c in frame.columns if METRIC_ALIASES.get(normalise_name(c)) == "grad_norm_clipped"), None)
    has_lines = frame.get_column("line").null_count() < frame.height
    wide = frame.select(
        (pl.col("line") if has_lines else pl.int_range(1, pl.len() + 1, dtype=pl.Int64)).alias("line"),
        T.integer(frame, "step").alias("step"),
        (T.integer(frame, "rank").cast(pl.Int32) if "rank" in frame.columns else pl.lit(None, dtype=pl.Int32)).alias(
            "prefix_rank"
        ),
        T.numeric(frame, "grad_norm").alias("grad_norm"),
        *([T.numeric(frame, clipped).alias("grad_norm_clipped")] if clipped else []),
    ).filter(pl.col("step").is_not_null())
    result.records += wide.height
    metrics = records_to_metrics(wide, source, [c for c in ("grad_norm", "grad_norm_clipped") if c in wide.columns])
    if not has_lines:
        metrics = metrics.with_columns(pl.lit(None, dtype=pl.Int64).alias("line"))
    return metrics


def read_npz(src: SourceFile) -> pl.DataFrame:
    """An NPZ dump as a long frame (step, [rank,] layer, stats...)."""
    import numpy as np

    try:
        expanded = T.npz_expansion(src.path)
    except Exception as exc:
        raise T.ingest_error(f"{src.path}: not a readable NPZ file: {exc}") from None
    T.check_expansion(src.path, expanded, "NPZ file")
    try:
        npz = np.load(src.path, allow_pickle=False)
    except ValueError as exc:
        raise T.ingest_error(f"{src.path}: NPZ holds pickled objects, which are not loaded ({exc})") from None
    except Exception as exc:
        raise T.ingest_error(f"{src.path}: not a readable NPZ file: {exc}") from None
    with npz:
        try:
            arrays = {_NPZ_PLURALS.get(normalise_name(k), k): npz[k] for k in npz.files}
        except ValueError as exc:
            raise T.ingest_error(f"{src.path}: NPZ holds pickled objects, which are not loaded ({exc})") from None
    rename = _canonical(list(arrays))
    arrays = {rename.get(k, k): v for k, v in arrays.items()}
    needed = [k for k in ("step", "layer", "grad_norm") if k not in arrays]
    if "layer" in needed and not [k for k in needed if k != "layer"]:
        needed = []  # a global dump: step + grad_norm
    if needed:
        raise T.ingest_error(
            f"{src.path}: NPZ gradient dump needs arrays {', '.join(needed)} (or an alias); "
            f"found: {T.shown_names(sorted(arrays))}"
        )
    norm = arrays["grad_norm"]
    if norm.ndim == 2 and "layer" in arrays:
        steps, names = np.asarray(arrays["step"]).ravel(), np.asarray(arrays["layer"]).astype(str).ravel()
        if norm.shape != (steps.size, names.size):
            raise T.ingest_error(
                f"{src.path}: grad_norm has shape {norm.shape}, expected (len(step), len(layer)) = "
                f"({steps.size}, {names.size})"
            )
        cols = {"step": np.repeat(steps, names.size), "layer": np.tile(names, steps.size)}
        for k, v in arrays.items():
            if k not in ("step", "layer") and getattr(v, "shape", None) == norm.shape:
                cols[k] = np.asarray(v).ravel()
    else:
        n = np.asarray(arrays["step"]).size
        cols = {k: np.asarray(v).ravel() for k, v in arrays.items() if np.asarray(v).size == n}
        if "layer" in cols:
            cols["layer"] = cols["layer"].astype(str)
    frame = pl.DataFrame(cols)
    return frame.with_columns(pl.lit(None, dtype=pl.Int64).alias("line"))
