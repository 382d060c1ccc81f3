"""Non-finite values: NaN/Inf in loss, grad norm and friends, counted explicitly.

Sources of evidence (DETECTION-ANCHORS §2.1): non-finite metric values (polars' `max()`
skips NaN, so we test `is_finite()` row by row), `nan` events written by the parsers
(Megatron omits a NaN loss from its line), increments of Megatron's `nan_iters` counter,
and non-finite per-layer norms (which layer and rank went first), and a loss printed as exactly 0
where only a masked NaN can put it (`_masked_zero_rows`). An fp16 overflow
that the loss scaler caught and skipped (an `overflow` event at that step, finite loss)
is not an incident here: it is the loss-scale detector's business. Neither is a loss term that is
never finite, beside a total `loss` finite on its records (a per-domain metric of a domain with no
tokens: 0/0), nor a running best printed before its first evaluation (`best_loss=inf`).
"""

from __future__ import annotations

import polars as pl

from spikeforensics import schema
from spikeforensics.detect import robust, signals
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.rundata import RunData

# a perplexity printed by a training or evaluation record (`ppl`, `eval_ppl`, `lm_loss_ppl`, `perplexity`)
PERPLEXITY = schema.PERPLEXITY
# a running best a trainer prints beside its evaluation (simple-nmt `best_loss=inf best_ppl=inf`), initialised to inf
BEST = r"(?i)(?:^|_)best(?:_|$)"
# a held-out measure (`eval_loss`, `eval_ppl`, `val_ppl`): computed on data the update never sees
HELDOUT = r"^(?:eval|val|vali|valid|validation|test)_"
COLS = ["signal", "step", "attempt", "rank", "layer", "value", "pos"]


def _global_rows(frame: pl.DataFrame, signal: pl.Expr, value: pl.Expr | None = None) -> pl.DataFrame:
    """`frame` (step, attempt, rank, value) as outbreak rows (`COLS`) of `signal`, with no layer."""
    return frame.select(
        signal.alias("signal"),
        "step",
        "attempt",
        "rank",
        pl.lit(None, pl.String).alias("layer"),
        (pl.col("value") if value is None else value).alias("value"),
        robust.position(pl.col("attempt"), pl.col("step")).alias("pos"),
    )


def _metric_rows(run: RunData, params) -> pl.DataFrame:
    names = list(params.nonfinite.signals)
    loss_name = run.resolve("loss")  # a training loss logged under its own name (`decode.loss_seg`)
    # a perplexity is exp(cross-entropy): an infinite one means a loss past float range (88.7 in
    # float32), where a uniform guess over a 50k vocabulary scores 10.8: the model has diverged
    # (OpenNMT-tf `Evaluation result for step 435000: loss = 148890.7 ; perplexity = inf`)
    perplexity = pl.col("name").str.contains(PERPLEXITY)
    # a training loss term (`train_mel_loss_after`, `loss_cls`, `kl_loss`): a NaN in any term is a NaN loss, also
    # in a run that prints its terms and no total (TensorFlowTTS, detection heads)
    loss_term = pl.col("name").str.contains(schema.LOSS_TERM) & ~pl.col("name").str.contains(
        r"^(?:loss_scale|eval_|val_)"
    )
    m = (
        run.metrics.lazy()  # lazily: only the matching rows' columns are copied out of the long table
        .filter(
            (pl.col("name").is_in(names) | (pl.col("name") == loss_name) | perplexity | loss_term)
            # a running best (`best_loss=inf best_ppl=inf` before the first evaluation) is a tracker's start value
            & ~pl.col("name").str.contains(BEST)
            # eval records (record null) count for the eval metrics among them
            & (pl.col("record").is_not_null() | pl.col("name").str.starts_with("eval_"))
            & ~pl.col("value").is_finite().fill_null(True)
        )
        .with_columns(
            pl.col("step").fill_null(pl.col("record")),  # no step numbers in the log: record index
            pl.when(loss_term & ~perplexity)
            .then(pl.lit("loss"))
            .otherwise(pl.col("name").replace(loss_name, "loss"))
            .alias("name"),
            (loss_term & ~perplexity & (pl.col("name") != loss_name)).alias("_term"),
            pl.col("name").alias("_term_name"),
        )
        .filter(pl.col("step").is_not_null())  # an eval record of a log without steps cannot be placed
        .collect()
    )
    # a term that is never finite, printed beside a total `loss` that is finite on those records, never reached
    # the loss the optimizer stepped on: a metric of an empty subset (InternLM's `loss/cn=nan` for a data domain
    # with no tokens in the run: 0/0), not a NaN loss. A term finite before it went NaN (a GAN discriminator's
    # `l_d_real`) is a NaN loss, whatever the total does; so is any term of a run that prints no total (`resolve`
    # then stands one term for the loss: TensorFlowTTS)
    terms = m.filter(pl.col("_term").fill_null(False)).get_column("_term_name").unique()
    if terms.len():
        once_finite = (
            run.metrics.lazy()
            .filter(pl.col("name").is_in(terms.implode()) & pl.col("value").is_finite())
            .select("name")
            .unique()
            .collect()
            .get_column("name")
        )
        fine_total = (
            run.metrics.lazy()
            .filter((pl.col("name") == "loss") & pl.col("value").is_finite() & pl.col("record").is_not_null())
            .select("record", "attempt", "rank")
            .unique()
            .collect()
        )
        empty = m.filter(pl.col("_term").fill_null(False) & ~pl.col("_term_name").is_in(once_finite.implode()))
        empty = empty.join(fine_total, on=["record", "attempt", "rank"], how="semi", nulls_equal=True)
        m = m.join(
            empty.select("record", "attempt", "rank", "_term_name"),
            on=["record", "attempt", "rank", "_term_name"],
            how="anti",
            nulls_equal=True,
        )
    m = m.unique(["name", "step", "attempt", "rank"], keep="first", maintain_order=True)  # a total and its terms
    return _global_rows(m, pl.col("name"))


