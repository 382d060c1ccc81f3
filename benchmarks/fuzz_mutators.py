"""The mutations of the fuzz benchmark (`benchmarks/fuzz.py`): byte- and line-level ones for any file,
structural ones for Parquet, NPZ and TensorBoard side files. Each takes the bytes (or the seed path)
and a `random.Random`, so an input is made again from its seed alone."""

from __future__ import annotations

import io
import json
import random
import re
import struct
from pathlib import Path

# Longest line a mutation inserts: long enough to find per-line quadratic costs and
# whole-line copies, short enough that 2,000 inputs fit on a laptop disk.
LONG_LINE_MAX = 16 << 20
# Fewer rows for structural side-file mutations: they are about types, not volume.
SIDE_ROWS_MAX = 5000


def tb_events_from_log(log: Path) -> list[tuple[int, float, str, float]]:
    """(step, wall_time, tag, value) from a Megatron-style fixture log: loss and grad norm per iteration."""
    events = []
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"iteration\s+(\d+)/.*?lm loss: ([0-9.Ee+-]+).*?grad norm: ([0-9.Ee+-]+)", line)
        if m:
            step = int(m.group(1))
            events += [
                (step, 1.7e9 + step, "train/loss", float(m.group(2))),
                (step, 1.7e9 + step, "train/grad_norm", float(m.group(3))),
            ]
    return events or [(s, 1.7e9 + s, "train/loss", 3.0 - s * 0.001) for s in range(1, 300)]


def _tb_record(data: bytes, rng: random.Random | None = None, bad: str | None = None) -> bytes:
    from tensorboard.summary.writer.record_writer import masked_crc32c

    header = struct.pack("Q", len(data))
    if bad == "huge_length":
        header = struct.pack("Q", 1 << 62)
    head_crc = struct.pack("I", masked_crc32c(header))
    data_crc = struct.pack("I", masked_crc32c(data))
    if bad == "bad_crc":
        data_crc = struct.pack("I", (masked_crc32c(data) + 1) & 0xFFFFFFFF)
    return header + head_crc + data + data_crc


