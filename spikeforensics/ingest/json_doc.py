"""JSON documents that hold a run's step records as a list of objects somewhere inside them.

Many tools save one pretty-printed JSON file per run rather than JSON lines: a benchmark's result
file (PEFT's MetaMathQA method comparison, `train_info.metrics`: one object every `eval_steps`
with `step`, `train loss`, `valid accuracy`, timings), a custom loop's `history.json`
(`{"train": [{"step": 0, "loss": 2.3}, ...]}`) or a bare top-level list of such objects:

    {
      "run_info": {"train_config": {...}, ...},
      "train_info": {
        "metrics": [
          {"step": 250, "valid accuracy": 0.32, "train loss": 0.98, "train samples": 1000, ...},
          {"step": 500, ...},

The records are the longest list of objects in the document whose objects carry a step counter
(`step`, `global_step`, `iteration`, `iter`, `epoch`; the keys of `jsonl_metrics.STEP_KEYS`) and a
number under a loss-like key (`loss`, `train loss`, `eval_loss`, ...). Each object is then read as
one JSON line of `jsonl_metrics` would be (same aliases, same train/eval/summary classification,
same record rules: an object that repeats the previous object's step, as a run's final summary
does, is the same record). HF's `trainer_state.json` has its own parser (its `log_history`).
`line` is the object's position in that list (1-based): a pretty-printed document has no one line
per record.

Sacred's `FileStorageObserver` writes a run's `metrics.json` column-wise instead: one object per metric
name (`_run.log_scalar("training.loss", value, step)`) holding parallel lists,

    {
      "training.loss": {
        "steps": [1, 2, ...],
        "timestamps": ["2024-02-08T23:02:17.744847", ...],
        "values": [0.2630771433830261, ...]
      }, ...

read as one object per step (`{"step": 1, "training.loss": 0.263}`, the metrics of one step together; the
timestamps are not read); `line` is the step's position among the steps (1-based). Megatron-LM's functional-test
golden values (`tests/functional_tests/test_cases/*/golden_values_*.json`, the curves its release tests compare
against) are the same with the steps given by their range,

    {"lm loss": {"start_step": 0, "end_step": 53183, "step_interval": 5, "values": [12.98419, 12.91908, ...]},
     "iteration-time": {...}, "mem-allocated-bytes": {...}}

value i at step `start_step + i * step_interval`; a value written as a string (the `"nan"` that newer files put
where the extraction found no value for a step) is no value, a gap.

The document is read whole (`json.loads`, NaN/Infinity accepted): at most
`MAX_DOC_BYTES`; nested deeper than `T.MAX_JSON_DEPTH` it is refused.
"""

from __future__ import annotations

import json
import re

import polars as pl

from spikeforensics.ingest import _tables as T
from spikeforensics.ingest.base import ParseResult, SniffSample, SourceFile, normalise_name
from spikeforensics.ingest.jsonl_metrics import STEP_KEYS, metrics_from_objects

NAME = "json_doc"
MAX_DOC_BYTES = 256 << 20  # a per-run JSON document of metrics is kilobytes to megabytes; json.loads holds ~10x
COUNTER_KEYS = frozenset((*STEP_KEYS, "epoch"))
LOSS_KEY = re.compile(r"loss")
# the head of a pretty-printed document: `{` or `[` alone on the first line, a quoted key soon after
HEAD = re.compile(r'^\s*[\[{]\s*\n\s*(?:"[^"\n]+"\s*:|\{)')
HEAD_COUNTER = re.compile(r'"(?:step|global_step|iteration|iter|epoch)"\s*:\s*\d')
# Sacred's metrics.json: `{`, a metric name, then its object's first list
SACRED_HEAD = re.compile(
    r'^\s*\{\s*\n\s*"[^"\n]+"\s*:\s*\{\s*\n\s*"(?:steps|timestamps|values|start_step|end_step|step_interval)"\s*:'
)
HEAD_LOSS = re.compile(r'"[^"\n]*loss[^"\n]*"\s*:\s*(?:-?\d|NaN|-?Infinity|null|"(?:nan|inf))', re.IGNORECASE)


def sniff(sample: SniffSample) -> float:
    text = sample.text
    if SACRED_HEAD.match(text):
        return 0.6
    if not HEAD.match(text) or '"log_history"' in text:
        return 0.0
    return 0.6 if HEAD_COUNTER.search(text) and HEAD_LOSS.search(text) else 0.0