def _event_rows(run: RunData) -> pl.DataFrame:
    ev = run.events_of("nan").filter(pl.col("step").is_not_null())
    return _global_rows(ev, pl.lit("nan_event"), pl.lit(float("nan")))


def _counter_rows(run: RunData) -> pl.DataFrame:
    s = run.series("nan_iters")
    if s.height == 0:
        return pl.DataFrame(schema={c: t for c, t in _schema().items()})
    s = s.sort("rank", "t", nulls_last=True).with_columns(pl.col("value").diff().over("rank").alias("inc"))
    s = s.filter(pl.col("inc") > 0)
    return _global_rows(s, pl.lit("nan_iters"), pl.col("inc"))


def _layer_rows(run: RunData) -> pl.DataFrame:
    layers = signals.layer_frame(run)
    if layers.height == 0:
        return pl.DataFrame(schema=_schema())
    bad = layers.filter(
        ~pl.col("grad_norm").is_finite().fill_null(True) | ~pl.col("max_abs").is_finite().fill_null(True)
    )
    return bad.select(
        pl.lit("layer_grad_norm").alias("signal"),
        "step",
        "attempt",
        "rank",
        "layer",
        pl.col("grad_norm").alias("value"),
        "pos",
    )


def _schema() -> dict:
    return {
        "signal": pl.String,
        "step": pl.Int64,
        "attempt": pl.Int32,
        "rank": pl.Int32,
        "layer": pl.String,
        "value": pl.Float64,
        "pos": pl.Int64,
    }


def _masked_zero_rows(run: RunData, params) -> pl.DataFrame:
    """A loss printed as exactly 0 where it cannot be a real loss: beside a non-finite grad norm, or
    straight after a loss of at least `masked_zero_from` (no model falls from there to below the
    printed precision in one logging interval). The HF Trainer and many fp16 loops print a NaN
    loss masked as 0.0; the zeros that follow such a record in a row are the same outbreak."""
    loss = run.series("loss")
    if loss.height == 0 or loss.filter(pl.col("value") == 0).height == 0:
        return pl.DataFrame(schema=_schema())
    grad, _ = run.grad_norm_series()
    frame = loss.sort("t").join(grad.select("t", (~pl.col("value").is_finite()).alias("_gbad")), on="t", how="left")
    zero = pl.col("value") == 0
    prev = pl.col("value").shift(1)
    after = (zero.shift(1) & ~zero & pl.col("value").is_finite()).fill_null(False)
    near = (pl.col("value") > 0) & (pl.col("value") < params.nonfinite.masked_zero_from)
    returns, small = frame.select(after.sum().alias("returns"), near.sum().alias("small")).row(0)
    if returns >= params.nonfinite.real_zero_returns and small >= params.nonfinite.real_zero_returns:
        # zeros the loss keeps coming back from, in a loss that also takes small positive values, are values it
        # takes (a margin or pairwise ranking loss: RWKV's reward model prints 878 of them among 11,381 records),
        # not a masked NaN: only a non-finite grad norm beside one still marks it. (An LM loss that never goes
        # under `masked_zero_from` cannot reach 0: its zeros stay masked NaNs however often they come and go)
        prev = pl.lit(None, dtype=pl.Float64)
    seed = zero & (pl.col("_gbad").fill_null(False) | (prev >= params.nonfinite.masked_zero_from).fill_null(False))
    # a run of zeros continues the outbreak its first zero started
    run_id = (~zero).cum_sum()
    seeded = seed.cast(pl.Int32).cum_sum().over(run_id) > 0
    rows = frame.filter(zero & seeded).with_columns(robust.step_or_record())
    return _global_rows(rows, pl.lit("loss_masked_zero"))


