"""Events any training stdout may carry, whatever the framework: fp16 overflows,
checkpoint saves and loads, OOMs, NCCL watchdog timeouts, tracebacks, kernel Xids.

`extract_events(lines)` takes prepared lines (`line`, `text`, `prefix_rank`, as from
`base.prepared_lines`) and returns `events`-table columns: `line`, `rank`, `kind`,
`time`, `detail` (JSON object as a string) and `step` where the message itself names
one (`loading checkpoint ... at iteration N`); the parser then calls
`base.attach_steps` to fill the other steps from its step records.

Every pattern family runs once over the whole frame (polars regex), after a cheap
keyword pre-filter that leaves only the few candidate lines. A line yields at most one
event; families are tried in the order of `_FAMILIES` (an OOM line is `oom`, not also
a standalone `error`). The run facts (precision, GPU model) are recognised in
`run_facts.py`; the event frames are built by `_event_frames.py`.
"""

from __future__ import annotations

import re

import polars as pl

from spikeforensics.ingest._event_frames import EVENT_COLUMNS, _ret, empty_events
from spikeforensics.ingest.base import SKIP_KIND, detail_expr
from spikeforensics.ingest.run_facts import RUN_FACT_LITERALS, run_fact_events

NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"

# Lines that may hold an event; everything else is dropped before the real patterns run.
KEYWORDS = (
    r"OVERFLOW|overflow|loss scale|Minimum loss scale|[Cc]heckpoint|checkpoint|"
    r"[Ss]aving|[Ss]aved|Writing model|Continuing training|Resuming training|out of memory|"
    r"OutOfMemoryError|Watchdog caught|last completed NCCL work|Bad grad_norm|skipping update|"
    r"Traceback|Error|Exception|NVRM: Xid|optimizer not run"
)

# --- fp16 loss scaling --------------------------------------------------------
# DeepSpeed (and the 2021 `[deepscale]` ZeRO builds, float scales)
DS_OVERFLOW = rf"OVERFLOW! Rank \d+ Skipping step\. Attempted loss scale: ({NUM}), reducing to ({NUM})"
DS_HYSTERESIS = (
    rf"OVERFLOW! Rank \d+ Skipping step\. Attempted loss scale: ({NUM}), but hysteresis is (\d+)\. "
    r"Reducing hysteresis to (\d+)"
)
# bf16 engines print the first sentence only
DS_OVERFLOW_BARE = r"OVERFLOW! Rank \d+ Skipping step\.?\s*$"
# fairseq (`NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: 64.0`)
# and fairseq AMP (`AMP: overflow detected, setting scale to: 8.0`)
# and the older wordings `| WARNING: overflow detected, setting loss scale to: 0.0625` (2018-19) and
# `fairseq.trainer | NOTE: overflow detected, setting loss scale to: 32.0` (2020-21)
FAIRSEQ_OVERFLOW = rf"(?:overflow detected, (?:ignoring gradient, )?setting loss scale to|AMP: overflow detected, setting scale to):?\s*({NUM})"
# PaddlePaddle's dynamic loss scaling as PaddleNLP's Trainer reports it (`optimizer not run, scale_before:
# 0.25, scale_after: 0.125`: the step found non-finite gradients and was skipped)
PADDLE_OVERFLOW = rf"optimizer not run, scale_before:\s*({NUM}),\s*scale_after:\s*({NUM})"
# DeepSpeed non-ZeRO fused optimizer / apex: `Grad overflow on iteration N`
GRAD_OVERFLOW = r"Grad(?:ient)? overflow on iteration:?\s*(\d+)"

