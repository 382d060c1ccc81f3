"""Keras `Model.fit` progress output (standalone Keras 2, tf.keras in TF 1.x/2.x, Keras 3).

Writers: `Progbar.update` in `keras-team/keras:keras/utils/generic_utils.py` (Keras 2,
tf.keras `tensorflow/python/keras/utils/generic_utils.py`), `keras/src/utils/progbar.py`
(Keras 3), driven by the `ProgbarLogger` callback; the `Epoch {E}/{N}` header is printed by
`ProgbarLogger.on_epoch_begin`. The lines:

    Epoch 1/50
     12/124 [=>............................] - ETA: 1:23 - loss: 0.7123 - accuracy: 0.51     # Keras 2 redraw
    124/124 [==============================] - 909s 7s/step - loss: nan - val_loss: nan      # Keras 2 end of epoch
    15816/15816 [==============================] - 72s 5ms/sample - loss: 0.1 - mae: 0.2       # TF 1.x, samples
     12/124 ━━━━━━━━━━━━━━━━━━━━ 1:23 745ms/step - loss: 0.7123                                 # Keras 3 redraw
    124/124 ━━━━━━━━━━━━━━━━━━━━ 72s 582ms/step - accuracy: 0.91 - loss: 0.2 - val_loss: 0.3    # Keras 3 end of epoch
         37/Unknown 5s 130ms/step - loss: 0.52                                                   # unknown target
    124/124 - 72s - loss: 0.2 - val_loss: 0.3 - 72s/epoch - 582ms/step                          # verbose=2 (tf.keras)
    124/124 - 72s - 582ms/step - loss: 0.2 - val_loss: 0.3                                       # verbose=2 (Keras 3)
     - 72s - loss: 0.2 - val_loss: 0.3                                                           # verbose=2 (Keras 2.0-2.2)

On a terminal or a file (Keras counts `posix` as a dynamic display), redraws are joined by
backspaces and `\\r` on one physical line and the last one ends with `\\n`; Keras 3 colours the
counter and the bar (ANSI, stripped). Values are running averages over the epoch (`%.4f`, or
`%.4e` below 1e-3; `nan`); `lr` / `learning_rate` appear when a callback logs them.

Records (the contract's step is the framework's counter as printed): one training record per
epoch, step = E of the `Epoch E/N` header before it. The record is the epoch's end-of-epoch line
(counter at its target, or a verbose=2 line); when the epoch has none (the run died inside it,
or the paste stops there) its last redraw stands for it, with the values it printed so far. Other
redraws are not records. A finished bar printed again after the epoch's record and before the
next header, or a finished bar with another target than the epoch's (`model.evaluate`), is an
eval record: its names take `eval_` (`loss` -> `eval_loss`).
Without any header, every finished bar is a training record with no step. Names go through the
alias table (`val_loss` -> `eval_loss`, `lr` / `learning_rate` -> `lr`); the `Ns/step`,
`Nms/step`, `Nus/step` time is `step_time_ms`. `Epoch 00001: saving model to ...` (ModelCheckpoint)
is a `checkpoint_save` event of the shared event catalogue.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    bounded_int,
    find_pairs,
    named_values,
    prepared_lines,
    sniff_share,
    sniff_tiers,
    text_result,
)

NAME = "keras"
HEADER = r"^\s*Epoch (\d+)/(\d+)\s*$"
KEY = r"[A-Za-z_][\w./@-]*"
COUNTER = r"^\s*(?P<n>\d+)/(?P<m>\d+|Unknown)\b\s*(?:\[[=>.]*\]|━+)?"
# a progress line: the counter (or verbose=2's leading ` - Ns`), then ` - name: value` pairs
PROGRESS = rf"(?:{COUNTER}|^\s*-\s+\d+s\s+-\s).*?\s-\s{KEY}:\s+{NUM_TOKEN}"
PAIR = rf"-\s(?P<k>{KEY}):\s+(?P<v>{NUM_TOKEN})(?:\s|$)"
STEP_TIME = r"(\d+(?:\.\d+)?)(s|ms|us)/step\b"
CONFIDENCE = 0.7


def sniff(sample: SniffSample) -> float:
    bar = rf"^\s*\d+/(?:\d+|Unknown)\s*(?:\[[=>.]*\]|━+)?\s*(?:-\s*)?(?:ETA:\s*)?[\d:]+(?:s|\s).*?\s-\s{KEY}:\s+[-+\dnNiI]"
    has_header = sniff_share(sample, HEADER) > 0
    return sniff_tiers(sample, [(bar, CONFIDENCE if has_header else CONFIDENCE - 0.1)])


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    # keep the order of the \r pieces of one physical line: `_o` is the row in file order
    work = lines.with_row_index("_o").with_columns(text.str.replace_all("\x08", "", literal=True))
    headers = (
        work.filter(text.str.contains(r"^\s*Epoch \d"))
        .with_columns(bounded_int(text.str.extract(HEADER, 1)).alias("_epoch"))
        .filter(pl.col("_epoch").is_not_null())
    )
    prog = work.filter(text.str.contains(" - ", literal=True) & text.str.contains(PROGRESS))
    if prog.height == 0:
        return text_result(
            src.name,
            lines,
            pl.DataFrame(schema={"line": pl.Int64}),
            pl.DataFrame(schema={"line": pl.Int64, "name": pl.String, "value": pl.Float64}),
        )
    last_piece = pl.col("_o") == pl.col("_o").max().over("line")
    prog = (
        prog.with_columns(text.str.extract_groups(COUNTER).alias("_c"))
        .unnest("_c")
        .with_columns(
            pl.col("n").cast(pl.Int64, strict=False).alias("_n"),
            pl.col("m").cast(pl.Int64, strict=False).alias("_m"),
            text.str.contains("ETA:", literal=True).alias("_eta"),
        )
    )
    final = (
        pl.when(pl.col("n").is_null())
        .then(pl.lit(True))  # verbose=2 without a counter
        .when(pl.col("m") == "Unknown")
        .then(last_piece & ~pl.col("_eta"))
        .otherwise(pl.col("_n") >= pl.col("_m"))
    )
    prog = prog.with_columns(final.alias("_final")).sort("_o")
    if headers.height:
        prog = prog.join_asof(
            headers.select(pl.col("_o").alias("_ho"), "_epoch").sort("_ho"),
            left_on="_o",
            right_on="_ho",
            strategy="backward",
        )
    else:
        prog = prog.with_columns(
            pl.lit(None, dtype=pl.UInt32).alias("_ho"), pl.lit(None, dtype=pl.Int64).alias("_epoch")
        )
    group = pl.col("_ho").fill_null(-1)
    # the epoch's own bar: the target of its first progress line (a `model.evaluate` bar has its own)
    same = pl.col("m").is_null() | (pl.col("m") == pl.col("m").first().over(group))
    own_final = pl.col("_final") & same
    finals_before = own_final.cast(pl.Int32).cum_sum().over(group) - own_final.cast(pl.Int32)
    is_last_own = pl.col("_o") == pl.when(same).then(pl.col("_o")).max().over(group)
    any_final = own_final.any().over(group)
    headed = pl.col("_ho").is_not_null()
    kind = (
        pl.when(~headed & pl.col("_final"))
        .then(pl.lit("train"))
        .when(headed & own_final & (finals_before == 0))
        .then(pl.lit("train"))
        .when(headed & pl.col("_final"))
        .then(pl.lit("eval"))
        .when(headed & ~any_final & same & is_last_own)
        .then(pl.lit("train"))  # a partial epoch: its last redraw
    )
    recs = prog.with_columns(kind.alias("record_kind")).filter(pl.col("record_kind").is_not_null())
    recs = recs.unique("line", keep="first", maintain_order=True)  # one record per physical line
    # a bar that prints no loss is progress, not a training record (`Model.fit` always prints its loss; keras-rl's
    # `TrainIntervalLogger` bar `10000/10000 [====] - 66s - reward: -7.3978` is the interval's progress, its
    # `50 episodes - ... - loss: 5.522 - mean_q: -31.851` line after it the record)
    recs = recs.filter(text.str.contains(r"(?i)loss"))
    records = recs.select("line", pl.col("_epoch").alias("step"), "prefix_rank", "record_kind")
    pairs = find_pairs(recs.select("line", "record_kind", "text"), PAIR)
    values = named_values(pairs, eval_rows=pl.col("record_kind") == "eval").select("line", "name", "value")
    st = (
        recs.filter(pl.col("record_kind") == "train")
        .select("line", text.str.extract_groups(STEP_TIME).alias("_t"))
        .unnest("_t")
        .filter(pl.col("1").is_not_null())
    )
    if st.height:
        ms = pl.col("1").cast(pl.Float64, strict=False) * pl.when(pl.col("2") == "s").then(1000.0).when(
            pl.col("2") == "us"
        ).then(0.001).otherwise(1.0)
        values = pl.concat([values, st.select("line", pl.lit("step_time_ms").alias("name"), ms.alias("value"))])
    return text_result(src.name, lines, records, values, None, mode="done")
