"""The run store's tables: column names and dtypes, in one place.

Every parser returns frames with (a subset of) these columns; `conform()` adds the
missing ones as nulls and casts to the canonical dtypes, so the store, the
detectors and `export` all see exactly one shape per table. CONTRACT.md lists the
columns that `export` must carry; extra columns here are ours.
"""

from __future__ import annotations

import re

import polars as pl

SCHEMA_VERSION = 1

# Metric names the contract fixes (other fields keep their own, normalised name).
CANONICAL_METRICS = (
    "loss",
    "grad_norm",
    "lr",
    "loss_scale",
    "grad_norm_clipped",
    "eval_loss",
    "epoch",
    "consumed_samples",
    "consumed_tokens",
    "step_time_ms",
    "tokens_per_s",
    "mfu",
    "skipped_iters",
    "nan_iters",
    "num_zeros",
)

EVENT_KINDS = (
    "overflow",
    "hysteresis",
    "nan",
    "checkpoint_save",
    "resume",
    "eval",
    "nccl_timeout",
    "xid",
    "ecc",
    "oom",
    "error",
    "skipped_step",
)

TIME = pl.Datetime("us")
# a metric name that is a loss or one of its terms (`loss`, `train_mel_loss_after`, `loss_cls`, `decode_loss_seg`)
LOSS_TERM = r"(?:^|_)loss(?:_|$)"
# a perplexity (`ppl`, `train_ppl`, `perplexity`): exp of the per-token cross-entropy
PERPLEXITY = r"(?i)(?:^|_)(?:ppl|perplexity)$"


def is_loss_name(name: str) -> bool:
    """A normalised metric name that is a loss or a loss term (`loss`, `l1_loss`, `loss_cls`, `trainloss`)."""
    return bool(re.search(LOSS_TERM, name)) or name.endswith("loss")


# an RL critic's loss (Spinning Up `LossQ` -> `loss_q`, SB3 `value_loss`, `critic_loss`, `qf1_loss`, baselines
# DDPG `train/loss_critic`): its TD targets
# are bootstrapped from the critic itself, near 0 at the start, and grow as the policy's returns grow, so its
# rise over the first records is no unstable start
VALUE_LOSS = (
    r"(?:^|_)(?:q\d?|qf\d?|v|vf|value|critic|td)_loss$|^loss_(?:q\d?|qf\d?|v|vf|value|critic|td)$|(?:^|_)loss_critic$"
)

TABLES: dict[str, dict[str, pl.DataType]] = {
    # One row per (record, metric). `record` is the 0-based index of the training-step
    # record in its source (null for eval/summary records); `attempt` goes up by one each
    # time the step counter goes back inside a source (a resume); `time` is the wall
    # clock printed with the record, when the format prints one.
    "metrics": {
        "source": pl.String,
        "line": pl.Int64,
        "step": pl.Int64,
        "record": pl.Int64,
        "attempt": pl.Int32,
        "rank": pl.Int32,
        "name": pl.String,
        "value": pl.Float64,
        "time": TIME,
    },
    # `detail` is a JSON object serialised as a string (exported as an object).
    "events": {
        "source": pl.String,
        "line": pl.Int64,
        "step": pl.Int64,
        "attempt": pl.Int32,
        "rank": pl.Int32,
        "kind": pl.String,
        "time": TIME,
        "detail": pl.String,
    },
    "layers": {
        "source": pl.String,
        "line": pl.Int64,
        "step": pl.Int64,
        "rank": pl.Int32,
        "layer": pl.String,
        "grad_norm": pl.Float64,
        "zero_frac": pl.Float64,
        "pos_frac": pl.Float64,
        "max_abs": pl.Float64,
        "numel": pl.Int64,
        "param_norm": pl.Float64,
        "update_norm": pl.Float64,
    },
    "batches": {
        "source": pl.String,
        "line": pl.Int64,
        "step": pl.Int64,
        "rank": pl.Int32,
        "micro": pl.Int32,
        "sample_id": pl.String,
        "sample_loss": pl.Float64,
        "tokens": pl.Int64,
        "sample_source": pl.String,
    },
    # Long form: one row per (time, host, gpu, field). `export` pivots it to one
    # column per field, as CONTRACT.md shows.
    "telemetry": {
        "source": pl.String,
        "line": pl.Int64,
        "time": TIME,
        "host": pl.String,
        "gpu": pl.Int32,
        "field": pl.String,
        "value": pl.Float64,
    },
    # One row per ingested file: the store's manifest (and its commit marker).
    "sources": {
        "source": pl.String,
        "path": pl.String,
        "sha256": pl.String,
        "bytes": pl.Int64,
        "lines": pl.Int64,
        "format": pl.String,
        "records": pl.Int64,
        "unparsed": pl.Int64,
        "unparsed_examples": pl.String,
        "tool_version": pl.String,
        "ingested_at": TIME,
    },
}

DATA_TABLES = ("metrics", "events", "layers", "batches", "telemetry")


def empty(table: str) -> pl.DataFrame:
    return pl.DataFrame(schema=TABLES[table])


def conform(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """Return `frame` with exactly the table's columns, in order, with its dtypes.

    Missing columns become nulls; extra columns are dropped; values are cast
    non-strictly (a parser that produced a string number still lands as a float).
    """
    schema = TABLES[table]
    exprs = []
    for name, dtype in schema.items():
        if name in frame.columns:
            col = pl.col(name)
            if frame.schema[name] != dtype:
                col = col.cast(dtype, strict=False)
            exprs.append(col.alias(name))
        else:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
    return frame.select(exprs)
