"""The six ops on NumPy arrays: against TensorFlow 2.21's own outputs (tests/data/tf), against an
independent float64 forward, and on bad input."""
import inspect
import re
import pathlib

import numpy as np
import pytest

import blocklstm

GOLDEN = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "tf"
HALF_EPS = 2.0 ** -10


def manifest(case):
    return dict(line.split("=", 1) for line in (case / "manifest.txt").read_text().splitlines() if "=" in line)


def tolerance(m):
    # The C++ golden suite's budget (tests/golden/tf_golden_test.cc): float32 1e-5 / 2e-6;
    # float16 TF's rounding budget in ulps of one.
    seq, grad = m["op"].startswith("Block"), "Grad" in m["op"]
    if m["dtype"] == "float32":
        return 1e-5 if seq and grad else 2e-6
    if not seq:
        return 6 * HALF_EPS
    if not grad:
        return 8 * HALF_EPS
    return (8 + 0.5 * int(m["seq_len_max"])) * HALF_EPS


def snake(op):
    return {"LSTMBlockCell": "lstm_block_cell", "LSTMBlockCellGrad": "lstm_block_cell_grad",
            "BlockLSTM": "block_lstm", "BlockLSTMGrad": "block_lstm_grad",
            "BlockLSTMV2": "block_lstm_v2", "BlockLSTMGradV2": "block_lstm_grad_v2"}[op]


OPS = ("LSTMBlockCell", "LSTMBlockCellGrad", "BlockLSTM", "BlockLSTMGrad", "BlockLSTMV2", "BlockLSTMGradV2")
CASES = sorted(p for p in GOLDEN.iterdir() if (p / "manifest.txt").exists() and manifest(p).get("op") in OPS)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_matches_tensorflow(case):
    m = manifest(case)
    fn = getattr(blocklstm, snake(m["op"]))
    kwargs = {name: np.load(case / f"{name}.npy") for name in m["inputs"].split(",")}
    kwargs["use_peephole"] = m["use_peephole"] == "1"
    for attr in ("forget_bias", "cell_clip"):
        if f"attr.{attr}" in m:
            kwargs[attr] = float(m[f"attr.{attr}"])
    out = fn(**kwargs)
    L, B, H = int(m.get("seq_len_max", 1)), int(m["B"]), int(m["H"])
    unspecified = m.get("unspecified_past_seq_len_max", "").split(",")
    for name in m["outputs"].split(","):
        ours, tf = getattr(out, name), np.load(case / f"{name}.npy")
        assert ours.dtype == tf.dtype and ours.shape == tf.shape, name
        ours, tf = ours.astype(np.float64).ravel(), tf.astype(np.float64).ravel()
        if name in unspecified:  # TF leaves these unwritten past seq_len_max; ours are zero
            assert not ours[L * B * H:].any(), name
            ours, tf = ours[:L * B * H], tf[:L * B * H]
        scale = max(1.0, np.abs(tf).max(initial=0.0))
        assert np.abs(ours - tf).max(initial=0.0) / scale <= tolerance(m), name


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def reference_block_lstm(x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias, cell_clip, peephole):
    """TF's BlockLSTM (ICFO gate blocks) in float64, written from its documentation."""
    x, cs, h, w, wci, wcf, wco, b = (np.asarray(a, np.float64) for a in (x, cs_prev, h_prev, w, wci, wcf, wco, b))
    outs = {k: [] for k in ("i", "cs", "f", "o", "ci", "co", "h")}
    H = cs.shape[1]
    for t in range(x.shape[0]):
        z = np.concatenate([x[t], h], axis=1) @ w + b
        zi, zc, zf, zo = (z[:, k * H:(k + 1) * H] for k in range(4))
        i = sigmoid(zi + (wci * cs if peephole else 0))
        f = sigmoid(zf + forget_bias + (wcf * cs if peephole else 0))
        ci = np.tanh(zc)
        cs = ci * i + cs * f
        if cell_clip > 0:
            cs = np.clip(cs, -cell_clip, cell_clip)
        o = sigmoid(zo + (wco * cs if peephole else 0))
        co = np.tanh(cs)
        h = co * o
        for k, v in zip(outs, (i, cs, f, o, ci, co, h)):
            outs[k].append(v)
    return {k: np.stack(v) for k, v in outs.items()}