# --- checkpoints ----------------------------------------------------------------
# Megatron `saving checkpoint at iteration N to DIR`, nanoGPT/llama2.c `saving checkpoint to out`,
# HF `Saving model checkpoint to DIR`, torchtitan `Saving the checkpoint ...` / `Saving a full
# checkpoint at last step, step N.`, OLMo `Saving sharded checkpoint`, mmengine `Saving checkpoint
# at 500 iterations`, DeepSpeed `[Torch] Checkpoint global_step100 is about to be saved!`,
# fairseq `saved checkpoint DIR (epoch 8 @ 21896 updates, ...)`, llm.c `Writing model to F`,
# Lightning `... saving model to '...ckpt'`.
SAVE = (
    r"(?i)(?:\bsaving (?:the |a full |sharded |unsharded |model |ema )?checkpoint\b|"
    r"\bCheckpoint \S+ is about to be saved|(?:^|\|)\s*saved checkpoint \S|\bWriting model to\b|\bsaving model to\b|"
    r"\bSaved (?:adapter )?weights to\b|\bSaving model and optimizer state at iteration\b|"
    # TensorFlow CheckpointSaverHook._save (tensorflow/python/training/basic_session_run_hooks.py):
    # `Saving checkpoints for 1000 into /dir/model.ckpt.`
    r"\bSaving checkpoints for \d+ into\b)"
)
SAVE_STEP = (
    r"(?i)(?:at iteration\s+(\d+)|@ (\d+) updates|at (\d+) iterations|last step, step (\d+)|"
    r"global_step(\d+)|checkpoint-(\d+)|\bstep[ _-]?(\d+)\b|model_0*(\d+)\.bin|^Iter (\d+): Saved|"
    r"checkpoints for (\d+) into)"
)
SAVE_PATH = r"(?i)\b(?:to|into|saved checkpoint|checkpoint:)\s+'?([^\s']+?)'?\.?(?:\s|$)"
# --- resume -----------------------------------------------------------------------
# Megatron ` loading checkpoint from DIR at iteration N` (not the `successfully loaded` echo),
# OLMo `Loading checkpoint from '<dir>'...`, HF `Continuing training from checkpoint, ...`,
# nanoGPT `Resuming training from out`, torchtitan `Loading the checkpoint from X.` / `... at step N.`,
# fairseq `Loaded checkpoint F (epoch 5 @ 21896 updates)` (2019: `| loaded checkpoint`), NVIDIA
# Tacotron 2 / WaveGlow `Loaded checkpoint 'F' from iteration N` / `Loaded checkpoint 'F' (iteration N)`
# (their save: `Saving model and optimizer state at iteration N to F`, in SAVE).
RESUME = (
    r"(?:(?i:\bloading checkpoint from\b)|Continuing training from checkpoint|Resuming training from|"
    r"Loading the checkpoint|\b[Ll]oaded checkpoint \S+ \(epoch|\bLoaded checkpoint '[^']*' (?:from iteration|\(iteration))"
)
RESUME_STEP = r"(?:at iteration\s+(\d+)|@ (\d+) updates|(?:at step|from iteration|\(iteration) (\d+))"
RESUME_PATH = r"(?:\bfrom|[Ll]oaded checkpoint)\s+'?([^\s',]+?)'?(?:\.\.\.|\.)?(?:\s|$)"
# --- crashes and hardware -----------------------------------------------------------
OOM = r"CUDA out of memory|OutOfMemoryError|CUDA [Ee]rror: out of memory"
NCCL_TIMEOUT = (
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+).*?"
    r"Timeout\(ms\)=(\d+)\)(?: ran for (\d+) milliseconds)?"
)
NCCL_LAST = r"\[(?:PG \S+ )?Rank (\d+)\] Exception \(either an error or timeout\) detected by watchdog at work: (\d+).*?last completed NCCL work: (-?\d+)"
NCCL_RANK = r"\[Rank (\d+)\] Watchdog caught"
BAD_GRAD = rf"Bad grad_norm detected \(grad_norm=({NUM}|[-+]?(?i:nan|inf))\)"
LLMC_SKIP = rf"skipping update due to (loss|grad) z-score of ({NUM}|[-+]?(?i:nan|inf))"
TRACEBACK = r"Traceback \(most recent call last\)"
# `RuntimeError: ...`, `torch.OutOfMemoryError: ...`, `Exception: Current loss scale already at
# minimum ...`, `FloatingPointError: Minimum loss scale reached (0.0001). ...`
EXCEPTION = r"^\s*((?:[A-Za-z_]\w*\.)*((?:[A-Z]\w*)?(?:Error|Exception)))(?::\s*(.*))?$"
MIN_SCALE = r"loss scale already at minimum|Minimum loss scale reached"
XID = r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)(?:,\s*(.*))?"

# A skipped optimizer step that is not an fp16 overflow (llm.c z-score guard, Megatron
# `Bad grad_norm detected`) is `SKIP_KIND`; a non-finite bad grad norm is `nan`.

