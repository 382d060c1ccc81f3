"""One alias table: how frameworks spell a metric or a column -> our canonical name.

Keys are compared after `normalise_name` (lower case, non-alphanumerics as `_`), so
`train/grad_norm`, `Grad Norm` and `grad-norm` are all `train_grad_norm` /
`grad_norm`. Users extend the tables with a TOML file (`--aliases FILE`, or the
environment variable SPIKEFORENSICS_ALIASES) holding `[metrics]`, `[layer_columns]`,
`[batch_columns]` and/or `[telemetry_fields]` tables of `alias = "canonical"`, and an
`[nvidia_smi]` table whose `query` is the `--query-gpu` field list of a CSV written with
`noheader` (`query = "timestamp,index,temperature.gpu,power.draw"`).
docs/formats.md lists the tables.
"""

from __future__ import annotations

import os
import tomllib
from contextlib import contextmanager
from pathlib import Path

import polars as pl

# Step-record metrics. Left: normalised spelling seen in the wild; right: canonical.
METRIC_ALIASES: dict[str, str] = {
    # loss
    "lm_loss": "loss",
    "train_loss": "loss",
    "training_loss": "loss",  # HF Trainer's notebook table `Step | Training Loss | Validation Loss`
    "batch_loss": "loss",  # `Average training batch loss: nan` (a TF loop's print)
    "mini_batch_loss": "loss",  # MATLAB trainNetwork's verbose table `| Mini-batch Loss |` (ingest/pipe_table.py)
    "loss_function": "loss",  # NVIDIA MLPerf SSD: `Iteration: 20, Loss function: 20.554, Average Loss: 0.446`
    "train_batch_loss": "loss",  # crnn-pytorch `train_batch_loss[ N ]:` (generic_steps)
    "trl": "loss",
    "train_crossentropyloss": "loss",
    "train_ce_loss": "loss",
    "loss_metrics_global_avg_loss": "loss",
    "train_train_loss": "loss",
    # a loss printed per output unit (XNMT's `train_loss/word=8.59`; the per-token mean is the training loss)
    "train_loss_word": "loss",
    "train_loss_per_word": "loss",
    "train_loss_per_token": "loss",
    "loss_per_token": "loss",
    "reduced_train_loss": "loss",
    "train_loss_step": "loss",
    "loss_step": "loss",
    "total_loss": "loss",
    "train_total_loss": "loss",
    "loss_total": "loss",
    "loss_tot": "loss",
    "tot_loss": "loss",
    # DeePMD-kit `lcurve.out` (`#  step  rmse_val  rmse_trn  rmse_e_val ... lr`): its docs call the second and
    # third columns the loss function on the validation and the training data
    "rmse_trn": "loss",
    "rmse_val": "eval_loss",
    # OpenAI Spinning Up `progress.txt` (EpochLogger): `LossPi`, `LossQ`, `LossV` are the actor's and the
    # critics' losses (a `loss_*` term each; `RunData.resolve` reads the non-negative critic as the loss)
    "losspi": "loss_pi",
    "lossq": "loss_q",
    "lossv": "loss_v",
    "losses": "loss",  # the summed loss dict of detection loops (maskrcnn-benchmark / detectron-style `losses = sum(loss_dict.values())`)
    # grad norm
    "grad_norm": "grad_norm",
    "gnorm": "grad_norm",
    "grad_l2": "grad_norm",
    "total_norm": "grad_norm",
    "train_grad_norm": "grad_norm",
    "norm": "grad_norm",
    "optim_total_grad_norm": "grad_norm",
    "grad_norm_grad_norm": "grad_norm",
    "gradient_norm": "grad_norm",
    "global_grad_norm": "grad_norm",
    "grad_norm_preclip": "grad_norm",
    "grad_norm_pre_clip": "grad_norm",
    "gradnorm": "grad_norm",
    "grad_norm_total": "grad_norm",
    "g_param_norm": "grad_norm",  # simple-nmt's `|g_param|=` (generic_steps reads `|x|=` as `x_norm`)
    # RL trainers (verl `step:N - actor/grad_norm:... - actor/lr:...`): the trained policy's norm and LR;
    # its `actor/pg_loss` (a policy-gradient surrogate near 0, of either sign) keeps its own name
    "actor_grad_norm": "grad_norm",
    "grad_gnorm": "grad_norm",  # RLlib's learner stats (Ray Tune `Result for` blocks)
    "grad_norm_clipped": "grad_norm_clipped",
    "grad_norm_post_clip": "grad_norm_clipped",
    "grad_norm_postclip": "grad_norm_clipped",
    "clipped_grad_norm": "grad_norm_clipped",
    # learning rate
    "lr": "lr",
    "learning_rate": "lr",
    "base_learning_rate": "lr",  # MATLAB trainNetwork's `| Base Learning Rate |`
    "train_learning_rate": "lr",
    "optim_lr": "lr",
    "actor_lr": "lr",  # verl (see actor_grad_norm)
    "cur_lr": "lr",  # RLlib's learner stats
    "learning_rate_learning_rate": "lr",
    "lr_abs": "lr",
    "learningrate": "lr",
    "lrate": "lr",  # NVIDIA DLLogger prints (MLPerf RNN-T `| lrate 9.42e-05`)
    "lr_0": "lr",  # chemprop's `lr_0 = 1.3e-04` (the first parameter group's)
    # PyTorch Lightning's LearningRateMonitor: `lr-<Optimizer>`, `lr-<Optimizer>/pg1` for the first of several
    # parameter groups (see LIGHTNING_LR_OPTIMIZERS below)
    # loss scale
    "loss_scale": "loss_scale",
    "loss_scale_loss_scale": "loss_scale",
    "scale": "loss_scale",
    # eval
    "eval_loss": "eval_loss",
    "val_loss": "eval_loss",
    "valid_loss": "eval_loss",
    "vali_loss": "eval_loss",  # thuml Time-Series-Library / OpenSTL: `Train Loss: 0.0301789 | Vali Loss: 0.0358254`
    "validation_loss": "eval_loss",
    "eval_lm_loss": "eval_loss",
    "tel": "eval_loss",
    "lm_loss_value": "eval_loss",
    "eval_loss_eval_loss": "eval_loss",
    "val_loss_epoch": "eval_loss",
    # counters
    "epoch": "epoch",
    "train_epoch": "epoch",
    "consumed_samples": "consumed_samples",
    "consumed_tokens": "consumed_tokens",
    "num_input_tokens_seen": "consumed_tokens",
    "total_tokens": "consumed_tokens",
    "throughput_total_tokens": "consumed_tokens",
    "elapsed_time_per_iteration_ms": "step_time_ms",
    "time_ms": "step_time_ms",
    "step_time_ms": "step_time_ms",
    "iteration_time_ms": "step_time_ms",
    "tps": "tokens_per_s",
    "tok_s": "tokens_per_s",
    "tokens_per_s": "tokens_per_s",
    "tokens_per_second": "tokens_per_s",
    "throughput_tps": "tokens_per_s",
    "tokens_per_sec": "tokens_per_s",
    "tok_per_s": "tokens_per_s",
    "mfu": "mfu",
    "mfu_pct": "mfu",
    "number_of_skipped_iterations": "skipped_iters",
    "skipped_iters": "skipped_iters",
    "number_of_nan_iterations": "nan_iters",
    "nan_iters": "nan_iters",
    "num_zeros": "num_zeros",
    "num_zeros_in_grad": "num_zeros",
}
# PyTorch Lightning's LearningRateMonitor logs `lr-<Optimizer class>` (`lr-Adam`, `lr-AdamW`), and
# `lr-<Optimizer>/pg1`, `/pg2`, ... for several parameter groups: the first group's is the run's LR
LIGHTNING_LR_OPTIMIZERS = (
    "adam", "adamw", "sgd", "rmsprop", "adagrad", "adadelta", "adamax", "nadam", "radam", "lion", "adafactor", "lamb",
    "lars", "sophia", "muon", "sparseadam", "lbfgs", "asgd", "rprop", "adabelief", "ranger", "novograd", "fusedadam",
    "fusedlamb", "deepspeedcpuadam", "adamw8bit", "adam8bit", "pagedadamw", "pagedadamw8bit", "schedulefreeadamw",
)  # fmt: skip
for _opt in LIGHTNING_LR_OPTIMIZERS:
    METRIC_ALIASES.setdefault(f"lr_{_opt}", "lr")
    METRIC_ALIASES.setdefault(f"lr_{_opt}_pg1", "lr")

