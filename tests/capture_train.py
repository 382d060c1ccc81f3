"""Training script of the capture tests (run as a subprocess): the fixture generator's tiny GPT
(tools/fixtures) trained with `spikeforensics.capture.Recorder`, on the CPU.

    python tests/capture_train.py OUT --world 2 --steps 240 --poison-step 150
    python tests/capture_train.py OUT --steps 240 --hot-layer transformer.h.1.mlp.c_fc --hot-factor 40
    python tests/capture_train.py OUT --steps 100000 --flush-every 10 --print-flush   # killed by the test

Prints `POISON <sample id> <step> <rank>` for the injected sample and `FLUSHED <step>` after a
flush when asked. Seeded: the same arguments give the same run."""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from spikeforensics.capture import Recorder  # noqa: E402
from tools.fixtures.data import VOCAB, Corpus, DataOrder  # noqa: E402
from tools.fixtures.model import GPT, GPTConfig  # noqa: E402


def lr_at(step, peak, warmup, total):
    if step <= warmup:
        return peak * step / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return 3e-4 + (peak - 3e-4) * 0.5 * (1 + math.cos(math.pi * frac))


def train(rank: int, a) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    world = a.world
    cfg = GPTConfig(vocab_size=VOCAB, seq_len=a.seq_len, n_layer=a.n_layer, n_head=4, d_model=a.d_model)
    model = GPT(cfg)
    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(model)
    hot = [p for n, p in model.named_parameters() if a.hot_layer and n.startswith(a.hot_layer + ".")]
    hot_ids = {id(p) for p in hot}
    rest = [p for p in model.parameters() if id(p) not in hot_ids]
    groups = [dict(params=rest)] + ([dict(params=hot)] if hot else [])
    if a.opt == "sgd":
        opt = torch.optim.SGD(groups, lr=a.lr, momentum=0.9)
    else:
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    order = DataOrder(a.seed, a.batch * world, world, 1, a.batch, max(a.steps, 1000))
    poison = {}
    if a.poison_step:
        sid = order.ids(a.poison_step, world - 1, 0)[a.batch // 2]
        poison[sid] = a.poison_kind
        if rank == 0:
            print(f"POISON {sid} {a.poison_step} {world - 1}", flush=True)
    corpus = Corpus(a.seed, a.seq_len, poison)
    rec = Recorder(a.out, net, every=a.every, flush_every=a.flush_every)
    for step in range(1, a.steps + 1):
        lr = lr_at(step, a.lr, 20, a.steps)
        for i, g in enumerate(opt.param_groups):
            g["lr"] = lr * (a.hot_factor if i == 1 and step >= a.hot_from else 1.0)
        ids = order.ids(step, rank, 0)
        x, y, m = corpus.batch(ids)
        per_sample, _, _ = net(x, y, m)
        if poison and a.poison_weight != 1.0:
            # the corrupted record also carries a bad loss weight (a mis-parsed `weight` field)
            w = torch.tensor([a.poison_weight if s in poison else 1.0 for s in ids])
            per_sample = per_sample * w
        loss = per_sample.mean()
        loss.backward()
        rec.after_backward(loss, step, sample_ids=ids, sample_losses=per_sample, tokens=m.sum(1))
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        rec.after_step(opt, grad_norm=gn, max_norm=a.clip)
        opt.zero_grad(set_to_none=True)
        if a.print_flush and step % a.flush_every == 0:
            print(f"FLUSHED {step}", flush=True)
    rec.close()


def _worker(rank: int, a, tmp: str) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=rank, world_size=a.world)
    try:
        train(rank, a)
        dist.barrier()  # both ranks done (the recorder's files closed) before either leaves
    except BaseException:
        dist.destroy_process_group()
        raise
    # Leave without tearing gloo down: its C++ teardown at the end of a run aborts now and then
    # ("terminate called without an active exception", SIGABRT in one rank, about 1 run in 30 on
    # 2 cores) after all the work is written, which failed the test for nothing. Nothing is left
    # to flush but the standard streams.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--steps", type=int, default=240)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--clip", type=float, default=5.0)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--flush-every", type=int, default=50)
    p.add_argument("--poison-step", type=int, default=0)
    p.add_argument("--poison-kind", default="nul_run")
    p.add_argument("--opt", default="adamw", choices=["adamw", "sgd"])
    p.add_argument("--poison-weight", type=float, default=1.0)
    p.add_argument("--hot-layer", default="")
    p.add_argument("--hot-factor", type=float, default=40.0)
    p.add_argument("--hot-from", type=int, default=1)
    p.add_argument("--print-flush", action="store_true")
    a = p.parse_args(argv)
    if a.world > 1:
        import torch.multiprocessing as mp

        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(_worker, args=(a, tmp), nprocs=a.world, join=True)
    else:
        train(0, a)


if __name__ == "__main__":
    main()
