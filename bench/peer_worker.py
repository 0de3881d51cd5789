"""Persistent timing worker for the Python peers of bench/bench.py: TensorFlow or PyTorch.

    python peer_worker.py tf|torch

The driver starts one worker per framework and keeps it for the whole run (importing TensorFlow
takes seconds; the inputs of each configuration are built once and kept: well under 1 GB for the
four shapes of the benchmark). Protocol: one JSON
object per line on stdin, one per line on stdout.

    -> {"T":..,"B":..,"I":..,"H":..,"dtype":"float32"|"float16"|"bfloat16","peephole":bool,
        "pass":"fwd"|"bwd"|"fwdbwd","reps":N,"warmup":N|"auto"}
    <- {"ms":[...]} or {"error":"..."}

The first line the worker writes is {"ready":true,"versions":{...},"threads":...}.

Threads: 2 by default (--threads): TensorFlow intra-op 2 / inter-op 1, PyTorch
torch.set_num_threads(2) / set_num_interop_threads(1). The driver also sets OMP_NUM_THREADS.

Timing: time.perf_counter() around each call, after `warmup` untimed calls (see timed()).
- TensorFlow: eager tf.raw_ops.BlockLSTM / tf.raw_ops.BlockLSTMGrad calls (not tf.function: one
  raw op per call either way, and eager CPU ops run synchronously, so the call returns when the
  op is done). "fwd" times BlockLSTM; "bwd" times BlockLSTMGrad on the activations of one
  BlockLSTM call made at setup, with random cs_grad / h_grad; attrs are TF's defaults
  (forget_bias 1, cell_clip 3) and use_peephole as asked.
- PyTorch: torch.nn.LSTM(I, H) (one layer, with bias; no peephole exists) in training mode. "fwd"
  times the forward with autograd recording (x, h0, c0 require grad, as the grad ops return their
  gradients); "fwdbwd" times that forward plus backward from a random gradient of the output
  sequence. The parameters' .grad are reset to None between reps, outside the timing. The driver
  reports backward = median(fwdbwd) - median(fwd), as docs/performance.md does for cuDNN.
"""

import json
import sys
import time

import numpy as np


def make_inputs(rng, dtype, T, B, I, H):
    ws = 1.0 / np.sqrt(I + H)
    u = lambda scale, *shape: rng.uniform(-scale, scale, shape).astype(dtype)
    return dict(x=u(1.0, T, B, I), cs_prev=u(1.0, B, H), h_prev=u(0.9, B, H),
                w=u(ws, I + H, 4 * H), wci=u(0.1, H), wcf=u(0.1, H), wco=u(0.1, H),
                b=u(0.1, 4 * H), cs_grad=u(0.1, T, B, H), h_grad=u(0.1, T, B, H))


def timed(fn, clear, r):
    """r["reps"] timed calls of fn after r["warmup"] untimed ones; clear() after each, untimed.

    warmup "auto": the first call is timed; if it took more than a second, its one-time costs are
    noise and it counts as the first sample, otherwise it was the warm-up.
    """
    reps, warmup = r["reps"], r.get("warmup", 0)
    ms = []
    if warmup == "auto":
        t0 = time.perf_counter()
        fn()
        first = (time.perf_counter() - t0) * 1e3
        clear()
        if first > 1000.0:
            ms.append(first)
        warmup = 0
    for _ in range(warmup):
        fn()
        clear()
    while len(ms) < reps:
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1e3)
        clear()
    return ms


class TFPeer:
    def __init__(self, threads):
        import os
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        self.tf = tf
        self.cache = {}
        self.versions = {"tensorflow": tf.__version__, "numpy": np.__version__}

    def setup(self, r):
        key = (r["T"], r["B"], r["I"], r["H"], r["dtype"], r["peephole"])
        if key in self.cache:
            return self.cache[key]
        tf = self.tf
        a = make_inputs(np.random.default_rng(1), np.dtype(r["dtype"]), r["T"], r["B"], r["I"], r["H"])
        t = {k: tf.constant(v) for k, v in a.items()}
        seq = tf.constant(r["T"], dtype=tf.int64)
        common = dict(seq_len_max=seq, x=t["x"], cs_prev=t["cs_prev"], h_prev=t["h_prev"], w=t["w"],
                      wci=t["wci"], wcf=t["wcf"], wco=t["wco"], b=t["b"])
        pp = bool(r["peephole"])

        def fwd():
            return tf.raw_ops.BlockLSTM(**common, forget_bias=1.0, cell_clip=3.0, use_peephole=pp)

        i, cs, f, o, ci, co, h = fwd()

        def bwd():
            return tf.raw_ops.BlockLSTMGrad(**common, i=i, cs=cs, f=f, o=o, ci=ci, co=co, h=h,
                                            cs_grad=t["cs_grad"], h_grad=t["h_grad"],
                                            use_peephole=pp)

        self.cache[key] = {"fwd": fwd, "bwd": bwd}
        return self.cache[key]

    def run(self, r):
        fn = self.setup(r)[r["pass"]]
        return timed(fn, lambda: None, r)


class TorchPeer:
    def __init__(self, threads):
        import torch
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
        self.torch = torch
        self.cache = {}
        self.versions = {"torch": torch.__version__, "numpy": np.__version__}

    def setup(self, r):
        key = (r["T"], r["B"], r["I"], r["H"], r["dtype"])
        if r["peephole"]:
            raise ValueError("torch.nn.LSTM has no peephole")
        if key in self.cache:
            return self.cache[key]
        torch = self.torch
        dt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[r["dtype"]]
        T, B, I, H = r["T"], r["B"], r["I"], r["H"]
        torch.manual_seed(1)
        m = torch.nn.LSTM(I, H).to(dt).train()
        x = torch.empty(T, B, I, dtype=dt).uniform_(-1, 1).requires_grad_()
        h0 = torch.empty(1, B, H, dtype=dt).uniform_(-0.9, 0.9).requires_grad_()
        c0 = torch.empty(1, B, H, dtype=dt).uniform_(-1, 1).requires_grad_()
        gy = torch.empty(T, B, H, dtype=dt).uniform_(-0.1, 0.1)
        leaves = [x, h0, c0] + list(m.parameters())

        def clear():
            for p in leaves:
                p.grad = None

        def fwd():
            y, _ = m(x, (h0, c0))
            return y

        def fwdbwd():
            y, _ = m(x, (h0, c0))
            y.backward(gy)

        self.cache[key] = {"fwd": fwd, "fwdbwd": fwdbwd, "clear": clear}
        return self.cache[key]

    def run(self, r):
        c = self.setup(r)
        return timed(c[r["pass"]], c["clear"], r)


def main():
    which = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    out = sys.stdout
    sys.stdout = sys.stderr  # library chatter must not corrupt the protocol
    peer = {"tf": TFPeer, "torch": TorchPeer}[which](threads)
    out.write(json.dumps({"ready": True, "versions": peer.versions, "threads": threads}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = {"ms": peer.run(json.loads(line))}
        except Exception as e:  # reported as n/a by the driver
            reply = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
