"""Numbers and key/value fields as training logs print them: `to_float` for number
tokens (NaN/Inf, separators, percents, K/M/G suffixes), `json_safe` for bare NaN in JSON
text, field-name normalisation, and the splitters that turn text step records into
(`line`, `name`, `value`) rows. Re-exported by `base`.
"""

from __future__ import annotations

import re

import polars as pl


def to_float(expr: pl.Expr) -> pl.Expr:
    """Parse a number token as printed by a training log into Float64.

    Handles `nan`/`NaN`/`NAN`/`-nan`, `inf`/`Infinity`, upper/lower-case exponents,
    thousands separators, a trailing `%`, and K/M/G/T/B suffixes (nanotron, OLMo-core).
    Anything else becomes null (never an exception).
    """
    s = expr.str.strip_chars().str.strip_chars("'\"").str.replace_all(",", "")
    # Lightning's progress bar pads every float it shows to five characters: `nan.0`, `inf.0`, `-inf.`
    # and Python's zero-padded formats pad them with zeros: `f"{x:05.2f}"` of NaN is `00nan`, of -inf `-000inf`
    lower = (
        s.str.to_lowercase()
        .str.replace(r"^([-+]?(?:nan|inf|infinity))\.0*$", "$1")
        .str.replace(r"^([-+]?)0+((?:nan|inf|infinity))$", "$1$2")
    )
    special = (
        pl.when(lower.is_in(["nan", "-nan", "+nan"]))
        .then(float("nan"))
        .when(lower.is_in(["inf", "+inf", "infinity", "+infinity"]))
        .then(float("inf"))
        .when(lower.is_in(["-inf", "-infinity"]))
        .then(float("-inf"))
    )
    suffix = s.str.extract(r"^[-+]?[0-9.]+(?:[eE][-+]?\d+)?\s*([KMGTB])$", 1)
    mantissa = s.str.extract(r"^([-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*[KMGTB]$", 1).cast(pl.Float64, strict=False)
    scale = (
        pl.when(suffix == "K")
        .then(1e3)
        .when(suffix == "M")
        .then(1e6)
        .when(suffix.is_in(["G", "B"]))
        .then(1e9)
        .when(suffix == "T")
        .then(1e12)
    )
    plain = s.str.strip_suffix("%").cast(pl.Float64, strict=False)
    return special.otherwise(pl.coalesce(plain, mantissa * scale))


NONFINITE_JSON_RE = r"([:\[,]\s*)(-?(?:NaN|nan|Infinity|inf|-nan))\b"


def json_safe(expr: pl.Expr) -> pl.Expr:
    """Quote the bare NaN/Infinity tokens Python's json.dumps writes, so polars'
    `json_decode` (strict JSON) accepts the text; numbers then need `to_float`."""
    return expr.str.replace_all(NONFINITE_JSON_RE, '$1"$2"')


def normalise_name(name: str) -> str:
    """Field names that are not canonical: lower-cased, non-alphanumerics as `_`."""
    out = []
    for ch in name.lower():
        out.append(ch if ch.isalnum() else "_")
    return "_".join(part for part in "".join(out).split("_") if part)


def normalise_name_expr(expr: pl.Expr) -> pl.Expr:
    return expr.str.to_lowercase().str.replace_all(r"[^a-z0-9]+", "_").str.strip_chars("_")


# ---------------------------------------------------------------------------
# Key/value fields of text step records (Megatron `name: value |`, nanotron, mmengine,
# llm.c, generic loops): shared by the text parsers.

# A number token as logs print it: 1,234.5  6.4E+00  634K  16.68%  nan  -inf  Infinity  00nan (Python's
# zero-padded `{:05.2f}`)  nan.0 (Lightning;
# its `-inf.` reads as `-inf` and a dot: a sentence's `Loss is NaN. Current ...` keeps its full stop)
NUM_TOKEN = (
    r"(?:[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?:[KMGTB]\b|%)?"
    r"|[-+]?0*(?:[Nn]a[Nn]|NAN|[Ii]nf(?:inity)?|INF)\b(?:\.0+)?)"
)


def parse_numbers(frame: pl.DataFrame, raw: str = "raw", out: str = "value") -> pl.DataFrame:
    """Add Float64 `out` from the string column `raw`: a plain cast where it works (the
    common case, fast), `to_float` on the few others (suffixes, separators, percents)."""
    frame = frame.with_columns(pl.col(raw).str.strip_chars().cast(pl.Float64, strict=False).alias(out))
    bad = pl.col(out).is_null() & pl.col(raw).is_not_null()
    if frame.select(bad.any()).item():
        frame = frame.with_columns(pl.when(bad).then(to_float(pl.col(raw))).otherwise(pl.col(out)).alias(out))
    return frame


def captured_values(frame: pl.DataFrame, cols: dict[str, str]) -> pl.DataFrame:
    """(line, name, value) from regex-captured string columns, renamed to metric names
    (`cols` maps capture column -> metric name); absent captures give no row."""
    if frame.height == 0:
        return pl.DataFrame(schema={"line": pl.Int64, "name": pl.String, "value": pl.Float64})
    raw = (
        frame.select("line", *[pl.col(c).alias(n) for c, n in cols.items()])
        .unpivot(index="line", variable_name="name", value_name="raw")
        .filter(pl.col("raw").is_not_null())
    )
    return parse_numbers(raw).select("line", "name", "value")


