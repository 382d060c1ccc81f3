"""Overhead of spikeforensics.capture on a tiny GPT on the CPU (tools/fixtures/model.py).

    python benchmarks/capture_overhead.py [--steps 150] [--rounds 5]

Three runs of the same model and data: `off` (no recorder), `every10` (per-layer statistics every
10 steps), `every1` (every step); flush every 50 steps, per-sample losses and token counts given.
The machine is shared, so the three runs advance in turn, one step each, in an order that rotates
every step (load from other processes hits all three alike), over several rounds. Reported per
round, against `off`: the mean step time (flushes and close included in the recorder's share),
the median step time, and the recorder's own time (its calls timed directly), each also in CPU
time of the training thread (`time.thread_time`), which other processes on a loaded machine
disturb much less than the wall clock. One thread."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from spikeforensics.capture import Recorder  # noqa: E402
from tools.fixtures.data import VOCAB, Corpus, DataOrder  # noqa: E402
from tools.fixtures.model import GPT, GPTConfig  # noqa: E402


class Job:
    """One training run (its own model copy, optimizer and recorder), advanced step by step."""

    def __init__(self, config: str, steps: int, tmp: str, seed: int = 0):
        torch.manual_seed(seed)
        self.model = GPT(GPTConfig(vocab_size=VOCAB, seq_len=48, n_layer=4, n_head=4, d_model=48))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        order = DataOrder(seed, 12, 1, 1, 12, steps + 20)
        corpus = Corpus(seed, 48)
        self.batches = [corpus.batch(order.ids(s, 0, 0)) + (order.ids(s, 0, 0),) for s in range(1, steps + 1)]
        every = {"off": None, "every10": 10, "every1": 1}[config]
        self.rec = None if every is None else Recorder(f"{tmp}/{config}", self.model, every=every, flush_every=50)
        self.step_times: list[float] = []
        self.step_cpu: list[float] = []
        self.rec_time = 0.0  # time spent inside the recorder's calls (flushes included)
        self.rec_cpu = 0.0  # the same in CPU time of this thread

    def step(self, step: int) -> None:
        x, y, m, ids = self.batches[step - 1]
        t0, c0 = time.perf_counter(), time.thread_time()
        per, _, _ = self.model(x, y, m)
        loss = per.mean()
        loss.backward()
        if self.rec:
            r0, q0 = time.perf_counter(), time.thread_time()
            self.rec.after_backward(loss, step, sample_ids=ids, sample_losses=per, tokens=m.sum(1))
            self.rec_time += time.perf_counter() - r0
            self.rec_cpu += time.thread_time() - q0
        gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        if self.rec:
            r0, q0 = time.perf_counter(), time.thread_time()
            self.rec.after_step(self.opt, grad_norm=gn, max_norm=1.0)
            self.rec_time += time.perf_counter() - r0
            self.rec_cpu += time.thread_time() - q0
        self.opt.zero_grad(set_to_none=True)
        self.step_times.append(time.perf_counter() - t0)
        self.step_cpu.append(time.thread_time() - c0)

    def close(self) -> None:
        if self.rec:
            r0, q0 = time.perf_counter(), time.thread_time()
            self.rec.close()
            self.rec_time += time.perf_counter() - r0
            self.rec_cpu += time.thread_time() - q0


CONFIGS = ["off", "every10", "every1"]


def one_round(steps: int, rnd: int) -> dict:
    """The three runs advanced in turn, one step each, the order rotating every step: load from
    other processes hits all three alike. Returns per config: mean step time (flushes included)
    and the recorder's own time per step."""
    with tempfile.TemporaryDirectory() as tmp:
        jobs = {c: Job(c, steps, tmp) for c in CONFIGS}
        for step in range(1, steps + 1):
            k = (step + rnd) % 3
            for c in CONFIGS[k:] + CONFIGS[:k]:
                jobs[c].step(step)
        for j in jobs.values():
            j.close()
        warm = 10
        out = {}
        for c, j in jobs.items():
            body = j.step_times[warm:]
            out[c] = dict(
                step=statistics.mean(body),
                median=statistics.median(body),
                rec=j.rec_time / len(j.step_times),
                cpu=statistics.mean(j.step_cpu[warm:]),
                rec_cpu=j.rec_cpu / len(j.step_cpu),
            )
        return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(1)
    # pyarrow imports pandas lazily on its first array (~0.5-1.5 s, once per process): a start-up
    # cost of the first flush, not a per-step one; paid here so that no run's figures carry it
    import pyarrow as pa

    pa.array([0.0])
    res = {"every10": [], "every1": []}
    whats = (
        "step time (mean, flushes included)",
        "step time (median)",
        "recorder's own time",
        "recorder's own CPU time (thread)",
    )
    for r in range(a.rounds):
        t = one_round(a.steps, r)
        off = t["off"]
        line = [f"round {r + 1}: off {1e3 * off['step']:.2f} ms/step ({1e3 * off['cpu']:.2f} ms CPU)"]
        for c in res:
            total = 100.0 * (t[c]["step"] / off["step"] - 1.0)
            med = 100.0 * (t[c]["median"] / off["median"] - 1.0)
            own = 100.0 * t[c]["rec"] / off["step"]
            own_cpu = 100.0 * t[c]["rec_cpu"] / off["cpu"]
            res[c].append((total, med, own, own_cpu))
            line.append(
                f"{c}: mean {total:+.1f}%, median {med:+.1f}%, recorder's own time {own:.1f}% (CPU {own_cpu:.1f}%)"
            )
        print("; ".join(line), flush=True)
    for c, v in res.items():
        for i, what in enumerate(whats):
            xs = [x[i] for x in v]
            print(f"{c} {what}: median {statistics.median(xs):+.1f}%, range {min(xs):+.1f}% .. {max(xs):+.1f}%")


if __name__ == "__main__":
    main()
