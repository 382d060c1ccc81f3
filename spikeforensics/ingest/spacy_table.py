"""spaCy v3's `spacy train` console table (`spacy/training/loggers.py`, `console_logger`):

    E    #       LOSS TOK2VEC  LOSS NER  ENTS_F  ENTS_P  ENTS_R  SCORE
    ---  ------  ------------  --------  ------  ------  ------  ------
      0       0          0.00     73.29    0.11    0.14    0.08    0.00
      4    2800       8720.74    392.96   86.50   85.62   87.40    0.87

One row per evaluation (every `eval_frequency` optimizer steps): `E` the epoch, `#` the optimizer step, a
`LOSS <PIPE>` column per trained component (the component's loss summed over the steps since the row
before), then the dev-set scores (`ENTS_F`, `TAG_ACC`, `DEP_UAS`, ..., `SCORE`). Columns are read from the
header above the rows (split at two or more spaces), so any pipeline's table reads. A row is a record at its
step; `LOSS TOK2VEC` -> `loss_tok2vec`, and `loss` is the sum of the components' losses (what the pipeline's
update minimises); the scores keep their names in lower case (`ents_f`, `score`), percentages as printed.
"""

from __future__ import annotations

import re

import polars as pl

from spikeforensics.ingest._grammar_helpers import block_owners, empty_values
from spikeforensics.ingest.base import (
    NUM_TOKEN,
    ParseResult,
    SniffSample,
    SourceFile,
    parse_numbers,
    prepared_lines,
    sniff_share,
    step_int,
    text_result,
)

NAME = "spacy_table"
HEADER = r"^\s*E\s{2,}#\s{2,}(?:W\s{2,})?LOSS \S+"
RULE = r"^\s*-{3}\s+-{3,}"
ROW = rf"^\s*\d+\s+\d+(?:\s+{NUM_TOKEN})+\s*$"


def sniff(sample: SniffSample) -> float:
    if sniff_share(sample, HEADER) and sniff_share(sample, ROW) >= 2:
        return 0.9
    return 0.0


def _columns(header: str) -> list[str]:
    """`E    #       LOSS TOK2VEC  LOSS NER  ENTS_F` -> ["epoch", "step", "loss_tok2vec", "loss_ner", "ents_f"]."""
    tokens = re.split(r"\s{2,}", header.strip())
    return [{"E": "epoch", "#": "step", "W": "words"}.get(t, t.lower().replace(" ", "_")) for t in tokens]


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    head = text.str.contains(HEADER)
    # a table runs to the next header: a warning printed between two rows does not end it
    owned = block_owners(lines, head, pl.lit(False))
    headers = lines.filter(head)
    rows = owned.filter(text.str.contains(ROW)).with_columns(text.str.extract_all(r"\S+").alias("_tok"))
    record_frames, value_frames = [], []
    for blk, header in headers.select("line", "text").iter_rows():
        cols = _columns(header)
        mine = rows.filter((pl.col("_blk") == blk) & (pl.col("_tok").list.len() == len(cols)))
        if mine.height == 0 or "step" not in cols:
            continue
        wide = mine.select("line", "prefix_rank", *[pl.col("_tok").list.get(i).alias(c) for i, c in enumerate(cols)])
        record_frames.append(
            wide.select(
                "line",
                step_int(pl.col("step")).alias("step"),
                "prefix_rank",
                pl.lit("train").alias("record_kind"),
                pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
            )
        )
        named = [c for c in cols if c not in ("step", "words")]
        long = parse_numbers(
            wide.select("line", *named).unpivot(index="line", variable_name="name", value_name="raw"), raw="raw"
        ).select("line", "name", "value")
        losses = long.filter(pl.col("name").str.starts_with("loss_"))
        total = (
            losses.group_by("line")
            .agg(pl.col("value").sum().alias("value"))
            .select("line", pl.lit("loss").alias("name"), "value")
        )
        value_frames += [long, total]
    if not record_frames:  # rows under a header they do not fit: unparsed
        records = pl.DataFrame(
            schema={
                "line": pl.Int64,
                "step": pl.Int64,
                "prefix_rank": pl.Int32,
                "record_kind": pl.String,
                "time": pl.Datetime("us"),
            }
        )
        return text_result(src.name, lines, records, empty_values(), rows.select(lines.columns), mode="done")
    records = pl.concat(record_frames).sort("line")
    values = pl.concat(value_frames).filter(pl.col("value").is_not_null())
    unparsed = rows.join(records.select("line"), on="line", how="anti").select(lines.columns)
    return text_result(src.name, lines, records, values, unparsed, mode="done")
