"""blocklstm for PyTorch: the six ops as torch custom ops, and LSTM, a one-layer nn.LSTM with
optional peepholes.

The ops are registered as torch.ops.blocklstm.<op> (block_lstm, block_lstm_grad, block_lstm_v2,
block_lstm_grad_v2, lstm_block_cell, lstm_block_cell_grad), their schemas generated from the
library's op registry. They run on CPU and CUDA tensors (CUDA: on the current stream), have fake
kernels (torch.compile, torch.export trace them) and the forward ops have autograd: the gradient
is TF's, through the grad op (of a forward op's outputs only cs and h carry gradients, as in TF).
"""
import math
import re
import warnings

import torch
from torch import nn

from . import _core, _snake

_OPS = {op["name"]: op for op in _core.ops()}
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


def _output_shapes(op, dims):
    """The outputs' shapes from the registry's (e.g. "[I+H,4H]") at dims (T, B, I, H): ints, or
    torch's symbolic sizes while tracing, so that dynamic shapes stay symbolic."""
    size = dict(zip("TBIH", dims))

    def term(t):
        count, symbol = re.fullmatch(r"(\d*)([TBIH])", t).groups()
        return int(count or 1) * size[symbol]

    return [[sum(term(t) for t in d.split("+")) for d in a["shape"][1:-1].split(",")] for a in op["outputs"]]


def _schema(op):
    args = ["SymInt seq_len_max"] if op["sequence"] else []
    args += [f"Tensor {a['name']}" for a in op["inputs"]]
    args += [f"float {a}={op[a]!r}" for a in ("forget_bias", "cell_clip") if op[a] is not None]
    args += ["bool use_peephole=False"]
    outs = ", ".join("Tensor" for _ in op["outputs"])
    return f"({', '.join(args)}) -> ({outs})"


def _inputs(op, args):
    """The call's tensors by name, all tensors on x's device: checked by the kernels and by the fake
    kernels alike (the dispatcher picks the fake one when any input is a meta tensor, whose
    outputs would otherwise be uninitialised memory on x's device)."""
    inputs = {a["name"]: args[a["name"]] for a in op["inputs"]}
    x = inputs["x"]
    for name, t in inputs.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{op['name']}: argument '{name}': expected a tensor, got {type(t).__name__}")
        if t.device != x.device:
            raise ValueError(f"{op['name']}: argument '{name}' is on {t.device}: expected {x.device}, as 'x'")
    return inputs


def _call(op, args):
    inputs = {name: t.detach() for name, t in _inputs(op, args).items()}  # DLPack takes no autograd tensors
    x = inputs["x"]
    shapes = _output_shapes(op, _dims(op, inputs))
    outs = [torch.empty(s, dtype=x.dtype, device=x.device) for s in shapes]
    # On torch's current stream, for this call only: the thread's stream is put back after, so a
    # later call of the plain API never runs on a stream torch may have freed since.
    previous = _core.cuda_stream() if x.is_cuda else None
    if x.is_cuda:
        _core.set_cuda_stream(torch.cuda.current_stream(x.device).cuda_stream)
    try:
        _core.invoke(op["name"], args.get("seq_len_max", 0), inputs,
                     {a["name"]: t for a, t in zip(op["outputs"], outs)},
                     args.get("forget_bias"), args.get("cell_clip"), bool(args["use_peephole"]))
    finally:
        if x.is_cuda:
            _core.set_cuda_stream(previous)
    return tuple(outs)


def _arg_names(op):
    names = ["seq_len_max"] if op["sequence"] else []
    names += [a["name"] for a in op["inputs"]]
    names += [a for a in ("forget_bias", "cell_clip") if op[a] is not None]
    return names + ["use_peephole"]


def _bind(op, names, args, kwargs):
    """The call's arguments by name, with the attr defaults the dispatcher may leave out."""
    a = {k: op[k] for k in ("forget_bias", "cell_clip") if op[k] is not None}
    a["use_peephole"] = False
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
    ctx.save_for_backward(*[t for t in inputs if isinstance(t, torch.Tensor)], *output)
    ctx.scalars = [t for t in inputs if not isinstance(t, torch.Tensor)]


def _grad_or_zeros(grad, like):
    return grad if grad is not None else torch.zeros_like(like)


def _sequence_backward(grad_op):
    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        inputs, (i, cs, f, o, ci, co, h) = saved[:8], saved[8:]
        seq_len_max, *_, use_peephole = ctx.scalars
        g = getattr(torch.ops.blocklstm, grad_op)(
            seq_len_max, *inputs, i, cs, f, o, ci, co, h, _grad_or_zeros(grads[1], cs).contiguous(),
            _grad_or_zeros(grads[6], h).contiguous(), use_peephole)
        return (None, *g) + (None,) * (len(ctx.scalars) - 1)
    return backward


