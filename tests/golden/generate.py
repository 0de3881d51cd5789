#!/usr/bin/env python3
"""Golden files from TensorFlow itself (tf.raw_ops) for blocklstm's test suite.

Run through tests/golden/generate.sh, which provides the pinned environment. Writes, for every case,
tests/data/tf/<case>/ with
  * one .npy per op input, named as TF names the argument (the names `blocklstm run` reads):
    seq_len_max.npy (int64, 0-d; sequence ops only), x, cs_prev, h_prev, w, wci, wcf, wco, b, and for
    the grad ops i, cs, f, o, ci, co, h (sequence grads only), cs_grad, h_grad;
  * one .npy per op output, named as TF names it (the names `blocklstm run` writes);
  * manifest.txt: one `key=value` per line (see write_manifest()).

Grad cases are fed the real outputs of the matching TF forward op on the same inputs plus random
cs_grad / h_grad. TF leaves i, f, o, ci, co past seq_len_max uninitialised: those slices are set to
zero, both in the saved forward outputs (the manifest lists them under unspecified_past_seq_len_max,
and the test checks that ours are zero there) and in the forward activations fed to the grad ops
(which must not read them).

Also runs the BlockLSTMV2 gradient study (v2_study()): finite differences through
tf.raw_ops.BlockLSTMV2 against tf.raw_ops.BlockLSTMGradV2 and against TF's registered autodiff
gradient of BlockLSTMV2; prints the result into tests/golden/v2_gradient_study.txt and saves its
inputs and the three gradients under tests/data/tf/v2_gradient_study/.

TF runs single-threaded (intra/inter-op parallelism 1) so that regenerating gives the same bytes.
"""
import argparse
import math
import shutil
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tensorflow as tf

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DATA = ROOT / "tests" / "data" / "tf"
STUDY_TXT = HERE / "v2_gradient_study.txt"

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

FWD_IN = ["x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b"]
FWD_OUT = ["i", "cs", "f", "o", "ci", "co", "h"]
CELL_GRAD_IN = FWD_IN + ["i", "cs", "f", "o", "ci", "co", "cs_grad", "h_grad"]
SEQ_GRAD_IN = FWD_IN + ["i", "cs", "f", "o", "ci", "co", "h", "cs_grad", "h_grad"]
CELL_GRAD_OUT = ["cs_prev_grad", "dicfo", "wci_grad", "wcf_grad", "wco_grad"]
SEQ_GRAD_OUT = ["x_grad", "cs_prev_grad", "h_prev_grad", "w_grad", "wci_grad", "wcf_grad", "wco_grad",
                "b_grad"]
UNSPECIFIED_PAST_L = ["i", "f", "o", "ci", "co"]  # TF leaves these uninitialised past seq_len_max

# op -> (is sequence op, forward op whose outputs feed it (grad ops) or None, inputs, outputs)
OPS = {
    "LSTMBlockCell": (False, None, FWD_IN, FWD_OUT),
    "LSTMBlockCellGrad": (False, "LSTMBlockCell", CELL_GRAD_IN, CELL_GRAD_OUT),
    "BlockLSTM": (True, None, FWD_IN, FWD_OUT),
    "BlockLSTMGrad": (True, "BlockLSTM", SEQ_GRAD_IN, SEQ_GRAD_OUT),
    "BlockLSTMV2": (True, None, FWD_IN, FWD_OUT),
    "BlockLSTMGradV2": (True, "BlockLSTMV2", SEQ_GRAD_IN, SEQ_GRAD_OUT),
}
# TF's attr defaults of the forward ops (docs/semantics.md); V2 has no forget_bias (it is exactly 0).
DEFAULTS = {
    "LSTMBlockCell": {"forget_bias": 1.0, "cell_clip": 3.0},
    "BlockLSTM": {"forget_bias": 1.0, "cell_clip": 3.0},
    "BlockLSTMV2": {"cell_clip": 0.0},
}
DTYPES = {"f32": np.float32, "f16": np.float16}