# --- guarded families ----------------------------------------------------------------
# Wordings that the KEYWORDS pre-filter does not keep (or that must win over the generic
# exception handling). They run only on the lines that hold one of GUARD_LITERALS (one
# literal-alternation scan over the file), so a Megatron log pays a single literal scan for them.
GUARD_LITERALS = [
    "Gradient overflow.",
    "loss scale already at minimum",
    "Minimum loss scale reached",
    "stopping training",
    "Loss became infinite",
    "Training has diverged",
    "Model diverged with loss",
    "ECC",
    "kipping step",
    "kipped step",
    "kipping the step",
    "kipping optimizer",
    "kip step",
    "ignored a value of",  # YOLACT's MovingAverage (`MAVG_IGNORED`)
    "kipped ",  # a skipped batch or update (`USER_SKIP`: the regex decides)
    "kipping ",
    "KIPPED ",
    "KIPPING ",
    *RUN_FACT_LITERALS,  # run facts (run_facts.py)
    "CUDA error",
    "CUDAError",
    "CUDA Error",
    "CUDA status Error",
    "norm is nan",
    "norm is inf",
    "norm is NaN",
    "norm is Inf",
    "is not correct",
    "are invalid",
    "got nan grad",
]
# one regex alternation of escaped literals (faster than `str.contains_any` on long lines)
GUARD_RE = "|".join(re.escape(x) for x in GUARD_LITERALS)
# apex amp: `Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0`
APEX_OVERFLOW = rf"Gradient overflow\.\s+Skipping step, loss scaler \d+ reducing loss scale to\s*({NUM})"
# DeepSpeed `Exception: Current loss scale already at minimum - cannot decrease scale anymore.
# Exiting run.`, fairseq `FloatingPointError: Minimum loss scale reached (0.0001). ...`: an
# overflow at the scale floor that ends the run.
FLOOR = rf"Current loss scale already at minimum|Minimum loss scale reached \(({NUM})\)"
# MAE / DeiT / DINO engine: `Loss is nan, stopping training` (also `Loss is inf, ...`)
NAN_STOP = r"\b[Ll]oss is (\S+?),? stopping training"
# TensorFlow NanTensorHook (tensorflow/python/training/basic_session_run_hooks.py) before it raises
# NanLossDuringTrainingError: `ERROR:tensorflow:Model diverged with loss = NaN.` (no step printed);
# OpenNMT-tf raises `RuntimeError: Model diverged with loss = NaN.`
TF_DIVERGED = r"\bModel diverged with loss = ([A-Za-z]+)"
# detectron2 `FloatingPointError: Loss became infinite or NaN at iteration=2137!`
D2_NONFINITE = r"Loss became infinite or NaN at iteration=(\d+)"
# detectron2's proposal and box-head checks (modeling/proposal_generator/proposal_utils.py,
# roi_heads/fast_rcnn.py): `FloatingPointError: Predicted boxes or scores contain Inf/NaN.
# Training has diverged.` (no iteration in the message)
D2_DIVERGED = r"contain Inf/NaN\. Training has diverged"
# `RuntimeError: CUDA error: uncorrectable ECC error encountered`, `cudaErrorECCUncorrectable`,
# `CUDA_ERROR_ECC_UNCORRECTABLE`, `cuda runtime error (39) : uncorrectable ECC error encountered`
ECC_UNCORRECTABLE = r"(?i:uncorrectable ECC error)|ECCUncorrectable|ECC_UNCORRECTABLE"
# a CUDA runtime error that is neither OOM nor ECC (those have their own kinds), as Python or
# C++ print it: `RuntimeError: CUDA error: an illegal memory access was encountered`,
# `what():  CUDA error: unknown error` after `terminate called after throwing an instance of
# 'c10::CUDAError'` (NCCL watchdog): an `error` event, reason `cuda_error`; darknet's
# `check_error` (src/dark_cuda.c) prints ` CUDA Error: an illegal instruction was encountered`,
# ` CUDA Error Prev: ...` and `CUDA status Error: file: ...dark_cuda.c : cuda_push_array() : line: 469 ...`
CUDA_ERROR = r"CUDA (?:error|Error(?: Prev)?|status Error): ([^\r\n]{1,300})"
CUDA_NOT = r"CUDA [Ee]rror: out of memory"
# a trainer saying a step's gradient norm was non-finite (and that it skipped the update):
# ESPnet `WARNING: The grad norm is nan. Skipping updating the model.`, `grad norm is nan. Do not
# update model.`; the same wording from custom loops (`gradient norm is inf`)
GRAD_NONFINITE = r"(?i)\bgrad(?:ient)?s?[ _-]?norm (?:is|=|:)\s*(nan|inf|infinity)\b"
# ESPnet's loss sanity check: `WARNING: loss (=250000064.000000) is not correct` (the update is skipped)
LOSS_INVALID = rf"\bloss \(=\s*({NUM}|[-+]?(?i:nan|inf))\s*\) is not correct"
# ESPnet gives up: `The gradients at all steps are invalid in this epoch. ... This training was stopped`
GRADS_INVALID_STOP = r"(?i)gradients at all steps are invalid"
# ESPnet CTC: `5/42 samples got nan grad. These were ignored for CTC loss.`, `All samples in this
# mini-batch got nan grad. Returning nan value instead of CTC loss`
SAMPLES_NAN_GRAD = r"(?i)samples?(?: in this mini-batch)? got nan grad"
# YOLACT `train.py`: `Warning: Moving average ignored a value of inf` (`MovingAverage.append` drops a non-finite
# loss term from its printed average; the iteration's update is skipped when the loss is not finite): a
# non-finite loss, skipped
MAVG_IGNORED = r"(?i)moving average ignored a value of (-?(?:nan|inf))\b"
# user prints that an optimizer step was skipped (`Gradient overflow. Skipping step` without
# a scale, `skipping step due to inf/nan`, `Skipped optimizer step: non-finite grad norm`);
# DeepSpeed's own `OVERFLOW! ... Skipping step` is an overflow (handled above)
# a user guard's `Iter 40: SKIPPED non-finite batch (loss 1.23, norm nan) -- weights untouched` (mlx-lm#1658): a
# skipped batch or update is a skipped step too
USER_SKIP = r"(?i)\bskip(?:ping|ped)? (?:the |this |an |a |optimizer |current |non-?finite |nan |inf |bad )*(?:step|batch|update)\b"
# the norm such a line names (`norm nan`; minFM's `detected nan/inf/spiky gradient (norm=2.1966...); skipping
# optimizer step`): the skipped step's grad norm. A non-finite one makes the line a `nan` event; a finite one
# is a guard's threshold at work (the step stays a `skipped_step` that carries the norm)
SKIP_NORM = rf"(?i)\bnorm\W{{0,3}}(nan|inf|infinity|{NUM})(?:\W|$)"
NONFINITE_WORD = r"(?i)^[-+]?(?:nan|inf|infinity)$"
# the step such a line names (`Iter 40: SKIPPED ...`, `step 1200: skipping step`): the event's own step
SKIP_STEP = r"(?i)\b(?:iter|iteration|step)\s*[:#=]?\s*(\d+)\b"
# a skip for want of memory or for an over-long input (fairseq's `ran out of memory, skipping batch`, a too-long
# sample) is no skipped non-finite update
SKIP_NOT_NONFINITE = r"(?i)out of memory|\boom\b|too long|exceed|max(?:imum)?[ _]length"


