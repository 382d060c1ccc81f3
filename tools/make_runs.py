#!/usr/bin/env python
"""Generate the labelled fixture training runs in sample_logs/.

Trains a tiny GPT on the CPU with PyTorch, injects known faults into the real training loop and
writes what real jobs write (framework log, per-layer gradient dump, batch manifest, GPU
telemetry) plus a measured ground_truth.json per run. See tools/README.md.

    /work/venv/bin/python tools/make_runs.py --set all --out sample_logs [--jobs 2]
    /work/venv/bin/python tools/make_runs.py --set tune --only data_outlier_clip
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spikeforensics.attribute.rules import LABELS  # noqa: E402
from tools.fixtures import scenarios as SC  # noqa: E402
from tools.fixtures import writers as W  # noqa: E402
from tools.fixtures.train import run  # noqa: E402

START = {
    "tune": datetime(2026, 3, 1, 8, 0, 0),
    "holdout": datetime(2026, 3, 9, 14, 0, 0),
    "fresh": datetime(2026, 3, 17, 10, 0, 0),
    "final": datetime(2026, 3, 24, 9, 0, 0),
    "blind": datetime(2026, 4, 2, 16, 0, 0),
    "sealed": datetime(2026, 4, 11, 7, 30, 0),
}
SETS = list(START)
SHIFT_KEYS = {
    "step_start",
    "step_end",
    "peak_step",
    "first_nonfinite_step",
    "nonfinite_steps",
    "nonfinite_steps_attempt0",
    "nonfinite_steps_after_resume",
    "spike_steps",
    "steps_layer_over_10x",
    "first_overflow_step",
    "last_overflow_step",
    "loss_min_step",
    "peak_grad_norm_step",
    "back_below_initial_at",
    "occurrences",
    "probe_below_0_5x_from_step",
    "probe_below_0_1x_from_step",
    "step",
    "steps",
    "crashed_at",
    "crash_step",
    "from_step",
}
KINDS = {
    "hard_spike",
    "soft_drift",
    "nonfinite",
    "loss_scale_collapse",
    "underflow_zeros",
    "sign_ratio_anomaly",
    "clip_rate_anomaly",
    "layer_outlier",
    "vanishing_gradients",
    "loss_oscillation",
}
CAUSES = frozenset(LABELS)  # the product's root-cause labels (CONTRACT.md)
GRAD_FILES = {"csv": "grads.csv", "jsonl": "layer_grads.jsonl", "parquet": "grad_stats.parquet"}


def shift(obj, off, key=None):
    """Convert internal 1-based optimizer steps to the log's own numbering (nanoGPT: iter = step - 1)."""
    if off == 0:
        return obj
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "per_sample_loss":
                out[k] = {str(int(s) + off): x for s, x in v.items()}
            else:
                out[k] = shift(v, off, k)
        return out
    if key in SHIFT_KEYS:
        if isinstance(obj, int) and not isinstance(obj, bool):
            return obj + off
        if isinstance(obj, list) and all(isinstance(x, int) for x in obj):
            return [x + off for x in obj]
    if isinstance(obj, list):
        return [shift(x, off) for x in obj]
    return obj