# Columns of per-layer gradient dumps.
LAYER_COLUMN_ALIASES: dict[str, str] = {
    "step": "step",
    "iteration": "step",
    "iter": "step",
    "global_step": "step",
    "_step": "step",
    "rank": "rank",
    "global_rank": "rank",
    "local_rank": "rank",
    "layer": "layer",
    "name": "layer",
    "param": "layer",
    "parameter": "layer",
    "module": "layer",
    "grad_norm": "grad_norm",
    "grad_l2": "grad_norm",
    "norm": "grad_norm",
    "l2": "grad_norm",
    "gnorm": "grad_norm",
    "l2_norm": "grad_norm",
    "grad_l2_norm": "grad_norm",
    "zero_frac": "zero_frac",
    "zero_fraction": "zero_frac",
    "frac_zero": "zero_frac",
    "gzero": "zero_frac",
    "pos_frac": "pos_frac",
    "positive_frac": "pos_frac",
    "sign_ratio": "pos_frac",
    "frac_pos": "pos_frac",
    "max_abs": "max_abs",
    "abs_max": "max_abs",
    "gmax": "max_abs",
    "max": "max_abs",
    "numel": "numel",
    "param_norm": "param_norm",
    "weight_norm": "param_norm",
    "update_norm": "update_norm",
}

