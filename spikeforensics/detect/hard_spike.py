"""Hard spikes: a loss or grad-norm value far above *both* its past and its future.

Two-sided robust residual on log scale (DETECTION-ANCHORS §2.2): the baseline of a
point is the higher of the medians of the W-g records before and after it, its guard
band excluded; z = (log x - baseline) / robust sigma. A point is flagged when z >= 5
and the ratio to that baseline clears a floor (1.3x loss, 3x grad norm) or it is one of
a run of `sustained_records` consecutive records at >= 3.5 (a bump too long for the noise's tail), or when it
jumps >= 2x loss / 10x grad norm above its past alone (the onset of a divergence, whose
future stays high), or when loss and grad norm stand out together at the same step
(each z >= 3.5 and >= 1.15x / 2x: two weaker signals that agree). Early training never
fires: the first records have no past, and a fast-falling loss sits below its past.
Severity (DOMAIN): critical at >= 2x loss or >= 10x grad norm over the pre-spike level;
a loss spike below that is a warning; a grad-norm spike under 10x that the loss does
not show is critical only when also extreme for the run's noise (z >= 8), else a note.
An unstable start (the loss climbing above its initial value in the first records) is
reported too: the two-sided test cannot see it, the first records having no past. Grad-norm
spikes that recur (>= 3 separate events at >= 5x, counted also below the z bar: a run that
spikes all the time inflates its own sigma) are the run's pattern: every finding carries it,
and the events no other finding covers become one warning; sparse ones the loss does not answer
(isolated blips, the norm's heavy tail) become one grouped note instead (`blips.recurring`).
Small bumps below every bar that one recurring sample explains are promoted to warnings
(`recurrence.py`: corroboration by the batch manifest).
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from spikeforensics.detect import (
    blips,
    critic_blips,
    epoch_restarts,
    heldout,
    loss_bumps,
    rebound,
    recurrence,
    robust,
    settling,
    shape,
    signals,
)
from spikeforensics.detect.base import Evidence, Finding
from spikeforensics.frames import rows_where
from spikeforensics.rundata import RunData

SIGNALS = ("loss", "grad_norm")


def _candidates(frame: pl.DataFrame, signal: str, params, mid_run: bool = False) -> pl.DataFrame:
    """Rows that stand out on their own (`single`) or enough to count when the other signal agrees (`joint`).
    `mid_run`: the log is an excerpt from the middle of training (see the short-series range below)."""
    hp = params.hard_spike
    loss = signal == "loss"
    floor = hp.loss_ratio_floor if loss else hp.grad_ratio_floor
    crit = hp.loss_ratio_critical if loss else hp.grad_ratio_critical
    joint_ratio = hp.joint_loss_ratio if loss else hp.joint_grad_ratio
    rise_base, rise_left = pl.col("y") - pl.col("base"), pl.col("y") - pl.col("left")
    high = (pl.col("z") >= hp.z_threshold).fill_null(False)
    # a run of `sustained_records` consecutive records each standing joint_z over both sides, one of them
    # z_threshold: a bump too long to be the noise's heavy tail, however small in ratio (a smooth loss 8% up
    # for 10 records); three records at 3.5 sigma are rarer by chance than one at 6
    up = (pl.col("z") >= hp.joint_z).fill_null(False)
    # the run a record that is not up opens (it and the up records after it) is told by the stretch of equal `up`
    # values: a group per stretch (few on a long run), not per run (one per ordinary record: a window over as
    # many groups as records); the opener's own `high` is the shifted one
    stretch = up.rle_id().over("rank")
    opener = high.shift(1).over("rank").fill_null(False)
    sustained = (
        up & (pl.len().over("rank", stretch) >= hp.sustained_records) & (high | opener).any().over("rank", stretch)
    )
    both = (high & (rise_base >= math.log(floor))) | sustained | pl.col("_scan")
    jump = (pl.col("z_left") >= hp.z_threshold) & (rise_left >= math.log(crit))
    joint = (pl.col("z") >= hp.joint_z) & (rise_base >= math.log(joint_ratio))
    if frame.height < hp.short_series_records:
        # a short excerpt (a pasted spike) has no adequate noise sample: the spike itself inflates the robust
        # sigma. There the practitioners' ratios over the past decide: a jump at 2x loss / 10x grad norm, a joint
        # rise (the other signal agreeing at the same or the next record, as everywhere) at joint_loss_ratio with
        # the grad norm at its critical 10x (a per-batch grad norm doubles by chance; 10x is DOMAIN's exploded one)
        jump = rise_left >= math.log(crit)
        joint = rise_left >= math.log(joint_ratio if loss else crit)
        # and in an excerpt from mid-training, a value that does not pass the excerpt's own range by the floor
        # ratio (the highest value of the records before it) is a level the excerpt has already shown: RTM3D's
        # per-interval 2.17 after a first 2.13 is the batch noise of a 7-record paste, not a spike. (A log from
        # the start of training shows its untrained loss first: a later return to that level is a spike.)
        both = both & ~(pl.col("value") <= pl.col("_seen") * floor).fill_null(False)
        jump = jump & ~(pl.col("value") <= pl.col("_seen") * floor).fill_null(False)
    # a rise of one or two print quanta is no evidence, whatever its z: a loss printed to 4 decimals at 1e-4
    # (a converged fine-tune) steps 1e-4 -> 2e-4, "2x" and dozens of sigma of the floor
    beyond = (pl.col("value") - pl.min_horizontal("left", "base").exp()) > 2 * _quantum(frame, hp.short_series_records)
    # lazily, with only the columns `_flags` and `detect` read: the filtered copy of the whole baseline
    # frame (18 columns) is never made
    # (the highest finite value of the records before each, over all of them but the jumps themselves: taken
    # before the first record is filtered; a diverging excerpt's second 2x jump to the first one's height counts)
    ordinary = pl.col("value").is_finite() & ~(rise_left >= math.log(crit)).fill_null(False)
    seen = pl.when(ordinary).then(pl.col("value")).cum_max().shift(1).over("rank")
    scanned = _with_scan(frame, hp, loss).with_columns(
        seen.alias("_seen") if mid_run and frame.height < hp.short_series_records else pl.lit(None).alias("_seen")
    )
    # the records with a past (a slice when they follow the first ones: no copy), then the flags, and the ratios
    # of the few rows flagged only
    judged = rows_where(scanned.select(*READ_COLUMNS), pl.col("left").is_not_null())
    return (
        judged.lazy()
        .with_columns(((both | jump) & beyond).alias("single"), (joint & beyond).alias("joint"))
        .filter(pl.col("single") | pl.col("joint"))
        .with_columns(
            pl.lit(signal).alias("signal"),
            rise_left.exp().alias("ratio_left"),
            rise_base.exp().alias("ratio_base"),
        )
        .select(*CANDIDATE_COLUMNS, "single", "joint")
        .collect()
    )


def _scan_windows(hp) -> tuple[int, ...]:
    k = hp.scan_records
    return (k, 2 * k - 1, 4 * k - 3)


def _with_scan(frame: pl.DataFrame, hp, enabled: bool = True) -> pl.DataFrame:
    """Column `_scan`: the record lies in a window of k consecutive records (k in `_scan_windows`) whose median
    two-sided z stands out, and stands above its own baseline (z >= 1) itself. A scan statistic for bumps too
    low for z_threshold and too ragged for `sustained_records` consecutive records (a 7-record bump at 3-4.5
    sigma). The window's median z `m` must pass two tests, each against this run's own noise:
    - spread: m >= scan_z standard errors of a k-record median z, the larger of the independent-noise one
      (1.2533/sqrt(k)) and the run's robust spread of that median (MAD x 1.4826): a smoothed or
      interval-averaged loss, whose neighbouring residuals move together, sets its own, higher bar;
    - tail: half the window (h = k//2 + 1 records) at >= m is unlikely by chance anywhere in the run: the
      expected count of such windows, n x C(k, h) x p^h over the windows tried, stays under `scan_chance`,
      with p the share of the run's other records at z >= m (or the normal tail, if larger). A heavy-tailed
      per-batch loss whose hard batches come in pairs and threes (modded-nanogpt) fails this test, not the first;
    - size: the window's median loss stands `scan_loss_ratio` over its baseline.
    Loss only (`enabled`): a few records of a grad norm a little up are a spike's ordinary tail (Adam's
    moments after a blip), and the grad norm's level shifts are soft drift's."""
    if not enabled or frame.height == 0:
        return frame.with_columns(pl.lit(False).alias("_scan"))
    out = []
    windows = _scan_windows(hp)
    one_rank = frame.get_column("rank").n_unique() == 1  # the common case: no split, no re-sort
    frame = frame if one_rank else frame.with_row_index("_row")
    for part in [frame] if one_rank else frame.partition_by("rank", maintain_order=True):
        z = part.get_column("z").fill_nan(None)
        rise = (part.get_column("y") - part.get_column("base")).fill_nan(None).to_numpy()
        zs = np.sort(z.drop_nulls().to_numpy())
        n = len(zs)
        hit = np.zeros(part.height, dtype=bool)
        for k in windows:
            if n < 2 * k:
                continue
            m = z.rolling_median(k, min_samples=k, center=True)
            spread = float((m - m.median()).abs().median() or 0.0) * robust.MAD_SCALE
            mv = m.fill_null(-np.inf).to_numpy()
            clears = mv >= hp.scan_z * max(spread, 1.2533 / math.sqrt(k))
            idx = np.flatnonzero(clears)  # the few windows past the spread test: size and tail on those only
            if idx.size:
                half = k // 2
                size = np.array([np.nanmedian(rise[max(0, i - half) : i + half + 1]) for i in idx])
                clears[idx] = size >= math.log(hp.scan_loss_ratio)
                idx = idx[clears[idx]]
            if idx.size:
                h = k // 2 + 1
                above = n - np.searchsorted(zs, mv[idx], side="left")  # records of the run at z >= m
                normal_tail = np.array([0.5 * math.erfc(v / math.sqrt(2)) for v in mv[idx]])
                p = np.maximum((above - h).clip(min=0) / n, normal_tail)
                clears[idx] = n * math.comb(k, h) * p**h * len(windows) <= hp.scan_chance
            if clears.any():  # every record of a clearing (centred) window
                hit |= np.convolve(clears.astype(np.int8), np.ones(k, dtype=np.int8), mode="same") > 0
        out.append(part.with_columns((pl.Series(hit) & (z >= 1.0).fill_null(False)).alias("_scan")))
    return out[0] if one_rank else pl.concat(out, how="vertical_relaxed").sort("_row").drop("_row")


CANDIDATE_COLUMNS = ("signal", "t", "step", "attempt", "rank", "pos", "value", "left", "base", "z", "z_left")
CANDIDATE_COLUMNS += ("ratio_left", "ratio_base", "_scan")
# the baseline columns `_candidates` reads
READ_COLUMNS = ("t", "step", "attempt", "rank", "pos", "value", "y", "left", "base", "z", "z_left", "_scan", "_seen")


def _quantum(frame: pl.DataFrame, min_values: int) -> float:
    """The print resolution of a series: the smallest step between its distinct finite values; 0 when fewer
    than `min_values` distinct values give no resolution to read (a two-record excerpt's one step is a jump)."""
    values = frame.get_column("value").filter(frame.get_column("finite")).unique().sort()
    if values.len() < min_values:
        return 0.0
    steps = values.diff().drop_nulls().filter(values.diff().drop_nulls() > 0)
    return float(steps.min()) if steps.len() else 0.0


def _agreeing(rows: pl.DataFrame, other: pl.DataFrame, reach: int) -> pl.DataFrame:
    """`joint` rows of one signal with a `joint` row of the other within `reach` records (same rank)."""
    near = other.filter(pl.col("joint")).select("rank", "pos")
    near = pl.concat([near.with_columns(pl.col("pos") + d) for d in range(-reach, reach + 1)]).unique()
    return rows.filter(pl.col("joint")).join(near, on=["rank", "pos"], how="semi", nulls_equal=True)


def _flags(cands: dict, params) -> pl.DataFrame:
    """Flagged rows: each signal's `single` rows, plus `joint` rows that the other signal corroborates."""
    out = []
    for signal, rows in cands.items():
        other = cands.get("grad_norm" if signal == "loss" else "loss")
        out.append(rows.filter(pl.col("single")))
        if other is not None and other.height:
            out.append(_agreeing(rows, other, params.hard_spike.joint_reach))
    return pl.concat(out, how="vertical_relaxed").unique(subset=["signal", "rank", "pos"], keep="first")


def detect(run: RunData, params) -> list[Finding]:
    hp = params.hard_spike
    flagged, tracks = [], []
    # (a log without step numbers has no known start: its first records may be the untrained loss)
    mid_run = run.step_range()[0] is not None and not run.starts_at_start(hp.start_max_step)
    for per_rank in (False, True):
        cands = {}
        for signal in SIGNALS:
            frame, derived = signals.with_baseline(run, signal, params, per_rank=per_rank)
            if frame.height == 0 or (per_rank and not signals.has_ranks(frame)):
                continue
            cands[signal] = _candidates(frame, signal, params, mid_run).with_columns(
                pl.lit(per_rank).alias("per_rank"), pl.lit(derived).alias("derived")
            )
            track_cols = frame.select("rank", "pos", "step", "y", "left", "sigma")  # what a Track keeps
            ranks = frame.get_column("rank").unique().to_list()
            for rank in ranks:
                # one rank (or none): every row is that track's (a filter keeping them all still copies them)
                part = track_cols if len(ranks) == 1 else track_cols.filter(pl.col("rank").eq_missing(rank))
                tracks.append(shape.Track.from_frame(part, signal, rank if per_rank else None))
        if cands:
            f = _flags(cands, params)
            if f.height:
                flagged.append(f.select("signal", "per_rank", "derived", *CANDIDATE_COLUMNS[1:]))
    findings = _early_rise(run, params)
    flags = pl.concat(flagged, how="vertical_relaxed") if flagged else None
    if flags is not None and findings:  # flags inside the unstable start are that same event
        flags = flags.filter((pl.col("attempt") > 0) | (pl.col("step") > findings[0].step_end))
    if flags is not None and flags.height:
        # (flags of neighbouring records are one event, also in a log that prints every 10 or 100 steps)
        flags = robust.flag_groups(flags, max(hp.group_gap, signals.record_interval(run)))
        layer_base = signals.layer_baseline(run, params)
        for _, group in flags.group_by("group", maintain_order=True):
            findings.append(_finding(group, tracks, layer_base, run, params))
    findings += rebound.detect(run, params, covered=findings)
    long_run = blips.long_run_of(run, params)
    if long_run:
        findings = [blips.quiet_blip(f, run, params) for f in findings]
    findings = settling.quiet_settling_bumps(loss_bumps.quiet_loss_bumps(findings, run, params), run, params)
    findings = heldout.quiet_heldout_bumps(findings, run, params)
    findings = epoch_restarts.quiet_epoch_restarts(findings, run, params)
    findings = critic_blips.quiet_critic_blips(findings, run, params)
    findings = blips.recurring(findings, run, params, long_run)
    findings += _absurd_norms(run, params, findings)
    return recurrence.promote(run, findings, params)


def _finding(group: pl.DataFrame, tracks: list, layer_base: pl.DataFrame, run: RunData, params) -> Finding:
    hp = params.hard_spike
    glob = group.filter(~pl.col("per_rank"))
    main = glob if glob.height else group
    # the peak: the loss peak when the loss spiked, else the grad-norm peak
    peak_src = main.filter(pl.col("signal") == "loss")
    peak_src = peak_src if peak_src.height else main
    peak = peak_src.sort("z", descending=True).row(0, named=True)
    severity = _severity(group, hp)
    evidence = []
    for (signal, _per_rank), rows in main.group_by("signal", "per_rank", maintain_order=True):
        top = rows.sort("ratio_left", descending=True).row(0, named=True)
        evidence.append(
            Evidence(
                signal=signal,
                step=top["step"],
                value=top["value"],
                baseline=math.exp(top["left"]),
                ratio=round(top["ratio_left"], 4),
                rank=top["rank"],
                note=(signals.DERIVED_NOTE + "; " if rows.get_column("derived").any() else "")
                + f"robust z {top['z_left']:.1f} over the pre-spike median",
            )
        )
    ranks_flagged = sorted(group.filter(pl.col("rank").is_not_null()).get_column("rank").unique().to_list())
    all_ranks = run.ranks()
    rank = None
    if ranks_flagged and len(all_ranks) > 1 and len(ranks_flagged) < len(all_ranks):
        rank = int(group.filter(pl.col("rank").is_not_null()).sort("ratio_left", descending=True).get_column("rank")[0])
        for r in (
            group.filter(pl.col("per_rank"))
            .group_by("rank")
            .agg(pl.all().sort_by("ratio_left").last())
            .iter_rows(named=True)
        ):
            evidence.append(
                Evidence(
                    signal=r["signal"],
                    step=r["step"],
                    value=r["value"],
                    baseline=math.exp(r["left"]),
                    ratio=round(r["ratio_left"], 4),
                    rank=r["rank"],
                    note="per-rank value",
                )
            )
    step_lo, step_hi = int(group.get_column("step").min()), int(group.get_column("step").max())
    layers = _top_layers(layer_base, step_lo, step_hi, hp.layer_ratio_min)
    for lay in layers[:3]:
        evidence.append(
            Evidence(
                signal="layer_grad_norm",
                step=lay["step"],
                value=lay["grad_norm"],
                baseline=math.exp(lay["left"]),
                ratio=round(lay["ratio"], 4),
                rank=lay["rank"],
                layer=lay["layer"],
            )
        )
    pos_lo, pos_hi = int(group.get_column("pos").min()), int(group.get_column("pos").max())
    facts = shape.describe(tracks, pos_lo, pos_hi, params)
    if group.get_column("_scan").any():
        facts["sustained_bump"] = True  # a window of records whose median stood out: it lasted (`_with_scan`)
    if ranks_flagged:
        facts["ranks_flagged"] = ranks_flagged
    if layers:
        facts["layers"] = [lay["layer"] for lay in layers[:3]]
    signals_hit = sorted(set(main.get_column("signal")))
    ratio = max(e.ratio for e in evidence if e.signal in SIGNALS)
    summary = (
        f"{' and '.join(signals_hit)} spiked to {ratio:.1f}x the pre-spike level at step {peak['step']}"
        + (f" (rank {rank})" if rank is not None else "")
        + (f", led by layer {layers[0]['layer']}" if layers else "")
    )
    return Finding(
        kind="hard_spike",
        step_start=step_lo,
        step_end=step_hi,
        peak_step=peak["step"],
        severity=severity,
        score=round(float(group.get_column("z").max()), 3),
        summary=summary,
        rank=rank,
        layer=layers[0]["layer"] if layers else None,
        attempt=int(peak["attempt"] or 0),
        evidence=evidence,
        facts=facts,
    )


def _severity(group: pl.DataFrame, hp) -> str:
    """Critical at >= 2x loss or >= 10x grad norm (DOMAIN); a loss spike below that is a warning. A grad-norm
    spike the loss does not show is critical only when it is also extreme for this run's own noise
    (z >= grad_only_z), else a note: small models' grad norms swing 10x and more without consequence."""
    loss = group.filter(pl.col("signal") == "loss")
    grad = group.filter(pl.col("signal") == "grad_norm")
    if loss.height:
        crit = (loss.get_column("ratio_left") >= hp.loss_ratio_critical).any() or (
            grad.get_column("ratio_left") >= hp.grad_ratio_critical
        ).any()
        return "critical" if crit else "warning"
    extreme = grad.filter((pl.col("ratio_left") >= hp.grad_ratio_critical) & (pl.col("z_left") >= hp.grad_only_z))
    return "critical" if extreme.height else "info"


def _absurd_norms(run: RunData, params, found: list[Finding]) -> list[Finding]:
    """Grad norms no healthy run reaches (>= hard_spike.absurd_grad_norm), whatever the series does
    around them: a log whose first records already sit at 1e12 has no baseline for the tests above,
    yet its gradients have exploded. One critical finding per group of such records, unless a
    finding already covers them."""
    grad, _ = run.grad_norm_series()
    bad = grad.filter(pl.col("value").is_finite() & (pl.col("value") >= params.hard_spike.absurd_grad_norm))
    if bad.height == 0:
        return []
    bad = bad.with_columns(robust.step_or_record())
    covered = [(f.attempt, f.step_start, f.step_end) for f in found]
    out = []
    bad = bad.with_columns(robust.position(pl.col("attempt"), pl.col("step")).alias("pos"))
    for _, g in robust.flag_groups(bad, params.hard_spike.group_gap).group_by("group", maintain_order=True):
        lo, hi = int(g.get_column("step").min()), int(g.get_column("step").max())
        attempt = int(g.get_column("attempt")[0] or 0)
        if any(a == attempt and s <= lo and hi <= e for a, s, e in covered):
            continue
        peak = g.sort("value", descending=True).row(0, named=True)
        out.append(
            Finding(
                kind="hard_spike",
                step_start=lo,
                step_end=hi,
                peak_step=int(peak["step"]),
                severity="critical",
                score=float(math.log10(peak["value"])),
                attempt=attempt,
                evidence=[
                    Evidence(
                        signal="grad_norm",
                        step=int(peak["step"]),
                        value=float(peak["value"]),
                        note=f"{g.height} record(s) with a grad norm >= {params.hard_spike.absurd_grad_norm:g}",
                    )
                ],
                summary=(
                    f"grad norm {peak['value']:.3g} at step {peak['step']}: far beyond any healthy magnitude "
                    f"(>= {params.hard_spike.absurd_grad_norm:g}); the gradients have exploded"
                ),
                facts={"onset_step": lo, "cause": "absurd_grad_norm", "recovery": "unknown"},
            )
        )
    return out


def _early_rise(run: RunData, params) -> list[Finding]:
    """The loss climbing above its initial value in the first records (warmup too short, LR too high
    from the start): a hard spike that the two-sided test cannot see, as the first records have no past.
    The initial value is the first training loss, or the eval loss logged before training began when
    there is one (the model as it started: HF `eval_on_start`, mlx-lm `Iter 1: Val loss`, nanoGPT and
    llm.c step-0 evals), so a fine-tune whose very first training records are already far above it counts."""
    hp = params.hard_spike
    if run.loss_is_critic():
        return []  # an RL critic's loss starts from bootstrapped targets near 0
    loss, _ = signals.raw(run, "loss")
    loss = loss.filter(pl.col("y").is_not_null() & (pl.col("attempt") == 0))
    if loss.height < 2:
        return []
    loss = signals.one_track(loss)
    first = loss.row(0, named=True)
    if run.series("loss").get_column("step").null_count() or first["step"] > hp.start_max_step:
        return []  # an excerpt from mid-training (or without step numbers) has no "start" to judge
    ref_value, ref_y, ref_what = first["value"], first["y"], "its initial value"
    start_eval = (
        run.metrics.lazy()
        .filter(
            (pl.col("name") == "eval_loss")
            & (pl.col("attempt") == 0)
            & pl.col("value").is_finite()
            & (pl.col("value") > 0)
            # before the first training record: an earlier step, or the same step on an earlier line (an
            # epoch line that prints its train and valid loss together is no eval before training)
            & (
                (pl.col("step") < first["step"])
                # (a record without a line, from a TensorBoard file, is before only at an earlier step)
                | ((pl.col("step") == first["step"]) & (pl.col("line") < first["line"]))
                if first["line"] is not None
                else (pl.col("step") < first["step"])
            )
        )
        .select("step", "line", "value")
        .sort("step", "line")
        .collect()
    )
    if start_eval.height and start_eval.item(0, "value") < ref_value:
        ref_value = float(start_eval.item(0, "value"))
        ref_y, ref_what = math.log(ref_value), f"the eval loss before training ({ref_value:g})"
    elif loss.height < 10:
        return []
    horizon = loss.head(max(10, int(loss.height * hp.early_frac)))
    above = horizon.with_columns((pl.col("y") - ref_y).exp().alias("ratio"))
    peak = above.sort("ratio", descending=True).row(0, named=True)
    # the rise must stand out of the series' own record-to-record noise too (a single-batch loss
    # swings 20-40% from record to record: robust sigma of the log differences, as for the z-test);
    # a short excerpt has no noise sample to judge by
    noise = robust.step_noise(loss.get_column("y"))
    if loss.height < hp.short_series_records:
        noise = 0.0
    if peak["ratio"] < hp.loss_ratio_floor or math.log(peak["ratio"]) < hp.z_threshold * noise:
        return []
    back = loss.filter((pl.col("t") > peak["t"]) & (pl.col("y") <= ref_y)).head(1)
    end = int(back.get_column("step")[0]) if back.height else int(loss.get_column("step")[-1])
    dead = back.height > 0 and _flat_after(loss.filter(pl.col("t") >= back.item(0, "t")), hp)
    severity = "critical" if peak["ratio"] >= hp.loss_ratio_critical else "warning"
    ev = [
        Evidence(
            signal="loss",
            step=peak["step"],
            value=peak["value"],
            baseline=ref_value,
            ratio=round(peak["ratio"], 4),
            note=f"peak over {ref_what} in the first records; "
            + (f"back below it at step {end}" if back.height else "not back below it by the end of the log"),
        )
    ]
    return [
        Finding(
            kind="hard_spike",
            step_start=int(first["step"]),
            step_end=end,
            peak_step=int(peak["step"]),
            severity=severity,
            score=float(peak["ratio"]),
            evidence=ev,
            summary=(
                f"loss rose to {peak['ratio']:.1f}x {ref_what} at step {peak['step']}"
                + (f" before falling (back below it at step {end})" if back.height else "")
                + (
                    ", then flat to the end of the log: the blow-up left a model that no longer learns (LR too high)"
                    if dead
                    else ": unstable start, warmup too short or LR too high"
                )
            ),
            facts={
                "onset_step": int(first["step"]),
                "early_rise": True,
                "cause": "unstable_start_dead" if dead else "unstable_start",
                "recovery": "never"
                if not back.height
                else ("fast" if end - peak["step"] < params.shape.fast_recovery else "slow"),
            },
        )
    ]


def _flat_after(rest: pl.DataFrame, hp) -> bool:
    """The loss after an early blow-up came back is flat to the end of the log: the medians of its ten tenths lie
    within `hard_spike.dead_flat_spread` of their median, over at least `hard_spike.dead_flat_records` records
    (a regression net killed by SGD at lr 0.1: ~1,356 for 980 epochs, a constant output). A run that recovers
    from a too-short warmup goes on learning."""
    if rest.height < hp.dead_flat_records:
        return False
    medians = (
        rest.with_columns((pl.int_range(pl.len()) * 10 // pl.len()).alias("_d"))
        .group_by("_d")
        .agg(pl.col("value").median())
        .get_column("value")
    )
    mid = float(medians.median())
    return mid > 0 and float(medians.max() - medians.min()) <= hp.dead_flat_spread * mid


def _top_layers(layer_base: pl.DataFrame, step_lo: int, step_hi: int, min_ratio: float) -> list[dict]:
    """Layers whose norm rose most over their own baseline inside the spike's steps."""
    if layer_base.height == 0:
        return []
    rows = layer_base.filter(pl.col("step").is_between(step_lo, step_hi) & pl.col("left").is_not_null())
    if rows.height == 0:
        return []
    rows = rows.with_columns((pl.col("y") - pl.col("left")).exp().alias("ratio"))
    best = rows.sort("ratio", descending=True).unique(subset=["layer"], keep="first", maintain_order=True)
    best = best.filter(pl.col("ratio") >= min_ratio)
    return best.head(5).select("layer", "rank", "step", "grad_norm", "left", "ratio").to_dicts()
