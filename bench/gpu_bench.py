#!/usr/bin/env python3
"""GPU peer benchmark: our BlockLSTM / BlockLSTMGrad (`blocklstm bench --device cuda`, no
peephole and peephole) against cuDNN's LSTM forward-training and backward (PyTorch's nn.LSTM,
which calls cuDNN), timed in the same run on the same GPU, interleaved shape by shape.

Both sides are timed the same way: host wall clock around one call, synchronised before and
after, median of --reps calls after a warm-up. cuDNN's backward is (forward + backward) minus
forward-training, as in docs/performance.md. float32 runs with TF32 off on both sides.

Ours runs its time loops each way --paths names (PATHS below; default all three): the fused
steps, the split steps (the recurrent products on cuBLAS, in place), and the split steps as a
CUDA graph.

Usage (on the GPU machine, from the repository root, with a built tree):
    python3 bench/gpu_bench.py --blocklstm build/tools/blocklstm --out DIR [--quick] [--paths fused,split]
        [--shapes 'T,B,H;...'] [--dtypes float32]
Writes DIR/gpu_latest.md and DIR/gpu_latest.csv and prints the table.
"""
import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import time

# T, B, I=H; 1024,16,768 is a long sequence peers publish.
SHAPES = [(100, 64, 512), (100, 64, 1024), (50, 128, 2048), (200, 16, 256), (100, 32, 256), (1024, 16, 768)]


# How our time loops run (bench --device cuda under these environment settings): the fused
# steps; the split steps (the recurrent products on cuBLASLt, in place); the split steps with the
# time loop as a CUDA graph. For A/B runs: the split steps' products on cublasGemmEx, the graphs
# with cuBLASLt's candidates timed as CUDA graphs (BLOCKLSTM_CUDA_LT_TIMING=graph), and the
# fused steps with Halide's register budget of 64 (the kernels' own is 128: docs/cuda.md).
PATHS = {
    "fused": {"BLOCKLSTM_CUDA_STEP": "fused", "BLOCKLSTM_CUDA_GRAPHS": "0"},
    "split": {"BLOCKLSTM_CUDA_STEP": "split", "BLOCKLSTM_CUDA_GRAPHS": "0"},
    "graphs": {"BLOCKLSTM_CUDA_STEP": "split", "BLOCKLSTM_CUDA_GRAPHS": "1"},
    "split_gemmex": {"BLOCKLSTM_CUDA_STEP": "split", "BLOCKLSTM_CUDA_GRAPHS": "0", "BLOCKLSTM_CUDA_LT": "0"},
    "graphs_lt_graph": {"BLOCKLSTM_CUDA_STEP": "split", "BLOCKLSTM_CUDA_GRAPHS": "1", "BLOCKLSTM_CUDA_LT_TIMING": "graph"},
    "fused_regs64": {"BLOCKLSTM_CUDA_STEP": "fused", "BLOCKLSTM_CUDA_GRAPHS": "0", "HL_CUDA_JIT_MAX_REGISTERS": "64"},
}


