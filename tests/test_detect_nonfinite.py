"""Non-finite detector: NaN/Inf counted row by row, handled fp16 overflows left to the loss scale."""

import json

import numpy as np
import polars as pl
import pytest
from _detect_synth import curves, layer_dump, run_from
from conftest import REAL  # noqa: E402

from spikeforensics.detect import nonfinite
from spikeforensics.params import Params
from spikeforensics.rundata import RunData


def events(rows):
    return pl.DataFrame(
        [{"source": "train.log", "line": 1, "attempt": 0, "rank": None, "time": None, **r} for r in rows]
    )


def test_quiet_on_clean():
    assert nonfinite.detect(run_from(curves(2000, seed=1)), Params()) == []


def test_nan_loss_until_the_end_is_one_critical_never_recovered_outbreak():
    c = curves(2000, seed=2)
    c["grad_norm"][1499] = 1e5
    c["loss"][1500:] = np.nan
    c["grad_norm"][1500:] = np.inf
    [f] = nonfinite.detect(run_from(c), Params())
    assert f.severity == "critical" and f.step_start == 1501 and f.step_end == 2000 and f.peak_step == 1501
    assert f.facts["recovery"] == "never"
    last = [e for e in f.evidence if e.note.startswith("last finite")]
    assert last and last[0].value == pytest.approx(1e5)  # the huge norm before NaN: clipping not in effect


def test_isolated_nan_recovers_and_separate_outbreaks_are_separate():
    c = curves(2000, seed=3)
    c["loss"][300] = np.nan
    c["loss"][1200] = np.nan
    found = nonfinite.detect(run_from(c), Params())
    assert [(f.step_start, f.facts["recovery"]) for f in found] == [(301, "fast"), (1201, "fast")]


def test_a_sparse_log_that_stays_non_finite_is_one_outbreak():
    # a record every 100 steps: NaN at 300-500, finite at 600-1100, NaN again from 1200 to the end
    steps = list(range(100, 1700, 100))
    loss = [2.0 if s < 300 or 600 <= s < 1200 else float("nan") for s in steps]
    found = nonfinite.detect(run_from({"step": steps, "loss": loss}), Params())
    assert [(f.step_start, f.step_end, f.facts["recovery"]) for f in found] == [
        (300, 500, "fast"),
        (1200, 1600, "never"),
    ]


def test_handled_overflow_step_is_not_an_incident_but_a_nan_loss_there_is():
    c = curves(500, seed=4)
    c["grad_norm"][200] = np.inf  # step 201: overflow caught by the scaler
    ev = events([{"step": 201, "kind": "overflow", "detail": json.dumps({"old_scale": 65536, "new_scale": 32768})}])
    assert nonfinite.detect(run_from(c, events=ev), Params()) == []
    c["loss"][200] = np.nan
    assert len(nonfinite.detect(run_from(c, events=ev), Params())) == 1


def test_nan_event_and_counter_increments_count_even_when_the_value_row_is_missing():
    # Megatron omits a NaN loss from its line: the parser writes a `nan` event; nan_iters goes up
    c = curves(400, seed=5)
    c["nan_iters"] = np.where(c["step"] >= 250, 1.0, 0.0)
    ev = events([{"step": 250, "kind": "nan", "detail": "{}"}])
    [f] = nonfinite.detect(run_from(c, events=ev), Params())
    assert f.step_start == 250 and set(f.facts["signals"]) == {"nan_event", "nan_iters"}


def test_first_nonfinite_layer_and_rank_are_named():
    c = curves(300, seed=6)
    steps = c["step"]
    lay = pl.concat([layer_dump(steps, ["h.0.attn", "h.3.mlp"], seed=r, rank=r) for r in range(2)])
    lay = lay.with_columns(
        pl.when((pl.col("step") >= 120) & (pl.col("layer") == "h.3.mlp") & (pl.col("rank") == 1))
        .then(float("nan"))
        .otherwise(pl.col("grad_norm"))
        .alias("grad_norm")
    )
    [f] = nonfinite.detect(run_from(c, layers=lay), Params())
    assert f.layer == "h.3.mlp" and f.rank == 1 and f.step_start == 120


