#!/usr/bin/env python3
"""CPU peer benchmark driver: blocklstm against oneDNN, TensorFlow and PyTorch, side by side.

Run it through bench/run.sh (which installs and builds what it needs); run.sh passes the
paths below. `bench.py --help` lists the options.

Contenders, all with the same thread count (--threads, 2 by default):
  ours     `blocklstm bench <Op> ... --threads 2 --warmup 1 --reps N --print-reps`, a fresh process
           per measurement (its start-up is outside the timing): BlockLSTM and BlockLSTMGrad
           ("ours") and BlockLSTMV2 / BlockLSTMGradV2 ("ours V2"), float32, float16 and bfloat16, peephole
           on and off. The grad ops run on the activations of the matching forward op.
  oneDNN   bench/onednn_lstm.cpp (oneDNN 2.6 from Debian's libdnnl-dev, OMP_NUM_THREADS=2),
           a fresh process per measurement: LSTM forward_training and backward, peephole on and
           off; weights reordered to the primitives' layouts and weight gradients zeroed outside
           the timing ("oneDNN"), and the same calls with the weights' reorders before each timed
           with them ("oneDNN + reorders": a training step's cost, as ours pack their weights in
           each call). float16: oneDNN 2.6 has no f16 (nor, without AVX512-BF16, bf16) LSTM on
           CPU; the driver asks the harness once and reports the reason as n/a.
  TF       tf.raw_ops.BlockLSTM / BlockLSTMGrad (tensorflow-cpu), eager calls, intra-op 2 /
           inter-op 1 threads (peer_worker.py), float32 and float16, peephole on and off.
  PyTorch  torch.nn.LSTM (CPU), torch.set_num_threads(2), no peephole (nn.LSTM has none), float32
           and float16: forward = training forward; backward = median(forward + backward) -
           median(forward), as docs/performance.md does for cuDNN.
TF and PyTorch run in persistent worker processes (peer_worker.py) that keep their imports and
inputs; they sit idle on a pipe while the others run.

Method (interleaving): `--rounds` rounds (5 by default). In each round, for each shape, every
measurement job (one contender x dtype x peephole x pass) runs once, in an order rotated by one
job every round, so that a slow spell of this shared machine hits all contenders alike. A job
takes N timed calls, N = clamp(ceil(0.6 s / its median so far), 1, 50) (1 in the first round),
after untimed warm-up calls filling about 0.2 s (at least one; the persistent workers skip the
warm-up once a call takes more than a second, and count a first call of over a second as a
sample). More calls at the small shapes: with 10 and one warm-up, ours and ours V2 (the same
kernels) came out 11 % apart at 50,8,128. The reported time of a job is the median of all its
samples over all rounds.
Speedup = peer ms / ours ms (> 1: ours is faster). GFLOP/s use docs/performance.md's GEMM model:
forward 2*T*B*4H*(I+H), backward 2*T*B*4H*H + 2*T*B*4H*I + 2*T*B*4H*(I+H).

Outputs (in --out): <name>.md (the table, with machine, date, threads, versions, method and the
command), <name>.csv (every timed sample), <name>.png (GFLOP/s of each contender). With
--readme, the table also replaces what lies between the lines `<!-- peers:begin -->` and
`<!-- peers:end -->` in that README, when both are there.
"""

import argparse
import csv
import datetime
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

# T, B, I = H: the four usual shapes, then small batches (speech and streaming models run B = 1-8,
# where a step's product reads all of W_h for one or a few rows).
SHAPES = [(100, 64, 512), (200, 16, 256), (100, 32, 256), (50, 8, 128), (100, 1, 512), (100, 8, 256), (500, 1, 128)]
DTYPES = ["float32", "float16", "bfloat16"]
SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
TARGET_S = 0.6  # timed seconds per job and round
MAX_REPS = 50
# Untimed warm-up seconds per job and round (at least one call; none for the persistent workers
# once a call takes over a second): a fresh process's first calls are slower, and after another
# contender has run, the caches and the thread pool are cold.
WARMUP_S = 0.2
MAX_WARMUP = 50


