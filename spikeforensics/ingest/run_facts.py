"""Run facts a training log prints: the precision it trains in (`precision` events:
Lightning/Accelerate/DeepSpeed banners and configs, dtypes, command-line flags) and the
GPU model it runs on (`device` events: nvidia-smi, `GPU 0:` lines, `get_device_name`), one
event per distinct fact per file. `text_events` runs `run_fact_events` on its guarded lines
(those holding a GUARD_LITERALS string, of which RUN_FACT_LITERALS are the run-fact part).
"""

from __future__ import annotations

import polars as pl

from spikeforensics.ingest._event_frames import _ret
from spikeforensics.ingest.base import detail_expr

# The literals of lines that may state a run fact (spliced into text_events.GUARD_LITERALS)
RUN_FACT_LITERALS = [
    "fp16",
    "bf16",
    "FP16",
    "BF16",
    "float16",
    "Precision",
    "precision",
    "16bit",
    "16-bit",
    "Tesla",
    "NVIDIA",
    "GeForce",
    "Quadro",
    "TITAN",
    "Product Name",
    "get_device_name",
    "AmpOptimWrapper",  # mixed precision of no stated dtype (PREC_AMP)
    "_amp",
    "-amp",
    " amp",
    "(amp",
    "AMP not enabled",
    # an LR range test (see LR_FINDER)
    "learning rates",
    "LR Finder",
    "LR finder",
    "Learning rate search",
    "lr_find",
    "LRFinder",
    "LR range test",
]

# --- run facts (one event per distinct fact per file) ------------------------------------
# kind `precision`: detail.mode in fp16 / bf16 / fp32 / amp-fp16 / amp-bf16, detail.text
PREC_LIGHTNING = r"Using (?:(16)[ -]?bit|(bfloat16|bf16))(?: native)?(?: Automatic Mixed)? [Pp]recision"
PREC_ACCELERATE = r"mixed_precision\W{0,3}\s*[=:]?\s*['\"]?(fp16|bf16)\b"
PREC_DS_CONFIG = r"\"(fp16|bf16)\":\s*\{\s*\"enabled\":\s*true"
# the last: a printed tensor's own dtype (`tensor(nan, device='cuda:0', dtype=torch.bfloat16, grad_fn=...)`,
# a loss computed in that precision; PyTorch prints the dtype only when it is not the default float32)
PREC_DTYPE = (
    r"(?:torch_dtype\s*=\s*|params_dtype\s*\.*\s*:?\s*|cast_model_type\s*:\s*|\btensor\([^()]*?\bdtype=)"
    r"torch\.(float16|bfloat16|half|float32)\b"
)
PREC_FLAG = r"(?:^|[^\w-])-{0,2}(fp16|bf16)(?:\s*[=:]\s*|\s*\.{2,}\s*|\s+)(?:True|true|1)\b"
PREC_BARE = r"(?:^|\s)--(fp16|bf16)(?:\s*\\?\s*$|\s+--)"
# timm's banner when mixed precision is off: `AMP not enabled. Training in float32.`
PREC_FP32_BANNER = r"\bAMP not enabled\. Training in float32\b"
PREC_LIGHTNING_ARG = r"\bprecision\s*[=:]\s*['\"]?(16-mixed|bf16-mixed|16|bf16|32)\b"
# mixed precision switched on without a dtype (mode `amp`: fp16 unless the log also declares bf16, as
# torch.autocast on CUDA, apex, timm's `--amp` and mmengine's AmpOptimWrapper default to float16):
# timm's `train.py` banner (`Using native Torch AMP. Training in mixed precision.`, `Using NVIDIA APEX AMP. ...`),
# mmengine's `optim_wrapper = dict(type='AmpOptimWrapper', ...)`, an mmcv 1.x config's `fp16 = dict(loss_scale=...)`
# (dumped at the top of every mmdet 2.x log), `amp=True` / `use_amp: true` / `--amp` flags and arguments, and an
# OpenMMLab config or experiment name with its `amp` / `fp16` setting token (the naming convention's
# `..._8xb512-amp-coslr-1600e_in1k`, mmengine's periodic `Exp name: <config>_<timestamp>`)
PREC_AMP = (
    r"\bUsing (?:native Torch|NVIDIA APEX) AMP\b|"
    r"\bAmpOptimWrapper\b|\bfp16\s*=\s*dict\(|\b(?:use_)?amp\s*[=:]\s*(?:True|true|1)\b|(?:^|\s)--amp(?:\s|$|=[Tt]rue)|"
    r"(?:Exp name:\s*|\bconfigs?/\S*?)[\w.-]*?[-_](?:amp|fp16)[-_][\w.-]*"
)
# kind `device`: detail.name, detail.bf16_supported (false before Ampere, true from it)
GPU_NAME = r"((?:Tesla|NVIDIA|Quadro|GeForce|TITAN|Titan)\b[\w .-]*?)"
DEVICE_SMI_ROW = rf"^\|\s+\d+\s+{GPU_NAME}\s+(?:On|Off)\s+\|"
DEVICE_NAMED = (
    r"(?:Product Name\s*:|\bGPU \d+:|GPU type:|GPU models and configuration:|get_device_name\([^)]*\)\s*[:=]?|"
    rf"[Dd]evice name\s*[:=])\s*(?:\d+\s*x\s*)?{GPU_NAME}\s*(?:\(UUID|$|\s{{2,}}|,|\|)"
)
NO_BF16 = (
    r"(?i)V100|\bT4\b|P100|P40|\bP4\b|K80|K40|M40|M60|GTX|\b10[5-8]0|\b16[56]0|\b20[6-8]0|"
    r"TITAN (?:V|RTX|X)|Quadro RTX"
)
HAS_BF16 = (
    r"(?i)A100|A800|H100|H800|H200|\bH20\b|GH200|B200|B100|\bA10G?\b|\bA30\b|\bA40\b|\bA16\b|\bL4\b|L40|"
    r"\bA[2-6]000\b|RTX 30\d0|RTX 40\d0|RTX 50\d0|\b30[5-9]0|\b40[6-9]0|\b50[6-9]0|Ada"
)