@dataclass
class Case:
    name: str
    op: str
    dt: str  # "f32" / "f16"
    peephole: bool
    T: int
    B: int
    I: int
    H: int
    L: int
    attrs: dict = field(default_factory=dict)  # forward attrs passed explicitly (else TF's default)
    wscale: float = 1.5  # w ~ U(±wscale / sqrt(I+H)): gate pre-activations of std ≈ wscale / sqrt(3)
    cscale: float = 1.0  # cs_prev ~ U(±cscale)
    fshift: float = 0.0  # added to the forget-gate block of b (V2 has no forget_bias attr)
    expect: str = ""  # "clip": the clip must be active somewhere; "big": some |cs| > 3 (no clip)
    note: str = ""

    @property
    def seed(self):
        return zlib.crc32(self.name.encode()) & 0x7FFFFFFF

    @property
    def fwd_op(self):
        return OPS[self.op][1] or self.op

    @property
    def seq(self):
        return OPS[self.op][0]

    def effective_attrs(self):
        a = dict(DEFAULTS[self.fwd_op])
        a.update(self.attrs)
        return a


def all_cases():
    cases = []

    def add(variant, op, dt, peep, T, B, I, H, L=None, **kw):
        name = f"{op}-{dt}-{'peephole' if peep else 'plain'}-{variant}"
        cases.append(Case(name, op, dt, peep, T, B, I, H, T if L is None else L, **kw))

    fwd_of = lambda op: OPS[op][1] or op
    v1 = lambda op: fwd_of(op) != "BlockLSTMV2"
    for op in OPS:
        for dt in DTYPES:
            for peep in (False, True):
                # Odd sizes everywhere (B*I and B*H odd: TF's unaligned time slices), TF's default attrs.
                add("base", op, dt, peep, 4, 3, 5, 7, note="odd sizes, TF's default attrs")
                # Non-default attrs, weights large enough that |cs| exceeds the clip.
                attrs = {"forget_bias": 0.5, "cell_clip": 0.75} if v1(op) else {"cell_clip": 0.75}
                add("attrs", op, dt, peep, 4, 3, 5, 7, attrs=attrs, wscale=4.0, cscale=2.0, expect="clip",
                    note="non-default forget_bias/cell_clip, clip active")
                # TF's default clip (3.0) actually active: large weights, cs grows over 6 steps.
                if v1(op):
                    add("clipdefault", op, dt, peep, 6, 3, 5, 7, wscale=5.0, cscale=6.0, expect="clip",
                        note="TF's default cell_clip 3.0 active")
    for op in OPS:
        for dt in DTYPES:
            # No clipping (V1: cell_clip -1, the TF 1.x wrappers' value, and forget_bias 2; V2: its
            # default 0, and 2 added to the forget block of b) with weights large enough that |cs| > 3.
            attrs = {"forget_bias": 2.0, "cell_clip": -1.0} if v1(op) else {}
            add("noclip", op, dt, True, 6, 3, 5, 7, attrs=attrs, wscale=5.0, cscale=4.0,
                fshift=0.0 if v1(op) else 2.0, expect="big", note="no clipping, |cs| > 3")
            # B = 1.
            add("b1", op, dt, True, 3, 1, 2, 3, note="B = 1")
            # The larger case (float16 only for the V1 ops: the V2 ops differ from them only in the gate
            # layout and forget bias; this keeps tests/data/tf under 3 MB).
            if dt == "f32" or v1(op):
                add("large", op, dt, True, 20, 8, 24, 32, note="larger sizes")
        # I = H = 1 (the narrowest GEMMs).
        add("unit", op, "f32", True, 2, 1, 1, 1, note="B = I = H = 1")
    for op in OPS:
        if not OPS[op][0]:
            continue
        for dt in DTYPES:
            for peep in (False, True):
                add("short", op, dt, peep, 5, 3, 5, 7, L=3, note="seq_len_max < T")
            add("zero", op, dt, True, 3, 3, 5, 7, L=0, note="seq_len_max = 0")
    return cases


