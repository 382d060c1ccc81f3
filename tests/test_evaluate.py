"""Accuracy scoring (spikeforensics.evaluate) and the reference baselines (benchmarks/baselines.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from spikeforensics import evaluate
from spikeforensics.evaluate import aggregate, sample_recall_at_k, score_run

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import accuracy  # noqa: E402
import baselines  # noqa: E402

LLMC = Path(__file__).resolve().parent / "data" / "real" / "llmc" / "llmc_main_log_norm_spike_s8650_8800.log"


def inc(kind, start, end=None, *, kinds=None, severity="warning", root_cause=None, sample_ids=(), peak=None, id=None):
    end = start if end is None else end
    return {
        "id": id,
        "kind": kind,
        "kinds": kinds or [kind],
        "severity": severity,
        "step_start": start,
        "step_end": end,
        "peak_step": start if peak is None else peak,
        "root_cause": root_cause,
        "sample_ids": list(sample_ids),
    }


def truth(*incidents, healthy=False, scenario="run", set="tune"):
    return {"scenario": scenario, "set": set, "healthy": healthy, "incidents": list(incidents)}


def diag(*incidents):
    return {"incidents": list(incidents)}


# -- matching ---------------------------------------------------------------------------------


def test_match_needs_overlap_within_tolerance():
    t = truth(inc("hard_spike", 100, 102))
    near = diag(inc("hard_spike", 106, 108))  # 4 steps after the end: inside tol 5
    assert score_run(near, t).truths[0].detected
    assert score_run(near, t).truths[0].peak_error == 6
    assert not score_run(near, t, tol_steps=3).truths[0].detected
    far = diag(inc("hard_spike", 120, 125))
    s = score_run(far, t)
    assert not s.truths[0].detected and not s.preds[0].matched


def test_match_on_any_shared_kind_not_only_the_primary():
    # a NaN found inside a labelled spike whose truth lists both kinds: a hit, not a miss + false alarm
    t = truth(inc("hard_spike", 500, 503, kinds=["hard_spike", "nonfinite"]))
    s = score_run(diag(inc("nonfinite", 502)), t)
    assert s.truths[0].detected and s.preds[0].matched
    rows = evaluate.detection_rows([s])
    assert rows["hard_spike"]["recall"] == 1.0
    assert rows["nonfinite"]["precision"] == 1.0 and rows["nonfinite"]["n_truth"] == 0


def test_unrelated_kind_in_the_window_is_a_miss_and_a_false_alarm():
    t = truth(inc("hard_spike", 500, 503))
    s = score_run(diag(inc("clip_rate_anomaly", 400, 600)), t)
    assert not s.truths[0].detected and not s.preds[0].matched
    rows = evaluate.detection_rows([s])
    assert rows["hard_spike"]["recall"] == 0.0 and rows["clip_rate_anomaly"]["precision"] == 0.0


def test_info_notes_do_not_count():
    s = score_run(diag(inc("hard_spike", 10, severity="info")), truth(healthy=True))
    assert s.preds == [] and s.false_on_clean == 0
    s = score_run(diag(inc("hard_spike", 10, severity="info")), truth(inc("hard_spike", 10)))
    assert not s.truths[0].detected


def test_false_incidents_on_clean_runs():
    clean = score_run(diag(inc("hard_spike", 10), inc("soft_drift", 50, 90, severity="critical")), truth(healthy=True))
    quiet = score_run(diag(), truth(healthy=True, scenario="quiet"))
    assert clean.false_on_clean == 2 and quiet.false_on_clean == 0
    table = aggregate([clean, quiet])["detectors"]["spikeforensics"]
    assert table["clean"] == {"runs": 2, "false_incidents": 2, "runs_with_false": 1, "worst": "run"}
    # they also count against precision
    assert table["detection"]["hard_spike"]["precision"] == 0.0


def test_precision_recall_f1_split_over_runs():
    r1 = score_run(
        diag(inc("hard_spike", 100), inc("hard_spike", 103), inc("hard_spike", 900)),
        truth(inc("hard_spike", 100, 104), inc("hard_spike", 300)),
    )
    r2 = score_run(diag(inc("hard_spike", 50)), truth(inc("hard_spike", 52), scenario="r2"))
    row = evaluate.detection_rows([r1, r2])["hard_spike"]
    assert row["n_truth"] == 3 and row["detected"] == 2
    assert row["n_pred"] == 4 and row["correct"] == 3 and row["split"] == 1
    assert row["recall"] == pytest.approx(2 / 3) and row["precision"] == pytest.approx(3 / 4)
    assert row["f1"] == pytest.approx(2 * 0.75 * (2 / 3) / (0.75 + 2 / 3))


# -- attribution ------------------------------------------------------------------------------


def test_root_cause_uses_best_matching_prediction():
    t = truth(inc("hard_spike", 200, 202, root_cause="data_outlier", kinds=["hard_spike", "layer_outlier"]))
    d = diag(
        inc("layer_outlier", 190, 210, severity="critical", root_cause="layer_instability", id="a"),
        inc("hard_spike", 201, severity="warning", root_cause="data_outlier", id="b"),
    )
    s = score_run(d, t)
    assert s.truths[0].pred_id == "b" and s.truths[0].pred_root_cause == "data_outlier"  # same kind first


def test_root_cause_accuracy_per_label_and_hardware_blamed_on_data():
    runs = [
        score_run(
            diag(inc("hard_spike", 10, root_cause="data_outlier")),
            truth(inc("hard_spike", 10, root_cause="data_outlier"), scenario="a"),
        ),
        score_run(
            diag(inc("hard_spike", 10, root_cause="data_outlier")),
            truth(inc("hard_spike", 10, root_cause="hardware_fault"), scenario="b"),
        ),
        score_run(
            diag(inc("nonfinite", 10, root_cause="hardware_fault")),
            truth(inc("nonfinite", 10, root_cause="hardware_fault"), scenario="c"),
        ),
        score_run(
            diag(), truth(inc("hard_spike", 10, root_cause="hardware_fault"), scenario="d")
        ),  # missed: not in top-1
    ]
    block = aggregate(runs)["detectors"]["spikeforensics"]
    rc = block["root_cause"]
    assert rc["data_outlier"]["accuracy"] == 1.0
    assert rc["hardware_fault"] == {
        "n_truth": 3,
        "matched": 2,
        "correct": 1,
        "accuracy": 0.5,
        "predicted_instead": {"data_outlier": 1},
    }
    assert rc["all"]["accuracy"] == pytest.approx(2 / 3)
    assert block["hardware_blamed_on_data"] == {"matched": 2, "blamed_on_data": 1}


def test_sample_recall_at_k():
    assert sample_recall_at_k(["x", "a", "y", "z", "w", "b"], ["a", "b", "c"]) == pytest.approx(1 / 3)
    assert sample_recall_at_k(["a", "b"], ["a", "b", "c", "d", "e", "f", "g"], k=5) == pytest.approx(2 / 5)
    assert sample_recall_at_k(list("abcde"), list("abcdefg")) == 1.0
    assert sample_recall_at_k(["a"], []) is None
    t = truth(inc("hard_spike", 10, root_cause="data_outlier", sample_ids=["s1", "s2"]))
    s = score_run(diag(inc("hard_spike", 11, root_cause="data_outlier", sample_ids=["s9", "s2", "s1"])), t)
    assert s.truths[0].sample_recall == 1.0
    # not applicable to other labels, nor to missed incidents
    t2 = truth(inc("hard_spike", 10, root_cause="hardware_fault", sample_ids=["s1"]))
    assert score_run(diag(inc("hard_spike", 10, sample_ids=["s1"])), t2).truths[0].sample_recall is None


def test_skip_list_recall_and_the_per_sample_loss_split():
    culprits = ["s1", "s2", "s3"]
    t = truth(inc("hard_spike", 10, root_cause="data_outlier", sample_ids=culprits))
    t["per_sample_losses"] = False
    d = diag(
        inc("hard_spike", 10, root_cause="data_outlier", id="inc-1", sample_ids=["x1", "x2", "x3", "x4", "x5", "s1"]),
        inc("hard_spike", 90, root_cause="data_outlier", id="inc-2", sample_ids=["s2"]),
    )
    # the skip list keeps the tie (8 samples) for inc-1; inc-2's entry must not count for it
    d["skiplist"] = {
        "reasons": [
            {"incident": "inc-1", "sample_ids": ["x1", "x2", "x3", "x4", "x5", "s1", "s3", "x6"]},
            {"incident": "inc-2", "sample_ids": ["s2"]},
        ]
    }
    s = score_run(d, t)
    tr = s.truths[0]
    assert tr.sample_recall == 0.0 and tr.skip_recall == pytest.approx(2 / 3) and tr.skip_size == 8
    assert tr.per_sample_losses is False
    t2 = truth(inc("hard_spike", 10, root_cause="data_outlier", sample_ids=["a"]), scenario="b")
    t2["per_sample_losses"] = True
    s2 = score_run(diag(inc("hard_spike", 10, root_cause="data_outlier", id="i", sample_ids=["a"])), t2)
    assert s2.truths[0].skip_recall == 0.0 and s2.truths[0].skip_size == 0  # no skip list at all
    sr = aggregate([s, s2])["detectors"]["spikeforensics"]["sample_recall"]
    assert sr["mean"] == 0.5 and sr["with_sample_losses"] == 1.0 and sr["without_sample_losses"] == 0.0
    assert sr["skip_recall"] == pytest.approx(1 / 3)
    assert (sr["skip_labelled"], sr["skip_held"], sr["skip_size"]) == (4, 2, 8)


def test_expected_recall_with_ties_in_random_order():
    from spikeforensics.evaluate import expected_recall_at_k

    rows = lambda pairs: [{"sample_id": a, "score": b} for a, b in pairs]  # noqa: E731
    # one culprit among 8 tied samples: 5 of the 8 slots -> 5/8, wherever the tie-break put it
    tied = rows([(f"s{i}", 3.0) for i in range(8)])
    assert expected_recall_at_k(tied, ["s7"]) == pytest.approx(5 / 8)
    # 10 culprits among 16 tied: 5 x 10/16 / 5
    tied16 = rows([(f"s{i}", 3.0) for i in range(16)][::-1])
    assert expected_recall_at_k(tied16, [f"s{i}" for i in range(10)]) == pytest.approx(10 / 16)
    # a clear order is scored as it stands, however close: the culprit second of distinct scores
    assert expected_recall_at_k(rows([("a", 3.01), ("b", 3.0)]), ["b"], k=1) == 0.0
    assert expected_recall_at_k(rows([("a", 9.0), ("b", 8.0), ("c", 1.0)]), ["b"], k=1) == 0.0
    assert expected_recall_at_k(rows([("a", 9.0), ("b", 8.0)]), ["b"], k=2) == 1.0
    # a tie group behind two clear suspects gets the last 3 slots
    mixed = rows([("a", 9.0), ("b", 8.0)] + [(f"t{i}", 2.0) for i in range(6)])
    assert expected_recall_at_k(mixed, ["t0"]) == pytest.approx(3 / 6)
    assert expected_recall_at_k(mixed, []) is None


def test_targets_compare_with_every_baseline():
    t = truth(inc("hard_spike", 10, root_cause="data_outlier"), inc("nonfinite", 300, root_cause="hardware_fault"))
    me = score_run(
        diag(inc("hard_spike", 10, root_cause="data_outlier"), inc("nonfinite", 300, root_cause="hardware_fault")), t
    )
    base = score_run(diag(inc("hard_spike", 10), inc("hard_spike", 200)), t, detector="zclip")
    targets = {x["name"]: x for x in aggregate([me, base])["targets"]}
    assert targets["F1 hard_spike"]["met"] and targets["F1 hard_spike > zclip"]["met"]
    worse = score_run(diag(inc("hard_spike", 10, root_cause="data_outlier")), t)
    tie = {
        x["name"]: x for x in aggregate([worse, score_run(diag(inc("hard_spike", 10)), t, detector="zclip")])["targets"]
    }
    assert tie["F1 hard_spike > zclip"]["met"] is True  # both perfect: cannot do better
    assert tie["F1 nonfinite"]["value"] == 0.0  # a missed kind: recall 0, precision undefined -> F1 0
    assert targets["F1 nonfinite > zclip"]["met"]
    assert targets["root cause top-1"]["value"] == 1.0
    text = evaluate.render_markdown(aggregate([me, base]), title="t")
    assert "| zclip | hard_spike | 1 | 1 | 1.00 | 2 | 0.50 | 0.67 |" in text


# -- baselines ------------------------------------------------------------------------------


def series(values, start=1):
    return pl.DataFrame({"step": list(range(start, start + len(values))), "value": [float(v) for v in values]})


def noisy(n, level=1.0, seed=0, sd=0.02):
    return level + np.random.default_rng(seed).normal(0, sd, n)


def steps_of(incs):
    return [(i["kind"], i["step_start"], i["step_end"]) for i in incs]


def test_megatron_ignores_its_calibration_window_and_catches_nan():
    x = noisy(300)
    x[49] = 50.0  # inside the first 100 values: raises the reference max instead
    x[199] = 20.0
    assert not baselines.megatron(x)[199]  # 20 < 10 x 50
    x[49] = 1.0
    x[259] = np.nan
    flags = baselines.megatron(x)
    assert flags[199] and flags[259] and flags.sum() == 2
    found = baselines.incidents(baselines._flagged(series(x), flags))
    assert steps_of(found) == [("hard_spike", 200, 200), ("nonfinite", 260, 260)]


def test_static_rule_misses_nan_and_is_blind_while_it_is_in_the_window():
    loss = noisy(200, 3.0)
    loss[100] = 7.0
    loss[150] = np.nan
    loss[160] = 7.0  # NaN still in the 20-step window: the mean is NaN
    flags = baselines.static_loss(loss)
    assert flags[100] and not flags[150] and not flags[160] and flags.sum() == 1
    grad = noisy(200, 0.5)
    grad[120] = 60.0
    assert np.flatnonzero(baselines.static_grad(grad)).tolist() == [120]


def test_llm_foundry_needs_five_outliers_in_a_row():
    loss = noisy(400, 3.0)
    loss[150:153] = 7.0  # 3 in a row: under the patience
    loss[250:256] = 7.0  # 6 in a row: flagged, all six
    flags = baselines.llm_foundry(loss)
    assert np.flatnonzero(flags).tolist() == list(range(250, 256))
    loss[300] = np.nan
    loss[320:330] = 7.0  # NaN in the window: blind
    assert not baselines.llm_foundry(loss)[300:].any()


def test_olmo_core_six_sigma_and_nan_poisoning():
    x = noisy(400, 1.0, sd=0.05)
    x[30] = 9.0  # fewer than 64 values seen: inactive
    x[200] = 2.0  # 20 sigma
    flags = baselines.olmo_core(x)
    assert not flags[30] and flags[200]
    assert not flags[201:].any()  # the spike inflates std but is one-sided: no flag after
    x[300] = np.nan
    flags = baselines.olmo_core(x)
    assert flags[300:].all()  # the NaN stays in the 128-value window until the end here


def test_zclip_flags_spikes_and_goes_blind_after_nan():
    g = noisy(300, 0.3, sd=0.01)
    g[100] = 3.0
    flags = baselines.zclip(g)
    assert flags[100]
    g[150] = np.nan
    g[200] = 30.0
    flags = baselines.zclip(g)
    assert not flags[150:].any()


def test_incident_grouping_and_kinds():
    flagged = pl.DataFrame(
        {
            "step": [10, 12, 20, 40, 41],
            "nonfinite": [False, False, False, True, False],
            "strength": [3.0, 9.0, 2.0, float("inf"), 5.0],
        }
    )
    found = baselines.incidents(flagged)
    assert [(i["step_start"], i["step_end"], i["peak_step"], i["kind"], i["kinds"]) for i in found] == [
        (10, 12, 12, "hard_spike", ["hard_spike"]),
        (20, 20, 20, "hard_spike", ["hard_spike"]),
        (40, 41, 40, "nonfinite", ["nonfinite", "hard_spike"]),
    ]


def read_llmc() -> tuple[pl.DataFrame, pl.DataFrame]:
    rows = [
        (int(m[1]), float(m[2]), float(m[3]))
        for line in LLMC.read_text().splitlines()
        if (m := re.match(r"s:(\d+) trl:(\S+) lr:\S+ norm:(\S+)", line))
    ]
    df = pl.DataFrame(rows, schema=["step", "loss", "grad"], orient="row")
    return df.select("step", pl.col("loss").alias("value")), df.select("step", pl.col("grad").alias("value"))


@pytest.mark.skipif(not LLMC.exists(), reason="shared real excerpt not present")
def test_baselines_on_the_real_llmc_grad_norm_spike():
    loss, grad = read_llmc()
    found = baselines.detect_all(loss, grad)
    spike = truth(inc("hard_spike", 8715))
    hits = {name: score_run({"incidents": incs}, spike).truths[0].detected for name, incs in found.items()}
    # 150 steps: Megatron is still calibrating, LLM Foundry's window is not full, 4.29 < 100 x 0.27
    assert hits == {"static": False, "megatron": False, "llm_foundry": False, "olmo_core": True, "zclip": True}
    assert steps_of(found["olmo_core"]) == [("hard_spike", 8715, 8715)]
    assert len(found["zclip"]) > 1  # 2.5 sigma clips often: a clipping threshold, not an alarm


# -- harness --------------------------------------------------------------------------------


def test_readme_markers_replace_only_their_section(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\nspeed section\n", encoding="utf-8")
    accuracy.write_readme("first\n", readme)
    accuracy.write_readme("second\n", readme)
    text = readme.read_text()
    assert text.startswith("# Benchmarks\n\nspeed section\n")
    assert text.count(accuracy.BEGIN) == 1 and "second" in text and "first" not in text
    readme.write_text(text + "\nafter\n")
    accuracy.write_readme("third\n", readme)
    assert readme.read_text().endswith(f"{accuracy.BEGIN}\nthird\n{accuracy.END}\n\nafter\n")


def test_harness_runs_on_a_handmade_folder(tmp_path, capsys):
    run = tmp_path / "runs" / "tune" / "spiky"
    run.mkdir(parents=True)
    loss = noisy(300, 3.0)
    loss[200] = 12.0
    with open(run / "metrics.jsonl", "w") as fh:
        for i, v in enumerate(loss, start=1):
            fh.write(json.dumps({"step": i, "loss": float(v), "grad_norm": 0.5 if i != 201 else 40.0}) + "\n")
    (run / "ground_truth.json").write_text(
        json.dumps(truth(inc("hard_spike", 201, root_cause="data_outlier"), scenario="spiky"))
    )
    clean = tmp_path / "runs" / "holdout" / "clean"
    clean.mkdir(parents=True)
    (clean / "ground_truth.json").write_text(json.dumps(truth(healthy=True, scenario="clean", set="holdout")))
    out = tmp_path / "acc.json"
    readme = tmp_path / "README.md"
    code = accuracy.main(
        [
            "--set",
            "all",
            "--runs",
            str(tmp_path / "runs"),
            "--json",
            str(out),
            "--check",
            "--write-readme",
            "--readme",
            str(readme),
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert set(data["tables"]) == {"tune", "holdout"}
    assert {r["run"] for r in data["runs"]} == {"spiky", "clean"}
    assert "## Accuracy" in readme.read_text() and "Set `holdout`" in readme.read_text()
    assert "Set `tune`" in capsys.readouterr().out


def test_to_diagnosis_reads_every_entry_point_shape():
    from spikeforensics.detect.base import Incident

    incident = Incident(
        id="inc-1",
        kind="hard_spike",
        kinds=["hard_spike"],
        severity="warning",
        step_start=5,
        step_end=6,
        peak_step=5,
        findings=[],
    )
    assert accuracy.to_diagnosis(([incident], []))["incidents"][0]["step_end"] == 6  # detect_incidents
    assert accuracy.to_diagnosis([incident])["incidents"][0]["kind"] == "hard_spike"
    assert accuracy.to_diagnosis({"incidents": [{"kind": "nonfinite"}]})["incidents"] == [{"kind": "nonfinite"}]
