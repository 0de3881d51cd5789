"""blocklstm.torch.LSTM against torch.nn.LSTM on the CPU (or a CUDA GPU, where nn.LSTM calls cuDNN),
in one process, interleaved.

For each shape (T, B, I = H) and configuration it times the forward (no autograd) and the
forward + backward (loss = sum of the output) of both modules, holding the same weights, in one
dtype (--dtype: float32, the default, bfloat16 or float16),
and prints a Markdown table of the medians and the ratio nn.LSTM / ours (> 1: ours is faster),
with the cost of ours' weight conversion (nn.LSTM's weights -> TF's w, b, one layer and direction)
per call. Configurations: `1` (one layer), `2bi` (two layers, bidirectional), `packed` (two layers,
bidirectional, a PackedSequence of lengths drawn uniformly from [T/4, T]), `proj` (one layer,
proj_size H/4; not in the default list).

  PYTHONPATH=build/python .venv/bin/python bench/torch_lstm_bench.py [--threads 2] [--rounds 5]
      [--configs 1,2bi,packed] [--dtype float32|bfloat16|float16] [--device cpu|cuda]
      [--shapes 'T,B,H;...']
On a GPU both sides are synchronised before and after each call; TF32 is off.
"""
import argparse
import datetime
import platform
import statistics
import time

import torch

import blocklstm
import blocklstm.torch as bt

SHAPES = [(100, 64, 512), (200, 16, 256), (100, 32, 256), (50, 8, 128)]  # the CPU peer shapes


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def timed(fn, sync, min_s=0.3, max_reps=20):
    fn()  # warm-up: caches, thread pool, CUDA graphs
    sync()
    times, start = [], time.perf_counter()
    while len(times) < max_reps and (time.perf_counter() - start < min_s or len(times) < 2):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--configs", default="1,2bi,packed")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--shapes", help="T,B,H;T,B,H... instead of " + ";".join(",".join(map(str, s)) for s in SHAPES))
    a = p.parse_args()
    dtype, device = getattr(torch, a.dtype), torch.device(a.device)
    shapes = [tuple(map(int, s.split(","))) for s in a.shapes.split(";")] if a.shapes else SHAPES
    torch.set_num_threads(a.threads)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        sync = torch.cuda.synchronize
        where = f"{torch.cuda.get_device_name(0)}, cuDNN {torch.backends.cudnn.version()}"
    else:
        sync = lambda: None  # noqa: E731
        where = f"{cpu_model()}, {a.threads} threads, blocklstm CPU target {blocklstm.cpu_target_in_use()}"
    print(f"{datetime.date.today()}, {where}, torch {torch.__version__}, {a.dtype}, median of {a.rounds} rounds")
    print("\n| config | T, B, I=H | nn.LSTM fwd ms | ours fwd ms | ratio | nn.LSTM fwd+bwd ms | ours fwd+bwd ms | ratio "
          "| conversion ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for config in a.configs.split(","):
        kwargs = {"1": {}, "2bi": {"num_layers": 2, "bidirectional": True},
                  "packed": {"num_layers": 2, "bidirectional": True}, "proj": {}}[config]
        for T, B, H in shapes:
            if config == "proj":
                kwargs = {"proj_size": H // 4}
            torch.manual_seed(0)
            ref = torch.nn.LSTM(H, H, **kwargs).to(device, dtype)
            ours = bt.LSTM(H, H, **kwargs).to(device, dtype)
            ours.load_state_dict(ref.state_dict())
            x = torch.randn(T, B, H).to(device, dtype)
            lengths = torch.randint(T // 4, T + 1, (B,)) if config == "packed" else None

            def batch(requires_grad):
                xx = x.clone().requires_grad_(requires_grad)
                if lengths is None:
                    return xx
                return torch.nn.utils.rnn.pack_padded_sequence(xx, lengths, enforce_sorted=False)

            def output(y):
                return y.data if lengths is not None else y

            def fwd(m):
                with torch.no_grad():
                    m(batch(False))

            def fwd_bwd(m):
                output(m(batch(True))[0]).float().sum().backward()

            def conversion():
                with torch.no_grad():
                    ours.tf_weights()

            r = {k: [] for k in ("rf", "of", "rb", "ob", "conv")}
            for _ in range(a.rounds):  # interleaved: a drift of the machine hits both alike
                r["rf"].append(timed(lambda: fwd(ref), sync))
                r["of"].append(timed(lambda: fwd(ours), sync))
                r["rb"].append(timed(lambda: fwd_bwd(ref), sync))
                r["ob"].append(timed(lambda: fwd_bwd(ours), sync))
                r["conv"].append(timed(conversion, sync))
            m = {k: 1e3 * statistics.median(v) for k, v in r.items()}
            print(f"| {config} | {T}, {B}, {H} | {m['rf']:.2f} | {m['of']:.2f} | {m['rf'] / m['of']:.2f} | "
                  f"{m['rb']:.2f} | {m['ob']:.2f} | {m['rb'] / m['ob']:.2f} | {m['conv']:.3f} |", flush=True)
            if a.device == "cuda":  # how our time loops ran in the timed calls after the first round's
                before = blocklstm.cuda_graph_stats()
                timed(lambda: fwd(ours), sync)
                timed(lambda: fwd_bwd(ours), sync)
                after = blocklstm.cuda_graph_stats()
                print("  ours' CUDA time loops in one more round: " +
                      ", ".join(f"{k} {after[k] - before[k]}" for k in after), flush=True)


if __name__ == "__main__":
    main()
