"""Readers and judgements first needed on sample_logs/real/fresh19: a trainer's gradient-norm guard that skips
every step at an ordinary norm (minFM)."""

from __future__ import annotations

import json

from _ingest_helpers import real_case

from spikeforensics import api


def test_minfm_guard_skips_carry_their_norm_and_convict_a_tight_threshold(store):
    name = "minfm-4-dit-gradnorm-2-2-above-skip-threshold-every-step-skipped"
    _, events, _, facts = real_case(store, "fresh19", name)
    skips = events.filter(events["kind"] == "skipped_step").sort("step")
    assert skips.height == facts["overflow_count"] == 4
    assert skips["step"].to_list() == [1557, 1558, 1559, 1560]
    assert [round(float(json.loads(d)["value"]), 4) for d in skips["detail"]] == [2.1967, 2.1643, 2.1794, 2.1794]
    diagnosis = api.diagnose(api.load_run("r", store))
    assert diagnosis["verdict"]["status"] == "unstable"
    assert diagnosis["verdict"]["root_cause"] == facts["stated_label"] == "clip_misconfigured"


def test_siba_jittor_bracketed_pairs_read_total_as_the_loss(store):
    name = "jittor-siba-ir-visible-fusion-60-epochs-steplr-clip-healthy-19260-batches"
    metrics, _, f, facts = real_case(store, "fresh19", name)
    loss = metrics.filter(metrics["name"] == "loss").sort("line")
    assert f.format == "generic_steps" and loss.height == facts["step_records"] == 420
    assert loss["value"][0] == 0.349915
    first = metrics.filter(metrics["line"] == loss["line"][0])
    assert dict(zip(first["name"], first["value"]))["sobel"] == 0.258607


def test_total_is_the_loss_only_on_a_counted_line_naming_no_loss(tmp_path, store):
    from _ingest_helpers import ingest, write

    lines = [
        f"[Epoch 0/5] [batch {b}/100] [lr 0.001] [total {0.9 - b / 1000:.4f}] [joint 0.01]" for b in range(0, 100, 10)
    ]
    metrics, _, _ = ingest(store, write(tmp_path, "train.log", "\n".join(lines) + "\n"), run="t")
    assert metrics.filter(metrics["name"] == "loss").height == 10
    # a line that names its loss keeps `total` as another value, and an integer total is a count
    named = [f"step {s} loss: {2.0 - s / 100:.3f} total 0.{s + 10} total_samples 1200" for s in range(10)]
    metrics, _, _ = ingest(store, write(tmp_path, "named.log", "\n".join(named) + "\n"), run="u")
    loss = metrics.filter(metrics["name"] == "loss").sort("step")
    assert loss.height == 10 and loss["value"][0] == 2.0
