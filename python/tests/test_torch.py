"""blocklstm.torch: the custom ops (opcheck, TF's gradients against finite differences), the LSTM
module against nn.LSTM, torch.compile, and bad input."""
import os

import pytest
from conftest import cuda_skip_reason, devices as all_devices, import_torch

torch = import_torch("the PyTorch suites")
import blocklstm  # noqa: E402
import blocklstm.torch as bt  # noqa: E402
from torch_reference import reference_module  # noqa: E402


CUDA_SKIP = cuda_skip_reason(torch)
needs_cuda = pytest.mark.skipif(CUDA_SKIP is not None, reason=str(CUDA_SKIP))
devices = all_devices(torch)


@needs_cuda
def test_blocklstm_finds_the_cuda_device_torch_sees():
    assert blocklstm.cuda_available(), f"torch sees a CUDA device, blocklstm none: {blocklstm.cuda_unavailable_reason()}"


def test_cpu_kernels_run_on_torchs_openmp_threads():
    """Importing blocklstm.torch moved the kernels' loops onto torch's OpenMP workers (which would
    otherwise spin on the cores after each torch op); the results are those of the own pool."""
    if not torch.backends.openmp.is_available():
        pytest.skip("this torch runs without OpenMP: the kernels keep the library's own pool")
    if "BLOCKLSTM_THREAD_POOL" in os.environ:
        pytest.skip(f"BLOCKLSTM_THREAD_POOL={os.environ['BLOCKLSTM_THREAD_POOL']} overrides the choice")
    assert blocklstm.thread_pool_in_use().startswith("openmp (lib"), blocklstm.thread_pool_in_use()
    args = inputs(20, 9, 7, 16)
    on_openmp = torch.ops.blocklstm.block_lstm(20, *args)
    try:
        blocklstm.set_thread_pool("own")
        assert blocklstm.thread_pool_in_use() == "own"
        on_own = torch.ops.blocklstm.block_lstm(20, *args)
    finally:
        blocklstm.set_thread_pool("openmp")
    for a, b in zip(on_openmp, on_own):
        assert torch.equal(a, b)
    for bad in ("OpenMP", "halide", 3):
        with pytest.raises(ValueError, match="set_thread_pool: pool is .*expected \"own\" or \"openmp\""):
            blocklstm.set_thread_pool(bad)


