"""Kernel logs (dmesg, `dmesg --ctime`, `dmesg --time-format iso`, syslog/journalctl,
kern.log) -> `xid` events.

    [ 1843.308145] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, ...
    [Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, ...
    2024-01-15T03:00:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 79, ...
    Feb 14 05:03:41 host kernel: NVRM: Xid (PCI:0000:3b:00): 48, ...

`detail`: `code` (int), `pci` (lower case), `message`, plus `host` (syslog) and
`uptime_s` (seconds since boot, when that is the only clock). Syslog times carry no
year: they take the run's year (`SourceFile.year`, from the run's other logs; files
of this kind are ingested last). With no year known the time is left null.

Newer drivers report a GPU that fell off the bus without an Xid line, over several
lines (continuations indented, no timestamp):

    [ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0
                   NVRM: (PCI ID: 10de:26b5) installed in this system has
                   NVRM: fallen off the bus and is not responding to commands.

That becomes an `xid` event with `code` 79 (the Xid for "GPU has fallen off the bus")
and `inferred: true`, on the line naming the GPU, unless the file also has a real
Xid 79 for the same PCI address.
"""

from __future__ import annotations

import polars as pl

from spikeforensics import schema
from spikeforensics.ingest.base import ParseResult, SniffSample, SourceFile, detail_expr, prepared_lines

NAME = "kernel"
NEEDS_YEAR = True

XID_RE = r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\):\s*(\d+)(?:,\s*(.*))?"
GPU_NAMED_RE = r"NVRM: The NVIDIA GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)"
FALLEN_RE = r"fallen off the bus"
UPTIME_RE = r"^\s*\[\s*(\d+\.\d+)\]"
CTIME_RE = r"^\s*\[([A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\]"
ISO_RE = r"^\s*(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?"
SYSLOG_RE = r"^\s*([A-Z][a-z]{2}\s+\d{1,2} \d{2}:\d{2}:\d{2})(?:\.\d+)? (\S+) kernel:"
# a line that looks like it came from the kernel log (for sniffing)
KERNEL_LINE_RE = rf"{UPTIME_RE}|{CTIME_RE}|{SYSLOG_RE}|^\s*\d{{4}}-\d{{2}}-\d{{2}}T\S+ \S+ kernel:|^\s+NVRM:"


def sniff(sample: SniffSample) -> float:
    import re

    nonempty = [ln for ln in sample.lines if ln.strip()]
    if not nonempty:
        return 0.0
    nvrm = sum(1 for ln in nonempty if "NVRM:" in ln)
    if nvrm == 0:
        return 0.0
    kernelish = sum(1 for ln in nonempty if re.search(KERNEL_LINE_RE, ln))
    strong = any("NVRM: Xid" in ln or "fallen off the bus" in ln for ln in nonempty)
    if kernelish >= 0.5 * len(nonempty):
        return 0.9 if strong else 0.6
    return 0.4 if strong and nvrm >= 0.2 * len(nonempty) else 0.0


def kernel_time(text: pl.Expr, year: int | None) -> pl.Expr:
    """Wall-clock time of a kernel log line (null for seconds-since-boot stamps)."""
    ctime = (
        text.str.extract(CTIME_RE, 1)
        .str.replace_all(r"\s+", " ")
        .str.to_datetime("%a %b %d %H:%M:%S %Y", strict=False, time_unit="us")
    )
    iso = pl.concat_str(
        text.str.extract(ISO_RE, 1),
        pl.lit(" "),
        text.str.extract(ISO_RE, 2),
        pl.lit("."),
        text.str.extract(ISO_RE, 3).fill_null("0").str.slice(0, 6).str.pad_end(6, "0"),
    ).str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us")
    exprs = [ctime, iso]
    if year is not None:
        syslog = pl.concat_str(
            pl.lit(str(year)), pl.lit(" "), text.str.extract(SYSLOG_RE, 1).str.replace_all(r"\s+", " ")
        )
        exprs.append(syslog.str.to_datetime("%Y %b %d %H:%M:%S", strict=False, time_unit="us"))
    return pl.coalesce(exprs).cast(schema.TIME)