# Columns of batch manifests.
BATCH_COLUMN_ALIASES: dict[str, str] = {
    "step": "step",
    "iteration": "step",
    "iter": "step",
    "global_step": "step",
    "rank": "rank",
    "dp_rank": "rank",
    "data_parallel_rank": "rank",
    "micro": "micro",
    "micro_batch": "micro",
    "microbatch": "micro",
    "micro_step": "micro",
    "micro_batch_idx": "micro",
    "microbatch_idx": "micro",
    "accum_step": "micro",
    "grad_accum_step": "micro",
    "sample_id": "sample_id",
    "sample_ids": "sample_ids",
    "ids": "sample_ids",
    "sample": "sample_id",
    # dataset indices and document IDs are sample IDs too (OLMo-style "data indices" dumps)
    "sample_idx": "sample_id",
    "sample_index": "sample_id",
    "doc_id": "sample_id",
    "document_id": "sample_id",
    "example_id": "sample_id",
    "instance_id": "sample_id",
    "data_index": "sample_id",
    "sample_indices": "sample_ids",
    "indices": "sample_ids",
    "data_indices": "sample_ids",
    "doc_ids": "sample_ids",
    "document_ids": "sample_ids",
    "example_ids": "sample_ids",
    "instance_ids": "sample_ids",
    "sample_loss": "sample_loss",
    "per_sample_loss": "sample_loss",
    "sample_losses": "sample_losses",
    "losses": "sample_losses",
    "per_sample_losses": "sample_losses",
    "loss_per_sample": "sample_losses",
    "tokens": "tokens",
    "num_tokens": "tokens",
    "n_tokens": "tokens",
    "length": "tokens",
    "lengths": "tokens",
    "token_count": "tokens",
    "token_counts": "tokens",
    "seq_len": "tokens",
    "seq_lens": "tokens",
    "source": "sample_source",
    "sample_source": "sample_source",
    "dataset": "sample_source",
    "domain": "sample_source",
}

# Telemetry fields: nvidia-smi query names (units stripped), `nvidia-smi dmon` columns,
# DCGM `dcgmi dmon` short names and dcgm-exporter metric names (after `normalise_name`).
TELEMETRY_FIELD_ALIASES: dict[str, str] = {
    # nvidia-smi --query-gpu
    "temperature_gpu": "temperature",
    "temperature_memory": "temperature_memory",
    "power_draw": "power",
    "power_draw_instant": "power",
    "power_draw_average": "power",
    "power_limit": "power_limit",
    "enforced_power_limit": "power_limit",
    "utilization_gpu": "utilization",
    "utilization_memory": "utilization_memory",
    "memory_used": "memory_used",
    "memory_total": "memory_total",
    "memory_free": "memory_free",
    "fan_speed": "fan_speed",
    "clocks_current_graphics": "clock_graphics",
    "clocks_gr": "clock_graphics",
    "clocks_current_sm": "clock_sm",
    "clocks_sm": "clock_sm",
    "clocks_current_memory": "clock_memory",
    "clocks_mem": "clock_memory",
    "ecc_errors_corrected_volatile_total": "ecc_corrected",
    "ecc_errors_uncorrected_volatile_total": "ecc_uncorrected",
    "ecc_errors_corrected_aggregate_total": "ecc_corrected_aggregate",
    "ecc_errors_uncorrected_aggregate_total": "ecc_uncorrected_aggregate",
    "retired_pages_pending": "retired_pages_pending",
    "pstate": "pstate",
    "clocks_throttle_reasons_active": "throttle_reasons",
    "clocks_event_reasons_active": "throttle_reasons",
    # nvidia-smi dmon
    "pwr": "power",
    "gtemp": "temperature",
    "temp": "temperature",
    "mtemp": "temperature_memory",
    "sm": "sm_util",
    "mem": "memory_util",
    "mclk": "clock_memory",
    "pclk": "clock_graphics",
    "sbecc": "ecc_corrected",
    "dbecc": "ecc_uncorrected",
    "fb": "memory_used",
    "bar1": "bar1_used",
    "pviol": "power_violation",
    "tviol": "thermal_violation",
    "rxpci": "pcie_rx",
    "txpci": "pcie_tx",
    # DCGM dcgmi dmon short names
    "tmptr": "temperature",
    "power": "power",
    "xider": "xid",
    "mmtmp": "temperature_memory",
    "smact": "sm_active",
    "smocc": "sm_occupancy",
    "gract": "gr_active",
    "drama": "dram_active",
    "fbusd": "memory_used",
    "fbfre": "memory_free",
    "gputl": "utilization",
    "smclk": "clock_sm",
    "mmclk": "clock_memory",
    # dcgm-exporter (DCGM_FI_DEV_* / DCGM_FI_PROF_*, prefix removed)
    "gpu_temp": "temperature",
    "memory_temp": "temperature_memory",
    "power_usage": "power",
    "gpu_util": "utilization",
    "mem_copy_util": "memory_util",
    "fb_used": "memory_used",
    "fb_free": "memory_free",
    "sm_clock": "clock_sm",
    "mem_clock": "clock_memory",
    "xid_errors": "xid",
    "ecc_sbe_vol_total": "ecc_corrected",
    "ecc_dbe_vol_total": "ecc_uncorrected",
    "ecc_sbe_agg_total": "ecc_corrected_aggregate",
    "ecc_dbe_agg_total": "ecc_uncorrected_aggregate",
    "sm_active": "sm_active",
    "sm_occupancy": "sm_occupancy",
    "gr_engine_active": "gr_active",
    "dram_active": "dram_active",
    "total_energy_consumption": "energy",
}

