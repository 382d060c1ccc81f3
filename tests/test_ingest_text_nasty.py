"""Hand-made nasty inputs for every text parser: junk interleaved with valid records
(hypothesis), CRLF, invalid UTF-8, binary junk, a truncated last line, ranks printing
the same step, a resume (step going back), unparseable record-looking lines."""

from __future__ import annotations

import math

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spikeforensics.ingest import parse_file

# fmt -> (record line for a step and loss, separator before a record is safe to insert junk)
TEMPLATES = {
    "megatron": lambda s, x: (
        f" iteration {s:8d}/ 100000 | consumed samples: {s * 8:12d} | learning rate: 1.000000E-04 | global batch size:     8 | lm loss: {x:.6E} | loss scale: 1024.0 | grad norm: 0.500 | number of skipped iterations:   0 | number of nan iterations:   0 |"
    ),
    "deepspeed": lambda s, x: (
        f"[2024-01-01 00:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step={s}, skipped=0, lr=[{x}], mom=[(0.9, 0.95)]"
    ),
    "nanogpt": lambda s, x: f"iter {s}: loss {x:.4f}, time 100.00ms, mfu 10.00%",
    "llmc": lambda s, x: f"s:{s} trl:{x:.4f} lr:0.000100 norm:0.50",
    "torchtitan": lambda s, x: (
        f"[rank0]:[titan] 2025-01-01 00:00:00,000 - root - INFO - \x1b[31mstep: {s:2}  \x1b[32mloss: {x:8.5f}  \x1b[38;2;180;60;0mgrad_norm:  0.5000  \x1b[38;2;54;234;195mmemory: 10.00GiB(10.00%)  \x1b[34mtps: 1,234  \x1b[36mtflops: 1.00  \x1b[35mmfu: 1.00%\x1b[39m"
    ),
    "fairseq": lambda s, x: (
        f"2020-07-01 12:00:00 | INFO | train_inner | epoch 001:    {s} / 1000 loss={x:.3f}, nll_loss=1.0, ppl=2.0, wps=100, ups=1, wpb=10, bsz=1, num_updates={s}, lr=0.0001, gnorm=1.0, clip=0%, loss_scale=8, train_wall=1, wall=2"
    ),
    "mmengine": lambda s, x: (
        f"10/30 22:18:02 - mmengine - INFO - Iter(train) [{s:4d}/9999]  lr: 1.0000e-04  eta: 2:46:39  time: 2.8906  data_time: 0.0042  memory: 10762  loss: {x:.4f}  grad_norm: 3.0608"
    ),
    "olmo": lambda s, x: (
        f"2024-08-06 09:59:26.181 host:0  olmo.train:908  INFO    [step={s}/1000,epoch=0]\n    optim/total_grad_norm=1.0\n    train/CrossEntropyLoss={x}"
    ),
    "generic_steps": lambda s, x: f"step {s}/1500 | loss {x:.4f} | lr 3e-4 | grad_norm 0.64",
}
NAME = {"deepspeed": "lr"}  # DeepSpeed prints no loss: the value rides in lr

junk_line = st.one_of(
    st.text(max_size=80).filter(lambda t: "\n" not in t and "\r" not in t),
    st.binary(max_size=60).map(lambda b: b.replace(b"\n", b" ").replace(b"\r", b" ").decode("latin-1")),
    st.sampled_from(
        [
            "Traceback (most recent call last):",
            '  File "x.py", line 1',
            "UserWarning: something",
            "time (ms) | forward-compute: 193.77 | backward-compute: 400.1",
            "[...]",
            "...",
            "^M^M",
            "-" * 80,
            "<IPython.core.display.HTML object>",
            "WARNING: nan",
            "loss: unknown",
        ]
    ),
)


def write(tmp_path, fmt, chunks: list[bytes], name="log.txt"):
    path = tmp_path / f"{fmt}-{name}"
    path.write_bytes(b"".join(chunks))
    return path


def losses(result, fmt) -> dict[int, float]:
    m = result.tables.get(
        "metrics", pl.DataFrame(schema={"name": pl.String, "step": pl.Int64, "value": pl.Float64, "record": pl.Int64})
    )
    rows = m.filter((pl.col("name") == NAME.get(fmt, "loss")) & pl.col("record").is_not_null())
    return dict(zip(rows.get_column("step").to_list(), rows.get_column("value").to_list()))


