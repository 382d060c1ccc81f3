"""Sample ranking ties (issue 12): equal evidence is an explicit tie (a shared `place`), broken only by
further evidence, never by sample ID; the skip list never cuts a place apart."""

from __future__ import annotations

import polars as pl
from attribute_synth import incident, make_run, ranked

from spikeforensics.attribute.tracing import skip_candidates
from spikeforensics.rundata import RunData

IDS = ["zeta", "alpha", "omega", "beta", "kappa", "delta"]  # manifest order, not alphabetical


def peak_manifest(losses, tokens=None):
    """A run whose peak step 150 holds the six samples of IDS, in that order, with these per-sample losses
    (None: no per-sample losses) and token counts; the other steps are make_run's."""
    run = make_run(spike_at=150, micro=1, per_micro=6)
    b = run.batches
    peak = b.filter(pl.col("step") == 150).with_columns(
        pl.Series("sample_id", IDS),
        pl.Series("sample_loss", losses if losses is not None else [None] * 6, dtype=pl.Float64),
        pl.Series("tokens", tokens or [110] * 6, dtype=b.schema["tokens"]),
        pl.lit("web").alias("sample_source"),
    )
    b = pl.concat([b.filter(pl.col("step") != 150), peak]).sort("step", maintain_order=True)
    if losses is None:
        b = b.with_columns(pl.lit(None, pl.Float64).alias("sample_loss"))
    return RunData.from_frames("r", metrics=run.metrics, batches=b)


def test_samples_without_distinguishing_evidence_share_a_place_in_neither_id_nor_batch_order():
    out = ranked(peak_manifest(None), incident(150))
    top = out.filter(pl.col("step") == 150)
    assert top.get_column("place").to_list() == [1] * 6  # one tie, said so
    order = top.get_column("sample_id").to_list()
    assert sorted(order) == sorted(IDS) and order not in (sorted(IDS), IDS)  # not by ID, not by batch position
    assert (
        ranked(peak_manifest(None), incident(150)).filter(pl.col("step") == 150).get_column("sample_id").to_list()
        == order
    )
    assert out.filter(pl.col("step") == 149).get_column("place").min() == 7  # the step before ranks after the tie


def test_a_tie_is_broken_by_the_samples_own_loss_not_by_id():
    # every loss below the healthy per-sample level (~2.0): the loss terms of the score are all 0, so the
    # scores tie exactly; the higher per-sample loss is still evidence, and decides
    losses = [1.80, 1.95, 1.85, 1.90, 1.95, 1.70]
    out = ranked(peak_manifest(losses), incident(150)).filter(pl.col("step") == 150)
    assert out.get_column("score").n_unique() == 1
    assert out.get_column("sample_id").to_list() == ["alpha", "kappa", "beta", "omega", "zeta", "delta"]
    # equal losses stay tied (alpha and kappa share a place); the rest are ranked
    places = out.get_column("place").to_list()  # (samples of the step before may rank above them)
    assert [x - places[0] + 1 for x in places] == [1, 1, 3, 4, 5, 6]


def test_skip_list_never_cuts_a_place_apart():
    samples = pl.DataFrame(
        {"sample_id": list("abcdefg"), "score": [5.0, 4.8, 4.6, 4.4, 4.2, 4.0, 3.8], "place": [1, 2, 3, 4, 5, 5, 5]}
    )
    assert skip_candidates(samples, 0.75) == list("abcdefg")  # the 5th shares its place with two more
    distinct = samples.with_columns(pl.Series("place", [1, 2, 3, 4, 5, 6, 7]))
    assert skip_candidates(distinct, 0.75) == list("abcde")
