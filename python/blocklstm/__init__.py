"""blocklstm: TensorFlow's fused LSTM ops on NumPy arrays and DLPack tensors.

The six ops keep TF's names (in snake case), argument order and attr defaults:

    lstm_block_cell, lstm_block_cell_grad, block_lstm, block_lstm_grad, block_lstm_v2,
    block_lstm_grad_v2

Each takes float32, float16 or bfloat16 arrays (NumPy, bfloat16 as ml_dtypes.bfloat16, or any
DLPack tensor without autograd: torch, CuPy, JAX, ... on the CPU or a CUDA device), C-contiguous,
all of one dtype and device, and returns a
named tuple of its outputs in TF's order, in the inputs' dtype and device, without copying: as
arrays of x's framework for NumPy, torch, CuPy, JAX and TensorFlow, else NumPy arrays (CPU only).
Errors are ValueError naming the op, the argument, what was expected and what was given; nothing
is written on error. The functions are generated from the library's op registry
(blocklstm.ops()). The sequence ops also take a keyword seq_lengths (blocklstm's extension: each
row's own length, the padded steps not computed), and reverse_sequence is TF's ReverseSequence. PyTorch, with autograd: blocklstm.torch (an nn.LSTM-like module, custom ops).

Threads and memory: set_num_threads (the CPU kernels' threads; default one per core, or the
environment variable HL_NUM_THREADS), set_thread_pool / thread_pool_in_use (the library's own
pool, or the OpenMP threads PyTorch runs on: blocklstm.torch chooses those), set_host_cache_limit / host_cache_bytes (CPU workspaces
kept between calls), cuda_release_memory (the device memory kept between CUDA calls),
cuda_graph_stats (how the CUDA time loops have run: direct, captured, graph launches),
cuda_available / cuda_built / cuda_unavailable_reason (whether a CUDA device runs the ops, and why
not), set_cpu_target / cpu_target_in_use / cpu_targets (the x86 instruction set
the kernels run as; also the environment variable BLOCKLSTM_CPU_TARGET).
"""
import collections
import inspect
import numbers
import re

import numpy as _np

from . import _core

__version__ = _core.__version__
__all__ = ["ops", "cuda_available", "cuda_built", "cuda_unavailable_reason", "cpu_target_in_use", "cpu_target_pinned", "set_cpu_target", "cpu_targets",
           "set_num_threads", "set_thread_pool", "thread_pool_in_use", "set_host_cache_limit", "host_cache_bytes", "cuda_release_memory",
           "cuda_graph_stats"]


def ops():
    """Every op as a dict: name, inputs and outputs (TF names, shapes), attr defaults, layout."""
    return _core.ops()


def cuda_available():
    """Whether a CUDA device can run the ops (a build with CUDA, a driver and a device)."""
    return _core.cuda_available()


def cuda_built():
    """Whether this build has the CUDA kernels (a build where the CUDA toolkit was found)."""
    return _core.cuda_built()


def cuda_unavailable_reason():
    """Why cuda_available() is False ('' when it is True): no driver, cuInit's error, no device, or
    a build without CUDA."""
    return _core.cuda_unavailable_reason()


def cpu_target_in_use():
    """The CPU target the kernels run as now, e.g. 'avx2-fma-f16c'."""
    return _core.cpu_target_in_use()


def cpu_target_pinned():
    """Whether a CPU target is pinned (set_cpu_target or BLOCKLSTM_CPU_TARGET)."""
    return _core.cpu_target_pinned()


def set_cpu_target(target):
    """Pins the CPU kernels of every later call to one compiled target ('avx512', 'avx2', 'sse41',
    a name from cpu_targets(), or its Halide target); '' returns to the automatic choice. A target
    this CPU cannot run is a ValueError saying what it lacks."""
    _core.set_cpu_target(target)


def cpu_targets():
    """Every compiled CPU target, best first, as a dict: name, halide_target, tuning_table,
    tuned_on, check_only, tuned_for (the CPUs its table is for, '' for any; chosen automatically
    only there), tuned_for_this_cpu, runs_here, missing (what this CPU or its OS lacks),
    bf16_dot_products (its bfloat16 products run as pairs of bfloat16 products: vdpbf16ps),
    amx_products (its bfloat16 forward products run on AMX tiles), other_dtypes_as (the target whose
    float32 and float16 kernels it runs, '' for its own)."""
    return _core.cpu_targets()


