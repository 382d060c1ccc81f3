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
A file where every update is a line of its own (Keras writing to a file or a notebook, no dynamic
display: `1/61 [...] - ETA: 1:57 - loss: 0.7526`, `2/61 ...`, each on its own line, more than two per epoch)
logs every batch: each redraw is a training record at the global batch step (E - 1) * M + n, and the
target's `61/61 ... - ETA: 0s` redraw with the end-of-epoch line after it is one record, the end line's (the
epoch's own bar's lines are all Keras's: none is left to another grammar).
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


def _printed_per_line(prog: pl.DataFrame, headers: pl.DataFrame) -> bool:
    """Keras wrote every update on a line of its own (no `\\r` or backspace redraws joining them): one progress row
    per physical line, and more progress lines than two per epoch (redraws before the end lines)."""
    if not headers.height or prog.height <= 2 * headers.height:
        return False
    return bool(prog.select(pl.col("line").is_unique().all()).item())


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
    # every update on a line of its own (a file or notebook that is no dynamic display): each redraw is a logged
    # batch (see `_printed_per_line`), and a redraw at the target with its `ETA: 0s` is no end of the epoch yet
    per_line = _printed_per_line(prog, headers)
    final = (
        pl.when(pl.col("n").is_null())
        .then(pl.lit(True))  # verbose=2 without a counter
        .when(pl.col("m") == "Unknown")
        .then(last_piece & ~pl.col("_eta"))
        .otherwise((pl.col("_n") >= pl.col("_m")) & ~(pl.lit(per_line) & pl.col("_eta")))
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
    step = pl.col("_epoch")
    if per_line:  # the redraws before the epoch's end are training records too, at the global batch step
        redraw = headed & same & (finals_before == 0) & pl.col("_m").is_not_null()
        kind = pl.when(redraw).then(pl.lit("train")).otherwise(kind)
        step = pl.when(redraw).then((pl.col("_epoch") - 1) * pl.col("_m") + pl.col("_n")).otherwise(step)
    recs = prog.with_columns(kind.alias("record_kind"), step.alias("_step"))
    recs = recs.filter(pl.col("record_kind").is_not_null())
    recs = recs.unique("line", keep="first", maintain_order=True)  # one record per physical line
    if per_line:  # the last redraw at the target, then the epoch's end line: one record, the end line
        train = recs.filter(pl.col("record_kind") == "train").unique("_step", keep="last", maintain_order=True)
        recs = pl.concat([train, recs.filter(pl.col("record_kind") != "train")]).sort("_o")
    # a bar that prints no loss is progress, not a training record (`Model.fit` always prints its loss; keras-rl's
    # `TrainIntervalLogger` bar `10000/10000 [====] - 66s - reward: -7.3978` is the interval's progress, its
    # `50 episodes - ... - loss: 5.522 - mean_q: -31.851` line after it the record)
    recs = recs.filter(text.str.contains(r"(?i)loss"))
    records = recs.select("line", pl.col("_step").alias("step"), "prefix_rank", "record_kind")
    pairs = find_pairs(recs.select("line", "record_kind", "text"), PAIR)
    values = named_values(pairs, eval_rows=pl.col("record_kind") == "eval").select("line", "name", "value")
    if per_line:  # batch records: their epoch beside them (the loss is the epoch's running mean, restarting each epoch)
        epochs = recs.filter(pl.col("record_kind") == "train").select(
            "line", pl.lit("epoch").alias("name"), pl.col("_epoch").cast(pl.Float64).alias("value")
        )
        values = pl.concat([values, epochs])
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
    out = text_result(src.name, lines, records, values, None, mode="done")
    out.body_lines = prog.get_column("line")  # every progress line is Keras's, a record or a redraw of one
    return out
