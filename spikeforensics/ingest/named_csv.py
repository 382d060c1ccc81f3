"""One metric per headerless CSV file, the metric named by the file: d3rlpy's logger.

d3rlpy (takuseno/d3rlpy) writes every metric it logs to its own file in the run directory,
`<logdir>/<name>.csv`, one line per epoch with the epoch's mean and no header
(`d3rlpy/logger.py`: `print(f"{epoch},{step},{metric}", file=f)` in 0.x,
`FileAdapter.write_metric` the same line in 2.x):

    critic_loss.csv        1,1000,28.409847
                           2,2000,29.588532
    loss.csv               (a Decision Transformer's)
    environment.csv        (the evaluation return)

Step = the second column (optimizer updates so far), `epoch` the first; the value is stored
under the file's stem, normalised and alias-mapped like any metric name (`loss.csv` -> `loss`,
`critic_loss.csv` stays `critic_loss`, which stands for the loss of a run that logs no `loss`).
A two-column file (`step,value`, the same logger shape without the epoch) is read too when its
stem names a loss or a known metric, as two bare numbers per line say nothing by themselves.
Python prints non-finite means as `nan` / `inf`: values like any other.
"""

from __future__ import annotations

import re

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest._fields import NUM_TOKEN, captured_values, normalise_name
from spikeforensics.ingest._grammar_helpers import grammar_records
from spikeforensics.ingest.aliases import METRIC_ALIASES
from spikeforensics.ingest.base import ParseResult, SniffSample, SourceFile, prepared_lines, text_result

NAME = "named_csv"
ROW3 = rf"^\s*(?P<epoch>\d+)\s*,\s*(?P<step>\d+)\s*,\s*(?P<v>{NUM_TOKEN})\s*$"
ROW2 = rf"^\s*(?P<step>\d+)\s*,\s*(?P<v>{NUM_TOKEN})\s*$"
MIN_ROWS = 3  # a file of fewer rows is no series to sniff
BAD_SHARE = 0.1  # ... and one line in ten of its head may be another shape (a bad row, a cut last line)


def metric_name(path) -> str:
    """The metric a file holds, from its stem (`critic_loss.csv` -> `critic_loss`)."""
    name = normalise_name(path.stem)
    return METRIC_ALIASES.get(name, name)


def _named_metric(name: str) -> bool:
    return bool(re.search(schema.LOSS_TERM, name) or name.endswith("loss") or name in METRIC_ALIASES.values())


def _row_pattern(sample: SniffSample) -> str | None:
    """The row shape every non-blank line of the head has, if it has one."""
    rows = [ln for ln in sample.lines if ln.strip()]
    if len(rows) < MIN_ROWS or sample.suffix != ".csv" or not re.search(r"[a-z]", metric_name(sample.path)):
        return None
    if re.search(r"[A-Za-z_]{2,}", rows[0]) and not re.fullmatch(rf"\s*[\d\s,]*{NUM_TOKEN}\s*", rows[0]):
        return None  # a header line (Lightning's `epoch,step,train_loss`): a CSV with names, csv_metrics' file
    for pattern in (ROW3, ROW2):
        # nearly every line of the head has the shape (a bad row costs that row, not the file; the head's
        # last line may be cut by the sniff window)
        hits = sum(1 for ln in rows if re.match(pattern, ln))
        if hits >= MIN_ROWS and len(rows) - hits <= max(1, BAD_SHARE * len(rows)):
            if pattern is ROW2 and not _named_metric(metric_name(sample.path)):
                return None
            return pattern
    return None


def sniff(sample: SniffSample) -> float:
    return 0.9 if _row_pattern(sample) else 0.0


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    name = metric_name(src.path)
    three = (
        lines.filter(pl.col("text").str.contains(ROW3)).height >= lines.filter(pl.col("text").str.contains(ROW2)).height
    )
    records, values, rest = grammar_records(lines, ROW3 if three else ROW2, {"v": name})
    if three:
        hit = lines.join(records.select("line"), on="line", how="semi").with_columns(
            pl.col("text").str.extract(ROW3, 1).alias("epoch")
        )
        values = pl.concat([values, captured_values(hit, {"epoch": "epoch"})])
    unparsed = rest.filter(pl.col("text").str.strip_chars() != "")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