def set_num_threads(threads):
    """Threads of the CPU kernels (Halide's thread pool): 0 is one per core, the default unless the
    environment variable HL_NUM_THREADS sets it. Set it before the first op call; in a process per
    rank or worker, give each its share of the cores."""
    _core.set_num_threads(_integer("set_num_threads", "threads", threads))


def set_thread_pool(pool):
    """Where the CPU kernels' parallel loops run: "own" (the library's thread pool, the default) or
    "openmp" (the threads of an OpenMP runtime already loaded in the process, e.g. PyTorch's, whose
    workers otherwise spin on the cores for milliseconds after each torch op; importing
    blocklstm.torch chooses it when PyTorch runs on OpenMP). Threads there: set_num_threads' number
    where one was set, else OpenMP's (torch.set_num_threads). ValueError for another name, or
    when no OpenMP runtime is loaded."""
    if not isinstance(pool, str):
        raise ValueError(f"set_thread_pool: pool is {pool!r}: expected \"own\" or \"openmp\"")
    _core.set_thread_pool(pool)


def thread_pool_in_use():
    """ "own", "openmp (<library file>)" or "halide" (environment BLOCKLSTM_THREAD_POOL=halide)."""
    return _core.thread_pool_in_use()


def set_host_cache_limit(max_bytes):
    """At most max_bytes of CPU workspace memory are kept between calls (default 1 GiB); 0 releases
    it all and keeps none from then on."""
    _core.set_host_cache_limit(_integer("set_host_cache_limit", "max_bytes", max_bytes))


def host_cache_bytes():
    """Bytes of CPU workspace memory kept for the next call now."""
    return _core.host_cache_bytes()


def cuda_release_memory():
    """Gives back the device memory kept between CUDA calls for speed (this thread's cuBLAS
    handles, the kernels' cached intermediates, the workspace pools' free memory); call it when no
    blocklstm CUDA call is running. Later calls allocate again. Without a device it does nothing."""
    _core.cuda_release_memory()


def cuda_graph_stats():
    """How this process's CUDA time loops have run so far, as counts: {'direct': run without a
    graph (a shape's first call, or graphs off), 'captures': captured into a graph, 'updates': of
    those, into the shape's graph already made, 'launches': graph launches, 'failures': captures
    that failed}. A loop called again with the same shape and memory launches its graph without a
    capture; captures growing with the calls mean the arguments change between calls."""
    return _core.cuda_graph_stats()


