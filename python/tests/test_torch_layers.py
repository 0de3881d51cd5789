"""blocklstm.torch.LSTM as nn.LSTM in every configuration it takes (layers, directions, no biases,
given states, packed and variable-length batches, dropout between layers), and LSTMCell as
nn.LSTMCell: outputs, final states and every gradient against nn's with the same weights."""
import copy

import pytest
from conftest import devices, import_torch

torch = import_torch("the PyTorch layer suites")
import blocklstm.torch as bt  # noqa: E402
from torch_reference import reference_module  # noqa: E402

nn = torch.nn
# nn.LSTM with proj_size says its oneDNN path cannot take projections (it runs its own instead)
pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
TOL = 1e-5  # float32: nn's and ours differ in the order of their sums only
torch.backends.cudnn.allow_tf32 = False  # cuDNN's float32 as float32, as ours
torch.backends.cuda.matmul.allow_tf32 = False


DEVICES = devices(torch)


def twins(I, H, device="cpu", **kwargs):
    """An nn.LSTM and our LSTM with the same weights."""
    ref = nn.LSTM(I, H, device=device, **kwargs)
    ours = bt.LSTM(I, H, device=device, **kwargs)
    ours.load_state_dict(ref.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    return ref, ours


def weighted_loss(outs):
    """A loss that weighs every output element differently (the same weights for every module)."""
    return sum((o * torch.randn(o.shape, generator=torch.Generator().manual_seed(k)).to(o.device)).sum()
               for k, o in enumerate(outs))


def backward_both(outs_ref, outs_ours):
    for outs in (outs_ref, outs_ours):
        weighted_loss(outs).backward()


def float64_grads(ref, x, state):
    """nn.LSTM's parameter gradients in float64 on the CPU, of weighted_loss at (x, state)."""
    m = copy.deepcopy(ref).to("cpu", torch.float64)
    m.zero_grad(set_to_none=True)
    y, (h, c) = m(x.detach().cpu().double(), tuple(t.detach().cpu().double() for t in state) if state else None)
    weighted_loss((y, h, c)).backward()
    return {n: p.grad for n, p in m.named_parameters()}


def assert_grads_equal(ref, ours, float64=None):
    """Every parameter's gradient: ours against nn's (float32, TOL), or, given nn's in float64
    (float64_grads), ours against those, within TOL or twice nn's own float32 error, whichever is
    larger. On CUDA, cuDNN's float32 weight gradients and ours differed by up to 3e-5 where they are
    about 2.4 (an H100; weight_ih_l0 under two layers), while on the CPU nn.LSTM's float32 is
    within 6e-7 of float64: one side's rounding, which the float64 comparison tells apart."""
    for name, p in ref.named_parameters():
        q = getattr(ours, name)
        assert q.grad is not None, name
        if float64 is None:
            torch.testing.assert_close(q.grad, p.grad, atol=TOL, rtol=0, msg=lambda m: f"{name}: {m}")
            continue
        want = float64[name]
        nn_error = (p.grad.cpu().double() - want).abs().max().item()
        torch.testing.assert_close(q.grad.cpu().double(), want, atol=max(TOL, 2 * nn_error), rtol=0,
                                   msg=lambda m: f"{name} against float64 (nn.LSTM's error {nn_error:.2e}): {m}")


CONFIGS = [
    dict(num_layers=2),
    dict(bidirectional=True),
    dict(num_layers=2, bidirectional=True),
    dict(num_layers=3, bias=False),
    dict(num_layers=2, bidirectional=True, batch_first=True),
    dict(num_layers=2, bidirectional=True, bias=False, batch_first=True),
    dict(proj_size=3),
    dict(num_layers=2, bidirectional=True, proj_size=3),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kwargs", CONFIGS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
@pytest.mark.parametrize("given_state", [False, True], ids=["zero_state", "given_state"])
def test_module_matches_nn_lstm(kwargs, given_state, device):
    torch.manual_seed(0)
    T, B, I, H = 6, 4, 5, 7
    ref, ours = twins(I, H, device, **kwargs)
    LD = ref.num_layers * (2 if ref.bidirectional else 1)
    R = ref.proj_size or H  # h's size: the projection's, or the cell's
    x = (torch.randn(B, T, I) if ref.batch_first else torch.randn(T, B, I)).to(device)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    states = [[torch.randn(LD, B, size, device=device).requires_grad_() for size in (R, H)] for _ in range(2)] \
        if given_state else None
    if given_state:
        with torch.no_grad():
            states[1][0].copy_(states[0][0]), states[1][1].copy_(states[0][1])
    y1, (h1, c1) = ref(xs[0], tuple(states[0]) if given_state else None)
    y2, (h2, c2) = ours(xs[1], tuple(states[1]) if given_state else None)
    for a, b in ((y1, y2), (h1, h2), (c1, c2)):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a, atol=TOL, rtol=0)
    backward_both((y1, h1, c1), (y2, h2, c2))
    torch.testing.assert_close(xs[1].grad, xs[0].grad, atol=TOL, rtol=0)
    if given_state:
        for k in range(2):
            torch.testing.assert_close(states[1][k].grad, states[0][k].grad, atol=TOL, rtol=0)
    if device == "cpu":  # on CUDA, cuDNN's rounding differs by more than TOL (assert_grads_equal)
        assert_grads_equal(ref, ours)
    assert_grads_equal(ref, ours, float64_grads(ref, xs[0], states[0] if given_state else None))


def test_unbatched_input_of_a_two_layer_bidirectional_module():
    torch.manual_seed(1)
    ref, ours = twins(3, 4, num_layers=2, bidirectional=True)
    x, h0, c0 = torch.randn(5, 3), torch.randn(4, 4), torch.randn(4, 4)
    (y1, (h1, c1)), (y2, (h2, c2)) = ref(x, (h0, c0)), ours(x, (h0, c0))
    for a, b in ((y1, y2), (h1, h2), (c1, c2)):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a, atol=TOL, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grad", [False, True])
def test_nan_and_infinite_inputs_give_what_nn_lstm_gives(grad, device):
    """A NaN in the input reaches its row's outputs from its step on (and every later layer's), as
    in nn.LSTM and TF, and +-inf or huge values saturate the gates as there: the kernels' exp had
    turned NaN and +inf into 0 (finite outputs from a NaN, sigmoid(-inf) = 1)."""
    torch.manual_seed(2)
    ref, ours = twins(3, 5, device=device, num_layers=2, bidirectional=True)
    x = torch.randn(4, 4, 3, device=device)
    x[1, 0, 0], x[2, 1, 1], x[1, 2, 2], x[0, 3, 0] = float("nan"), float("inf"), -float("inf"), 1e12
    with torch.set_grad_enabled(grad):
        (y1, (h1, c1)), (y2, (h2, c2)) = ref(x), ours(x)
    assert y2[:, 0].isnan().any() and not y2[:, 1:].isnan().any()
    for a, b in ((y1, y2), (h1, h2), (c1, c2)):
        torch.testing.assert_close(b, a, atol=TOL, rtol=0, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("enforce_sorted", [False, True])
def test_packed_sequence_in_and_out_as_nn_lstm(enforce_sorted, device):
    torch.manual_seed(2)
    T, I, H = 7, 3, 5
    lengths = torch.tensor([7, 5, 5, 2, 1]) if enforce_sorted else torch.tensor([2, 7, 1, 5, 5])
    ref, ours = twins(I, H, device, num_layers=2, bidirectional=True)
    x = torch.randn(T, len(lengths), I, device=device)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    h0, c0 = torch.randn(4, len(lengths), H, device=device), torch.randn(4, len(lengths), H, device=device)
    packs = [nn.utils.rnn.pack_padded_sequence(t, lengths, enforce_sorted=enforce_sorted) for t in xs]
    y1, (h1, c1) = ref(packs[0], (h0, c0))
    y2, (h2, c2) = ours(packs[1], (h0, c0))
    assert isinstance(y2, nn.utils.rnn.PackedSequence)
    assert torch.equal(y2.batch_sizes, y1.batch_sizes)
    for a, b in ((y1.sorted_indices, y2.sorted_indices), (y1.unsorted_indices, y2.unsorted_indices)):
        assert (a is None and b is None) or torch.equal(a, b)
    for a, b in ((y1.data, y2.data), (h1, h2), (c1, c2)):
        torch.testing.assert_close(b, a, atol=TOL, rtol=0)
    backward_both((y1.data, h1, c1), (y2.data, h2, c2))
    torch.testing.assert_close(xs[1].grad, xs[0].grad, atol=TOL, rtol=0)
    assert_grads_equal(ref, ours)


@pytest.mark.parametrize("batch_first,proj_size", [(False, 0), (True, 0), (False, 3)])
def test_padded_batch_with_lengths_runs_as_nn_lstm_runs_it_packed(batch_first, proj_size):
    """lengths=: no packing, no sorting; outputs past a row's length are zeros, h_n and c_n are the
    state at its last step, the reverse direction runs the row reversed within its length. A row of
    length 0 (which nn.LSTM cannot pack) keeps h_0 and c_0 and has no output."""
    torch.manual_seed(3)
    T, I, H = 6, 4, 5
    lengths = torch.tensor([3, 6, 0, 1])
    B = len(lengths)
    ref, ours = twins(I, H, num_layers=2, bidirectional=True, batch_first=batch_first, proj_size=proj_size)
    x = torch.randn(B, T, I) if batch_first else torch.randn(T, B, I)
    h0, c0 = torch.randn(4, B, proj_size or H), torch.randn(4, B, H)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    y, (h_n, c_n) = ours(xs[1], (h0, c0), lengths=lengths)
    rows = lengths > 0  # the rows nn.LSTM can take
    sub = (lambda t: t[rows]) if batch_first else (lambda t: t[:, rows])
    packed = nn.utils.rnn.pack_padded_sequence(sub(xs[0]), lengths[rows], batch_first=batch_first,
                                               enforce_sorted=False)
    y_ref, (h_ref, c_ref) = ref(packed, (h0[:, rows].contiguous(), c0[:, rows].contiguous()))
    y_ref, _ = nn.utils.rnn.pad_packed_sequence(y_ref, batch_first=batch_first, total_length=T)
    torch.testing.assert_close(sub(y), y_ref, atol=TOL, rtol=0)
    torch.testing.assert_close(h_n[:, rows], h_ref, atol=TOL, rtol=0)
    torch.testing.assert_close(c_n[:, rows], c_ref, atol=TOL, rtol=0)
    zero_row = (y[~rows] if batch_first else y[:, ~rows])
    assert torch.equal(zero_row, torch.zeros_like(zero_row))
    assert torch.equal(h_n[:, ~rows], h0[:, ~rows]) and torch.equal(c_n[:, ~rows], c0[:, ~rows])
    backward_both((y_ref, h_ref, c_ref), (sub(y), h_n[:, rows], c_n[:, rows]))
    torch.testing.assert_close(sub(xs[1].grad), sub(xs[0].grad), atol=TOL, rtol=0)
    assert torch.equal(xs[1].grad[~rows] if batch_first else xs[1].grad[:, ~rows],
                       torch.zeros_like(xs[1].grad[~rows] if batch_first else xs[1].grad[:, ~rows]))
    assert_grads_equal(ref, ours)


def test_lengths_that_cannot_be_are_refused_naming_them():
    m = bt.LSTM(3, 4)
    x = torch.randn(5, 2, 3)
    for lengths, message in ((torch.tensor([5, 6]), r"lengths: expected each in \[0, 5\]"),
                             (torch.tensor([5, -1]), r"lengths: expected each in \[0, 5\]"),
                             (torch.tensor([5]), r"lengths: expected an int32 or int64 tensor of shape \[2\]"),
                             (torch.tensor([5.0, 2.0]), "lengths: expected an int32 or int64 tensor"),
                             ([5, 2], "lengths: expected an int32 or int64 tensor")):
        with pytest.raises(ValueError, match=message):
            m(x, lengths=lengths)
    packed = nn.utils.rnn.pack_sequence([torch.randn(3, 3)])
    with pytest.raises(ValueError, match="lengths is for a padded input"):
        m(packed, lengths=torch.tensor([3]))


def test_dropout_acts_between_layers_in_training_only():
    torch.manual_seed(4)
    x = torch.randn(5, 3, 4)
    ref, ours = twins(4, 6, num_layers=2, dropout=1.0)  # p = 1: layer 2 sees zeros, in both
    ref.train(), ours.train()
    torch.testing.assert_close(ours(x)[0], ref(x)[0], atol=TOL, rtol=0)
    ref.eval(), ours.eval()  # no dropout at all
    torch.testing.assert_close(ours(x)[0], ref(x)[0], atol=TOL, rtol=0)
    half = bt.LSTM(4, 6, num_layers=2, dropout=0.5)
    half.load_state_dict(ref.state_dict())
    half.train()
    assert not torch.allclose(half(x)[0], ref(x)[0], atol=1e-3)  # p = 0.5 changes the output ...
    half.eval()
    torch.testing.assert_close(half(x)[0], ref(x)[0], atol=TOL, rtol=0)  # ... in training only


def test_weights_reused_for_inference_follow_in_place_updates():
    """Without a gradient the converted weights are kept between calls while the parameters are
    unchanged; an in-place update (an optimiser step, load_state_dict) is seen by the next call."""
    torch.manual_seed(5)
    ref, ours = twins(4, 6, num_layers=2, bidirectional=True)
    x = torch.randn(5, 3, 4)
    with torch.no_grad():
        torch.testing.assert_close(ours(x)[0], ref(x)[0], atol=TOL, rtol=0)
        for p in list(ours.parameters()) + list(ref.parameters()):
            p.mul_(0.5)
        torch.testing.assert_close(ours(x)[0], ref(x)[0], atol=TOL, rtol=0)
        ref2 = nn.LSTM(4, 6, num_layers=2, bidirectional=True)
        ours.load_state_dict(ref2.state_dict())
        torch.testing.assert_close(ours(x)[0], ref2(x)[0], atol=TOL, rtol=0)


@pytest.mark.parametrize("kind", ["LSTM", "LSTMCell"])
def test_a_module_that_has_run_pickles_and_copies(kind):
    # torch.save of a whole module (not its state_dict), and copy.deepcopy, after calls that kept
    # converted weights: the copies run as the original, and follow their own weights.
    import io
    torch.manual_seed(7)
    m = bt.LSTM(4, 5, num_layers=2, bidirectional=True, peephole=True) if kind == "LSTM" else bt.LSTMCell(4, 5)
    x = torch.randn(3, 2, 4) if kind == "LSTM" else torch.randn(2, 4)
    y = m(x)[0]
    with torch.no_grad():
        m(x)
    buffer = io.BytesIO()
    torch.save(m, buffer)
    buffer.seek(0)
    for copied in (torch.load(buffer, weights_only=False), copy.deepcopy(m)):
        torch.testing.assert_close(copied(x)[0], y, atol=0, rtol=0)
        with torch.no_grad():
            for p in copied.parameters():
                p.mul_(0.5)
            torch.testing.assert_close(m(x)[0], y, atol=0, rtol=0)  # the original keeps its weights
            assert (copied(x)[0] - y).abs().max() > 1e-3


class _ScaledInStore(nn.Module):
    """A parametrization whose every result is a new tensor over the same memory, at the same
    version: what a parametrized weight recomputed at each call may be when the allocator hands
    back the block the last one freed."""

    def __init__(self):
        super().__init__()
        self.scale, self.store = 1.0, None

    def forward(self, X):
        if self.store is None:
            self.store = torch.empty_like(X)
        out = X.new_empty(0).set_(self.store.untyped_storage(), 0, X.shape, X.stride())
        return out.copy_(X * self.scale)


@pytest.mark.parametrize("kind", ["LSTM", "LSTMCell"])
def test_parametrized_weights_are_read_at_every_call(kind):
    # A parametrized weight (torch.nn.utils.parametrize: weight_norm, spectral_norm, ...) is a new
    # tensor at every call: the kept converted weights must not outlive it, even where the new one
    # has the old one's memory and version; and the cell finds it outside _parameters.
    import torch.nn.utils.parametrize as parametrize
    torch.manual_seed(6)
    ref, ours = getattr(nn, kind)(4, 5), getattr(bt, kind)(4, 5)
    ours.load_state_dict(ref.state_dict())
    name = "weight_hh_l0" if kind == "LSTM" else "weight_hh"
    for m in (ref, ours):
        parametrize.register_parametrization(m, name, _ScaledInStore())
    x = torch.randn(3, 2, 4) if kind == "LSTM" else torch.randn(2, 4)
    with torch.no_grad():
        for scale in (1.0, 0.5, 2.0):
            for m in (ref, ours):
                getattr(m.parametrizations, name)[0].scale = scale
            torch.testing.assert_close(ours(x)[0], ref(x)[0], atol=TOL, rtol=0, msg=lambda m: f"{scale}: {m}")
    torch.nn.utils.parametrizations.weight_norm(ref, "weight_ih" + ("_l0" if kind == "LSTM" else ""))
    torch.nn.utils.parametrizations.weight_norm(ours, "weight_ih" + ("_l0" if kind == "LSTM" else ""))
    for m in (ref, ours):
        m(x)[0].sum().backward()
    for (n, p), (_, q) in zip(ref.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=TOL, rtol=0, msg=lambda m: f"{n}: {m}")


@pytest.mark.parametrize("lengths,proj_size", [(None, 0), ([5, 2, 3], 0), ([2, 0, 5], 0), ([3, 5, 0], 2)])
def test_inference_writing_only_the_state_equals_the_autograd_path(lengths, proj_size):
    """Without a gradient the op leaves out the activations only a backward pass reads (on the CPU
    cs too, but for c_n): the result equals the one with autograd on, bit for bit, rows of length 0
    and a projection included, and stays as it was after later calls."""
    torch.manual_seed(10)
    m = bt.LSTM(4, 6, num_layers=2, bidirectional=True, peephole=True, proj_size=proj_size)
    x1, x2 = torch.randn(5, 3, 4), torch.randn(5, 3, 4)
    kw = dict(lengths=torch.tensor(lengths)) if lengths else {}
    want1 = m(x1, **kw)
    with torch.no_grad():
        got1 = m(x1, **kw)
        m(x2, **kw)
        got2 = m(x2, **kw)
    want2 = m(x2, **kw)
    for got, want in ((got1, want1), (got2, want2)):
        assert torch.equal(got[0], want[0]) and torch.equal(got[1][0], want[1][0]) and torch.equal(got[1][1], want[1][1])


@pytest.mark.parametrize("case", ["padded", "lengths", "packed", "proj_size", "no_grad"])
def test_directions_side_by_side_give_the_bits_of_one_after_the_other(case, monkeypatch):
    """On the CPU a bidirectional layer's two directions are one call of the library
    (invoke_side_by_side: at once, each on one of two threads, where the calls are small), in the
    forward and in the backward: the outputs, final states and every gradient have the bits of the
    same calls made one after the other (invoke_side_by_side replaced by two invokes)."""
    def run():
        torch.manual_seed(11)
        m = bt.LSTM(4, 6, num_layers=2, bidirectional=True, peephole=True, proj_size=3 if case == "proj_size" else 0)
        x = torch.randn(5, 3, 4, requires_grad=case != "no_grad")
        lengths = torch.tensor([5, 2, 4])
        inp = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False) if case == "packed" else x
        kw = dict(lengths=lengths) if case == "lengths" else {}
        with torch.set_grad_enabled(case != "no_grad"):
            y, (h, c) = m(inp, **kw)
        outs = [y.data if case == "packed" else y, h, c]
        if case != "no_grad":
            weighted_loss(outs).backward()
            outs += [x.grad] + [p.grad for p in m.parameters()]
        return outs

    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # two loop threads: the calls run side by side
    try:
        calls = []
        side_by_side = bt._core.invoke_side_by_side

        def counted(op, *args):
            calls.append(op)
            side_by_side(op, *args)

        monkeypatch.setattr(bt._core, "invoke_side_by_side", counted)
        got = run()

        def apart(op, seq_len_max, inputs, outputs, *attrs):
            for i, o in zip(inputs, outputs):
                bt._core.invoke(op, seq_len_max, i, o, *attrs)

        monkeypatch.setattr(bt._core, "invoke_side_by_side", apart)
        want = run()
    finally:
        torch.set_num_threads(threads)
    assert calls == ["BlockLSTMV2"] * 2 + (["BlockLSTMGradV2"] * 2 if case != "no_grad" else []), calls
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert torch.equal(g, w), k


def test_training_steps_match_nn_lstm_while_the_weights_change():
    """Three SGD steps on both modules: the kept weight conversion follows each update, and the
    gradient reaches nn's weights through it."""
    torch.manual_seed(9)
    ref, ours = twins(4, 6, num_layers=2, bidirectional=True)
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (ref, ours)]
    for step in range(3):
        x = torch.randn(5, 3, 4)
        for m, opt in zip((ref, ours), opts):
            opt.zero_grad()
            y, (h, c) = m(x)
            (y.square().sum() + c.sum()).backward()
            opt.step()
        for name, p in ref.named_parameters():
            torch.testing.assert_close(getattr(ours, name), p, atol=TOL, rtol=0, msg=f"{name} after step {step}")