def _num(expr: pl.Expr) -> pl.Expr:
    return expr.str.to_lowercase().cast(pl.Float64, strict=False)


def _scale_overflow(rows: pl.DataFrame, old: str, new: str, source: str) -> pl.DataFrame:
    """`overflow` events of lines that print the scale before and after (columns `old`, `new`)."""
    return _ret(
        rows,
        "overflow",
        lambda: detail_expr(
            floats={"old_scale": _num(pl.col(old)), "new_scale": _num(pl.col(new))},
            strings={"source_format": pl.lit(source)},
        ),
    )


def _not_word(path: pl.Expr) -> pl.Expr:
    """`Continuing training from checkpoint, ...` names no path."""
    return pl.when(~path.is_in(["checkpoint", "checkpoint,"])).then(path)


def _first_int(*groups: pl.Expr) -> pl.Expr:
    return pl.coalesce([g.cast(pl.Int64, strict=False) for g in groups])


def _loss_scale(cand: pl.DataFrame) -> tuple[pl.DataFrame, list[pl.DataFrame]]:
    """Overflow and hysteresis lines -> (remaining candidates, event frames)."""
    text = pl.col("text")
    hys = text.str.extract_groups(DS_HYSTERESIS)
    ovf = text.str.extract_groups(DS_OVERFLOW)
    fs = text.str.extract(FAIRSEQ_OVERFLOW, 1)
    go = text.str.extract(GRAD_OVERFLOW, 1)
    pd = text.str.extract_groups(PADDLE_OVERFLOW)
    c = cand.with_columns(
        pd.struct.field("1").alias("_p_old"),
        pd.struct.field("2").alias("_p_new"),
        hys.struct.field("1").alias("_h_scale"),
        hys.struct.field("2").alias("_h_from"),
        hys.struct.field("3").alias("_h_to"),
        ovf.struct.field("1").alias("_o_old"),
        ovf.struct.field("2").alias("_o_new"),
        fs.alias("_f_new"),
        go.alias("_g_iter"),
        text.str.contains(DS_OVERFLOW_BARE).alias("_bare"),
    )
    out = []
    h = c.filter(pl.col("_h_scale").is_not_null())
    out.append(
        _ret(
            h,
            "hysteresis",
            lambda: detail_expr(
                floats={"old_scale": _num(pl.col("_h_scale")), "new_scale": _num(pl.col("_h_scale"))},
                ints={"hysteresis": pl.col("_h_from"), "new_hysteresis": pl.col("_h_to")},
                strings={"source_format": pl.lit("deepspeed")},
            ),
        )
    )
    o = c.filter(pl.col("_o_old").is_not_null() & pl.col("_h_scale").is_null())
    out.append(_scale_overflow(o, "_o_old", "_o_new", "deepspeed"))
    b = c.filter(pl.col("_bare") & pl.col("_o_old").is_null() & pl.col("_h_scale").is_null())
    out.append(_ret(b, "overflow", lambda: detail_expr(strings={"source_format": pl.lit("deepspeed")})))
    # fairseq halves the scale (scale_factor 2) on overflow: old_scale is inferred.
    f = c.filter(pl.col("_f_new").is_not_null())
    out.append(
        _ret(
            f,
            "overflow",
            lambda: detail_expr(
                floats={"old_scale": _num(pl.col("_f_new")) * 2, "new_scale": _num(pl.col("_f_new"))},
                bools={"old_scale_inferred": pl.lit(True)},
                strings={"source_format": pl.lit("fairseq")},
            ),
        )
    )
    p = c.filter(pl.col("_p_new").is_not_null())
    out.append(_scale_overflow(p, "_p_old", "_p_new", "paddle"))
    g = c.filter(pl.col("_g_iter").is_not_null())
    out.append(
        _ret(
            g,
            "overflow",
            lambda: detail_expr(ints={"iteration": pl.col("_g_iter")}),
            step=pl.col("_g_iter").cast(pl.Int64, strict=False),
        )
    )
    used = (
        pl.col("_h_scale").is_not_null()
        | pl.col("_o_old").is_not_null()
        | pl.col("_bare")
        | pl.col("_f_new").is_not_null()
        | pl.col("_g_iter").is_not_null()
        | pl.col("_p_new").is_not_null()
    )
    return c.filter(~used).select(cand.columns), out