def random_inputs(rng, T, B, I, H, dtype=np.float32):
    u = lambda *s, scale=1.0: (scale * rng.uniform(-1, 1, s)).astype(dtype)
    return dict(x=u(T, B, I), cs_prev=u(B, H), h_prev=u(B, H), w=u(I + H, 4 * H, scale=(I + H) ** -0.5),
                wci=u(H), wcf=u(H), wco=u(H), b=u(4 * H))


@pytest.mark.parametrize("peephole", [False, True])
def test_block_lstm_matches_float64_reference(peephole):
    rng = np.random.default_rng(7)
    a = random_inputs(rng, 6, 5, 17, 33)
    out = blocklstm.block_lstm(6, **a, forget_bias=0.5, cell_clip=0.8, use_peephole=peephole)
    want = reference_block_lstm(**a, forget_bias=0.5, cell_clip=0.8, peephole=peephole)
    for k, v in want.items():
        np.testing.assert_allclose(getattr(out, k), v, atol=2e-6, rtol=0, err_msg=k)


@pytest.mark.parametrize("peephole", [False, True])
def test_bfloat16_arrays_of_ml_dtypes(peephole):
    """NumPy bfloat16 (ml_dtypes.bfloat16) in and out: the forward against the float64 reference of
    the bfloat16-rounded inputs (the C++ suites' bfloat16 tolerance: 16 roundings of 2^-8 for the
    recurrence), the gradient op on those outputs against its float32 call on the same values (8
    roundings),
    ReverseSequence bit for bit, and a dtype mixed with float32 refused naming the argument."""
    import ml_dtypes  # a test requirement (python/requirements-test.txt): its absence fails, never skips
    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(9)
    a = {k: v.astype(bf16) for k, v in random_inputs(rng, 6, 5, 17, 33).items()}
    out = blocklstm.block_lstm(6, **a, forget_bias=0.5, cell_clip=0.8, use_peephole=peephole)
    want = reference_block_lstm(**{k: v.astype(np.float64) for k, v in a.items()}, forget_bias=0.5, cell_clip=0.8,
                                peephole=peephole)
    for k, v in want.items():
        assert getattr(out, k).dtype == bf16, k
        np.testing.assert_allclose(getattr(out, k).astype(np.float64), v, atol=6.25e-2 * max(1.0, np.abs(v).max()),
                                   rtol=0, err_msg=k)
    grads_in = {**a, **{k: getattr(out, k) for k in ("i", "cs", "f", "o", "ci", "co", "h")},
                "cs_grad": rng.standard_normal(out.h.shape).astype(bf16), "h_grad": rng.standard_normal(out.h.shape).astype(bf16)}
    g16 = blocklstm.block_lstm_grad(6, **grads_in, use_peephole=peephole)
    g32 = blocklstm.block_lstm_grad(6, **{k: v.astype(np.float32) for k, v in grads_in.items()}, use_peephole=peephole)
    for k in g32._fields:  # the C++ suites' bfloat16 gradient tolerance: 8 roundings of 2^-8 (one per
        # stored value, and on AVX512-BF16 the gate gradients rounded as they enter the products)
        ours, ref = getattr(g16, k).astype(np.float64), getattr(g32, k).astype(np.float64)
        assert getattr(g16, k).dtype == bf16, k
        np.testing.assert_allclose(ours, ref, atol=3.2e-2 * max(1.0, np.abs(ref).max()), rtol=0, err_msg=k)
    rev = blocklstm.reverse_sequence(a["x"], [6, 0, 3, 1, 5])
    assert rev.dtype == bf16
    np.testing.assert_array_equal(rev[:3, 2].view(np.uint16), a["x"][:3, 2][::-1].view(np.uint16))
    with pytest.raises(ValueError, match="BlockLSTM: argument 'w' has dtype float32: expected bfloat16"):
        blocklstm.block_lstm(6, **{**a, "w": a["w"].astype(np.float32)})