def _integer(function, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{function}: argument '{name}': expected an integer, got {type(value).__name__}")
    return int(value)


def _snake(name):
    # LSTMBlockCellGrad -> lstm_block_cell_grad, BlockLSTMGradV2 -> block_lstm_grad_v2
    name = re.sub(r"V(\d+)$", r"_v\1", name)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _seq_len_max(op, value, x):
    """seq_len_max as TF takes it: an int, or a 0-d / 1-element integer array or tensor; in int64,
    as the library takes it (a larger value is out of range, named, not a TypeError)."""
    arg = f"{op}: argument 'seq_len_max'"
    if isinstance(value, bool):
        raise ValueError(f"{arg}: expected an integer, got bool")
    if not isinstance(value, int):
        shape = tuple(getattr(value, "shape", ()))
        dtype = str(getattr(value, "dtype", ""))
        if "int" not in dtype or len([d for d in shape if d != 1]) > 0:
            raise ValueError(f"{arg}: expected an int or a 0-d/1-element integer array, "
                             f"got {type(value).__name__} of dtype {dtype or 'none'} and shape {shape}")
        value = int(value.reshape(()).item() if hasattr(value, "item") else value)
    if not -2 ** 63 <= value < 2 ** 63:
        T = getattr(x, "shape", (None,))[0] if len(getattr(x, "shape", ())) else None
        raise ValueError(f"{arg} is {value}: expected a value in [0, T]" + (f" = [0, {T}]" if T is not None else ""))
    return value


def _attrs(op, a):
    """TF's attrs, type-checked here (the binding's own error would be a TypeError listing its
    internal signature): forget_bias and cell_clip real numbers, use_peephole a bool."""
    for name in ("forget_bias", "cell_clip"):
        if name in a and (isinstance(a[name], bool) or not isinstance(a[name], numbers.Real)):
            raise ValueError(f"{op}: argument '{name}': expected a float, got {type(a[name]).__name__}")
    peephole = a["use_peephole"]
    if not (isinstance(peephole, bool) or (getattr(peephole, "dtype", None) is not None and
                                           getattr(peephole.dtype, "kind", "") == "b" and
                                           tuple(getattr(peephole, "shape", ())) == ())):
        raise ValueError(f"{op}: argument 'use_peephole': expected a bool, got {type(peephole).__name__}")
    return ({k: (float(a[k]) if k in a else None) for k in ("forget_bias", "cell_clip")}, bool(peephole))


def _is_numpy_bfloat16(a):
    return isinstance(a, _np.ndarray) and a.dtype.name == "bfloat16"


def _bfloat16_as_bits(tensors):
    """NumPy's bfloat16 (ml_dtypes) goes to the library as its uint16 view, named (the buffer
    protocol and DLPack carry no bfloat16); returns the tensors to pass and those names."""
    names = {n for n, t in tensors.items() if _is_numpy_bfloat16(t)}
    return {n: (t.view(_np.uint16) if n in names else t) for n, t in tensors.items()}, names


def _bfloat16_from_bits(result, names):
    """The uint16 outputs of a call that passed NumPy bfloat16 inputs, as ml_dtypes.bfloat16."""
    if not names:
        return result
    import ml_dtypes  # present: the inputs are its arrays
    return {n: (a.view(ml_dtypes.bfloat16) if isinstance(a, _np.ndarray) and a.dtype == _np.uint16 else a)
            for n, a in result.items()}


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
    optional = [a["name"] for a in op["optional_inputs"]]  # blocklstm's extensions: seq_lengths
    params += [P(n, P.KEYWORD_ONLY, default=None) for n in optional]
    signature = inspect.Signature(params)

    def fn(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        seq_len_max = _seq_len_max(op["name"], a["seq_len_max"], a["x"]) if op["sequence"] else 0
        attrs, use_peephole = _attrs(op["name"], a)
        tensors = {n: a[n] for n in inputs}
        for n in optional:
            if a[n] is not None:
                tensors[n] = _np.ascontiguousarray(a[n], dtype=_np.int64) if isinstance(a[n], (list, tuple)) else a[n]
        tensors, bfloat16 = _bfloat16_as_bits(tensors)
        out = _core.invoke(op["name"], seq_len_max, tensors, None, attrs["forget_bias"], attrs["cell_clip"],
                           use_peephole, bfloat16)
        out = _bfloat16_from_bits(out, bfloat16)
        return Result(*(out[n] for n in outputs))

    fn.__name__ = fn.__qualname__ = _snake(op["name"])
    fn.__signature__ = signature
    shapes = ", ".join(f"{x['name']} {x['shape']}" for x in op["inputs"])
    extension = ("\nseq_lengths (keyword, optional; blocklstm's extension, not TF's): [B] int32 or int64 "
                 "on the CPU (a list is taken too), each in [0, T]: row b runs min(seq_lengths[b], "
                 "seq_len_max) steps; its outputs past them are zero (docs/semantics.md).\n") if optional else ""
    fn.__doc__ = (f"TF's {op['name']}: {op['summary']}\n\nInputs: {shapes}.\n{extension}"
                  f"Returns {Result.__name__}({', '.join(outputs)}).")
    return fn


def reverse_sequence(input, seq_lengths):
    """TF's ReverseSequence with seq_axis 0 and batch_axis 1: each row b of input [T, B, W] (float32,
    float16 or bfloat16, CPU or CUDA) reversed within its first seq_lengths[b] steps, the rest as it is;
    seq_lengths [B] int32 or int64 on the CPU (or a list), each in [0, T]. One kernel launch; a new
    array of input's framework."""
    if isinstance(seq_lengths, (list, tuple)):
        seq_lengths = _np.ascontiguousarray(seq_lengths, dtype=_np.int64)
    tensors, bfloat16 = _bfloat16_as_bits({"input": input})
    out = _core.reverse_sequence(tensors["input"], seq_lengths, None, bfloat16)
    return _bfloat16_from_bits({"output": out}, bfloat16)["output"]


__all__.append("reverse_sequence")

for _op in _core.ops():
    globals()[_snake(_op["name"])] = _make(_op)
    __all__.append(_snake(_op["name"]))
del _op