@pytest.mark.parametrize("fmt", sorted(TEMPLATES))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.lists(st.lists(junk_line, max_size=3), min_size=6, max_size=6), crlf=st.booleans())
def test_junk_never_loses_records(tmp_path, fmt, junk, crlf):
    nl = b"\r\n" if crlf else b"\n"
    chunks = []
    expected = {}
    for i, noise in enumerate(junk):
        for j in noise:
            chunks.append(j.encode("utf-8", "surrogateescape") + nl)
        if i < 5:
            step, x = 10 * (i + 1), 1.0 + i / 8
            expected[step] = x
            chunks.append(TEMPLATES[fmt](step, x).replace("\n", nl.decode()).encode() + nl)
    result = parse_file(write(tmp_path, fmt, chunks), fmt)
    got = losses(result, fmt)
    for step, x in expected.items():
        assert got.get(step) == pytest.approx(x, rel=1e-4), (step, got)


@pytest.mark.parametrize("fmt", sorted(TEMPLATES))
def test_invalid_utf8_binary_and_truncated_tail(tmp_path, fmt):
    rec = [TEMPLATES[fmt](s, 2.0).encode() + b"\n" for s in (1, 2, 3)]
    chunks = [
        b"\xff\xfe\x00\x01garbage\x80\n",
        rec[0],
        b"\x00" * 20 + b"\n",
        rec[1],
        rec[2],
        TEMPLATES[fmt](4, 2.5).encode()[:25],
    ]
    result = parse_file(write(tmp_path, fmt, chunks), fmt)
    got = losses(result, fmt)
    assert {1, 2, 3} <= set(got)
    assert got.get(4, 2.5) == pytest.approx(2.5, rel=0.01)  # a cut record: whole fields or nothing


def test_megatron_truncated_record_is_counted_not_guessed(tmp_path):
    full = TEMPLATES["megatron"](5, 3.0)
    cut = full[: full.index("grad norm") + 14]  # `... | grad norm: 0.5` cut mid-field
    path = write(tmp_path, "megatron", [(TEMPLATES["megatron"](4, 3.0) + "\n" + cut).encode()])
    result = parse_file(path, "megatron")
    m = result.tables["metrics"]
    assert result.unparsed == 1 and result.unparsed_examples[0][0] == 2
    assert m.filter((pl.col("step") == 5) & (pl.col("name") == "grad_norm")).height == 0  # cut field dropped
    assert m.filter((pl.col("step") == 5) & (pl.col("name") == "loss")).height == 1  # whole fields kept


def test_megatron_nan_spellings_nan_omitted_loss_and_counters(tmp_path):
    lines = [
        " iteration      700/    3000 | elapsed time per iteration (ms): 12932.3 | learning rate 9.773E-06 | lm loss NAN | loss scale 4.0 |",
        " iteration      710/    3000 | consumed samples: 100 | learning rate: 0.000E+00 | global batch size: 8 | loss scale: 1.0 | grad norm: inf | number of skipped iterations:  10 | number of nan iterations:   2 |",
        " iteration      720/    3000 | consumed samples: 180 | learning rate: 1.0E-05 | global batch size: 8 | lm loss: 2.5E+00 | loss scale: 1.0 | grad norm: -nan | number of skipped iterations:   0 | number of nan iterations:   0 |",
    ]
    result = parse_file(write(tmp_path, "megatron", ["\n".join(lines).encode() + b"\n"]), "megatron")
    m = result.tables["metrics"]

    def v(step, name):
        rows = m.filter((pl.col("step") == step) & (pl.col("name") == name))
        return rows.get_column("value").to_list()

    assert math.isnan(v(700, "loss")[0]) and v(700, "lr") == [pytest.approx(9.773e-6)]
    assert v(700, "step_time_ms") == [pytest.approx(12932.3)]
    assert v(710, "loss") == []  # Megatron omitted the NaN interval loss: no row
    assert v(710, "grad_norm") == [math.inf] and math.isnan(v(720, "grad_norm")[0])
    assert v(710, "skipped_iters") == [10] and v(710, "nan_iters") == [2]
    ev = result.tables["events"]
    kinds = dict(zip(ev.get_column("step").to_list(), ev.get_column("kind").to_list()))
    assert ev.filter((pl.col("kind") == "overflow") & (pl.col("step") == 710)).height == 1  # 4.0 -> 1.0 with skips
    assert ev.filter((pl.col("kind") == "nan") & (pl.col("step") == 710)).height == 2  # counter + inf grad norm
    assert kinds[700] == "nan"