def test_functions_follow_the_registry():
    for op in blocklstm.ops():
        fn = getattr(blocklstm, snake(op["name"]))
        params = list(inspect.signature(fn).parameters.values())
        names = [p.name for p in params]
        inputs = [a["name"] for a in op["inputs"]]
        assert names[: len(inputs) + op["sequence"]] == (["seq_len_max"] if op["sequence"] else []) + inputs
        optional = [a["name"] for a in op["optional_inputs"]]
        assert optional == (["seq_lengths"] if op["sequence"] else [])
        assert names[len(names) - len(optional):] == optional
        assert all(p.kind is p.KEYWORD_ONLY and p.default is None for p in params[len(names) - len(optional):])
        last = params[len(names) - len(optional) - 1]
        assert last.name == "use_peephole" and last.default is False
        for attr in ("forget_bias", "cell_clip"):
            if op[attr] is not None:
                assert inspect.signature(fn).parameters[attr].default == pytest.approx(op[attr])
            else:
                assert attr not in names


@pytest.mark.parametrize("lengths_dtype", [np.int32, np.int64, list])
def test_seq_lengths_run_each_row_as_its_own_sequence(lengths_dtype):
    """Each row with seq_lengths is the op without them on that row alone with seq_len_max = its
    length (TF's own semantics), zeros past it; the gradient op likewise."""
    T, B, I, H = 6, 5, 3, 4
    a = random_inputs(np.random.default_rng(11), T, B, I, H)
    lengths = [4, 0, 6, 2, 5]
    given = lengths if lengths_dtype is list else np.array(lengths, dtype=lengths_dtype)
    out = blocklstm.block_lstm(T, **a, cell_clip=0.0, use_peephole=True, seq_lengths=given)
    gh, gc = np.random.default_rng(3).standard_normal((2, T, B, H)).astype(np.float32)
    grads = blocklstm.block_lstm_grad(T, **a, **out._asdict(), cs_grad=gc, h_grad=gh, use_peephole=True,
                                      seq_lengths=given)
    for b, n in enumerate(lengths):
        row = {k: np.ascontiguousarray(v[:, b:b + 1] if v.ndim == 3 else v[b:b + 1] if k in ("cs_prev", "h_prev") else v)
               for k, v in a.items()}
        alone = blocklstm.block_lstm(n, **row, cell_clip=0.0, use_peephole=True)
        for k in out._fields:
            np.testing.assert_allclose(getattr(out, k)[:, b], getattr(alone, k)[:, 0], atol=1e-6, rtol=0, err_msg=k)
            assert not getattr(out, k)[n:, b].any()
        acts = {k: np.ascontiguousarray(getattr(alone, k)) for k in alone._fields}
        g = blocklstm.block_lstm_grad(n, **row, **acts, cs_grad=np.ascontiguousarray(gc[:, b:b + 1]),
                                      h_grad=np.ascontiguousarray(gh[:, b:b + 1]), use_peephole=True)
        np.testing.assert_allclose(grads.x_grad[:, b], g.x_grad[:, 0], atol=1e-5, rtol=0)
        np.testing.assert_allclose(grads.h_prev_grad[b], g.h_prev_grad[0], atol=1e-5, rtol=0)
        np.testing.assert_allclose(grads.cs_prev_grad[b], g.cs_prev_grad[0], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match=r"argument 'seq_lengths' has 7 at \[2\]: expected a value in \[0, 6\]"):
        blocklstm.block_lstm(T, **a, seq_lengths=[4, 0, 7, 2, 5])
    with pytest.raises(ValueError, match=r"argument .seq_lengths. has dtype float32: expected int32 or int64"):
        blocklstm.block_lstm(T, **a, seq_lengths=np.zeros(B, np.float32))
    with pytest.raises(TypeError):
        blocklstm.lstm_block_cell(**{k: (v[0] if k == "x" else v) for k, v in a.items()}, seq_lengths=[1] * B)


def test_seq_len_max_as_array_and_zero_past_it():
    a = random_inputs(np.random.default_rng(1), 5, 2, 3, 4)
    as_int = blocklstm.block_lstm(3, **a)
    as_array = blocklstm.block_lstm(np.array([3], dtype=np.int64), **a)
    np.testing.assert_array_equal(as_int.h, as_array.h)
    assert not as_int.h[3:].any()