def fresh_warmup(warm):
    """Warm-up calls for a contender that starts a fresh process: at least one."""
    return warm if isinstance(warm, int) and warm > 0 else 1

# Columns of the table: (contender key, heading).
# onednn_r: oneDNN's primitive with the reorders of the weights into its layouts that a training
# step pays at every step (the weights change), as blocklstm's ops pack theirs inside each call;
# measured in the same calls as onednn (bench/onednn_lstm.cpp), left out with it.
COLUMNS = [("ours", "ours"), ("ours_v2", "ours V2"), ("onednn", "oneDNN"), ("onednn_r", "oneDNN + reorders"),
           ("tf", "TF"), ("torch", "PyTorch")]
PEERS = ["onednn", "onednn_r", "tf", "torch"]


def log(msg):
    print(msg, flush=True)


def flops(T, B, I, H, pass_):
    g = 2.0 * T * B * 4 * H
    return g * (I + H) if pass_ == "fwd" else g * H + g * I + g * (I + H)


def parse_list(line, name):
    m = re.search(r"(?:^|\s)" + name + r"=([0-9.,eE+-]+)\s*$", line)
    return [float(v) for v in m.group(1).split(",")] if m else None


class Worker:
    """A persistent peer_worker.py process (TF or PyTorch)."""

    def __init__(self, python, script, which, threads, env):
        self.which = which
        self.proc = subprocess.Popen([python, script, which, str(threads)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env=env)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{which} worker did not start")
        self.hello = json.loads(line)

    def request(self, **req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.which} worker died")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["ms"]

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()


class Bench:
    def __init__(self, args):
        self.args = args
        self.env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
                        TF_CPP_MIN_LOG_LEVEL="2")
        self.samples = {}  # (contender, T, B, I, H, dtype, peephole, pass) -> [ms]
        self.rows = []     # CSV rows
        self.na = {}       # (contender, dtype, peephole) or key -> reason
        self.info = {"threads": args.threads}
        self.workers = {}

    # ---- contenders ------------------------------------------------------------------------------

    def run_ours(self, shape, dtype, peephole, op, reps, warm):
        T, B, I, H = shape
        cmd = [self.args.cli, "bench", op, "--time", str(T), "--batch", str(B), "--input", str(I),
               "--cell", str(H), "--dtype", dtype, "--threads", str(self.args.threads),
               "--warmup", str(fresh_warmup(warm)), "--reps", str(reps), "--print-reps"]
        if peephole:
            cmd.append("--use-peephole")
        p = subprocess.run(cmd, capture_output=True, text=True, env=self.env)
        lines = p.stdout.strip().splitlines()
        if p.returncode != 0 or not lines or not re.fullmatch(
                r"median_ms=[0-9.]+ gflops=[0-9.]+", lines[-1]):
            raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
        m = re.search(r"device cpu \((?:CPU target )?([^),]*)", p.stdout)
        if m:
            self.info["ours_target"] = m.group(1)
        for line in lines:
            ms = parse_list(line, "reps_ms")
            if ms:
                return ms
        raise RuntimeError(f"{' '.join(cmd)}: no reps_ms line")

    def run_onednn(self, shape, dtype, peephole, reps, warm=1):
        T, B, I, H = shape
        cmd = [self.args.onednn, "--time", str(T), "--batch", str(B), "--input", str(I),
               "--cell", str(H), "--dtype", SHORT[dtype],
               "--warmup", str(fresh_warmup(warm)), "--reps", str(reps)]
        if peephole:
            cmd.append("--peephole")
        p = subprocess.run(cmd, capture_output=True, text=True, env=self.env)
        out = p.stdout
        if p.returncode == 3:
            raise NotImplementedError(out.strip().splitlines()[-1].removeprefix("unsupported: "))
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {(out + p.stderr).strip()[-300:]}")
        m = re.search(r"onednn_version=(\S+) threads=(\d+)", out)
        if m:
            self.info["onednn"] = m.group(1)
            self.info["onednn_threads"] = int(m.group(2))
        got = {}
        for line in out.splitlines():
            for name in ("fwd_ms", "bwd_ms", "fwd_reorder_ms", "bwd_reorder_ms"):
                got[name] = parse_list(line, name) or got.get(name)
        fwd, bwd = got["fwd_ms"], got["bwd_ms"]
        # Each rep's primitive with the weights' reorders before it (onednn_r); None from a
        # harness built before it timed them (a packed one, scripts/gpu_check.sh).
        def with_reorders(ms, reorders):
            return [t + r for t, r in zip(ms, reorders)] if ms and reorders else None
        return fwd, bwd, with_reorders(fwd, got["fwd_reorder_ms"]), with_reorders(bwd, got["bwd_reorder_ms"])

    def worker(self, which):
        if which not in self.workers:
            log(f"  starting the {which} worker ...")
            w = Worker(self.args.python, str(Path(__file__).with_name("peer_worker.py")), which,
                       self.args.threads, self.env)
            self.info.update(w.hello["versions"])
            self.workers[which] = w
        return self.workers[which]

    # ---- jobs ------------------------------------------------------------------------------------

    def jobs(self, shape):
        """Measurement jobs of one shape: (label, keys it fills, function(reps, warmup) -> {key: ms})."""
        jobs = []
        skip = set(self.args.skip)
        for dtype in self.args.dtypes:
            for pp in (False, True):
                base = (*shape, dtype, pp)
                for op, who, pass_ in (("BlockLSTM", "ours", "fwd"), ("BlockLSTMGrad", "ours", "bwd"),
                                       ("BlockLSTMV2", "ours_v2", "fwd"),
                                       ("BlockLSTMGradV2", "ours_v2", "bwd")):
                    if who in skip:
                        continue
                    key = (who, *base, pass_)
                    jobs.append((f"ours {op}", [key],
                                 lambda reps, warm, op=op, dtype=dtype, pp=pp, key=key:
                                 {key: self.run_ours(shape, dtype, pp, op, reps, warm)}))
                if "onednn" not in skip:
                    kf, kb = ("onednn", *base, "fwd"), ("onednn", *base, "bwd")
                    krf, krb = ("onednn_r", *base, "fwd"), ("onednn_r", *base, "bwd")

                    def one(reps, warm, dtype=dtype, pp=pp, kf=kf, kb=kb, krf=krf, krb=krb):
                        f, b, fr, br = self.run_onednn(shape, dtype, pp, reps, warm)
                        return {k: ms for k, ms in ((kf, f), (kb, b), (krf, fr), (krb, br)) if ms}
                    jobs.append(("oneDNN fwd+bwd", [kf, kb, krf, krb], one))
                if "tf" not in skip:
                    for pass_ in ("fwd", "bwd"):
                        key = ("tf", *base, pass_)
                        jobs.append((f"TF {'BlockLSTM' if pass_ == 'fwd' else 'BlockLSTMGrad'}", [key],
                                     lambda reps, warm, dtype=dtype, pp=pp, pass_=pass_, key=key:
                                     {key: self.worker("tf").request(
                                         T=shape[0], B=shape[1], I=shape[2], H=shape[3], dtype=dtype,
                                         peephole=pp, reps=reps, warmup=warm, **{"pass": pass_})}))
                if "torch" not in skip and not pp:
                    for pass_ in ("fwd", "fwdbwd"):
                        key = ("torch", *base, pass_)
                        jobs.append((f"PyTorch {pass_}", [key],
                                     lambda reps, warm, dtype=dtype, pass_=pass_, key=key:
                                     {key: self.worker("torch").request(
                                         T=shape[0], B=shape[1], I=shape[2], H=shape[3], dtype=dtype,
                                         peephole=False, reps=reps, warmup=warm, **{"pass": pass_})}))
        return jobs

    def run(self):
        a = self.args
        shapes = [(T, B, I, I) for T, B, I in a.shapes]
        for dtype in ("float16", "bfloat16"):
            if "onednn" not in a.skip and dtype in a.dtypes:
                try:  # ask once whether oneDNN has a 16-bit LSTM of this type here
                    self.run_onednn(shapes[-1], dtype, False, 1)
                except NotImplementedError as e:
                    self.na[("onednn", dtype)] = str(e)
        start = time.time()
        for rnd in range(a.rounds):
            el = time.time() - start
            eta = f", about {el / rnd * (a.rounds - rnd) / 60:.1f} min left" if rnd else ""
            log(f"round {rnd + 1}/{a.rounds}  ({el / 60:.1f} min elapsed{eta})")
            for shape in shapes:
                jobs = [j for j in self.jobs(shape) if not self.skipped(j[1][0])]
                k = rnd % len(jobs) if jobs else 0
                for label, keys, fn in jobs[k:] + jobs[:k]:
                    if any(key in self.na for key in keys):
                        continue
                    prev = [statistics.median(self.samples[key]) for key in keys if key in self.samples]
                    est = sum(prev) if prev else None
                    reps = 1 if est is None else max(1, min(MAX_REPS, math.ceil(TARGET_S * 1e3 / est)))
                    # Warm-up: calls filling WARMUP_S. Ours and oneDNN start a fresh process: at
                    # least one call. The persistent workers: "auto" the first time (a first call
                    # over 1 s counts as a sample), none once calls take over a second.
                    if est is None:
                        warm = "auto"
                    elif est >= 1000:
                        warm = 0
                    else:
                        warm = max(1, min(MAX_WARMUP, math.ceil(WARMUP_S * 1e3 / est)))
                    t0 = time.time()
                    try:
                        got = fn(reps, warm)
                    except NotImplementedError as e:
                        for key in keys:
                            self.na[key] = str(e)
                        continue
                    except Exception as e:
                        for key in keys:
                            self.na[key] = f"failed: {e}"
                        log(f"    {label}: FAILED: {e}")
                        continue
                    parts = []
                    for key, ms in got.items():
                        self.samples.setdefault(key, []).extend(ms)
                        for j, v in enumerate(ms):
                            self.rows.append([rnd + 1, *key[1:5], key[5], int(key[6]), key[0], key[7], j, f"{v:.6f}"])
                        who = f"{key[0]} " if len({k[0] for k in got}) > 1 else ""
                        parts.append(f"{who}{key[7]} {statistics.median(ms):.3f} ms")
                    T, B, I, H = shape
                    n = len(next(iter(got.values())))
                    log(f"    {T},{B},{I}  {SHORT[keys[0][5]]}  peephole={'on ' if keys[0][6] else 'off'}  "
                        f"{label:<24} {', '.join(parts)}  ({n} rep{'' if n == 1 else 's'}, "
                        f"{time.time() - t0:.1f} s)")
        self.info["duration_s"] = time.time() - start
        for w in self.workers.values():
            w.close()

    def skipped(self, key):
        return (key[0], key[5]) in self.na

    # ---- results ---------------------------------------------------------------------------------

    def median(self, who, shape, dtype, pp, pass_):
        if who == "torch" and pass_ == "bwd":
            f = self.samples.get(("torch", *shape, dtype, pp, "fwd"))
            fb = self.samples.get(("torch", *shape, dtype, pp, "fwdbwd"))
            return statistics.median(fb) - statistics.median(f) if f and fb else None
        s = self.samples.get((who, *shape, dtype, pp, pass_))
        return statistics.median(s) if s else None

    def na_reason(self, who, shape, dtype, pp, pass_):
        if who == "torch" and pp:
            return "nn.LSTM has no peephole"
        if who == "onednn_r":
            who = "onednn"
        if (who, dtype) in self.na:
            return self.na[(who, dtype)]
        if who in self.args.skip:
            return "skipped (--skip)"
        for p in (pass_, "fwdbwd" if pass_ == "bwd" else pass_):
            r = self.na.get((who, *shape, dtype, pp, p))
            if r:
                return r
        return "not measured"

    def table(self):
        a = self.args
        shapes = [(T, B, I, I) for T, B, I in a.shapes]
        cols = self.columns()
        peers = [k for k, _ in cols if k in PEERS]
        head = ["T", "B", "I=H", "dtype", "peephole", "pass"] + [f"{h} ms" for _, h in cols] + \
               ["ours GFLOP/s"] + [f"ours vs {h}" for k, h in cols if k in PEERS]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        notes = {}
        plot = []
        ratios = []
        for shape in shapes:
            for dtype in a.dtypes:
                for pp in (False, True):
                    for pass_ in ("fwd", "bwd"):
                        ms = {k: self.median(k, shape, dtype, pp, pass_) for k, _ in cols}
                        cells = []
                        for k, _ in cols:
                            if ms[k] is not None:
                                cells.append(f"{ms[k]:.3f}")
                            else:
                                reason = self.na_reason(k, shape, dtype, pp, pass_)
                                mark = notes.setdefault(reason, len(notes) + 1)
                                cells.append(f"n/a [{mark}]")
                        ours = ms["ours"]
                        fl = flops(*shape, pass_)
                        cells.append(f"{fl / (ours * 1e6):.1f}" if ours else "n/a")
                        for k in peers:
                            cells.append(f"{ms[k] / ours:.2f}x" if ours and ms[k] else "")
                        T, B, I, H = shape
                        lines.append("| " + " | ".join([str(T), str(B), str(I), SHORT[dtype],
                                                        "yes" if pp else "no",
                                                        "forward" if pass_ == "fwd" else "backward"] + cells) + " |")
                        plot.append((shape, dtype, pp, pass_, {k: (fl / (v * 1e6) if v and v > 0 else None)
                                                               for k, v in ms.items()}))
                        ratios.append((pass_, ms))
        foot = [f"[{n}] {r}" for r, n in sorted(notes.items(), key=lambda x: x[1])]
        # Geometric mean of ours' speedup over each peer, per pass, over the rows both have.
        summary = []
        for k, h in cols:
            if k not in PEERS:
                continue
            parts = []
            for pass_ in ("fwd", "bwd"):
                r = [ms[k] / ms["ours"] for p, ms in ratios if p == pass_ and ms["ours"] and ms[k]]
                if r:
                    parts.append(f"{'forward' if pass_ == 'fwd' else 'backward'} "
                                 f"{math.exp(sum(map(math.log, r)) / len(r)):.2f}x ({len(r)} rows)")
            if parts:
                summary.append(f"- ours vs {h}, geometric mean: {'; '.join(parts)}")
        return lines, foot, plot, summary

    def columns(self):
        skip = set(self.args.skip) | ({"onednn_r"} if "onednn" in self.args.skip else set())
        return [(k, h) for k, h in COLUMNS if k not in skip]

    def machine(self):
        model, cores = platform.processor() or "unknown CPU", os.cpu_count()
        flags = ""
        try:
            out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
            m = re.search(r"^Model name:\s*(.+)$", out, re.M)
            model = m.group(1).strip() if m else model
            m = re.search(r"^Flags:\s*(.+)$", out, re.M)
            fl = set(m.group(1).split()) if m else set()
            flags = "AVX-512" if "avx512f" in fl else "AVX2+FMA" if "avx2" in fl and "fma" in fl else "no AVX2"
        except OSError:
            pass
        return f"{model}, {cores} cores ({flags}), Linux {platform.release()}"

    def write(self):
        a = self.args
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        lines, foot, plot, summary = self.table()
        info = self.info
        git = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "describe", "--always",
                              "--dirty"], capture_output=True, text=True).stdout.strip() or "unknown"
        date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
        vers = [f"blocklstm {git} (CPU target {info.get('ours_target', '?')})"]
        if "onednn" not in a.skip:
            vers.append(f"oneDNN {info.get('onednn', '?')} (Debian libdnnl-dev)")
        if "tf" not in a.skip:
            vers.append(f"TensorFlow {info.get('tensorflow', '?')} (tensorflow-cpu)")
        if "torch" not in a.skip:
            vers.append(f"PyTorch {info.get('torch', '?')}")
        shapes = "; ".join(f"{T},{B},{I}" for T, B, I in a.shapes)
        md = [
            f"### CPU peer benchmark{' (quick)' if a.quick else ''}",
            "",
            f"- Date: {date}. Machine: {self.machine()}.",
            f"- Threads: {a.threads} for every contender (ours `--threads {a.threads}`; oneDNN and "
            f"PyTorch OMP_NUM_THREADS={a.threads}, torch.set_num_threads({a.threads}); TensorFlow "
            f"intra-op {a.threads}, inter-op 1).",
            f"- Versions: {', '.join(vers)}.",
            f"- Method: {a.rounds} round(s), interleaved: in each round every job runs once per shape "
            f"(T,B,I=H: {shapes}), in an order rotated every round; each job's time is the median of "
            f"all its samples (up to {MAX_REPS} timed calls per round, about {TARGET_S:g} s, after "
            f"untimed warm-up calls filling about {WARMUP_S:g} s, at least one). "
            f"Took {info.get('duration_s', 0) / 60:.1f} min.",
            "- ours = BlockLSTM (forward) / BlockLSTMGrad (backward, on BlockLSTM's activations); "
            "ours V2 = BlockLSTMV2 / BlockLSTMGradV2; ours pack their weights inside each call. "
            "oneDNN: LSTM forward_training / backward (weights converted into each primitive's "
            "layout and weight gradients zeroed outside the timing); oneDNN + reorders: the same "
            "calls with the conversion of the weights before each (what a training step pays, its "
            "weights changed). TF: "
            "tf.raw_ops.BlockLSTM / BlockLSTMGrad, eager. PyTorch: nn.LSTM, backward = "
            "(forward+backward) - forward. Attrs: TF's defaults (forget_bias 1, cell_clip 3).",
            "- ours vs X = X ms / ours ms (above 1: ours is faster). GFLOP/s: docs/performance.md GEMM "
            "model (forward 2·T·B·4H·(I+H); backward 2·T·B·4H·(2I+2H)).",
            f"- Reproduce: `{a.command}`",
            *summary,
            "",
            *lines,
            "",
            *[f"{f}  " for f in foot],
        ]
        text = "\n".join(md).rstrip() + "\n"
        (out / f"{a.name}.md").write_text(text)
        with open(out / f"{a.name}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["round", "T", "B", "I", "H", "dtype", "peephole", "contender", "pass", "rep", "ms"])
            w.writerows(self.rows)
        self.plot(plot, out / f"{a.name}.png", date)
        if a.readme:
            self.update_readme(Path(a.readme), text)
        log("")
        log(text)
        log(f"wrote {out / (a.name + '.md')}, {out / (a.name + '.csv')}, {out / (a.name + '.png')}")

    def plot(self, plot, path, date):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(2, 1, figsize=(max(8, 0.9 * len(plot) / 2 + 3), 9), squeeze=False)
        colors = {"ours": "#1f77b4", "ours_v2": "#6baed6", "onednn": "#ff7f0e", "onednn_r": "#fdae6b", "tf": "#2ca02c",
                  "torch": "#d62728"}
        for ax, pass_ in zip(axes[:, 0], ("fwd", "bwd")):
            rows = [r for r in plot if r[3] == pass_]
            cols = self.columns()
            n = len(cols)
            width = 0.8 / n
            for c, (k, h) in enumerate(cols):
                xs = [i + (c - (n - 1) / 2) * width for i, r in enumerate(rows) if r[4][k]]
                ys = [r[4][k] for r in rows if r[4][k]]
                ax.bar(xs, ys, width, label=h, color=colors[k])
            ax.set_xticks(range(len(rows)))
            ax.set_xticklabels([f"{r[0][0]},{r[0][1]},{r[0][2]}\n{SHORT[r[1]]} {'pp' if r[2] else ''}"
                                for r in rows], fontsize=7)
            ax.set_yscale("log")
            ax.set_ylabel("GFLOP/s (docs/performance.md model)")
            ax.set_title(f"{'forward' if pass_ == 'fwd' else 'backward'} — T,B,I=H / dtype / pp = peephole")
            ax.grid(axis="y", which="both", alpha=0.3)
            ax.legend(fontsize=8, ncol=n)
        fig.suptitle(f"LSTM on CPU, {self.args.threads} threads: blocklstm vs peers ({date})\n{self.machine()}",
                     fontsize=9)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)

    def update_readme(self, readme, text):
        begin, end = "<!-- peers:begin -->", "<!-- peers:end -->"
        if not readme.exists():
            log(f"note: {readme} not found; README not updated")
            return
        s = readme.read_text()
        if begin not in s or end not in s or s.index(begin) > s.index(end):
            log(f"note: {readme} has no '{begin}' ... '{end}' section; README not updated")
            return
        s = s[:s.index(begin) + len(begin)] + "\n" + text + s[s.index(end):]
        readme.write_text(s)
        log(f"updated the peer table in {readme}")