def clean_json(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else ("nan" if obj != obj else ("inf" if obj > 0 else "-inf"))
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return obj


def quantile(xs, q):
    xs = sorted(x for x in xs if math.isfinite(x))
    i = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[i]


def fault_free(cfg, overrides, **extra):
    return dataclasses.replace(cfg, faults=[], poison={}, overrides={}, attempts=[{}], **{**overrides, **extra})


def calibrate(sc):
    """Set the clip threshold the way the scenario says, from fault-free pilot runs."""
    cfg = sc.cfg
    if sc.clip == "auto":
        pilot = run(fault_free(cfg, sc.pilot_overrides, clip=None, steps=100))
        p99 = quantile([s["grad_norm"] for s in pilot["steps"]], 0.99)
        return dataclasses.replace(cfg, clip=round(2 * p99, 2)), f"2 x P99 ({p99:.3f}) of 100 unclipped steps"
    if isinstance(sc.clip, tuple) and sc.clip[0] == "rate":
        target = sc.clip[1]
        pilot = run(fault_free(cfg, sc.pilot_overrides, clip=None))
        thr = round(quantile([s["grad_norm"] for s in pilot["steps"]], 1 - target), 3)
        for _ in range(2):
            trial = run(dataclasses.replace(cfg, clip=thr))
            rate = sum(s["clipped"] for s in trial["steps"]) / len(trial["steps"])
            if abs(rate - target) <= 0.02:
                break
            thr = round(quantile([s["grad_norm"] for s in trial["steps"]], 1 - target), 3)
        return dataclasses.replace(cfg, clip=thr), f"set so that ~{target:.0%} of steps clip"
    return cfg, "fixed"


def generate(sc, out_root):
    t0 = time.process_time()
    cfg, clip_basis = calibrate(sc)
    ref = None
    if sc.reference:
        ref = run(fault_free(cfg, sc.pilot_overrides))
    rec = run(cfg)
    spec = dict(sc.spec)
    rec["dump_layers"] = W.dumped_layers(rec, spec)
    rec["step_offset"] = spec.get("step_offset", 0)
    incidents, summary, ok = sc.measure(rec, cfg, ref)
    off = rec["step_offset"]
    outdir = os.path.join(out_root, sc.set, sc.name)
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    clock = W.Clock(START[sc.set])
    files = {}
    log_name = W.LOG_NAMES[spec["format"]]
    with open(os.path.join(outdir, log_name), "w", newline="") as fh:
        fh.write(W.render_log(rec, cfg, spec, clock))
    files["log"] = log_name
    gname = GRAD_FILES[spec.get("grads_format", "csv")]
    W.write_layers(os.path.join(outdir, gname), rec, spec)
    files["layer_grads"] = gname
    bname = (
        "batches.csv"
        if spec.get("batches_layout") == "per_sample"
        else "batches.parquet"
        if spec.get("batches_format") == "parquet"
        else "batches.jsonl"
    )
    W.write_batches(os.path.join(outdir, bname), rec, spec)
    files["batches"] = bname
    if sc.telemetry:
        tele = dict(sc.telemetry)
        st = [s for s in rec["steps"] if s["attempt"] == 0 and s["step"] == tele["step"]][0]
        tele["t_fault"] = st["t"] - 0.5 * cfg.step_time
        W.write_telemetry(outdir, rec, cfg, spec, clock, tele)
        files["gpu_telemetry"] = "nvidia_smi.csv"
        files["kernel_log"] = "kern.log"
    fmt = spec["format"]
    gt = dict(
        scenario=sc.name,
        set=sc.set,
        format=fmt,
        seed=cfg.seed,
        healthy=sc.healthy,
        incidents=[shift(i, off) for i in incidents],
        injected=shift(sc.injected, off),
        notes=sc.notes,
        summary=shift(summary, 0),
        effect_visible=bool(ok),
        files=files,
        step_numbering=(
            "nanoGPT `iter N` (N = optimizer steps completed - 1)"
            if off == -1
            else "optimizer steps as the log prints them (skipped fp16 steps included)"
        ),
        per_sample_losses=spec.get("sample_losses", True),
        clock_start=START[sc.set].isoformat(),
        seconds_per_step=cfg.step_time,
        config=dict(
            n_layer=cfg.n_layer,
            d_model=cfg.d_model,
            n_head=cfg.n_head,
            seq_len=cfg.seq_len,
            micro_batch_size=cfg.micro_bs,
            grad_accum=cfg.n_micro,
            world_size=cfg.world,
            global_batch_size=cfg.global_batch,
            steps=cfg.steps,
            lr=cfg.lr,
            min_lr=cfg.min_lr,
            warmup=cfg.warmup,
            schedule=cfg.schedule,
            weight_decay=cfg.weight_decay,
            betas=list(cfg.betas),
            eps=cfg.eps,
            clip=cfg.clip,
            clip_basis=clip_basis,
            precision=cfg.precision,
            initial_loss_scale=cfg.init_scale if cfg.precision == "fp16" else None,
            checkpoint_interval=cfg.ckpt_interval,
            eval_interval=cfg.eval_interval,
            n_params=rec["n_params"],
        ),
    )
    check_ground_truth(gt)
    with open(os.path.join(outdir, "ground_truth.json"), "w") as fh:
        json.dump(clean_json(gt), fh, indent=2)
        fh.write("\n")
    cpu = time.process_time() - t0
    flag = "ok  " if ok else "WEAK"
    print(f"[{flag}] {sc.set}/{sc.name} ({fmt}): {summary}  [{cpu:.0f}s cpu]", flush=True)
    return ok


def check_ground_truth(gt):
    assert gt["healthy"] == (not gt["incidents"]), gt["scenario"]
    for i in gt["incidents"]:
        assert i["kind"] in KINDS and i["kind"] in i["kinds"] and set(i["kinds"]) <= KINDS, i
        assert i["root_cause"] in CAUSES, i
        assert all(isinstance(i[k], int) for k in ("step_start", "step_end", "peak_step")), i
        assert i["step_start"] <= i["peak_step"] <= i["step_end"] or i["kind"] == "soft_drift", i


# ----------------------------------------------------------------------------- README
def write_readme(out_root):
    rows = []
    for set_name in SETS:
        for name in SC.SCENARIOS:
            p = os.path.join(out_root, set_name, name, "ground_truth.json")
            if os.path.exists(p):
                with open(p) as fh:
                    rows.append(json.load(fh))
    lines = [
        "# sample_logs: labelled fixture training runs",
        "",
        "Generated by `tools/make_runs.py` (see `tools/README.md`): a tiny GPT trained on the CPU with PyTorch,",
        "faults injected into the real training loop, every number measured from that training.",
        "Do not edit by hand; regenerate. One folder per run: `<set>/<scenario>/`, with the framework log,",
        "a per-layer gradient dump, a batch manifest (`batches.jsonl`), GPU telemetry where the scenario",
        "needs it, and `ground_truth.json` (schema in `tools/README.md`).",
        "",
        "The `tune` set is for developing detectors; the `holdout` set repeats the scenario list with other",
        "seeds, formats, depths, batch sizes, fault magnitudes and steps (and some manifests without",
        "per-sample losses) and is for scoring. The `fresh`, `final`, `blind` and `sealed` sets repeat the holdout",
        "variants with new seeds, widths, batches, learning rates and data mixes (`sealed` with a per-sample CSV",
        "manifest, `batches.csv`); `benchmarks/README.md` records when each set was looked at.",
        "",
        "| set | scenario | format | files | healthy | what happened (measured) |",
        "|---|---|---|---|---|---|",
    ]
    for g in rows:
        files = ", ".join(f"`{v}`" for v in g["files"].values())
        what = g["summary"].replace("|", "/")
        if g["incidents"]:
            i = g["incidents"][0]
            more = f" (+{len(g['incidents']) - 1} more incidents)" if len(g["incidents"]) > 1 else ""
            what = f"**{i['root_cause']}** / {i['kind']} steps {i['step_start']}-{i['step_end']}{more}: " + what
        lines.append(
            f"| {g['set']} | {g['scenario']} | {g['format']} | {files} | {'yes' if g['healthy'] else 'no'} | {what} |"
        )
    lines += [
        "",
        "Formats: `hf` = HuggingFace Trainer stdout (tqdm bars + dicts), `megatron` = Megatron-LM iteration lines,",
        "`deepspeed` = HF Trainer stdout with DeepSpeed engine logger lines, `deepspeed_megatron` = Megatron-DeepSpeed",
        "iteration lines with DeepSpeed logger lines, `nanogpt` = nanoGPT `iter N:` lines (no grad norm),",
        "`jsonl` = generic metrics JSONL.",
        "",
    ]
    with open(os.path.join(out_root, "README.md"), "w") as fh:
        fh.write("\n".join(lines))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=SETS + ["all"], default="all")
    ap.add_argument("--only", action="append", help="scenario name (repeatable)")
    ap.add_argument("--out", default="sample_logs")
    ap.add_argument("--jobs", type=int, default=1, help="parallel worker processes (each single-threaded)")
    ap.add_argument("--no-readme", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sets = SETS if args.set == "all" else [args.set]
    only = args.only or SC.SCENARIOS
    unknown = set(only) - set(SC.SCENARIOS)
    if unknown:
        ap.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    t0 = time.time()
    jobs = [(s, n) for s in sets for n in SC.SCENARIOS if n in only]
    failed = []
    if args.jobs > 1 and len(jobs) > 1:
        # the DDP scenario starts its own processes: run it first, alone
        jobs.sort(key=lambda j: j[1] != "hardware_fault_ddp")
        running = []
        pending = list(jobs)
        while pending or running:
            while pending and len(running) < args.jobs:
                s, n = pending.pop(0)
                cmd = [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--set",
                    s,
                    "--only",
                    n,
                    "--out",
                    args.out,
                    "--no-readme",
                ]
                running.append(((s, n), subprocess.Popen(cmd)))
                if n == "hardware_fault_ddp":
                    break
            (s, n), p = running.pop(0)
            rc = p.wait()
            if rc == 2:
                failed.append(f"{s}/{n} (weak)")
            elif rc != 0:
                failed.append(f"{s}/{n}")
    else:
        for s in sets:
            for sc in SC.build(s):
                if sc.name in only and not generate(sc, args.out):
                    failed.append(f"{s}/{sc.name} (weak)")
    if not args.no_readme:
        write_readme(args.out)
        print(f"done in {time.time() - t0:.0f}s wall", flush=True)
    if failed:
        print("not as intended: " + ", ".join(failed), file=sys.stderr)
    if any("weak" not in f for f in failed):
        return 1
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
