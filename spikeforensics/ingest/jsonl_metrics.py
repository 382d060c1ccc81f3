"""Generic JSON-lines metric logs: one JSON object per line.

Covers LLaMA-Factory `trainer_log.jsonl` (2023 schema with nulls and `learning_rate`,
current schema with `lr`), W&B `history` JSONL (`_step`, `train/global_step`,
`_timestamp`), fairseq `--log-format json` (every value a string, optionally behind a
logger prefix) and any `{"step": .., "loss": ..}` lines. Bare `NaN`/`Infinity`/`nan`
tokens are accepted anywhere.

Step: the first present of STEP_KEYS (a progress string `"N/M"` gives N). Restarts: LLaMA-Factory appends after a resume
and two concurrent writers may interleave (each a few logging intervals apart), so
a record counts as "going back" (a new attempt) only when its step is below both of
the two preceding records' steps; a step repeated within an attempt (the second
writer) is dropped, first value kept.

Streaming: `parse_chunks` reads the file in chunks of `CHUNK_BYTES` (cut at line ends),
so memory does not grow with the file; what a record's reading depends on is carried
from chunk to chunk (`_FileState`: the keys seen and their order, the record numbering,
the writers' last steps and attempts), so the rows are those of a whole-file read. One
difference: the step/time/rank keys are chosen from the keys seen up to the chunk (a
better step key first appearing in a later chunk applies from there on).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest import _tables as T
from spikeforensics.ingest.aliases import METRIC_ALIASES
from spikeforensics.ingest.base import (
    _META,
    ParseResult,
    RecordState,
    SniffSample,
    SourceFile,
    long_values,
    metrics_from_long,
    normalise_name,
)

NAME = "jsonl_metrics"

# Bytes of the file decoded at once. Decoding holds about 13x the text (lines, the JSON
# column, the decoded struct, the wide and long frames), more for records of many short keys
# (`{"step":1,"loss":2.0,"lr":0.001,...}`: 16 MiB chunks peaked at 820 MB on a 156 MB file, 4 MiB
# at 403 MB in the same 12.4 s): 4 MiB keeps a parse flat whatever the file's length.
CHUNK_BYTES = 4 << 20

# Normalised key names that carry the step, best first.
STEP_KEYS = (
    "train_global_step",
    "global_step",
    "current_steps",
    "step",
    "num_updates",
    "iteration",
    "iter",
    "trainer_global_step",
    "_step",
    # ms-swift's stdout dicts: `"global_step/max_steps": "8270/11043"` (a progress string, read as N)
    "global_step_max_steps",
    # StyleGAN2-ADA / StyleGAN3 `stats.jsonl`: one record per tick (`Progress/tick`, a {num, mean, std} summary)
    "progress_tick",
)
# RL loggers' grouped counters, by their names as written (OpenAI baselines' and Stable-Baselines3's
# `progress.csv` / `progress.json`, rllab, garage): one row per training iteration or epoch, the iteration's
# counter first (`total/epochs` of baselines DDPG, SB3's `time/iterations`), then the environment steps
# (SB3's `time/total_timesteps`, present in every row of on- and off-policy agents; baselines `total/steps`)
GROUPED_STEP_KEYS = ("total/epochs", "time/iterations", "time/total_timesteps", "total/steps", "total_timesteps")
# Records after a step back within which a lagging writer's steps pass the ones before it (not a resume)
RESUME_LOOKAHEAD = 4
# a JSON key with a string or number value: a stats object, not a Python dict or a config's brace
JSON_PAIR = r'"[\w/.-]+":\s*(?:"|-?\d)'
# Bookkeeping keys that are not metrics (progress, wall-clock strings).
IGNORE_KEYS = {
    "total_steps",
    "percentage",
    "elapsed_time",
    "remaining_time",
    "runtime",
    "timestamp",
    "time",
    "rank",
    "max_steps",
    "wandb",
    "update",
    "attempt",
}
TIME_KEYS = ("_timestamp", "timestamp")
RANK_KEYS = ("rank", "global_rank")
# a string key naming the record's phase (MACE's MetricsLogger `"mode": "opt"` / `"mode": "eval"`): an
# evaluation word there makes the record an eval record, whatever its metric names
MODE_KEYS = ("mode", "split", "phase", "stage")
EVAL_MODES = r"(?i)^(?:eval|evaluation|val|valid|validation|test|testing)$"


def _norm(col: str) -> str:
    # keep W&B's leading underscore visible: `_step` differs from `step`
    return ("_" if col.startswith("_") else "") + normalise_name(col)


def step_column(columns: list[str]) -> str | None:
    by_norm = {_norm(c): c for c in columns}
    found = next((by_norm[k] for k in STEP_KEYS if k in by_norm), None)
    if found is None:
        found = next((c for k in GROUPED_STEP_KEYS for c in columns if c.strip() == k), None)
    return found


def sniff(sample: SniffSample) -> float:
    cols = T.sample_columns(sample)
    if cols is None:
        # fairseq json behind a logger prefix: `... | INFO | train_inner | {"epoch": 1, ...}`, or a script's own
        # `print(json.dumps(stats))` among other output (`{"epoch": 0, "step": 5, "loss": 240.16, "time": 6}`)
        hits = sum(1 for ln in sample.lines if '{"' in ln and ln.rstrip().endswith("}") and re.search(JSON_PAIR, ln))
        return 0.5 if hits >= 3 else 0.0
    if T.file_kind(sample.path) != "jsonl":
        return 0.0
    from spikeforensics.ingest import batches, layers

    if layers.looks_like_layers(cols) or batches.looks_like_batches(cols) or layers.looks_like_global_grads(cols):
        return 0.0
    norm = {normalise_name(c) for c in cols}
    metrics = {METRIC_ALIASES.get(n) for n in norm} - {None}
    has_step = step_column(cols) is not None
    if has_step and metrics:
        return 0.85
    return 0.5 if metrics else (0.35 if has_step and len(cols) > 1 else 0.0)


@dataclass
class _Writers:
    """Per stream (prefix rank, -1 for none), what `dedupe_writers` carries to the next chunk."""

    last: dict[int, int] = field(default_factory=dict)  # last train step (after collapsing repeats)
    recent: dict[int, list[int]] = field(default_factory=dict)  # the last RESUME_LOOKAHEAD of them, oldest first
    before: dict[int, int] = field(default_factory=dict)  # the one before it
    attempt: dict[int, int] = field(default_factory=dict)
    # steps of the current attempt a later record may still repeat: no step of an attempt falls below
    # the lowest of its last RESUME_LOOKAHEAD steps (a step below it starts a new attempt), so only steps
    # at or above it are kept; a few, however long the file
    seen: dict[int, pl.Series] = field(default_factory=dict)
    last_attempt: int = 0  # attempt of the last kept train record, any stream (eval rows take it)


@dataclass
class _FileState:
    keys: dict[str, None] = field(default_factory=dict)  # every key seen so far, in first-seen order
    records: RecordState = field(default_factory=RecordState)
    writers: _Writers = field(default_factory=_Writers)
    hold: bool = False  # more chunks follow: leave the lines whose attempt they decide to the next one
    last_epoch: float | None = None  # a file without a step key: the last train record's epoch ...
    epoch_attempt: int = 0  # ... and the attempt it was in (see `_epoch_attempts`)
    held_from: int | None = None  # the first line left (set by `metrics_from_objects`)
    whole: bool = False  # this chunk is the whole file


# a file that is one JSON object holding W&B's bookkeeping keys is a run's `wandb-summary.json`: the final value of
# every metric (its `_step` the last one), a summary record, no training step (the history rows that carry the same
# keys come many to a file)
WANDB_SUMMARY_KEYS = ("_runtime", "_wandb.runtime", "_wandb_runtime")


def parse_chunks(src: SourceFile, chunk_bytes: int | None = None) -> Iterator[ParseResult]:
    """One ParseResult per chunk of the file, in file order (metrics with `rank` = prefix
    rank: the driver applies the one-rank rule after the last chunk). `chunk_bytes`
    defaults to `CHUNK_BYTES`."""
    state = _FileState()
    chunks = [src.lines()] if src.only_lines is not None else src.iter_line_chunks(chunk_bytes or CHUNK_BYTES)
    held = None  # the trailing lines of the chunk before, whose records' attempts the next lines decide
    for n, (lines, last) in enumerate(_with_last(chunks)):
        lines = lines if held is None else pl.concat([held, lines])
        objects, bad = T.json_objects(lines)
        objects = _without_state_summaries(T.flatten_structs(objects))
        result = ParseResult()
        state.hold, state.whole = not last, last and n == 0
        history = _columnar_history(objects) if state.whole else None
        if history is not None:  # one object of per-epoch lists: each row on the object's line
            line = objects.item(0, "line")
            metrics = metrics_from_objects(history, src.name, result, state)
            result.add("metrics", None if metrics is None else metrics.with_columns(pl.lit(line).alias("line")))
            yield result
            return
        result.add("metrics", metrics_from_objects(objects, src.name, result, state))
        cut, state.held_from = state.held_from, None
        held = lines.filter(pl.col("line") >= cut) if cut is not None else None
        T.unparsed(result, bad if cut is None else bad.filter(pl.col("line") < cut))
        yield result


def _without_state_summaries(objects: pl.DataFrame) -> pl.DataFrame:
    """Without the lines that hold a trainer state (a `log_history` list) among metric lines: ms-swift's
    `logging.jsonl` ends with `{"last_model_checkpoint": ..., "global_step": 438, "log_history": [...]}`, the
    records of the lines before it again, not one more record (and its `global_step` no step key of theirs)."""
    if "log_history" not in objects.columns or objects.get_column("log_history").null_count() == 0:
        return objects
    kept = objects.filter(pl.col("log_history").is_null())
    return kept.select([c for c in kept.columns if c == "line" or kept.get_column(c).null_count() < kept.height])


def _columnar_history(objects: pl.DataFrame) -> pl.DataFrame | None:
    """A file that is one JSON object of equal-length lists of numbers, one entry per epoch (Keras'
    `json.dump(history.history, f)`: `{"loss": [...], "val_loss": [...]}`; a reproduction's `result_stats.json`:
    `{"train_loss": [...], "validation_loss": [...]}`), a loss among them: one row per entry, `step` its index
    (0..: the epoch, as Keras numbers them), the other keys dropped. Lines are numbered 1.. here so that each row is
    a record; the caller puts them back on the object's line. None: not such a file."""
    if objects.height != 1:
        return None
    lists = [
        c
        for c, dtype in objects.schema.items()
        if c != "line" and isinstance(dtype, pl.List) and dtype.inner.is_numeric()
    ]
    if not any(schema.is_loss_name(_norm(c)) for c in lists):
        return None
    lengths = {objects.get_column(c).list.len().item() for c in lists}
    if len(lengths) != 1 or lengths.pop() < 2 or step_column(lists) is not None:
        return None
    rows = objects.select(lists).explode(lists)
    return rows.with_row_index("line", offset=1).with_columns(
        pl.col("line").cast(pl.Int64), (pl.col("line") - 1).cast(pl.Int64).alias("step")
    )