def _handled_overflow_steps(run: RunData) -> pl.DataFrame:
    ov = run.events_of("overflow", "hysteresis").filter(pl.col("step").is_not_null())
    return ov.select(robust.position(pl.col("attempt"), pl.col("step")).alias("pos")).unique()


def detect(run: RunData, params) -> list[Finding]:
    np_ = params.nonfinite
    parts = [
        _metric_rows(run, params),
        _event_rows(run),
        _counter_rows(run),
        _layer_rows(run),
        _masked_zero_rows(run, params),
    ]
    rows = pl.concat([p.select([pl.col(c).cast(t) for c, t in _schema().items()]) for p in parts])
    if rows.height == 0:
        return []
    if np_.ignore_handled_overflow:
        handled = _handled_overflow_steps(run)
        if handled.height:
            loss_bad = rows.filter(pl.col("signal").is_in(["loss", "nan_event", "nan_iters"])).select("pos").unique()
            skip = handled.join(loss_bad, on="pos", how="anti")
            rows = rows.join(skip, on="pos", how="anti")
    if rows.height == 0:
        return []
    grad, _ = signals.raw(run, "grad_norm")
    loss, _ = signals.raw(run, "loss")
    groups = _outbreaks(rows, [s for s in (grad, loss) if s.height], np_.group_gap)
    findings = []
    skipped = _skipped_event_steps(run)
    for _, g in groups.group_by("group", maintain_order=True):
        findings.append(_skipped_only(_finding(g, grad, loss, run), g, skipped))
    return findings


def _skipped_event_steps(run: RunData) -> set:
    """Steps of `nan` events whose line says the update was skipped (a guard's `SKIPPED non-finite batch
    (..., norm nan) -- weights untouched`, ESPnet's `The grad norm is nan. Skipping updating the model.`)."""
    ev = run.events_of("nan").filter(pl.col("step").is_not_null())
    if ev.height == 0:
        return set()
    told = ev.filter(pl.col("detail").fill_null("").str.json_path_match("$.skipped") == "true")
    return set(told.get_column("step").to_list())


def _skipped_only(f: Finding, g: pl.DataFrame, skipped: set) -> Finding:
    """An outbreak seen only in lines saying the trainer skipped the update, with finite records after it:
    the weights were untouched, so it is a warning (the run went on), not a critical incident."""
    only_events = set(g.get_column("signal")) == {"nan_event"}
    if only_events and f.facts.get("recovery") == "fast" and set(g.get_column("step").to_list()) <= skipped:
        f.severity = "warning"
        f.summary += " (the trainer skipped the update and the run went on finite)"
    return f


def _outbreaks(rows: pl.DataFrame, series: list[pl.DataFrame], gap: int) -> pl.DataFrame:
    """Number the outbreaks of non-finite rows (`group`): a new one only when the rows are more than
    `gap` steps apart AND a finite loss or grad-norm record lies between them. A log that prints
    every 100 steps and goes NaN for good is one outbreak, not one per record. Without loss or
    grad-norm records the gap alone decides."""
    rows = rows.sort("pos")
    if not series:  # no loss or grad-norm records to tell (a layer dump or events only): the gap decides
        return robust.flag_groups(rows, gap)
    # the last finite record before each row: per series (its `pos` alone, taken before the filter, and sorted
    # only when it is not), then the latest of them; a union of the series' positions, de-duplicated and
    # sorted, would hold a hash set and a sorted copy of every record of both
    marked = rows.with_columns(pl.col("pos").shift(1).alias("_prev"))
    last = []
    for i, s in enumerate(series):
        finite = s.select("pos", "finite").filter(pl.col("finite")).select(pl.col("pos").alias("_key"))
        finite = finite.set_sorted("_key") if finite.get_column("_key").is_sorted() else finite.sort("_key")
        marked = marked.join_asof(
            finite.with_columns(pl.col("_key").alias(f"_fin{i}")),
            left_on="pos",
            right_on="_key",
            strategy="backward",
            allow_exact_matches=False,
        ).drop("_key")
        last.append(f"_fin{i}")
    apart = (pl.col("pos") - pl.col("_prev") > gap) & (pl.max_horizontal(last) > pl.col("_prev"))
    return marked.with_columns(apart.fill_null(False).cast(pl.Int64).cum_sum().alias("group")).drop("_prev", *last)


