"""Sample tracing through batch manifests, and the consumed-samples fallback."""

from __future__ import annotations

import dataclasses
import math

import polars as pl
import pytest
from attribute_synth import bad_sample_id, incident, make_run, metric_rows, ranked

from spikeforensics.attribute.tracing import consumed_samples_range, implicated_steps, skip_candidates
from spikeforensics.params import Params
from spikeforensics.rundata import RunData


def test_implicated_steps_include_the_step_before():
    tp = Params().tracing
    assert implicated_steps(incident(150), tp) == [149, 150]
    assert implicated_steps(incident(150, start=146, end=160, facts={"onset": 148}), tp) == [147, 148, 149, 150]


def test_every_grouped_event_of_an_incident_is_implicated():
    # a small corroborated bump at 156 grouped with a louder spike at 219 into one incident
    tp = Params().tracing
    inc = incident(219, start=155, end=228)
    inc.findings.append(
        dataclasses.replace(inc.findings[0], step_start=156, step_end=156, peak_step=156, severity="warning")
    )
    inc.findings.append(
        dataclasses.replace(inc.findings[0], step_start=190, step_end=190, peak_step=190, severity="info")
    )
    steps = implicated_steps(inc, tp)
    assert 155 in steps and 156 in steps and 219 in steps and 218 in steps
    assert 190 not in steps and 157 not in steps  # an info note is not an event; nothing between is implicated
    run = make_run(n=300, manifest=True)
    out = ranked(run, inc)
    assert set(out.get_column("step")) == set(steps)
    # both events' own steps weigh as peaks
    top = out.group_by("step").agg(pl.col("score").max()).sort("step")
    s = dict(top.iter_rows())
    assert s[156] > s[155] and s[219] > s[218]


def test_high_loss_sample_ranks_first_across_ranks_and_micro_batches():
    run = make_run(spike_at=150, ranks=4, micro=4, per_micro=2, spike_rank=3, bad_sample_loss=30.0)
    bad = bad_sample_id(run, 150, rank=3)
    out = ranked(run, incident(150))
    assert out.get_column("sample_id")[0] == bad
    top = out.row(0, named=True)
    assert top["rank"] == 3 and top["micro"] == 3 and top["step"] == 150 and top["loss_ratio"] > 10
    # every sample of both implicated steps is listed: 2 steps x 4 ranks x 4 micro x 2
    assert out.height == 64 and set(out.get_column("step").unique()) == {149, 150}
    assert skip_candidates(out, 0.75) == [bad]


def test_nonfinite_sample_loss_is_prime_suspect():
    run = make_run(spike_at=150, bad_sample_loss=float("nan"))
    out = ranked(run, incident(150))
    top = out.row(0, named=True)
    assert math.isnan(top["sample_loss"]) and top["step"] == 150 and top["score"] > 5
    assert out.get_column("score")[1] < 3


def test_recurrence_and_exoneration_without_sample_losses():
    run = make_run(n=300, manifest=True)
    b = run.batches.with_columns(pl.lit(None, dtype=pl.Float64).alias("sample_loss"))
    # "evil" sits in the batches of steps 100 and 200 (two spikes); "seen" in 200 and two healthy steps
    b = b.with_columns(
        pl.when((pl.col("step").is_in([100, 200])) & (pl.col("rank") == 0) & (pl.col("micro") == 0))
        .then(pl.lit("evil"))
        .otherwise(pl.col("sample_id"))
        .alias("sample_id")
    )
    b = pl.concat(
        [
            b,
            pl.DataFrame(
                {
                    "step": [200, 20, 40],
                    "rank": [0, 0, 0],
                    "micro": [1, 1, 1],
                    "sample_id": ["seen"] * 3,
                    "tokens": [110] * 3,
                    "sample_source": ["web"] * 3,
                }
            ),
        ],
        how="diagonal_relaxed",
    )
    run = RunData.from_frames("r", metrics=run.metrics, batches=b)
    incs = [incident(100, iid="inc-1"), incident(200, iid="inc-2")]
    out = ranked(run, incs[1], incs)
    assert out.get_column("sample_id")[0] == "evil"
    row = out.filter(pl.col("sample_id") == "evil").row(0, named=True)
    assert row["recurrence"] == 1
    seen = out.filter(pl.col("sample_id") == "seen").row(0, named=True)
    assert seen["healthy_seen"] == 2 and seen["score"] < row["score"]
    assert out.get_column("sample_id")[-1] == "seen"  # exonerated: least suspicious


