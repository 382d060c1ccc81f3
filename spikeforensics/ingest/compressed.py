"""Compressed inputs: a log, metrics file or side file kept as gzip, xz, bzip2 or zstd (`train.log.gz`, a
rotated `stdout.1.gz`, an archived `metrics.jsonl.zst`) is read as the file it holds.

Told by its magic bytes, not its name. The ingest driver decompresses such a file into a staging folder of the
store (swept like any staging after a crash) and reads that copy: every parser and sniffer sees a plain file,
the store records the compressed file's path and the hash of what it holds, and the report's re-read of raw
log lines (`attribute/raw_lines.py`) decompresses again through `open_input`. Bounded (issue 14): at most
`MAX_BYTES` and `MAX_RATIO` times the compressed size come out, else a one-line error naming the file.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

# magic bytes -> codec (RFC 1952 gzip, xz, bzip2, RFC 8878 zstd frame)
MAGIC = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"BZh", "bz2"), (b"\x28\xb5\x2f\xfd", "zstd"))
# why: the largest real logs are a few GB (the 1M-iteration Megatron log is 365 MB); a file claiming more than
# 8 GiB of content is refused before it fills the disk
MAX_BYTES = 8 << 30
# why: real text logs compress 5-30x (numbers change on every line); past 500x the content is one repeated
# pattern, a decompression bomb (gzip reaches 1,032x on a run of zeros, bzip2, xz and zstd far more), not a log
MAX_RATIO = 500
BLOCK = 1 << 20


class DecompressionError(ValueError):
    """A compressed input that cannot be read or expands past the caps (bad input: one line naming the file)."""


def codec_of(path: Path) -> str | None:
    """The compression codec of a file by its first bytes, None for a plain file."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError:
        return None
    return next((codec for magic, codec in MAGIC if head.startswith(magic)), None)


def _reader(path: Path, codec: str) -> BinaryIO:
    if codec == "gzip":
        return gzip.open(path, "rb")
    if codec == "xz":
        return lzma.open(path, "rb")
    if codec == "bz2":
        return bz2.open(path, "rb")
    import pyarrow as pa  # zstd: not in the standard library before 3.14; pyarrow carries it

    return pa.CompressedInputStream(pa.OSFile(str(path)), "zstd")


@contextmanager
def open_input(path: Path) -> Iterator[BinaryIO]:
    """The bytes a file holds, decompressed when it is compressed (read forward only: reopen to start over)."""
    codec = codec_of(path)
    fh = open(path, "rb") if codec is None else _reader(path, codec)
    try:
        yield fh
    finally:
        fh.close()


def decompress_to(path: Path, folder: Path) -> Path:
    """Write what compressed `path` holds to `folder` (named as the file less its compression suffix) and
    return the copy's path. Raises DecompressionError for a corrupt file or one past the caps."""
    codec = codec_of(path)
    assert codec is not None
    limit = min(MAX_BYTES, max(path.stat().st_size, 1) * MAX_RATIO)
    name = path.name
    for suffix in (".gz", ".gzip", ".xz", ".bz2", ".zst", ".zstd"):
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / name
    written = 0
    try:
        with _reader(path, codec) as src, open(out, "wb") as dst:
            while block := src.read(BLOCK):
                written += len(block)
                if written > limit:
                    raise DecompressionError(
                        f"{path}: {codec} content larger than {limit:,} bytes "
                        f"(at most {MAX_RATIO:,}x the file and {MAX_BYTES:,} bytes are read)"
                    )
                dst.write(block)
    except DecompressionError:
        out.unlink(missing_ok=True)
        raise
    except (OSError, EOFError, lzma.LZMAError, ValueError) as exc:
        out.unlink(missing_ok=True)
        raise DecompressionError(f"{path}: not a readable {codec} file ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # pyarrow's ArrowInvalid / ArrowIOError for a corrupt zstd frame
        out.unlink(missing_ok=True)
        if type(exc).__module__.startswith("pyarrow"):
            raise DecompressionError(f"{path}: not a readable {codec} file ({exc})") from None
        raise
    return out