def test_megatron_multi_rank_duplicates_and_resume(tmp_path):
    rec = TEMPLATES["megatron"]
    # one stdout shared by two ranks without prefix: the same step twice = one record;
    # then a resume sends the counter back
    text = (
        "\n".join(
            [
                rec(10, 2.0),
                rec(10, 2.0),
                rec(20, 1.9),
                rec(30, 1.7),
                " loading checkpoint from /c at iteration 10",
                rec(20, 1.95),
                rec(30, 1.8),
            ]
        )
        + "\n"
    )
    result = parse_file(write(tmp_path, "megatron", [text.encode()]), "megatron")
    loss = result.tables["metrics"].filter(pl.col("name") == "loss").sort("line")
    assert loss.get_column("step").to_list() == [10, 20, 30, 20, 30]
    assert loss.get_column("attempt").to_list() == [0, 0, 0, 1, 1]
    assert loss.get_column("record").to_list() == [0, 1, 2, 3, 4]
    resume = result.tables["events"].filter(pl.col("kind") == "resume")
    assert resume.item(0, "step") == 10 and resume.item(0, "attempt") == 1


def test_srun_prefixed_ranks_keep_rank(tmp_path):
    rec = TEMPLATES["nanogpt"]
    text = "\n".join([f"0: {rec(1, 2.0)}", f"1: {rec(1, 2.1)}", f"0: {rec(2, 1.9)}", f"1: {rec(2, 1.8)}"]) + "\n"
    m = parse_file(write(tmp_path, "nanogpt", [text.encode()]), "nanogpt").tables["metrics"]
    loss = m.filter(pl.col("name") == "loss").sort("line")
    assert loss.get_column("rank").to_list() == [0, 1, 0, 1]
    assert loss.get_column("value").to_list() == [2.0, 2.1, 1.9, 1.8]


def test_tqdm_carriage_returns_and_thousands(tmp_path):
    text = "10%|#   | 10/100 [00:01<00:09]\r" + TEMPLATES["torchtitan"](10, 3.0) + "\r\n"
    m = parse_file(write(tmp_path, "torchtitan", [text.encode()]), "torchtitan").tables["metrics"]
    assert m.filter(pl.col("name") == "tokens_per_s").item(0, "value") == 1234


def test_generic_separators(tmp_path):
    text = (
        "\n".join(
            [
                "step=7, loss=2.30, lr=0.0003, grad_norm=0.61",
                "Step 8: loss 2.29 grad norm 0.60 lr 3e-4",
                "[Epoch 1, step 9] loss: 2.28, lr: 3e-4",
                "step 10: val loss 2.5",
            ]
        )
        + "\n"
    )
    m = parse_file(write(tmp_path, "generic_steps", [text.encode()]), "generic_steps").tables["metrics"]
    train = m.filter(pl.col("record").is_not_null())
    assert dict(
        zip(*train.filter(pl.col("name") == "loss").select("step", "value").to_dict(as_series=False).values())
    ) == {7: 2.3, 8: 2.29, 9: 2.28}
    assert train.filter(pl.col("name") == "grad_norm").get_column("value").to_list() == [0.61, 0.6]
    assert m.filter(pl.col("name") == "eval_loss").item(0, "record") is None


def _prefixed_copy(tmp_path, case: str, prefix) -> tuple:
    from _ingest_helpers import REAL

    src = next(REAL.glob(f"*/{case}/FACTS.toml")).parent
    import tomllib

    name = tomllib.loads((src / "FACTS.toml").read_text())["files"][0]
    lines = (src / name).read_text().splitlines()
    out = tmp_path / name
    out.write_text("\n".join(prefix(i, ln) for i, ln in enumerate(lines)) + "\n")
    return src / name, out


@pytest.mark.parametrize(
    "prefix",
    [
        lambda i, ln: f"2024-05-01T12:00:{i % 60:02d}.123456789Z {ln}",  # kubectl logs --timestamps
        lambda i, ln: f"(RayTrainWorker pid=48213, ip=10.0.0.5) {ln}",  # a Ray Train worker
        lambda i, ln: f"(pid=77) [rank0]: {ln}",  # Ray around torchrun's --tee
    ],
)
@pytest.mark.parametrize(
    "case",
    [
        "awr-xbpeng-ant-v2-paper-log3-critic-actor-loss-healthy-12050-iters",  # a whitespace table
        "custom-laddernet-1-retina-seg-train-loss-1e18-epoch4-wrong-lr-uploaded",  # `Epoch N:` blocks
        "custom-lingjie-pretrain-fp16-curriculum-switch-loss-bump-step4150",  # JSON lines after text
    ],
)
def test_container_and_ray_prefixes_read_as_the_bare_log(tmp_path, case, prefix):
    from spikeforensics.ingest import detect_format

    bare, prefixed = _prefixed_copy(tmp_path, case, prefix)
    fmt, _ = detect_format(bare)
    assert detect_format(prefixed)[0] == fmt
    want = parse_file(bare, fmt).tables["metrics"].drop("line", "source", "time")
    got = parse_file(prefixed, fmt).tables["metrics"].drop("line", "source", "time")
    assert want.height > 0 and got.sort(got.columns).equals(want.sort(want.columns))