def _with_last(items):
    """(item, is_last) of an iterator."""
    it = iter(items)
    prev = next(it, _NONE)
    for item in it:
        yield prev, False
        prev = item
    if prev is not _NONE:
        yield prev, True


_NONE = object()


def _undecided_from(wide: pl.DataFrame) -> int | None:
    """The first line of the chunk whose record's attempt depends on lines of the next chunk: per stream,
    the oldest of its last `RESUME_LOOKAHEAD` train records (consecutive repeats collapsed, as
    `dedupe_writers` counts them) looks ahead past the chunk. Those lines are read with the next chunk,
    so a chunked read equals a whole-file one."""
    rows = wide.filter((pl.col("record_kind") == "train") & pl.col("step").is_not_null()).select(
        "line", "step", pl.col("prefix_rank").fill_null(-1).alias("_stream")
    )
    if rows.height == 0:
        return None
    new = (pl.col("step") != pl.col("step").shift(1).over("_stream")).fill_null(True)
    tails = rows.filter(new).group_by("_stream").agg(pl.col("line").tail(RESUME_LOOKAHEAD).min())
    return int(tails.get_column("line").min())


def parse(src: SourceFile, chunk_bytes: int | None = None) -> ParseResult:
    """The whole file at once: the chunks of `parse_chunks` concatenated (tests, notebooks;
    `ingest` streams them instead)."""
    return T.whole_file(parse_chunks(src, chunk_bytes))