def _is_record(obj: object) -> bool:
    if not isinstance(obj, dict):
        return False
    keys = {normalise_name(k): v for k, v in obj.items() if isinstance(k, str)}
    has_step = any(k in COUNTER_KEYS and isinstance(v, (int, float)) for k, v in keys.items())
    has_loss = any(LOSS_KEY.search(k) and (isinstance(v, (int, float)) or v is None) for k, v in keys.items())
    return has_step and has_loss


def record_list(doc: object, depth: int = 0) -> list[dict]:
    """The longest list of record-like objects in `doc` (see the module docstring); [] if none."""
    best: list[dict] = []
    if depth > T.MAX_JSON_DEPTH:
        return best
    if isinstance(doc, list):
        found = [o for o in doc if _is_record(o)]
        if len(found) >= 2 and len(found) >= len(doc) // 2:
            best = found
        children = doc
    elif isinstance(doc, dict):
        children = list(doc.values())
    else:
        return best
    for child in children:
        if isinstance(child, (list, dict)):
            inner = record_list(child, depth + 1)
            if len(inner) > len(best):
                best = inner
    return best


def sacred_objects(doc: object) -> pl.DataFrame | None:
    """One row per step of a Sacred `metrics.json` (see the module docstring): `step` and each metric's value at
    that step (metrics joined on the step); None if `doc` is not one."""
    if not isinstance(doc, dict) or not doc:
        return None
    frames = []
    for name, series in doc.items():
        steps = series.get("steps") if isinstance(series, dict) else None
        values = series.get("values") if isinstance(series, dict) else None
        if steps is None and isinstance(values, list):
            steps = _ranged_steps(series, len(values))
            values = [v if isinstance(v, (int, float)) else None for v in values]
        if not isinstance(steps, list) or not isinstance(values, list) or len(values) != len(steps):
            return None
        frame = pl.DataFrame({"step": steps, name: values}, strict=False)
        frames.append(
            frame.select(
                pl.col("step").cast(pl.Int64, strict=False), pl.col(name).cast(pl.Float64, strict=False)
            ).filter(pl.col("step").is_not_null())
        )
    objects = frames[0]
    for frame in frames[1:]:
        objects = objects.join(frame, on="step", how="full", coalesce=True)
    return objects.sort("step") if objects.height >= 2 else None


def _ranged_steps(series: dict, n: int) -> list[int] | None:
    """The steps of a Megatron golden-values series: `start_step + i * step_interval` (None if not given as ints)."""
    start, every = series.get("start_step"), series.get("step_interval")
    if not isinstance(start, int) or not isinstance(every, int) or every <= 0:
        return None
    return list(range(start, start + n * every, every))


def parse(src: SourceFile) -> ParseResult:
    result = ParseResult()
    size = src.path.stat().st_size
    if size > MAX_DOC_BYTES:
        raise T.ingest_error(f"{src.path}: a {size >> 20} MiB JSON document; at most {MAX_DOC_BYTES >> 20} MiB is read")
    text = src.read_bytes().decode("utf-8", errors="replace")
    if T.json_depth(text) > T.MAX_JSON_DEPTH:
        raise T.ingest_error(f"{src.path}: JSON nested deeper than {T.MAX_JSON_DEPTH} levels")
    try:
        doc = json.loads(text)  # accepts NaN / Infinity / -Infinity
    except json.JSONDecodeError as exc:
        raise T.ingest_error(f"{src.path}: not a readable JSON document (line {exc.lineno}: {exc.msg})") from None
    objects = sacred_objects(doc)
    if objects is None:
        entries = record_list(doc)
        if not entries:
            return result
        flat = [{k: v for k, v in e.items() if isinstance(v, (int, float, str)) or v is None} for e in entries]
        objects = pl.DataFrame(flat, infer_schema_length=None, strict=False)
    if objects.width > T.MAX_KEYS:
        raise T.ingest_error(f"{src.path}: record objects with {objects.width} keys (at most {T.MAX_KEYS})")
    objects = objects.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("line"))
    metrics = metrics_from_objects(objects, src.name, result)
    if metrics is not None:
        result.add("metrics", metrics)
    return result