@pytest.mark.parametrize("change, message", [
    (lambda a: a.update(x=a["x"].astype(np.float64)),
     "BlockLSTM: argument 'x': expected float32, float16 or bfloat16 data, got float64"),
    (lambda a: a.update(w=np.ascontiguousarray(a["w"][:, :-4])), "BlockLSTM: argument 'w' has shape [9,16]: expected [9,20]"),
    (lambda a: a.update(x=np.asfortranarray(a["x"])), "BlockLSTM: argument 'x' is not C-contiguous"),
    (lambda a: a.update(b=a["b"].astype(np.float16)), "BlockLSTM: argument 'b' has dtype float16"),
    (lambda a: a.update(x=[[1.0]]), "BlockLSTM: argument 'x': expected an array"),
    (lambda a: a.update(forget_bias="1"), "BlockLSTM: argument 'forget_bias': expected a float, got str"),
    (lambda a: a.update(cell_clip=None), "BlockLSTM: argument 'cell_clip': expected a float, got NoneType"),
    (lambda a: a.update(use_peephole="no"), "BlockLSTM: argument 'use_peephole': expected a bool, got str"),
    (lambda a: a.update(use_peephole=1), "BlockLSTM: argument 'use_peephole': expected a bool, got int"),
])
def test_bad_input_is_a_value_error(change, message):
    a = random_inputs(np.random.default_rng(2), 3, 2, 4, 5)
    change(a)
    with pytest.raises(ValueError, match=re.escape(message)):
        blocklstm.block_lstm(3, **a)


def test_attrs_of_numpy_types_are_taken():
    a = random_inputs(np.random.default_rng(2), 3, 2, 4, 5)
    want = blocklstm.block_lstm(3, **a, forget_bias=0.5, cell_clip=2.0, use_peephole=True)
    got = blocklstm.block_lstm(3, **a, forget_bias=np.float32(0.5), cell_clip=np.int64(2), use_peephole=np.bool_(True))
    np.testing.assert_array_equal(got.h, want.h)


def test_threads_cache_and_cpu_target_controls():
    a = random_inputs(np.random.default_rng(8), 4, 3, 5, 6)
    want = blocklstm.block_lstm(4, **a)
    targets = blocklstm.cpu_targets()
    assert [t["name"] for t in targets if t["runs_here"]] and all(t["runs_here"] == (t["missing"] == "") for t in targets)
    try:
        for t in targets:  # every target this CPU runs gives the same outputs within float32's rounding
            if t["runs_here"]:
                blocklstm.set_cpu_target(t["name"])
                assert blocklstm.cpu_target_in_use() == t["name"] and blocklstm.cpu_target_pinned()
                np.testing.assert_allclose(blocklstm.block_lstm(4, **a).h, want.h, atol=1e-6, err_msg=t["name"])
            else:
                with pytest.raises(ValueError, match=f"CPU target '{re.escape(t['name'])}' .* which this CPU lacks"):
                    blocklstm.set_cpu_target(t["name"])
    finally:
        blocklstm.set_cpu_target("")
    assert not blocklstm.cpu_target_pinned()
    # unpinned: the first production target this CPU runs whose table is for it (tuned_for '' or this CPU)
    best = next(t["name"] for t in targets if t["runs_here"] and not t["check_only"] and t["tuned_for_this_cpu"])
    assert blocklstm.cpu_target_in_use() == best
    assert all(t["tuned_for_this_cpu"] for t in targets if t["tuned_for"] == "")
    blocklstm.set_host_cache_limit(0)
    assert blocklstm.host_cache_bytes() == 0
    blocklstm.set_host_cache_limit(1 << 30)
    blocklstm.cuda_release_memory()  # bound; with or without a device, no error and later calls run
    stats = blocklstm.cuda_graph_stats()
    assert sorted(stats) == ["captures", "direct", "failures", "launches", "updates"]
    assert all(type(v) is int and v >= 0 for v in stats.values()), stats
    blocklstm.block_lstm(4, **a)
    assert blocklstm.cuda_graph_stats() == stats  # a CPU call runs no CUDA time loop
    np.testing.assert_allclose(blocklstm.block_lstm(4, **a).h, want.h, atol=1e-6)
    for bad, message in ((-1, "set_num_threads: threads is -1: expected 0"), (1.5, "set_num_threads: argument "
                                                                                    "'threads': expected an integer")):
        with pytest.raises(ValueError, match=re.escape(message)):
            blocklstm.set_num_threads(bad)
    with pytest.raises(ValueError, match=re.escape("set_host_cache_limit: max_bytes is -5: expected 0")):
        blocklstm.set_host_cache_limit(-5)