@pytest.mark.parametrize(
    "fmt,path,start",
    [
        ("nanogpt", "nanogpt/nanogpt_215_fp16_nan_after_checkpoint_md_quoted.log", 3010),
        ("mmengine", "mmengine/xtuner_187_gradnorm_nan.log", 240),
    ],
)
def test_real_excerpts(fmt, path, start):
    from spikeforensics.ingest import parse_file

    try:
        result = parse_file(REAL / path, fmt)
    except Exception as exc:  # the parser belongs to another helper
        pytest.skip(f"{fmt} parser unavailable: {exc}")
    run = RunData.from_frames(**{k: v for k, v in result.tables.items() if k in ("metrics", "events", "layers")})
    found = nonfinite.detect(run, Params())
    assert found and found[0].step_start == start and found[0].severity == "critical"


def _with_eval_rows(run, rows):
    """`run` plus eval rows (record null) of (name, step, value)."""
    extra = pl.DataFrame(
        {
            "source": "train.log",
            "line": [10**6 + i for i in range(len(rows))],
            "step": [s for _, s, _ in rows],
            "record": [None] * len(rows),
            "attempt": 0,
            "rank": None,
            "name": [n for n, _, _ in rows],
            "value": [float(v) for _, _, v in rows],
            "time": None,
        },
        schema=run.metrics.schema,
    )
    return RunData.from_frames(metrics=pl.concat([run.metrics, extra]), events=run.events)


def test_an_infinite_perplexity_or_a_nan_eval_loss_is_non_finite():
    run = run_from(curves(2000, seed=5))
    # OpenNMT-tf's `loss = 148890.7 ; perplexity = inf`: exp(loss) past float range, a diverged model
    [f] = nonfinite.detect(
        _with_eval_rows(run, [("eval_loss", 1000, 148890.7), ("eval_perplexity", 1000, np.inf)]), Params()
    )
    assert f.kind == "nonfinite" and f.peak_step == 1000 and f.evidence[0].signal == "eval_perplexity"
    [f] = nonfinite.detect(_with_eval_rows(run, [("eval_loss", 1500, np.nan)]), Params())
    assert f.peak_step == 1500
    # a finite perplexity is no finding; an eval row with no step (a log without steps) is not placed
    assert (
        nonfinite.detect(_with_eval_rows(run, [("eval_ppl", 1000, 3.2), ("eval_loss", None, np.nan)]), Params()) == []
    )


def _eval_rows_at_lines(run, rows):
    """`run` plus eval rows (record null) of (name, step, value, line)."""
    extra = _with_eval_rows(run, [(n, s, v) for n, s, v, _ in rows]).metrics.tail(len(rows))
    extra = extra.with_columns(pl.Series("line", [ln for *_, ln in rows], dtype=pl.Int64))
    return RunData.from_frames(metrics=pl.concat([run.metrics, extra]), events=run.events)


def test_a_held_out_nan_while_training_goes_on_finite_is_a_warning_of_the_evaluation():
    """A held-out loss NaN at evaluations printed among the training records (the Time-Series-Library family's
    `Vali Loss: nan` from an empty split), the training loss finite on and after them: the weights were finite, so
    the evaluation is broken, not the training: a warning with fact `heldout_only`. The same NaN printed after the
    last training record (a validation pass after training stopped on a NaN cost) stays a critical NaN."""
    run = run_from(curves(2000, seed=5))
    rows = [("eval_loss", s, np.nan, s) for s in (500, 1000, 1500)]
    found = nonfinite.detect(_eval_rows_at_lines(run, rows), Params())  # one outbreak per evaluation
    assert [f.step_start for f in found] == [500, 1000, 1500]
    assert all(f.severity == "warning" and f.facts["heldout_only"] is True for f in found)
    assert "training loss stays finite" in found[0].summary
    after = [("eval_loss", s, np.nan, 10**6 + i) for i, s in enumerate((500, 1000, 1500))]
    found = nonfinite.detect(_eval_rows_at_lines(run, after), Params())
    assert len(found) == 3 and all(f.severity == "critical" and "heldout_only" not in f.facts for f in found)
    # a training loss that goes NaN beside the held-out one is a NaN of the training
    c = curves(2000, seed=5)
    c["loss"][1400:] = np.nan
    # (and a held-out NaN before a training loss that goes non-finite later is an early sign of it)
    found = nonfinite.detect(_eval_rows_at_lines(run_from(c), rows), Params())
    assert [f.step_start for f in found] == [500, 1000, 1401]
    assert all(f.severity == "critical" and "heldout_only" not in f.facts for f in found)