def ours(blocklstm, op, T, B, H, dtype, peephole, reps, path="fused"):
    cmd = [blocklstm, "bench", op, "--time", str(T), "--batch", str(B), "--input", str(H),
           "--cell", str(H), "--dtype", dtype, "--device", "cuda", "--reps", str(reps),
           "--warmup", "3"]
    if peephole:
        cmd.append("--use-peephole")
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **PATHS[path]))
    if r.returncode != 0:
        raise RuntimeError(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    first = re.search(r"first call ([0-9.]+) ms", r.stdout)
    med = re.search(r"median_ms=([0-9.]+)", r.stdout)
    graphs = re.search(r"time loops: .*", r.stdout)
    if graphs:
        print(f"  {op} {dtype} {T},{B},{H} {'peephole' if peephole else 'plain'} {path}: {graphs.group(0)}", flush=True)
    return float(med.group(1)), float(first.group(1)) if first else float("nan")


def cudnn(T, B, H, dtype, reps):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dt = torch.float16 if dtype == "float16" else torch.float32
    dev = torch.device("cuda")
    lstm = torch.nn.LSTM(H, H, batch_first=False).to(dev, dt)
    x = torch.randn(T, B, H, device=dev, dtype=dt, requires_grad=True)
    h0 = torch.zeros(1, B, H, device=dev, dtype=dt)
    c0 = torch.zeros(1, B, H, device=dev, dtype=dt)
    gy = torch.randn(T, B, H, device=dev, dtype=dt) * 0.1

    def timed(fn):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def fwd():
        lstm(x, (h0, c0))

    def fwd_bwd():
        y, _ = lstm(x, (h0, c0))
        y.backward(gy)

    f = timed(fwd)
    fb = timed(fwd_bwd)
    return f, max(fb - f, 0.0)


def step_products(shapes):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    print("one step's product h[B,H] . W_h[H,4H] through torch.mm (cuBLAS), CUDA events around 100 products, median of 20")
    for dtype in (torch.float32, torch.float16):
        for (T, B, H) in shapes:
            h = torch.randn(B, H, device="cuda", dtype=dtype)
            w = torch.randn(H, 4 * H, device="cuda", dtype=dtype)
            for _ in range(20):
                torch.mm(h, w)
            times = []
            for _ in range(20):  # 100 products back to back: the GPU's time, not the launches'
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(100):
                    torch.mm(h, w)
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1) * 10)  # ms per 100 -> us per product
            print(f"  {str(dtype)[6:]:8s} B={B:4d} H={H:5d}: {statistics.median(times):8.1f} us per step")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocklstm", default="build/tools/blocklstm")
    ap.add_argument("--out", default="build/bench")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="first shape only, 5 reps")
    ap.add_argument("--paths", default="fused,split,graphs",
                    help="how ours runs its time loops, comma-separated: " + ", ".join(PATHS))
    ap.add_argument("--shapes", help="T,B,H;T,B,H... instead of the six")
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--step-products", action="store_true",
                    help="only time one step's recurrent product h[B,H] . W_h[H,4H] on cuBLAS "
                         "(torch.mm), the floor of a step")
    a = ap.parse_args()
    shapes = [tuple(int(v) for v in t.split(",")) for t in a.shapes.split(";")] if a.shapes else SHAPES
    if a.step_products:
        return step_products(shapes[:1] if a.quick else shapes)
    shapes = shapes[:1] if a.quick else shapes
    reps = 5 if a.quick else a.reps
    paths = a.paths.split(",")
    import torch
    device = torch.cuda.get_device_name(0)
    rows = []
    for dtype in a.dtypes.split(","):
        for (T, B, H) in shapes:
            c_f, c_b = cudnn(T, B, H, dtype, reps)
            r = {"dtype": dtype, "T": T, "B": B, "IH": H, "cudnn_fwd_ms": c_f, "cudnn_bwd_ms": c_b}
            for path in paths:
                for peephole in (False, True):
                    tag = f"{path}_{'peep' if peephole else 'plain'}"
                    f, f_first = ours(a.blocklstm, "BlockLSTM", T, B, H, dtype, peephole, reps, path)
                    b, _ = ours(a.blocklstm, "BlockLSTMGrad", T, B, H, dtype, peephole, reps, path)
                    r[f"ours_{tag}_fwd_ms"], r[f"ours_{tag}_bwd_ms"] = f, b
                    r[f"ours_{tag}_first_call_ms"] = f_first
            rows.append(r)
            print(r, flush=True)

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "gpu_latest.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    lines = [f"GPU: {device}; `python3 bench/gpu_bench.py` ({reps} reps, median, wall clock "
             "with synchronisation; f32 with TF32 off). Ratio = cuDNN ms / our ms (> 1: we are faster)."]
    for path in paths:
        lines += ["", f"Ours with the {path} time loops ({' '.join(k + '=' + v for k, v in PATHS[path].items())}):", "",
                  "| dtype | T,B,I=H | cuDNN fwd | ours fwd | ratio | cuDNN bwd | ours bwd | ratio | ours fwd peephole | ratio | ours bwd peephole | ratio | first call |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            p = f"ours_{path}"
            lines.append(
                f"| {r['dtype']} | {r['T']},{r['B']},{r['IH']} | {r['cudnn_fwd_ms']:.3f} | "
                f"{r[p + '_plain_fwd_ms']:.3f} | {r['cudnn_fwd_ms'] / r[p + '_plain_fwd_ms']:.2f} | "
                f"{r['cudnn_bwd_ms']:.3f} | {r[p + '_plain_bwd_ms']:.3f} | "
                f"{r['cudnn_bwd_ms'] / r[p + '_plain_bwd_ms']:.2f} | {r[p + '_peep_fwd_ms']:.3f} | "
                f"{r['cudnn_fwd_ms'] / r[p + '_peep_fwd_ms']:.2f} | {r[p + '_peep_bwd_ms']:.3f} | "
                f"{r['cudnn_bwd_ms'] / r[p + '_peep_bwd_ms']:.2f} | {r[p + '_plain_first_call_ms']:.1f} ms |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "gpu_latest.md"), "w") as fh:
        fh.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
