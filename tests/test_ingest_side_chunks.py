"""Per-layer gradient dumps and batch manifests in JSONL are decoded in chunks (issue 14: a
dump of millions of rows is never decoded at once); a chunked read equals a whole read, and a
chunk cut inside a step's rows does not count that step twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from spikeforensics.ingest import batches, layers
from spikeforensics.ingest.base import SourceFile

ROOT = Path(__file__).resolve().parents[1]
LAYER_DUMP = ROOT / "sample_logs" / "tune" / "clean" / "layer_grads.jsonl"
MANIFESTS = sorted((ROOT / "sample_logs" / "blind").glob("*/batches.jsonl"))[:3]


def read(module, path: Path, chunk_bytes: int):
    res = module.parse(SourceFile(path, path.name), chunk_bytes=chunk_bytes)
    table = next(iter(res.tables.values()))
    return table.sort(table.columns), res.records, res.unparsed


@pytest.mark.parametrize("chunk", [997, 64 << 10])
def test_a_layer_dump_read_in_chunks_equals_a_whole_read(chunk):
    whole = read(layers, LAYER_DUMP, 1 << 30)
    parts = read(layers, LAYER_DUMP, chunk)
    assert parts[0].equals(whole[0]) and parts[1] == whole[1] and parts[2] == whole[2]
    assert whole[1] == whole[0].select("step", "rank").unique().height  # records: (step, rank) pairs


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.parent.name)
def test_a_manifest_read_in_chunks_equals_a_whole_read(path):
    whole = read(batches, path, 1 << 30)
    parts = read(batches, path, 1500)
    assert parts[0].equals(whole[0]) and parts[1] == whole[1] and parts[2] == whole[2]


def test_a_chunk_without_the_columns_costs_its_rows_not_the_file(tmp_path):
    dump = tmp_path / "layer_grads.jsonl"
    good = [f'{{"step": {s}, "layer": "h.{i}", "grad_norm": 0.5}}' for s in range(1, 40) for i in range(3)]
    odd = [f'{{"when": {s}, "what": 1}}' for s in range(200)]
    for lines in (good + odd, odd + good):  # the odd rows after, or before (a whole chunk of them)
        dump.write_text("\n".join(lines) + "\n")
        table, records, unparsed = read(layers, dump, 2000)
        assert table.height == len(good) and records == 39 and unparsed == len(odd)
    dump.write_text("\n".join(odd) + "\n")
    with pytest.raises(Exception, match="not a per-layer gradient dump: no column for step, layer, grad_norm"):
        read(layers, dump, 2000)