def test_other_dlpack_producers_get_numpy_arrays_on_the_cpu():
    class Producer:  # a DLPack producer nanobind does not know as a framework
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    a = random_inputs(np.random.default_rng(9), 3, 2, 4, 5)
    got = blocklstm.block_lstm(3, **{**a, "x": Producer(a["x"])})
    assert isinstance(got.h, np.ndarray)
    np.testing.assert_array_equal(got.h, blocklstm.block_lstm(3, **a).h)


def test_bad_seq_len_max():
    a = random_inputs(np.random.default_rng(3), 3, 2, 4, 5)
    for bad in (1.5, np.array([1.0]), np.array([1, 2])):
        with pytest.raises(ValueError, match="seq_len_max"):
            blocklstm.block_lstm(bad, **a)
    with pytest.raises(ValueError, match="seq_len_max"):
        blocklstm.block_lstm(4, **a)  # more than T
    for huge in (2 ** 70, np.array(2 ** 63, dtype=np.uint64)):  # past int64: named, not a TypeError
        with pytest.raises(ValueError, match=f"BlockLSTM: argument 'seq_len_max' is {int(huge)}: expected a value "
                                             r"in \[0, T\] = \[0, 3\]"):
            blocklstm.block_lstm(huge, **a)


@pytest.mark.parametrize("T, B", [(0, 2), (3, 0)])
def test_empty_arrays(T, B):
    # NumPy gives empty arrays any strides (often 0): they are still dense.
    a = random_inputs(np.random.default_rng(4), T, B, 3, 4)
    out = blocklstm.block_lstm(0, **a)
    assert out.h.shape == (T, B, 4) and not out.h.any()
    grad = blocklstm.block_lstm_grad(0, **a, **out._asdict(), cs_grad=out.cs, h_grad=out.h)
    assert grad.w_grad.shape == (7, 16) and not grad.w_grad.any()


def test_read_only_inputs():
    a = random_inputs(np.random.default_rng(5), 3, 2, 4, 5)
    want = blocklstm.block_lstm(3, **a)
    for v in a.values():
        v.flags.writeable = False
    got = blocklstm.block_lstm(3, **a)
    for name in want._fields:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


def test_arrays_dlpack_cannot_describe_say_why():
    a = random_inputs(np.random.default_rng(6), 3, 2, 4, 5)
    with pytest.raises(ValueError, match="argument 'x' has dtype >f4, not in this machine's byte order"):
        blocklstm.block_lstm(3, **{**a, "x": a["x"].astype(">f4")})
    raw = np.zeros(6 * 20, np.uint8)
    odd = np.lib.stride_tricks.as_strided(raw.view(np.float32)[:1], shape=(20,), strides=(6,))
    with pytest.raises(ValueError, match=r"argument 'b' has strides \(6,\) that are not whole elements"):
        blocklstm.block_lstm(3, **{**a, "b": odd})
    for dtype, name in ((np.bool_, "bool"), (np.complex64, "complex64"), (np.int32, "int32")):
        with pytest.raises(ValueError, match=f"argument 'b': expected float32, float16 or bfloat16 data, got {name}$"):
            blocklstm.block_lstm(3, **{**a, "b": a["b"].astype(dtype)})


def test_reverse_sequence_reverses_each_row_within_its_length():
    x = np.random.default_rng(5).standard_normal((6, 4, 3)).astype(np.float32)
    lengths = [6, 0, 2, 5]
    out = blocklstm.reverse_sequence(x, np.array(lengths, np.int32))
    for b, n in enumerate(lengths):
        np.testing.assert_array_equal(out[:n, b], x[:n, b][::-1])
        np.testing.assert_array_equal(out[n:, b], x[n:, b])
    np.testing.assert_array_equal(blocklstm.reverse_sequence(out, lengths), x)
    with pytest.raises(ValueError, match=r"ReverseSequence: argument 'seq_lengths' has 7 at \[0\]: expected a value in \[0, 6\]"):
        blocklstm.reverse_sequence(x, [7, 0, 0, 0])
