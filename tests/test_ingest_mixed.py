"""Parsing by line, not by file (`ingest/_mixing.py`): a text log that mixes grammars loses
none of their records, the format is found past a long non-log head, and `--format` turns
mixing off. The lines are real (tests/data/real excerpts, the repo's own source as the
"script printed at the top"); only their juxtaposition is made here, as a launcher that
cats a script and tees two programs' output into one file would."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from spikeforensics.ingest import detect_format, ingest_paths

REAL = Path(__file__).parent / "data" / "real"
DEEPSPEED = (REAL / "deepspeed" / "deepspeed_931_hysteresis_epoch_start.log").read_text()
DEEPSPEED_STEPS = (REAL / "deepspeed" / "deepspeed_1825_step_skipped_lines_ipython_noise.log").read_text()
NANOGPT = (REAL / "nanogpt" / "nanogpt_110_early_format_no_mfu.log").read_text()
SOURCE = (Path(__file__).parents[1] / "spikeforensics" / "ingest" / "base.py").read_text()


def _train(store, run):
    m = store.table(run, "metrics")
    return m.filter(pl.col("record").is_not_null())


def test_two_grammars_records_both_read(tmp_path, store):
    # DeepSpeed's own step lines and nanoGPT-style step lines in one stdout
    log = tmp_path / "mixed.log"
    log.write_text(DEEPSPEED_STEPS + NANOGPT)
    out = ingest_paths([log], "r", store).files[0]
    assert sorted(out.format.split("+")) == ["deepspeed", "nanogpt"]  # both grammars named, the primary first
    train = _train(store, "r")
    n_ds = DEEPSPEED_STEPS.count("] step=")
    n_nanogpt = sum(1 for line in NANOGPT.splitlines() if line.startswith("iter "))
    assert train.select("record").n_unique() == n_ds + n_nanogpt
    assert sorted(train.get_column("record").unique().to_list()) == list(range(n_ds + n_nanogpt))
    assert train.filter(pl.col("name") == "lr").height == n_ds  # DeepSpeed's lr=[5e-05]
    assert train.filter(pl.col("name") == "loss").height == n_nanogpt


def test_overflow_lines_and_another_grammars_records_both_read(tmp_path, store):
    # DeepSpeed's overflow lines and nanoGPT-style step lines in one stdout
    log = tmp_path / "mixed.log"
    log.write_text(DEEPSPEED + NANOGPT)
    ingest_paths([log], "r", store)
    train = _train(store, "r")
    n_nanogpt = sum(1 for line in NANOGPT.splitlines() if line.startswith("iter "))
    assert train.select("record").n_unique() == n_nanogpt
    events = store.table("r", "events")
    assert events.filter(pl.col("kind").is_in(["overflow", "hysteresis"])).height == 4
    # records are numbered 0.. in file order across grammars
    assert sorted(train.get_column("record").unique().to_list()) == list(range(n_nanogpt))


def test_format_found_past_a_long_script_head(tmp_path, store):
    log = tmp_path / "run.log"
    log.write_text(SOURCE * 3 + NANOGPT)  # > 64 KiB of Python before the first record
    assert len(SOURCE * 3) > 64 << 10
    name, score = detect_format(log)
    assert name == "nanogpt" and score >= 0.3
    ingest_paths([log], "r", store)
    losses = _train(store, "r").filter(pl.col("name") == "loss").sort("line")
    assert losses.get_column("step").to_list()[:3] == [1631, 1632, 1633]


def test_forced_format_does_not_mix(tmp_path, store):
    log = tmp_path / "mixed.log"
    log.write_text(DEEPSPEED + NANOGPT)
    report = ingest_paths([log], "r", store, fmt="deepspeed")
    assert report.files[0].format == "deepspeed"
    assert store.table("r", "metrics").filter(pl.col("record").is_not_null()).height == 0


def test_events_before_any_record_take_the_mixed_records_steps(tmp_path, store):
    # overflow lines after a nanoGPT record take the step after it (the step counter counts skipped steps)
    lines = NANOGPT.splitlines()
    first_iter = next(i for i, line in enumerate(lines) if line.startswith("iter "))
    log = tmp_path / "mixed.log"
    log.write_text(
        "\n".join(lines[: first_iter + 1])
        + "\n"
        + DEEPSPEED.splitlines()[2]
        + "\n"
        + "\n".join(lines[first_iter + 1 :])
        + "\n"
    )
    ingest_paths([log], "r", store)
    ev = store.table("r", "events").filter(pl.col("kind") == "overflow")
    assert ev.height == 1 and ev.item(0, "step") == 1632