def test_confined_rank_boosts_its_samples():
    run = make_run(spike_at=150, ranks=2, micro=1, per_micro=2)
    b = run.batches.with_columns(pl.lit(None, dtype=pl.Float64).alias("sample_loss"))
    run = RunData.from_frames("r", metrics=run.metrics, batches=b)
    out = ranked(run, incident(150), confined=1)
    assert set(out.head(2).get_column("rank")) == {1} and set(out.head(2).get_column("step")) == {150}


def test_no_manifest_gives_consumed_samples_range():
    run = make_run(spike_at=150, manifest=False)
    cs = metric_rows("consumed_samples", range(1, 301), [64 * s for s in range(1, 301)])
    run = RunData.from_frames("r", metrics=pl.concat([run.metrics, cs], how="diagonal_relaxed"))
    assert ranked(run, incident(150)).height == 0
    rng = consumed_samples_range(run, incident(150), Params().tracing)
    assert rng["start"] == 64 * 148 and rng["end"] == 64 * 150 and rng["steps"] == [149, 150]


def test_logging_interval_implicates_every_step_since_the_previous_record():
    tp = Params().tracing
    assert implicated_steps(incident(150), tp, interval=10) == list(range(140, 151))
    run = make_run(spike_at=150, bad_sample_loss=30.0)
    bad_step = 144
    b = run.batches.with_columns(
        pl.when(pl.col("step") == 150)
        .then(2.0)
        .when((pl.col("step") == bad_step) & (pl.col("micro") == 0))
        .then(pl.lit(30.0))
        .otherwise(pl.col("sample_loss"))
        .alias("sample_loss")
    )
    logged = run.metrics.filter(pl.col("step") % 10 == 0)
    run = RunData.from_frames("r", metrics=logged, batches=b)
    out = ranked(run, incident(150))
    assert out.row(0, named=True)["step"] == bad_step


def test_sample_the_detector_corroborated_ranks_first_without_sample_losses():
    run = make_run(n=300, manifest=True)
    b = run.batches.with_columns(pl.lit(None, dtype=pl.Float64).alias("sample_loss"))
    run = RunData.from_frames("r", metrics=run.metrics, batches=b)
    plain = ranked(run, incident(150))
    # without per-sample losses the samples of the peak step differ only by length: take the least suspect
    peak = plain.filter(pl.col("step") == 150)
    named = peak.sort("score").get_column("sample_id")[0]
    assert plain.get_column("sample_id")[0] != named
    out = ranked(run, incident(150, facts={"corroborated_by": [named]}))
    assert out.get_column("sample_id")[0] == named
    before = peak.filter(pl.col("sample_id") == named).get_column("score")[0]
    assert out.get_column("score")[0] == pytest.approx(before + Params().tracing.w_corroborated)


def test_a_step_whose_every_sample_is_bad_outranks_the_step_before():
    # every sample of the peak step has ~5x the healthy per-sample loss (a whole batch of junk): the step's
    # own low quantile is junk too, so against it they look ordinary; against healthy data they do not
    run = make_run(spike_at=150, micro=2, per_micro=3)
    b = run.batches.with_columns(
        pl.when(pl.col("step") == 150)
        .then(pl.col("sample_loss") * 5)
        .otherwise(pl.col("sample_loss"))
        .alias("sample_loss"),
    ).with_columns(  # and the step before is a little noisy, so its samples stand out within their own step
        pl.when((pl.col("step") == 149) & (pl.col("micro") == 0))
        .then(pl.col("sample_loss") * 1.6)
        .otherwise(pl.col("sample_loss"))
        .alias("sample_loss")
    )
    run = RunData.from_frames("r", metrics=run.metrics, batches=b)
    out = ranked(run, incident(150))
    top6 = out.head(6)
    assert set(top6.get_column("step")) == {150}, top6
    assert (top6.get_column("loss_ratio") < 1.5).all()  # within its step nothing stands out


