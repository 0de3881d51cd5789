"""blocklstm.torch.LSTMCell against nn.LSTMCell in the same process, one step per call (as code
that loops over time itself calls it), same weights, float32 on the CPU.

PYTHONPATH=build/python .venv/bin/python bench/torch_cell_bench.py [--shapes '1,8;1,256;8,128']
  [--threads 2] [--runs 5]

For each B, H (input size H): the least time a call over --runs runs of 60-300 calls, under
torch.no_grad() ("no_grad") and as a training step (a call, then the backward of h.sum() +
c.sum()); ratio = nn.LSTMCell's time / ours, above 1: ours faster.
"""
import argparse
import time

import torch

import blocklstm.torch as bt


def least_us(f, calls, runs):
    for _ in range(20):  # warm-up: the kept weights, the allocator, the threads
        f()
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="1,8;1,256;8,128;32,256;64,512;1,512", help="B,H;B,H;...")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print("| B, H | nn no_grad us | ours no_grad us | ratio | nn step us | ours step us | ratio |")
    print("|---|---|---|---|---|---|---|")
    for shape in a.shapes.split(";"):
        B, H = (int(v) for v in shape.split(","))
        torch.manual_seed(0)
        ref = torch.nn.LSTMCell(H, H)
        ours = bt.LSTMCell(H, H)
        ours.load_state_dict(ref.state_dict())
        x = torch.randn(B, H)
        hx = (torch.randn(B, H), torch.randn(B, H))
        calls = 300 if H <= 256 else 60

        def step(m):
            h, c = m(x, hx)
            (h.sum() + c.sum()).backward()

        with torch.no_grad():
            nn_ng, ours_ng = least_us(lambda: ref(x, hx), calls, a.runs), least_us(lambda: ours(x, hx), calls, a.runs)
        nn_st, ours_st = least_us(lambda: step(ref), calls, a.runs), least_us(lambda: step(ours), calls, a.runs)
        print(f"| {B}, {H} | {nn_ng:.0f} | {ours_ng:.0f} | {nn_ng / ours_ng:.2f} | {nn_st:.0f} | {ours_st:.0f} | "
              f"{nn_st / ours_st:.2f} |", flush=True)


if __name__ == "__main__":
    main()
