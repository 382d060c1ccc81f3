"""Readers first met in sample_logs/real/fresh10: spaCy's `spacy train` table (spacy_table), and custom-loop
shapes of the catch-all grammar: a counter that never moves while the epoch does (COMPOSE), a paste fenced in
Markdown backticks, and a validation line whose loss names hold the eval word inside (`total_val_loss`)."""

from __future__ import annotations

import math

import polars as pl
import pytest
from _ingest_helpers import ingest, real_case, series, train_steps, value, write

from spikeforensics.ingest._fields import _eval_name


def real(store, name):
    return real_case(store, "fresh10", name)


def test_spacy_table_reads_its_header_and_sums_the_component_losses(store):
    metrics, _, f, facts = real(store, "spacy-commons-language-hr-ner-tok2vec-loss-spike-step2800")
    steps = train_steps(metrics)
    assert f.format == "spacy_table" and steps == list(range(0, 3801, 200)) and len(steps) == facts["step_records"]
    assert value(metrics, 2800, "loss_tok2vec") == pytest.approx(8720.74)
    assert value(metrics, 2800, "loss") == pytest.approx(8720.74 + 392.96)
    assert value(metrics, 2800, "epoch") == 4 and value(metrics, 2800, "ents_f") == pytest.approx(86.50)


def test_spacy_table_of_another_pipeline(tmp_path, store):
    text = "\n".join(
        [
            "ℹ Pipeline: ['tok2vec', 'tagger', 'parser']",
            "E    #       LOSS TOK2VEC  LOSS TAGGER  LOSS PARSER  TAG_ACC  DEP_UAS  DEP_LAS  SCORE ",
            "---  ------  ------------  -----------  -----------  -------  -------  -------  ------",
            "  0       0          0.00        40.00       100.00    10.00    20.00    10.00    0.13",
            "  0     500        500.00      2000.00      3000.00    80.00    70.00    60.00    0.70",
            "  1    1000        nan         1500.00      2500.00    85.00    75.00    65.00    0.75",
            "✔ Saved pipeline to output directory",
        ]
    )
    metrics, _, f = ingest(store, write(tmp_path, "train.log", text))
    assert f.format == "spacy_table" and train_steps(metrics) == [0, 500, 1000]
    assert value(metrics, 500, "loss") == pytest.approx(5500.0) and value(metrics, 500, "dep_las") == 60
    assert math.isnan(metrics.filter((pl.col("name") == "loss_tok2vec") & (pl.col("step") == 1000)).item(0, "value"))


def test_a_counter_frozen_while_the_epoch_rises_gives_way_to_the_epoch(store):
    metrics, _, f, facts = real(store, "compose-1-ehr-trial-matching-loss-nan-from-epoch1-bad-input-data")
    # `Epoch 1, Iter 0: Loss:nan S-loss:nan`: Iter 0 on every line, one line per epoch
    assert f.format == "generic_steps" and train_steps(metrics) == [0, 1, 2, 3] == list(range(facts["step_records"]))
    assert value(metrics, 0, "loss") == pytest.approx(1.0637)


def test_a_backtick_fenced_paste_and_a_validation_line_with_the_eval_word_inside(store):
    metrics, _, _, facts = real(store, "tf2-yolov3-pythonlessons-8-val-giou-nan-lr-reduced")
    # the last record ends `total_loss:  13.18` + a closing backtick
    assert len(series(metrics, "loss")) == facts["step_records"] == 5 and value(metrics, 4, "loss") == 13.18
    # `giou_val_loss: nan, ..., total_val_loss: nan` after epoch 49: the eval loss is `total_val_loss`
    assert math.isnan(series(metrics, "eval_loss", train=False)[0][1])
    assert series(metrics, "eval_conf_loss", train=False)[0][1] == pytest.approx(12.31)