def test_skip_list_keeps_a_whole_tie_group():
    tie = pl.DataFrame({"sample_id": [f"s{i}" for i in range(8)] + ["x", "y"], "score": [3.0] * 8 + [1.0, 0.5]})
    assert skip_candidates(tie, 0.75) == [f"s{i}" for i in range(8)]  # 8 tied: none cut off at 5
    ranked_ = pl.DataFrame({"sample_id": list("abcdefg"), "score": [5.0, 4.9, 4.8, 4.7, 4.6, 4.5, 4.4]})
    assert skip_candidates(ranked_, 0.75) == list("abcde")  # distinct scores: at most 5


def _empty_document_run(kind_tokens=0):
    """16 samples per step (2 micro-batches of 8), no per-sample losses, one document of step 150 with
    `kind_tokens` target tokens."""
    run = make_run(spike_at=150, micro=2, per_micro=8)
    b = run.batches.with_columns(pl.lit(None, dtype=pl.Float64).alias("sample_loss"))
    empty = b.filter(pl.col("step") == 150).get_column("sample_id")[5]
    b = b.with_columns(
        pl.when(pl.col("sample_id") == empty).then(kind_tokens).otherwise(pl.col("tokens")).alias("tokens")
    )
    return RunData.from_frames("r", metrics=run.metrics, batches=b), empty


def test_empty_document_is_the_prime_suspect_of_a_nan_without_sample_losses():
    run, empty = _empty_document_run()
    out = ranked(run, incident(150, kind="nonfinite"))
    scores = out.get_column("score")
    assert out.get_column("sample_id")[0] == empty
    # a finite score, well clear of the rest (the tie note and the skip list depend on that)
    assert math.isfinite(scores[0]) and scores[0] - scores[1] > 4
    assert skip_candidates(out, 0.75) == [empty]


def test_empty_document_in_a_plain_spike_is_only_a_length_outlier():
    run, empty = _empty_document_run()
    nan_score = ranked(run, incident(150, kind="nonfinite")).get_column("score")[0]
    out = ranked(run, incident(150))
    top = out.row(0, named=True)
    # still first (its length is extreme), but without the 0/0 evidence and with the length term capped
    assert top["sample_id"] == empty and math.isfinite(top["score"])
    p = Params().tracing
    assert nan_score - top["score"] == pytest.approx(p.w_empty_nonfinite)
    assert top["score"] - out.get_column("score")[1] <= p.w_length * p.length_cap_log2 + 0.1


def test_short_but_not_empty_document_gets_no_nan_bonus():
    run, short = _empty_document_run(kind_tokens=30)
    nan_out = ranked(run, incident(150, kind="nonfinite"))
    spike_out = ranked(run, incident(150))
    assert nan_out.get_column("sample_id")[0] == short
    assert nan_out.get_column("score")[0] == pytest.approx(spike_out.get_column("score")[0])


def _bad_batches_run(bad: dict[int, float], victims: dict[int, float] | None = None):
    """Per-sample losses; `bad`: step -> loss of the first 6 of its 8 samples (corrupted documents);
    `victims`: step -> factor on every sample's loss (weights damaged by the spike)."""
    run = make_run(spike_at=150, micro=2, per_micro=4)
    b = run.batches
    first6 = pl.int_range(pl.len()).over("step") < 6
    for step, loss in bad.items():
        b = b.with_columns(
            pl.when((pl.col("step") == step) & first6)
            .then(pl.lit(loss))
            .otherwise(pl.col("sample_loss"))
            .alias("sample_loss")
        )
    for step, factor in (victims or {}).items():
        b = b.with_columns(
            pl.when(pl.col("step") == step)
            .then(pl.col("sample_loss") * factor)
            .otherwise(pl.col("sample_loss"))
            .alias("sample_loss")
        )
    culprits = (
        set(b.filter(pl.col("step").is_in(list(bad)) & first6.over("step")).get_column("sample_id")) if bad else set()
    )
    return RunData.from_frames("r", metrics=run.metrics, batches=b), culprits


