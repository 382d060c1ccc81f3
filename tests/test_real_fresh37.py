"""What sample_logs/real/fresh36 left and fresh37 and fresh38 first needed: an epoch's or the training's closing
summary (`Epoch 1 completed | train_loss=0.0787 | global_step=324`, `Training complete! Final loss: 3.1890`) printed
beside a loop's counted interval lines was read as one more training record; a paste opened by an inline-code
backtick lost its first line; apex halving the loss scale to 1.5e-5 was no finding; ms-swift's `logging.jsonl`
(whose last line is its trainer state) was taken for a trainer_state.json; a DPO loss falling slowly from ln 2 was
a loss pinned at chance. fresh39: timm's `Using native Torch AMP` banner said no precision; a warmup the run died
in was judged over the log's length (an LR "still rising after 25% of the run"); a loss that left its band for the
3 rising records the log ends with was no divergence, and a divergence nothing else explains had no cause."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from _detect_synth import run_from
from _ingest_helpers import REAL

from spikeforensics import api
from spikeforensics.detect import divergence, loss_terms, run_detectors, stall
from spikeforensics.ingest import detect_format, parse_file
from spikeforensics.params import Params
from spikeforensics.report.text import verdict_sentence

P2IGAN = REAL / "fresh36" / "custom-p2igan-rainfall-inpainting-gan-200k-steps-healthy-2000"
BUILD_LLM = REAL / "fresh35" / "gpt2-build-llm-karpathy-full-ft-after-label-offset-fix-2000-steps-healthy"


def _train_loss(result) -> pl.DataFrame:
    return result.tables["metrics"].filter(pl.col("name") == "loss").sort("line")


def _train_records(result) -> int:
    """Training-step records, as CONTRACT.md counts them (an eval record has no `record`)."""
    return result.tables["metrics"].filter(pl.col("record").is_not_null()).get_column("record").n_unique()


def test_an_epoch_closing_summary_beside_counted_interval_lines_is_no_record():
    """P2I-GAN's `Epoch E | step N/200000 | loss=X` every 100 steps are the 2,000 records; its 618
    `Epoch E completed | train_loss=X | global_step=N` epoch means (steps 324, 648, ...) are summaries."""
    result = parse_file(P2IGAN / "train.out", "generic_steps")
    loss = _train_loss(result)
    assert _train_records(result) == 2000 and loss.height == 2000
    assert loss.get_column("step").to_list() == list(range(100, 200001, 100))
    assert round(loss.item(0, "value"), 4) == 0.0789


def test_the_training_closing_line_is_no_record():
    """build_llm's 4 `step N/2000 (x%): train loss X, val loss Y` estimates are the records; `Training complete!
    Final loss: 3.1890` after them is the run's summary and `Final eval - ...` an evaluation."""
    result = parse_file(next(BUILD_LLM.glob("*.txt")), "generic_steps")
    assert _train_records(result) == 4
    assert _train_loss(result).get_column("step").to_list() == [0, 500, 1000, 1500]
    assert "final_loss" not in result.tables["metrics"].get_column("name").to_list()


def test_closing_lines_alone_are_a_once_per_epoch_loop_records(tmp_path):
    """With no other counted loss line, `Epoch N completed | train_loss=X` is the loop's one record per epoch."""
    log = tmp_path / "epochs.log"
    log.write_text("".join(f"Epoch {e} completed | train_loss={1 - e / 10}\n" for e in range(1, 6)))
    result = parse_file(log, "generic_steps")
    assert _train_records(result) == 5
    assert _train_loss(result).get_column("step").to_list() == [1, 2, 3, 4, 5]


YOLACT = REAL / "fresh37" / "yolact-359-apex-fp16-loss-scale-1e-5-overflows-mask-loss-rising"


def test_a_paste_opened_by_an_inline_code_backtick_reads_its_first_line():
    """yolact #359's paste starts `` `[  1]    1440 || B: 5.495 | ... `` (the comment's inline-code quote): the
    backtick is markdown, so iteration 1440 is a record like the nine after it."""
    result = parse_file(YOLACT / "yolact_issue359_sdimantsd.log", "yolact")
    assert _train_records(result) == 10
    assert _train_loss(result).get_column("step").to_list()[0] == 1440


def test_an_overflow_halving_the_scale_past_every_floor_convicts_the_run(tmp_path):
    """apex has no minimum loss scale: its `reducing loss scale to 1.52587890625e-05` is 2^-16, past fairseq's
    1e-4 floor (where fairseq stops: 'your loss is probably exploding'); two such overflows in a 10-record paste
    are a critical loss-scale collapse, fp16 overflow first, where a scale of 0.5 (fairseq healthy) is not."""
    store = tmp_path / "store"
    api.ingest([YOLACT / "yolact_issue359_sdimantsd.log"], run_id="y", store=store)
    diagnosis = api.diagnose("y", store=store)
    assert diagnosis["verdict"]["status"] == "unstable"
    incident = diagnosis["incidents"][0]
    assert incident["kind"] == "loss_scale_collapse" and incident["severity"] == "critical"
    assert incident["root_cause"] == "fp16_overflow"
    half = tmp_path / "half.log"
    half.write_text(
        YOLACT.joinpath("yolact_issue359_sdimantsd.log").read_text().replace("e-05", "e-01").replace("e-06", "e-01")
    )
    api.ingest([half], run_id="h", store=store)
    assert api.diagnose("h", store=store)["verdict"]["status"] == "healthy"


MS_SWIFT = REAL / "fresh38" / "ms-swift-deepclima-r1-qwen3-8b-lora-sft-438-steps-healthy"
DPO = REAL / "fresh38" / "trl-dpo-clean-code-qwen-lora-160-steps-healthy"


def test_a_metrics_jsonl_ending_with_its_trainer_state_is_jsonl_and_the_state_no_record():
    """ms-swift's `logging.jsonl`: one dict per logging step (`"global_step/max_steps": "10/438"`), then its trainer
    state on the last line (`"global_step": 438, "log_history": [...]`, the same records again): read as JSONL,
    44 training records stepped 1, 10, ..., 430; the state's `global_step` is no step key of theirs."""
    log = MS_SWIFT / "logging.jsonl"
    assert detect_format(log)[0] == "jsonl_metrics"
    result = parse_file(log, "jsonl_metrics")
    steps = _train_loss(result).filter(pl.col("record").is_not_null()).get_column("step").to_list()
    assert _train_records(result) == 44 and steps == [1, *range(10, 431, 10)]


def test_a_trainer_state_on_one_line_is_still_a_trainer_state(tmp_path):
    """A compact `trainer_state.json` (json.dump without indent: one line) is one document, not JSONL."""
    state = tmp_path / "trainer_state.json"
    state.write_text('{"global_step": 2, "log_history": [{"loss": 2.0, "step": 1}, {"loss": 1.9, "step": 2}]}')
    assert detect_format(state)[0] == "hf_trainer_state"


def _at(values):
    return run_from({"step": np.arange(1, len(values) + 1), "loss": np.asarray(values, dtype=float)})


def test_a_loss_falling_slowly_from_ln_2_is_no_loss_pinned_at_chance(tmp_path):
    """trl's DPO loss is ln 2 at step 0 by construction; at beta 0.05 and lr 2e-6 it falls 0.692 -> 0.680 over 16
    records (its reward accuracy 0.47 -> 0.95): no `no_progress`. Noise about ln 2 with no fall stays one."""
    store = tmp_path / "store"
    api.ingest([DPO / "dpo.log"], run_id="dpo", store=store)
    diagnosis = api.diagnose("dpo", store=store)
    assert diagnosis["verdict"]["status"] == "healthy"
    # its dicts carry no step but where glued to a tqdm bar (4 of 16): the sentence says what was judged
    assert verdict_sentence(diagnosis).endswith("over 16 records (4 distinct steps).")
    rng = np.random.default_rng(3)
    (f,) = stall.detect(_at(math.log(2) + rng.normal(0, 0.003, 16)), Params())
    assert f.facts["cause"] == "chance_level"
    slow = math.log(2) - np.linspace(0.0, 0.012, 16) + rng.normal(0, 0.001, 16)
    assert not stall.detect(_at(slow), Params())


T2T_FOOD = REAL / "fresh39" / "timm-t2t-vit-19-food101-native-amp-loss-nan-epoch1-batch600"
FASTAI = REAL / "fresh39" / "fastai-forum-lesson4-imdb-lstm-loss-jumps-epoch-10-lr-too-high"


def test_timm_amp_banner_declares_mixed_precision_and_a_warmup_the_run_died_in_is_no_schedule_fault(tmp_path):
    """T2T-ViT under timm (`Using native Torch AMP. Training in mixed precision.`, warmup 1e-6 -> 3.4e-5 -> 6.7e-5
    per epoch over 3 of 20 scheduled epochs) goes NaN in epoch 1 and logs NaN to the end: fp16 is read, and the LR
    still rising at the end of a log that ends non-finite is no "LR rising after its warmup" (the maintainer: "AMP
    would cause NAN loss")."""
    store = tmp_path / "store"
    api.ingest([next(T2T_FOOD.glob("*.excerpt"))], run_id="t2t", store=store)
    events = api.export("t2t", "events", store).filter(pl.col("kind") == "precision")
    assert events.height == 1 and '"amp"' in events.item(0, "detail")
    (incident,) = api.diagnose("t2t", store=store)["incidents"]
    assert incident["kind"] == "nonfinite" and incident["first_nonfinite_step"] == 2967
    assert incident["root_cause"] == "fp16_overflow"
    assert incident["features"]["lr_rising_late"] is False


def test_timm_fp32_banner_is_fp32(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "AMP not enabled. Training in float32.\n"
        + "".join(
            f"Train: 0 [{i:4d}/1000 ({i // 10:3d}%)]  Loss:  {2.0 - i / 1000:.6f} ({2.0:.4f})  Time: 0.5s,  64/s  "
            f"(0.5s,  64/s)  LR: 1.000e-03  Data: 0.01 (0.01)\n"
            for i in range(0, 1000, 50)
        )
    )
    store = tmp_path / "store"
    api.ingest([log], run_id="f", store=store)
    events = api.export("f", "events", store).filter(pl.col("kind") == "precision")
    assert events.height == 1 and '"fp32"' in events.item(0, "detail")


def test_a_loss_rising_on_the_last_three_records_out_of_band_is_a_divergence_blamed_on_the_lr(tmp_path):
    """fastai lesson 4: trn_loss 0.37-0.47 for epochs 0-9, then 0.72, 0.81, 1.05 (user stopped): a divergence, and
    with nothing else in the log the LR first ("It means your LR is too high at that part of the training")."""
    store = tmp_path / "store"
    api.ingest([FASTAI / "fastai_forum_10961_output.txt"], run_id="fa", store=store)
    (incident,) = api.diagnose("fa", store=store)["incidents"]
    assert "divergence" in incident["kinds"] and incident["severity"] == "critical"
    assert incident["root_cause"] == "lr_too_high" and incident["step_start"] <= 10 <= incident["step_end"]


def test_two_high_records_at_the_end_stay_no_divergence():
    """A spike the log cut off: 10 records in band, then two rising records: fewer than min_records_rising."""
    values = [0.40, 0.38, 0.41, 0.39, 0.40, 0.37, 0.41, 0.39, 0.38, 0.40, 0.75, 0.90]
    assert not divergence.detect(_at(values), Params())
    assert divergence.detect(_at([*values, 1.1]), Params())


JITTOR = REAL / "fresh40" / "jittor-deepfacedrawing-mse-loss-garbage-values-then-nan-iter-2350"


def test_a_few_stray_negative_prints_leave_the_loss_its_ratio_scale(tmp_path):
    """A Jittor pix2pixHD loop's MSE prints -319.3, -0.51, -0.23 and three -0.00x (6 of 239 records) between
    ordinary values: broken printing, not a signed objective, so its spikes (19.5 at iter 140, 21.8 at 1850) are
    judged; a loss negative on a large share of its records stays signed."""
    store = tmp_path / "store"
    api.ingest([next(JITTOR.glob("*.excerpt"))], run_id="jt", store=store)
    run = api.load_run("jt", store)
    assert run.loss_without_ratio() is None
    spikes = [i for i in api.diagnose(run)["incidents"] if i["kind"] == "hard_spike"]
    assert {140, 1850} <= {i["peak_step"] for i in spikes}
    signed = _at([0.5, -0.2, 0.4, -0.3, 0.6, -0.1, 0.2, 0.3, -0.4, 0.1])
    assert signed.loss_without_ratio() == "signed"


YOLOX = REAL / "fresh41" / "yolox-myyoloxlabel-voc-s-apex-fp16-300-epochs-sparse-overflow-healthy"


def test_a_loss_term_switched_on_mid_run_explains_the_total_loss_step_up(tmp_path):
    """YOLOX prints `l1_loss: 0.0` for 285 of 300 epochs, then `--->Add additional L1 loss now!` and `l1_loss: 0.7`:
    the total's step up 4.1 -> 5 is the objective changing: notes that say so, not drifts."""
    store = tmp_path / "store"
    api.ingest([next(YOLOX.glob("train_log*"))], run_id="yx", store=store)
    diagnosis = api.diagnose("yx", store=store)
    assert diagnosis["verdict"]["status"] == "healthy"
    notes = [n for n in diagnosis["notes"] if n["kind"] == "soft_drift"]
    assert notes and all("the loss term `l1_loss`, printed as 0 before, is on from step" in n["summary"] for n in notes)


def test_a_term_that_was_never_zero_or_too_small_explains_nothing():
    steps = np.arange(1, 401)
    total = np.where(steps <= 300, 4.0, 5.0) + np.random.default_rng(1).normal(0, 0.05, 400)
    base = {"step": steps, "loss": total}
    on = run_from({**base, "l1_loss": np.where(steps <= 300, 0.0, 0.9)})
    small = run_from({**base, "l1_loss": np.where(steps <= 300, 0.0, 0.1)})
    always = run_from({**base, "l1_loss": np.where(steps <= 300, 0.2, 0.9)})
    found = soft_drift_findings(on)
    assert found and all(f.severity == "info" and f.facts["switched_on_term"]["step"] == 301 for f in found)
    assert all(f.severity != "info" for f in soft_drift_findings(small))
    assert all(f.severity != "info" for f in soft_drift_findings(always))


def soft_drift_findings(run):
    return [f for f in run_detectors(run, Params()) if f.kind in loss_terms.KINDS]
