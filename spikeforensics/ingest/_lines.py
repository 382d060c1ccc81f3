"""From a file's bytes to the text lines parsers read: physical lines (LF, CRLF and lone-CR
files, bad UTF-8 tolerated), segments split on tqdm carriage returns, ANSI codes and
launcher/paste prefixes stripped (keeping the prefix's rank); and `strip_controls`, which
makes text from input data safe to print to a terminal. Re-exported by `base`.
"""

from __future__ import annotations

import io
import re

import polars as pl

# ANSI colour / cursor codes (torchtitan colours every field).
ANSI_RE = r"\x1b\[[0-9;?]*[A-Za-z]"
# Launcher and paste prefixes in front of the framework's own text. The named group
# `rank` keeps the rank number where the prefix has one.
PREFIX_RE = (
    r"^(?:(?:\+?> ?)+)?"  # markdown quoting of pasted logs: '> ', '+> '
    r"(?:`{1,3})?"  # markdown code opened on the paste's first line: '`[  1]    1440 || B: 5.495 ...' (yolact #359)
    r"(?:\[\d{2,}\] )?"  # log-viewer line numbers '[80746] '
    # `kubectl logs --timestamps` / `docker logs -t` (RFC 3339 at nanoseconds: a framework's own ISO time, kept,
    # prints milli- or microseconds)
    r"(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{7,9}Z )?"
    r"(?:\((?:[\w.-]+ )?pid=\d+(?:, ip=[\d.]+)?\) )?"  # Ray workers: '(RayTrainWorker pid=48213, ip=10.0.0.5) '
    r"(?:"
    r"\[(?:rank|default)(?P<rank>\d+)\]:"  # torchrun --tee / --role: [rank3]: [default3]:
    r"|\[\d+:(?P<rank2>\d+)\]:"  # nanotron [node:rank]:
    r"|(?P<rank3>\d{1,4}): "  # srun --label '3: '
    r")?"
)

# glog's / absl's line prefix (Caffe, PaddlePaddle, TensorFlow, JAX): `I0712 12:10:37.058244  3123 solver.cpp:228] `:
# severity and date, time, thread id (or name), source file:line. Not anchored: callers anchor it.
GLOG_PREFIX = r"[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\S+\s+[\w./-]+:\d+\]\s*"

# What a terminal would interpret in text that comes from input data (file names, sample
# IDs, log lines): ANSI/VT escape sequences (CSI, OSC, and lone ESC), the other C0
# controls but tab (and newline where lines are kept), DEL and the C1 controls.
_ESCAPE_SEQ_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_CONTROL_KEEP_NL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def strip_controls(text: str, keep_newlines: bool = False) -> str:
    """`text` without escape sequences and control characters (tab kept; newlines kept
    only with `keep_newlines`): safe to print to a terminal."""
    text = _ESCAPE_SEQ_RE.sub("", text)
    return (_CONTROL_KEEP_NL_RE if keep_newlines else _CONTROL_RE).sub("", text)


# A file with no LF at all but at least this many CRs uses lone CR line endings (classic
# Mac OS, some serial-console captures): its CRs are line breaks. Decided per file, never
# per line: in an LF file a CR is a tqdm redraw inside a line (`split_segments`). Two,
# not one: a single-line file with one trailing CR is one line either way.
LONE_CR_MIN = 2
# ... and so does a file whose lone CRs outnumber its LFs this many times: a console saved with its
# progress bars (`nohup python train.py > log`), where one physical line holds a whole bar's thousands of
# redraws (3D Gaussian Splatting's `Training progress: ... 10/30000 [..., Loss=0.2493386]`, a diffusers
# script's `Steps:` bar): each redraw is a record, so each is a line, as a terminal scrolled them. An LF log
# with a per-epoch bar (a few redraws per line) stays an LF file.
CR_DOMINANCE = 4
# the head of a file on which it is decided (the same for a whole read, a chunked read and the report's re-read) ...
CR_DECISION_BYTES = 1 << 16
# ... read from the first line end when the file's first line is longer than that (a config or a JSON dump on one
# line, then a CR console): the callers read this much of the head
CR_HEAD_BYTES = CR_DECISION_BYTES + (1 << 20)


def lone_cr_endings(data: bytes) -> bool:
    """Whether the file whose head is `data` (its first CR_HEAD_BYTES, or all of it) breaks its lines at every CR:
    it has no LF (and at least LONE_CR_MIN CRs), or its lone CRs outnumber its LFs CR_DOMINANCE to 1, in its first
    CR_DECISION_BYTES, or when those hold no line end at all, in the CR_DECISION_BYTES from its first line end."""
    head = data[:CR_DECISION_BYTES]
    if b"\n" not in head and b"\r" not in head:
        ends = [i for i in (data.find(b"\n"), data.find(b"\r")) if i >= 0]
        if ends:
            head = data[min(ends) : min(ends) + CR_DECISION_BYTES]
    lf = head.count(b"\n")
    if lf == 0:
        return head.count(b"\r") >= LONE_CR_MIN
    return head.count(b"\r") - head.count(b"\r\n") >= CR_DOMINANCE * lf


def to_lf(data: bytes) -> bytes:
    """Every line end of a CR file (CRLF, lone CR, LF) as one LF."""
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def lines_from_bytes(data: bytes, first_line: int = 1, lone_cr: bool | None = None) -> pl.DataFrame:
    """Split bytes into physical lines; LF, CRLF and CR files (`lone_cr`: None decides from `data`, which
    must then be the whole file: `lone_cr_endings`), invalid UTF-8 and NUL bytes are tolerated."""
    if not data:
        return pl.DataFrame(schema={"line": pl.Int64, "text": pl.String})
    if lone_cr or (lone_cr is None and lone_cr_endings(data)):
        data = to_lf(data)
    if b"\x1f" in data:  # the column separator below must not occur in the text
        data = data.replace(b"\x1f", b" ")
    frame = pl.read_csv(
        io.BytesIO(data),
        has_header=False,
        separator="\x1f",
        quote_char=None,
        new_columns=["text"],
        schema={"text": pl.String},
        encoding="utf8-lossy",
        truncate_ragged_lines=True,
    )
    return frame.with_row_index("line", offset=first_line).select(
        pl.col("line").cast(pl.Int64), pl.col("text").fill_null("")
    )


