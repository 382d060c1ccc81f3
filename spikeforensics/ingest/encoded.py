"""Encoded inputs: a log, metrics file or side file kept compressed (gzip, xz, bzip2, zstd: `train.log.gz`, a
rotated `stdout.1.gz`, an archived `metrics.jsonl.zst`) or written as UTF-16 (Windows PowerShell 5's `>`
redirect writes UTF-16 LE with a byte-order mark) is read as the UTF-8 file it holds.

Told by its first bytes (magic or byte-order mark), not its name. The ingest driver decodes such a file into a
staging folder of the store (swept like any staging after a crash) and reads that copy: every parser and
sniffer sees a plain file, the store records the original file's path and the hash of what it holds, and the
report's re-read of raw log lines (`attribute/raw_lines.py`) decodes again. Bounded (issue 14): at most
`MAX_BYTES` and `MAX_RATIO` times the file's size come out, else a one-line error naming the file.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import lzma
from pathlib import Path
from typing import BinaryIO

# first bytes -> codec (RFC 1952 gzip, xz, bzip2, RFC 8878 zstd frame; UTF-16 byte-order marks)
MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"BZh", "bz2"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)
# why: the largest real logs are a few GB (the 1M-iteration Megatron log is 365 MB); a file claiming more than
# 8 GiB of content is refused before it fills the disk
MAX_BYTES = 8 << 30
# why: real text logs compress 5-30x (numbers change on every line); past 500x the content is one repeated
# pattern, a decompression bomb (gzip reaches 1,032x on a run of zeros, bzip2, xz and zstd far more), not a log
MAX_RATIO = 500
BLOCK = 1 << 20


class DecompressionError(ValueError):
    """An encoded input that cannot be read or expands past the caps (bad input: one line naming the file)."""


def codec_of(path: Path) -> str | None:
    """The compression codec of a file by its first bytes, None for a plain file."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError:
        return None
    return next((codec for magic, codec in MAGIC if head.startswith(magic)), None)


class _Utf16ToUtf8(io.RawIOBase):
    """A UTF-16 file (its BOM tells the byte order) read as UTF-8 bytes, block by block."""

    def __init__(self, path: Path):
        self._fh = open(path, "rb")
        self._decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")
        self._pending = b""

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while not self._pending:
            block = self._fh.read(BLOCK)
            self._pending = self._decoder.decode(block, final=not block).encode("utf-8")
            if not block:
                break
        out, self._pending = (self._pending, b"") if size < 0 else (self._pending[:size], self._pending[size:])
        return out

    def close(self) -> None:
        self._fh.close()
        super().close()


def _reader(path: Path, codec: str) -> BinaryIO:
    if codec == "utf-16":
        return _Utf16ToUtf8(path)  # type: ignore[return-value]
    if codec == "gzip":
        return gzip.open(path, "rb")
    if codec == "xz":
        return lzma.open(path, "rb")
    if codec == "bz2":
        return bz2.open(path, "rb")
    import pyarrow as pa  # zstd: not in the standard library before 3.14; pyarrow carries it

    return pa.CompressedInputStream(pa.OSFile(str(path)), "zstd")


def decompress_to(path: Path, folder: Path) -> Path:
    """Write what encoded `path` holds to `folder` (named as the file less its compression suffix) and
    return the copy's path. Raises DecompressionError for a corrupt file or one past the caps."""
    codec = codec_of(path)
    assert codec is not None
    limit = min(MAX_BYTES, max(path.stat().st_size, 1) * MAX_RATIO)
    name = path.name
    for suffix in (".gz", ".gzip", ".xz", ".bz2", ".zst", ".zstd") if codec != "utf-16" else ():
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
    except (DecompressionError, OSError, EOFError, lzma.LZMAError, ValueError) as exc:
        # (pyarrow's ArrowInvalid and ArrowIOError, a corrupt zstd frame, are a ValueError and an OSError)
        out.unlink(missing_ok=True)
        if isinstance(exc, DecompressionError):
            raise
        raise DecompressionError(f"{path}: not a readable {codec} file ({type(exc).__name__}: {exc})") from None
    return out
