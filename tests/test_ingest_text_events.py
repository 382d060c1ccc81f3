"""text_events.extract_events on hand-written lines of every event family, and
base.attach_steps (step + 1 for overflows after an "N done" record, resume attempts)."""

from __future__ import annotations

import json

import polars as pl

from spikeforensics.ingest.base import attach_steps, lines_from_bytes, split_segments, strip_prefixes
from spikeforensics.ingest.text_events import extract_events

LOG = """\
[2023-04-28 06:51:29,903] [INFO] [loss_scaler.py:188:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but hysteresis is 2. Reducing hysteresis to 1
[2023-04-28 06:51:30,648] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768
[2021-03-01 00:00:00,000] [INFO] [stage2.py:1357:step] [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 134217728.0, reducing to 67108864.0
2020-07-01 12:00:00 | INFO | fairseq.trainer | NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: 64.0
Grad overflow on iteration 1234
Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.
[2024-01-01 10:00:00] saving checkpoint at iteration    7000 to /ckpt in torch format
  successfully saved checkpoint from iteration    7000 to /ckpt
 loading checkpoint from /ckpt at iteration 6000
  Continuing training from checkpoint, will skip to saved global_step
Resuming training from out
[rank0]:[titan] 2025-01-01 00:00:00,000 - root - INFO - Loading the checkpoint from checkpoint/step-10.
| loaded checkpoint checkpoints/checkpoint_last.pt (epoch 5 @ 21896 updates)
saving checkpoint to out
Traceback (most recent call last):
  File "train.py", line 1, in <module>
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB
RuntimeError: NCCL communicator was aborted
***WARNING*** Bad grad_norm detected (grad_norm=nan)
skipping update due to loss z-score of 6.123
[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:CB:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
[rank2]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800061 milliseconds before timing out.
[rank2]:[E1206 18:44:12.715588844 ProcessGroupNCCL.cpp:1664] [PG 0 Rank 2] Exception (either an error or timeout) detected by watchdog at work: 9, last enqueued NCCL work: 10, last completed NCCL work: 8.
"""


def prepared(text: str) -> pl.DataFrame:
    return strip_prefixes(split_segments(lines_from_bytes(text.encode())))


def test_every_family():
    ev = extract_events(prepared(LOG))
    kinds = dict(zip(ev.get_column("line").to_list(), ev.get_column("kind").to_list()))
    assert kinds == {
        1: "hysteresis",
        2: "overflow",
        3: "overflow",
        4: "overflow",
        5: "overflow",
        6: "overflow",
        7: "checkpoint_save",
        9: "resume",
        10: "resume",
        11: "resume",
        12: "resume",
        13: "resume",
        14: "checkpoint_save",
        15: "error",
        17: "oom",
        18: "error",
        19: "nan",
        20: "skipped_step",
        21: "xid",
        22: "nccl_timeout",
    }
    d = {line: json.loads(x) for line, x in zip(ev.get_column("line"), ev.get_column("detail"))}
    assert (d[1]["old_scale"], d[1]["new_scale"], d[1]["hysteresis"]) == (65536, 65536, 2)
    assert (d[3]["old_scale"], d[3]["new_scale"]) == (134217728.0, 67108864.0)
    assert d[4]["new_scale"] == 64.0
    assert d[6]["reason"] == "min_loss_scale" and d[6]["at_floor"] is True  # overflow at the scale floor
    assert d[15]["exception"] == "torch.OutOfMemoryError" and d[15]["traceback"] is True
    assert d[18]["exception"] == "RuntimeError"
    assert d[19]["value"] == "nan"
    assert d[21] == {
        "code": 79,
        "pci": "0000:cb:00",
        "message": "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    }
    assert d[22] == {"seq": 9, "op": "ALLREDUCE", "timeout_ms": 1800000, "ran_ms": 1800061, "last_completed": 8}
    steps = dict(zip(ev.get_column("line").to_list(), ev.get_column("step").to_list()))
    assert (steps[5], steps[7], steps[9], steps[13]) == (1234, 7000, 6000, 21896)
    assert ev.filter(pl.col("line") == 22).item(0, "rank") == 2
    assert ev.filter(pl.col("line") == 2).item(0, "time").isoformat() == "2023-04-28T06:51:30.648000"


def test_no_events_in_plain_records():
    ev = extract_events(prepared(" iteration 10/ 100 | lm loss: 2.0E+00 | loss scale: 1024.0 |\n" * 50))
    assert ev.height == 0


def test_traceback_without_exception_line_and_two_ranks():
    text = (
        "[rank0]:Traceback (most recent call last):\n[rank1]:Traceback (most recent call last):\n"
        '[rank1]:  File "a.py", line 3\n[rank1]:ValueError: one\n[rank0]:KeyError: two\n'
    )
    ev = extract_events(prepared(text))
    assert ev.get_column("kind").to_list() == ["error", "error"]
    d = [json.loads(x) for x in ev.get_column("detail")]
    assert [x["exception"] for x in d] == ["KeyError", "ValueError"]
    assert ev.get_column("rank").to_list() == [0, 1]


def test_attach_steps_done_mode():
    events = pl.DataFrame(
        {
            "line": [3, 4, 5, 7, 9, 12],
            "kind": ["overflow", "overflow", "checkpoint_save", "hysteresis", "resume", "oom"],
            "step": [None, None, None, None, None, None],
        },
        schema_overrides={"step": pl.Int64},
    )
    records = pl.DataFrame({"line": [2, 6, 10, 11], "step": [100, 110, 50, 60]})
    out = attach_steps(events, records, mode="done").sort("line")
    # two overflows after record 100: steps 101 and 102; a save takes 100 itself
    assert out.get_column("step").to_list() == [101, 102, 100, 111, 50, 60]
    # the resume takes the attempt of the first record after it (the step went back)
    assert out.get_column("attempt").to_list() == [0, 0, 0, 0, 1, 1]


def test_attach_steps_keeps_named_step_and_current_mode():
    events = pl.DataFrame(
        {"line": [3, 4], "kind": ["overflow", "resume"], "step": [None, 6000]}, schema_overrides={"step": pl.Int64}
    )
    records = pl.DataFrame({"line": [1], "step": [7]})
    out = attach_steps(events, records, mode="current").sort("line")
    assert out.get_column("step").to_list() == [7, 6000]
