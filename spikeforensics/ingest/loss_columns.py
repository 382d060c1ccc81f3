"""Whitespace-separated loss histories of scientific-ML tools, one row per logged step, numbers only:

DeepXDE's `loss.dat` (`dde.saveplot(..., issave=True)` -> `utils.external.save_loss_history`: `np.savetxt(fname,
np.hstack((steps, loss_train, loss_test, metrics_test)), header="step, loss_train, loss_test, metrics_test")`):

    # step, loss_train, loss_test, metrics_test
    0.000000000000000000e+00 3.996483981609344482e-02 1.430361419916152954e-01 ...

`loss_train` and `loss_test` hold one column per loss term (k each: PDE residuals, boundary and initial
conditions), `metrics_test` one per configured metric (m, usually 0 or 1): a row of c columns has k = (c - 1 -
m) / 2 with m = (c - 1) mod 2 (so at most one metric is assumed: two or more make the split ambiguous from the
file alone, 5 columns being two terms, or one term and two metrics; such a file is read as the former). Step = the first column; `loss` = the sum of the k training terms (DeepXDE sums
them, weights 1 unless the user set `loss_weights`, which the file does not record), `eval_loss` the sum of the
k test terms, the terms themselves `loss_term_<j>` / `eval_loss_term_<j>`, metrics `eval_metric_<j>`. L-BFGS
after Adam logs its starting step again: the repeat is the same record (the driver keeps one per step).

GPUMD's `nep` trainer `loss.out` (neuroevolution potentials, trained by SNES: a generation is a step), one row
every 100 generations, no header (GPUMD docs, "loss.out"):

    100     1.24750    0.01136    0.01313    0.00141      0.24432      0.00000      0.00134      0.24098      0.00000

10 columns for a potential: generation, total loss, L1 and L2 regularisation, RMSE of energy, force and virial
on the training set, then the same on the test set (`loss`, `l1_reg`, `l2_reg`, `rmse_energy`, `rmse_force`,
`rmse_virial`, `eval_rmse_energy`, ...); 6 for a dipole or polarisability model (generation, total, L1, L2,
train RMSE, test RMSE). Recognised by its file name, `loss.out`, and that shape.
"""

from __future__ import annotations

import re

import polars as pl

from spikeforensics.ingest.base import ParseResult, SniffSample, SourceFile, prepared_lines, step_int, text_result

NAME = "loss_columns"
NUM = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)"
DEEPXDE_HEADER = r"^#\s*step,\s*loss_train,\s*loss_test"
NEP_COLUMNS = {
    10: [
        "loss",
        "l1_reg",
        "l2_reg",
        "rmse_energy",
        "rmse_force",
        "rmse_virial",
        "eval_rmse_energy",
        "eval_rmse_force",
        "eval_rmse_virial",
    ],
    6: ["loss", "l1_reg", "l2_reg", "rmse", "eval_rmse"],
}
MIN_ROWS = 3


def _numeric_rows(lines: list[str]) -> list[list[str]]:
    return [ln.split() for ln in lines if ln.strip() and re.fullmatch(rf"\s*{NUM}(?:\s+{NUM})+\s*", ln)]


def _kind(sample_lines: list[str], name: str) -> str | None:
    rows = _numeric_rows(sample_lines)
    if len(rows) < MIN_ROWS or len({len(r) for r in rows}) != 1:
        return None
    if any(re.match(DEEPXDE_HEADER, ln) for ln in sample_lines[:3]) and len(rows[0]) >= 3:
        return "deepxde"
    if name == "loss.out" and len(rows[0]) in NEP_COLUMNS and all(re.fullmatch(r"\d+", r[0]) for r in rows):
        return "nep"
    return None


def sniff(sample: SniffSample) -> float:
    return 0.9 if _kind(sample.lines, sample.path.name.lower()) else 0.0


def _columns(kind: str, width: int) -> list[str]:
    if kind == "nep":
        return NEP_COLUMNS[width]
    m = (width - 1) % 2
    k = (width - 1 - m) // 2
    return (
        [f"loss_term_{j + 1}" for j in range(k)]
        + [f"eval_loss_term_{j + 1}" for j in range(k)]
        + [f"eval_metric_{j + 1}" for j in range(m)]
    )


def parse(src: SourceFile) -> ParseResult:
    lines = prepared_lines(src)
    text = pl.col("text")
    kind = _kind(lines.head(400).get_column("text").to_list(), src.path.name.lower())
    if kind is None:
        return ParseResult()
    cells = lines.filter(text.str.contains(rf"^\s*{NUM}(?:\s+{NUM})+\s*$")).with_columns(
        text.str.extract_all(r"\S+").alias("_c")
    )
    width = int(cells.get_column("_c").list.len().mode().sort()[-1])
    fits = cells.filter(pl.col("_c").list.len() == width)
    unparsed = cells.filter(pl.col("_c").list.len() != width).select("line", "text")
    records = fits.select(
        "line",
        step_int(pl.col("_c").list.get(0).cast(pl.Float64, strict=False)).alias("step"),
        "prefix_rank",
        pl.lit("train").alias("record_kind"),
        pl.lit(None, dtype=pl.Datetime("us")).alias("time"),
    )
    names = _columns(kind, width)
    wide = fits.select(
        "line",
        *[
            pl.col("_c").list.get(j + 1).str.to_lowercase().cast(pl.Float64, strict=False).alias(name)
            for j, name in enumerate(names)
        ],
    )
    if kind == "deepxde":
        k = sum(1 for n in names if n.startswith("loss_term_"))
        terms = [f"loss_term_{j + 1}" for j in range(k)]
        tests = [f"eval_loss_term_{j + 1}" for j in range(k)]
        wide = wide.with_columns(pl.sum_horizontal(terms).alias("loss"), pl.sum_horizontal(tests).alias("eval_loss"))
        # a NaN term makes the sum NaN (sum_horizontal skips nulls only)
        wide = wide.with_columns(
            pl.when(pl.any_horizontal([pl.col(t).is_nan() for t in terms]))
            .then(float("nan"))
            .otherwise("loss")
            .alias("loss")
        )
    values = wide.unpivot(index="line", variable_name="name", value_name="value")
    return text_result(src.name, lines, records, values, unparsed, mode="done")