def tb_file(rng: random.Random, events, mutation: str | None = None) -> bytes:
    """A TensorBoard event file; `mutation` makes one of its events or records hostile."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

    out = io.BytesIO()
    first = event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2")
    out.write(_tb_record(first.SerializeToString()))
    hit = rng.randrange(len(events)) if events else 0
    for i, (step, wall, tag, value) in enumerate(events):
        ev = event_pb2.Event(wall_time=wall, step=step)
        val = summary_pb2.Summary.Value(tag=tag, simple_value=value)
        bad_record = None
        if i == hit and mutation:
            if mutation == "tb_nonfinite":
                val.simple_value = rng.choice([float("nan"), float("inf"), float("-inf")])
            elif mutation == "tb_wall_time":
                ev.wall_time = rng.choice([float("nan"), float("inf"), -1e300, 1e300, -1.0, 2.6e11])
            elif mutation == "tb_step":
                ev.step = rng.choice([2**63 - 1, -(2**63), -1, 2**53 + 1])
            elif mutation == "tb_tag":
                val.tag = rng.choice(
                    ["", "\x1b[31mloss\x1b[0m", "a" * 100_000, "loss\x00x", "train/loss vs samples", "\u2028loss"]
                )
            elif mutation == "tb_tensor":
                dtype = rng.choice(
                    [
                        types_pb2.DT_STRING,
                        types_pb2.DT_FLOAT,
                        types_pb2.DT_DOUBLE,
                        types_pb2.DT_INT64,
                        types_pb2.DT_COMPLEX64,
                        types_pb2.DT_BOOL,
                        types_pb2.DT_HALF,
                    ]
                )
                n = rng.choice([0, 1, 1000, 2])
                shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=n)])
                tensor = tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape)
                if dtype == types_pb2.DT_STRING:
                    tensor.string_val.extend([b"\xff\xfe garbage"] * n)
                elif dtype in (types_pb2.DT_FLOAT, types_pb2.DT_COMPLEX64):
                    tensor.float_val.extend([float("nan")] * n)
                elif dtype == types_pb2.DT_DOUBLE:
                    tensor.double_val.extend([1e308] * n)
                elif dtype == types_pb2.DT_INT64:
                    tensor.int64_val.extend([2**63 - 1] * n)
                elif dtype == types_pb2.DT_BOOL:
                    tensor.bool_val.extend([True] * n)
                else:
                    tensor.tensor_content = rng.randbytes(rng.choice([0, 1, 3, 2 * max(n, 1)]))
                val = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
            elif mutation == "tb_many_values":
                ev.summary.value.extend(summary_pb2.Summary.Value(tag=f"t{j}", simple_value=1.0) for j in range(5000))
            elif mutation in ("huge_length", "bad_crc"):
                bad_record = mutation
            elif mutation == "tb_garbage_record":
                out.write(_tb_record(rng.randbytes(rng.randint(1, 2000))))
        ev.summary.value.append(val)
        out.write(_tb_record(ev.SerializeToString(), rng, bad_record))
    return out.getvalue()


# -- byte mutations ---------------------------------------------------------------------------------

NUM_RE = re.compile(rb"(?<![A-Za-z_0-9.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
HUGE = [
    b"9223372036854775808",
    b"9223372036854775807",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"1e309",
    b"-1e309",
    b"1" * 400,
    b"1e-400",
    b"9007199254740993",
    b"99999999999999999999.5",
    b"1" + b"0" * 5000,
    b"0x7fffffffffffffff",
    b"1_000_000",
]
NONFINITE = [
    b"nan",
    b"NaN",
    b"inf",
    b"-inf",
    b"Infinity",
    b"-Infinity",
    b"NAN",
    b"+inf",
    b"nan(ind)",
    b"1.#INF",
    b"-nan",
    b"null",
    b'"nan"',
]
ODD_CHARS = [
    b"\x00",
    b"\x1b[31m",
    b"\x1b]0;title\x07",
    b"\x07",
    b"\x0b",
    b"\x0c",
    "\u2028".encode(),
    "\u2029".encode(),
    "\x85".encode(),
    b"\x1c",
    b"\x1e",
    b"\xef\xbb\xbf",
    "\u202e".encode(),
    b"\x7f",
]
BAD_UTF8 = [b"\xc3\x28", b"\xff\xfe", b"\xa0\xa1", b"\xe2\x82", b"\xf0\x28\x8c\x28", b"\xed\xa0\x80", b"\xc0\xaf"]


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _pick_numbers(data: bytes, rng: random.Random, k: int) -> list[re.Match]:
    matches = list(NUM_RE.finditer(data, 0, min(len(data), 4 << 20)))
    return rng.sample(matches, min(k, len(matches)))


def _replace_spans(data: bytes, spans: list[tuple[int, int, bytes]]) -> bytes:
    out, last = [], 0
    for start, end, new in sorted(spans):
        if start < last:
            continue
        out += [data[last:start], new]
        last = end
    out.append(data[last:])
    return b"".join(out)


def m_flip(data, rng):
    buf = bytearray(data)
    for _ in range(rng.randint(1, 20)):
        if buf:
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    return bytes(buf)


def m_truncate(data, rng):
    return data[: rng.randrange(len(data) + 1)]


# a duplicated line adds at most this many bytes: 20,000 copies of a multi-megabyte line (a one-line JSON
# seed) would be tens of GB and crash the harness itself (seed 16); seed 15's 2.57 GB input stays as it was
DUP_MAX_BYTES = 4 << 30


def m_dup_lines(data, rng):
    lines = _lines(data)
    i = rng.randrange(len(lines))
    if rng.random() < 0.5:
        times = min(rng.choice([1, 10, 1000, 20000]), max(1, DUP_MAX_BYTES // (len(lines[i]) + 1)))
        return b"\n".join(lines[: i + 1] + [lines[i]] * times + lines[i + 1 :])
    j = min(len(lines), i + rng.randint(1, 200))
    return b"\n".join(lines[:j] + lines[i:j] * rng.randint(1, 5) + lines[j:])


def m_shuffle(data, rng):
    lines = _lines(data)
    i = rng.randrange(len(lines))
    window = lines[i : i + rng.randint(2, 50)]
    rng.shuffle(window)
    return b"\n".join(lines[:i] + window + lines[i + len(window) :])


def m_huge_numbers(data, rng):
    return _replace_spans(data, [(m.start(), m.end(), rng.choice(HUGE)) for m in _pick_numbers(data, rng, 20)])


def m_nonfinite(data, rng):
    return _replace_spans(data, [(m.start(), m.end(), rng.choice(NONFINITE)) for m in _pick_numbers(data, rng, 20)])


def m_negative(data, rng):
    return _replace_spans(
        data, [(m.start(), m.end(), b"-" + m.group().lstrip(b"-")) for m in _pick_numbers(data, rng, 30)]
    )


def m_garbage(data, rng):
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.randbytes(rng.choice([1, 16, 512, 4096, 65536])) + data[at:]


def m_long_line(data, rng):
    lines = _lines(data)
    i = rng.randrange(len(lines))
    size = rng.choice([70_000, 1 << 20, 4 << 20, LONG_LINE_MAX])
    fill = rng.choice([b"x", b"1", b"loss: ", b"step 1 ", b"{'loss': 1.0, ", b"|", b",", b" "])
    long = (fill * (size // len(fill) + 1))[:size]
    if rng.random() < 0.5 and lines[i]:
        long = lines[i] + long  # a record that never ends
    return b"\n".join(lines[:i] + [long] + lines[i + 1 :])


def m_deep_json(data, rng):
    lines = _lines(data)
    depth = rng.choice([100, 1000, 20_000, 200_000])
    kind = rng.choice(["obj", "list", "mixed"])
    if kind == "obj":
        deep = b'{"loss":' * depth + b"1" + b"}" * depth
    elif kind == "list":
        deep = b'{"step": 5, "loss": ' + b"[" * depth + b"1" + b"]" * depth + b"}"
    else:
        deep = b'{"step": 5, "sample_ids": ' + b"[" * depth + b"]" * depth + b"}"
    i = rng.randrange(len(lines))
    return b"\n".join(lines[:i] + [deep] + lines[i:])


def m_header_bomb(data, rng):
    lines = _lines(data)
    n = rng.choice([500, 4096, 5000, 50_000])
    if data.lstrip()[:1] in (b"{", b"["):
        bomb = json.dumps({"step": 1, "loss": 1.0, **{f"k{j}": 0.5 for j in range(n)}}).encode()
        i = rng.randrange(len(lines))
        return b"\n".join(lines[:i] + [bomb] + lines[i:])
    header = lines[0] + b"," + b",".join(b"c%d" % j for j in range(n))
    if rng.random() < 0.3:
        header = b",".join([b"step"] * n)  # duplicate column names
    return b"\n".join([header] + lines[1:])


def m_lone_cr(data, rng):
    return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r")


def m_mixed_endings(data, rng):
    lines = _lines(data.replace(b"\r\n", b"\n"))
    return b"".join(line + rng.choice([b"\n", b"\r\n", b"\r", b"\n\r"]) for line in lines)


def m_bom(data, rng):
    return rng.choice([b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\x00", b"\xef\xbb\xbf" * 2]) + data


def m_reencode(data, rng):
    text = data.decode("utf-8", errors="replace")
    enc = rng.choice(["utf-16", "utf-16-le", "utf-32", "latin-1", "cp1252", "utf-8-sig"])
    return text.encode(enc, errors="replace")


def m_mixed_encoding(data, rng):
    lines = _lines(data)
    for _ in range(rng.randint(1, 10)):
        i = rng.randrange(len(lines))
        choice = rng.random()
        if choice < 0.4:
            lines[i] = lines[i].decode("utf-8", "replace").encode("utf-16-le")
        elif choice < 0.7:
            lines[i] = lines[i].decode("utf-8", "replace").replace("e", "\xe9").encode("latin-1", "replace")
        else:
            at = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:at] + rng.choice(BAD_UTF8) + lines[i][at:]
    return b"\n".join(lines)


def m_odd_chars(data, rng):
    spans = []
    for _ in range(rng.randint(1, 30)):
        at = rng.randrange(len(data) + 1)
        spans.append((at, at, rng.choice(ODD_CHARS)))
    return _replace_spans(data, spans)


def m_repeat_file(data, rng):
    return data * rng.randint(2, 20)


def m_empty(data, rng):
    return rng.choice([b"", b"\n", b"\r", b"\x00" * 100, b" " * 10, data[:1]])


def m_csv_rows(data, rng):
    """CSV row damage: unbalanced quotes, missing and extra fields, multi-line quoted fields."""
    lines = _lines(data)
    for _ in range(rng.randint(1, 10)):
        i = rng.randrange(len(lines))
        choice = rng.random()
        if choice < 0.3:
            lines[i] = b'"' + lines[i]
        elif choice < 0.5:
            lines[i] = lines[i].rsplit(b",", 1)[0]
        elif choice < 0.7:
            lines[i] = lines[i] + b"," * rng.randint(1, 50)
        elif choice < 0.85:
            lines[i] = lines[i].replace(b",", b',"a\nb",', 1)
        else:
            lines[i] = lines[i].replace(b",", b";")
    return b"\n".join(lines)


TEXT_MUTATORS = {
    f.__name__[2:]: f
    for f in (
        m_flip,
        m_truncate,
        m_dup_lines,
        m_shuffle,
        m_huge_numbers,
        m_nonfinite,
        m_negative,
        m_garbage,
        m_long_line,
        m_deep_json,
        m_header_bomb,
        m_lone_cr,
        m_mixed_endings,
        m_bom,
        m_reencode,
        m_mixed_encoding,
        m_odd_chars,
        m_repeat_file,
        m_empty,
        m_csv_rows,
    )
}
# rarer: the expensive ones (long lines, repeats) and the ones that end the file's meaning
WEIGHTS = {"long_line": 0.4, "repeat_file": 0.4, "empty": 0.2, "reencode": 0.5, "deep_json": 0.6, "header_bomb": 0.6}
BINARY_MUTATORS = ("flip", "truncate", "garbage")


# -- structural side-file mutations ------------------------------------------------------------------


def mutate_parquet(src: Path, rng: random.Random) -> tuple[bytes, str]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(src).slice(0, SIDE_ROWS_MAX)
    kind = rng.choice(
        [
            "retype",
            "nulls",
            "huge",
            "nonfinite",
            "drop",
            "rename",
            "empty",
            "nested",
            "row_groups",
            "dup_rows",
            "binary",
            "timestamp",
            "decimal",
        ]
    )
    col = rng.randrange(table.num_columns)
    name = table.column_names[col]
    n = table.num_rows
    if kind == "retype":
        table = table.set_column(
            col, name, pa.array([rng.choice(["x", "1", "", "nan", "1e400", None]) for _ in range(n)], pa.string())
        )
    elif kind == "nulls":
        mask = pa.array([rng.random() < 0.3 for _ in range(n)])
        table = table.set_column(
            col, name, pc.if_else(mask, pa.scalar(None, table.schema.field(col).type), table.column(col))
        )
    elif kind == "huge":
        table = table.set_column(
            col, name, pa.array([rng.choice([2**64 - 1, 2**63, 0]) for _ in range(n)], pa.uint64())
        )
    elif kind == "nonfinite":
        table = table.set_column(
            col,
            name,
            pa.array([rng.choice([float("nan"), float("inf"), -float("inf"), 1.0]) for _ in range(n)], pa.float64()),
        )
    elif kind == "drop":
        table = table.remove_column(col)
    elif kind == "rename":
        new = rng.choice(["", "step", "STEP", "grad_l2", "sample_id", "a" * 5000, "\x1b[31m", "x.y"])
        table = table.rename_columns([new if i == col else c for i, c in enumerate(table.column_names)])
    elif kind == "empty":
        table = table.slice(0, 0)
    elif kind == "nested":
        table = table.set_column(col, name, pa.array([[[i]] for i in range(n)], pa.list_(pa.list_(pa.int64()))))
    elif kind == "dup_rows":
        table = pa.concat_tables([table] * 10)
    elif kind == "binary":
        table = table.set_column(col, name, pa.array([rng.randbytes(8) for _ in range(n)], pa.binary()))
    elif kind == "timestamp":
        table = table.set_column(col, name, pa.array(np.arange(n).astype("datetime64[s]")))
    elif kind == "decimal":
        table = table.set_column(col, name, pa.array([10**30] * n, pa.decimal128(38, 0)))
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=1 if kind == "row_groups" else None)
    return out.getvalue(), f"parquet_{kind}:{name}"


def mutate_npz(src: Path, rng: random.Random) -> tuple[bytes, str]:
    import numpy as np

    with np.load(src, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    key = rng.choice(sorted(arrays))
    a = arrays[key]
    kind = rng.choice(
        [
            "float16",
            "complex",
            "bool",
            "str",
            "object",
            "2d",
            "0d",
            "mismatch",
            "nonfinite",
            "uint64",
            "empty",
            "extra",
            "drop",
            "rename",
        ]
    )
    allow_pickle = False
    if kind == "float16":
        arrays[key] = a.astype(np.float16) if a.dtype.kind in "fiu" else a
    elif kind == "complex":
        arrays[key] = np.ones(len(a), dtype=np.complex128)
    elif kind == "bool":
        arrays[key] = np.ones(len(a), dtype=bool)
    elif kind == "str":
        arrays[key] = np.array([rng.choice(["x", "1", "", "nan"]) for _ in range(len(a))])
    elif kind == "object":
        arrays[key] = np.array([{"a": 1}] * len(a), dtype=object)
        allow_pickle = True
    elif kind == "2d":
        arrays[key] = np.repeat(a[:, None], 3, axis=1) if a.ndim == 1 else a
    elif kind == "0d":
        arrays[key] = np.array(a[0] if len(a) else 0)
    elif kind == "mismatch":
        arrays[key] = a[: len(a) // 2]
    elif kind == "nonfinite":
        arrays[key] = np.where(np.arange(len(a)) % 7 == 0, np.nan, 1.0)
    elif kind == "uint64":
        arrays[key] = np.full(len(a), 2**64 - 1, dtype=np.uint64)
    elif kind == "empty":
        arrays = {k: v[:0] for k, v in arrays.items()}
    elif kind == "extra":
        arrays["extra"] = np.zeros((rng.choice([1, 1000]), 1000))
    elif kind == "drop":
        del arrays[key]
    elif kind == "rename":
        arrays[rng.choice(["", "x" * 300, "steps", "layers"])] = arrays.pop(key)
    out = io.BytesIO()
    if allow_pickle:
        np.savez(out, **arrays)  # savez pickles object arrays
    else:
        np.savez(out, **arrays)
    return out.getvalue(), f"npz_{kind}:{key}"


TB_MUTATIONS = (
    "tb_nonfinite",
    "tb_wall_time",
    "tb_step",
    "tb_tag",
    "tb_tensor",
    "tb_many_values",
    "huge_length",
    "bad_crc",
    "tb_garbage_record",
)
