"""A physical line of megabytes (fuzz input 399 of seed 15: a fairseq validation line followed by
16M `|`) is cut to its first base.MAX_LINE_CHARS characters before the line grammars see it: the
grammar that splits a line into fields would otherwise hold one row per field (1.3 GB RSS)."""

from __future__ import annotations

import polars as pl

from spikeforensics import api
from spikeforensics.ingest.base import MAX_LINE_CHARS, SourceFile, prepared_lines

VALID = "| epoch 048 | valid on 'valid' subset | valid_loss 3.70898 | valid_nll_loss 1.94564 | valid_ppl 3.85"
INNER = "| epoch 048:   {i} / 1100 loss=3.{i:03d}, nll_loss=1.9, ppl=3.7, wps=9000, ups=1, wpb=3000, bsz=100, num_updates={u}, lr=0.0005, gnorm=0.3, clip=0.000, oom=0.000, wall=100"


def write_log(path, tail: int) -> None:
    lines = [INNER.format(i=i, u=17600 + i) for i in range(1, 40)]
    lines.append(VALID + "|" * tail)
    lines += [INNER.format(i=i, u=17600 + i) for i in range(40, 60)]
    path.write_text("\n".join(lines) + "\n")


def test_a_line_of_megabytes_is_cut_before_the_grammars(tmp_path):
    log = tmp_path / "train.log"
    write_log(log, 3 * MAX_LINE_CHARS)
    lines = prepared_lines(SourceFile(log, log.name))
    assert lines.select(pl.col("text").str.len_chars().max()).item() <= MAX_LINE_CHARS
    api.ingest([log], run_id="r", store=tmp_path / "s")
    run = api.load_run("r", tmp_path / "s")
    # every training record around it is read, and the cut line keeps its head (the validation values)
    assert run.series("loss").height == 59
    assert run.metrics.filter(pl.col("name") == "eval_loss").height == 1


def test_lines_under_the_cap_are_left_whole(tmp_path):
    log = tmp_path / "train.log"
    write_log(log, 1000)
    lines = prepared_lines(SourceFile(log, log.name))
    assert lines.select(pl.col("text").str.len_chars().max()).item() > 1000
