"""GPU telemetry -> the long `telemetry` table (time, host, gpu, field, value).

Four layouts, told apart by content:

- `nvidia-smi --query-gpu=... --format=csv[,nounits]`: a header row of query names
  with units in brackets (`power.draw [W]`), values `, `-separated and keeping their
  units unless `nounits` (`106.56 W`, `29 %`), `[N/A]`/`[Not Supported]` for missing
  values, the header repeated once per invocation (`-l N` appended runs). `timestamp`
  (`2024/01/31 12:00:00.123`) gives the time, `index` the GPU (else the order of
  `pci.bus_id`). `noheader` output (rows starting with an nvidia-smi timestamp) is read
  with the field list the user gives as `[nvidia_smi] query` in an `--aliases` file (column
  names cannot be guessed), else refused with a message saying so.
- `nvidia-smi dmon`: `# gpu pwr gtemp ...` and `# Idx W C ...` header lines, then
  whitespace-aligned rows (`-` = unsupported); `-o DT` adds `#Date Time` columns.
- `dcgmi dmon -e ...`: `#Entity  TMPTR POWER ...`, a units row, rows `GPU 0  45 70.1 ...`.
- dcgm-exporter Prometheus text: `DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h",...} 45 [ms]`.

Field names go through `aliases.TELEMETRY_FIELD_ALIASES` (`temperature.gpu` ->
`temperature`, `power.draw` -> `power`, `ecc.errors.corrected.volatile.total` ->
`ecc_corrected`, ...); others keep their normalised name. Only numeric values become
rows. DCGM's last-Xid field (`xid`) also yields an `xid` event each time it changes to
a non-zero code for a GPU. A GPU is joined to a rank by index downstream (rank r on
GPU r).
"""

from __future__ import annotations

import io

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest import _tables as T
from spikeforensics.ingest import aliases
from spikeforensics.ingest.base import ParseResult, SniffSample, SourceFile, detail_expr, normalise_name, to_float

NAME = "telemetry"

SMI_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S%.f", "%Y/%m/%d %H:%M:%S")
PROM_RE = r"^(DCGM_FI_[A-Z0-9_]+)\{([^}]*)\}\s+(\S+)(?:\s+(\d+))?\s*$"
# a query-gpu header field: `temperature.gpu`, `power.draw [W]`
SMI_HEADER_FIELD = r"\s*[A-Za-z][A-Za-z0-9_.]*(?: \[[^\]]+\])?\s*"
# the first field of a `noheader` row that starts with the timestamp: `2024/01/31 12:00:00.123`
SMI_TIMESTAMP = r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?"
UNAVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "-", "[Unknown Error]", "")


def field_name(raw: str) -> str:
    """Canonical telemetry field for a query name / dmon column / DCGM name."""
    key = normalise_name(raw.split("[")[0])
    for prefix in ("dcgm_fi_dev_", "dcgm_fi_prof_", "dcgm_fi_"):
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    return aliases.TELEMETRY_FIELD_ALIASES.get(key, key)


def _layout(lines: list[str]) -> str | None:
    import re

    body = [ln.strip() for ln in lines if ln.strip()]
    if not body:
        return None
    if sum(1 for ln in body if re.match(PROM_RE, ln)) >= 1 and all(
        ln.startswith("#") or re.match(PROM_RE, ln) or re.match(r"^[A-Za-z_:][\w:]*(\{.*\})?\s+\S+", ln) for ln in body
    ):
        return "prometheus"
    if any(ln.startswith("#Entity") for ln in body):
        return "dcgmi"
    hdr = [ln for ln in body if ln.startswith("#")]
    if (
        hdr
        and re.search(r"\bgpu\b", hdr[0], re.I)
        and any(re.search(r"\b(pwr|gtemp|sm|mclk|pclk|temp)\b", h) for h in hdr)
    ):
        return "dmon"
    first = body[0].split(",")
    if len(first) >= 2 and re.fullmatch(SMI_TIMESTAMP, first[0].strip()):
        return "smi_noheader"
    if len(first) < 2 or not all(re.fullmatch(SMI_HEADER_FIELD, c) for c in first):
        return None
    names = [normalise_name(c.split("[")[0]) for c in first]
    known = {
        "timestamp",
        "index",
        "pci_bus_id",
        "uuid",
        "name",
        "temperature_gpu",
        "power_draw",
        "utilization_gpu",
        "memory_used",
    }
    if any("[" in c for c in first) or sum(n in known for n in names) >= 2:
        return "smi"
    return None


def sniff(sample: SniffSample) -> float:
    layout = _layout(sample.lines[:200])
    return {"prometheus": 0.9, "dcgmi": 0.9, "dmon": 0.85, "smi": 0.9, "smi_noheader": 0.8}.get(layout or "", 0.0)


