"""Readers first needed on sample_logs/real/fresh20: BigDL's `Loss is NaN.` sentences, a logging-prefixed
`Epoch N:` loop, CatBoost's `learn_error.tsv`, the SSD family's `L: x C: y`, AllenNLP's alternating
training/validation bars, and a Keras CSVLogger file holding two appended runs."""

from __future__ import annotations

import math

from _ingest_helpers import ingest, real_case, series, train_steps, write


def real(store, name):
    return real_case(store, "fresh20", name)


def test_bigdl_sentences_after_a_full_stop(store):
    metrics, _, f, facts = real(store, "bigdl-ipex-llm-2494-inceptionv1-24-node-bs3072-loss-nan-epoch-149")
    assert f.format == "generic_steps" and train_steps(metrics) == [61991, 61992, 61993]
    assert len(train_steps(metrics)) == facts["step_records"]
    assert all(math.isnan(v) for _, v in series(metrics, "loss"))
    # `Current learning rate is 0.0011379211379215811.`: `current` is no part of the name
    assert series(metrics, "lr")[0][1] == 0.0011379211379215811


def test_epoch_lines_behind_a_logging_prefix(store):
    metrics, _, f, facts = real(store, "custom-emonettcn-daisee-engagement-mse-500-epochs-python-logging-healthy")
    assert f.format == "generic_steps" and train_steps(metrics) == list(range(1, 501))
    assert len(train_steps(metrics)) == facts["step_records"]
    assert series(metrics, "loss")[0] == (1, 0.0717) and series(metrics, "eval_loss")[0] == (1, 0.0766)


def test_catboost_learn_error_tsv_objective_is_the_loss(tmp_path, store):
    name = "catboost-zimnat-insurance-recommendation-learn-error-tsv-multiclass-3220-iters-healthy"
    metrics, _, f, facts = real(store, name)
    assert f.format == "column_table" and len(train_steps(metrics)) == facts["step_records"] == 3220
    assert series(metrics, "loss")[0] == (0, 2.6956357) and series(metrics, "accuracy")[0] == (0, 0.7179479451)
    # test_error.tsv is the eval set's: its objective is the eval loss
    rows = "iter\tLogloss\n" + "".join(f"{i}\t{0.69 - i / 100:.4f}\n" for i in range(5))
    metrics, _, f = ingest(store, write(tmp_path, "test_error.tsv", rows), run="t")
    assert f.format == "column_table" and series(metrics, "eval_loss", train=False)[0] == (0, 0.69)
    assert series(metrics, "loss") == []


def test_ssd_family_letter_terms(store):
    metrics, _, f, facts = real(store, "custom-rfbnet-72-two-class-loc-loss-nan-from-iter11-warmup-lr")
    assert f.format == "generic_steps" and len(train_steps(metrics)) == facts["step_records"] == 11
    loc = series(metrics, "loss_l")
    assert loc[0] == (5, 4.0048) and math.isnan(dict(loc)[facts["first_nonfinite_step"]])
    assert series(metrics, "loss_c")[0] == (5, 10.7443)


def test_allennlp_alternating_training_and_validation_bars(store):
    metrics, _, f, facts = real(store, "allennlp-ampligraph-simple-tagger-nym-embeddings-readme-40-epochs-slow-healthy")
    loss, eval_loss = series(metrics, "loss"), series(metrics, "eval_loss", train=False)
    assert len(loss) == facts["step_records"] == 40 and len(eval_loss) == 40
    assert loss[0][1] == 5.1068 and eval_loss[0][1] == 5.0046


def test_keras_csvlogger_with_an_appended_run_restarts_its_epochs(store):
    name = "keras-csvlogger-irfanet-eog-sleep-staging-two-appended-runs-reducelr-drop-overfit-healthy-226-epochs"
    metrics, _, f, facts = real(store, name)
    loss = metrics.filter(metrics["name"] == "loss").sort("line")
    assert f.format == "csv_metrics" and loss.height == facts["step_records"] == 226
    assert loss["step"][:3].to_list() == [0, 1, 2] and loss["attempt"].n_unique() == 2
    second = loss.filter(loss["attempt"] == loss["attempt"].max())
    assert second["step"][0] == 0 and second["value"][0] == 0.494461827167
