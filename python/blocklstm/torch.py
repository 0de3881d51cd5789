"""blocklstm for PyTorch: the six ops as torch custom ops, and LSTM and LSTMCell, nn.LSTM and
nn.LSTMCell with optional peepholes and TF's options.

The ops are registered as torch.ops.blocklstm.<op> (block_lstm, block_lstm_grad, block_lstm_v2,
block_lstm_grad_v2, lstm_block_cell, lstm_block_cell_grad, and reverse_sequence: TF's
ReverseSequence on [T, B, W] with CPU lengths, its gradient itself), their schemas generated from the
library's op registry. They run on CPU and CUDA tensors (CUDA: on the current stream), have fake
kernels (torch.compile, torch.export trace them) and the forward ops have autograd: the gradient
is TF's, through the grad op (of a forward op's outputs only cs and h carry gradients, as in TF).
"""
import math
import os
import re
import warnings
import weakref

import torch
from torch import nn

from . import _core, _snake

_OPS = {op["name"]: op for op in _core.ops()}
# Whether seq_lengths run on CUDA tensors (BLOCKLSTM_CUDA_SEQ_LENGTHS=1; read once, at import):
# elsewhere LSTM runs a CUDA batch of lengths padded, and masks.
_CUDA_SEQ_LENGTHS = _core.cuda_seq_lengths()
# The CPU kernels on PyTorch's OpenMP threads (blocklstm.set_thread_pool): torch's OpenMP workers
# spin for milliseconds after each torch op, and where the cores are as many as the threads they
# take the cores our own pool's workers need (on 2 vCPUs a 9 ms call took 14 ms after a torch op).
# The environment variable BLOCKLSTM_THREAD_POOL (own, openmp, halide) overrides the choice.
if torch.backends.openmp.is_available() and "BLOCKLSTM_THREAD_POOL" not in os.environ:
    try:
        _core.set_thread_pool("openmp")
    except ValueError:  # torch's OpenMP runtime is not a loaded library of its own: keep ours
        pass
_NAMESPACE = "blocklstm"
_lib = torch.library.Library(_NAMESPACE, "DEF")


def _dims(op, t):
    """(T, B, I, H) of a call from its tensors; zeros where a shape is malformed (the library's
    validation then reports the argument)."""
    x, w = t["x"], t["w"]
    T = x.shape[0] if op["sequence"] and x.dim() == 3 else 1
    B = x.shape[-2] if x.dim() >= 2 else 0
    I = x.shape[-1] if x.dim() >= 1 else 0
    H = w.shape[1] // 4 if w.dim() == 2 else 0
    return T, B, I, H


def _shape_terms(shape):
    """A registry shape (e.g. "[I+H,4H]") as its dimensions' terms: [[(1, 'I'), (1, 'H')], [(4, 'H')]]."""
    def term(t):
        count, symbol = re.fullmatch(r"(\d*)([TBIH])", t).groups()
        return int(count or 1), "TBIH".index(symbol)

    return [[term(t) for t in d.split("+")] for d in shape[1:-1].split(",")]


# Parsed once (parsing them on every call took 20 us).
_OUTPUT_TERMS = {name: [_shape_terms(a["shape"]) for a in op["outputs"]] for name, op in _OPS.items()}


def _output_shapes(op, dims):
    """The outputs' shapes from the registry's at dims (T, B, I, H): ints, or torch's symbolic sizes
    while tracing, so that dynamic shapes stay symbolic. Kept per op and int dims (computing them
    took 4 us of an LSTMCell step's ~60 us outside the kernel)."""
    T, B, I, H = dims
    key = (op["name"], dims) if type(T) is int and type(B) is int and type(I) is int and type(H) is int else None
    shapes = _SHAPES.get(key) if key else None  # (a SymInt has no hash)
    if shapes is None:
        shapes = [[sum(count * dims[symbol] for count, symbol in d) for d in shape]
                  for shape in _OUTPUT_TERMS[op["name"]]]
        if key and len(_SHAPES) < 4096:
            _SHAPES[key] = shapes
    return shapes


_SHAPES = {}
# Each op's argument names in the registry's order (looked up once: a call's ~15 tensors by name).
_INPUT_NAMES = {name: [a["name"] for a in op["inputs"]] for name, op in _OPS.items()}
_OPTIONAL_NAMES = {name: [a["name"] for a in op["optional_inputs"]] for name, op in _OPS.items()}
_OUTPUT_NAMES = {name: [a["name"] for a in op["outputs"]] for name, op in _OPS.items()}


def _schema(op):
    args = ["SymInt seq_len_max"] if op["sequence"] else []
    args += [f"Tensor {a['name']}" for a in op["inputs"]]
    args += [f"float {a}={op[a]!r}" for a in ("forget_bias", "cell_clip") if op[a] is not None]
    args += ["bool use_peephole=False"]
    # blocklstm's extension, last: seq_lengths, a CPU tensor (torch's autograd takes no keyword-only tensor)
    args += [f"Tensor? {a['name']}=None" for a in op["optional_inputs"]]
    outs = ", ".join("Tensor" for _ in op["outputs"])
    return f"({', '.join(args)}) -> ({outs})"


def _inputs(op, args):
    """The call's tensors by name, all tensors on x's device: checked by the kernels and by the fake
    kernels alike (the dispatcher picks the fake one when any input is a meta tensor, whose
    outputs would otherwise be uninitialised memory on x's device)."""
    inputs = {name: args[name] for name in _INPUT_NAMES[op["name"]]}
    device = inputs["x"].device if isinstance(inputs["x"], torch.Tensor) else None
    for name, t in inputs.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{op['name']}: argument '{name}': expected a tensor, got {type(t).__name__}")
        if t.device != device:
            raise ValueError(f"{op['name']}: argument '{name}' is on {t.device}: expected {device}, as 'x'")
    return inputs


# The tensors go to the library as DLPack capsules made here (0.3 us each) rather than through
# Tensor.__dlpack__ (2.5 us, 15-20 a training step's two calls): _inputs has checked what that
# checks, and every call runs on torch's current stream.
_to_dlpack = torch.utils.dlpack.to_dlpack

_LEFT_OUT = object()  # an output _call leaves out (a forward op's i, f, o, ci, co: inference)
_STATE_ONLY = (_LEFT_OUT, None, _LEFT_OUT, _LEFT_OUT, _LEFT_OUT, _LEFT_OUT, None)  # cs and h alone


def _prepare(op, args, outs):
    """A call's tensors as the library takes them: (inputs, outputs) by name as DLPack capsules, and
    its outputs (new tensors where outs is None or where an entry is None; none where an entry is
    _LEFT_OUT)."""
    inputs = _inputs(op, args)
    for name in _OPTIONAL_NAMES[op["name"]]:
        if args.get(name) is not None:
            inputs[name] = args[name]
    x = inputs["x"]
    shapes = _output_shapes(op, _dims(op, inputs))
    if outs is None:
        outs = [x.new_empty(s) for s in shapes]
    else:
        outs = [o if o is not None else x.new_empty(s) for s, o in zip(shapes, outs)]
    # DLPack takes no autograd tensors
    capsules = ({n: _to_dlpack(t.detach() if t.requires_grad else t) for n, t in inputs.items()},
                {n: _to_dlpack(t) for n, t in zip(_OUTPUT_NAMES[op["name"]], outs) if t is not _LEFT_OUT})
    return capsules, tuple(outs)