def parse(src: SourceFile) -> ParseResult:
    result = ParseResult()
    lines = src.lines().filter(pl.col("text").str.strip_chars() != "")
    layout = _layout(lines.get_column("text").head(200).to_list())
    if layout is None:
        raise T.ingest_error(f"{src.path}: not nvidia-smi / DCGM telemetry (no header row recognised)")
    if layout == "smi_noheader":
        lines = with_query_header(lines, src.path)
        layout = "smi"
    long = {"smi": smi_csv, "dmon": dmon, "dcgmi": dcgmi, "prometheus": prometheus}[layout](lines, result)
    long = long.filter(pl.col("value").is_not_null())
    result.records += long.select("line").unique().height
    result.add("telemetry", schema.conform("telemetry", long))
    result.add("events", xid_events(long))
    return result


def _value(expr: pl.Expr) -> pl.Expr:
    """`106.56 W`, `29 %`, `11175 MiB`, `P0`, `[N/A]` -> Float64 (null when not a number)."""
    s = expr.str.strip_chars()
    s = pl.when(s.is_in(list(UNAVAILABLE))).then(None).otherwise(s)
    s = s.str.replace(r"^P(\d+)$", "$1")  # pstate P0..P12
    return to_float(s.str.replace(r"\s*(?:[KMGT]?i?B|[KMG]?Hz|W|C|%|J|mJ|s|ms|us)$", ""))


def with_query_header(lines: pl.DataFrame, path) -> pl.DataFrame:
    """A `noheader` nvidia-smi CSV with the user's `--query-gpu` list as its header row (line 0)."""
    query = aliases.SMI_QUERY
    first = lines.row(0, named=True)
    if not query:
        raise T.ingest_error(
            f"{path}:{first['line']}: nvidia-smi CSV without a header row (--format=csv,noheader): its columns "
            'cannot be guessed; put the --query-gpu list in an aliases file ([nvidia_smi] query = "timestamp,index,...") '
            "and pass it with --aliases, or add the header line to the file"
        )
    n = len(first["text"].split(","))
    if n != len(query):
        raise T.ingest_error(
            f"{path}:{first['line']}: {n} fields, but the [nvidia_smi] query names {len(query)} ({', '.join(query)})"
        )
    header = pl.DataFrame({"line": [0], "text": [", ".join(query)]}, schema=lines.select("line", "text").schema)
    return pl.concat([header, lines.select("line", "text")], how="vertical_relaxed")


def smi_csv(lines: pl.DataFrame, result: ParseResult) -> pl.DataFrame:
    header = lines.item(0, "text")
    # a header row repeated by every `nvidia-smi -l` invocation
    rows = lines.filter(pl.col("text") != header)
    names = [c.strip() for c in header.split(",")]
    frame = (
        pl.read_csv(
            io.BytesIO("\n".join(rows.get_column("text").to_list()).encode()),
            has_header=False,
            new_columns=[f"c{i}" for i in range(len(names))],
            infer_schema=False,
            truncate_ragged_lines=True,
            raise_if_empty=False,
            quote_char=None,
        )
        if rows.height
        else pl.DataFrame(
            {f"c{i}": [] for i in range(len(names))}, schema={f"c{i}": pl.String for i in range(len(names))}
        )
    )
    frame = frame.with_columns(rows.get_column("line").alias("line"))
    canon = [normalise_name(n.split("[")[0]) for n in names]
    col = {c: f"c{i}" for i, c in enumerate(canon)}
    time = pl.lit(None, dtype=schema.TIME)
    if "timestamp" in col:
        ts = pl.col(col["timestamp"]).str.strip_chars()
        time = pl.coalesce([ts.str.to_datetime(f, strict=False, time_unit="us") for f in SMI_TIME_FORMATS])
    if "index" in col:
        gpu = pl.col(col["index"]).str.strip_chars().cast(pl.Int32, strict=False)
    elif "pci_bus_id" in col:
        gpu = (pl.col(col["pci_bus_id"]).str.strip_chars().str.to_lowercase().rank("dense") - 1).cast(pl.Int32)
    else:  # rows of one sample are printed in GPU order
        gpu = (pl.int_range(pl.len()).over(pl.col(col["timestamp"]) if "timestamp" in col else pl.lit(0))).cast(
            pl.Int32
        )
    skip = {"timestamp", "index", "pci_bus_id", "uuid", "name", "serial", "driver_version", "vbios_version"}
    fields = {field_name(n): f"c{i}" for i, (n, c) in enumerate(zip(names, canon)) if c not in skip}
    wide = frame.select(
        "line", time.alias("time"), gpu.alias("gpu"), *[_value(pl.col(c)).alias(f) for f, c in fields.items()]
    )
    return wide.unpivot(index=["line", "time", "gpu"], variable_name="field", value_name="value")