# The `--query-gpu` field names of nvidia-smi CSVs written with `noheader` (user-supplied: the
# columns of such a file cannot be guessed).
SMI_QUERY: list[str] = []

_USER_TABLES = {
    "metrics": METRIC_ALIASES,
    "layer_columns": LAYER_COLUMN_ALIASES,
    "batch_columns": BATCH_COLUMN_ALIASES,
    "telemetry_fields": TELEMETRY_FIELD_ALIASES,
}


@contextmanager
def user_aliases(path: str | os.PathLike | None = None):
    """The alias tables extended by a user's TOML file (else $SPIKEFORENSICS_ALIASES) for the
    duration of the block, then restored: one ingest's aliases never leak into the next one in
    the same process (a notebook, a test session)."""
    saved = {name: dict(table) for name, table in _USER_TABLES.items()}
    saved_query = list(SMI_QUERY)
    try:
        load_user_aliases(path)
        yield
    finally:
        for name, table in _USER_TABLES.items():
            table.clear()
            table.update(saved[name])
        SMI_QUERY[:] = saved_query


def load_user_aliases(path: str | os.PathLike | None = None) -> None:
    """Merge a user's alias TOML into the tables (raises ValueError naming the file)."""
    path = path or os.environ.get("SPIKEFORENSICS_ALIASES")
    if not path:
        return
    from spikeforensics.ingest.base import normalise_name

    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: cannot read alias file: {exc}") from exc
    for section, table in data.items():
        if section == "nvidia_smi" and isinstance(table, dict):
            query = table.get("query")
            if not isinstance(query, str) or not query.strip() or set(table) - {"query"}:
                raise ValueError(
                    f'{path}: [nvidia_smi] takes one key, query = "field,field,..." (the --query-gpu list)'
                )
            SMI_QUERY[:] = [f.strip() for f in query.split(",") if f.strip()]
            continue
        if section not in _USER_TABLES or not isinstance(table, dict):
            raise ValueError(
                f"{path}: unknown section [{section}] (expected one of {sorted([*_USER_TABLES, 'nvidia_smi'])})"
            )
        for alias, canonical in table.items():
            if not isinstance(canonical, str):
                raise ValueError(f"{path}: [{section}] {alias} must map to a string")
            _USER_TABLES[section][normalise_name(alias)] = canonical


def canonical_metric(name: str) -> str:
    from spikeforensics.ingest.base import normalise_name

    key = normalise_name(name)
    return METRIC_ALIASES.get(key, key)


def canonical_metric_expr(expr: pl.Expr) -> pl.Expr:
    from spikeforensics.ingest.base import normalise_name_expr

    key = normalise_name_expr(expr)
    return key.replace(METRIC_ALIASES)


def rename_columns(columns: list[str], table: dict[str, str]) -> dict[str, str]:
    """Map a file's column names to canonical ones (first match wins; others untouched)."""
    from spikeforensics.ingest.base import normalise_name

    out: dict[str, str] = {}
    taken: set[str] = set()
    for col in columns:
        canonical = table.get(normalise_name(col))
        if canonical and canonical not in taken:
            out[col] = canonical
            taken.add(canonical)
    return out
