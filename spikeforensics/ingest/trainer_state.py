"""HF `trainer_state.json` (output_dir and every `checkpoint-N/`) -> metrics.

`TrainerState.save_to_json` writes `json.dumps(..., indent=2, sort_keys=True)`, so
NaN/Inf appear as bare `NaN`/`Infinity`; Python's own JSON reader accepts them (one
call for the whole file). `log_history` entries are the stdout dicts plus `"step"`:
training entries (loss, grad_norm, learning_rate, epoch, TRL/axolotl extras), eval
entries (`eval_*` keys, record null) and the final train summary (`train_runtime`,
`train_loss`, ...; record null, names kept as written).

The `line` of an entry is the line of its opening `{` when the file is indented as
`save_to_json` writes it, else null.
"""

from __future__ import annotations

import json

import polars as pl

from spikeforensics.ingest import _tables as T
from spikeforensics.ingest.base import ParseResult, SniffSample, SourceFile, records_to_metrics

NAME = "hf_trainer_state"


def sniff(sample: SniffSample) -> float:
    head = sample.text.lstrip()
    if not head.startswith("{") or '"log_history"' not in head or _jsonl(head):
        return 0.0
    return 0.95 if ('"global_step"' in head or '"max_steps"' in head) else 0.7


def _jsonl(head: str) -> bool:
    """One complete JSON object per line, more than one line: a metrics JSONL (ms-swift's `logging.jsonl`, whose
    last line is its own trainer-state summary holding a `log_history`), not one trainer_state document."""
    first, _, rest = head.partition("\n")
    if not rest.strip():
        return False
    try:
        return isinstance(json.loads(first), dict)
    except ValueError:
        return False


def parse(src: SourceFile) -> ParseResult:
    result = ParseResult()
    text = src.read_bytes().decode("utf-8", errors="replace")
    try:
        data = json.loads(text)  # accepts NaN / Infinity / -Infinity
    except json.JSONDecodeError as exc:
        raise T.ingest_error(f"{src.path}: not a readable trainer_state.json (line {exc.lineno}: {exc.msg})") from None
    history = data.get("log_history") if isinstance(data, dict) else None
    if not isinstance(history, list):
        raise T.ingest_error(f"{src.path}: JSON without a log_history list")
    entries = [e for e in history if isinstance(e, dict)]
    if not entries:
        return result
    frame = pl.DataFrame(entries, infer_schema_length=None, strict=False)
    frame = frame.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("line"))
    cols = [c for c in frame.columns if c not in ("line", "step")]
    wide = frame.select(
        "line",
        (T.integer(frame, "step") if "step" in frame.columns else pl.lit(None, dtype=pl.Int64)).alias("step"),
        *[T.numeric(frame, c).alias(c) for c in cols],
    )
    cols = T.drop_empty_columns(wide, cols)
    wide = wide.with_columns(T.classify_rows(wide, cols).alias("record_kind")).filter(
        pl.col("record_kind").is_not_null()
    )
    wide, names = T.canonical_wide(wide, cols, ["line", "step"])
    metrics = records_to_metrics(wide, src.name, names)
    result.records += metrics.get_column("line").n_unique()
    # ordinal -> physical line of the entry's opening brace
    lines = entry_lines(src, len(history))
    keep = [i + 1 for i, e in enumerate(history) if isinstance(e, dict)]
    mapping = pl.DataFrame(
        {"line": list(range(1, len(keep) + 1)), "_real": [lines[k - 1] if lines else None for k in keep]},
        schema={"line": pl.Int64, "_real": pl.Int64},
    )
    metrics = metrics.join(mapping, on="line", how="left").with_columns(pl.col("_real").alias("line")).drop("_real")
    result.add("metrics", metrics)
    return result


def entry_lines(src: SourceFile, count: int) -> list[int] | None:
    """Physical line of each log_history entry's `{`, or None when the layout is not
    the indented one (e.g. a compact single-line file)."""
    lines = src.lines()
    start = lines.filter(pl.col("text").str.contains(r'^\s*"log_history":\s*\[\s*$'))
    if start.height != 1:
        return None
    after = lines.filter(pl.col("line") > start.item(0, "line"))
    braces = after.filter(pl.col("text").str.contains(r"^\s*\{\s*$"))
    if braces.height == 0:
        return None
    indent = braces.get_column("text").str.len_chars().item(0)
    first = braces.filter(pl.col("text").str.len_chars() == indent).head(count)
    return first.get_column("line").to_list() if first.height == count else None
