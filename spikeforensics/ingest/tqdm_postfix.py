"""tqdm progress bars whose postfix carries the loss (ColossalAI trainer hooks, Open-Sora,
MuseTalk, diffusers/accelerate scripts, Lightning bars, custom loops):

    [Epoch 5 / Train]: 100%|██████████| 1/1 [00:00<00:00,  2.05it/s, loss=107, lr=0.00015, throughput=8.2047 sample_per_sec, 7.6092 Tflops]
    Epoch #70:  20%|###1   | 19990/100000.0 [01:22<05:33, 240.03it/s, env_step=6919980, len=71, loss=nan, n/ep=0, rew=-0.07]   # tianshou
    Epoch 0:  19%|██████▏   | 1610/8573 [11:25:45<50:22:32, 26.05s/it, loss=0.279, step=1609, global_step=1609]
    Steps:   2%|▍   | 92679/5900000 [19:15:43<1185:20:02,  1.36it/s, loss=nan, lr=4.99e-5, unet=0.0986]

fastai's fastprogress bar, whose comment is the smoothed training loss (fastai v1/v2 `fit` in a
console, or a notebook's bar copied as text; fastprogress prints `{pct}% [{n}/{total} {elapsed}<{remaining} {comment}]`):

    71.39% [6930/9707 3:56:27<1:34:45 nan]
     |████████----| 45.00% [450/1000 00:12<00:15 2.3456]

A record is a bar redraw whose postfix has a `*loss*=number` pair, or a fastprogress bar whose
comment is one number (read as `loss`, step = its counter N, the batch within the epoch as printed) (redraws without a loss,
such as HF Trainer bars, are not claimed). Step = the postfix's `global_step` (else `step`, else tianshou's `env_step`)
when printed; else, for bars labelled `Epoch E` / `[Epoch E / ...]`, E * M + N from the
`N/M` counter (a counter that grows across epochs; its origin depends on whether the
script counts epochs from 0 or 1); a bar without a total (`99it [00:22, ..., avg_epoch_loss=0.945, epoch=0]`,
GluonTS / PyTorchTS) is stepped by its postfix `epoch`; else N. Redraws on one physical line (`\r`) are one
record per line (the last redraw); in a file whose CRs end its lines (a console saved with its redraws,
`_lines.lone_cr_endings`) each redraw is a line: consecutive redraws with the same step are one record
(first line's values, the contract's rule), but an epoch-stepped bar's record is its epoch's last redraw. Postfix names go through the alias table
(`lr` -> `lr`, `loss` -> `loss`; Lightning's smoothed bar `loss` gives way to a logged training loss on
the same bar: `_smoothed_loss_aside`). A user print glued after the bar on the same line
(`...train_loss=10.90]lr=[0.0] mean=...`, the bar redrawn without a newline) gives the record
the optimizer values it names (`TAIL_KEYS`), a list such as `lr=[0.0]` (one value per param
group) read as its first group's value. Confidence stays below the framework parsers'.
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest.base import (
    MAX_STEP,
    NUM_TOKEN,
    STEP_OUT_OF_RANGE,
    ParseResult,
    SniffSample,
    SourceFile,
    bounded_int,
    extract_time,
    find_pairs,
    named_values,
    prepared_lines,
    sniff_tiers,
    step_int,
    text_result,
)

NAME = "tqdm_postfix"
BAR = r"(?P<n>\d+)/(?P<m>\d+)(?:\.0+)? \[[\d:]+<[\d:?]+,\s*[^,\]]*,\s*(?P<post>[^\]]*[Ll]oss\w*=[^\]]*)\]"
# a bar without a total (an iterable of unknown length): `99it [00:22,  4.39it/s, avg_epoch_loss=0.945, epoch=0]`
BAR_OPEN = r"(?P<n>\d+)it \[[\d:]+,\s*[^,\]]*,\s*(?P<post>[^\]]*[Ll]oss\w*=[^\]]*)\]"
EPOCH = r"(?:^|\[)\s*Epoch #?(\d+)\b"  # tianshou: `Epoch #3: 100001it [...]`
# GluonTS / PyTorchTS put the epoch in the postfix: `epoch=1/10`, `epoch=3`
POST_EPOCH = r"\bepoch=(\d+)(?:/\d+)?\b"
PAIR = rf"(?P<k>[A-Za-z_][\w./-]*)=(?P<v>{NUM_TOKEN})(?:,|\s|$)"
CONFIDENCE = 0.6
# a postfix's own counter, first found first: tianshou's off-policy trainer prints `env_step=` (its training clock:
# updates follow environment steps) and no other; its bar counts the epoch's steps (`100001it`)
STEP_KEYS = ["global_step", "step", "env_step"]
# fastprogress: the comment after the times is the smoothed loss (a bare number, `nan`, `inf`)
FASTPROGRESS = (
    r"(?:^|[\s|])\d+(?:\.\d+)?% \[(?P<n>\d+)/(?P<m>\d+) [\d:]+<[\d:]+ "
    r"(?P<loss>[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|(?i:nan|inf)))\]\s*$"
)
# below the column table's 0.5: a fastai log's epoch table stays the primary grammar and the bar
# lines join it through the mix
FASTPROGRESS_CONFIDENCE = 0.45
# what a glued print after the bar may give the record: optimizer state, not the user's other statistics
TAIL_KEYS = r"^(?:lr|learning_rate|grad_norm|gnorm|loss_scale)$"
BAR_THROUGH = r"^.*?\d+/\d+ \[[^\]]*\]"
LIST_VALUE = rf"=\[\s*({NUM_TOKEN})[^\]]*\]"


def sniff(sample: SniffSample) -> float:
    return sniff_tiers(
        sample,
        [
            (r"\d+/\d+ \[[\d:]+<[\d:?]+,[^\]]*[Ll]oss\w*=[-+\d.naNinf]", CONFIDENCE),
            (r"\d+it \[[\d:]+,[^\]]*[Ll]oss\w*=[-+\d.naNinf]", CONFIDENCE),
            (FASTPROGRESS, FASTPROGRESS_CONFIDENCE),
        ],
    )


def _smoothed_loss_aside(pairs: pl.DataFrame) -> pl.DataFrame:
    """PyTorch Lightning < 2.0 puts a bare `loss=` in its bar: the running mean of the last 20
    batches, printed to 3 significant digits (NeMo 1: `loss=3.1, v_num=, reduced_train_loss=3.090`).
    When the same postfix also logs a training loss of its own (a key the alias table maps to
    `loss`), that one is the step's loss and the bar's becomes `loss_smoothed` (kept, not judged)."""
    from spikeforensics.ingest.aliases import canonical_metric

    keys = pairs.get_column("k").unique().drop_nulls().to_list()
    own = [k for k in keys if k.strip() != "loss" and canonical_metric(k.strip()) == "loss"]
    if not own:
        return pairs
    has_own = pl.col("k").is_in(own).any().over("line")
    return pairs.with_columns(
        pl.when((pl.col("k").str.strip_chars() == "loss") & has_own)
        .then(pl.lit("loss_smoothed"))
        .otherwise(pl.col("k"))
        .alias("k")
    )


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    cand = lines.filter(text.str.contains("(?i)loss") & text.str.contains(r"<|\dit \["))
    g = cand.with_columns(
        text.str.extract_groups(BAR).alias("_b"),
        text.str.extract_groups(BAR_OPEN).struct.rename_fields(["_on", "_opost"]).alias("_o"),
    ).unnest("_b", "_o")
    g = g.with_columns(pl.coalesce("n", "_on").alias("n"), pl.coalesce("post", "_opost").alias("post")).filter(
        pl.col("post").is_not_null()
    )
    g = g.unique("line", keep="last", maintain_order=True)  # one record per physical line: its last redraw
    pairs = _smoothed_loss_aside(find_pairs(g.select("line", pl.col("post").alias("text")), PAIR))
    post_step = (
        pairs.filter(pl.col("k").is_in(STEP_KEYS))
        .sort(pl.col("k").replace_strict(STEP_KEYS, list(range(len(STEP_KEYS))), return_dtype=pl.Int32))
        .unique("line", keep="first")
        # (a pair's value keeps the comma after it: `env_step=100000, len=112`)
        .select("line", step_int(pl.col("v").str.strip_chars_end(", ").cast(pl.Float64, strict=False)).alias("_ps"))
    )
    g = g.join(post_step, on="line", how="left")
    n, m = step_int(pl.col("n")), step_int(pl.col("m"))
    post_ep = bounded_int(pl.col("post").str.extract(POST_EPOCH, 1))
    ep = bounded_int(text.str.extract(EPOCH, 1))
    # a bar without a total drawn once per epoch (GluonTS' trainer): the epoch is the step
    by_epoch = m.is_null() & pl.col("_ps").is_null() & post_ep.is_not_null()
    step = pl.coalesce(pl.col("_ps"), ep * m + n, pl.when(by_epoch).then(post_ep), n)
    parts_bad = pl.any_horizontal(
        (pl.col("_ps") == STEP_OUT_OF_RANGE).fill_null(False),
        n == STEP_OUT_OF_RANGE,
        (m == STEP_OUT_OF_RANGE).fill_null(False),  # an open bar has no total
    )
    step = (
        pl.when(~parts_bad & (step <= MAX_STEP) & (step >= -MAX_STEP))
        .then(step)
        .otherwise(pl.lit(STEP_OUT_OF_RANGE, dtype=pl.Int64))
    )
    # such a bar's redraws of one epoch (each its own line in a CR file, `_lines.lone_cr_endings`) hold the
    # epoch's running loss: its record is the last redraw, where the epoch ended
    g = g.with_columns(step.alias("_step"), by_epoch.alias("_by_epoch")).filter(
        ~pl.col("_by_epoch") | (pl.col("_step") != pl.col("_step").shift(-1)).fill_null(True)
    )
    records = g.select(
        "line",
        pl.col("_step").alias("step"),
        "prefix_rank",
        pl.lit("train").alias("record_kind"),
        extract_time(text).alias("time"),
    )
    fp = (
        lines.filter(text.str.contains("% [", literal=True))
        .with_columns(text.str.extract_groups(FASTPROGRESS).alias("_f"))
        .unnest("_f")
        .filter(pl.col("loss").is_not_null())
    )
    fp = fp.join(records.select("line"), on="line", how="anti").unique("line", keep="last", maintain_order=True)
    records = pl.concat(
        [
            records,
            fp.select(
                "line",
                step_int(pl.col("n")).alias("step"),
                "prefix_rank",
                pl.lit("train").alias("record_kind"),
                extract_time(text).alias("time"),
            ),
        ]
    ).sort("line")
    tail = g.select("line", text.str.replace(BAR_THROUGH, "").str.replace_all(LIST_VALUE, "=$1").alias("text"))
    tail_pairs = find_pairs(tail, PAIR).filter(pl.col("k").str.contains(TAIL_KEYS))
    tail_pairs = tail_pairs.join(pairs.select("line", "k"), on=["line", "k"], how="anti").unique(
        ["line", "k"], keep="first"
    )
    pairs = pl.concat([pairs, tail_pairs.select(pairs.columns)])
    fp_pairs = fp.select("line", pl.lit("loss").alias("k"), pl.col("loss").alias("v"))
    pairs = pl.concat([pairs.select("line", "k", "v"), fp_pairs])
    values = named_values(pairs.filter(~pl.col("k").is_in([*STEP_KEYS, "v_num"]))).select("line", "name", "value")
    return text_result(src.name, lines, records, values, None, mode="done")
