"""Every threshold and window of detection, attribution and calibration, in one place.

Each field carries its default and, in the comment beside it, why. Defaults come
from shared/DOMAIN.md and shared/DETECTION-ANCHORS.md. Users override them with a
TOML file (`--params FILE`, sections named like the dataclasses below, e.g.
`[hard_spike] z_threshold = 7`) or `--set hard_spike.z_threshold=7`.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path

# what a user may set, its ranges and the bounded file read: param_ranges.py (re-exported here)
from spikeforensics.param_ranges import (
    FRACTION_SUFFIXES,
    MAX_FLOAT_PARAM,
    MAX_INT_PARAM,
    MAX_PARAMS_FILE_BYTES,
    RANGES,
    ParamError,
    _in_range,
    allowed_range,
    range_spec,
    read_small_file,
    read_small_toml,
)

__all__ = [
    "FRACTION_SUFFIXES",
    "MAX_FLOAT_PARAM",
    "MAX_INT_PARAM",
    "MAX_PARAMS_FILE_BYTES",
    "RANGES",
    "ParamError",
    "Params",
    "allowed_range",
    "range_spec",
    "read_small_file",
    "read_small_toml",
]

# --- detection sections (owned by the detectors; one dataclass per detector) ------------


@dataclass
class SeriesParams:
    """Shared robust-baseline settings for per-step series (loss, grad norm, layer norms)."""

    window: int = 50  # why: two-sided baseline half-width W in records (DETECTION-ANCHORS §2.2)
    guard: int = 3  # why: excluded band |i-t| <= g, so a spike and its echo cannot hide in their own baseline
    min_side: int = 5  # why: a side with fewer finite records than this is no baseline (first steps of a run)
    mad_window: int = 501  # why: residual scale over ~500 records (DETECTION-ANCHORS §2.2): each sigma is the median of that many residuals (detect/robust.py rolling_scale)
    sigma_floor_loss: float = 0.01  # why: 1% of loss is the noise floor; quantised or flat logs give MAD 0
    sigma_floor_grad: float = 0.05  # why: grad norms print with 2 decimals (llm.c 0.27/0.28): ~5% quantisation
    max_bins: int = 200  # why: super-linear tests (Theil-Sen is O(n^2)) run on <= this many bins of a long series


@dataclass
class HardSpikeParams:
    z_threshold: float = (
        5.0  # why: robust (MAD) z; OLMo-core skips at 6 non-robust sigma, the ratio floors below do the rest
    )
    loss_ratio_floor: float = 1.3  # why: a loss step under 30% above both sides is noise or drift, not a hard spike
    grad_ratio_floor: float = 3.0  # why: grad norms are heavy-tailed; under 3x of both sides is ordinary variation
    loss_ratio_critical: float = 2.0  # why: DOMAIN: loss >= 2x its recent level is a hard spike (LLM Foundry 2x)
    grad_ratio_critical: float = 10.0  # why: Megatron large-grad check uses 10x
    grad_only_z: float = 8.0  # why: a grad spike the loss does not show must also be extreme for the run's own noise
    absurd_grad_norm: float = 1e8  # why: no healthy run's grad norm reaches 1e8: even a norm measured on fp16 loss-scaled gradients (x65536, the clip-before-unscale bug) of a norm-100 model stays near 1e7; real logs that blew up print 1e10-1e14 (mmdetection #3446: 3.8e12 at iteration 50)
    short_series_records: int = 50  # why: below one baseline window W of records (a pasted excerpt) the robust sigma is taken over the spike itself; the ratio rule alone (loss_ratio_critical / grad_ratio_critical over the past median) decides a jump there
    early_frac: float = 0.1  # why: the unstable-start check looks at the first 10% of records (>= 10) ...
    start_max_step: int = 50  # why: ... of a log that begins at the start of training (first step <= 50)
    critic_blip_max_ratio: float = 50.0  # why: an RL critic's one-record TD-loss blips against moving targets reach 3-18x its level (SB3 DQN on Breakout, a healthy run); 100-550x single epochs (a DDPG critic's Q-value blow-ups) are the instability itself, incidents (detect/critic_blips.py)
    dead_flat_spread: float = 0.02  # why: after an early blow-up came back, tenth-of-the-rest medians within 2% of each other to the end of the log are a model that stopped learning (a ReLU regression net after SGD lr 0.1: 1,352-1,363 for 980 epochs); a run recovering from a short warmup keeps falling (tens of % over its rest)
    dead_flat_records: int = (
        50  # why: ... judged over at least 50 records after the blow-up (ten tenths of 5 records each)
    )
    epoch_restart_jump: float = 5.0  # why: a loss printed as a running mean that restarts each epoch moves at its epoch boundaries (median |change of log loss| from an epoch's last record to the next one's first) at least 5x as much as between two records of one epoch (DSFD's `Loss:` 100x, a liveness net's `train loss` 8x); a per-batch loss moves about as much at both
    epoch_restart_min_epochs: int = 5  # why: ... judged over at least 5 epoch boundaries
    epoch_restart_two_way: float = 0.2  # why: ... moving both ways: a restarted mean's first records land above and below the last epoch's mean (DSFD 14 of 35 up, a liveness net 17 of 41), while a loss that steps down at each epoch (a smooth per-batch loss over repeated data) moves up at under a fifth of its boundaries
    epoch_restart_start_frac: float = 0.25  # why: a loss-only bump in the first quarter of such an epoch's records (its mean still over a few batches), while that epoch's whole mean (its last record) stays under loss_ratio_floor x the epoch before's, is the small sample of the restarted mean: a note
    recurring_count: int = (
        3  # why: three or more grad-only spikes in one run are a pattern (LR too high), not noise ...
    )
    recurring_ratio: float = 5.0  # why: ... counting spikes of at least 5x their baseline
    recurring_z: float = 2.5  # why: ... and 2.5 robust sigma: a run that spikes all the time inflates its own sigma; 5x in a series whose noise makes it < 2.5 sigma is ordinary
    joint_z: float = (
        3.5  # why: loss and grad norm each >= 3.5 sigma at the same step is as unlikely by chance as one at 6
    )
    joint_loss_ratio: float = 1.15  # why: ... with the loss at least 15% up
    joint_grad_ratio: float = 2.0  # why: ... and the grad norm at least doubled
    joint_reach: int = 1  # why: grad norm and loss of one bad batch land in the same or the next record
    group_gap: int = 5  # why: flags closer than 5 steps are one incident (DETECTION-ANCHORS §2.3)
    layer_ratio_min: float = 2.0  # why: a layer is named as the spike's location only if it rose >= 2x its own baseline
    bump_max_records: int = 2  # why: a loss-only bump under loss_ratio_critical of at most 2 records above the band, back in band on the next, is one or two hard batches (a per-step batch loss does that now and then); 3+ records is a moderate spike
    bump_tail_min_records: int = 5  # why: a loss bump of loss_ratio_critical or more is judged against the run's own tail only when >= 5 other records stand between bump_tail_from_z + 1 and + 2 robust sigma: a heavy tail sampled well enough to extrapolate (a Gaussian-noise run of 100k records has ~3 there, an LLM loss curve none)
    bump_tail_from_z: float = 3.0  # why: ... the tail's decay per robust sigma is the ratio of the records in [3, 4) and [4, 5) sigma (log-linear: an exponential tail, the per-batch losses of small batches; a Gaussian one falls faster, so this overstates nothing there); bands, so that other spikes far out do not flatten the tail (robust.tail_expected)
    bump_tail_expected: float = 0.5  # why: ... and a one- or two-record bump back at once whose z the run's own tail reaches by chance at least every other run like it (expected count >= 0.5 at that z) is the run's ordinary hardest batch, a note however high its ratio (a 500-epoch per-batch colorization loss: 23 records in [4, 5) sigma, its 2.4x batch at 5.4 sigma expected 1.4 times); an injected 6 sigma step on that run is expected 0.4 times and stays an incident
    bump_back_z: float = 2.0  # why: ... "back at once" is the next record under the band, or, on a per-batch loss whose own noise spans 10x (a classification loss near 0: VinVL's batch_loss 0.001-0.17), under 2 robust sigma over both sides: well inside the run's noise (the band is loss_ratio_floor x the median before, which such a loss passes on half its records); a spike's falling flank still stands higher
    heldout_rise: float = 1.05  # why: a one- or two-record training-loss bump whose held-out loss (validation/test, measured at the bump or the next record) stays under 1.05x its last value before it is a hard batch, not damage to the model (a tutorial loop's last-minibatch loss 0.035 -> 0.229 while its test loss goes 0.128 -> 0.116): a note (detect/heldout.py); 5% is above an epoch-to-epoch wobble of a converging held-out loss
    bump_lasting_records: int = 5  # why: a hard batch in a loss averaged over the logging interval or smoothed echoes over 2-3 records at joint_z (a real Megatron Mixtral-8x7B loss curve, extended in benchmarks/injected.py: 34 runs of 3 records at joint_z in 68,605 records, none of 4); 5+ consecutive records at joint_z is a stretch the loss stayed up, no one-batch bump
    scan_records: int = 5  # why: a bump of 5+ records whose *median* robust z stands out (windows of 5, 9 and 17 records: scan_records x 1, 2, 4 less the shared ends) is no one-batch draw however few of its records pass z_threshold; a median ignores the one or two hard batches a mean would carry
    scan_z: float = 5.0  # why: ... the window's median z must clear scan_z standard errors of such a median on this run: 1.2533/sqrt(k) for independent noise, or the run's own robust spread of the k-record median z when its noise is autocorrelated (a smoothed or interval-averaged loss); 5 as z_threshold (iid: under 1 chance window in 3 million)
    scan_chance: float = 0.01  # why: ... and that many records at that median z anywhere in the run (the run's own tail, heavy or not) is expected in under 1 run in 100 by chance
    scan_loss_ratio: float = 1.1  # why: ... and the window's median loss is >= 10% above both sides: a loss a few percent up for a few records is a wobble no one calls a spike (a real Mixtral-8x7B curve: 7 records 4-6% up, 5 of its sigma), and DOMAIN's drift scale is 5% over 50 steps
    rebound_min_records: int = 20  # why: the rebound test needs the record-to-record noise of the loss, a robust scale of its differences: 20 records sample it (a Keras run's 34 epoch losses; the z-test's residual sigma needs short_series_records)
    rebound_smooth_ratio: float = 3.0  # why: a loss turning back up 2x over its recent minimum (detect/rebound.py) is judged only where the z-test's residual sigma is >= 3x the record-to-record noise (robust sigma of the log differences / sqrt 2): a steep fall logged every step (AlgoPerf criteo: 0.45 vs 0.041); a per-batch loss scatters around its trend and both measure the same noise (0.9-1.2x on 30 healthy real logs)
    sustained_records: int = 3  # why: 3+ consecutive records each >= joint_z over both sides (one of them >= z_threshold) are no heavy-tail draw: three at 3.5 sigma are rarer by chance than one at 6; flagged without the ratio floor, which exists for single records
    # corroboration by a recurring sample (detect/recurrence.py): small bumps one sample explains
    bump_z: float = 2.0  # why: a candidate bump stands 2 robust sigma over both sides: common alone; the chance test below does the rest
    bump_loss_ratio: float = (
        1.1  # why: ... with the loss >= 10% up (one bad sample in a batch of n lifts it by ~(r-1)/n)
    )
    bump_grad_ratio: float = 1.8  # why: ... or the grad norm about doubled (DOMAIN's recurring-sample hits are 2-3x)
    corroborate_min_events: int = 2  # why: DOMAIN: a sample that recurs and spikes again is data: two separate bumps
    corroborate_sample_ratio: float = (
        1.5  # why: with per-sample losses, the sample's loss >= 1.5x its step's median in the bump
    )
    corroborate_min_share: float = (
        0.5  # why: at least half of the sample's appearances are bumps (seen in calm steps = exonerated)
    )
    corroborate_chance: float = (
        0.05  # why: expected chance recurrences (binomial tail x samples tested) must stay under 5%
    )


@dataclass
class ShapeParams:
    onset_z: float = 2.0  # why: walk back from the peak while z > 2 (DETECTION-ANCHORS §2.3)
    recover_z: float = 2.0  # why: recovered once z < 2 ...
    recover_hold: int = 20  # why: ... for 20 consecutive records
    fast_recovery: int = 50  # why: recovery within 50 steps is fast (stas00), later is slow
    lead_max: int = 20  # why: a lead over 20 steps is a separate event, not grad norm leading loss
    plateau_window: int = 200  # why: AdamW's inflated second moment slows learning for hundreds of steps
    plateau_tol: float = 0.005  # why: loss within 0.5% of the pre-spike level counts as not yet improved


@dataclass
class NonfiniteParams:
    signals: tuple = (
        "loss",
        "grad_norm",
        "grad_norm_clipped",
        "eval_loss",
        "lr",
    )  # why: NaN in any of these is an incident
    group_gap: int = 10  # why: NaN steps closer than this are one outbreak
    ignore_handled_overflow: bool = True  # why: an fp16 overflow step the scaler skipped is loss_scale's business
    masked_zero_from: float = 0.1  # why: a loss printed as exactly 0 right after a loss >= 0.1 is a masked NaN (HF Trainer prints NaN losses as 0.0): no model falls from 0.1 to below the printed precision (1e-4) in one logging interval
    real_zero_returns: int = 5  # why: a loss that comes back from exact zeros to finite values 5+ times, and prints 5+ small positive values (under masked_zero_from), takes 0 as a value (hinge, margin and pairwise ranking losses); a masked NaN outbreak sticks, or comes once or twice, in a loss far from 0


@dataclass
class LossScaleParams:
    min_halvings: float = 4.0  # why: >= 4 net halvings, then no regrowth, is a collapse (DETECTION-ANCHORS §2.7)
    window_steps: int = 2000  # why: DeepSpeed/GradScaler regrow after 1000-2000 clean steps
    growth_interval: int = 1000  # why: the fastest default regrowth (DeepSpeed/Megatron loss_scale_window 1000; GradScaler/apex growth_interval 2000): a fall is counted less one doubling per complete interval it took, and from overflow events alone a clean gap this long after the low is a doubling
    regrowth_steps: int = 4000  # why: per level the scale must regain: twice the slowest default growth interval (GradScaler/apex 2000); a scaler that overflows no more than a healthy one has regrown within it
    regrowth_hold: int = 500  # why: a doubling kept for half the fastest growth interval is regrowth; one undone sooner is a scaler stuck at its low
    calibration_steps: int = 100  # why: the first halvings from 2^16/2^32 are calibration, not collapse
    min_scale: float = 1.0  # why: DeepSpeed min_loss_scale default; at the floor is critical (OPT)
    storm_count: int = 10  # why: 10 overflows inside storm_window steps is an overflow storm
    storm_window: int = 200  # why: healthy fp16 overflows about once per loss_scale_window (1000) steps


@dataclass
class UnderflowParams:
    trend_p: float = 0.01  # why: Mann-Kendall p < 0.01 on binned zero fractions (DETECTION-ANCHORS §2.8)
    rise_ratio: float = 3.0  # why: > 3x the layer's early median
    min_abs_rise: float = 0.02  # why: zero fraction rising less than 2 points is numerically irrelevant
    early_frac: float = 0.1  # why: the first 10% of the dump is the layer's early reference
    late_frac: float = 0.1  # why: the last 10% is compared against it
    bins: int = 50  # why: trend test over ~50 bins is robust to per-step noise
    widespread_frac: float = 0.5  # why: outside fp16, zeros rising in at least half of the layers is still an incident


@dataclass
class SignRatioParams:
    extreme: float = 0.1  # why: under 10% or over 90% positive (among non-zeros) is "nearly all one sign"
    mild: float = 0.3  # why: outside 30-70% is unusual (healthy 40-60%, DOMAIN) but only a note
    sustain_frac: float = 0.5  # why: the layer must sit in the band for half of a window
    window: int = 50  # why: judged over 50-record windows, not single steps
    min_numel: int = 64  # why: tiny tensors (a bias of 4 elements) can be one-signed legitimately
    max_zero_frac: float = (
        0.5  # why: with over half the elements exactly zero, the sign share of the rest is not judged
    )


@dataclass
class ClippingParams:
    threshold: float = 0.0  # why: 0 = infer from pre/post norms or the log's configured value; set it to force
    tolerance: float = 0.01  # why: a pre-clip norm within 1% of the threshold is not clipped (printing rounds)
    window: int = 100  # why: clip rate per 100 steps (DETECTION-ANCHORS §2.6)
    healthy_high: float = 0.08  # why: DOMAIN: 1-8% healthy
    lr_band: float = 0.20  # why: DOMAIN: > 20% means LR too high or threshold too tight
    tight_band: float = 0.50  # why: DOMAIN: > 50% means threshold too small
    loose_band: float = 0.001  # why: DOMAIN: < 0.1% means threshold too loose
    consecutive: int = 3  # why: DOMAIN: 3 clipped steps in a row is an alert (a note unless corroborated)
    sustained_run: int = 20  # why: 20+ clipped steps in a row with rising loss is an incident
    unscale_factor: float = 100.0  # why: median norm >= 100x threshold with ~all steps clipped = clip before unscale
    unscale_rate: float = 0.9  # why: "nearly every step clipped"
    scaled_ratio_lo: float = 0.01  # why: without a threshold, logged norm / loss scale between 0.01 ...
    scaled_ratio_hi: float = 10.0  # why: ... and 10 (healthy unscaled norms are 0.1-5) means norms taken before unscaling; 104B's ~20 is large in itself
    unscaled_norm_median: float = (
        1e3  # why: no scale logged: a median norm >= 1e3 (a 2^10-2^16 scale x a normal norm) on every step ...
    )
    unscaled_loss_fall: float = (
        0.05  # why: ... while the loss trains normally (last quarter >= 5% below the first): clip before unscale
    )
    dominant_share: float = 0.5  # why: one layer carrying > 50% of the squared norm on clipped steps dominates it
    min_steps: int = 50  # why: a clip rate over fewer steps says nothing
    settle_factor: float = 1.25  # why: the early phase (initial norms above the run median) clips by design ...
    settle_smooth: int = 25  # why: ... and ends when the 25-record rolling median is within 1.25x of the run median


@dataclass
class LayerOutlierParams:
    ratio: float = 10.0  # why: one layer >= 10x its own baseline ...
    global_ratio_max: float = 2.0  # why: ... while the global norm moves < 2x (DETECTION-ANCHORS §2.9)
    z_threshold: float = 6.0  # why: a layer spike must be extreme for that layer's own noise
    group_gap: int = 5  # why: as hard spikes
    shift_window: int = 50  # why: sustained shifts compare the medians of 50 records after vs before
    shift_excess: float = 5.0  # why: the layer's level rises >= 5x more than the global norm's: the layer carries it
    early_min: int = 30  # why: the first records (norms still settling) are no reference
    dominant_share: float = (
        0.5  # why: a risen layer carrying > 50% of the squared global norm dominates it (and clipping)
    )
    sustained_ratio_alone: float = 100.0  # why: a layer up 100x is an incident even while still small
    update_ratio: float = 10.0  # why: under Adam each layer's update per element is ~the LR; one >= 10x the other layers' median has its own too-high LR (healthy spread measured <= 4.4x, tests/capture_train.py)
    update_min_records: int = (
        3  # why: update norms come every ~10 steps: 3 records in a row are a sustained condition, not one noisy step
    )
    update_min_layers: int = 4  # why: the median of fewer layers is no peer level


@dataclass
class VanishingParams:
    ratio: float = 0.1  # why: norm < 0.1x its reference ...
    severe_ratio: float = 0.01  # why: DOMAIN "by orders of magnitude": under 0.01x fires even while the loss still falls (else the loss must stall)
    collapse_ratio: float = 0.001  # why: three orders of magnitude under the run's first records is a collapse even inside the early phase (a verl policy's norm: 0.4 -> 1e-4 by its 16th step); a warmup's falling norm is 10-100x
    min_records: int = 200  # why: ... for >= 200 steps (DETECTION-ANCHORS §2.10)
    smooth: int = 25  # why: rolling median over 25 records before comparing
    reference_window: int = 500  # why: the reference is the highest 500-record median level seen since the early phase
    early_frac: float = 0.1  # why: the first 10% of a run (large initial norms falling) is never a reference, in records and in steps (AlgoPerf logs every step to 100, then every 500th: 101 of 130 records in the first 0.7% of training)
    early_min: int = 100  # why: and at least the first 100 records
    max_run_frac: float = (
        0.2  # why: on a short run, windows shrink to at most 20% of its records (a 400-step run still gets a test)
    )


@dataclass
class OscillationParams:
    window: int = 100  # why: local volatility of detrended log-loss over 100 records
    detrend: int = 201  # why: trend = rolling median over ~200 records
    vol_ratio: float = 3.0  # why: volatility >= 3x the run's typical level ...
    min_records: int = 100  # why: ... sustained for >= 100 records
    abs_vol: float = 0.15  # why: or a detrended MAD above 15% of the loss (log units) ...
    min_vol: float = 0.01  # why: ... and never under 1% of the loss: a smoothed or running-average loss barely moves, so 3x its typical swing can still be a fraction of a percent (Sockeye's window ppl: 0.2%, one reload step)
    stall_tol: float = 0.10  # why: ... while the loss falls less than 10% per 1000 records over the stretch (early training falls far faster)
    relapse_records: int = 10  # why: ... unless the loss relapses to hard_spike.loss_ratio_critical (2x) the run's initial loss (a log that starts at the start of training) on >= 10 records of the stretch: a model that again and again does worse than untrained is oscillating, whatever the trend of its calm level (CS336 at LR 1: spikes to 50x the initial loss); a healthy loss, even a per-sample one, does not return to twice its start after its first records
    group_gap: int = 50  # why: high-volatility stretches closer than this are one episode


@dataclass
class SoftDriftParams:
    loss_rise: float = 0.05  # why: DOMAIN: loss rising > 5% ...
    loss_span: int = 50  # why: ... over 50 consecutive steps
    smooth: int = 25  # why: judged on a rolling median, not single steps
    min_records: int = 12  # why: a loss drift is a level that stays: at least half the smoothing window of flagged records; a shorter stretch is a few batches moving a 25-record median (a small-batch loss's epoch-to-epoch wander: Flair's per-epoch running mean, MACE's batch of 10 configurations, flag 4-9 records), not the level
    long_rise: float = 0.05  # why: a slow climb: loss >= 5% above its lowest level ...
    long_span: int = 500  # why: ... of the previous 500 records (catches drifts slower than 5% per 50 steps)
    low_share: float = 0.5  # why: a loss drift lifts the lower quartile of the smoothing window by at least half of the median's rise; a bimodal per-batch loss (diffusion: batches that drew low noise levels sit 5x under the others) moves its median between the modes when the mix shifts and leaves the lower quartile in the lower mode (while under 3/4 of a window is the upper mode)
    gap_floor_sigmas: float = 8.0  # why: a slow climb's gap floor (the run's own gaps, median + 3 robust sigma) is capped at this many noise units of the smoothed loss (its differences a smoothing window apart): on the 52 healthy real curves of benchmarks/injected_curves the floor is 0-8.1 such units (median 5), so only a run whose gaps are the drift itself is capped
    loss_noise_c: float = 3.0  # why: ... and either rise >= 3 sigma of a difference of two rolling medians: DOMAIN's 5% is for big-batch runs; a small-batch loss wanders 5% by noise
    grad_rise: float = 2.0  # why: grad norm level >= 2x the preceding level
    grad_rise_loss_fall: float = 0.2  # why: a grad-norm rise in a log that prints no LR, over which the smoothed loss fell by 20% or more, is the end-of-training rise under a decaying LR and weight decay (Defazio et al. 2025) that `_under_lr_decay` sees when the LR is printed: the loss improving that much is no instability (a drift of 5%, DOMAIN's loss rule, 4x over)
    level_window: int = 100  # why: left/right windows of the level-shift test (ADTK LevelShiftAD)
    level_c: float = 6.0  # why: ADTK LevelShiftAD default c = 6 (in noise units)
    early_frac: float = 0.05  # why: the first 5% of records, and the records of the first 5% of the steps (a log printing every step at first and every 500 later), are the fast-falling loss and growing grad norm of the start, never a drift
    early_min: int = 50  # why: at least the first 50 records
    excerpt_climb_records: int = 3  # why: a log too short for the drift test (<= early_min loss records, a pasted excerpt) has no noise sample; its last 4 records rising in order (3 rises) happen by chance once in 4! = 24 orderings (p 0.04, as corroborate_chance's 0.05) ...
    rebound_rise: float = 0.3  # why: inside the early phase the drift test leaves out, a smoothed loss that climbs back 30% (hard_spike.loss_ratio_floor) above the lowest level it had fallen to, and stays there for min_records, has lost what training gained: a collapse during warmup (DINO at ln 65536), not the start's fast fall ...
    rebound_regain: float = 0.5  # why: ... after a fall from the first smoothed level to that low of rebound_rise at least (the model had trained), of which the climb takes back at least half (a start that bumps 30% off a low it reached by a tiny fall is the start's noise), its lower quartile rising by low_share of it too
    excerpt_rise: float = 0.25  # why: ... and ending >= 25% above where that climb began: 5x DOMAIN's 5% drift, since a few records cannot tell a small-batch loss's wander (5-10%) from a drift; on the real corpus no healthy excerpt climbs 25% over its last 3+ records, the unhealthy ones 27% and more


@dataclass
class EventsParams:
    """Runs that their events alone convict (detect/events.py): no loss or grad-norm series needed."""

    floor_scale: float = 1.0  # why: DeepSpeed/apex min_loss_scale default; an overflow that leaves the scale at 1 has nowhere left to go (OPT: "loss scale hitting the minimum")
    exploded_scale: float = 1e-4  # why: fairseq's min_loss_scale, the lowest floor a common scaler keeps (apex's and torch's have none): fairseq stops the run there ("Minimum loss scale reached (0.0001). Your loss is probably exploding"); a scale halved below it (2^-14: 30 halvings from the 2^16 start of apex, torch and DeepSpeed) still overflows with the loss scaled down 10,000x, whatever the scaler
    floor_pattern: str = r"(?i)already at minimum|minimum loss scale reached|loss scale (?:is )?at (?:its )?minimum"  # why: the wordings DeepSpeed/apex, fairseq and Megatron print when the scale cannot fall further
    all_overflow_frac: float = (
        0.9  # why: "every logged step overflowing": >= 90% of the logged steps are overflow-skipped ...
    )
    all_overflow_min_steps: int = 33  # why: ... over more steps than a scaler starting at 2^32 needs to find its level (32 halvings): not calibration
    all_overflow_stuck_skips: int = 3  # why: ... or fewer steps when >= 3 consecutive skipped steps keep one loss scale: a dynamic scaler halves by its 2nd consecutive overflow (hysteresis 2, DeepSpeed/Megatron), so a scale that does not fall is static or at its floor, not calibrating
    guard_min_skips: int = 3  # why: a trainer's gradient-norm guard skipping every logged step convicts only over 3+ skipped steps (as all_overflow_stuck_skips): one or two skipped steps are the guard doing its job on a spike
    guard_norm_spread: float = 2.0  # why: ... and only when the skipped norms stay within 2x of each other: ordinary norms above a threshold set too tight; a guard skipping a climbing norm (10x, 100x) is stopping an explosion
    floor_formats_pattern: str = r'"source_format":\s*"deepspeed"|"inferred_from":\s*"(?:loss_scale|skipped_iters)"'  # why: the overflow events of the scalers whose default min_loss_scale is 1 (DeepSpeed; Megatron, whose events are inferred from its loss-scale column): only there is a scale of 1 the floor (fairseq halves on to 1e-4; apex and torch have no minimum)
    hardware_xid_codes: tuple = (
        48,
        63,
        64,
        74,
        79,
        92,
        94,
        95,
        62,
        119,
        120,
    )  # why: the strong and medium Xid codes of attribution (ECC, row remap, NVLink, off the bus, GSP); application-level Xids (13, 31, 43, 45) do not convict
    hardware_pattern: str = r"(?i)\becc\b|uncorrectable|fallen off the bus|\bxid\b|double.bit|CUDA error: unknown error|cudaErrorUnknown|\bGPU is lost"  # why: an `error` event whose message names ECC / an Xid / a GPU off the bus is a hardware error; so is the driver's cudaErrorUnknown ("CUDA error: unknown error") in a job that ran: the device failed under it (BLOOM-176B chronicles: "One of the GPUs crashed")
    stop_pattern: str = r"(?i)stopping training|training (?:stopped|aborted|halted|terminated)|exiting run|\babort"  # why: "Loss is nan, stopping training" (MAE/DeiT), "... Exiting run." (apex)
    nonfinite_pattern: str = r"(?i)\b(?:nan|inf|infinite|non-?finite)\b"  # why: the stop message must name a non-finite value to convict as nonfinite


@dataclass
class DivergenceParams:
    """The loss leaves its band and does not come back (detect/divergence.py)."""

    band_z: float = 3.0  # why: out of band = >= 3 robust sigma above the pre-onset median ...
    band_ratio: float = 1.1  # why: ... and >= 10% above it (a quantised or very smooth loss has a tiny sigma)
    min_ratio: float = 1.5  # why: the median loss from onset to the end >= 1.5x the pre-onset level: well above the band, not a slow wobble
    critical_ratio: float = 2.0  # why: as hard_spike.loss_ratio_critical (DOMAIN: 2x its recent level)
    min_records: int = 5  # why: at least 5 records out of band to the end of the log (one or two high records at the end are a spike the log cut off)
    min_records_rising: int = 3  # why: 3+ records out of band to the end of the log, each higher than the last (as excerpt_climb_records: 3 rises in order by chance p 0.04), median >= min_ratio: a climb the log ends in; a spike the log cut off comes back or levels
    uniform_ceiling: float = 1e6  # why: a training perplexity above 1e6 (13.8 nats) is worse than a uniform guess over any real vocabulary (GPT-2 50k, Llama 3 128k, Gemma 256k): a blown-up model (detect/above_uniform.py)
    uniform_share: float = 0.25  # why: ... on at least a quarter of the records: an untrained start above it falls under it within its first few records (tensorflow/nmt GRU lr 1: 10 of 10; the word-LM example's RNN_TANH at lr 20: 70 of 168, five epochs until its LR was cut)
    uniform_min_records: int = 5  # why: ... and on 5 records or more: a from-scratch run's first updates may overshoot for a record or three (fairseq's 13B FSDP example: 2^25 at step 3 of 10, back under by step 7)
    min_records_nonfinite: int = 3  # why: a monotone climb of 3+ records that ends in NaN/Inf or a stop is a divergence (DOMAIN: "within a few steps the loss is NaN")
    start_drop: float = 4.0  # why: past_start arm: a loss that fell to a quarter of its start or lower has learned (not a flat or noisy start), so a return above that start is the model ending worse than untrained
    start_records: int = 5  # why: ... the start is the median of the attempt's first 5 records and its lowest level the lowest median of 5 in a row: levels, not one odd batch of a heavy-tailed per-batch loss (VinVL's 0.002-0.1 scatter)
    falling_frac: float = 0.75  # why: a loss that falls on >= 75% of the records after its peak is coming back (a slow recovery, bigscience tr1-13B), not diverging ...
    falling_min: int = 3  # why: ... judged on at least 3 records after the peak
    heldout_gap: float = 5.0  # why: a held-out loss 5x the training loss at the first evaluation already measures other data than training does (an unshuffled Keras validation_split: 8.3 vs 0.41); ordinary generalisation gaps at the first evaluation are under 2x
    heldout_climb: float = 2.0  # why: ... and it climbs (the median of its last third 2x its lowest value) while the training loss halves (last third vs first third): the model fits training and moves away from the held-out data
    heldout_min_records: int = 5  # why: a trend of the held-out loss needs 5 evaluations or more


@dataclass
class StallParams:
    """A run that cannot learn: its LR is exactly 0 while the loss does not fall (detect/stall.py)."""

    lr_zero_records: int = 3  # why: a warmup from 0 prints 0 once (step 0); 3 records at exactly 0 are no warmup, the weights are not moving
    loss_fall_ratio: float = 0.99  # why: "the loss does not fall": the median of the last third of those records >= 99% of the first third's (a rounded-to-0 print of a real, small LR would still show the loss falling)
    constant_records: int = 8  # why: a loss printed as the same value on every one of 8 or more records from the first has not been moved by one update (a softmax over one unit: 0.6667 for 20 epochs); a training loss moves in its last digits from record to record
    frozen_records: int = 8  # why: as constant_records: the same nonzero loss on the last 8 or more training records of the log, after it had moved, has not been updated since (NVIDIA's MLPerf Mask R-CNN updates its loss meter only on a finite loss: `loss: 0.7799 (0.9819)` printed unchanged on 727 records once the loss went NaN) ...
    frozen_moving_share: float = 0.5  # why: ... when as many records before them printed at least half distinct values: the print resolves the loss's record-to-record noise (a converged loss printed with 2 decimals repeats by rounding, and does before its last records too)
    skipped_tail_records: int = 2  # why: one record whose interval skipped its updates can be a transient (a skipped overflow step); every update of the last 2 or more records skipped, the loss not falling, is a trainer that has stopped applying updates
    decayed_frac: float = 0.01  # why: zeros that end the log after the LR fell to under 1% of its peak are a schedule decaying to 0 (llm.c's default ends at 0: its last steps print lr:0.000000), not an LR stuck at 0
    decayed_quanta: float = 1.0  # why: ... or came down to one unit of its print (a linear decay of 2e-5 printed with 6 decimals ends 0.000001, then 0.000000: the schedule reached the print's resolution, not a frozen LR) ...
    decayed_print_frac: float = 0.1  # why: ... when that unit is under 10% of the peak (an LR printed to 1e-4 that sits at 1e-4 from the start is no decay)
    collapse_ratio: float = 1e-4  # why: a loss at 1/10,000 of its first record or less ...
    chance_min_records: int = 5  # why: a loss at a uniform guess's level (ln K) from the start of training to the end of the log convicts over 5 or more records (a pasted excerpt of 3-4 epochs can still be the first epochs of a slow start)
    chance_tol: float = 0.02  # why: ... its median within 0.02 of ln K (a noisy last-minibatch print of a 10-class net at chance wanders 2.30-2.34, its median 2.31; ln 100 and ln 1000 within a quarter of the gap to the next ln K: +/- 0.0025, +/- 0.00025) and its interquartile range under 0.02 too: pinned there, not a noisy loss whose median happens to pass ln 2 (an LLM fine-tune's 0.48-1.36)
    chance_collapse_above: float = 0.03  # why: a model collapsed to a constant output sits at ln K or just above it (a constant that is not quite the label marginal: 2.33 for ln 10 = 2.303, +1.2%); 3% above keeps a loss still far from chance out
    collapse_drop: float = 0.7  # why: ... after it had learned: a record at 70% of ln K or lower before the last third (an MNIST net at 0.84 of ln 10 = 2.30: 36%); a loss that never got there is a plateau or a run that never learned (`_loss_at_chance`)
    chance_classes: tuple = (
        2,
        10,
        100,
        1000,
    )  # why: ... for the class counts of a binary task and of MNIST/CIFAR-10, CIFAR-100 and ImageNet-1k (0.6931, 2.3026, 4.6052, 6.9078); between them ln K is too dense to tell chance from a plateau (an MoE LLM's first steps at 2.47 sit 0.015 from ln 12)
    collapse_within: int = 5  # why: ... within its first 5 records (a few updates), staying there to the end: no model learns four orders of magnitude that fast (OLMo#692: 12.18 -> 1.8e-06 -> 0.0); a fine-tune that memorises its data takes hundreds of steps to fall that far


@dataclass
class SignedJumpParams:
    jump_z: float = 50.0  # why: a signed objective (NLL, ELBO, PPO loss) has no ratio scale; only a value 50 robust deviations past the whole range of the records before it is judged (WaveGlow NLL -5.4 -> 40490); RL losses' heavy tails stay far below it
    window: int = (
        50  # why: the records before a value that define its range and noise (the hard-spike baseline's window)
    )
    min_records: int = 8  # why: a range and a MAD from fewer than 8 records is no baseline to call a value impossible
    runaway_ratio: float = 1e4  # why: a signed loss whose magnitude at the end (median of the last tenth) is 10,000x that of its first records has run away (a BCE fed label 2: 0.75 -> -9e7); a flow NLL (+5 -> -3), an ELBO (-1e5 -> -100) or a PPO actor loss (0.01 -> 0.1) moves one or two orders at most
    runaway_monotone_ratio: float = 100.0  # why: ... or 100x when the magnitude grows from every tenth of the run to the next with one sign throughout (a binary cross-entropy on labels outside [0, 1] from its first epoch: -3.4e4 ... -6.5e7, 150x, every tenth larger); a signed objective that trains settles, and one that crosses zero dips in magnitude on the way
    game_blips_min: int = 3  # why: on one side of a GAN's pair, 3 or more single-record jumps each back in range on the next record are the game's one-batch blips (a discriminator misjudging a batch), as recurring_count grad-norm blips are a norm's tail: notes; a lone one stays an incident


@dataclass
class BlipParams:
    """Isolated grad-norm blips on long runs (detect/hard_spike.py): notes, not incidents."""

    long_run_records: int = 5000  # why: on a run of >= 5000 records a few single-step grad-norm blips are the norm's heavy tail (BLOOM, OPT logbooks), not incidents
    loss_effect_ratio: float = (
        1.1  # why: the loss "moved" when a record within blip_reach is >= 10% above its pre-blip median ...
    )
    loss_effect_z: float = 3.0  # why: ... or >= 3 robust sigma above it
    reach: int = 3  # why: a bad update shows in the loss within the next few records
    loss_effect_records: int = 2  # why: the loss answered a blip when >= 2 records within reach rise: a bad update's damage lasts; one record of loss noise at z >= 3 among reach+1 comes by chance (0.5% a blip: 40% over 100 blips), two almost never (1e-5)
    max_width: int = 3  # why: a blip is at most 3 records wide at its core (records at sqrt(peak ratio) x its level or more: a norm relaxing after the blip is no width; blips.core_width); wider is an episode
    pattern_loss_share: float = 0.2  # why: a blip pattern is a warning only when the loss answers a fifth of its blips or more (and recurring_count of them): one coincidental loss wobble in a hundred blips is noise
    lr_pattern_rate: float = 0.01  # why: grad-norm spikes recurring at least once per 100 records over their span are the LR-too-high pattern (DETECTION-ANCHORS: recurring spikes, shrinking interval) even when the loss holds; sparser ones are the norm's heavy tail
    thinning_min_gaps: int = (
        4  # why: a trend of the gaps between spikes needs 4 gaps (5 spikes) to be told from chance ...
    )
    thinning_ratio: float = 2.0  # why: ... and spikes whose later gaps have a median 2x the earlier ones' or more are thinning out (DETECTION-ANCHORS: the LR-too-high pattern is recurring spikes with a *shrinking* interval): a settling phase's tail, not that pattern
    short_run_min_blips: int = 5  # why: on a run shorter than long_run_records the grad norm's tail is not known: quiet grad-only spikes are grouped as its blips only when there are 5 or more of them (3 or 4 on a few hundred records are the run's events)
    tail_known_records: int = 1000  # why: from 1000 grad-norm records on, the norm's tail is sampled well enough that recurring_count (3) quiet spikes the loss never answers are that tail, not events (a healthy 2240-step SFT run at batch size 1 has 4 such 7-11x spikes); below it short_run_min_blips holds
    steps_listed: int = 50  # why: the grouped blip note lists at most 50 of its steps (first and last always given): a run with thousands of blips must not bloat diagnosis.json


@dataclass
class LossTermsParams:
    """A loss term switched on mid-run (detect/loss_terms.py): the objective changed, not the model."""

    rise_share: float = 0.5  # why: the switched-on term's median is at least half the total loss's rise over the finding (YOLOX's l1_loss at 0.7-0.8 against a total stepping up ~0.7): the term accounts for the rise; a drift that a tiny new term cannot explain stays one


@dataclass
class ConvergedParams:
    """A loss trained towards 0 (detect/converged.py): its late bumps are judged against where it started."""

    start_median_records: int = 5  # why: the loss the run started from is the median of its first 5 records (one odd first print does not set it)
    level_frac: float = 0.02  # why: a loss down to <= 2% of where it started has converged towards 0 (GE2E speaker verification 4.0 -> 0.01-0.04; a classification loss near 0); an LLM loss never gets there (10-11 -> 2-3: 20-30%), nor an ImageNet classifier's (6.9 -> ~1: 14%)
    rise_frac: float = 0.02  # why: ... and a loss-only bump or drift there that stays within 2% of the starting loss above its baseline is per-batch noise at a tiny absolute loss (GE2E: single batches 3-5x the median, 0.01 -> 0.06, 1.5% of 4.0): a note; a loss that climbs back towards where it started is not


@dataclass
class CoverageParams:
    """What counts as "read" for the verdict (attribute/diagnosis.py)."""

    min_series_records: int = (
        2  # why: a series needs >= 2 step records with a finite value (one record is a point, not a run seen)
    )
    max_runs_in_log: int = 64  # why: a log holding more runs from scratch than this (detect/runs_in_log.py) is a loop around the script (a fuzzed log copied 20,000 times took ~70 ms of detectors per run: 20,000 runs ~25 min); the last 64 distinct runs are judged and a note names the rest (real logs with appended re-runs hold 2-10)


@dataclass
class IncidentParams:
    merge_gap: int = 5  # why: findings within 5 steps of each other are one incident
    kind_priority: tuple = (
        "hard_spike",
        "loss_scale_collapse",
        "nonfinite",
        "layer_outlier",
        "vanishing_gradients",
        "underflow_zeros",
        "sign_ratio_anomaly",
        "clip_rate_anomaly",
        "soft_drift",
        "loss_oscillation",
        "hardware_error",
        "divergence",
    )  # why: at equal severity the incident's kind is the most specific mechanism; drift and oscillation are generic symptoms


# --- attribution / calibration sections ----------------------------------------------


@dataclass
class AttributionParams:
    """Evidence features and rule scoring (spikeforensics/attribute/)."""

    unknown_floor: float = 1.0  # score `unknown` always has: a single weak rule cannot claim high confidence
    max_alternatives: int = 3  # ranked alternatives listed per incident
    min_alternative_confidence: float = 0.05  # alternatives below 5% are noise, not worth listing
    pad_steps: int = 2  # steps added either side of an incident when looking up events and ranks
    pad_seconds: float = 300.0  # Xid/ECC/telemetry counted within 5 min of the incident (log clocks are coarse)
    rank_outlier_ratio: float = 3.0  # a rank counts as the odd one out at >= 3x the median of the other ranks
    rank_agree_rtol: float = 1e-3  # post-all-reduce norms must agree to 1e-3 relative (Megatron grad tolerance)
    replay_spike_ratio: float = 1.5  # a replayed step "spikes again" when its value is >= 1.5x its healthy baseline
    baseline_window: int = 50  # steps before onset forming the healthy baseline (DETECTION-ANCHORS W=50)
    drift_ratio: float = 1.5  # why: median grad norm before onset >= 1.5x the earlier baseline = precursor drift
    plateau_window: int = 100  # steps after recovery checked for a loss plateau (AdamW second-moment lag)
    early_frac: float = 0.1  # first 10% of training is "early" (warmup, front-of-stream data)
    warmup_max_frac: float = 0.25  # an LR schedule that never decays is past its warmup after 25% of the run
    warmup_min_records: int = 20  # ... judged only on a log of >= 20 LR records: a short paste whose LR rises throughout (mlx-lm#1658: 5 records at steps 10-50 of a 100-step warmup) may end inside the warmup
    lr_rise_after_decay: float = 1.1  # once decaying, the LR rising >10% again is a schedule fault (restarted warmup)
    lr_rise_no_decay: float = 2.0  # without any decay, the LR still doubling after the warmup is a schedule fault
    layer_share_high: float = 0.8  # why: one layer holding >= 80% of the peak squared norm dominates the spike (a layer fault, not a run-wide instability; rules/structure.toml, optimization.toml)
    zero_frac_stuck: float = 0.99  # a layer whose gradient is >= 99% exact zeros is masked / frozen
    sign_stuck: float = 0.95  # pos_frac >= 0.95 or <= 0.05: nearly all one sign (structural bias; DOMAIN 40-60%)
    sign_max_zero_frac: float = (
        0.5  # a layer over half exact zeros has no meaningful sign share (as sign_ratio.max_zero_frac)
    )
    astronomical_norm: float = 1e4  # why: a logged grad norm >= 1e4 before a NaN means clipping was not in effect
    loss_scale_floor: float = 1.0  # why: dynamic loss scaling halves down to 1 (DeepSpeed min_loss_scale default 1, apex/torch the same); a scale at 1 that still overflows means fp16 cannot hold the values at all
    start_records: int = 10  # why: a NaN within the first 10 records of a log that starts at step <= hard_spike.start_max_step is "from the first updates": the setup (precision, LR, init), not a late event
    first_update_steps: int = 1  # why: the loss of step 0 (or 1) comes out of the initial weights (or one update): a value non-finite there was broken before the learning rate could act
    absurd_lr: float = 1.0  # why: Adam-family optimizers train at 1e-5..1e-2 and SGD on vision at <= ~0.1 per 256 samples; a printed LR >= 1 beside a run that went non-finite or exploded is the first suspect (SGD LSTM LMs at lr 1-30 on clipped gradients are the rare exception, hence a listed cause, not a certainty)
    negligible_lr_budget: float = 1e-4  # why: an Adam-style update moves each weight by about the LR, so the LR summed over the updates before a NaN bounds how far the weights moved; <= 1e-4 in all (warm-up at 1e-8, burn-in at 0) cannot carry a sane model out of range: the LR is not the cause
    rejected_losses_min: int = 2  # why: one rejected batch can be a fluke of the check; the trainer rejecting the loss of two or more batches while the rest train on means those batches are bad, not the weights (bad weights fail every batch)
    confined_min_records: int = 2  # why: a NaN in one loss term while its sibling terms stay finite, on >= 2 records (not one step before everything goes NaN): the shared weights are intact, so the NaN comes from that term's inputs (its targets), not from the update
    confined_min_siblings: int = 1  # why: one sibling loss term that stays finite and non-zero is computed from the same weights: were they NaN, it would be NaN too (a term printed as 0 does not count: over an empty selection it is 0 whatever the weights)
    component_exclude_pattern: str = r"(?i)^(?:session|epoch|iter\w*|step\w*|\w*time\w*|data|eta|\w*mem\w*|lr|learning_rate|grad_norm|loss_scale|\w*tokens?\w*|\w*samples?\w*|\w*per_sec\w*|throughput\w*|batch\w*|[ge]pu\w*|\w*acc\w*|top\d\w*|ppl|perplexity|(?:nb|num|n)_?\w*steps?\w*|\w*toleranc\w*)$"  # why: the record's counters, timings, memory, throughput, optimizer state, solver settings (a JAX loop's `NbInnerStepsNode: 20`, `InnerToleranceNode: 1e-16`) and accuracies are no loss terms (an argmax accuracy stays finite on NaN logits)
    nan_rise_ratio: float = 1.5  # why: before an LR-driven NaN the loss and grad norm climb for a few records (the update grows each step); a last finite value within 1.5x of the median before it means the NaN came without a build-up, in one update (a value out of fp16 range, a bad element), not from growth
    back_at_once_ratio: float = 1.5  # why: a loss within 1.5x of its level before the incident at the very next record came straight back: the spike was in that batch's loss, not carried by the weights (the optimisation did not leave its basin)
    nan_rise_min_records: int = (
        3  # why: the median of fewer than 3 finite records before the NaN is no baseline to call a build-up absent
    )
    loss_explode_ratio: float = 100.0  # why: a loss 100x its first logged value is no spike of a healthy run (spikes are 1.5-10x; DOMAIN hard spike >= 2x): the optimisation left its basin
    sample_outlier_ratio: float = (
        3.0  # a sample >= 3x normal per-sample loss stands out (healthy batches peak near 2x: mixed sources/lengths)
    )
    enrichment_min_batches: int = 3  # need >= 3 spike-batch samples before an enrichment ratio means anything
    oscillation_spikes: int = 4  # why: >= 4 spike incidents in a run = recurring, systematic instability
    xid_strong_codes: tuple = (
        48,
        63,
        64,
        74,
        79,
        92,
        94,
        95,
    )  # ECC / row remap / NVLink / off the bus (DETECTION-ANCHORS 4)
    xid_medium_codes: tuple = (62, 119, 120)  # micro-controller halt, GSP timeout/error: hardware or firmware
    xid_weak_codes: tuple = (13, 31, 43, 45)  # engine exception, MMU fault, cleanup: usually the application
    xid_strong_weight: float = 1.0  # hardware weight of a strong Xid
    xid_medium_weight: float = 0.8
    xid_weak_weight: float = 0.3
    xid_other_weight: float = 0.5  # an Xid code not in the lists: unknown, half weight


@dataclass
class TracingParams:
    """Step -> sample tracing and the skip list (spikeforensics/attribute/tracing.py)."""

    steps_before: int = 1  # implicate the step before the spike too (Lightning skip_batches [idx-1, idx])
    max_samples: int = 20  # implicated samples listed per incident
    max_implicated_steps: int = 1024  # why: a coarse log (a record every 20,000 steps) implicates every step since the record before each grouped event; a repeated 14 MB PyMARL log's 1,274 incidents held 49M such steps (diagnose past 2 GB): the steps nearest the peak are kept, 1,024 being more than any manifest-traced spike needs (onset..peak is at most 8 records)
    w_peak: float = 1.0  # score for being in the peak step's batch
    w_before: float = 0.6  # score for being in an implicated earlier step (weights may already be damaged)
    w_after: float = 0.3  # why: a later step of the incident enters only through samples whose own loss stands out (own_outlier_ratio); it is more often a victim of the damaged weights than a cause, so it weighs least
    after_peak_span: int = 8  # why: later steps of the incident searched for such samples (a run of bad batches: 3 steps in the no-clip fixtures; 8 as for onset..peak)
    own_outlier_ratio: float = 2.0  # why: the least loss ratio (over the healthy per-sample loss; after the peak also over its step's 10th percentile) at which a sample is bad data on its own evidence and goes to the skip list; raised to the healthy tail (below). attribution.sample_outlier_ratio (3x) stays the bar for blaming data at all
    own_outlier_tail_quantile: float = 0.999  # why: the bar is raised to the P99.9 of healthy samples' loss over their step median (near the incident): mixed sources put healthy samples up to 2-2.8x
    align_max_offset: int = 2  # why: a batch manifest counted 1-2 steps off the log (0- vs 1-based, counted before vs after the step) is found and shifted; 0 turns the check off (spikeforensics/alignment.py)
    align_min_corr: float = 0.5  # why: ... only when the shifted manifest's step-to-step mean-loss changes correlate >= 0.5 with the log's (aligned: ~1; one step off, white noise: ~-0.5)
    align_min_gain: float = (
        0.3  # why: ... and beat the manifest as written by 0.3, so noise never moves a manifest that is right
    )
    align_window: int = (
        2000  # why: checked on the first 2000 manifest steps: plenty of evidence, and cheap on an 8M-row manifest
    )
    skip_max_outliers: int = 256  # why: at most this many own-evidence samples per incident in the skip list (a whole bad shard is a data-pipeline fix, not a skip list)
    w_recurrence: float = 2.0  # per other spike incident the sample also appears in (DOMAIN: recurrence = data)
    w_healthy: float = 0.75  # penalty per healthy step the sample was seen in (exoneration; OLMo 2 caveat: soft)
    w_loss: float = (
        1.5  # per log2 of the sample's loss over its reference (healthy per-sample loss / step's lower quartile)
    )
    w_loss_abs: float = 1.0  # why: per log2 of the sample's loss over the healthy per-sample loss alone: when every sample of a step is bad, the step's own quantile hides them, the healthy level does not
    loss_ref_window: int = (
        50  # healthy per-sample loss reference: the 50 steps before the incident (DETECTION-ANCHORS W=50)
    )
    loss_ref_quantile: float = (
        0.1  # the step's 10th percentile follows a batch-wide rise (LR, hardware) yet ignores up to 90% bad samples
    )
    w_nonfinite_loss: float = 6.0  # a sample whose own loss is NaN/Inf is the prime suspect
    w_replay_clean: float = (
        4.0  # the same sample in the replayed step had a normal loss: exonerated (DETECTION-ANCHORS 3: replay)
    )
    replay_clean_frac: float = 0.5  # "normal on replay": finite and under half its first-pass loss
    w_rank: float = 1.0  # the sample sat on the rank the incident is confined to
    w_corroborated: float = 4.0  # the hard-spike detector's chance test (recurrence.py) tied this sample to several bumps: the strongest data evidence short of its own NaN
    w_source: float = 0.5  # per log2 of its source's enrichment in spike batches vs healthy ones
    w_length: float = 0.5  # per |log2| of its tokens over the median: extreme length either way (long junk, empty docs)
    length_cap_log2: float = 6.0  # why: the length term stops at 64x either way (an empty document would be log2(inf)): length alone never outweighs a sample's own NaN loss (w_nonfinite_loss)
    w_empty_nonfinite: float = 4.0  # why: a document with no target tokens in a NaN/Inf incident: the per-sample mean is 0/0 (HF "all labels -100"), as strong as the detector's own corroboration
    skip_min_confidence: float = 0.3  # data incidents below 30% confidence do not feed the skip list
    tie_tol: float = 0.1  # why: suspicion scores closer than 0.1 are a tie (the smallest real evidence term, a 1.05x loss ratio, adds ~0.1): said so, and never cut apart by the skip list's limit
    skip_score_frac: float = 0.75  # skip the samples scoring >= 75% of the top suspect (at most 5 per incident)


@dataclass
class CalibrationParams:
    """Clip-threshold calibration (spikeforensics/attribute/calibration.py)."""

    quantile: float = 0.99  # P99 of pre-clip grad norm over healthy steps (DOMAIN)
    margin: float = 2.0  # x2 margin on top of P99 (DOMAIN: P99 0.5 -> threshold 1.0)
    burn_in_frac: float = 0.02  # skip the first 2% of steps: initial norms are not the regime to calibrate on
    min_healthy_steps: int = 20  # fewer healthy steps than this: no recommendation
    current_clip_norm: float = 0.0  # the run's max_norm when known (0 = infer from grad_norm_clipped or detectors)
    healthy_low: float = 0.01  # clip rate 1-8% is healthy (DOMAIN)
    healthy_high: float = 0.08
    high: float = 0.20  # > 20%: LR too high or threshold too tight
    very_high: float = 0.50  # > 50%: threshold too small
    too_loose: float = 0.001  # < 0.1%: threshold too loose
    layer_min_steps: int = 20  # per-layer thresholds need >= 20 healthy steps of that layer


@dataclass
class Params:
    """All sections. Add a section by adding a field with a dataclass default_factory."""

    series: SeriesParams = field(default_factory=SeriesParams)
    hard_spike: HardSpikeParams = field(default_factory=HardSpikeParams)
    shape: ShapeParams = field(default_factory=ShapeParams)
    nonfinite: NonfiniteParams = field(default_factory=NonfiniteParams)
    loss_scale: LossScaleParams = field(default_factory=LossScaleParams)
    underflow: UnderflowParams = field(default_factory=UnderflowParams)
    sign_ratio: SignRatioParams = field(default_factory=SignRatioParams)
    clipping: ClippingParams = field(default_factory=ClippingParams)
    layer_outlier: LayerOutlierParams = field(default_factory=LayerOutlierParams)
    vanishing: VanishingParams = field(default_factory=VanishingParams)
    oscillation: OscillationParams = field(default_factory=OscillationParams)
    soft_drift: SoftDriftParams = field(default_factory=SoftDriftParams)
    incidents: IncidentParams = field(default_factory=IncidentParams)
    events: EventsParams = field(default_factory=EventsParams)
    divergence: DivergenceParams = field(default_factory=DivergenceParams)
    stall: StallParams = field(default_factory=StallParams)
    signed_jump: SignedJumpParams = field(default_factory=SignedJumpParams)
    blips: BlipParams = field(default_factory=BlipParams)
    coverage: CoverageParams = field(default_factory=CoverageParams)
    converged: ConvergedParams = field(default_factory=ConvergedParams)
    loss_terms: LossTermsParams = field(default_factory=LossTermsParams)

    attribution: AttributionParams = field(default_factory=AttributionParams)
    tracing: TracingParams = field(default_factory=TracingParams)
    calibration: CalibrationParams = field(default_factory=CalibrationParams)

    def section(self, name: str):
        return getattr(self, name)

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: list[str] | None = None) -> Params:
        params = cls()
        if path:
            data = read_small_toml(path, MAX_PARAMS_FILE_BYTES, "parameters")
            for section, values in data.items():
                if not isinstance(values, dict):
                    raise ParamError(f"{path}: [{section}] must be a table")
                for key, value in values.items():
                    params.set(f"{section}.{key}", value, origin=str(path))
        for item in overrides or []:
            if "=" not in item:
                raise ParamError(f"--set {item!r}: expected SECTION.NAME=VALUE")
            key, raw = item.split("=", 1)
            params.set(key.strip(), _parse_value(raw.strip()), origin="--set")
        return params

    def set(self, dotted: str, value, origin: str = "") -> None:
        section_name, _, key = dotted.partition(".")
        section = getattr(self, section_name, None)
        if section is None or not is_dataclass(section):
            known = ", ".join(f.name for f in fields(self))
            raise ParamError(f"{origin}: unknown parameter section {section_name!r} (known: {known})")
        names = {f.name: f for f in fields(section)}
        if key not in names:
            raise ParamError(f"{origin}: unknown parameter {dotted!r} (known in [{section_name}]: {', '.join(names)})")
        current = getattr(section, key)
        if isinstance(current, bool) and not isinstance(value, bool):
            raise ParamError(f"{origin}: {dotted} must be true or false")
        if isinstance(current, (int, float)) and not isinstance(current, bool):
            text, why = range_spec(dotted, current)
            kind = "an integer" if isinstance(current, int) else "a number"
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ParamError(f"{origin}: {dotted} must be {kind} in {text} ({why})")
            if isinstance(current, int) and not float(value).is_integer():
                raise ParamError(f"{origin}: {dotted} must be {kind} in {text}, got {value!r}")
            if not math.isfinite(value) or not _in_range(value, dotted, current):
                raise ParamError(f"{origin}: {dotted} = {value!r} is out of range: allowed {text} ({why})")
            value = type(current)(value)
        elif isinstance(current, tuple):
            elem = type(current[0]) if current else str
            if not isinstance(value, list) or not all(isinstance(v, elem) and not isinstance(v, bool) for v in value):
                raise ParamError(f"{origin}: {dotted} must be a list of {elem.__name__} values")
            value = tuple(value)
        elif isinstance(current, str) and not isinstance(value, str):
            raise ParamError(f"{origin}: {dotted} must be a string")
        setattr(section, key, value)

    def as_dict(self) -> dict:
        return {f.name: dict(vars(getattr(self, f.name))) for f in fields(self)}


def _parse_value(raw: str):
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