# A line that is one JSON string literal, with an optional trailing comma: how a Jupyter notebook
# (.ipynb) stores every line of a cell's printed output (`"step 10 loss 2.31\n",`), and so what a
# whole notebook or an excerpt of one holds. Only valid JSON escapes, so the decode cannot fail.
JSON_STRING_LINE_RE = r'^\s*("(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*")\s*,?\s*$'


def unwrap_json_strings(lines: pl.DataFrame) -> pl.DataFrame:
    """Decode the lines that are one JSON string literal (notebook output lines) to the text they
    hold: the trailing newline dropped, an inner newline or carriage return kept as a CR so that
    `split_segments` splits there (tqdm redraws in a notebook are `\\r` escapes). Other lines as
    they are; only lines that open with a quote are tested."""
    text = pl.col("text")
    quoted = text.str.contains(r'^\s*"')
    if not lines.select(quoted.any()).item():
        return lines
    literal = text.str.extract(JSON_STRING_LINE_RE, 1)
    decoded = literal.str.json_decode(pl.String).str.strip_suffix("\n").str.replace_all("\n", "\r", literal=True)
    return lines.with_columns(pl.when(quoted & literal.is_not_null()).then(decoded).otherwise(text).alias("text"))


def split_segments(lines: pl.DataFrame) -> pl.DataFrame:
    """Split each physical line on carriage returns (tqdm redraws) and on the literal
    two characters `^M` of pasted logs, keeping the physical line number of every piece.
    Empty pieces are dropped. (Only lines that hold a CR are split: the common case
    costs one literal scan.) Notebook output lines are decoded first (`unwrap_json_strings`)."""
    lines = unwrap_json_strings(lines)
    text = pl.col("text")
    has_cr = text.str.contains("\r", literal=True) | text.str.contains("^M", literal=True)
    marked = lines.with_columns(has_cr.alias("_cr"))
    if not marked.get_column("_cr").any():
        out = lines
    else:
        pieces = (
            marked.filter(pl.col("_cr"))
            .drop("_cr")
            .with_columns(text.str.replace_all("^M", "\r", literal=True).str.split("\r"))
            .explode("text")
        )
        out = pl.concat([marked.filter(~pl.col("_cr")).drop("_cr"), pieces]).sort("line", maintain_order=True)
    return out.filter(text.str.contains(r"\S"))


# Cheap anchored test for "this line may carry a prefix" (most lines do not).
PREFIX_HINT_RE = r"^(?:[>+`]|\[(?:rank|default)\d|\[\d+(?:\] |:\d+\]:)|\d{1,4}: |\d{4}-\d{2}-\d{2}T\d|\([\w.-]*\s?pid=)"


# A rank the logger writes into its own header: icefall / k2 recipes' `setup_logger`
# (`%(asctime)s %(levelname)s [%(filename)s:%(lineno)d] (rank/world_size) %(message)s`:
# `2023-08-25 19:14:58,332 INFO [train.py:878] (2/4) Epoch 1, batch 0, loss[...]`). The header stays in the text.
LOGGER_RANK_RE = r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}[,.]\d+ [A-Z]+ \[[\w./-]+:\d+\] \((\d+)/\d+\) "


def _logger_rank(lines: pl.DataFrame) -> pl.DataFrame:
    """`prefix_rank` from a logger header's `(rank/world_size)` where no launcher prefix gave one."""
    text = pl.col("text")
    if not lines.select(text.str.contains("] (", literal=True).any()).item():
        return lines
    rank = text.str.extract(LOGGER_RANK_RE, 1).cast(pl.Int32, strict=False)
    return lines.with_columns(pl.coalesce(pl.col("prefix_rank"), rank).alias("prefix_rank"))


def strip_prefixes(lines: pl.DataFrame) -> pl.DataFrame:
    """Remove ANSI codes and launcher/paste prefixes; add `prefix_rank` (Int32, null if none).
    The regexes run only on the lines a cheap test flags (ANSI escape, prefix-like start)."""
    text = pl.col("text")
    lines = lines.with_columns(
        pl.when(text.str.contains("\x1b", literal=True))
        .then(text.str.replace_all(ANSI_RE, ""))
        .otherwise(text)
        .alias("text")
    )
    hinted = text.str.contains(PREFIX_HINT_RE)
    marked = lines.with_columns(hinted.alias("_pfx"))
    plain = marked.filter(~pl.col("_pfx")).drop("_pfx").with_columns(pl.lit(None, dtype=pl.Int32).alias("prefix_rank"))
    if plain.height == lines.height:
        return _logger_rank(plain)
    caps = marked.filter(pl.col("_pfx")).drop("_pfx").with_columns(text.str.extract_groups(PREFIX_RE).alias("_c"))
    fixed = caps.with_columns(
        pl.coalesce(
            pl.col("_c").struct.field("rank"), pl.col("_c").struct.field("rank2"), pl.col("_c").struct.field("rank3")
        )
        .cast(pl.Int32, strict=False)
        .alias("prefix_rank"),
        text.str.replace(PREFIX_RE, "").alias("text"),
    ).drop("_c")
    return _logger_rank(pl.concat([plain, fixed]).sort("line", maintain_order=True))