def _cell_backward(ctx, *grads):
    saved = ctx.saved_tensors
    (x, cs_prev, h_prev, w, wci, wcf, wco, b), (i, cs, f, o, ci, co, h) = saved[:8], saved[8:]
    use_peephole = ctx.scalars[-1]
    cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad = torch.ops.blocklstm.lstm_block_cell_grad(
        x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co,
        _grad_or_zeros(grads[1], cs).contiguous(), _grad_or_zeros(grads[6], h).contiguous(), use_peephole)
    # TF's LSTMBlockCell gradient: the products of the gate gradients, here in float32.
    xh = torch.cat([x, h_prev], 1).float()
    d = dicfo.float()
    xh_grad = (d @ w.float().t()).to(x.dtype)
    I = x.shape[1]
    w_grad = (xh.t() @ d).to(w.dtype)
    b_grad = d.sum(0).to(b.dtype)
    return (xh_grad[:, :I], cs_prev_grad, xh_grad[:, I:], w_grad, wci_grad, wcf_grad, wco_grad, b_grad,
            None, None, None)


def _no_double_backward(ctx, *grads):
    raise RuntimeError("blocklstm: the gradient ops have no gradient of their own: a second derivative "
                       "(double backward, gradgradcheck, create_graph=True then grad again) is not supported")


for _grad in ("block_lstm_grad", "block_lstm_grad_v2", "lstm_block_cell_grad"):  # an error, not zeros
    torch.library.register_autograd(f"blocklstm::{_grad}", _no_double_backward,
                                    setup_context=lambda ctx, inputs, output: None, lib=_lib)

torch.library.register_autograd("blocklstm::block_lstm", _sequence_backward("block_lstm_grad"),
                                setup_context=_setup_context, lib=_lib)
torch.library.register_autograd("blocklstm::block_lstm_v2", _sequence_backward("block_lstm_grad_v2"),
                                setup_context=_setup_context, lib=_lib)
torch.library.register_autograd("blocklstm::lstm_block_cell", _cell_backward,
                                setup_context=_setup_context, lib=_lib)


# ---- The module ----------------------------------------------------------------------------------

