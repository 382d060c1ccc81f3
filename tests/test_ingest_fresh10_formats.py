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