def metrics_from_objects(
    objects: pl.DataFrame, source: str, result: ParseResult, state: _FileState | None = None
) -> pl.DataFrame | None:
    """Decoded JSON objects (line + one column per key) -> metrics rows. `state` carries
    what the next chunk of the same file needs (None: `objects` is the whole file, and
    `rank` follows the one-rank rule here)."""
    whole = state is None
    state = state if state is not None else _FileState()
    state.keys.update(dict.fromkeys(c for c in objects.columns if c != "line"))
    if objects.height == 0:
        return None
    present = set(objects.columns)
    cols = [c for c in state.keys if c in present]  # file order of first appearance
    seen = list(state.keys)
    step_col = step_column(seen)
    time_col = next((c for c in seen if c in TIME_KEYS), None)
    rank_col = next((c for c in seen if _norm(c) in RANK_KEYS), None)
    mode_col = next((c for c in cols if _norm(c) in MODE_KEYS and objects.get_column(c).dtype == pl.String), None)
    skip = {step_col, time_col, rank_col, mode_col}
    metric_cols = [
        c for c in cols if c not in skip and _norm(c).lstrip("_") not in IGNORE_KEYS and not c.startswith("_")
    ]
    step_col, time_col, rank_col = (c if c in present else None for c in (step_col, time_col, rank_col))
    if step_col and objects.get_column(step_col).dtype == pl.String:  # a progress string `N/M`: the step is N
        progress = pl.col(step_col).str.extract(r"^\s*(\d+)\s*/\s*\d+\s*$", 1)
        objects = objects.with_columns(pl.coalesce(progress, pl.col(step_col)).alias(step_col))
    out_of_range = None
    if step_col:  # a step no run reaches: that record is an unparsed line, the rest of the file stays
        oob = T.out_of_range(objects, step_col)
        bad = objects.filter(oob)
        if bad.height:
            out_of_range = bad.select(
                "line",
                pl.concat_str(pl.lit(f"{step_col} out of range: "), pl.col(step_col).cast(pl.String)).alias("text"),
            )
            objects = objects.filter(~oob)
    wide = objects.select(
        "line",
        (T.integer(objects, step_col) if step_col else pl.lit(None, dtype=pl.Int64)).alias("step"),
        (T.integer(objects, rank_col).cast(pl.Int32) if rank_col else pl.lit(None, dtype=pl.Int32)).alias(
            "prefix_rank"
        ),
        (
            pl.from_epoch((T.numeric(objects, time_col) * 1e6).cast(pl.Int64, strict=False), time_unit="us")
            if time_col
            else pl.lit(None, dtype=schema.TIME)
        ).alias("time"),
        *[T.numeric(objects, c).alias(c) for c in metric_cols],
        (pl.col(mode_col) if mode_col else pl.lit(None, dtype=pl.String)).alias("_mode"),
    )
    metric_cols = T.drop_empty_columns(wide, metric_cols)
    kind = T.classify_rows(wide, metric_cols)
    kind = pl.when(pl.col("_mode").str.contains(EVAL_MODES) & kind.is_not_null()).then(pl.lit("eval")).otherwise(kind)
    if state.whole and objects.height == 1 and any(k in objects.columns for k in WANDB_SUMMARY_KEYS):
        kind = pl.lit("summary")
    wide = wide.with_columns(kind.alias("record_kind")).filter(pl.col("record_kind").is_not_null()).drop("_mode")
    cut = _undecided_from(wide) if state.hold else None
    state.held_from = cut  # the lines from `cut` on go with the next chunk (see `parse_chunks`)
    if out_of_range is not None:
        T.unparsed(result, out_of_range if cut is None else out_of_range.filter(pl.col("line") < cut))
    if wide.filter(pl.col("line") < cut).height == 0 if cut is not None else wide.height == 0:
        return None
    wide, attempts = dedupe_writers(wide, state.writers, upto=cut)
    if step_col is None:
        attempts = _epoch_attempts(wide, metric_cols, attempts, state)
    meta = ["line", "step", "prefix_rank", "time"]
    wide, names = T.canonical_wide(wide, metric_cols, meta)
    names = [c for c in names if c in wide.columns]
    values = long_values(wide, names)
    records = wide.select([c for c in wide.columns if c in _META])
    metrics = metrics_from_long(records, values, source, state.records, multi_rank=None if whole else True)
    result.records += metrics.get_column("line").n_unique()
    return fix_attempts(metrics, attempts)


