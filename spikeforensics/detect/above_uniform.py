"""A language model's training perplexity above any vocabulary's uniform guess: a divergence the log shows from
its first records, where no band exists to leave.

An untrained language model guessing uniformly over a vocabulary of V tokens scores a perplexity of V (cross-entropy
ln V): 50k for GPT-2 (10.8 nats), 128k for Llama 3 (11.8), 256k for Gemma (12.5). A training perplexity above
`uniform_ceiling` (1e6, 13.8 nats), larger than any real vocabulary, is a model worse than guessing: its output
logits blew up (tensorflow/nmt with a GRU and SGD at lr 1: perplexity 2.4e9 at step 100, 1.2e17 at step 1000; the
PyTorch word-LM example's RNN_TANH at its default lr 20: 5.1e7 for five epochs over a 33k-word vocabulary). The
divergence detector judges the loss against its own earlier band, which such a log never had.

Read from the training perplexity the log prints (`ppl`, `perplexity`: not an eval one), which names the loss a
per-token cross-entropy whatever the loss's base (fairseq prints its loss in bits); fires when at least
`uniform_share` of an attempt's records, and at least `uniform_min_records` of them, stand above the ceiling, from the first
of them that does. A perplexity above it on a few first records only, then below, is an untrained start, not this.
"""

from __future__ import annotations

import math

import polars as pl

from spikeforensics import schema
from spikeforensics.detect import nonfinite
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData


def _training_perplexity(run: RunData) -> pl.DataFrame:
    """(attempt, step, value) of the training perplexity with the most records, in record order."""
    found = (
        run.metrics.lazy()
        .filter(
            pl.col("record").is_not_null()
            & pl.col("name").str.contains(schema.PERPLEXITY)
            & ~pl.col("name").str.contains(nonfinite.HELDOUT)
        )
        .group_by("name")
        .agg(pl.len())
        .sort(["len", "name"], descending=[True, False])
        .collect()
    )
    if found.height == 0:
        return pl.DataFrame(schema={"attempt": pl.Int32, "step": pl.Int64, "value": pl.Float64})
    name = found.get_column("name")[0]
    source = run.primary_source(name)
    rows = (
        run.metrics.lazy()
        .filter((pl.col("name") == name) & (pl.col("source") == source) & pl.col("record").is_not_null())
        .filter(pl.col("rank").is_null() | (pl.col("rank") == pl.col("rank").min()))
        .sort("attempt", "record")
        .select(pl.col("attempt").fill_null(0), "step", "value")
        .collect()
    )
    return rows.filter(pl.col("step").is_not_null())


def detect(run: RunData, params) -> list[Finding]:
    dp = params.divergence
    ppl = _training_perplexity(run)
    out = []
    for (attempt,), part in ppl.group_by("attempt", maintain_order=True):
        # (a NaN perplexity is the non-finite detector's; an infinite one, a loss past float range, is above)
        above = part.with_columns(((pl.col("value") > dp.uniform_ceiling) & ~pl.col("value").is_nan()).alias("_above"))
        share = float(above.get_column("_above").mean())
        if int(above.get_column("_above").sum()) < dp.uniform_min_records or share < dp.uniform_share:
            continue
        first = above.filter(pl.col("_above")).row(0, named=True)
        peak = above.filter(pl.col("value").is_finite()).sort("value", descending=True)
        peak = peak.row(0, named=True) if peak.height else first
        out.append(_finding(above, first, peak, int(attempt), share, dp))
    return out


def _finding(part: pl.DataFrame, first: dict, peak: dict, attempt: int, share: float, dp) -> Finding:
    n_above = int(part.get_column("_above").sum())
    # back under the ceiling at the end (the word-LM example after its LR was cut from 20 to 5): it recovered, late
    back = part.filter(~pl.col("_above") & (pl.col("step") > first["step"]))
    ended_above = bool(part.get_column("_above")[-1])
    nats = math.log(peak["value"]) if peak["value"] and peak["value"] > 0 else float("inf")
    return Finding(
        kind="divergence",
        step_start=int(first["step"]),
        step_end=int(part.get_column("step").max()),
        peak_step=int(peak["step"]),
        severity="critical",
        score=round(nats, 3),
        summary=(
            f"training perplexity above {dp.uniform_ceiling:.0e} (worse than a uniform guess over any vocabulary) "
            f"on {n_above} of {part.height} records from step {first['step']}, peak {peak['value']:.3g} at step "
            f"{peak['step']}: the model's outputs blew up"
            + ("" if ended_above else f" (back under it from step {back.get_column('step')[0]})")
        ),
        attempt=attempt,
        evidence=[
            _evidence(first, dp, "first training perplexity above the uniform guess over a 1M-token vocabulary"),
            _evidence(peak, dp, f"peak ({nats:.1f} nats per token); {share:.0%} of the records above the ceiling"),
        ],
        facts={
            "onset_step": int(first["step"]),
            "onset": int(first["step"]),
            "recovery": "never" if ended_above else "slow",
            "divergence": True,
            "above_uniform": True,
            "ends_nonfinite": False,
        },
    )


def _evidence(row: dict, dp, note: str) -> Evidence:
    """A perplexity record as evidence, against the ceiling."""
    value = float(row["value"])
    return Evidence(
        signal="perplexity",
        step=int(row["step"]),
        value=value,
        baseline=dp.uniform_ceiling,
        ratio=round(value / dp.uniform_ceiling, 4),
        note=note,
    )
