"""Encoded inputs (ingest/encoded.py): a gzip, xz, bzip2 or zstd file, or a UTF-16 one (PowerShell 5's `>`), is read
as the file it holds, told by its first bytes; the report re-reads its raw lines through the same decompression; a corrupt file or a
decompression bomb is one line naming the file, and nothing reaches the store."""

from __future__ import annotations

import bz2
import gzip
import lzma
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from spikeforensics import api
from spikeforensics.cli import cli
from spikeforensics.ingest import encoded

REAL = Path(__file__).resolve().parents[1] / "sample_logs" / "real"
LOG = REAL / "dev" / "colossalai-examples-37-zero3-overflow-loss-nan" / "issue_37_paste.log"
FIXTURE = Path(__file__).resolve().parents[1] / "sample_logs" / "holdout" / "lr_too_high"


def _zstd(data: bytes, out: Path) -> None:
    with pa.CompressedOutputStream(str(out), "zstd") as fh:
        fh.write(data)


WRITERS = {
    "gz": lambda data, out: out.write_bytes(gzip.compress(data)),
    "xz": lambda data, out: out.write_bytes(lzma.compress(data)),
    "bz2": lambda data, out: out.write_bytes(bz2.compress(data)),
    "zst": _zstd,
    # PowerShell 5.1's `python train.py > train.log`: UTF-16 LE with a BOM and CRLF line ends
    "utf16": lambda data, out: out.write_bytes(b"\xff\xfe" + data.decode().replace("\n", "\r\n").encode("utf-16-le")),
}


def tables(store, run):
    loaded = api.load_run(run, store)
    return loaded.metrics.drop("source").sort("line", "name"), loaded.events.drop("source").sort("line", "kind")


@pytest.mark.parametrize("suffix", sorted(WRITERS))
def test_a_compressed_log_reads_as_the_log_it_holds(tmp_path, suffix):
    packed = tmp_path / f"{LOG.name}.{suffix}"
    WRITERS[suffix](LOG.read_bytes(), packed)
    assert encoded.codec_of(packed) and encoded.codec_of(LOG) is None
    store = tmp_path / "s"
    api.ingest([LOG], run_id="plain", store=store)
    report = api.ingest([packed], run_id="packed", store=store)
    assert report.files[0].status == "ingested" and report.files[0].source == packed.name
    want, got = tables(store, "plain"), tables(store, "packed")
    assert want[0].height > 0 and got[0].equals(want[0]) and got[1].equals(want[1])
    # the store records the compressed file; the staging copy is gone
    assert api.load_run("packed", store).sources.get_column("path")[0] == str(packed.resolve())
    assert not any((store / ".tmp").glob("*/inputs/**/*.log"))
    # ingested again: the same content, nothing to do
    assert api.ingest([packed], run_id="packed", store=store).files[0].status == "unchanged"


def test_the_report_shows_raw_lines_of_a_compressed_log(tmp_path):
    # a fixture run whose log is gzipped beside its side files: the diagnosis quotes the log's lines at the peak
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for f in FIXTURE.iterdir():
        if f.name == "ground_truth.json":
            continue
        if f.suffix == ".log":
            (run_dir / (f.name + ".gz")).write_bytes(gzip.compress(f.read_bytes()))
        else:
            (run_dir / f.name).write_bytes(f.read_bytes())
    api.ingest([run_dir], run_id="r", store=tmp_path / "s")
    d = api.diagnose(api.load_run("r", tmp_path / "s"))
    quoted = [x for i in d["incidents"] for x in (i.get("log_lines") or [])]
    assert quoted and all("has changed" not in x["text"] for x in quoted)
    assert any(x["peak"] for x in quoted)


def test_a_corrupt_or_bomb_file_is_one_line_naming_it_and_the_store_keeps_its_run(tmp_path, monkeypatch):
    store = tmp_path / "s"
    api.ingest([LOG], run_id="r", store=store)
    before = api.load_run("r", store).metrics.height
    broken = tmp_path / "train.log.gz"
    broken.write_bytes(gzip.compress(LOG.read_bytes())[:40])  # cut mid-stream
    runner = CliRunner()
    result = runner.invoke(cli, ["ingest", str(broken), "--run", "r", "--store", str(store)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{broken}: not a readable gzip file" in result.output
    bomb = tmp_path / "bomb.log.gz"
    bomb.write_bytes(gzip.compress(b"\0" * (8 << 20)))  # 8 MiB of zeros in ~8 KiB: over 500x
    result = runner.invoke(cli, ["ingest", str(bomb), "--run", "r", "--store", str(store)])
    assert result.exit_code == 1 and f"{bomb}: gzip content larger than" in result.output
    assert api.load_run("r", store).metrics.height == before
    assert not list((store / ".tmp").glob("*")) or not any((store / ".tmp").rglob("*.log"))