def test_torch_compile_and_export_of_a_two_layer_bidirectional_module():
    torch.manual_seed(6)
    m = bt.LSTM(6, 10, num_layers=2, bidirectional=True, peephole=True)
    x = torch.randn(5, 2, 6)
    eager = m(x)[0]
    torch.testing.assert_close(torch.compile(m, fullgraph=True)(x)[0], eager, atol=0, rtol=0)
    ep = torch.export.export(m, (x,))
    torch.testing.assert_close(ep.module()(x)[0], eager, atol=0, rtol=0)
    lengths = torch.tensor([5, 3])
    torch.testing.assert_close(torch.compile(m, fullgraph=True)(x, lengths=lengths)[0], m(x, lengths=lengths)[0],
                               atol=0, rtol=0)


@pytest.mark.parametrize("kwargs", CONFIGS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_parameter_views_and_checks_as_nn_lstm(kwargs):
    # What code written for nn.LSTM reads of it: its parameters per layer and direction (an
    # initialiser, weight drop), its mode, and its argument checks with their messages.
    ref, ours = twins(4, 5, **kwargs)
    assert ours.mode == ref.mode == "LSTM"
    assert ours._all_weights == ref._all_weights
    assert ours._flat_weights_names == ref._flat_weights_names
    assert [p is q for p, q in zip(ours._flat_weights, ours.parameters())] == [True] * len(ref._flat_weights)
    assert [[p.shape for p in ps] for ps in ours.all_weights] == [[p.shape for p in ps] for ps in ref.all_weights]
    for module in (ref, ours):  # an initialiser over all_weights reaches every parameter
        for ps in module.all_weights:
            for p in ps:
                torch.nn.init.constant_(p, 0.25)
    y_ref, _ = ref(torch.ones(3, 2, 4) if not ref.batch_first else torch.ones(2, 3, 4))
    y_ours, _ = ours(torch.ones(3, 2, 4) if not ours.batch_first else torch.ones(2, 3, 4))
    torch.testing.assert_close(y_ours, y_ref, atol=TOL, rtol=0)
    x = torch.randn(2, 3, 4) if ref.batch_first else torch.randn(3, 2, 4)
    D = 2 if ref.bidirectional else 1
    h = torch.zeros(ref.num_layers * D, 2, ref.proj_size or 5)
    c = torch.zeros(ref.num_layers * D, 2, 5)
    for module in (ref, ours):
        module.check_forward_args(x, (h, c), None)
        assert module.get_expected_hidden_size(x, None) == tuple(h.shape)
        assert module.get_expected_cell_size(x, None) == tuple(c.shape)
        with pytest.raises(RuntimeError, match=r"Expected hidden\[1\] size"):
            module.check_forward_args(x, (h, c[:, :1]), None)
        with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 4, got 3"):
            module.check_input(x[..., :3], None)
        order = torch.tensor([1, 0])
        assert all(torch.equal(a, b) for a, b in zip(module.permute_hidden((h, c), order),
                                                        (h.index_select(1, order), c.index_select(1, order))))


def test_peepholes_follow_their_layer_and_direction_in_all_weights():
    m = bt.LSTM(3, 4, num_layers=2, bidirectional=True, peephole=True)
    ref = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    for ours_names, nn_names, sfx in zip(m._all_weights, ref._all_weights, ("_l0", "_l0_reverse", "_l1", "_l1_reverse")):
        assert ours_names == nn_names + ["weight_ci" + sfx, "weight_cf" + sfx, "weight_co" + sfx]
    assert len(m._flat_weights) == len(list(m.parameters()))


def test_peepholes_of_every_layer_and_direction_are_parameters_that_learn():
    m = bt.LSTM(3, 4, num_layers=2, bidirectional=True, peephole=True)
    names = {n for n, _ in m.named_parameters()}
    for sfx in ("_l0", "_l0_reverse", "_l1", "_l1_reverse"):
        assert {"weight_ci" + sfx, "weight_cf" + sfx, "weight_co" + sfx} <= names
    m.load_state_dict(nn.LSTM(3, 4, num_layers=2, bidirectional=True).state_dict())  # the peepholes keep theirs
    y, (h, c) = m(torch.randn(5, 2, 3))
    (y.sum() + c.sum()).backward()
    for sfx in ("_l0", "_l0_reverse", "_l1", "_l1_reverse"):
        assert getattr(m, "weight_ci" + sfx).grad.abs().sum() > 0, sfx


# ---- LSTMCell ------------------------------------------------------------------------------------

@pytest.mark.parametrize("bias", [True, False])
def test_cell_stepped_in_a_loop_matches_nn_lstm_cell(bias):
    torch.manual_seed(7)
    ref = nn.LSTMCell(5, 6, bias=bias)
    ours = bt.LSTMCell(5, 6, bias=bias)
    ours.load_state_dict(ref.state_dict())
    xs = torch.randn(4, 3, 5)
    state = [None, None]
    outs = [[], []]
    leaves = [xs.clone().requires_grad_() for _ in range(2)]
    for t in range(4):
        for k, m in enumerate((ref, ours)):
            h, c = m(leaves[k][t], state[k])
            state[k] = (h, c)
            outs[k].append(h)
    torch.testing.assert_close(torch.stack(outs[1]), torch.stack(outs[0]), atol=TOL, rtol=0)
    torch.testing.assert_close(state[1][1], state[0][1], atol=TOL, rtol=0)
    backward_both((torch.stack(outs[0]), state[0][1]), (torch.stack(outs[1]), state[1][1]))
    torch.testing.assert_close(leaves[1].grad, leaves[0].grad, atol=TOL, rtol=0)
    assert_grads_equal(ref, ours)
    h, c = ours(torch.randn(5))  # unbatched, as nn.LSTMCell
    assert h.shape == c.shape == (6,)
    with torch.no_grad():  # inference: the op alone, no autograd Function around it
        state = [None, None]
        for t in range(4):
            for k, m in enumerate((ref, ours)):
                state[k] = m(xs[t], state[k])
        assert not any(t.requires_grad for t in state[1])
        torch.testing.assert_close(state[1][0], state[0][0], atol=TOL, rtol=0)
        torch.testing.assert_close(state[1][1], state[0][1], atol=TOL, rtol=0)


def test_cell_training_steps_match_nn_lstm_cell_while_the_weights_change():
    """LSTMCell keeps its converted weights (ICFO blocks) between calls: three SGD steps of a
    stepped loop on both cells, each step's update seen by the next call, the gradient reaching
    nn's weights in nn's gate order."""
    torch.manual_seed(11)
    ref, ours = nn.LSTMCell(4, 6), bt.LSTMCell(4, 6)
    ours.load_state_dict(ref.state_dict())
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (ref, ours)]
    for step in range(3):
        xs = torch.randn(3, 2, 4)
        for m, opt in zip((ref, ours), opts):
            opt.zero_grad()
            h = c = None
            loss = 0
            for t in range(3):
                h, c = m(xs[t], None if h is None else (h, c))
                loss = loss + h.square().sum() + c.sum()
            loss.backward()
            opt.step()
        for name, p in ref.named_parameters():
            torch.testing.assert_close(getattr(ours, name), p, atol=TOL, rtol=0, msg=f"{name} after step {step}")


