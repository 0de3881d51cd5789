"""Data-parallel training of a peephole LSTM with torch's DistributedDataParallel.

Each process trains blocklstm.torch.LSTM (peephole=True) on its own shard of a noisy-sine
next-value task; DDP averages the gradients, so every process holds the same weights.

  python examples/ddp_train.py                       2 processes on this CPU (gloo, loopback)
  python examples/ddp_train.py --steps 50 --out DIR  also save each rank's weights and losses
  torchrun --nproc-per-node=8 examples/ddp_train.py --backend nccl
                                                     one process per GPU (cuda:LOCAL_RANK);
                                                     add --nnodes/--rdzv-endpoint for machines
"""
import argparse
import json
import os
import pathlib
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import blocklstm
import blocklstm.torch as bt


class Model(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.lstm = bt.LSTM(1, hidden, peephole=True, forget_bias=1.0, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


def batch(gen, size, steps, device):
    """Noisy sines of random phase and frequency; the target is the next value."""
    phase = torch.rand(size, 1, generator=gen) * 6.3
    freq = 0.1 + 0.2 * torch.rand(size, 1, generator=gen)
    t = torch.arange(steps + 1, dtype=torch.float32)
    s = torch.sin(phase + freq * t) + 0.05 * torch.randn(size, steps + 1, generator=gen)
    s = s.unsqueeze(-1).to(device)
    return s[:, :-1], s[:, 1:]


def train(rank, world, args):
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', rank))}" if args.backend == "nccl" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend, rank=rank, world_size=world)
    threads = max(1, (os.cpu_count() or 1) // world)  # each rank its share of the cores
    torch.set_num_threads(threads)
    blocklstm.set_num_threads(threads)  # the LSTM kernels' own thread pool
    torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model = nn.parallel.DistributedDataParallel(Model().to(device),
                                                device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    losses = []
    for step in range(args.steps):
        x, y = batch(gen, 16, 24, device)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:4d}  loss {loss.item():.4f}", flush=True)
    if args.out:
        out = pathlib.Path(args.out)
        torch.save(model.module.state_dict(), out / f"weights_rank{rank}.pt")
        (out / f"losses_rank{rank}.json").write_text(json.dumps(losses))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--world-size", type=int, default=2, help="processes to start (without torchrun)")
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    p.add_argument("--out", help="directory for each rank's final weights and losses")
    args = p.parse_args()
    if args.out:
        pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
    if "RANK" in os.environ:  # started by torchrun
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    mp.spawn(train, args=(args.world_size, args), nprocs=args.world_size)


if __name__ == "__main__":
    main()
