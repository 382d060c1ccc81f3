"""Runs appended to one log are judged run by run (`RunData.fresh_starts`, `detect/runs_in_log.py`), and an RL
critic's loss has no unstable start (`schema.VALUE_LOSS`). Shapes from sample_logs/real/fresh7: a loguru log
holding two launches of the same script (gpt-from-zero), MACE's results file with three, Spinning Up's TD3."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from spikeforensics import frames
from spikeforensics.detect import detect_incidents
from spikeforensics.params import Params
from spikeforensics.rundata import RunData


def _metrics(parts: list[tuple[int, list[int], list[float], list[float] | None]], name: str = "loss") -> pl.DataFrame:
    """(attempt, steps, losses, epochs) per attempt -> a metrics table of one source, in file order."""
    rows, record = [], 0
    for attempt, steps, losses, epochs in parts:
        for i, (step, loss) in enumerate(zip(steps, losses)):
            rows.append(dict(line=record + 1, step=step, record=record, attempt=attempt, name=name, value=loss))
            if epochs is not None:
                rows.append(
                    dict(line=record + 1, step=step, record=record, attempt=attempt, name="epoch", value=epochs[i])
                )
            record += 1
    return pl.DataFrame(rows).with_columns(pl.lit("train.log").alias("source"))


def _curve(n: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(6.0 * np.exp(-np.arange(n) / 15) + 0.5 + rng.normal(0, 0.01, n))


def _warnings(run: RunData) -> list:
    incidents, _ = detect_incidents(run, Params())
    return [i for i in incidents if i.severity in ("warning", "critical")]


def test_a_second_launch_from_scratch_is_its_own_run_not_a_drift_of_the_first():
    steps = list(range(100, 7700, 100))
    run = RunData.from_frames(metrics=_metrics([(0, steps, _curve(76, 1), None), (1, steps, _curve(76, 2), None)]))
    assert run.fresh_starts() == [0, 1]
    assert _warnings(run) == []
    # the same records read as one timeline (the second launch glued to the first) make the restart an incident
    glued = RunData.from_frames(
        metrics=_metrics([(0, steps + [s + 7600 for s in steps], _curve(76, 1) + _curve(76, 2), None)])
    )
    assert glued.fresh_starts() == [0] and _warnings(glued)


def test_a_resume_and_a_per_epoch_counter_stay_one_run():
    resume = RunData.from_frames(
        metrics=_metrics(
            [
                (0, list(range(0, 6000, 100)), _curve(60, 3), None),
                (1, list(range(5000, 8000, 100)), _curve(90, 4)[60:], None),
            ]
        )
    )
    assert resume.fresh_starts() == [0]
    per_epoch = RunData.from_frames(
        metrics=_metrics(
            [(e, list(range(100, 1100, 100)), _curve(50, 5)[10 * e : 10 * e + 10], [float(e)] * 10) for e in range(5)]
        )
    )
    assert per_epoch.fresh_starts() == [0]
    # an epoch that goes back to the first one (MACE: 49 -> 0, no step counter) is a new launch
    relaunched = RunData.from_frames(
        metrics=_metrics([(a, [None] * 40, _curve(40, 6 + a), [float(i // 8) for i in range(40)]) for a in range(3)])
    )
    assert relaunched.fresh_starts() == [0, 1, 2]


def test_a_critic_loss_rising_from_bootstrapped_zero_targets_is_no_unstable_start():
    values = [0.34, 5.0, 35.4, 82.8, 69.9, 61.1, 46.1, 51.3] + [50.0 + (i % 5) for i in range(60)]
    steps = list(range(1, len(values) + 1))
    critic = RunData.from_frames(metrics=_metrics([(0, steps, values, None)], name="loss_q"))
    assert critic.resolve("loss") == "loss_q" and _warnings(critic) == []
    # the same curve as a supervised loss: a loss 244x over its first value and never back is an unstable start
    assert _warnings(RunData.from_frames(metrics=_metrics([(0, steps, values, None)])))


def test_an_epoch_line_with_its_valid_loss_has_no_eval_before_training():
    # SpeechBrain `epoch: 1, ..., steps: 2197 - train loss: 1.71e+02 - valid loss: 1.06`: the valid loss is the
    # epoch's end, printed on the training record's line, not the model before training
    train = _metrics([(0, [1, 2, 3, 4, 5], [171.0, 95.0, 62.7, 45.6, 35.7], None)])  # (steps as epochs)
    evals = train.filter(pl.col("name") == "loss").with_columns(
        pl.lit("eval_loss").alias("name"),
        pl.lit(None, dtype=pl.Int64).alias("record"),
        pl.Series("value", [1.06, 0.52, 0.22, 0.12, 0.08]),
    )
    assert _warnings(RunData.from_frames(metrics=pl.concat([train, evals]))) == []
    # an eval on an earlier line at the first step (HF `eval_on_start`) is the model before training
    before = evals.head(1).with_columns(pl.lit(0, dtype=pl.Int64).alias("line"), pl.lit(1.06).alias("value"))
    assert _warnings(RunData.from_frames(metrics=pl.concat([train, before])))


def _spiky(n: int, seed: int, at: int) -> list[float]:
    curve = _curve(n, seed)
    curve[at] *= 8.0
    return curve


@pytest.mark.parametrize("slice_rows", [None, 7, 64])
def test_a_run_repeated_exactly_is_judged_once_and_the_note_counts_the_copies(monkeypatch, slice_rows):
    """A log concatenated to itself (fuzz seed 15's input 488: one HF log copied 20,000 times) holds the same run
    again and again: each distinct run is judged once, not once per copy (detect/runs_in_log.py). The runs'
    content sums are taken over slices of the table (`frames.in_slices`): the same with slices that cut runs."""
    if slice_rows:
        monkeypatch.setattr(frames, "SLICE_ROWS", slice_rows)
    steps = list(range(100, 7700, 100))
    same = _spiky(76, 1, 50)
    parts = [(a, steps, same, None) for a in range(5)] + [(5, steps, _spiky(76, 2, 60), None)]
    run = RunData.from_frames(metrics=_metrics(parts))
    assert run.fresh_starts() == [0, 1, 2, 3, 4, 5]
    incidents, notes = detect_incidents(run, Params())
    spikes = sorted(i.peak_step for i in incidents if i.kind == "hard_spike" and i.severity != "info")
    assert spikes == [steps[50], steps[60]]  # one per distinct run, not five copies of the first
    note = [n for n in notes if n.facts.get("note_kind") == "runs_in_log"]
    assert len(note) == 1 and note[0].facts["repeated_runs"] == 4 and note[0].facts["runs_in_log"] == 6


def test_beyond_max_runs_in_log_the_latest_distinct_runs_are_judged_and_a_note_names_the_rest():
    steps = list(range(100, 7700, 100))
    parts = [(a, steps, _spiky(76, 10 + a, 20 + 5 * a), None) for a in range(6)]
    run = RunData.from_frames(metrics=_metrics(parts))
    params = Params()
    params.set("coverage.max_runs_in_log", 2)
    incidents, notes = detect_incidents(run, params)
    spikes = sorted(i.peak_step for i in incidents if i.kind == "hard_spike" and i.severity != "info")
    assert spikes == [steps[40], steps[45]]  # the last two runs' spikes only
    (note,) = [n for n in notes if n.facts.get("note_kind") == "runs_in_log"]
    assert note.facts["unjudged_runs"] == 4 and "max_runs_in_log" in note.summary
    # by default all six are judged, each with its own spike
    incidents, _ = detect_incidents(run, Params())
    assert len([i for i in incidents if i.kind == "hard_spike" and i.severity != "info"]) == 6


def test_a_log_copied_many_times_is_attributed_on_the_copy_judged_and_covered_whole():
    """Attribution, calibration and raw lines read the runs that were judged (`runs_in_log.judged_run`): a log
    copied 20,000 times (fuzz seed 15's input 488) held 7.2M records for the context and features of one incident
    (2.3 GB), and its calibration counted each healthy step once per copy. What the verdict says was read (steps,
    coverage) is still the whole log."""
    from spikeforensics.attribute import diagnose_run
    from spikeforensics.detect import runs_in_log

    steps = list(range(100, 7700, 100))
    same = _spiky(76, 1, 50)
    parts = [(a, steps, same, None) for a in range(5)] + [(5, steps, _spiky(76, 2, 60), None)]
    norms = [(a, s, [1.0 + 0.01 * (i % 7) for i in range(76)], None) for a, s, _, _ in parts]
    run = RunData.from_frames(metrics=pl.concat([_metrics(parts), _metrics(norms, "grad_norm")]))
    judged = runs_in_log.judged_run(run, Params())
    assert sorted(judged.metrics.get_column("attempt").unique().to_list()) == [4, 5]  # the last copy, the other run
    assert judged.metrics.height == 2 * 2 * 76
    diagnosis = diagnose_run(run, Params())
    assert 0 < diagnosis["calibration"]["healthy_steps"] <= 2 * 76  # not 6 x 76: a copy is no further evidence
    assert diagnosis["verdict"]["coverage"]["series_records"]["loss"] == 6 * 76  # read: every copy
    assert diagnosis["steps"]["count"] == 76
    # a log whose runs are all judged is attributed as it is (the same object: nothing filtered, caches kept)
    distinct = RunData.from_frames(metrics=_metrics([(a, steps, _spiky(76, 10 + a, 30), None) for a in range(3)]))
    assert runs_in_log.judged_run(distinct, Params()) is distinct
    single = RunData.from_frames(metrics=_metrics([(0, steps, same, None)]))
    assert runs_in_log.judged_run(single, Params()) is single


def test_a_run_that_blew_up_appended_to_itself_is_one_run_copied():
    """fuzz seed 23's input 789: a fairseq log whose loss goes 9.57 -> 7.7e12 copied 20,000 times. The copies'
    first loss is no twice the blown-up run's median, so the loss test alone took each copy for a resume of one
    run (20,000 attempts, 160,000 findings, diagnose > 300 s): the same first step and first loss as attempt 0 is a
    start again, and the copies are judged once."""
    steps = list(range(1000, 8000, 1000))
    losses = [9.57, 8.61, 7.50, 6.87, 10405.01, 4.77e9, 7.75e12]
    run = RunData.from_frames(metrics=_metrics([(a, steps, losses, None) for a in range(4)]))
    assert run.fresh_starts() == [0, 1, 2, 3]
    incidents, notes = detect_incidents(run, Params())
    assert [i.kind for i in incidents if i.severity == "critical"] == ["divergence"]
    assert any(n.facts.get("repeated_runs") == 3 for n in notes)
    # a resume from a checkpoint that prints another loss at the first step stays one run
    resumed = RunData.from_frames(metrics=_metrics([(0, steps, losses, None), (1, steps, [9.0] + losses[1:], None)]))
    assert resumed.fresh_starts() == [0]