@pytest.mark.parametrize("dtype, bound", [(torch.bfloat16, 3.2e-2), (torch.float16, 4e-3)])
def test_cell_in_16_bits_stepped_and_trained_close_to_nn_lstm_cell_in_float32(dtype, bound):
    """LSTMCell in bfloat16 and float16 (its eager training step computes the weights' gradients
    in nn's layouts, in float32): four steps, the outputs, the input, state and every parameter
    gradient against nn.LSTMCell in float32 with the same weights, within the 16-bit type's
    rounding (bfloat16 2^-8 a stored value, float16 2^-11, carried through four steps)."""
    torch.manual_seed(12)
    ref = nn.LSTMCell(6, 8)
    ours = bt.LSTMCell(6, 8, dtype=dtype)
    ours.load_state_dict(ref.state_dict())
    xs, h0, c0 = torch.randn(4, 3, 6), torch.randn(3, 8), torch.randn(3, 8)

    def run(m, dt):
        leaves = [t.to(dt).detach().clone().requires_grad_() for t in (xs, h0, c0)]
        state, loss = (leaves[1], leaves[2]), 0
        for t in range(4):
            state = m(leaves[0][t], state)
            loss = loss + state[0].float().sum() + 0.5 * state[1].float().square().sum()
        loss.backward()
        return [*state, *(t.grad for t in leaves), *(p.grad for _, p in sorted(m.named_parameters()))]

    want, got = run(ref, torch.float32), run(ours, dtype)
    names = ["h", "c", "x.grad", "h0.grad", "c0.grad"] + [n for n, _ in sorted(ref.named_parameters())]
    for name, g, w in zip(names, got, want):
        assert g.dtype == dtype, name
        scale = max(1.0, w.abs().max().item())
        assert (g.float() - w).abs().max().item() <= bound * scale, (name, (g.float() - w).abs().max().item())
    # Inference (only h and c written) gives the training call's bits, also after a round trip
    # through float32 (the kept weights and zero peepholes follow the module's dtype).
    args = (xs[0].to(dtype), (h0.to(dtype), c0.to(dtype)))
    trained = [t.detach() for t in ours(*args)]
    ours.float()
    ours(xs[0], (h0, c0))
    ours.to(dtype)
    with torch.no_grad():
        inferred = ours(*args)
    for name, g, w in zip(("h", "c"), inferred, trained):
        assert g.dtype == dtype and torch.equal(g, w), name