def test_eval_names_drop_the_eval_word_wherever_it_sits():
    assert _eval_name("val_loss") == "eval_loss" and _eval_name("valid loss") == "eval_loss"
    assert _eval_name("total_val_loss") == "eval_loss" and _eval_name("giou_val_loss") == "eval_giou_loss"
    assert _eval_name("val_ppl") == "eval_ppl" and _eval_name("val") == "eval_val"
    assert _eval_name("interval_loss") == "eval_interval_loss"  # `val` inside a word is no eval word


# -- review findings: what the new rules must not take ---------------------------------------------------------


def test_a_validation_line_keeps_a_training_loss_it_repeats_apart():
    # `Validation at step 500: train_loss: 2.5 val_loss: 9.9`: only the key that names its evaluation is eval_loss
    assert _eval_name("train_loss") == "eval_train_loss" and _eval_name("loss") == "eval_loss"


def test_spacy_table_runs_to_the_next_header_across_a_warning(tmp_path, store):
    head = "E    #       LOSS TOK2VEC  LOSS NER  ENTS_F  SCORE\n---  ------  ------------  --------  ------  ------\n"
    rows = [f"  {i}   {i * 200}   {100.0 + i:.2f}   {300.0 - i:.2f}   86.50   0.87" for i in range(5)]
    warn = "/usr/lib/python3/site-packages/torch/cuda.py:12: UserWarning: something"
    text = head + "\n".join(rows[:2] + [warn] + rows[2:]) + "\n"
    metrics, _, f = ingest(store, write(tmp_path, "spacy.log", text))
    assert f.format == "spacy_table" and train_steps(metrics) == [0, 200, 400, 600, 800] and f.unparsed == 0


def test_an_unstamped_epoch_summary_of_a_custom_loop_is_not_nnunet(tmp_path, store):
    lines, s = [], 0
    for e in range(1, 6):
        lines.append(f"Epoch {e}")
        for _ in range(10):
            s += 100
            lines.append(f"step {s} loss: {2.0 - s / 10000:.4f}")
        lines.append(f"train_loss {2.0 - s / 10000:.4f}")
    metrics, _, f = ingest(store, write(tmp_path, "custom.log", "\n".join(lines) + "\n"))
    assert "nnunet" not in f.format and train_steps(metrics)[:3] == [100, 200, 300]


def test_a_lines_own_batch_counter_wins_over_the_counter_line_before_it(tmp_path, store):
    lines, it = [], 0
    for e in range(1, 3):
        for b in range(1, 6):
            it += 1
            lines.append(f"[ds] global iteration {it * 7} timer 0.5s")
            lines.append(f"Epoch {e} | Batch {b}/5 | loss: {1.0 / it:.4f}")
    lines.append("Training done. final loss: 0.09")
    metrics, _, _ = ingest(store, write(tmp_path, "own_batch.log", "\n".join(lines) + "\n"))
    assert [s for s, _ in series(metrics, "loss")][:10] == list(range(1, 11))


def test_a_discriminator_loss_that_turns_nan_is_a_nan_loss_beside_a_finite_total(tmp_path, store):
    # BasicSR's `loss` is the generator's terms; `l_d_real` finite before it went NaN is no empty-subset metric
    from spikeforensics import api

    lines = []
    for it in range(100, 3100, 100):
        d = "nan" if it >= 2500 else "0.1073"
        lines.append(
            f"2023-01-01 10:00:00,000 INFO: [train..][epoch:  0, iter:  {it:,}, lr:(2.000e-04,)] [eta: 1:00:00, "
            f"time (data): 0.719 (0.005)] l_g_pix: 0.0078 l_g_gan: 0.01 l_d_real: {d} out_d_real: 1.0 l_d_fake: {d}"
        )
    ingest(store, write(tmp_path, "basicsr.log", "\n".join(lines) + "\n"))
    diagnosis = api.diagnose(api.load_run("r", store))
    nonfinite = [i for i in diagnosis["incidents"] if i["kind"] == "nonfinite"]
    assert nonfinite and nonfinite[0]["first_nonfinite_step"] == 2500