def tf_call(op, dt, seq_len_max, inputs, peephole, attrs):
    kwargs = {k: tf.constant(v) for k, v in inputs.items()}
    if seq_len_max is not None:
        kwargs["seq_len_max"] = tf.constant(np.int64(seq_len_max))
    kwargs.update(attrs)
    outs = getattr(tf.raw_ops, op)(use_peephole=peephole, **kwargs)
    res = [np.asarray(o.numpy()) for o in outs]
    for r in res:
        assert r.dtype == DTYPES[dt], (op, r.dtype)
    return res


def fmt_float(v):
    return repr(float(np.float32(v)))


def run_case(c: Case):
    dt = DTYPES[c.dt]
    rng = np.random.default_rng(c.seed)
    T, B, I, H, L = c.T, c.B, c.I, c.H, c.L
    u = lambda shape, a: rng.uniform(-a, a, size=shape).astype(dt)
    step = (T, B) if c.seq else (B,)
    fin = {
        "x": u(step + (I,), 1.0),
        "cs_prev": u((B, H), c.cscale),
        "h_prev": u((B, H), 1.0),
        "w": u((I + H, 4 * H), c.wscale / math.sqrt(I + H)),
        # Random (not zero) peepholes also when use_peephole is false: they must then be ignored.
        "wci": u((H,), 0.5),
        "wcf": u((H,), 0.5),
        "wco": u((H,), 0.5),
        "b": u((4 * H,), 0.5),
    }
    if c.fshift:
        off_f = H if c.fwd_op == "BlockLSTMV2" else 2 * H  # IFCO / ICFO
        fin["b"][off_f:off_f + H] += dt(c.fshift)
    seq_len = L if c.seq else None
    fwd = dict(zip(FWD_OUT, tf_call(c.fwd_op, c.dt, seq_len, fin, c.peephole, c.attrs)))
    if c.seq:
        for k in UNSPECIFIED_PAST_L:
            fwd[k][L:] = 0
        assert not fwd["cs"][L:].any() and not fwd["h"][L:].any()  # TF zeroes these itself

    # What the forward did with the clip (over the defined steps only).
    ea = c.effective_attrs()
    cs_def = fwd["cs"][:L] if c.seq else fwd["cs"]
    clip = float(ea["cell_clip"])
    clip_hits = int(np.count_nonzero(np.abs(cs_def) == dt(clip))) if clip > 0 else 0
    max_cs = float(np.max(np.abs(cs_def))) if cs_def.size else 0.0
    if c.expect == "clip":
        assert clip_hits > 0, f"{c.name}: the clip is never active"
    if c.expect == "big":
        assert clip <= 0 and max_cs > 3.0, f"{c.name}: max |cs| = {max_cs}"

    if OPS[c.op][1] is None:
        inputs, outputs = fin, fwd
    else:
        gshape = step + (H,)
        inputs = dict(fin)
        inputs.update({k: fwd[k] for k in OPS[c.op][2] if k in fwd})
        inputs["cs_grad"] = u(gshape, 1.0)
        inputs["h_grad"] = u(gshape, 1.0)
        inputs = {k: inputs[k] for k in OPS[c.op][2]}
        outputs = dict(zip(OPS[c.op][3], tf_call(c.op, c.dt, seq_len, inputs, c.peephole, {})))

    d = DATA / c.name
    d.mkdir(parents=True)
    if c.seq:
        np.save(d / "seq_len_max.npy", np.array(L, dtype=np.int64))
    for k in OPS[c.op][2]:
        np.save(d / f"{k}.npy", np.ascontiguousarray(inputs[k]))
    for k in OPS[c.op][3]:
        np.save(d / f"{k}.npy", np.ascontiguousarray(outputs[k]))

    m = [
        ("name", c.name),
        ("op", c.op),
        ("dtype", {"f32": "float32", "f16": "float16"}[c.dt]),
        ("use_peephole", int(c.peephole)),
    ]
    # attr.* = the attrs passed to TF explicitly; an attr not listed took TF's default (the test then
    # uses the library's default and passes no CLI flag, so the defaults are compared too).
    if OPS[c.op][1] is None:
        m += [(f"attr.{k}", fmt_float(v)) for k, v in c.attrs.items()]
    m += [("T", T), ("B", B), ("I", I), ("H", H)]
    if c.seq:
        m.append(("seq_len_max", L))
    m += [
        ("inputs", ",".join((["seq_len_max"] if c.seq else []) + OPS[c.op][2])),
        ("outputs", ",".join(OPS[c.op][3])),
    ]
    if OPS[c.op][1] is None and c.seq and L < T:
        m.append(("unspecified_past_seq_len_max", ",".join(UNSPECIFIED_PAST_L)))
    if OPS[c.op][1] is not None:
        # The forward op whose outputs are the activations fed in, with its effective attrs.
        m.append(("forward_op", c.fwd_op))
        m += [(f"forward.{k}", fmt_float(v)) for k, v in ea.items()]
    m += [
        ("effective_forget_bias", fmt_float(ea.get("forget_bias", 0.0))),
        ("effective_cell_clip", fmt_float(clip)),
        ("clip_active_count", clip_hits),
    ]
    if c.fshift:
        m.append(("b_forget_block_shift", fmt_float(c.fshift)))  # already in b.npy; for information
    m += [
        ("max_abs_cs", repr(max_cs)),
        ("seed", c.seed),
        ("generator", "tests/golden/generate.py (numpy default_rng(seed), uniform)"),
        ("tf_version", tf.__version__),
        ("numpy_version", np.__version__),
        ("note", c.note),
    ]
    (d / "manifest.txt").write_text("".join(f"{k}={v}\n" for k, v in m))