def test_cell_with_tf_options_matches_the_float64_reference():
    """Peepholes, forget_bias and an active cell_clip on one step: the outputs and the gradient of
    every input and parameter against the float64 reference of the equations."""
    g = torch.Generator().manual_seed(8)
    B, I, H = 3, 4, 5
    m = bt.LSTMCell(I, H, peephole=True, forget_bias=1.0, cell_clip=0.5)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(2 * torch.rand(p.shape, generator=g) - 1)
    x, h0, c0 = (2 * torch.rand(*s, generator=g) - 1 for s in ((B, I), (B, H), (B, H)))
    c0 = 3 * c0  # some cell states past the clip
    ref_y, _, ref_c, leaves, clipped = reference_module(m, x[None], h0[None], c0[None], suffix="")
    assert clipped, "the clip never acted: the test would not see cell_clip"
    r, s = torch.randn(B, H, generator=g), torch.randn(B, H, generator=g)
    ((ref_y[0] * r.double()).sum() + (ref_c[0] * s.double()).sum()).backward()
    ins = [t.clone().requires_grad_() for t in (x, h0, c0)]
    h, c = m(ins[0], (ins[1], ins[2]))
    ((h * r).sum() + (c * s).sum()).backward()
    torch.testing.assert_close(h.double(), ref_y[0].detach(), atol=TOL, rtol=0)
    torch.testing.assert_close(c.double(), ref_c[0].detach(), atol=TOL, rtol=0)
    with torch.no_grad():  # inference: the op writes h and c alone
        for got, want in zip(m(x, (h0, c0)), (h, c)):
            assert torch.equal(got, want.detach())
    grads = dict(zip(("x", "h0", "c0"), (t.grad for t in ins)))
    grads.update((n, p.grad) for n, p in m.named_parameters())
    assert set(grads) == set(leaves)
    for name, grad in grads.items():
        want = leaves[name].grad.reshape(grad.shape)
        torch.testing.assert_close(grad.double(), want, atol=TOL, rtol=0, msg=name)


def test_reverse_sequence_op_and_its_gradient():
    """torch.ops.blocklstm.reverse_sequence (the reverse direction's input with lengths) against
    index arithmetic, and its gradient: the incoming gradient reversed the same way."""
    x = torch.randn(5, 3, 4, requires_grad=True)
    lengths = torch.tensor([5, 2, 0])
    y = torch.ops.blocklstm.reverse_sequence(x, lengths)
    for b, n in enumerate(lengths.tolist()):
        assert torch.equal(y[:n, b], x[:n, b].flip(0)) and torch.equal(y[n:, b], x[n:, b])
    g = torch.randn_like(y)
    y.backward(g)
    assert torch.equal(x.grad, torch.ops.blocklstm.reverse_sequence(g, lengths))