def _call(op, args, outs=None):
    """Runs op on args into outs (new tensors where None or where an entry is None; none where an
    entry is _LEFT_OUT)."""
    (inputs, outputs), outs = _prepare(op, args, outs)
    # On torch's current stream, for this call only: the thread's stream is put back after, so a
    # later call of the plain API never runs on a stream torch may have freed since.
    x = args["x"]
    cuda = x.is_cuda
    previous = _core.cuda_stream() if cuda else None
    if cuda:
        _core.set_cuda_stream(torch.cuda.current_stream(x.device).cuda_stream)
    try:
        _core.invoke(op["name"], args.get("seq_len_max", 0), inputs, outputs, args.get("forget_bias"),
                     args.get("cell_clip"), bool(args["use_peephole"]))
    finally:
        if cuda:
            _core.set_cuda_stream(previous)
    return outs


def _call_side_by_side(op, args, outs=(None, None)):
    """Two CPU calls of op with the same attrs (args: two argument dicts) as _call runs each, at once
    where the library runs them side by side (invoke_side_by_side: each on one of two loop threads):
    each call's outputs."""
    (first, first_outs), (second, second_outs) = (_prepare(op, a, o) for a, o in zip(args, outs))
    a = args[0]
    _core.invoke_side_by_side(op["name"], a.get("seq_len_max", 0), [first[0], second[0]], [first[1], second[1]],
                              a.get("forget_bias"), a.get("cell_clip"), bool(a["use_peephole"]))
    return first_outs, second_outs


def _arg_names(op):
    names = ["seq_len_max"] if op["sequence"] else []
    names += [a["name"] for a in op["inputs"]]
    names += [a for a in ("forget_bias", "cell_clip") if op[a] is not None]
    return names + ["use_peephole"] + [a["name"] for a in op["optional_inputs"]]


def _bind(op, names, args, kwargs):
    """The call's arguments by name, with the attr defaults the dispatcher may leave out."""
    if not kwargs and len(args) == len(names):  # every argument given (the modules' calls)
        return dict(zip(names, args))
    a = {k: op[k] for k in ("forget_bias", "cell_clip") if op[k] is not None}
    a["use_peephole"] = False
    a.update({name: None for name in _OPTIONAL_NAMES[op["name"]]})
    a.update(zip(names, args))
    a.update(kwargs)
    return a


def _register(op):
    name = _snake(op["name"])
    _lib.define(name + _schema(op))
    names = _arg_names(op)

    def kernel(*args, **kwargs):
        return _call(op, _bind(op, names, args, kwargs))

    def fake(*args, **kwargs):
        a = _bind(op, names, args, kwargs)
        x = _inputs(op, a)["x"]
        shapes = _output_shapes(op, _dims(op, {k: a[k] for k in ("x", "w")}))
        return tuple(x.new_empty(s) for s in shapes)

    qualname = f"{_NAMESPACE}::{name}"
    torch.library.impl(qualname, ("cpu", "cuda"), kernel, lib=_lib)
    torch.library.register_fake(qualname, fake, lib=_lib)
    return names


_ARGS = {name: _register(op) for name, op in _OPS.items()}


# ---- Autograd: the forward ops' gradients are TF's, through the grad ops --------------------------

def _setup_context(ctx, inputs, output):
    ctx.set_materialize_grads(False)  # unused outputs' gradients as None, not zeros filled (below)
    ctx.save_for_backward(*[t for t in inputs if isinstance(t, torch.Tensor)], *output)
    ctx.scalars = [t for t in inputs if not isinstance(t, torch.Tensor)]


def _grad_or_zeros(grad, like):
    return grad if grad is not None else torch.zeros_like(like)


def _sequence_saved(inputs, output):
    """What a sequence forward op's gradient needs of a call (its arguments in schema order, its
    outputs): (the tensors to save, with seq_lengths last where given; whether it was; the scalars)."""
    *inputs, seq_lengths = inputs
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)] + list(output)
    if seq_lengths is not None:
        tensors.append(seq_lengths)
    return tensors, seq_lengths is not None, [t for t in inputs if not isinstance(t, torch.Tensor)]


def _sequence_setup_context(ctx, inputs, output):
    """As _setup_context, with seq_lengths (the last input, a tensor or None) saved last."""
    # The outputs with no gradient (i, f, o, ci, co always; cs mostly) come as None, not as zeros
    # that autograd fills: six [T, B, H] fills, 1.6 ms of a 29 ms step at 200,16,256.
    ctx.set_materialize_grads(False)
    tensors, ctx.has_lengths, ctx.scalars = _sequence_saved(inputs, output)
    ctx.save_for_backward(*tensors)


def _sequence_grad_args(saved, has_lengths, scalars, grads):
    """The grad op's arguments in its schema's order from what _sequence_saved kept of a call and
    the gradients of the call's seven outputs."""
    inputs, (i, cs, f, o, ci, co, h) = saved[:8], saved[8:15]
    seq_lengths = saved[15] if has_lengths else None
    seq_len_max, *_, use_peephole = scalars
    return (seq_len_max, *inputs, i, cs, f, o, ci, co, h, _grad_or_zeros(grads[1], cs).contiguous(),
            _grad_or_zeros(grads[6], h).contiguous(), use_peephole, seq_lengths)


def _sequence_input_grads(g, scalars):
    """A sequence forward op's gradients of its arguments (schema order) from its grad op's outputs g."""
    # seq_len_max, the 8 inputs, the attrs and use_peephole, seq_lengths
    return (None, *g) + (None,) * (len(scalars) - 1) + (None,)


def _grad_op(ctx, name, *args, **kwargs):
    """A grad op called from a backward: straight to the library in _Eager's backward (torch.library's
    Python layers cost about 15 us a call), else, and wherever autograd records it (create_graph:
    its rule then refuses a second derivative) or a trace holds it, the registered op (AOT autograd
    runs the registered backward on fake tensors)."""
    if not getattr(ctx, "eager", False) or torch.compiler.is_compiling() or torch.is_grad_enabled():
        return getattr(torch.ops.blocklstm, _snake(name))(*args, **kwargs)
    op = _OPS[name]
    return _call(op, _bind(op, _ARGS[name], args, kwargs))


def _sequence_backward(grad_op):
    def backward(ctx, *grads):
        g = _grad_op(ctx, grad_op, *_sequence_grad_args(ctx.saved_tensors, ctx.has_lengths, ctx.scalars, grads))
        return _sequence_input_grads(g, ctx.scalars)
    return backward


def _cell_gate_grads(ctx, inputs, outputs, grads, use_peephole):
    """LSTMBlockCellGrad of a cell step from its 8 inputs, 7 outputs and their gradients:
    (cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad)."""
    cs, h = outputs[1], outputs[6]
    return _grad_op(ctx, "LSTMBlockCellGrad", *inputs, *outputs[:6], _grad_or_zeros(grads[1], cs).contiguous(),
                    _grad_or_zeros(grads[6], h).contiguous(), use_peephole)