def split_fields(frame: pl.DataFrame, sep: str, field_re: str, text: str = "text") -> pl.DataFrame:
    """One row per field: split `text` on the literal `sep`, keep the pieces that fully
    match `field_re` (named groups `k` and `v`); returns the frame's other columns plus
    `k`, `v`."""
    keep = [c for c in frame.columns if c != text]
    pieces = frame.select(*keep, pl.col(text).str.split(sep).alias("_p")).explode("_p")
    groups = pieces.with_columns(pl.col("_p").str.extract_groups(field_re).alias("_g")).unnest("_g")
    return groups.filter(pl.col("k").is_not_null()).drop("_p")


def split_colon_fields(frame: pl.DataFrame, sep: str, text: str = "text") -> pl.DataFrame:
    """The fast `split_fields` for `name: value` fields (Megatron, nanotron): split on
    `sep`, then at the first colon; pieces without a colon or with more than one token
    as value are dropped. Returns the frame's other columns plus `k`, `v`."""
    keep = [c for c in frame.columns if c != text]
    pieces = frame.select(*keep, pl.col(text).str.split(sep).alias("_p")).explode("_p")
    kv = (
        pieces.with_columns(pl.col("_p").str.split_exact(":", 1).struct.rename_fields(["k", "v"]).alias("_g"))
        .unnest("_g")
        .drop("_p")
    )
    kv = kv.with_columns(pl.col("v").str.strip_chars()).filter(pl.col("v").is_not_null() & (pl.col("v") != ""))
    return kv.filter(~pl.col("v").str.contains(" ", literal=True))


def find_pairs(frame: pl.DataFrame, pair_re: str, text: str = "text") -> pl.DataFrame:
    """One row per `key<sep>value` match of `pair_re` (groups `k`, `v`) anywhere in the
    text; returns the frame's other columns plus `k`, `v`, `_piece` (match index)."""
    keep = [c for c in frame.columns if c != text]
    found = (
        frame.select(*keep, pl.col(text).str.extract_all(pair_re).alias("_p"))
        .with_columns(pl.int_ranges(pl.col("_p").list.len()).alias("_piece"))
        .explode("_p", "_piece")
        .filter(pl.col("_p").is_not_null())
    )
    return found.with_columns(pl.col("_p").str.extract_groups(pair_re).alias("_g")).unnest("_g").drop("_p")


def _eval_name(key: str) -> str:
    """The eval metric a key of an evaluation record names: `eval_` + the key without its eval word, wherever
    that word sits (`val_loss`, `valid_ppl`; `total_val_loss`, a YOLO loop's summed validation loss, is
    `eval_loss`: the rest, `total_loss`, is the training loss's alias). A key without an eval word keeps its
    name (`train_loss` -> `eval_train_loss`)."""
    from spikeforensics.ingest.aliases import canonical_metric

    name = normalise_name(key.strip())
    base = re.sub(r"(?:^|_)(?:eval|valid|validation|val)(?=_|$)", "", name).strip("_") or name
    # only a key that named its evaluation is its eval loss: `train_loss: 2.5 val_loss: 9.9` on a validation
    # line keeps the training loss apart (`eval_train_loss`), as it always did
    return "eval_" + ("loss" if base != name and canonical_metric(base) == "loss" else base)


FIXED_ZERO = r"^\s*[-+]?0\.00+\s*$"


def named_values(pairs: pl.DataFrame, eval_rows: pl.Expr | None = None) -> pl.DataFrame:
    """`k`/`v` pairs -> `name` (canonical metric name via aliases) and Float64 `value`.
    In rows where `eval_rows` is true, names that are not already eval metrics get an
    `eval_` prefix (a validation block's `lm loss PPL` is not the training one)."""
    from spikeforensics.ingest.aliases import canonical_metric

    # names are computed once per distinct key (a log has a few dozen), not per row
    keys = pairs.get_column("k").unique().drop_nulls().to_list()
    canon = {k: canonical_metric(k.strip()) for k in keys}
    evals = {k: _eval_name(k) for k in keys}
    evals = {k: (canon[k] if canon[k].startswith("eval_") or canon[k] == "epoch" else e) for k, e in evals.items()}
    name = pl.col("k").replace_strict(canon, default="", return_dtype=pl.String)
    if eval_rows is not None and pairs.select(eval_rows.any()).item():
        name = (
            pl.when(eval_rows)
            .then(pl.col("k").replace_strict(evals, default="", return_dtype=pl.String))
            .otherwise(name)
        )
    out = parse_numbers(pairs.with_columns(name.alias("name")), raw="v", out="value")
    # a learning rate printed as a zero of fixed decimals (verl's `actor/lr:0.000`, a `{lr:.4f}` format) is an LR
    # below the print's last digit, not 0: no value (an LR of exactly 0 prints as `0`, `0.0` or `0.000e+00`)
    rounded = (pl.col("name") == "lr") & pl.col("v").str.contains(FIXED_ZERO)
    return out.filter(pl.col("value").is_not_null() & (pl.col("name") != "") & ~rounded)