def dmon(lines: pl.DataFrame, result: ParseResult) -> pl.DataFrame:
    text = pl.col("text").str.strip_chars()
    is_hdr = text.str.starts_with("#")
    # the names header is the `#` line followed by the units line; rows use the last one seen
    is_names = is_hdr & ~text.str.contains(r"(?i)^#\s*(Idx|YYYYMMDD|HH)")
    headers = lines.filter(is_names).get_column("text").unique(maintain_order=True).to_list()
    frames = [(h.lstrip("#").split(), h) for h in headers]
    lines = lines.with_columns(pl.when(is_names).then(pl.col("text")).forward_fill().alias("_hdr"))
    rows = lines.filter(~is_hdr & pl.col("_hdr").is_not_null())
    out = []
    for names, header in frames:
        part = rows.filter(pl.col("_hdr") == header).with_columns(
            pl.col("text").str.strip_chars().str.replace_all(r"\s+", " ").str.split(" ").alias("_v")
        )
        lower = [n.lower() for n in names]
        time = pl.lit(None, dtype=schema.TIME)
        if "date" in lower and "time" in lower:
            stamp = pl.concat_str(
                pl.col("_v").list.get(lower.index("date"), null_on_oob=True),
                pl.lit(" "),
                pl.col("_v").list.get(lower.index("time"), null_on_oob=True),
            )
            time = stamp.str.to_datetime("%Y%m%d %H:%M:%S", strict=False, time_unit="us")
        gpu_i = lower.index("gpu") if "gpu" in lower else lower.index("idx") if "idx" in lower else None
        gpu = (
            pl.col("_v").list.get(gpu_i, null_on_oob=True).cast(pl.Int32, strict=False)
            if gpu_i is not None
            else pl.lit(None, dtype=pl.Int32)
        )
        fields = [(i, field_name(n)) for i, n in enumerate(lower) if n not in ("gpu", "idx", "date", "time")]
        wide = part.select(
            "line",
            time.alias("time"),
            gpu.alias("gpu"),
            *[_value(pl.col("_v").list.get(i, null_on_oob=True)).alias(f) for i, f in fields],
        )
        out.append(wide.unpivot(index=["line", "time", "gpu"], variable_name="field", value_name="value"))
    return (
        pl.concat(out)
        if out
        else pl.DataFrame(
            schema={"line": pl.Int64, "time": schema.TIME, "gpu": pl.Int32, "field": pl.String, "value": pl.Float64}
        )
    )


def dcgmi(lines: pl.DataFrame, result: ParseResult) -> pl.DataFrame:
    text = pl.col("text").str.strip_chars()
    header = lines.filter(text.str.starts_with("#Entity")).item(0, "text")
    names = header.lstrip("#").split()[1:]
    rows = lines.filter(text.str.contains(r"^(GPU|GPU-I|GPU-CI)\s+\d+\s"))
    v = text.str.replace_all(r"\s+", " ").str.split(" ")
    rows = rows.with_columns(v.alias("_v"))
    wide = rows.select(
        "line",
        pl.lit(None, dtype=schema.TIME).alias("time"),
        pl.col("_v").list.get(1).cast(pl.Int32, strict=False).alias("gpu"),
        *[_value(pl.col("_v").list.get(i + 2, null_on_oob=True)).alias(field_name(n)) for i, n in enumerate(names)],
    )
    return wide.unpivot(index=["line", "time", "gpu"], variable_name="field", value_name="value")


def prometheus(lines: pl.DataFrame, result: ParseResult) -> pl.DataFrame:
    text = pl.col("text").str.strip_chars()
    rows = lines.filter(text.str.contains(PROM_RE)).with_columns(text.str.extract_groups(PROM_RE).alias("_m"))
    labels = pl.col("_m").struct.field("2")
    label = lambda k: labels.str.extract(rf'(?:^|,)\s*{k}="([^"]*)"', 1)  # noqa: E731
    metric = pl.col("_m").struct.field("1")
    field_map = {m: field_name(m) for m in rows.select(metric.unique()).to_series().to_list()}
    ms = pl.col("_m").struct.field("4").cast(pl.Int64, strict=False)
    return rows.select(
        "line",
        pl.from_epoch(ms * 1000, time_unit="us").alias("time"),
        pl.coalesce(label("Hostname"), label("hostname")).alias("host"),
        label("gpu").cast(pl.Int32, strict=False).alias("gpu"),
        metric.replace_strict(field_map, default=None).alias("field"),
        _value(pl.col("_m").struct.field("3")).alias("value"),
        label("err_code").cast(pl.Int64, strict=False).alias("_err_code"),
    )


def xid_events(long: pl.DataFrame) -> pl.DataFrame | None:
    """`xid` events where a GPU's last-Xid field changes to a non-zero code."""
    if "host" not in long.columns:
        long = long.with_columns(pl.lit(None, dtype=pl.String).alias("host"))
    xid = long.filter(pl.col("field") == "xid").sort("line")
    if xid.height == 0:
        return None
    key = [pl.col("host").fill_null(""), pl.col("gpu").fill_null(-1)]
    changed = (pl.col("value") != pl.col("value").shift(1).over(key)).fill_null(True)
    hits = xid.filter((pl.col("value") > 0) & changed)
    if hits.height == 0:
        return None
    return schema.conform(
        "events",
        hits.select(
            "line",
            "time",
            pl.lit("xid").alias("kind"),
            detail_expr(
                ints={"code": pl.col("value"), "gpu": pl.col("gpu")},
                strings={"host": pl.col("host")},
                bools={"from_telemetry": pl.lit(True)},
            ).alias("detail"),
        ),
    )