def _cell_backward(ctx, *grads):
    saved = ctx.saved_tensors
    inputs, outputs = saved[:8], saved[8:]
    x, h_prev, w, b = inputs[0], inputs[2], inputs[3], inputs[7]
    cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad = _cell_gate_grads(ctx, inputs, outputs, grads,
                                                                         ctx.scalars[-1])
    # TF's LSTMBlockCell gradient: the products of the gate gradients, here in float32.
    xh = torch.cat([x, h_prev], 1).float()
    d = dicfo.float()
    xh_grad = (d @ w.float().t()).to(x.dtype)
    I = x.shape[1]
    w_grad = (xh.t() @ d).to(w.dtype)
    b_grad = d.sum(0).to(b.dtype)
    return (xh_grad[:, :I], cs_prev_grad, xh_grad[:, I:], w_grad, wci_grad, wcf_grad, wco_grad, b_grad,
            None, None, None)


class _CellOnNnWeights(torch.autograd.Function):
    """LSTMBlockCell on TF's (w, b), kept between calls, as a function of nn.LSTMCell's weights
    (w_ih, w_hh[, b_ih, b_hh]), for LSTMCell's eager training steps: its backward puts the gate
    gradients (LSTMBlockCellGrad's dicfo, [B, 4H]) in nn's gate order once and computes every
    gradient in nn's layouts, as nn.LSTMCell's own backward does. Through TF's w [I+H, 4H]
    (_cell_backward, then _ThroughTfWeights) the weights' gradient came as w's, put back in nn's
    order by a copy and added transposed into .grad at every step: at B, H = 64, 512 those adds
    and the copy were 42 % of a training step's time (torch.profiler)."""

    @staticmethod
    def forward(ctx, x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias, cell_clip, use_peephole, w_ih, w_hh,
                *biases):  # LSTMBlockCell's arguments in its schema's order, then nn's weights
        inputs = (x, cs_prev, h_prev, w, wci, wcf, wco, b)
        outputs = _call(_OPS["LSTMBlockCell"], dict(zip(_ARGS["LSTMBlockCell"], inputs + (forget_bias, cell_clip,
                                                                                         use_peephole))))
        ctx.set_materialize_grads(False)  # the unused outputs' gradients as None
        ctx.save_for_backward(*inputs, *outputs, w_ih, w_hh)
        ctx.use_peephole, ctx.biases, ctx.eager = use_peephole, len(biases), True  # eager: _grad_op
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        inputs, outputs, (w_ih, w_hh) = saved[:8], saved[8:15], saved[15:]
        x, h_prev = inputs[0], inputs[2]
        cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad = _cell_gate_grads(ctx, inputs, outputs, grads,
                                                                             ctx.use_peephole)
        d = _swap_f_and_g(dicfo).float()  # nn's gate order; the products in float32, as TF's gradient
        need = ctx.needs_input_grad
        x_grad = (d @ w_ih.float()).to(x.dtype) if need[0] else None
        h_prev_grad = (d @ w_hh.float()).to(h_prev.dtype) if need[2] else None
        w_ih_grad = (d.t() @ x.float()).to(w_ih.dtype) if need[11] else None
        w_hh_grad = (d.t() @ h_prev.float()).to(w_hh.dtype) if need[12] else None
        b_grad = d.sum(0).to(w_ih.dtype) if ctx.biases and any(need[13:]) else None
        return (x_grad, cs_prev_grad, h_prev_grad, None, wci_grad, wcf_grad, wco_grad, None, None, None, None,
                w_ih_grad, w_hh_grad) + (b_grad,) * ctx.biases


def _no_double_backward(ctx, *grads):
    raise RuntimeError("blocklstm: the gradient ops have no gradient of their own: a second derivative "
                       "(double backward, gradgradcheck, create_graph=True then grad again) is not supported")


for _grad in ("block_lstm_grad", "block_lstm_grad_v2", "lstm_block_cell_grad"):  # an error, not zeros
    torch.library.register_autograd(f"blocklstm::{_grad}", _no_double_backward,
                                    setup_context=lambda ctx, inputs, output: None, lib=_lib)

# The forward ops' autograd, one rule each: (backward, setup_context), registered with the ops and
# run by _Eager alike.
_AUTOGRAD = {"BlockLSTM": (_sequence_backward("BlockLSTMGrad"), _sequence_setup_context),
             "BlockLSTMV2": (_sequence_backward("BlockLSTMGradV2"), _sequence_setup_context),
             "LSTMBlockCell": (_cell_backward, _setup_context)}
for _name, (_backward, _setup) in _AUTOGRAD.items():
    torch.library.register_autograd(f"blocklstm::{_snake(_name)}", _backward, setup_context=_setup, lib=_lib)


class _Eager(torch.autograd.Function):
    """A forward op with its registered autograd rule (_AUTOGRAD), called outside torch.library's
    Python custom-op layers (default filling, redispatch, the generated autograd function): a
    training step through one layer at T,B,H 2,1,8 took 308 us through torch.ops, 216 us here."""

    @staticmethod
    def forward(ctx, name, *args):  # args: every argument of the op, in its schema's order
        op = _OPS[name]
        outputs = _call(op, dict(zip(_ARGS[name], args)))
        _AUTOGRAD[name][1](ctx, args, outputs)
        ctx.op_name, ctx.eager = name, True  # _grad_op: the backward's grad op straight to the library
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        return (None, *_AUTOGRAD[ctx.op_name][0](ctx, *grads))


def _apply(name, *args, **kwargs):
    """torch.ops.blocklstm.<op>(*args, **kwargs) for a forward op, the same values and gradients:
    the registered op while torch.compile or torch.export traces (the graph holds it), else _Eager,
    or with autograd off the op alone (an autograd Function's apply costs ~6 us a call: 6 % of an
    LSTMCell step at B = 8, H = 128)."""
    op = _OPS[name]
    if torch.compiler.is_compiling():
        return getattr(torch.ops.blocklstm, _snake(name))(*args, **kwargs)
    a = _bind(op, _ARGS[name], args, kwargs)
    if not torch.is_grad_enabled():
        return _call(op, a)
    return _Eager.apply(name, *(a[n] for n in _ARGS[name]))


_GRAD_OP = {"BlockLSTM": "BlockLSTMGrad", "BlockLSTMV2": "BlockLSTMGradV2"}