def _guarded(extra: pl.DataFrame) -> tuple[pl.DataFrame, list[pl.DataFrame]]:
    """The guarded families on the lines that hold a GUARD_LITERALS string: apex overflows,
    overflow at the loss-scale floor, `Loss is nan, stopping training`, detectron2's
    non-finite loss, uncorrectable ECC errors, user skip notices; then the run facts.
    Returns (lines claimed by an event, event frames)."""
    text = pl.col("text")
    c = extra.with_columns(
        text.str.extract(APEX_OVERFLOW, 1).alias("_apex"),
        text.str.contains(FLOOR).alias("_floor"),
        text.str.extract(FLOOR, 1).alias("_floor_scale"),
        pl.coalesce(text.str.extract(NAN_STOP, 1), text.str.extract(TF_DIVERGED, 1)).alias("_stop"),
        text.str.extract(D2_NONFINITE, 1).alias("_d2"),
        text.str.contains(D2_DIVERGED).alias("_d2div"),
        text.str.contains(ECC_UNCORRECTABLE).alias("_ecc"),
        pl.when(~text.str.contains(CUDA_NOT)).then(text.str.extract(CUDA_ERROR, 1)).alias("_cuda"),
        text.str.extract(GRAD_NONFINITE, 1).alias("_gnan"),
        text.str.extract(LOSS_INVALID, 1).alias("_linv"),
        text.str.contains(GRADS_INVALID_STOP).alias("_gstop"),
        text.str.contains(SAMPLES_NAN_GRAD).alias("_snan"),
        text.str.extract(MAVG_IGNORED, 1).alias("_mavg"),
        (
            text.str.contains(USER_SKIP)
            & ~text.str.contains(SKIP_NOT_NONFINITE)
            & ~text.str.contains("OVERFLOW!", literal=True)
            & ~text.str.contains(r"(?i)overflow on iteration")
        ).alias("_skip"),
    )
    out = []
    apex = c.filter(pl.col("_apex").is_not_null())
    out.append(
        _ret(
            apex,
            "overflow",
            lambda: detail_expr(
                floats={"old_scale": _num(pl.col("_apex")) * 2, "new_scale": _num(pl.col("_apex"))},
                bools={"old_scale_inferred": pl.lit(True)},
                strings={"source_format": pl.lit("apex")},
            ),
        )
    )
    rest = c.filter(pl.col("_apex").is_null())
    floor = rest.filter(pl.col("_floor"))
    out.append(
        _ret(
            floor,
            "overflow",
            lambda: detail_expr(
                floats={"old_scale": _num(pl.col("_floor_scale"))},
                bools={"at_floor": pl.lit(True), "fatal": pl.lit(True)},
                strings={
                    "reason": pl.lit("min_loss_scale"),
                    "message": pl.col("text").str.strip_chars().str.slice(0, 300),
                },
            ),
        )
    )
    rest = rest.filter(~pl.col("_floor"))
    d2 = pl.col("_d2").is_not_null() | pl.col("_d2div")
    nonfinite = rest.filter(pl.col("_stop").is_not_null() | d2)
    value = pl.coalesce(
        pl.col("_stop").str.to_lowercase().str.strip_chars("+"),
        pl.when(d2).then(pl.lit("nan_or_inf")),
    )
    out.append(
        _ret(
            nonfinite,
            "nan",
            lambda: detail_expr(
                ints={"iteration": pl.col("_d2")},
                strings={
                    "metric": pl.lit("loss"),
                    "value": value,
                    "message": pl.col("text").str.strip_chars().str.slice(0, 300),
                },
                bools={"stopped": pl.lit(True)},
            ),
            step=pl.col("_d2").cast(pl.Int64, strict=False),
        )
    )
    rest = rest.filter(pl.col("_stop").is_null() & ~d2)
    ecc = rest.filter(pl.col("_ecc"))
    out.append(
        _ret(
            ecc,
            "ecc",
            lambda: detail_expr(
                bools={"uncorrectable": pl.lit(True)},
                strings={"message": pl.col("text").str.strip_chars().str.slice(0, 300)},
            ),
        )
    )
    rest = rest.filter(~pl.col("_ecc"))
    cuda = rest.filter(pl.col("_cuda").is_not_null())
    out.append(
        _ret(
            cuda,
            "error",
            lambda: detail_expr(
                strings={
                    "exception": pl.lit("CUDAError"),
                    "message": pl.concat_str(pl.lit("CUDA error: "), pl.col("_cuda").str.strip_chars()),
                    "reason": pl.lit("cuda_error"),
                },
            ),
        )
    )
    rest = rest.filter(pl.col("_cuda").is_null())
    msg = pl.col("text").str.strip_chars().str.slice(0, 300)
    gnan = rest.filter(pl.col("_gnan").is_not_null() | pl.col("_gstop") | pl.col("_snan"))
    out.append(
        _ret(
            gnan,
            "nan",
            lambda: detail_expr(
                strings={
                    "metric": pl.when(pl.col("_snan")).then(pl.lit("sample_grad")).otherwise(pl.lit("grad_norm")),
                    "value": pl.coalesce(pl.col("_gnan").str.to_lowercase(), pl.lit("nan")),
                    "message": msg,
                },
                bools={
                    "skipped": pl.col("_gnan").is_not_null()
                    & pl.col("text").str.contains(r"(?i)skip|not update|ignor"),
                    "stopped": pl.col("_gstop"),
                },
            ),
        )
    )
    rest = rest.filter(pl.col("_gnan").is_null() & ~pl.col("_gstop") & ~pl.col("_snan"))
    mavg = rest.filter(pl.col("_mavg").is_not_null())
    out.append(
        _ret(
            mavg,
            "nan",
            lambda: detail_expr(
                strings={"metric": pl.lit("loss"), "value": pl.col("_mavg").str.to_lowercase(), "message": msg},
                bools={"skipped": pl.lit(True)},
            ),
        )
    )
    rest = rest.filter(pl.col("_mavg").is_null())
    linv = rest.filter(pl.col("_linv").is_not_null())
    out.append(
        _ret(
            linv,
            SKIP_KIND,
            lambda: detail_expr(
                floats={"value": _num(pl.col("_linv"))},
                strings={"metric": pl.lit("loss"), "reason": pl.lit("invalid_loss"), "message": msg},
                bools={"skipped": pl.lit(True)},
            ),
        )
    )
    rest = rest.filter(pl.col("_linv").is_null())
    skip = rest.filter(pl.col("_skip")).with_columns(pl.col("text").str.extract(SKIP_NORM, 1).alias("_snorm"))
    out.append(
        _ret(
            skip,
            # a skip that names a non-finite grad norm is that value, skipped (as ESPnet's `grad norm is nan`)
            pl.when(pl.col("_snorm").str.contains(NONFINITE_WORD)).then(pl.lit("nan")).otherwise(pl.lit(SKIP_KIND)),
            lambda: detail_expr(
                strings={
                    "reason": pl.lit("user_skip"),
                    "metric": pl.when(pl.col("_snorm").is_not_null()).then(pl.lit("grad_norm")),
                    "value": pl.col("_snorm").str.to_lowercase(),
                    "message": pl.col("text").str.strip_chars().str.slice(0, 300),
                },
                bools={"skipped": pl.lit(True)},
            ),
            step=pl.col("text").str.extract(SKIP_STEP, 1).cast(pl.Int64, strict=False),
        )
    )
    out = [f for f in out if f.height]
    claimed = pl.concat([f.select("line") for f in out]) if out else pl.DataFrame(schema={"line": pl.Int64})
    return claimed, out + run_fact_events(extra)


