"""TensorFlow 1.x/2.x Estimator and MonitoredTrainingSession logs (tf.estimator, tf.contrib.learn,
TPUEstimator: BERT, tensor2tensor, the Object Detection API, ...):

    INFO:tensorflow:loss = 96.96749, step = 0                         # the first one: no time
    INFO:tensorflow:global_step/sec: 0.803899                         # StepCounterHook
    INFO:tensorflow:loss = 4.264659, step = 100 (124.394 sec)         # LoggingTensorHook
    I0521 14:43:59.269938 140033274427136 basic_session_run_hooks.py:260] loss = 1.3336712, step = 400 (85.220 sec)
    INFO:tensorflow:step = 0, loss = 9.76205                          # older hooks: step first
    INFO:tensorflow:global_steps = 0, loss = 96.96749                 # a user's own LoggingTensorHook dict
    INFO:tensorflow:Saving dict for global step 1000: global_step = 1000, loss = 0.32, masked_lm_accuracy = 0.6
    INFO:tensorflow:Loss for final step: 0.3.

Printing code:
- `tensorflow/tensorflow` `tensorflow/python/training/basic_session_run_hooks.py`:
  `LoggingTensorHook._log_tensors` prints `", ".join("%s = %s" % (tag, value))` for its tags (sorted
  when given a dict: the Estimator's own hook is `{'loss': loss, 'step': global_step}`, hence
  `loss = X, step = N`), then ` (%.3f sec)` since the last print, except on the first print;
  `StepCounterHook._log_and_record` prints `"%s: %g"` with tag `global_step/sec` (TPUEstimator's
  own step counter, `tensorflow_estimator/python/estimator/tpu/tpu_estimator.py`, prints it with
  `examples/sec: %g`, as the BERT and AutoML pastes show); `NanTensorHook` logs
  `Model diverged with loss = NaN.` before raising `NanLossDuringTrainingError` (an event, read by
  `text_events`, as is CheckpointSaverHook's `Saving checkpoints for N into PATH.`).
- `tensorflow/estimator` `tensorflow_estimator/python/estimator/estimator.py`: `train()` logs
  `Loss for final step: %s.` (a summary record, no step); `_write_dict_to_summary` logs
  `Saving dict for global step %d: %s` with `_dict_to_str` = `k = v` pairs joined by `, ` in sorted
  key order: an eval record at that step, its names with an `eval_` prefix (`loss` -> `eval_loss`;
  `global_step` is the step, not a metric; keys may hold `/`, spaces and parentheses, as the Object
  Detection API's `DetectionBoxes_Precision/mAP (large)`).

Each message goes through `tf.logging`: `INFO:tensorflow:` (Python's default handler) and, from
TF 1.14 on, also or only absl's glog-style prefix `I0521 14:43:59.269938 <thread> file.py:260] `;
both copies of one hook line are one record (same step, consecutive). A line is a step record when
it is nothing but `tag = value` pairs (optionally with the `(T sec)` tail), after one of those
prefixes, and one tag is the step (`step`, `global_step`, `global_steps`); values are numpy scalars
as `%s` prints them (`2.3025851`, `nan`, `inf`, `-inf`, `1e-04`). A hook line without a step tag
(`cross_entropy = 0.69, learning_rate = 1e-04, total_loss = 1.04`) is not a record here. The
`global_step/sec` / `examples/sec` value is kept as `steps_per_s` / `examples_per_s` on the next
step record (the StepCounterHook prints just before the LoggingTensorHook of the same step).
Step = the printed global step (steps done; mode "done"). `(T sec)` -> `interval_s`.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._lines import GLOG_PREFIX
from spikeforensics.ingest.base import (
    ParseResult,
    SniffSample,
    SourceFile,
    extract_time,
    named_values,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "tf_estimator"
# numbers as numpy's `%s` prints a scalar (no thousands separators: `, ` separates the pairs)
N = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf|infinity)"
# `INFO:tensorflow:` (anywhere: a launcher prefix may stand before it), absl/glog
# `I0521 14:43:59.269938 140033274427136 basic_session_run_hooks.py:260] ` (thread id or name),
# or a logging.Formatter naming the `tensorflow` logger (`... - tensorflow - INFO - `)
TF_PREFIX = (
    rf"(?:\bINFO:tensorflow:|^{GLOG_PREFIX}"
    r"|\btensorflow\s*[-|:]\s*INFO\s*[-|:]\s*)"
)
# a tag is a name or a tensor name (`loss:0`), never a sentence with `: ` in it
PAIR_SHAPE = r"[^=,:\s](?:[^=,:]|:[^\s=,])*? = \S+"
# the whole body of a LoggingTensorHook line: pairs, then the optional ` (12.345 sec)`
HOOK = rf"^{PAIR_SHAPE}(?:, {PAIR_SHAPE})*(?: \((?P<sec>{N}) sec\))?\s*$"
SEC_TAIL = rf" \(({N}) sec\)\s*$"
STEP_KEY = r"(?i)^(?:global[_ ]?)?steps?$"
STEP_PAIR = r"(?i)(?:^|, )(?:global[_ ]?)?steps? = \d"
DICT = r"^Saving dict for global step (\d+): (.*)$"
FINAL = rf"^Loss for final step: ({N})\.?\s*$"
RATE = rf"^(global_step|examples)/sec: ({N})\s*$"
ONE_PAIR = rf"^(?P<k>[^=]+?) = (?P<v>{N})$"


def sniff(sample: SniffSample) -> float:
    hook = rf"{TF_PREFIX}(?:[^=,]+ = \S+, )*(?i:(?:global[_ ]?)?steps?) = \d+(?:,| \(|\s*$)"
    if sniff_share(sample, hook):
        return 0.8
    tail = rf"{TF_PREFIX}(?:Saving dict for global step \d+: |Loss for final step: )"
    return 0.6 if sniff_share(sample, tail) else 0.0


def _pairs(frame: pl.DataFrame, body: str) -> pl.DataFrame:
    """(line, k, v) from the `k = v` pieces of `body` joined by `, `."""
    return (
        frame.select("line", pl.col(body).str.split(", ").alias("_p"))
        .explode("_p")
        .with_columns(pl.col("_p").str.strip_chars().str.extract_groups(ONE_PAIR).alias("_g"))
        .unnest("_g")
        .filter(pl.col("v").is_not_null())
        .select("line", "k", "v")
    )


def _meta(frame: pl.DataFrame, step: pl.Expr, kind: str) -> pl.DataFrame:
    return frame.select(
        "line",
        step.alias("step"),
        "prefix_rank",
        pl.lit(kind).alias("record_kind"),
        extract_time(pl.col("text")).alias("time"),
    )


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    tf = lines.filter(text.str.contains(TF_PREFIX)).with_columns(
        text.str.replace(rf"^.*?{TF_PREFIX}", "").str.strip_chars_end().alias("_body")
    )
    body = pl.col("_body")
    # LoggingTensorHook lines that name the step
    hook = tf.filter(body.str.contains(HOOK) & body.str.contains(STEP_PAIR) & ~body.str.contains(DICT))
    pairs = _pairs(hook.with_columns(body.str.replace(SEC_TAIL, "")), "_body")
    is_step = pl.col("k").str.contains(STEP_KEY)
    steps = pairs.filter(is_step).unique("line", keep="first").select("line", pl.col("v").alias("_step"))
    hook = hook.join(steps, on="line")
    train_values = named_values(pairs.filter(~is_step))
    sec = hook.select("line", pl.lit("interval_s").alias("name"), body.str.extract(SEC_TAIL, 1).alias("v"))
    sec = sec.filter(pl.col("v").is_not_null()).select("line", "name", pl.col("v").cast(pl.Float64).alias("value"))
    train = _meta(hook, step_int(pl.col("_step").cast(pl.Float64, strict=False)), "train")
    # StepCounterHook rates go on the next step record
    rates = tf.filter(body.str.contains(RATE)).select(
        pl.col("line").alias("_rate_line"),
        body.str.extract(RATE, 1)
        .replace_strict({"global_step": "steps_per_s", "examples": "examples_per_s"})
        .alias("name"),
        body.str.extract(RATE, 2).str.to_lowercase().cast(pl.Float64, strict=False).alias("value"),
    )
    if rates.height and train.height:
        rates = (
            rates.sort("_rate_line")
            .join_asof(
                train.select(pl.col("line").alias("_rec")).sort("_rec"),
                left_on="_rate_line",
                right_on="_rec",
                strategy="forward",
            )
            .filter(pl.col("_rec").is_not_null())
            .select(pl.col("_rec").alias("line"), "name", "value")
            .unique(["line", "name"], keep="first")
        )
    else:
        rates = rates.select(pl.col("_rate_line").alias("line"), "name", "value").clear()
    # Estimator.evaluate's dict: an eval record at its global step
    evals = tf.filter(body.str.contains(DICT))
    eval_pairs = _pairs(evals.with_columns(body.str.extract(DICT, 2).alias("_d")), "_d")
    eval_values = named_values(eval_pairs.filter(~pl.col("k").str.contains(STEP_KEY)), eval_rows=pl.lit(True))
    evals_rec = _meta(evals, step_int(body.str.extract(DICT, 1).cast(pl.Float64, strict=False)), "eval")
    # Estimator.train's last loss: a summary record without a step
    final = tf.filter(body.str.contains(FINAL))
    final_values = final.select(
        "line",
        pl.lit("loss").alias("name"),
        body.str.extract(FINAL, 1).str.to_lowercase().cast(pl.Float64, strict=False).alias("value"),
    )
    final_rec = _meta(final, pl.lit(None, dtype=pl.Int64), "summary")
    records = pl.concat([train, evals_rec, final_rec], how="diagonal_relaxed")
    values = pl.concat(
        [
            v.select("line", "name", pl.col("value").cast(pl.Float64))
            for v in (train_values, sec, rates, eval_values, final_values)
        ]
    )
    # a hook-shaped line with a step tag whose step is no integer, or an eval dict with no value read
    unparsed = pl.concat(
        [
            tf.filter(body.str.contains(STEP_PAIR) & body.str.contains(HOOK) & ~body.str.contains(DICT)).join(
                hook.select("line"), on="line", how="anti"
            ),
            evals.join(eval_values.select("line").unique(), on="line", how="anti"),
        ]
    ).select("line", "text")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