class _EagerSideBySide(torch.autograd.Function):
    """Two calls of a sequence forward op on the CPU (a bidirectional layer's two directions) side by
    side (_call_side_by_side), and their two grad op calls side by side in the backward: the values
    and gradients of the two calls through _Eager, one after the other."""

    @staticmethod
    def forward(ctx, name, n, *args):  # args: the two calls' arguments, n each, in the op's schema order
        op = _OPS[name]
        calls = (args[:n], args[n:])
        outputs = _call_side_by_side(op, [dict(zip(_ARGS[name], c)) for c in calls])
        ctx.set_materialize_grads(False)  # as _sequence_setup_context
        saved = [_sequence_saved(c, out) for c, out in zip(calls, outputs)]
        ctx.save_for_backward(*saved[0][0], *saved[1][0])
        ctx.split = len(saved[0][0])
        ctx.has_lengths = (saved[0][1], saved[1][1])
        ctx.scalars = (saved[0][2], saved[1][2])
        ctx.grad_name = _GRAD_OP[name]
        return (*outputs[0], *outputs[1])

    @staticmethod
    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        halves = (saved[:ctx.split], saved[ctx.split:])
        n_out = len(grads) // 2
        args = [_sequence_grad_args(s, has, sc, g)
                for s, has, sc, g in zip(halves, ctx.has_lengths, ctx.scalars, (grads[:n_out], grads[n_out:]))]
        name = ctx.grad_name
        if torch.is_grad_enabled():  # recorded (create_graph): the registered op, whose rule refuses a second derivative
            g = [getattr(torch.ops.blocklstm, _snake(name))(*a) for a in args]
        else:
            op = _OPS[name]
            g = _call_side_by_side(op, [dict(zip(_ARGS[name], a)) for a in args])
        return (None, None, *_sequence_input_grads(g[0], ctx.scalars[0]), *_sequence_input_grads(g[1], ctx.scalars[1]))


# ---- ReverseSequence: each row reversed within its length (the reverse direction's input) ----------

_lib.define("reverse_sequence(Tensor input, Tensor seq_lengths) -> Tensor")


def _reverse_sequence(input, seq_lengths):
    out = torch.empty_like(input)
    previous = _core.cuda_stream() if input.is_cuda else None
    if input.is_cuda:
        _core.set_cuda_stream(torch.cuda.current_stream(input.device).cuda_stream)
    try:
        _core.reverse_sequence(_to_dlpack(input.detach()), _to_dlpack(seq_lengths.detach()), _to_dlpack(out))
    finally:
        if input.is_cuda:
            _core.set_cuda_stream(previous)
    return out


torch.library.impl("blocklstm::reverse_sequence", ("cpu", "cuda"), _reverse_sequence, lib=_lib)
torch.library.register_fake("blocklstm::reverse_sequence", lambda input, seq_lengths: input.new_empty(input.shape),
                            lib=_lib)


def _reverse_setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])


def _reverse_backward(ctx, grad):  # a permutation that is its own inverse
    (seq_lengths,) = ctx.saved_tensors
    return torch.ops.blocklstm.reverse_sequence(grad.contiguous(), seq_lengths), None


torch.library.register_autograd("blocklstm::reverse_sequence", _reverse_backward,
                                setup_context=_reverse_setup_context, lib=_lib)


class _EagerReverse(torch.autograd.Function):
    """reverse_sequence with its gradient, outside torch.library's Python layers (as _Eager): at
    T,B,W 50,8,256 a call took 54 us through torch.ops, 11 us to the library (the reverse direction
    of a two-layer module runs four)."""

    @staticmethod
    def forward(ctx, input, seq_lengths):
        ctx.save_for_backward(seq_lengths)
        return _reverse_sequence(input, seq_lengths)

    @staticmethod
    def backward(ctx, grad):
        (seq_lengths,) = ctx.saved_tensors
        return _reverse(grad.contiguous(), seq_lengths), None


def _reverse(input, seq_lengths):
    """torch.ops.blocklstm.reverse_sequence(input, seq_lengths): the registered op while a trace
    records it, else the library straight (through _EagerReverse where autograd records it)."""
    if torch.compiler.is_compiling():
        return torch.ops.blocklstm.reverse_sequence(input, seq_lengths)
    if torch.is_grad_enabled() and input.requires_grad:
        return _EagerReverse.apply(input, seq_lengths)
    return _reverse_sequence(input, seq_lengths)


# ---- The modules --------------------------------------------------------------------------------

def _swap_f_and_g(t):
    """t's last dimension (4 gate blocks, nn's i, f, g, o) with the second and third blocks
    swapped: nn's order to LSTMBlockCell's ICFO, and back (the swap is its own inverse)."""
    H = t.shape[-1] // 4
    # The blocks by one index_select: 3.5 against 7.1 us for a cat of four slices at B, H = 1, 8,
    # 15.8 against 20.6 at 64, 512 (the backward of every LSTMCell step swaps its gate gradients).
    order = _BLOCK_ORDER.get(t.device) if not torch.compiler.is_compiling() else None
    if order is None:
        order = torch.tensor([0, 2, 1, 3], device=t.device)
        if not torch.compiler.is_compiling():
            _BLOCK_ORDER[t.device] = order
    return t.unflatten(-1, (4, H)).index_select(-2, order).flatten(-2)


_BLOCK_ORDER = {}  # _swap_f_and_g's index of the four blocks, per device


def _tf_weights(w_ih, w_hh, b_ih, b_hh, forget_bias, gate_order):
    """TF's w [I+H, 4H] and b [4H] from nn.LSTM's weights (gate blocks i, f, g, o): in IFCO order
    (BlockLSTMV2's, the same blocks) or ICFO (LSTMBlockCell's: f and g swap places). forget_bias is
    folded into b for IFCO (BlockLSTMV2 has no such attr); the cell op takes it as its attr."""
    w = torch.cat([w_ih, w_hh], 1).t()
    H = w_hh.shape[0] // 4  # w_hh [4H, H], or [4H, P] with a projection
    b = b_ih + b_hh if b_ih is not None else w.new_zeros(4 * H)
    if gate_order == "icfo":
        w, b = _swap_f_and_g(w), _swap_f_and_g(b)
    elif forget_bias:
        b = torch.cat([b[:H], b[H:2 * H] + forget_bias, b[2 * H:]])
    return w.contiguous(), b


class _ThroughTfWeights(torch.autograd.Function):
    """TF's (w, b) of one layer and direction, converted once and kept, as a function of nn's
    (w_ih, w_hh[, b_ih, b_hh]) for autograd: w = [w_ih | w_hh]^T and b = b_ih + b_hh (+ forget_bias),
    gate blocks in `gate_order` (_tf_weights), so w's gradient splits back into the two
    transposed and b's goes to both biases, in nn's gate order."""

    @staticmethod
    def forward(ctx, w, b, gate_order, w_ih, w_hh, *biases):
        ctx.input_size, ctx.biases, ctx.gate_order = w_ih.shape[1], len(biases), gate_order
        return w.view_as(w), b.view_as(b)

    @staticmethod
    def backward(ctx, w_grad, b_grad):
        I = ctx.input_size
        if ctx.gate_order == "icfo":  # back to nn's gate order
            w_grad, b_grad = _swap_f_and_g(w_grad), _swap_f_and_g(b_grad)
        grads = [None, None, None, w_grad[:I].t(), w_grad[I:].t()]
        return tuple(grads + [b_grad] * ctx.biases)