def test_a_run_of_bad_batches_after_the_peak_is_traced_sample_by_sample():
    # corrupted documents in 150 (the peak), 151 and 152; the incident spans 150-153
    run, culprits = _bad_batches_run({150: 9.0, 151: 8.0, 152: 7.0})
    out = ranked(run, incident(150, start=150, end=153))
    own = out.filter(pl.col("own_outlier"))
    assert set(own.get_column("sample_id")) == culprits and own.height == 18
    # the later steps enter only through those samples: no other sample of 151-153 is listed
    assert out.filter(pl.col("step") > 150).height == 12
    # all 18 go to the skip list, past its limit of 5 for samples ranked on the score alone
    p = Params().tracing
    assert set(skip_candidates(out, p.skip_score_frac, tie_tol=p.tie_tol, max_outliers=p.skip_max_outliers)) == culprits
    assert len(skip_candidates(out, p.skip_score_frac, tie_tol=p.tie_tol)) < 18


def test_victims_after_the_peak_are_not_outliers():
    # one bad step; after it every sample's loss is 3x (damaged weights), or NaN (weights gone)
    run, culprits = _bad_batches_run({150: 9.0}, victims={151: 3.0, 152: float("nan")})
    out = ranked(run, incident(150, start=150, end=153))
    assert set(out.filter(pl.col("own_outlier")).get_column("sample_id")) == culprits
    assert out.filter(pl.col("step") > 150).height == 0


def test_a_step_of_nothing_but_junk_is_all_outliers_at_the_peak():
    run = make_run(spike_at=150, micro=2, per_micro=4)
    b = run.batches.with_columns(
        pl.when(pl.col("step") == 150).then(9.0).otherwise(pl.col("sample_loss")).alias("sample_loss")
    )
    run = RunData.from_frames("r", metrics=run.metrics, batches=b)
    out = ranked(run, incident(150))
    # its own 10th percentile is junk too (loss ratio ~1), but each sample is 4.5x the healthy level
    assert out.filter(pl.col("step") == 150).get_column("own_outlier").all()
    assert not out.filter(pl.col("step") == 149).get_column("own_outlier").any()


def test_the_outlier_bar_rises_with_the_healthy_tail():
    # a source whose healthy samples sit at 2.6x the step median: at 2.6x a sample is not an outlier
    run = make_run(spike_at=150, micro=2, per_micro=4)
    tail = pl.int_range(pl.len()).over("step") == 0
    b = run.batches.with_columns(
        pl.when(tail).then(pl.col("sample_loss") * 2.6).otherwise(pl.col("sample_loss")).alias("sample_loss")
    )
    run = RunData.from_frames("r", metrics=run.metrics, batches=b)
    out = ranked(run, incident(150))
    assert not out.get_column("own_outlier").any()


def test_implicated_steps_of_a_coarse_log_are_bounded_nearest_the_peak():
    """A log printing every 20,105 steps (a repeated PyMARL `cout.txt`, fuzz seed 20's input 397: 1,274 incidents
    held 49M implicated steps and diagnose passed 2 GB): at most `max_implicated_steps`, the ones nearest the
    peak, the peak among them; every grouped event's window is cut the same way."""
    tp = Params().tracing
    inc = incident(500_000, start=480_000, end=500_000)
    for peak in (300_000, 400_000):
        inc.findings.append(
            dataclasses.replace(inc.findings[0], step_start=peak, step_end=peak, peak_step=peak, severity="warning")
        )
    steps = implicated_steps(inc, tp, interval=20_105)
    assert len(steps) == tp.max_implicated_steps == 1024
    assert steps == list(range(500_000 - 1023, 500_001))
    small = dataclasses.replace(tp, max_implicated_steps=4)
    assert implicated_steps(incident(150), small, interval=10) == [147, 148, 149, 150]