def _finding(g: pl.DataFrame, grad: pl.DataFrame, loss: pl.DataFrame, run: RunData) -> Finding:
    g = g.sort("pos")
    first = g.row(0, named=True)
    step_lo, step_hi = int(g.get_column("step").min()), int(g.get_column("step").max())
    evidence = []
    for (signal,), rows in g.group_by("signal", maintain_order=True):
        r = rows.row(0, named=True)
        evidence.append(
            Evidence(
                signal=signal,
                step=r["step"],
                value=r["value"],
                rank=r["rank"],
                layer=r["layer"],
                note=f"{rows.height} non-finite row(s) from step {r['step']} to {rows.get_column('step').max()}",
            )
        )
    # the last finite grad norm before the outbreak: astronomically large means clipping was not in effect
    if grad.height:
        # lazily: per outbreak only step and value of the matching rows are copied, not the whole series
        before = (
            grad.lazy()
            .filter((pl.col("pos") < first["pos"]) & pl.col("finite"))
            .select("step", "value")
            .tail(1)
            .collect()
        )
        if before.height:
            b = before.row(0, named=True)
            evidence.append(
                Evidence(
                    signal="grad_norm",
                    step=b["step"],
                    value=b["value"],
                    note="last finite grad norm before the first non-finite value",
                )
            )
    first_layers = g.filter(pl.col("layer").is_not_null())
    first_layers = (
        first_layers.filter(pl.col("step") == first_layers.get_column("step").min())
        if first_layers.height
        else first_layers
    )
    ranks = sorted(g.get_column("rank").drop_nulls().unique().to_list())
    first_rank = g.filter(pl.col("rank").is_not_null()).sort("pos").get_column("rank")
    layer_names = first_layers.get_column("layer").unique(maintain_order=True).to_list() if first_layers.height else []
    facts = {
        "onset_step": step_lo,
        "nonfinite_rows": g.height,
        "signals": sorted(set(g.get_column("signal"))),
        "recovery": _recovery(loss, int(g.get_column("pos").max())),
    }
    heldout_only = _heldout_only(g, loss, run)
    if heldout_only:
        facts["heldout_only"] = True
    if first_rank.len():
        facts["first_rank"] = int(first_rank[0])
        facts["ranks_flagged"] = ranks
    if layer_names:
        facts["layers"] = layer_names[:5]
    rank = int(first_rank[0]) if first_rank.len() else None
    summary = (
        f"non-finite {', '.join(facts['signals'])} from step {step_lo}"
        + (f" to {step_hi}" if step_hi != step_lo else "")
        + (f", first on rank {rank}" if rank is not None else "")
        + (f", first in layer {layer_names[0]}" if layer_names else "")
    )
    if heldout_only:
        summary += " while the training loss stays finite"
    return Finding(
        kind="nonfinite",
        step_start=step_lo,
        step_end=step_hi,
        peak_step=int(first["step"]),
        # a NaN only in the held-out measure left the weights finite: the evaluation is broken, not the training
        severity="warning" if heldout_only else "critical",
        score=float(g.height),
        summary=summary,
        rank=rank,
        layer=layer_names[0] if layer_names else None,
        attempt=int(first["attempt"] or 0),
        evidence=evidence,
        facts=facts,
    )


def _heldout_only(g: pl.DataFrame, loss: pl.DataFrame, run: RunData) -> bool:
    """Every non-finite value of the outbreak is a held-out measure, the training loss is finite on every record of
    the outbreak's span, and training went on finite from the first non-finite evaluation (a finite training loss
    on its line or after it, and no non-finite one later): the weights the evaluation ran were finite, so the NaN came from the evaluation (an
    empty split's mean, a NaN in its data, an fp16 forward without the scaler). A validation pass printed after the
    training stopped on a NaN cost (its own iteration counter overlapping the training's) is not this."""
    if loss.height == 0 or not g.get_column("signal").str.contains(HELDOUT).all():
        return False
    lo, hi = g.get_column("pos").min(), g.get_column("pos").max()
    span = loss.filter(pl.col("pos").is_between(lo, hi))
    if span.height == 0 or not span.get_column("finite").all():
        return False
    if loss.filter((pl.col("pos") > hi) & ~pl.col("finite")).height:
        return False  # the training loss goes non-finite later: the evaluation's NaN was an early sign of it
    source = loss.get_column("source")[0]
    first_bad_line = (
        run.metrics.lazy()
        .filter(
            pl.col("name").is_in(g.get_column("signal").unique().implode())
            & (pl.col("source") == source)
            & ~pl.col("value").is_finite().fill_null(True)
        )
        .select(pl.col("line").min())
        .collect()
        .item()
    )
    if first_bad_line is None:  # (no line to order by: a multi-line CSV cell) the span decides
        return True
    return bool(loss.filter(pl.col("finite") & (pl.col("line") >= first_bad_line)).height)


def _recovery(loss: pl.DataFrame, last_bad_pos: int) -> str | None:
    """'fast' when a finite loss follows the outbreak, 'never' when none does, None without a loss series."""
    if loss.height == 0:
        return None
    finite_after = loss.select(((pl.col("pos") > last_bad_pos) & pl.col("finite")).any()).item()
    return "fast" if finite_after else "never"