def _check_state(name, hx, want, like, want_c=None):
    """hx = (h_0, c_0) of shape `want` (c_0: `want_c` where it differs, as with a projection)."""
    if not isinstance(hx, (tuple, list)) or len(hx) != 2:
        raise ValueError(f"{name}: hx must be a tuple (h_0, c_0), as nn.{name}'s")
    for k, t in enumerate(hx):
        want = want_c if k == 1 and want_c is not None else want
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != want:
            got = list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise RuntimeError(f"{name}: Expected hidden[{k}] size {want}, got {got}")
        if t.dtype != like.dtype or t.device != like.device:
            raise RuntimeError(f"{name}: Expected hidden[{k}] to be {like.dtype} on {like.device} as the "
                               f"input, got {t.dtype} on {t.device}")


def _check_input(name, input, weight, input_size, dims):
    if input.dim() not in dims:
        raise ValueError(f"{name}: Expected input to be {' or '.join(f'{d}D' for d in dims)}, got {input.dim()}D instead")
    if input.shape[-1] != input_size:
        raise RuntimeError(f"{name}: input.size(-1) must be equal to input_size. Expected {input_size}, "
                           f"got {input.shape[-1]}")
    if input.dtype != weight.dtype:  # nn.LSTM's words
        raise ValueError(f"{name}: input dtype ({input.dtype}) does not match weight dtype ({weight.dtype}). "
                         f"Convert input: input.to({weight.dtype}), or convert model: model.to({input.dtype})")
    if input.device != weight.device:
        raise RuntimeError(f"{name}: Input and parameter tensors are not at the same device, found input "
                           f"tensor at {input.device} and parameter tensor at {weight.device}")


def _within_lengths(T, lengths, device):
    """index[t, b] of the time step that row b reads at step t of its reversed run: len_b - 1 - t for
    t < len_b (the row reversed within its own length, as nn.LSTM's reverse direction runs a packed
    row), t past it; and mask[t, b], whether step t is inside row b's length."""
    t = torch.arange(T, device=device)[:, None]
    inside = t < lengths[None, :]
    return torch.where(inside, lengths[None, :] - 1 - t, t), inside


class _PeepholeModule(nn.Module):
    """What LSTM and LSTMCell share: nn's initialisation, zero peepholes, and an nn module's state
    dict loading as it is (the peephole weights it lacks keep their values)."""

    _peepholes = ()

    def reset_parameters(self):
        bound = 1 / math.sqrt(self.hidden_size)  # as nn.LSTM
        for name, p in self.named_parameters():
            if name in self._peepholes:
                nn.init.zeros_(p)
            else:
                nn.init.uniform_(p, -bound, bound)

    def _kept_tf_weights(self, key, w_ih, w_hh, b_ih, b_hh, forget_bias, gate_order, through=True):
        """_tf_weights(...) of one layer and direction (`key`), kept between calls while the
        parameters are unchanged (their version counters): the conversion costs a copy of the
        weights and, in the backward, of their gradients. With a gradient, the kept tensors pass it
        back to nn's weights (_ThroughTfWeights), unless `through` is False (the caller's autograd
        Function takes nn's weights itself: _CellOnNnWeights)."""
        params = (w_ih, w_hh, b_ih, b_hh) if b_ih is not None else (w_ih, w_hh)
        if torch.compiler.is_compiling():  # no Python-side cache in a traced graph
            return _tf_weights(w_ih, w_hh, b_ih, b_hh, forget_bias, gate_order)
        stamp = (forget_bias, w_ih.dtype, w_ih.device, w_ih.data_ptr(), w_ih._version, w_hh.data_ptr(), w_hh._version)
        if b_ih is not None:  # (spelled out: a generator over params cost 3 us of a small cell's step)
            stamp += (b_ih.data_ptr(), b_ih._version, b_hh.data_ptr(), b_hh._version)
        cached = self._weights_cache.get(key)
        # The same tensors too, not only the same memory: a parametrized weight (weight_norm) is a
        # new tensor at every call, which the allocator may place where the last one was, at
        # version 0 (then kept weights from the old values went into 3 of 50 calls).
        refs = cached[2] if cached is not None else None
        if (cached is None or cached[0] != stamp or refs[0]() is not w_ih or refs[1]() is not w_hh
                or (b_ih is not None and (refs[2]() is not b_ih or refs[3]() is not b_hh))):
            with torch.no_grad():
                cached = (stamp, _tf_weights(w_ih, w_hh, b_ih, b_hh, forget_bias, gate_order),
                          tuple(weakref.ref(p) for p in params))
            self._weights_cache[key] = cached
        w, b = cached[1]
        if through and torch.is_grad_enabled() and any(p.requires_grad for p in params):
            w, b = _ThroughTfWeights.apply(w, b, gate_order, *params)
        return w, b

    def __getstate__(self):
        """Pickling (torch.save of the module, DataParallel's copies) leaves out the kept weights:
        copies derived from the parameters, with references to them that cannot be pickled."""
        state = self.__dict__.copy()
        state["_weights_cache"] = {}
        return state

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        for name in self._peepholes:  # an nn.LSTM's state: the peepholes keep their values
            if prefix + name in missing_keys:
                missing_keys.remove(prefix + name)