def parse(src: SourceFile) -> ParseResult:
    result = ParseResult()
    lines = prepared_lines(src).select("line", "text")
    text = pl.col("text")
    lines = lines.with_columns(
        kernel_time(text, src.year).alias("time"),
        text.str.extract(UPTIME_RE, 1).cast(pl.Float64, strict=False).alias("uptime_s"),
        text.str.extract(SYSLOG_RE, 2).alias("host"),
    )
    xid = lines.filter(text.str.contains(XID_RE)).with_columns(text.str.extract_groups(XID_RE).alias("_x"))
    xid_events = xid.select(
        "line",
        "time",
        pl.lit("xid").alias("kind"),
        detail_expr(
            ints={"code": pl.col("_x").struct.field("2")},
            floats={"uptime_s": pl.col("uptime_s")},
            strings={
                "pci": _short_pci(pl.col("_x").struct.field("1")),
                "message": pl.col("_x").struct.field("3").str.strip_chars().str.slice(0, 300),
                "host": pl.col("host"),
            },
        ).alias("detail"),
        _short_pci(pl.col("_x").struct.field("1")).alias("_pci"),
        pl.col("_x").struct.field("2").cast(pl.Int64, strict=False).alias("_code"),
    )
    fallen = fallen_off_bus(lines)
    real79 = xid_events.filter(pl.col("_code") == 79).get_column("_pci").unique().implode()
    fallen = fallen.filter(~pl.col("_pci").is_in(real79))
    events = pl.concat([xid_events, fallen], how="diagonal_relaxed").sort("line")
    if events.height:
        result.records += events.height
        result.add("events", schema.conform("events", events.drop("_pci", "_code")))
    if src.year is None and lines.select(text.str.contains(SYSLOG_RE).any()).item():
        result.notes.append(
            f"{src.name}: syslog times have no year; ingest the run's training logs first so they take its year"
        )
    return result


def _short_pci(expr: pl.Expr) -> pl.Expr:
    """PCI address as Xid lines print it (`0000:cb:00`), lower case; `.0` function dropped."""
    return expr.str.to_lowercase().str.replace(r"\.[0-9a-f]$", "")


def fallen_off_bus(lines: pl.DataFrame) -> pl.DataFrame:
    """The multi-line, Xid-less 'fallen off the bus' report -> inferred Xid 79 events."""
    text = pl.col("text")
    named = lines.filter(text.str.contains(GPU_NAMED_RE)).select(
        pl.col("line").alias("_gline"),
        "time",
        "uptime_s",
        "host",
        _short_pci(text.str.extract(GPU_NAMED_RE, 1)).alias("_pci"),
    )
    fell = lines.filter(text.str.contains(FALLEN_RE) & ~text.str.contains(XID_RE)).select("line")
    if fell.height == 0:
        return pl.DataFrame(schema={"line": pl.Int64, "_pci": pl.String, "_code": pl.Int64})
    # the GPU line is the nearest one before the 'fallen off the bus' line (within 4 lines)
    joined = fell.sort("line").join_asof(
        named.sort("_gline"), left_on="line", right_on="_gline", strategy="backward", tolerance=4
    )
    return joined.select(
        pl.coalesce("_gline", "line").alias("line"),
        "time",
        pl.lit("xid").alias("kind"),
        detail_expr(
            ints={"code": pl.lit(79)},
            floats={"uptime_s": pl.col("uptime_s")},
            strings={
                "pci": pl.col("_pci"),
                "message": pl.lit("GPU has fallen off the bus (no Xid line)"),
                "host": pl.col("host"),
            },
            bools={"inferred": pl.lit(True)},
        ).alias("detail"),
        pl.col("_pci").fill_null(""),
        pl.lit(79, dtype=pl.Int64).alias("_code"),
    )