class LSTM(nn.Module):
    """A one-layer LSTM with nn.LSTM's arguments, parameters and call, and optional peepholes.

    LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False, proj_size=0, device=None, dtype=None, *, peephole=False, forget_bias=0.0,
    cell_clip=None): nn.LSTM's arguments in nn.LSTM's order (one layer, one direction, with biases
    and no projection, as TF's fused ops: other values are refused), then TF's options by keyword.
    Parameters: weight_ih_l0 [4H, I], weight_hh_l0 [4H, H], bias_ih_l0 [4H], bias_hh_l0 [4H] (gate
    order i, f, g, o, as nn.LSTM), and with peephole=True weight_ci_l0, weight_cf_l0,
    weight_co_l0 [H] (TF's wci, wcf, wco). load_state_dict(nn_lstm.state_dict()) works as it is;
    peephole weights missing from a state dict keep their values (zeros after reset_parameters).
    forward(input, (h_0, c_0)=None) -> (output, (h_n, c_n)) as nn.LSTM (batched [T, B, I] or
    [B, T, I] with batch_first, or unbatched [T, I]), with TF's forget_bias (added to the forget
    gate) and cell_clip (None: no clipping). The gradient is TF's: straight through the clip, so
    with an active cell_clip it is not the derivative of the clipped forward.
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None, *, peephole=False,
                 forget_bias=0.0, cell_clip=None):
        super().__init__()
        for name, value, supported in (("num_layers", num_layers, 1), ("bias", bool(bias), True),
                                       ("bidirectional", bool(bidirectional), False), ("proj_size", proj_size, 0)):
            if type(value) is not type(supported) or value != supported:  # num_layers=True is no 1
                raise ValueError(f"LSTM: {name}={value!r} is not supported: expected {supported!r} (one layer, "
                                 "one direction, with biases, no projection, as TF's fused ops; stack modules "
                                 "for more layers)")
        if dropout:  # as nn.LSTM: dropout acts between layers, and there is one
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers=1")
        self.input_size, self.hidden_size = input_size, hidden_size
        self.peephole, self.forget_bias, self.cell_clip = peephole, float(forget_bias), cell_clip
        self.batch_first, self.dropout = batch_first, float(dropout)
        f = {"device": device, "dtype": dtype}
        H = hidden_size
        self.weight_ih_l0 = nn.Parameter(torch.empty(4 * H, input_size, **f))
        self.weight_hh_l0 = nn.Parameter(torch.empty(4 * H, H, **f))
        self.bias_ih_l0 = nn.Parameter(torch.empty(4 * H, **f))
        self.bias_hh_l0 = nn.Parameter(torch.empty(4 * H, **f))
        self._peepholes = ("weight_ci_l0", "weight_cf_l0", "weight_co_l0") if peephole else ()
        for name in self._peepholes:
            setattr(self, name, nn.Parameter(torch.empty(H, **f)))
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1 / math.sqrt(self.hidden_size)  # as nn.LSTM
        for name, p in self.named_parameters():
            if name in self._peepholes:
                nn.init.zeros_(p)
            else:
                nn.init.uniform_(p, -bound, bound)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        for name in self._peepholes:  # an nn.LSTM's state: the peepholes keep their values
            if prefix + name in missing_keys:
                missing_keys.remove(prefix + name)

    def flatten_parameters(self):
        """nn.LSTM's cuDNN weight compaction: nothing to do here (the weights are used as they are)."""

    def tf_weights(self):
        """TF's w [I+H, 4H] and b [4H] (IFCO gate blocks, BlockLSTMV2's layout) from nn.LSTM's."""
        w = torch.cat([self.weight_ih_l0, self.weight_hh_l0], 1).t().contiguous()
        b = self.bias_ih_l0 + self.bias_hh_l0
        if self.forget_bias:
            H = self.hidden_size
            b = torch.cat([b[:H], b[H:2 * H] + self.forget_bias, b[2 * H:]])
        return w, b

    def forward(self, input, hx=None):
        if isinstance(input, nn.utils.rnn.PackedSequence):
            raise TypeError("LSTM: a PackedSequence is not supported: expected a padded tensor "
                            "(torch.nn.utils.rnn.pad_packed_sequence)")
        if input.dim() not in (2, 3):
            raise ValueError(f"LSTM: Expected input to be 2D or 3D, got {input.dim()}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"LSTM: input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                             f"got {input.shape[-1]}")
        weight = self.weight_ih_l0
        if input.dtype != weight.dtype:  # nn.LSTM's words
            raise ValueError(f"LSTM: input dtype ({input.dtype}) does not match weight dtype ({weight.dtype}). "
                             f"Convert input: input.to({weight.dtype}), or convert model: model.to({input.dtype})")
        if input.device != weight.device:
            raise RuntimeError(f"LSTM: Input and parameter tensors are not at the same device, found input "
                               f"tensor at {input.device} and parameter tensor at {weight.device}")
        batched = input.dim() == 3  # unbatched [T, I]: one batch row, as nn.LSTM
        x = (input.transpose(0, 1) if self.batch_first else input) if batched else input.unsqueeze(1)
        x = x.contiguous()
        T, B, H = x.shape[0], x.shape[1], self.hidden_size
        if hx is None:
            h0 = c0 = x.new_zeros(B, H)
        else:
            want = (1, B, H) if batched else (1, H)
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise ValueError("LSTM: hx must be a tuple (h_0, c_0), as nn.LSTM's")
            for k, t in enumerate(hx):
                if tuple(t.shape) != want:
                    raise RuntimeError(f"LSTM: Expected hidden[{k}] size {want}, got {list(t.shape)}")
                if t.dtype != input.dtype or t.device != input.device:
                    raise RuntimeError(f"LSTM: Expected hidden[{k}] to be {input.dtype} on {input.device} as the "
                                       f"input, got {t.dtype} on {t.device}")
            h0, c0 = (t.reshape(B, H).contiguous() for t in hx)
        if T == 0:  # no step: the state passes through
            output = x.new_zeros(0, B, H)
            h_n, c_n = h0.unsqueeze(0).clone(), c0.unsqueeze(0).clone()
        else:
            output, h_n, c_n = self._sequence(x, h0, c0)
        if not batched:
            return output.squeeze(1), (h_n.squeeze(1), c_n.squeeze(1))
        return (output.transpose(0, 1) if self.batch_first else output), (h_n, c_n)

    def _sequence(self, x, h0, c0):
        T, H = x.shape[0], self.hidden_size
        w, b = self.tf_weights()
        if self.peephole:
            wci, wcf, wco = self.weight_ci_l0, self.weight_cf_l0, self.weight_co_l0
        else:
            wci = wcf = wco = x.new_zeros(H)
        clip = float(self.cell_clip) if self.cell_clip is not None else 0.0
        i, cs, f, o, ci, co, h = torch.ops.blocklstm.block_lstm_v2(
            T, x, c0, h0, w, wci, wcf, wco, b, clip, self.peephole)
        return h, h[-1:].clone(), cs[-1:].clone()  # h_n and c_n of their own, as nn.LSTM's

    def extra_repr(self):
        return (f"{self.input_size}, {self.hidden_size}, peephole={self.peephole}, "
                f"forget_bias={self.forget_bias}, cell_clip={self.cell_clip}, batch_first={self.batch_first}")
