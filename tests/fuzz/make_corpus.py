#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpus (tests/fuzz/corpus/): valid and malformed .npy files for
fuzz_npy, and op calls in fuzz_run_inputs' format (see fuzz_run_inputs.cc) for every op, valid and
with one thing wrong. Deterministic; needs only the standard library.

    python3 tests/fuzz/make_corpus.py
"""
import math
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = ["seq_len_max", "x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b", "i", "cs", "f",
         "o", "ci", "co", "h", "cs_grad", "h_grad"]
OPS = ["LSTMBlockCell", "LSTMBlockCellGrad", "BlockLSTM", "BlockLSTMGrad", "BlockLSTMV2",
       "BlockLSTMGradV2"]  # the CLI's order (op_names)


def npy(descr, shape, payload, version=(1, 0), fortran=False, header=None):
    if header is None:
        dims = "".join(f"{d}, " for d in shape) if len(shape) == 1 else ", ".join(str(d) for d in shape)
        header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': ({dims}), }}"
    length_bytes = 2 if version[0] == 1 else 4
    pad = (64 - (6 + 2 + length_bytes + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    length = struct.pack("<H" if length_bytes == 2 else "<I", len(header))
    return b"\x93NUMPY" + bytes(version) + length + header.encode("latin1") + payload


def floats(shape, seed, dtype="<f4"):
    n = math.prod(shape)
    values = [math.sin(seed * 7.1 + k * 1.3) * 0.8 for k in range(n)]
    fmt = "e" if dtype == "<f2" else "f"
    return npy(dtype, shape, struct.pack(f"<{n}{fmt}", *values))


def write(folder, name, data):
    path = os.path.join(HERE, "corpus", folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def npy_seeds():
    four = struct.pack("<6f", *range(6))
    write("npy", "f32_2x3.npy", npy("<f4", (2, 3), four))
    write("npy", "f16_scalar.npy", npy("<f2", (), struct.pack("<e", 1.5)))
    write("npy", "i64_1.npy", npy("<i8", (1,), struct.pack("<q", 5)))
    write("npy", "i32_empty.npy", npy("<i4", (0, 3), b""))
    write("npy", "f64_v2.npy", npy("<f8", (2,), struct.pack("<2d", 1, 2), version=(2, 0)))
    write("npy", "f32_v3.npy", npy("<f4", (1,), struct.pack("<f", 1), version=(3, 0)))
    write("npy", "bad_magic.npy", b"\x93NUMPX" + npy("<f4", (2, 3), four)[6:])
    write("npy", "bad_version.npy", npy("<f4", (2, 3), four, version=(9, 0)))
    write("npy", "header_past_end.npy", npy("<f4", (2, 3), four)[:40])
    write("npy", "fortran.npy", npy("<f4", (2, 3), four, fortran=True))
    write("npy", "big_endian.npy", npy(">f4", (2, 3), four))
    write("npy", "complex.npy", npy("<c8", (3,), four))
    write("npy", "negative_dim.npy", npy("<f4", (-1, 3), four))
    write("npy", "overflowing_shape.npy", npy("<f4", (2**62, 2**62), four))
    write("npy", "data_short.npy", npy("<f4", (2, 4), four))
    write("npy", "data_long.npy", npy("<f4", (1, 3), four))
    write("npy", "not_a_dict.npy", npy("<f4", (2, 3), four, header="[1, 2, 3]"))
    write("npy", "missing_key.npy", npy("<f4", (2, 3), four, header="{'descr': '<f4', 'shape': (2, 3), }"))


def call(op, flags, files):
    out = bytes([OPS.index(op), flags])
    for name, data in files:
        out += bytes([NAMES.index(name)]) + struct.pack("<H", len(data)) + data
    return out


def op_files(op, T=2, B=2, I=1, H=2, dtype="<f4", L=2):
    cell = op.startswith("LSTMBlockCell")
    grad = op.endswith("Grad") or op.endswith("GradV2")
    lead = (B,) if cell else (T, B)
    shapes = {"x": lead + (I,), "cs_prev": (B, H), "h_prev": (B, H), "w": (I + H, 4 * H),
              "wci": (H,), "wcf": (H,), "wco": (H,), "b": (4 * H,)}
    if grad:
        for name in ["i", "cs", "f", "o", "ci", "co"] + ([] if cell else ["h"]) + ["cs_grad", "h_grad"]:
            shapes[name] = lead + (H,)
    files = [] if cell else [("seq_len_max", npy("<i8", (), struct.pack("<q", L)))]
    files += [(name, floats(shape, k, dtype)) for k, (name, shape) in enumerate(shapes.items())]
    return files


def run_seeds():
    for op in OPS:
        write("run", f"{op}_f32.bin", call(op, 0, op_files(op)))
        attrs = (2 if op in ("LSTMBlockCell", "BlockLSTM") else 0) | (4 if "Grad" not in op else 0)
        write("run", f"{op}_f16_peephole.bin", call(op, 1 | attrs, op_files(op, dtype="<f2")))
        files = op_files(op)
        write("run", f"{op}_missing_input.bin", call(op, 0, files[:-1]))
        wrong = [(n, floats((3,), 9) if n == "h_prev" else d) for n, d in files]
        write("run", f"{op}_wrong_shape.bin", call(op, 1, wrong))
    write("run", "BlockLSTM_seq_len_max_too_big.bin", call("BlockLSTM", 0, op_files("BlockLSTM", L=7)))
    write("run", "BlockLSTMGrad_cell_size_zero.bin", call("BlockLSTMGrad", 0, op_files("BlockLSTMGrad", H=0)))
    write("run", "BlockLSTM_input_size_zero.bin", call("BlockLSTM", 1, op_files("BlockLSTM", I=0)))
    write("run", "BlockLSTMGrad_input_size_zero.bin", call("BlockLSTMGrad", 1, op_files("BlockLSTMGrad", I=0)))
    write("run", "BlockLSTMGradV2_seq_len_max_zero.bin", call("BlockLSTMGradV2", 0, op_files("BlockLSTMGradV2", L=0)))


if __name__ == "__main__":
    npy_seeds()
    run_seeds()
