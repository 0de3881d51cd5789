"""blocklstm: TensorFlow's fused LSTM ops on NumPy arrays and DLPack tensors.

The six ops keep TF's names (in snake case), argument order and attr defaults:

    lstm_block_cell, lstm_block_cell_grad, block_lstm, block_lstm_grad, block_lstm_v2,
    block_lstm_grad_v2

Each takes float32 or float16 arrays (NumPy, or any DLPack tensor: torch on the CPU or CUDA),
C-contiguous, all of one dtype and device, and returns a named tuple of its outputs in TF's order,
in the inputs' dtype, device and framework, without copying. Errors are ValueError with the
library's message; nothing is written on error. The functions are generated from the library's
op registry (blocklstm.ops()). PyTorch: blocklstm.torch (an nn.LSTM-like module, custom ops).
"""
import collections
import inspect
import re

from . import _core

__version__ = _core.__version__
__all__ = ["ops", "cuda_available", "cpu_target_in_use"]


def ops():
    """Every op as a dict: name, inputs and outputs (TF names, shapes), attr defaults, layout."""
    return _core.ops()


cuda_available = _core.cuda_available
cpu_target_in_use = _core.cpu_target_in_use


def _snake(name):
    # LSTMBlockCellGrad -> lstm_block_cell_grad, BlockLSTMGradV2 -> block_lstm_grad_v2
    name = re.sub(r"V(\d+)$", r"_v\1", name)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _int_scalar(name, value):
    """seq_len_max as TF takes it: an int, or a 0-d / 1-element integer array or tensor."""
    if isinstance(value, bool):
        raise ValueError(f"argument '{name}': expected an integer, got bool")
    if isinstance(value, int):
        return value
    shape = tuple(getattr(value, "shape", ()))
    dtype = str(getattr(value, "dtype", ""))
    if "int" not in dtype or len([d for d in shape if d != 1]) > 0:
        raise ValueError(f"argument '{name}': expected an int or a 0-d/1-element integer array, "
                         f"got {type(value).__name__} of dtype {dtype or 'none'} and shape {shape}")
    return int(value.reshape(()).item() if hasattr(value, "item") else value)


def _int64(name, value):
    """The library takes int64: a larger value is out of range, named, not a TypeError."""
    if not -2 ** 63 <= value < 2 ** 63:
        raise ValueError(f"argument '{name}' is {value}: expected a value in [0, T] (x's time steps)")
    return value


def _make(op):
    inputs = [a["name"] for a in op["inputs"]]
    outputs = [a["name"] for a in op["outputs"]]
    Result = collections.namedtuple(op["name"] + "Outputs", outputs)
    P = inspect.Parameter
    params = ([P("seq_len_max", P.POSITIONAL_OR_KEYWORD)] if op["sequence"] else [])
    params += [P(n, P.POSITIONAL_OR_KEYWORD) for n in inputs]
    attrs = [(a, op[a]) for a in ("forget_bias", "cell_clip") if op[a] is not None]
    params += [P(a, P.POSITIONAL_OR_KEYWORD, default=d) for a, d in attrs]
    params += [P("use_peephole", P.POSITIONAL_OR_KEYWORD, default=False)]
    signature = inspect.Signature(params)

    def fn(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        seq_len_max = _int64("seq_len_max", _int_scalar("seq_len_max", a["seq_len_max"])) if op["sequence"] else 0
        tensors = {n: a[n] for n in inputs}
        out = _core.invoke(op["name"], seq_len_max, tensors, None,
                           a.get("forget_bias"), a.get("cell_clip"), bool(a["use_peephole"]))
        return Result(*(out[n] for n in outputs))

    fn.__name__ = fn.__qualname__ = _snake(op["name"])
    fn.__signature__ = signature
    shapes = ", ".join(f"{x['name']} {x['shape']}" for x in op["inputs"])
    fn.__doc__ = (f"TF's {op['name']}: {op['summary']}\n\nInputs: {shapes}.\n"
                  f"Returns {Result.__name__}({', '.join(outputs)}).")
    return fn


for _op in _core.ops():
    globals()[_snake(_op["name"])] = _make(_op)
    __all__.append(_snake(_op["name"]))
del _op