def shape_list(text):
    shapes = []
    for part in text.split(";"):
        t = [int(v) for v in part.split(",")]
        if len(t) != 3 or min(t) < 1:
            raise argparse.ArgumentTypeError(f"bad shape '{part}' (want T,B,I)")
        shapes.append(tuple(t))
    return shapes


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cli", required=True, help="the blocklstm executable")
    p.add_argument("--onednn", required=True, help="the onednn_lstm executable")
    p.add_argument("--python", default=sys.executable, help="python of the venv with TF and torch")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--name", default="latest", help="output file stem (default latest)")
    p.add_argument("--quick", action="store_true",
                   help="a harness check: by default the smallest shape and 1 round")
    p.add_argument("--rounds", type=int, help="default 5 (1 with --quick)")
    p.add_argument("--shapes", type=shape_list,
                   help="'T,B,I;T,B,I;...' with H = I (default: the four usual shapes and three small "
                        "batches, 100,1,512, 100,8,256, 500,1,128; with --quick the smallest of them)")
    p.add_argument("--dtypes", default="float32,float16")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--skip", default="", help="comma-separated contenders to leave out: ours_v2,onednn,tf,torch")
    p.add_argument("--readme", help="README to update between the peers markers")
    p.add_argument("--command", default="bench/run.sh", help="the command shown as reproducing it")
    a = p.parse_args()
    a.skip = [s for s in a.skip.split(",") if s]
    if any(s not in ("ours_v2", "onednn", "tf", "torch") for s in a.skip):
        p.error("--skip: ours_v2, onednn, tf and/or torch")
    a.dtypes = [d for d in a.dtypes.split(",") if d]
    if any(d not in DTYPES for d in a.dtypes):
        p.error("--dtypes: float32, float16 and/or bfloat16")
    if a.shapes is None:
        a.shapes = [min(SHAPES, key=lambda s: s[0] * s[1] * s[2] * s[2])] if a.quick else SHAPES
    if a.rounds is None:
        a.rounds = 1 if a.quick else 5
    if a.rounds < 1:
        p.error("--rounds: at least 1")
    b = Bench(a)
    b.run()
    b.write()


if __name__ == "__main__":
    main()