class LSTM(_PeepholeModule):
    """nn.LSTM's arguments, parameters and call, with optional peepholes and TF's options.

    LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False, proj_size=0, device=None, dtype=None, *, peephole=False, forget_bias=0.0,
    cell_clip=None): nn.LSTM's arguments in nn.LSTM's order, then TF's options by keyword.
    Parameters as nn.LSTM names them for every layer and direction — weight_ih_l{k}[_reverse]
    [4H, in], weight_hh_l{k}[_reverse] [4H, H] ([4H, P] with proj_size P), with bias=True
    bias_ih_l{k}[_reverse], bias_hh_l{k}[_reverse] [4H] (gate order i, f, g, o), with proj_size
    weight_hr_l{k}[_reverse] [P, H] — and
    with peephole=True weight_ci_l{k}[_reverse], weight_cf_..., weight_co_... [H] (TF's wci, wcf,
    wco). load_state_dict(nn_lstm.state_dict()) works as it is; peephole weights missing from a
    state dict keep their values (zeros after reset_parameters).

    forward(input, hx=None, *, lengths=None) -> (output, (h_n, c_n)) as nn.LSTM: input [T, B, I]
    ([B, T, I] with batch_first), unbatched [T, I], or a PackedSequence (output is then packed as
    nn.LSTM packs it); hx = (h_0, c_0) of [num_layers * D, B, H] (D = 2 if bidirectional). With
    lengths (a [B] integer tensor, each in [0, T]) a padded batch runs as nn.LSTM runs it packed:
    row b's steps past lengths[b] are zeros in the output, h_n and c_n are its state at its last
    step (h_0 and c_0 for a length of 0), and the reverse direction runs each row reversed within
    its own length. Layers after the first see the previous layer's output through dropout in
    training mode, as nn.LSTM. TF's forget_bias is added to the forget gate and cell_clip (None: no
    clipping) clips the cell state; the gradient is TF's: straight through the clip, so with an
    active cell_clip it is not the derivative of the clipped forward.

    proj_size (LSTMP, h = W_hr (o * tanh c), the projected h what the next step and the output
    see): one BlockLSTMV2 call per layer and direction as without it, the projection folded into
    the recurrent weights (_directions).

    Variable lengths go to the kernels (the ops' seq_lengths): each step runs on the rows still
    running, so the padded steps cost nothing but a copy (CUDA tensors: with
    BLOCKLSTM_CUDA_SEQ_LENGTHS=1; else every padded step runs, masked). Without a gradient
    (torch.no_grad) the op writes only h and the cell state, not the five activations only a
    backward pass reads.
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None, *, peephole=False,
                 forget_bias=0.0, cell_clip=None):
        super().__init__()
        if type(num_layers) is not int or num_layers < 1:  # num_layers=True is no 1
            raise ValueError(f"LSTM: num_layers={num_layers!r} is not supported: expected an int >= 1")
        if type(proj_size) is not int or not 0 <= proj_size < hidden_size:
            raise ValueError(f"LSTM: proj_size={proj_size!r} is not supported: expected an int in [0, hidden_size) "
                             f"= [0, {hidden_size}), as nn.LSTM")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if dropout and num_layers == 1:  # as nn.LSTM: dropout acts between layers
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers=1")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.bidirectional, self.proj_size = bool(bias), bool(bidirectional), proj_size
        self.peephole, self.forget_bias, self.cell_clip = peephole, float(forget_bias), cell_clip
        self.batch_first, self.dropout = batch_first, float(dropout)
        f = {"device": device, "dtype": dtype}
        H, D = hidden_size, 2 if bidirectional else 1
        R = proj_size or H  # the size of h: the projection's, or the cell's
        self._names = []  # per (layer, direction): (w_ih, w_hh, b_ih or None, b_hh or None, (wci, wcf, wco) or None)
        self._projections = []  # per (layer, direction): weight_hr's name, or None
        self._peepholes = []
        for layer in range(num_layers):
            for direction in range(D):
                sfx = f"_l{layer}" + ("_reverse" if direction else "")
                size_in = input_size if layer == 0 else R * D
                shapes = {"weight_ih": (4 * H, size_in), "weight_hh": (4 * H, R)}
                if self.bias:
                    shapes.update(bias_ih=(4 * H,), bias_hh=(4 * H,))
                if proj_size:
                    shapes.update(weight_hr=(proj_size, H))  # nn.LSTM's name and place
                if peephole:
                    shapes.update(weight_ci=(H,), weight_cf=(H,), weight_co=(H,))
                for name, shape in shapes.items():
                    setattr(self, name + sfx, nn.Parameter(torch.empty(*shape, **f)))
                names = {k: k + sfx for k in shapes}
                self._names.append((names["weight_ih"], names["weight_hh"], names.get("bias_ih"),
                                    names.get("bias_hh"),
                                    (names["weight_ci"], names["weight_cf"], names["weight_co"]) if peephole else None))
                self._projections.append(names.get("weight_hr"))
                if peephole:
                    self._peepholes += [names["weight_ci"], names["weight_cf"], names["weight_co"]]
        self._weights_cache = {}
        self.reset_parameters()

    def flatten_parameters(self):
        """nn.LSTM's cuDNN weight compaction: nothing to do here (the weights are used as they are)."""

    # nn.LSTM's views of its parameters, for code that walks them (an initialiser over all_weights):
    # names and tensors per layer and direction in nn.LSTM's order (w_ih, w_hh[, b_ih, b_hh][, w_hr]),
    # then, with peephole=True, that layer and direction's wci, wcf, wco.
    mode = "LSTM"

    @property
    def _all_weights(self):
        return [[n for n in (w_ih, w_hh, b_ih, b_hh, hr) if n] + list(peep or ())
                for (w_ih, w_hh, b_ih, b_hh, peep), hr in zip(self._names, self._projections)]

    @property
    def _flat_weights_names(self):
        return [n for names in self._all_weights for n in names]

    @property
    def _flat_weights(self):
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self):
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    # nn.LSTM's own argument checks (its messages), for code that calls them on the module.
    check_input = nn.LSTM.check_input
    get_expected_hidden_size = nn.LSTM.get_expected_hidden_size
    get_expected_cell_size = nn.LSTM.get_expected_cell_size
    check_hidden_size = nn.LSTM.check_hidden_size
    check_forward_args = nn.LSTM.check_forward_args
    permute_hidden = nn.LSTM.permute_hidden

    def tf_weights(self, layer=0, direction=0):
        """TF's w [in+H, 4H] and b [4H] (IFCO gate blocks, BlockLSTMV2's layout, forget_bias folded
        in) of one layer and direction, from its nn.LSTM weights."""
        w_ih, w_hh, b_ih, b_hh, _ = self._names[layer * (2 if self.bidirectional else 1) + direction]
        get = lambda n: getattr(self, n) if n else None
        return _tf_weights(get(w_ih), get(w_hh), get(b_ih), get(b_hh), self.forget_bias, "ifco")

    def _weights(self, index, x):
        """(w, b, wci, wcf, wco) of one layer and direction for BlockLSTMV2 (IFCO, forget_bias in b),
        w and b kept between calls (_kept_tf_weights)."""
        w_ih, w_hh, b_ih, b_hh, peep = self._names[index]
        if peep:
            wci, wcf, wco = (getattr(self, n) for n in peep)
        else:
            wci = wcf = wco = x.new_zeros(self.hidden_size)
        get = lambda n: getattr(self, n) if n else None
        w, b = self._kept_tf_weights(index, get(w_ih), get(w_hh), get(b_ih), get(b_hh), self.forget_bias, "ifco")
        return w, b, wci, wcf, wco

    def forward(self, input, hx=None, *, lengths=None):
        packed = isinstance(input, nn.utils.rnn.PackedSequence)
        if packed:
            if lengths is not None:
                raise ValueError("LSTM: lengths is for a padded input: a PackedSequence carries its own")
            # The rows in the packed data's order, longest first (as nn.LSTM runs them): the kernels
            # take rows in length order as they are, with no reordering of their own, and the
            # output packs back without a gather by row.
            order, unorder = input.sorted_indices, input.unsorted_indices
            padded, lengths = nn.utils.rnn.pad_packed_sequence(
                nn.utils.rnn.PackedSequence(input.data, input.batch_sizes))  # [T, B, I], longest first
            _check_input("LSTM", padded, self.weight_ih_l0, self.input_size, (3,))
            if order is not None and isinstance(hx, (tuple, list)) and all(
                    isinstance(t, torch.Tensor) and t.dim() == 3 and t.shape[1] == order.numel() for t in hx):
                hx = tuple(t.index_select(1, order) for t in hx)  # else _padded names what is wrong
            output, (h_n, c_n) = self._padded(padded, hx, lengths.to(padded.device), batched=True)
            if unorder is not None:  # the state in the caller's batch order, as nn.LSTM returns it
                h_n, c_n = h_n.index_select(1, unorder), c_n.index_select(1, unorder)
            data = nn.utils.rnn.pack_padded_sequence(output, lengths).data
            return nn.utils.rnn.PackedSequence(data, input.batch_sizes, order, unorder), (h_n, c_n)
        _check_input("LSTM", input, self.weight_ih_l0, self.input_size, (2, 3))
        batched = input.dim() == 3  # unbatched [T, I]: one batch row, as nn.LSTM
        x = (input.transpose(0, 1) if self.batch_first else input) if batched else input.unsqueeze(1)
        if lengths is not None:
            lengths = self._check_lengths(lengths, x)
        output, state = self._padded(x, hx, lengths, batched)
        if not batched:
            return output.squeeze(1), tuple(t.squeeze(1) for t in state)
        return (output.transpose(0, 1) if self.batch_first else output), state

    def _check_lengths(self, lengths, x):
        T, B = x.shape[0], x.shape[1]
        if not isinstance(lengths, torch.Tensor) or lengths.dtype not in (torch.int32, torch.int64) \
                or tuple(lengths.shape) != (B,):
            got = f"{lengths.dtype} of shape {list(lengths.shape)}" if isinstance(lengths, torch.Tensor) \
                else type(lengths).__name__
            raise ValueError(f"LSTM: lengths: expected an int32 or int64 tensor of shape [{B}] (one per batch "
                             f"row), got {got}")
        if torch.compiler.is_compiling():  # checked when the graph runs: the values are not known while tracing
            torch._assert_async(((lengths >= 0) & (lengths <= T)).all(),
                                f"LSTM: lengths: expected each in [0, {T}] (the input's steps)")
        elif B and (int(lengths.min()) < 0 or int(lengths.max()) > T):
            raise ValueError(f"LSTM: lengths: expected each in [0, {T}] (the input's steps), got "
                             f"min {int(lengths.min())}, max {int(lengths.max())}")
        return lengths.to(device=x.device, dtype=torch.int64)

    def _padded(self, x, hx, lengths, batched):
        """Every layer and direction over x [T, B, in]: (output [T, B, D*H], (h_n, c_n))."""
        T, B, H = x.shape[0], x.shape[1], self.hidden_size
        R = self.proj_size or H  # h's size
        D = 2 if self.bidirectional else 1
        LD = self.num_layers * D
        if hx is None:
            h0, c0 = x.new_zeros(LD, B, R), x.new_zeros(LD, B, H)
        else:
            _check_state("LSTM", hx, (LD, B, R) if batched else (LD, R), x, (LD, B, H) if batched else (LD, H))
            h0, c0 = hx[0].reshape(LD, B, R), hx[1].reshape(LD, B, H)
        # The op's seq_lengths (it plans its steps from them), or a padded run masked below.
        run_lengths = lengths.to("cpu") if lengths is not None and (not x.is_cuda or _CUDA_SEQ_LENGTHS) else None
        if lengths is not None:
            last = (lengths - 1).clamp(min=0)
            if run_lengths is None:  # the padded run's reversal and mask
                index, inside = _within_lengths(T, lengths, x.device)
        h_n, c_n = [], []
        layer_in = x
        for layer in range(self.num_layers):
            if layer > 0 and self.dropout and self.training:
                layer_in = nn.functional.dropout(layer_in, self.dropout, training=True)
            outs = []
            seqs = []
            for direction in range(D):
                seq = layer_in
                if direction == 1:  # reversed in time, within each row's length
                    if lengths is None:
                        seq = layer_in.flip(0)
                    elif run_lengths is not None:
                        seq = _reverse(layer_in.contiguous(), run_lengths)
                    else:
                        seq = layer_in.gather(0, index[:, :, None].expand(T, B, layer_in.shape[2]))
                seqs.append(seq.contiguous())
            ks = [layer * D + direction for direction in range(D)]
            for direction, (k, (h, cs)) in enumerate(zip(ks, self._directions(ks, seqs, h0, c0, run_lengths))):
                if T == 0:  # no step: the state passes through
                    h_last, c_last = h0[k], c0[k]
                else:
                    if lengths is None:
                        h_last = h[-1]
                    else:
                        started = (lengths > 0)[:, None]
                        h_last = torch.where(started, h.gather(0, last[None, :, None].expand(1, B, R))[0], h0[k])
                    if cs.dim() == 2:  # the op's final state (inference on the CPU: _ops)
                        c_last = cs
                    elif lengths is None:
                        c_last = cs[-1]
                    else:
                        c_last = torch.where(started, cs.gather(0, last[None, :, None].expand(1, B, H))[0], c0[k])
                if direction == 1:  # back in time order; zeros past a row's length stay there
                    if lengths is None:
                        h = h.flip(0)
                    elif run_lengths is not None:
                        h = _reverse(h, run_lengths)
                    else:
                        h = h.gather(0, index[:, :, None].expand(T, B, R))
                if lengths is not None and run_lengths is None:
                    h = h * inside[:, :, None].to(h.dtype)
                outs.append(h)
                h_n.append(h_last)
                c_n.append(c_last)
            layer_in = outs[0] if D == 1 else torch.cat(outs, 2)
        return layer_in, (torch.stack(h_n), torch.stack(c_n))  # tensors of their own, as nn.LSTM's

    def _directions(self, ks, xs, h0, c0, lengths):
        """Each layer and direction k of ks over its x [T, B, in] of xs from (h0[k], c0[k]): [(h, cs)], h
        [T, B, R] (zeros past each row's length), cs [T, B, H] or _ops' c_n. One BlockLSTMV2 call each
        (_ops: a layer's two directions side by side on the CPU).

        With proj_size P (LSTMP, h_t = W_hr (o_t * tanh c_t)) still one call: a step's recurrent product
        r_{t-1} W_r is h_{t-1} (W_hr^T W_r), so the op runs on the unprojected h with W_hr^T W_r [H, 4H]
        as its recurrent weights, and r0 (there is no h before the first step) enters step 0 as input
        columns, [x_0 | r0] against W_r's rows (zeros at the later steps), with h_prev zero; r = h W_hr^T.
        Autograd through the two products with W_hr gives W_r's, W_hr's and r0's gradients."""
        T, B = xs[0].shape[0], xs[0].shape[1]
        R = self.proj_size or self.hidden_size
        if T == 0:
            return [(x.new_zeros(0, B, R), x.new_zeros(0, B, self.hidden_size)) for x in xs]
        calls, projections = [], []
        for k, x in zip(ks, xs):
            w, b, wci, wcf, wco = self._weights(k, x)
            h_prev = h0[k].contiguous()
            w_hr = getattr(self, self._projections[k]) if self.proj_size else None
            if w_hr is not None:
                I = x.shape[2]
                w = torch.cat([w, w_hr.t() @ w[I:]])  # [in + P + H, 4H]; w = [W_x; W_r]
                x = torch.cat([x, torch.cat([h_prev[None], h_prev.new_zeros(T - 1, B, R)])], 2)
                h_prev = x.new_zeros(B, self.hidden_size)
            calls.append((x, c0[k].contiguous(), h_prev, w, b, wci, wcf, wco))
            projections.append(w_hr)
        return [(h @ w_hr.t() if w_hr is not None else h, cs)
                for (h, cs), w_hr in zip(self._ops(calls, lengths), projections)]

    def _ops(self, calls, lengths):
        """BlockLSTMV2 over each call's (x [T, B, in], c0, h0, w, b, wci, wcf, wco): [(h, cs)], cs [T, B, H],
        or under no_grad on the CPU c_n: cs as each row's final state [B, H] alone. Two calls on the CPU
        (a layer's two directions) run side by side where the library runs them so (invoke_side_by_side:
        small calls on 2 threads, each call on one of them), outside torch.compile's traces."""
        T = calls[0][0].shape[0]
        clip = float(self.cell_clip) if self.cell_clip is not None else 0.0
        compiling = torch.compiler.is_compiling()
        pair = len(calls) == 2 and not calls[0][0].is_cuda and not compiling
        op = _OPS["BlockLSTMV2"]
        if not torch.is_grad_enabled() and not compiling:
            # Inference: i, f, o, ci and co go unused, so the op leaves them out and writes cs and h
            # alone (five fresh [T, B, H] outputs had cost 2 ms of 16 at 200,16,256 in first touches);
            # on the CPU cs is only each row's final state, c_n ([B, H]: 26 MB fewer at 100,64,512).
            # (CUDA: cs [T, B, H] until a GPU run has run the final state there.)
            args = [dict(seq_len_max=T, x=x, cs_prev=c0, h_prev=h0, w=w, wci=wci, wcf=wcf, wco=wco, b=b,
                         cell_clip=clip, use_peephole=self.peephole, seq_lengths=lengths)
                    for x, c0, h0, w, b, wci, wcf, wco in calls]
            outs = [_STATE_ONLY if x.is_cuda else _STATE_ONLY[:1] + (c0.new_empty(c0.shape),) + _STATE_ONLY[2:]
                    for x, c0, *_ in calls]
            results = _call_side_by_side(op, args, outs) if pair else [_call(op, a, o) for a, o in zip(args, outs)]
            return [(out[6], out[1]) for out in results]
        args = [(T, x, c0, h0, w, wci, wcf, wco, b, clip, self.peephole, lengths)
                for x, c0, h0, w, b, wci, wcf, wco in calls]
        if pair:
            out = _EagerSideBySide.apply("BlockLSTMV2", len(args[0]), *args[0], *args[1])
            results = (out[:7], out[7:])
        else:
            results = [_apply("BlockLSTMV2", *a) for a in args]
        return [(out[6], out[1]) for out in results]

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s + f", peephole={self.peephole}, forget_bias={self.forget_bias}, cell_clip={self.cell_clip}"