def _nccl(cand: pl.DataFrame) -> tuple[pl.DataFrame, list[pl.DataFrame]]:
    """Watchdog timeouts; `last_completed` comes from the `Exception ... detected by
    watchdog` line the same rank prints next."""
    text = pl.col("text")
    g = text.str.extract_groups(NCCL_TIMEOUT)
    c = cand.with_columns(
        g.struct.field("1").cast(pl.Int64, strict=False).alias("_seq"),
        g.struct.field("2").alias("_op"),
        g.struct.field("3").cast(pl.Int64, strict=False).alias("_tmo"),
        g.struct.field("4").cast(pl.Int64, strict=False).alias("_ran"),
        pl.coalesce(pl.col("prefix_rank"), text.str.extract(NCCL_RANK, 1).cast(pl.Int32, strict=False)).alias("_rank"),
    )
    hits = c.filter(pl.col("_seq").is_not_null())
    last = (
        c.select("line", text.str.extract_groups(NCCL_LAST).alias("_g"), pl.col("prefix_rank"))
        .unnest("_g")
        .filter(pl.col("1").is_not_null())
        .select(
            pl.col("line").alias("_lline"),
            pl.coalesce(pl.col("prefix_rank"), pl.col("1").cast(pl.Int32, strict=False)).alias("_rank"),
            pl.col("2").cast(pl.Int64, strict=False).alias("_lseq"),
            pl.col("3").cast(pl.Int64, strict=False).alias("_last"),
        )
        .sort("_lline")
    )
    is_last = text.str.contains(NCCL_LAST)
    if hits.height:
        hits = (
            hits.sort("line")
            .join_asof(last, left_on="line", right_on="_lline", by="_rank", strategy="forward", check_sortedness=False)
            .with_columns(pl.when(pl.col("_lseq") == pl.col("_seq")).then(pl.col("_last")).alias("_last"))
        )
        ev = _ret(
            hits.with_columns(pl.col("_rank").alias("prefix_rank")),
            "nccl_timeout",
            lambda: detail_expr(
                ints={
                    "seq": pl.col("_seq"),
                    "timeout_ms": pl.col("_tmo"),
                    "ran_ms": pl.col("_ran"),
                    "last_completed": pl.col("_last"),
                },
                strings={"op": pl.col("_op")},
            ),
        )
    else:
        ev = empty_events()
    return c.filter(pl.col("_seq").is_null() & ~is_last).select(cand.columns), [ev]