# ---- The BlockLSTMV2 gradient study -------------------------------------------------------------

def v2_study(peephole, save_dir=None):
    """Finite differences of loss = sum(cs*Gc + h*Gh) through tf.raw_ops.BlockLSTMV2 (float32; TF
    registers no float64 kernel) against BlockLSTMGradV2 and against TF's registered gradient."""
    T, B, I, H = 4, 3, 3, 4
    name = f"v2_gradient_study{'-peephole' if peephole else ''}"
    seed = zlib.crc32(name.encode()) & 0x7FFFFFFF
    rng = np.random.default_rng(seed)
    u = lambda shape, a: rng.uniform(-a, a, size=shape).astype(np.float32)
    # Small weights: no saturation, no clip (V2's default cell_clip 0), so the loss is smooth.
    inp = {
        "x": u((T, B, I), 1.0),
        "cs_prev": u((B, H), 0.5),
        "h_prev": u((B, H), 0.5),
        "w": u((I + H, 4 * H), 0.5),
        "wci": u((H,), 0.3),
        "wcf": u((H,), 0.3),
        "wco": u((H,), 0.3),
        "b": u((4 * H,), 0.3),
    }
    gc = u((T, B, H), 1.0)
    gh = u((T, B, H), 1.0)
    gc64, gh64 = gc.astype(np.float64), gh.astype(np.float64)

    def forward(values):
        return tf_call("BlockLSTMV2", "f32", T, values, peephole, {})

    def loss(values):
        o = forward(values)
        # Summed in float64 from the float32 outputs: the FD noise is then the outputs' own rounding.
        return float(np.sum(o[1].astype(np.float64) * gc64) + np.sum(o[6].astype(np.float64) * gh64))

    wrt = ["w", "b", "x", "cs_prev", "h_prev"] + (["wci", "wcf", "wco"] if peephole else [])

    def fd(eps):
        g = {}
        for k in wrt:
            a = inp[k]
            gk = np.zeros(a.shape, np.float64)
            for idx in np.ndindex(a.shape):
                vp, vm = dict(inp), dict(inp)
                ap, am = a.copy(), a.copy()
                ap[idx] = np.float32(a[idx] + eps)
                am[idx] = np.float32(a[idx] - eps)
                vp[k], vm[k] = ap, am
                gk[idx] = (loss(vp) - loss(vm)) / (float(ap[idx]) - float(am[idx]))
            g[k] = gk
        return g

    eps = 1e-2
    g_fd = fd(eps)
    g_fd2 = fd(eps / 2)

    fo = dict(zip(FWD_OUT, forward(inp)))
    gin = dict(inp)
    gin.update({k: fo[k] for k in FWD_OUT})
    gin["cs_grad"], gin["h_grad"] = gc, gh
    gin = {k: gin[k] for k in SEQ_GRAD_IN}
    g_op = dict(zip(SEQ_GRAD_OUT, tf_call("BlockLSTMGradV2", "f32", T, gin, peephole, {})))

    tv = {k: tf.Variable(v) for k, v in inp.items()}
    with tf.GradientTape() as tape:
        outs = tf.raw_ops.BlockLSTMV2(seq_len_max=tf.constant(np.int64(T)), cell_clip=0.0,
                                      use_peephole=peephole, **tv)
        lo = tf.reduce_sum(outs[1] * gc) + tf.reduce_sum(outs[6] * gh)
    ad = tape.gradient(lo, [tv[k] for k in wrt])
    g_ad = {k: np.asarray(v.numpy()) for k, v in zip(wrt, ad)}

    lines = []
    p = lines.append
    p(f"## use_peephole={peephole}: T={T} B={B} I={I} H={H}, seq_len_max=T, cell_clip=0, seed={seed}")
    p(f"loss = sum(cs*Gc + h*Gh), Gc, Gh ~ U(-1,1); central differences, step {eps} (float32 inputs,")
    p("loss summed in float64); FD error estimate = 2 * max|FD(step) - FD(step/2)|.")
    p("rel = max|g - FD| / max|FD| over the tensor (w, b: per IFCO gate block, same denominator).")
    p("")
    p("| tensor | block | max abs FD | FD error est. (rel) | BlockLSTMGradV2 vs FD (rel) | autodiff (BlockLSTMGrad) vs FD (rel) |")
    p("|---|---|---|---|---|---|")
    res = {}
    for k in wrt:
        scale = float(np.max(np.abs(g_fd[k])))
        err_fd = 2 * float(np.max(np.abs(g_fd[k] - g_fd2[k]))) / scale
        blocks = [("all", slice(None))]
        if k in ("w", "b"):
            blocks += [(n, slice(j * H, (j + 1) * H)) for j, n in enumerate("ifco")]
        for bn, sl in blocks:
            sel = (Ellipsis, sl)
            e_op = float(np.max(np.abs(g_op[k + "_grad"][sel] - g_fd[k][sel]))) / scale
            e_ad = float(np.max(np.abs(g_ad[k][sel] - g_fd[k][sel]))) / scale
            res[(k, bn)] = (e_op, e_ad, err_fd)
            p(f"| {k} | {bn} | {scale:.4g} | {err_fd:.2e} | {e_op:.2e} | {e_ad:.2e} |")
    p("")

    if save_dir is not None:
        d = save_dir
        d.mkdir(parents=True)
        np.save(d / "seq_len_max.npy", np.array(T, dtype=np.int64))
        for k in SEQ_GRAD_IN:
            np.save(d / f"{k}.npy", gin[k])
        for k in wrt:
            np.save(d / f"fd_{k}_grad.npy", g_fd[k].astype(np.float32))
            np.save(d / f"tf_{k}_grad.npy", g_op[k + "_grad"])  # tf.raw_ops.BlockLSTMGradV2
            np.save(d / f"autodiff_{k}_grad.npy", g_ad[k])  # tf.GradientTape through BlockLSTMV2
        m = [
            ("name", "v2_gradient_study"),
            ("op", "study"),
            ("study_op", "BlockLSTMGradV2"),
            ("dtype", "float32"),
            ("use_peephole", int(peephole)),
            ("T", T), ("B", B), ("I", I), ("H", H), ("seq_len_max", T),
            ("inputs", ",".join(["seq_len_max"] + SEQ_GRAD_IN)),
            ("wrt", ",".join(wrt)),
            ("loss", "sum(cs*cs_grad + h*h_grad) of BlockLSTMV2(cell_clip=0)"),
            ("fd_step", eps),
        ]
        for k in wrt:
            scale = float(np.max(np.abs(g_fd[k])))
            m.append((f"fd_error_est.{k}", repr(2 * float(np.max(np.abs(g_fd[k] - g_fd2[k]))))))
            m.append((f"fd_max_abs.{k}", repr(scale)))
        m += [("seed", seed), ("tf_version", tf.__version__), ("numpy_version", np.__version__),
              ("note", "fd_* = finite differences through tf.raw_ops.BlockLSTMV2; tf_* = "
                       "tf.raw_ops.BlockLSTMGradV2; autodiff_* = TF's registered gradient of BlockLSTMV2")]
        (d / "manifest.txt").write_text("".join(f"{k}={v}\n" for k, v in m))
    return lines, res