# kind `lr_finder`: the run is an LR range test (the LR grows every step until the loss diverges, by design; the
# blow-up at its end is the LR too high, which the test is there to find): ktrain's `lr_find` (`simulating training
# for different learning rates... this may take a few moments...`), fastai's (`LR Finder is complete, type
# learn.recorder.plot() to see the graph.`), Lightning's tuner (`LR finder stopped early after 87 steps due to
# diverging loss.`), torch-lr-finder (`Learning rate search finished. See the graph with {finder_name}.plot()`,
# `Stopping early, the loss has diverged`), and a call or class by that name printed in the log (`lr_find(`,
# `LRFinder(`), or the test's own name (`LR range test`)
LR_FINDER = (
    r"simulating training for different learning rates|LR [Ff]inder (?:is complete|stopped early)|"
    r"Learning rate search finished|lr_find\(|LRFinder\(|(?i:LR range test)"
)


def run_fact_events(extra: pl.DataFrame) -> list[pl.DataFrame]:
    """`precision`, `device` and `lr_finder` events: the first line of each distinct fact in the file."""
    text = pl.col("text")
    lit = text.str.extract_groups(PREC_LIGHTNING)
    dtype = text.str.extract(PREC_DTYPE, 1)
    larg = text.str.extract(PREC_LIGHTNING_ARG, 1)
    mode = pl.coalesce(
        pl.when(lit.struct.field("1").is_not_null())
        .then(pl.lit("amp-fp16"))
        .when(lit.struct.field("2").is_not_null())
        .then(pl.lit("amp-bf16")),
        pl.concat_str(pl.lit("amp-"), text.str.extract(PREC_ACCELERATE, 1)),
        text.str.extract(PREC_DS_CONFIG, 1),
        pl.when(dtype.is_in(["float16", "half"]))
        .then(pl.lit("fp16"))
        .when(dtype == "bfloat16")
        .then(pl.lit("bf16"))
        .when(dtype == "float32")
        .then(pl.lit("fp32")),
        text.str.extract(PREC_FLAG, 1),
        text.str.extract(PREC_BARE, 1),
        pl.when(larg.is_in(["16", "16-mixed"]))
        .then(pl.lit("amp-fp16"))
        .when(larg.is_in(["bf16", "bf16-mixed"]))
        .then(pl.lit("amp-bf16"))
        .when(larg == "32")
        .then(pl.lit("fp32")),
        pl.when(text.str.contains(PREC_AMP)).then(pl.lit("amp")),
        pl.when(text.str.contains(PREC_FP32_BANNER)).then(pl.lit("fp32")),
    )
    name = pl.coalesce(text.str.extract(DEVICE_SMI_ROW, 1), text.str.extract(DEVICE_NAMED, 1)).str.strip_chars(" .-")
    f = extra.with_columns(mode.alias("_mode"), name.alias("_name"))
    prec = f.filter(pl.col("_mode").is_not_null()).unique("_mode", keep="first", maintain_order=True)
    dev = f.filter(pl.col("_name").is_not_null() & pl.col("_mode").is_null()).unique(
        "_name", keep="first", maintain_order=True
    )
    n = pl.col("_name")
    bf16 = pl.when(n.str.contains(NO_BF16)).then(pl.lit(False)).when(n.str.contains(HAS_BF16)).then(pl.lit(True))
    return [
        _ret(
            prec,
            "precision",
            lambda: detail_expr(strings={"mode": pl.col("_mode"), "text": text.str.strip_chars().str.slice(0, 300)}),
        ),
        _ret(dev, "device", lambda: detail_expr(strings={"name": n}, bools={"bf16_supported": bf16})),
        _ret(
            extra.filter(text.str.contains(LR_FINDER)).head(1),
            "lr_finder",
            lambda: detail_expr(strings={"text": text.str.strip_chars().str.slice(0, 300)}),
        ),
    ]