def _simple(cand: pl.DataFrame) -> tuple[pl.DataFrame, list[pl.DataFrame]]:
    """One-line events: saves, resumes, OOM, Xid, bad grad norm, llm.c skips."""
    text = pl.col("text")
    c = cand.with_columns(
        text.str.extract_groups(XID).alias("_xid"),
        text.str.extract_groups(BAD_GRAD).alias("_bad"),
        text.str.extract_groups(LLMC_SKIP).alias("_skip"),
        text.str.contains(OOM).alias("_oom"),
        text.str.contains(RESUME).alias("_resume"),
        text.str.contains(SAVE).alias("_save"),
    )
    out = []
    xid = c.filter(pl.col("_xid").struct.field("1").is_not_null())
    out.append(
        _ret(
            xid,
            "xid",
            lambda: detail_expr(
                ints={"code": pl.col("_xid").struct.field("2")},
                strings={
                    "pci": pl.col("_xid").struct.field("1").str.to_lowercase(),
                    "message": pl.col("_xid").struct.field("3").str.strip_chars(),
                },
            ),
        )
    )
    rest = c.filter(pl.col("_xid").struct.field("1").is_null())
    bad_val = _num(pl.col("_bad").struct.field("1"))
    bad = rest.filter(bad_val.is_not_null())
    out.append(
        _ret(
            bad,
            pl.when(bad_val.is_finite()).then(pl.lit(SKIP_KIND)).otherwise(pl.lit("nan")),
            lambda: detail_expr(
                floats={"value": bad_val},
                strings={"metric": pl.lit("grad_norm"), "reason": pl.lit("bad_grad_norm")},
                bools={"skipped": pl.lit(True)},
            ),
        )
    )
    rest = rest.filter(bad_val.is_null())
    z = _num(pl.col("_skip").struct.field("2"))
    skip = rest.filter(pl.col("_skip").struct.field("1").is_not_null())
    out.append(
        _ret(
            skip,
            SKIP_KIND,
            lambda: detail_expr(
                floats={"zscore": z},
                strings={"reason": pl.concat_str(pl.col("_skip").struct.field("1"), pl.lit("_zscore"))},
                bools={"skipped": pl.lit(True)},
            ),
        )
    )
    rest = rest.filter(pl.col("_skip").struct.field("1").is_null())
    oom = rest.filter(pl.col("_oom"))
    out.append(_ret(oom, "oom", lambda: detail_expr(strings={"message": text.str.strip_chars().str.slice(0, 300)})))
    rest = rest.filter(~pl.col("_oom"))
    res_g = text.str.extract_groups(RESUME_STEP)
    res = rest.filter(pl.col("_resume"))
    out.append(
        _ret(
            res,
            "resume",
            lambda: detail_expr(
                strings={
                    "path": _not_word(text.str.extract(RESUME_PATH, 1)),
                    "message": text.str.strip_chars().str.slice(0, 300),
                },
            ),
            step=_first_int(res_g.struct.field("1"), res_g.struct.field("2"), res_g.struct.field("3")),
        )
    )
    rest = rest.filter(~pl.col("_resume"))
    sv_g = text.str.extract_groups(SAVE_STEP)
    sv = rest.filter(pl.col("_save"))
    out.append(
        _ret(
            sv,
            "checkpoint_save",
            lambda: detail_expr(
                strings={"path": text.str.extract(SAVE_PATH, 1), "message": text.str.strip_chars().str.slice(0, 300)},
            ),
            step=_first_int(*[sv_g.struct.field(str(i)) for i in range(1, 11)]),
        )
    )
    rest = rest.filter(~pl.col("_save"))
    return rest.select(cand.columns), out


