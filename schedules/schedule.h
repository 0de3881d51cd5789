// The schedules the generators call: each picks the CPU (cpu.h) or the GPU (cuda.h) schedule by
// the target being compiled, so an algorithm in generators/ is written once for both.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "Halide.h"
#include "schedules/cpu.h"
#include "schedules/cuda.h"
#include "schedules/step_tiles.h"

namespace blocklstm::schedules {

// What a schedule is fitted to: the Halide target compiled for and the tuning table's knobs for
// it (schedules/tuning.h): the CPU's for a CPU target, the CUDA ones for a GPU target.
struct Machine {
    Halide::Target target;
    CpuTuning cpu;
    CudaTuning cuda;
    // Halide's autoscheduler schedules the kernel (`blocklstm tune --baseline autoschedulers`):
    // the schedules below leave every Func as it is.
    bool autoschedule = false;
    // A bfloat16 kernel's products of two bfloat16 operands run in pairs of k (GemmBlocking::
    // bf16_pairs): the CPU target's bf16_dot_products (schedules/cpu_targets.json).
    bool bf16_dot_products = false;
    // A bfloat16 kernel's products run on AMX tiles (generators/common.h: amx_product): the CPU target's
    // amx_products (schedules/cpu_targets.json). On a target without AMX instructions (a check
    // target) the same algorithm runs on its vectors.
    bool amx_products = false;
    // The GPU schedules run as CUDA (the product) and as OpenCL (their twins in the tests, on
    // PoCL: the same loops on any CI machine).
    bool gpu() const {
        return target.has_feature(Halide::Target::CUDA) || target.has_feature(Halide::Target::OpenCL);
    }
};

// `knobs` is a table's knob string ("name:value,...") and `table` its name, for messages.
inline Machine machine(const Halide::Target &t, const std::string &table, const std::string &knobs,
                       bool autoschedule = false) {
    Machine m{t, {}, {}, autoschedule};
    if (m.gpu()) {
        m.cuda = parse_cuda_tuning(table, knobs);
        return m;
    }
    m.cpu = parse_cpu_tuning(table, knobs);
    // A batched product reads its output back between k blocks, and Halide 21 gives that load the
    // alignment its index implies (a load of an output carries no host alignment, a store does):
    // with tiles of a multiple of a vector's floats in rows, the load is an aligned vector load,
    // which faults on an output aligned to its elements only, as callers may pass. A check target
    // (another instruction set's table) may: its tests pass aligned outputs.
    const int native = t.natural_vector_size<float>();
    if (m.cpu.vector_floats == native && m.cpu.gemm_tile_rows % native == 0)
        throw std::invalid_argument(tuning_error(
            table, "gemm_tile_rows " + std::to_string(m.cpu.gemm_tile_rows) + " is a multiple of the " +
                       std::to_string(native) + " floats of a vector: Halide would read the batched products' "
                       "outputs back with aligned loads, which fault on outputs aligned to their elements only"));
    return m;
}

// How a matrix product's k and operands are blocked, which its algorithm is written for
// (generators/common.h: matrix_product).
struct GemmBlocking {
    // Steps of k per block (0: all of k in one block). On the CPU for the cache; on the GPU for
    // parallelism (the step products: CudaTuning::step_k_block).
    int k_block = 0;
    // The initial value written by a stage of its own, before the blocks are added (the GPU: the
    // CPU's first block adds it, which reads the output's old value in the other blocks, and an
    // output read before it is written would be copied from the host, which a GPU kernel's
    // device-only outputs do not have).
    bool init_apart = false;
    // Rows / columns per packed panel of the operands (0: no panels): the CPU's batched products
    // pack their operands in one panel per register tile.
    int panel_rows = 0, panel_cols = 0;
    // a and b are bfloat16 and the product runs over pairs of k, two bfloat16 products summed
    // into each float32 lane at a time (vdpbf16ps; generators/common.h: matrix_product).
    bool bf16_pairs = false;
    // A step's product also in tiles of a single row, run where the step has one row (a
    // specialization; schedules/step_tiles.h): they do not compute a whole tile's rows.
    bool single_row = false;
    // A step's product also in register tiles shorter than its tiles of this many rows, a twin per
    // height, each run on the ranges of a step's rows that go into tiles of that height (a
    // specialization per range; schedules/step_tiles.h: short_tile_rows); 0: none.
    int short_tiles_below = 0;
    // And in tall tiles of all their rows, where they are more than that and at most this many.
    int tall_tiles_up_to = 0;
    // A step's product reads b, a weight matrix, in place (not a copy per column tile) where its
    // rows are at most in_place_rows (one register tile) and its columns a multiple of
    // in_place_cols (whole tiles); 0: never (generators/common.h: matrix_product).
    int in_place_cols = 0, in_place_rows = 0;
    // Where b is read in place and a step has at most step_tiles::kFewRowsMax rows, each row
    // reads b's rows in stretches of this many columns, k outermost, the stretch's sums in a
    // buffer in L1 (GemmFuncs::part_stream), where the step's columns are a multiple of it; 0:
    // never. A one-row register tile reads two vectors of each of b's rows, 8 KiB apart at 4H =
    // 2048, which the prefetchers do not follow (step_tiles::kStreamCols).
    int in_place_stream_cols = 0;
    // bfloat16 operands read as float32 by their bits (GPU targets: generators/common.h f32).
    bool bf16_by_bits = false;
};

// bf16_operands: a and b are both bfloat16 (then the target's bf16_dot_products decides the pairs);
// projection: the forward's input projection (its k block may be its own).
inline GemmBlocking gemm_blocking(GemmShape shape, const Machine &m, bool bf16_operands = false,
                                  bool projection = false) {
    if (m.gpu())
        return {.k_block = shape == GemmShape::step ? m.cuda.step_k_block : 0, .init_apart = true, .bf16_by_bits = true};
    const bool pairs = bf16_operands && m.bf16_dot_products;
    if (shape == GemmShape::step)
        return {.k_block = m.cpu.gemm_step_k_block, .bf16_pairs = pairs, .single_row = true,
                .short_tiles_below = m.cpu.gemm_step_tile_rows, .tall_tiles_up_to = m.cpu.gemm_step_tall_tile_rows};
    const int k_block = projection && m.cpu.gemm_projection_k_block > 0 ? m.cpu.gemm_projection_k_block
                                                                        : m.cpu.gemm_k_block;
    return {.k_block = k_block, .panel_rows = m.cpu.gemm_tile_rows,
            .panel_cols = m.cpu.gemm_tile_cols(), .bf16_pairs = pairs};
}

inline void schedule_gemm(const GemmFuncs &g, const GemmUse &use, const Machine &m) {
    if (m.autoschedule) return;
    if (g.amx) return schedule_gemm_amx(g, use, m.cpu, m.target.has_feature(Halide::Target::AVX512_SapphireRapids));
    if (!m.gpu()) return schedule_gemm_cpu(g, use, m.cpu);
    const CudaTuning &c = m.cuda;
    if (use.shape == GemmShape::batched)
        return schedule_gemm_cuda(g, use.sum_is_output, c.batched_cols_per_thread,
                                  c.batched_rows_per_thread, c.batched_thread_rows);
    schedule_gemm_cuda(g, use.sum_is_output, c.step_cols_per_thread, c.step_rows_per_thread,
                       c.step_thread_rows, /*k_blocks=*/c.step_k_block > 0);
}

inline void schedule_elementwise(Halide::Func f, Halide::Var j, Halide::Var n, const Machine &m) {
    if (m.autoschedule) return;
    if (!m.gpu()) return schedule_elementwise_cpu(f, j, n, m.cpu);
    schedule_elementwise_cuda(f, j, n, m.cuda);
}

// The forward gate math, lstm(j, n) from its stage `activations` (j, n). On the GPU the stage is
// inlined, as it was before it had a name (a GPU run has not measured it otherwise).
inline void schedule_gate_math(Halide::Func lstm, Halide::Func activations, Halide::Var j, Halide::Var n,
                               const Machine &m) {
    if (m.autoschedule) return;
    if (!m.gpu()) return schedule_gate_math_cpu(lstm, activations, j, n, m.cpu);
    schedule_elementwise_cuda(lstm, j, n, m.cuda);
}

// The gate math as an update over the rows run (`run`), its pure definition undefined
// (generators/seq_fwd_step.cpp: caller_rows). CPU only.
inline void schedule_gate_math_rows(Halide::Func lstm, Halide::Func activations, Halide::Var j, Halide::RDom run,
                                    const Machine &m) {
    if (m.autoschedule) return;
    if (m.gpu()) throw std::invalid_argument("the gate math on the caller's rows is scheduled for the CPU only");
    schedule_gate_math_rows_cpu(lstm, activations, j, run, m.cpu);
}

// A stage several outputs read (the cell's gradients: dicfo, cs_prev_grad and the peephole sums):
// computed once, for all of them, then scheduled as schedule_elementwise.
inline void schedule_shared_stage(Halide::Func f, Halide::Var j, Halide::Var n, const Machine &m) {
    if (m.autoschedule) return;
    f.compute_root();
    schedule_elementwise(f, j, n, m);
}

inline void schedule_gate_blocks(Halide::Func f, Halide::Var j, Halide::Var gate, Halide::Var n,
                                 const Machine &m) {
    if (m.autoschedule) return;
    if (!m.gpu()) return schedule_gate_blocks_cpu(f, j, gate, n, m.cpu);
    schedule_gate_blocks_cuda(f, j, gate, n, m.cuda);
}

// gates as in schedule_gate_blocks and `other` (j, n) element-wise, in one loop over n on the CPU;
// `dtype` is the kernel's.
inline void schedule_gate_blocks_and(Halide::Func gates, Halide::Func other, Halide::Var j,
                                     Halide::Var gate, Halide::Var n, Halide::Type dtype, const Machine &m) {
    if (m.autoschedule) return;
    if (!m.gpu()) return schedule_gate_blocks_and_cpu(gates, other, j, gate, n, m.cpu);
    schedule_gate_blocks_and_cuda(gates, other, j, gate, n, dtype, m.cuda);
}

// `sum` over `rows` into a vector indexed by x, and `out`(x), the output that rounds it: on the
// GPU both run there (an output left to the host would read a device-only buffer).
inline void schedule_column_sum(Halide::Func sum, Halide::Func out, Halide::Var x,
                                const std::vector<Halide::RVar> &rows, const Machine &m) {
    if (m.autoschedule) return;
    if (!m.gpu()) return schedule_column_sum_cpu(sum, out, x, rows, m.cpu);
    schedule_column_sum_cuda(sum, out, x, rows, m.cuda);
}

// out(x) = sum(x), sum blocked over k with part(x, kb) one block's sum (generators/common.h:
// column_sums). The CPU's w_grad product alone has them (its b in panels).
inline void schedule_column_sums(Halide::Func out, Halide::Func sum, Halide::Func part, Halide::Var x,
                                 const Machine &m) {
    if (m.gpu()) throw std::invalid_argument("column sums in blocks: the GPU sums dgates in seq_bwd_reduce");
    if (m.autoschedule) return;
    schedule_column_sums_cpu(out, sum, part, x, m.cpu);
}

// out(x, y) = staged(y, x), staged a shared-memory tile of the input. GPU only: the CPU's products
// read W^T from panels packed straight from w's rows (generators/panels.cpp transpose=true).
inline void schedule_transpose(Halide::Func out, Halide::Func staged, Halide::Var x, Halide::Var y,
                               const Machine &m) {
    if (m.autoschedule) return;
    if (!m.gpu()) throw std::invalid_argument("transpose: no CPU schedule (the CPU plans pack W^T into panels)");
    schedule_transpose_cuda(out, staged, x, y);
}

// Rows copied by an index: on the CPU in tasks of many rows; on the GPU as any element-wise stage.
inline void schedule_gather_rows(Halide::Func out, Halide::Var c, Halide::Var r, const Machine &m) {
    if (m.autoschedule) return;
    if (!m.gpu()) return schedule_gather_rows_cpu(out, c, r, m.cpu);
    schedule_elementwise_cuda(out, c, r, m.cuda);
}

// Packed weight panels exist for the CPU's per-step products only; pairs: bfloat16 pair panels
// (schedules/panel_layout.h), xi running over twice the panel's columns.
inline void schedule_panels(Halide::Func out, Halide::Func source, Halide::Var xi, Halide::Var k, Halide::Var xo,
                            bool transposed, bool pairs, const Machine &m) {
    if (m.gpu()) throw std::invalid_argument("panels: the GPU products read the weights in place");
    if (m.autoschedule) return;
    schedule_panels_cpu(out, source, xi, k, xo, transposed, pairs, m.cpu);
}

// A bfloat16 operand in AMX's pair panel out(kk, x, k) (generators/panels.cpp: the weights;
// generators/gemm.cpp: w_grad's gate gradients).
inline void schedule_amx_panels(Halide::Func out, Halide::Var kk, Halide::Var x, Halide::Var k, const Machine &m) {
    if (m.autoschedule) return;
    schedule_amx_panels_cpu(out, kk, x, k, m.cpu);
}

}  // namespace blocklstm::schedules