def dedupe_writers(
    wide: pl.DataFrame, carry: _Writers | None = None, upto: int | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Attempt numbers robust to interleaved writers, and repeated steps dropped.

    Returns the wide frame without the second writer's repeats, and (line, attempt)
    for every kept row (eval/summary rows take the attempt of the record before them).
    `carry` (updated in place) holds what the next chunk of the file needs. With `upto`, only
    the rows before that line are returned and carried: the later ones only serve as the
    look-ahead of those rows (they are read again with the next chunk).
    """
    carry = carry if carry is not None else _Writers()
    streams = list(carry.last)
    k = RESUME_LOOKAHEAD
    # `_c{j}`: the highest of the last j carried steps (the part of a record's look-back window that lies in
    # the chunk before: j = k - its position)
    carried = {
        f"_c{j}": [max(carry.recent.get(s, [])[-j:], default=None) for s in streams] for j in range(1, k + 1)
    } | {f"_m{j}": [min(carry.recent.get(s, [])[-j:], default=None) for s in streams] for j in range(1, k + 1)}
    seed = pl.DataFrame(
        {
            "_stream": streams,
            "_s1": [carry.last[s] for s in streams],
            "_s2": [carry.before.get(s) for s in streams],
            "_sa": [carry.attempt.get(s, 0) for s in streams],
            **carried,
        },
        schema={
            "_stream": pl.Int32,
            "_s1": pl.Int64,
            "_s2": pl.Int64,
            "_sa": pl.Int32,
            **{c: pl.Int64 for c in carried},
        },
    )
    train = (
        wide.filter((pl.col("record_kind") == "train") & pl.col("step").is_not_null())
        .with_columns(pl.col("prefix_rank").fill_null(-1).alias("_stream"))
        .join(seed, on="_stream", how="left", maintain_order="left")
    )
    pos = pl.int_range(pl.len()).over("_stream")
    # collapse consecutive repeats first (the duplicate-writer pattern)
    prev = pl.when(pos == 0).then(pl.col("_s1")).otherwise(pl.col("step").shift(1).over("_stream"))
    train = train.filter(prev.is_null() | (pl.col("step") != prev))
    p1 = pl.when(pos == 0).then(pl.col("_s1")).otherwise(pl.col("step").shift(1).over("_stream"))
    p2 = (
        pl.when(pos == 0)
        .then(pl.col("_s2"))
        .when(pos == 1)
        .then(pl.col("_s1"))
        .otherwise(pl.col("step").shift(2).over("_stream"))
    )
    back = (pl.col("step") < pl.min_horizontal(p1, p2.fill_null(p1))).fill_null(False)
    # a lagging writer catches up: within the next RESUME_LOOKAHEAD records the steps pass the highest of the
    # ones before the step back (a writer 2-3 intervals behind: 3810, 3820, 3800, 3810, 3830). A resume stays
    # below it for as long as it re-trains the steps it went back over (5240 -> 5010, 5020, 5030, ...)
    # (the look-back window: the k records before, those of the chunk before carried as `_c{j}` / `_m{j}`)
    before_max = pl.max_horizontal(
        pl.col("step").shift(1).rolling_max(k, min_samples=1).over("_stream"),
        *[pl.when(pos == i).then(pl.col(f"_c{k - i}")) for i in range(k)],
    )
    before_min = pl.min_horizontal(
        pl.col("step").shift(1).rolling_min(k, min_samples=1).over("_stream"),
        *[pl.when(pos == i).then(pl.col(f"_m{k - i}")) for i in range(k)],
    )
    ahead_max = pl.col("step").reverse().rolling_max(k, min_samples=1).reverse().shift(-1).over("_stream")
    # a lagging writer never falls below the lowest step of the window (its own last print is in it): a step
    # below that is a resume, whatever follows; within the window, one the next steps pass is the lagging writer
    catches_up = (pl.col("step") >= before_min).fill_null(False) & (ahead_max > before_max).fill_null(False)
    back = back & ~catches_up
    train = train.with_columns(
        (back.cum_sum().over("_stream") + pl.col("_sa").fill_null(0)).cast(pl.Int32).alias("attempt")
    )
    # a repeat is a step at or below an earlier one of its attempt: rank only when there is one
    earlier = pl.col("step").cum_max().shift(1).over("_stream", "attempt")
    if train.select((pl.col("step") <= earlier).any()).item():
        repeat = pl.col("line").rank("ordinal").over("_stream", "attempt", "step") > 1
    else:
        repeat = pl.lit(False)
    if carry.seen:  # a step of the carried attempt seen in an earlier chunk
        old = (
            pl.concat(
                [
                    s.to_frame("step").with_columns(pl.lit(k, dtype=pl.Int32).alias("_stream"))
                    for k, s in carry.seen.items()
                ]
            )
            .unique()
            .with_columns(pl.lit(True).alias("_old"))
        )
        train = train.join(old, on=["_stream", "step"], how="left", maintain_order="left")
        repeat = repeat | (pl.col("_old").fill_null(False) & (pl.col("attempt") == pl.col("_sa").fill_null(0)))
    train = train.with_columns(repeat.alias("_repeat"))
    if upto is not None:
        train, wide = train.filter(pl.col("line") < upto), wide.filter(pl.col("line") < upto)
    _carry_writers(carry, train)
    dropped = train.filter(pl.col("_repeat")).get_column("line")
    attempts = train.filter(~pl.col("_repeat")).select("line", "attempt")
    kept = wide.filter(~pl.col("line").is_in(dropped.implode())) if dropped.len() else wide
    all_attempts = (  # `wide` is in line order
        kept.select("line")
        .join(attempts, on="line", how="left", maintain_order="left")
        .with_columns(pl.col("attempt").forward_fill().fill_null(carry.last_attempt))
    )
    if attempts.height:
        carry.last_attempt = int(attempts.sort("line").get_column("attempt")[-1])
    return kept, all_attempts


def _carry_writers(carry: _Writers, train: pl.DataFrame) -> None:
    """Update `carry` with a chunk's collapsed train rows (`_stream`, `step`, `attempt`, `_sa`)."""
    if train.height == 0:
        return
    tails = train.group_by("_stream", maintain_order=True).agg(
        pl.col("step").tail(2).alias("steps"),
        pl.col("step").tail(RESUME_LOOKAHEAD).alias("steps_all"),
        pl.col("attempt").last().alias("attempt"),
        pl.col("_sa").first().fill_null(0).alias("was"),
    )
    for stream, steps, steps_all, attempt, was in tails.iter_rows():
        last = steps[-1]
        before = steps[-2] if len(steps) > 1 else carry.last.get(stream)
        recent = (carry.recent.get(stream, []) if attempt == was else []) + steps_all
        recent = recent[-RESUME_LOOKAHEAD:]
        floor = min(recent)  # a later step of this attempt is never below its last k steps (else a resume)
        now = train.filter((pl.col("_stream") == stream) & (pl.col("attempt") == attempt)).get_column("step")
        old = carry.seen.get(stream)
        if old is not None and attempt == was:
            now = pl.concat([old, now])
        carry.seen[stream] = now.filter(now >= floor).unique()
        carry.last[stream], carry.attempt[stream] = last, attempt
        carry.recent[stream] = (carry.recent.get(stream, []) + steps_all)[-RESUME_LOOKAHEAD:]  # any attempt
        if before is not None:
            carry.before[stream] = before


def _epoch_attempts(
    wide: pl.DataFrame, metric_cols: list[str], attempts: pl.DataFrame, state: _FileState
) -> pl.DataFrame:
    """A file with no step key whose train records carry an epoch (MACE's results file, appended to by every
    run of the same name): the epoch going back (49 -> 0) starts a new attempt, as a step counter going
    back does. `state` carries the last epoch and attempt across chunks."""
    epoch_col = next((c for c in metric_cols if _norm(c) == "epoch"), None)
    if epoch_col is None or attempts.height == 0:
        return attempts
    train = wide.filter((pl.col("record_kind") == "train") & pl.col(epoch_col).is_not_null()).select(
        "line", pl.col(epoch_col).cast(pl.Float64).alias("_e")
    )
    if train.height == 0:
        return attempts
    prev = pl.col("_e").shift(1).fill_null(state.last_epoch if state.last_epoch is not None else float("-inf"))
    train = train.with_columns(((pl.col("_e") < prev).cum_sum() + state.epoch_attempt).cast(pl.Int32).alias("attempt"))
    state.last_epoch = float(train.get_column("_e")[-1])
    state.epoch_attempt = int(train.get_column("attempt")[-1])
    return (
        attempts.select("line")
        .join(train.select("line", "attempt"), on="line", how="left", maintain_order="left")
        .with_columns(pl.col("attempt").forward_fill().fill_null(pl.lit(int(train.get_column("attempt")[0]))))
    )


def fix_attempts(metrics: pl.DataFrame, attempts: pl.DataFrame) -> pl.DataFrame:
    """Replace `records_to_metrics`' attempt (which counts every step decrease) by ours."""
    if metrics.height == 0:
        return metrics
    fixed = metrics.drop("attempt").join(attempts, on="line", how="left")
    return schema.conform("metrics", fixed).sort("line", "name")