def _errors(cand: pl.DataFrame, all_lines: pl.DataFrame) -> list[pl.DataFrame]:
    """`error` events: one per Python traceback (detail = the exception line that ends
    it, looked up in `all_lines`), plus exception lines left in `cand` that end no
    traceback."""
    text = pl.col("text")
    tb = cand.filter(text.str.contains(TRACEBACK)).with_columns(pl.col("prefix_rank").fill_null(-1).alias("_r"))
    exc = all_lines.select(
        "line",
        "prefix_rank",
        pl.col("prefix_rank").fill_null(-1).alias("_r"),
        text.str.extract_groups(EXCEPTION).alias("_e"),
        text,
    ).filter(pl.col("_e").struct.field("1").is_not_null())
    exc = exc.with_columns(
        pl.col("_e").struct.field("1").alias("_etype"),
        pl.col("_e").struct.field("3").str.strip_chars().str.slice(0, 300).alias("_emsg"),
    ).drop("_e")
    min_scale = pl.col("_emsg").fill_null("").str.contains(MIN_SCALE)
    reason = pl.when(min_scale).then(pl.lit("min_loss_scale"))
    out = []
    claimed = pl.DataFrame(schema={"_eline": pl.Int64})
    if tb.height:
        # the exception line that ends a traceback: the first one after it, same rank,
        # before the next traceback of that rank
        nxt_tb = tb.select(pl.col("line").alias("_nt"), "_r").sort("_nt")
        tbj = (
            tb.sort("line")
            .join_asof(
                exc.select(pl.col("line").alias("_eline"), "_r", "_etype", "_emsg").sort("_eline"),
                left_on="line",
                right_on="_eline",
                by="_r",
                strategy="forward",
                check_sortedness=False,
            )
            .join_asof(
                nxt_tb,
                left_on="line",
                right_on="_nt",
                by="_r",
                strategy="forward",
                allow_exact_matches=False,
                check_sortedness=False,
            )
        )
        ok = pl.col("_eline").is_not_null() & (pl.col("_nt").is_null() | (pl.col("_eline") < pl.col("_nt")))
        tbj = tbj.with_columns(
            pl.when(ok).then(pl.col("_etype")).alias("_etype"),
            pl.when(ok).then(pl.col("_emsg")).alias("_emsg"),
            pl.when(ok).then(pl.col("_eline")).alias("_eline"),
        )
        claimed = tbj.select("_eline").drop_nulls()
        out.append(
            _ret(
                tbj,
                "error",
                lambda: detail_expr(
                    strings={"exception": pl.col("_etype"), "message": pl.col("_emsg"), "reason": reason},
                    bools={"traceback": pl.lit(True)},
                ),
            )
        )
    alone = exc.join(claimed, left_on="line", right_on="_eline", how="anti")
    alone = alone.join(cand.select("line"), on="line", how="semi")  # not already another event
    out.append(
        _ret(
            alone,
            "error",
            lambda: detail_expr(
                strings={"exception": pl.col("_etype"), "message": pl.col("_emsg"), "reason": reason},
            ),
        )
    )
    return out


def extract_events(lines: pl.DataFrame) -> pl.DataFrame:
    """Events found in prepared lines (`line`, `text`, `prefix_rank`), sorted by line.
    Returns `line`, `step` (only where the text names it), `rank`, `kind`, `time`, `detail`."""
    if lines.height == 0:
        return empty_events()
    if "prefix_rank" not in lines.columns:
        lines = lines.with_columns(pl.lit(None, dtype=pl.Int32).alias("prefix_rank"))
    base = lines.select(pl.col("line").cast(pl.Int64), pl.col("text"), pl.col("prefix_rank").cast(pl.Int32))
    cand = base.filter(pl.col("text").str.contains(KEYWORDS))
    extra = base.filter(pl.col("text").str.contains(GUARD_RE))
    if cand.height == 0 and extra.height == 0:
        return empty_events()
    frames: list[pl.DataFrame] = []
    all_cand = cand  # exception lines that end a traceback are looked up here
    if extra.height:
        claimed, found = _guarded(extra)
        frames += found
        if claimed.height:
            cand = cand.join(claimed, on="line", how="anti")
    cand, found = _loss_scale(cand)
    frames += found
    cand, found = _nccl(cand)
    frames += found
    cand, found = _simple(cand)
    frames += found
    frames += _errors(cand, all_cand)
    frames = [f for f in frames if f.height]
    if not frames:
        return empty_events()
    return pl.concat([f.cast(EVENT_COLUMNS) for f in frames]).sort("line")


# ---------------------------------------------------------------------------
# As a parser of its own: a stdout/stderr log that has events but no step records a
# specific parser knows (a crash log, an NCCL watchdog dump pasted from a job's
# stderr). Confidence stays below every record parser's.

NAME = "stdout_events"
SNIFF_RE = (
    r"Watchdog caught collective operation timeout|Traceback \(most recent call last\)|"
    r"CUDA out of memory|OutOfMemoryError|OVERFLOW! Rank \d+ Skipping step|"
    r"gradient overflow detected|ProcessGroupNCCL\.cpp|overflow detected, setting loss scale|"
    r"Gradient overflow\.\s+Skipping step|loss scale already at minimum|Loss is \S+, stopping training|"
    r"Loss became infinite or NaN|(?i:uncorrectable ECC error)|CUDA (?:[Ee]rror|status Error): |"
    r"(?i:grad(?:ient)?s?[ _-]?norm is (?:nan|inf))|\bloss \(=[^)]*\) is not correct|(?i:gradients at all steps are invalid|got nan grad)|"
    # run facts alone (a pasted nvidia-smi, a command line, an AMP banner) are still evidence
    r"Product Name\s*:|\bGPU \d+: (?:Tesla|NVIDIA)|Using (?:16[ -]?bit|bfloat16) |cast_model_type\s*:|"
    r"(?:^|\s)--(?:fp16|bf16)\b|\b(?:fp16|bf16)\s*=\s*True|\"(?:fp16|bf16)\":\s*\{"
)
SNIFF_CONFIDENCE = 0.5


def sniff(sample) -> float:
    if not sample.lines:
        return 0.0
    hits = pl.Series(sample.lines, dtype=pl.String).str.contains(SNIFF_RE).sum()
    return SNIFF_CONFIDENCE if hits else 0.0


def parse(src):
    from spikeforensics.ingest.base import ParseResult, prepared_lines

    result = ParseResult()
    events = extract_events(prepared_lines(src))
    result.add("events", events.with_columns(pl.lit(0, dtype=pl.Int32).alias("attempt")))
    return result