def run_study():
    out = ["# BlockLSTMV2: finite differences vs BlockLSTMGradV2 vs TF's registered gradient", "",
           f"Written by tests/golden/generate.py with TensorFlow {tf.__version__}, numpy {np.__version__}.",
           "TF registers one Python gradient for BlockLSTM and BlockLSTMV2 (tensorflow/python/ops/"
           "rnn_grad.py), which calls BlockLSTMGrad, the ICFO kernel (docs/semantics.md: TensorFlow's bugs).", ""]
    verdicts = []
    for peep in (False, True):
        lines, res = v2_study(peep, DATA / "v2_gradient_study" if not peep else None)
        out += lines
        ok_op = all(e_op <= max(3 * e_fd, 1e-4) for e_op, _, e_fd in res.values())
        cf = [res[("w", "c")][1], res[("w", "f")][1], res[("b", "c")][1], res[("b", "f")][1]]
        verdicts.append((peep, ok_op, min(cf), max(e_op for e_op, _, _ in res.values()),
                         max(res[("w", "all")][1], res[("b", "all")][1])))
    out.append("## Outcome")
    for peep, ok_op, cf_min, op_max, ad_max in verdicts:
        out.append(f"- use_peephole={peep}: BlockLSTMGradV2 {'matches' if ok_op else 'DOES NOT match'} "
                   f"the finite differences (worst rel {op_max:.1e}, within the FD error); TF's registered "
                   f"autodiff gradient is off by {ad_max:.2f} (rel, w/b), smallest c/f-block error "
                   f"{cf_min:.2f}: {'it differs (docs/semantics.md: TensorFlow's bugs confirmed)' if cf_min > 0.1 else 'no clear difference'}.")
    text = "\n".join(out) + "\n"
    STUDY_TXT.write_text(text)
    print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="print the case names and exit")
    ap.add_argument("--no-study", action="store_true", help="skip the BlockLSTMV2 gradient study")
    args = ap.parse_args()
    cases = all_cases()
    assert len({c.name for c in cases}) == len(cases)
    if args.list:
        print("\n".join(c.name for c in cases))
        return
    # Remove what an earlier run wrote (only directories that hold a manifest).
    DATA.mkdir(parents=True, exist_ok=True)
    for d in DATA.iterdir():
        if d.is_dir() and (d / "manifest.txt").exists() and (args.no_study is False or d.name != "v2_gradient_study"):
            shutil.rmtree(d)
    for k, c in enumerate(cases):
        run_case(c)
        print(f"[{k + 1:3d}/{len(cases)}] {c.name}", flush=True)
    if not args.no_study:
        run_study()
    total = sum(f.stat().st_size for f in DATA.rglob("*") if f.is_file())
    print(f"golden: {len(cases)} cases in {DATA} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    sys.exit(main())