def inputs(T, B, I, H, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    u = lambda *s, scale=1.0: (scale * (2 * torch.rand(*s, generator=g) - 1)).to(dtype).to(device)
    return [u(T, B, I), u(B, H), u(B, H), u(I + H, 4 * H, scale=(I + H) ** -0.5), u(H), u(H), u(H), u(4 * H)]


@pytest.mark.parametrize("device", devices)
@pytest.mark.parametrize("peephole", [False, True])
def test_opcheck_sequence_ops(device, peephole):
    args = inputs(4, 3, 5, 6, device=device)
    for op in (torch.ops.blocklstm.block_lstm.default, torch.ops.blocklstm.block_lstm_v2.default):
        extra = (1.0, 3.0) if op is torch.ops.blocklstm.block_lstm.default else (0.5,)
        torch.library.opcheck(op, (4, *[a.requires_grad_() for a in args], *extra, peephole))


def test_opcheck_cell_op():
    T, B, I, H = 1, 3, 5, 6
    x, *rest = inputs(T, B, I, H)
    torch.library.opcheck(torch.ops.blocklstm.lstm_block_cell.default,
                          (x[0].requires_grad_(), *[a.requires_grad_() for a in rest], 1.0, 3.0, True))


@pytest.mark.parametrize("op, peephole", [("block_lstm", True), ("block_lstm_v2", True),
                                          ("block_lstm", False), ("lstm_block_cell", True)])
def test_gradients_match_finite_differences_of_the_forward(op, peephole):
    """A directional derivative of loss = sum(h * r) + sum(cs * s): autograd's (TF's gradient)
    against central differences of our forward, all in float32 (step 1e-2: error ~1e-4 of it).
    The clip is inactive (10): TF's gradient ignores an active clip, which differences would see."""
    T, B, I, H = 5, 3, 4, 6
    args = inputs(T, B, I, H, seed=3)
    cell = op == "lstm_block_cell"
    if cell:
        args[0] = args[0][0]
    fn = getattr(torch.ops.blocklstm, op)
    call = (lambda a: fn(*a, 1.0, 10.0, peephole)) if cell else (
        (lambda a: fn(T, *a, 1.0, 10.0, peephole)) if op == "block_lstm" else (lambda a: fn(T, *a, 10.0, peephole)))
    g = torch.Generator().manual_seed(5)
    out = call(args)
    r, s = torch.randn(out[6].shape, generator=g), torch.randn(out[1].shape, generator=g)
    loss = lambda a: (call(a)[6] * r).sum() + (call(a)[1] * s).sum()
    leaves = [a.clone().requires_grad_() for a in args]
    loss(leaves).backward()
    for k, leaf in enumerate(leaves):
        if not peephole and k in (4, 5, 6):
            assert not leaf.grad.any()  # TF's peephole grads are zero without peepholes
            continue
        v = torch.randn(leaf.shape, generator=g)
        eps = 1e-2
        plus = [a + eps * v if j == k else a for j, a in enumerate(args)]
        minus = [a - eps * v if j == k else a for j, a in enumerate(args)]
        fd = (loss(plus) - loss(minus)).item() / (2 * eps)
        analytic = (leaf.grad * v).sum().item()
        assert abs(fd - analytic) <= 2e-3 * max(1.0, abs(fd)), (k, fd, analytic)


@pytest.mark.parametrize("batch_first", [False, True])
def test_module_matches_nn_lstm(batch_first):
    torch.manual_seed(0)
    ref = torch.nn.LSTM(12, 20, batch_first=batch_first)
    ours = bt.LSTM(12, 20, batch_first=batch_first)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(4, 7, 12) if batch_first else torch.randn(7, 4, 12)  # T = 7, B = 4
    h0, c0 = torch.randn(1, 4, 20), torch.randn(1, 4, 20)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    (y1, (h1, c1)), (y2, (h2, c2)) = ours(xs[0], (h0, c0)), ref(xs[1], (h0, c0))
    for a, b in ((y1, y2), (h1, h2), (c1, c2)):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    (y1.square().sum() + c1.sum()).backward()
    (y2.square().sum() + c2.sum()).backward()
    torch.testing.assert_close(xs[0].grad, xs[1].grad, atol=1e-5, rtol=0)
    for name, p in ref.named_parameters():
        torch.testing.assert_close(getattr(ours, name).grad, p.grad, atol=1e-5, rtol=0, msg=name)


def test_module_on_an_empty_batch_like_nn_lstm():
    # An empty batch has zero strides in torch: still dense, as nn.LSTM takes it.
    x = torch.randn(5, 0, 3, requires_grad=True)
    y, (h, c) = bt.LSTM(3, 4)(x)
    assert y.shape == torch.nn.LSTM(3, 4)(x)[0].shape == (5, 0, 4)
    assert h.shape == c.shape == (1, 0, 4)
    y.sum().backward()
    assert x.grad.shape == x.shape


def test_module_float16_close_to_nn_lstm_float32():
    torch.manual_seed(1)
    ref = torch.nn.LSTM(16, 24)
    ours = bt.LSTM(16, 24, dtype=torch.float16)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(6, 3, 16)
    y, _ = ours(x.half())
    assert y.dtype == torch.float16
    torch.testing.assert_close(y.float(), ref(x)[0], atol=4e-3, rtol=0)


def test_module_bfloat16_against_nn_lstm_in_bfloat16_and_float32():
    """blocklstm.torch.LSTM(dtype=torch.bfloat16) and .to(torch.bfloat16), two layers bidirectional
    with nn.LSTM's weights: outputs, h_n, c_n and the input and weight gradients against nn.LSTM in
    float32 (within bfloat16's rounding: 2^-8 per stored value, carried through 6 steps and two
    layers) and against nn.LSTM in bfloat16 (whose own CPU kernels round differently, so the same
    bound)."""
    torch.manual_seed(3)
    ref = torch.nn.LSTM(8, 12, num_layers=2, bidirectional=True)
    ours = bt.LSTM(8, 12, num_layers=2, bidirectional=True, dtype=torch.bfloat16)
    ours.load_state_dict(ref.state_dict())
    assert all(p.dtype == torch.bfloat16 for p in ours.parameters())
    also = bt.LSTM(8, 12, num_layers=2, bidirectional=True)
    also.load_state_dict(ref.state_dict())
    also = also.to(torch.bfloat16)
    x = torch.randn(6, 3, 8)
    ref16 = torch.nn.LSTM(8, 12, num_layers=2, bidirectional=True).to(torch.bfloat16)
    ref16.load_state_dict(ref.state_dict())

    def run(m, dtype):
        xi = x.to(dtype).detach().clone().requires_grad_()
        y, (h, c) = m(xi)
        (y.float().sum() + h.float().sum() + 0.5 * c.float().sum()).backward()
        return y, h, c, xi.grad, m.weight_ih_l1_reverse.grad, m.weight_hh_l0.grad

    want32 = run(ref, torch.float32)
    want16 = run(ref16, torch.bfloat16)
    got = run(ours, torch.bfloat16)
    got_to = run(also, torch.bfloat16)
    names = ("output", "h_n", "c_n", "x.grad", "weight_ih_l1_reverse.grad", "weight_hh_l0.grad")
    for name, g, g_to, w32, w16 in zip(names, got, got_to, want32, want16):
        assert g.dtype == torch.bfloat16, name
        torch.testing.assert_close(g, g_to, atol=0, rtol=0, msg=name)  # the same module either way
        scale = max(1.0, w32.abs().max().item())
        assert (g.float() - w32).abs().max().item() <= 3.2e-2 * scale, (name, (g.float() - w32).abs().max())
        assert (g.float() - w16.float()).abs().max().item() <= 3.2e-2 * scale, (name, (g.float() - w16.float()).abs().max())


def test_peephole_module_loads_nn_lstm_state_and_learns_peepholes():
    ref = torch.nn.LSTM(5, 8)
    ours = bt.LSTM(5, 8, peephole=True, forget_bias=1.0, cell_clip=2.0)
    assert set(ours.state_dict()) == set(ref.state_dict()) | {"weight_ci_l0", "weight_cf_l0", "weight_co_l0"}
    ours.load_state_dict(ref.state_dict())
    y, (h, c) = ours(torch.randn(4, 2, 5))
    y.sum().backward()
    assert ours.weight_ci_l0.grad.abs().sum() > 0 and ours.weight_co_l0.grad.abs().sum() > 0


@pytest.mark.parametrize("proj_size", [0, 4], ids=["no_projection", "proj_size_4"])
@pytest.mark.parametrize("dtype, fwd_tol, grad_tol", [(torch.float32, 1e-5, 1e-5), (torch.float16, 4e-3, 1e-2),
                                                      (torch.bfloat16, 6.25e-2, 3.2e-2)],
                         ids=["float32", "float16", "bfloat16"])
def test_module_with_tf_options_matches_the_float64_reference(dtype, fwd_tol, grad_tol, proj_size):
    """Peepholes (three different vectors), forget_bias and an active cell_clip, with and without a
    projection, against reference_module: the outputs, h_n, c_n and the gradient of every input and
    parameter. Errors are max |ours - reference| / max(1, max |reference|); the tolerances are the
    C++ suites' (one rounding per stored value, float32 sums)."""
    T, B, I, H = 7, 3, 5, 6
    R = proj_size or H  # h's size
    g = torch.Generator().manual_seed(11)
    m = bt.LSTM(I, H, proj_size=proj_size, peephole=True, forget_bias=1.0, cell_clip=0.6, dtype=dtype)
    with torch.no_grad():
        for name, p in m.named_parameters():
            scale = 1.0 if name.startswith("weight_c") else 0.8
            p.copy_((scale * (2 * torch.rand(p.shape, generator=g) - 1)).to(dtype))
    u = lambda *shape: (2 * torch.rand(*shape, generator=g) - 1).to(dtype)
    x, h0, c0 = u(T, B, I), u(1, B, R), u(1, B, H)
    r, s_h, s_c = torch.randn(T, B, R, generator=g), torch.randn(1, B, R, generator=g), torch.randn(1, B, H, generator=g)

    ref_y, ref_h, ref_c, leaves, clipped = reference_module(m, x, h0, c0)
    assert clipped, "the clip never acted: the test would not see cell_clip"
    ((ref_y * r.double()).sum() + (ref_h * s_h.double()).sum() + (ref_c * s_c.double()).sum()).backward()

    ours_in = [t.clone().requires_grad_() for t in (x, h0, c0)]
    y, (h_n, c_n) = m(ours_in[0], (ours_in[1], ours_in[2]))
    ((y.float() * r).sum() + (h_n.float() * s_h).sum() + (c_n.float() * s_c).sum()).backward()

    def error(ours, want):
        return ((ours.double() - want).abs().max() / max(1.0, want.abs().max().item())).item()

    for name, ours, want in (("output", y, ref_y), ("h_n", h_n, ref_h), ("c_n", c_n, ref_c)):
        assert ours.dtype == dtype and error(ours.detach(), want.detach()) <= fwd_tol, (name, error(ours.detach(), want))
    grads = dict(zip(("x", "h0", "c0"), (t.grad for t in ours_in)))
    grads.update((n, p.grad) for n, p in m.named_parameters())
    assert set(grads) == set(leaves) and len(grads) == 10 + bool(proj_size)
    for name, grad in grads.items():
        assert error(grad, leaves[name].grad) <= grad_tol, (name, error(grad, leaves[name].grad))


def test_torch_compile_of_a_module_call():
    torch.manual_seed(2)
    m = bt.LSTM(6, 10, peephole=True)
    x = torch.randn(5, 2, 6)
    eager = m(x)[0]
    compiled = torch.compile(m, fullgraph=True)(x)[0]  # inductor
    torch.testing.assert_close(compiled, eager, atol=0, rtol=0)


def test_export_traces_the_op():
    m = bt.LSTM(6, 10)
    ep = torch.export.export(m, (torch.randn(5, 2, 6),))
    assert "blocklstm.block_lstm_v2" in str(ep.graph)


def test_export_keeps_time_and_batch_symbolic():
    # seq_len_max is a SymInt and the fake kernels compute shapes from the registry's, symbolically:
    # one exported program runs every (T, B), as nn.LSTM's.
    T, B = torch.export.Dim("T"), torch.export.Dim("B")
    m = bt.LSTM(6, 10, peephole=True)
    ep = torch.export.export(m, (torch.randn(5, 3, 6),), dynamic_shapes=({0: T, 1: B},))
    for shape in ((7, 2, 6), (3, 5, 6)):
        x = torch.randn(*shape)
        torch.testing.assert_close(ep.module()(x)[0], m(x)[0], atol=0, rtol=0)


def test_module_takes_nn_lstm_arguments_in_order_and_refuses_what_it_cannot_be():
    m = bt.LSTM(4, 5, 2, False, True, 0.25, True)  # nn.LSTM's positional order
    assert (m.num_layers, m.bias, m.batch_first, m.dropout, m.bidirectional) == (2, False, True, 0.25, True)
    assert not m.peephole
    for kwargs in ({"num_layers": 0}, {"num_layers": True}, {"proj_size": 5}, {"proj_size": -1}):
        name = next(iter(kwargs))
        with pytest.raises(ValueError, match=f"LSTM: {name}=.* is not supported"):
            bt.LSTM(4, 5, **kwargs)
    with pytest.raises(ValueError, match="dropout should be a number in range"):
        bt.LSTM(4, 5, 2, dropout=1.5)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        bt.LSTM(4, 5, dropout=0.5)


def test_module_checks_its_input_and_state_as_nn_lstm():
    torch.manual_seed(3)
    ref, ours = torch.nn.LSTM(4, 5), bt.LSTM(4, 5)
    ours.load_state_dict(ref.state_dict())
    x, h0, c0 = torch.randn(6, 4), torch.randn(1, 5), torch.randn(1, 5)  # unbatched
    (y1, (h1, c1)), (y2, (h2, c2)) = ours(x, (h0, c0)), ref(x, (h0, c0))
    for a, b in ((y1, y2), (h1, h2), (c1, c2)):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(1, 2, 5\), got \[1, 5, 2\]"):
        ours(torch.randn(6, 2, 4), (torch.randn(1, 5, 2), torch.randn(1, 5, 2)))
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 4, got 7"):
        ours(torch.randn(6, 2, 7))
    for T in (3, 0):  # h_n and c_n are tensors of their own, also when no step runs
        y, (h, c) = ours(torch.randn(T, 2, 4))
        assert h._base is None and c._base is None and h.data_ptr() != c.data_ptr()


def test_second_derivatives_are_refused_not_zero():
    m = bt.LSTM(4, 5, peephole=True)
    x = torch.randn(5, 2, 4, requires_grad=True)
    g, = torch.autograd.grad(m(x)[0].square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="a second derivative .* is not supported"):
        torch.autograd.grad(g.sum(), x)


@pytest.mark.parametrize("change, message", [
    (lambda a: a.__setitem__(0, a[0].double()), "argument 'x': expected float32, float16 or bfloat16 data, got float64"),
    (lambda a: a.__setitem__(0, a[0].transpose(0, 1).contiguous().transpose(0, 1)), "argument 'x' is not C-contiguous"),
    (lambda a: a.__setitem__(3, a[3][:, :-4]), "argument 'w'"),
    (lambda a: a.__setitem__(7, a[7].half()), "BlockLSTM"),
])
def test_bad_input_is_a_value_error_and_nothing_runs(change, message):
    args = inputs(3, 2, 4, 5)
    change(args)
    with pytest.raises(ValueError, match=message):
        torch.ops.blocklstm.block_lstm(3, *args)


def test_a_meta_input_among_cpu_ones_is_refused_not_uninitialised_outputs():
    # The dispatcher runs the fake kernel when any input is a meta tensor; it returned empty CPU
    # tensors (uninitialised memory) for a CPU x.
    args = inputs(3, 2, 4, 5)
    args[1] = args[1].to("meta")
    with pytest.raises(ValueError, match="BlockLSTM: argument 'cs_prev' is on meta: expected cpu, as 'x'"):
        torch.ops.blocklstm.block_lstm(3, *args)
    meta = [a.to("meta") for a in inputs(3, 2, 4, 5)]  # all meta: shapes only, as torch.compile's tracing
    assert torch.ops.blocklstm.block_lstm(3, *meta)[6].shape == (3, 2, 5)


def test_plain_functions_say_why_a_torch_tensor_is_refused():
    import blocklstm
    names = ["x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b"]
    args = dict(zip(names, inputs(3, 2, 4, 5)))
    with pytest.raises(ValueError, match="BlockLSTM: argument 'w' requires grad: expected a tensor without "
                                         "autograd \\(pass .detach\\(\\), or call the op through blocklstm.torch"):
        blocklstm.block_lstm(3, **{**args, "w": torch.nn.Parameter(args["w"])})
    with pytest.raises(ValueError, match="BlockLSTM: argument 'b' is on device meta: expected a CPU or CUDA tensor"):
        blocklstm.block_lstm(3, **{**args, "b": args["b"].to("meta")})
    assert isinstance(blocklstm.block_lstm(3, **args).h, torch.Tensor)  # x's framework


def test_module_refuses_dtype_and_state_mismatches_as_nn_lstm():
    ours = bt.LSTM(4, 5)
    ours.flatten_parameters()  # nn.LSTM's, called by ported code: nothing to do
    with pytest.raises(ValueError, match=r"input dtype \(torch.float64\) does not match weight dtype \(torch.float32\)"):
        ours(torch.randn(3, 2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"input dtype \(torch.float64\)"):  # nn.LSTM says the same
        torch.nn.LSTM(4, 5)(torch.randn(3, 2, 4, dtype=torch.float64))
    h0 = torch.zeros(1, 2, 5)
    with pytest.raises(RuntimeError, match=r"Expected hidden\[1\] to be torch.float32 on cpu as the input, "
                                           r"got torch.float16 on cpu"):
        ours(torch.randn(3, 2, 4), (h0, h0.half()))


@needs_cuda
def test_mixed_devices_are_a_value_error():
    args = inputs(3, 2, 4, 5)
    args[1] = args[1].cuda()
    with pytest.raises(ValueError, match="argument 'cs_prev' is on cuda"):
        torch.ops.blocklstm.block_lstm(3, *args)