class LSTMCell(_PeepholeModule):
    """nn.LSTMCell's arguments, parameters and call on TF's LSTMBlockCell op, with optional
    peepholes and TF's options.

    LSTMCell(input_size, hidden_size, bias=True, device=None, dtype=None, *, peephole=False,
    forget_bias=0.0, cell_clip=None). Parameters weight_ih [4H, I], weight_hh [4H, H], with bias
    bias_ih, bias_hh [4H] (gate order i, f, g, o, as nn.LSTMCell: load_state_dict of an
    nn.LSTMCell's state works as it is), and with peephole=True weight_ci, weight_cf, weight_co [H].
    forward(input, hx=None) -> (h_1, c_1): input [B, I] or unbatched [I], hx = (h_0, c_0) of [B, H]
    (or [H]), zeros when None. One step per call, for code that loops over time itself; a whole
    sequence runs faster through LSTM.
    """

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None, *, peephole=False,
                 forget_bias=0.0, cell_clip=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bool(bias)
        self.peephole, self.forget_bias, self.cell_clip = peephole, float(forget_bias), cell_clip
        f = {"device": device, "dtype": dtype}
        H = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(4 * H, input_size, **f))
        self.weight_hh = nn.Parameter(torch.empty(4 * H, H, **f))
        self.bias_ih = nn.Parameter(torch.empty(4 * H, **f)) if self.bias else None
        self.bias_hh = nn.Parameter(torch.empty(4 * H, **f)) if self.bias else None
        self._peepholes = ("weight_ci", "weight_cf", "weight_co") if peephole else ()
        for name in self._peepholes:
            setattr(self, name, nn.Parameter(torch.empty(H, **f)))
        self._weights_cache = {}  # _kept_tf_weights
        self._zeros = None  # _zero_peepholes
        self.reset_parameters()

    def forward(self, input, hx=None):
        params = self._parameters  # (nn.Module's attribute lookup of each costs ~0.5 us a call)
        parametrized = self._modules.get("parametrizations")  # (weight_norm, ...): their computed tensors
        if parametrized is not None:
            params = {n: getattr(self, n) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", *self._peepholes)
                      if n in params or n in parametrized}
        w_ih, w_hh, b_ih, b_hh = params["weight_ih"], params["weight_hh"], params.get("bias_ih"), params.get("bias_hh")
        _check_input("LSTMCell", input, w_ih, self.input_size, (1, 2))
        batched = input.dim() == 2
        x = input if batched else input.unsqueeze(0)
        B, H = x.shape[0], self.hidden_size
        if hx is None:
            h0 = c0 = x.new_zeros(B, H)
        else:
            _check_state("LSTMCell", hx, (B, H) if batched else (H,), x)
            h0, c0 = hx if batched else (hx[0].unsqueeze(0), hx[1].unsqueeze(0))
        if self.peephole:
            wci, wcf, wco = params["weight_ci"], params["weight_cf"], params["weight_co"]
        else:
            wci = wcf = wco = self._zero_peepholes(H, x)
        clip = float(self.cell_clip) if self.cell_clip is not None else 0.0
        # LSTMBlockCell's ICFO blocks, its forget_bias an attr; kept between steps
        eager_grad = torch.is_grad_enabled() and not torch.compiler.is_compiling()
        w, b = self._kept_tf_weights(0, w_ih, w_hh, b_ih, b_hh, 0.0, "icfo", through=not eager_grad)
        args = (x.contiguous(), c0.contiguous(), h0.contiguous(), w, wci, wcf, wco, b, self.forget_bias, clip,
                self.peephole)
        if eager_grad:  # the weights' gradients in nn's layouts (_CellOnNnWeights)
            nn_weights = (w_ih, w_hh, b_ih, b_hh) if b_ih is not None else (w_ih, w_hh)
            i, cs, f, o, ci, co, h = _CellOnNnWeights.apply(*args, *nn_weights)
        elif torch.compiler.is_compiling() or x.is_cuda:  # the registered op in the graph; CUDA: all seven
            # written until a GPU run has run the cell's left-out outputs there (seq_lengths_test *Cuda*)
            i, cs, f, o, ci, co, h = _apply("LSTMBlockCell", *args)
        else:  # inference: only cs and h written (1,8: 5 outputs fewer, ~9 us of a ~40 us call)
            _, cs, _, _, _, _, h = _call(_OPS["LSTMBlockCell"], dict(zip(_ARGS["LSTMBlockCell"], args)), _STATE_ONLY)
        return (h, cs) if batched else (h[0], cs[0])

    def _zero_peepholes(self, H, like):
        """The op's peephole weights of a cell without them: zeros, kept (never written: an input)."""
        if torch.compiler.is_compiling():
            return like.new_zeros(H)
        zeros = self._zeros
        if zeros is None or zeros.dtype != like.dtype or zeros.device != like.device:
            zeros = self._zeros = like.new_zeros(H)
        return zeros

    def extra_repr(self):
        return (f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False") +
                f", peephole={self.peephole}, forget_bias={self.forget_bias}, cell_clip={self.cell_clip}")
