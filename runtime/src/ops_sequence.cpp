// BlockLSTM, BlockLSTMV2, BlockLSTMGrad, BlockLSTMGradV2: the time loops. Only the recurrence
// runs per step; the input projection (forward) and x_grad, w_grad, b_grad
// and the peephole grads (backward) are batched over the whole sequence.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <unistd.h>

#include "runtime/src/buf.h"
#include "runtime/src/exec.h"
#include "runtime/src/kernel_args.h"
#include "runtime/src/kernel_table.h"
#include "runtime/src/plans.h"
#include "runtime/src/products.h"
#include "runtime/src/step_rows.h"
#include "runtime/src/thread_pool.h"
#include "runtime/src/validate.h"
#include "runtime/src/weight_grad_chunks.h"
#include "schedules/step_tiles.h"

namespace blocklstm {
namespace detail {
namespace {

struct SeqInputs {
    int64_t seq_len_max;
    const TV &x, &cs_prev, &h_prev, &w, &wci, &wcf, &wco, &b;
    const TV *seq_lengths;  // blocklstm's extension (blocklstm.h); nullptr: none
};
struct SeqDims {
    int64_t T, B, I, H, L;
    Device device;  // the tensors'
};
// The forward activations and output gradients the grad ops take, in TF's order.
struct SeqActivations {
    const TV &i, &cs, &f, &o, &ci, &co, &h, &cs_grad, &h_grad;
    template <typename F>
    void each(F &&fn) const {
        fn("i", i), fn("cs", cs), fn("f", f), fn("o", o), fn("ci", ci), fn("co", co), fn("h", h),
            fn("cs_grad", cs_grad), fn("h_grad", h_grad);
    }
};

// TF's checks of the nine inputs shared by all sequence ops, in TF's order. The cell
// size comes from cs_prev (forward) or from w (grad, as TF does).
SeqDims validate_sequence_inputs(Validator &v, const SeqInputs &in, bool cell_size_from_w) {
    check_inputs(v, {{"x", in.x, 3}, {"cs_prev", in.cs_prev, 2}, {"h_prev", in.h_prev, 2},
                     {"w", in.w, 2}, {"wci", in.wci, 1}, {"wcf", in.wcf, 1}, {"wco", in.wco, 1},
                     {"b", in.b, 1}});

    SeqDims d{in.x.shape[0], in.x.shape[1], in.x.shape[2], 0, in.seq_len_max, in.x.device};
    if (cell_size_from_w) {
        if (in.w.shape[1] <= 0 || in.w.shape[1] % 4 != 0) {
            v.fail_arg("w", "has shape " + shape_string(in.w.shape) +
                                ": expected a positive multiple of 4 columns (4 * cell size)");
        }
        d.H = in.w.shape[1] / 4;
    } else {
        d.H = in.cs_prev.shape[1];
        if (d.H == 0) {
            v.fail_arg("cs_prev", "has shape " + shape_string(in.cs_prev.shape) +
                                      ": expected a cell size of at least 1");
        }
    }
    check_state_and_weights(v, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b, d.B, d.I,
                            d.H);
    if (d.L < 0 || d.L > d.T) {
        v.fail_arg("seq_len_max", "is " + std::to_string(d.L) + ": expected a value in [0, " +
                                      std::to_string(d.T) + "] (x has " + std::to_string(d.T) +
                                      " time steps)");
    }
    check_int32_extent(v, "x", "a gate workspace [T*B, 4*cell_size]", saturating_product({d.T, d.B, 4, d.H}));
    if (in.seq_lengths) validate_seq_lengths(v, *in.seq_lengths, d.B, d.T, d.device);
    return d;
}

// How a [depth, cols] operand's panels are laid out (schedules/panel_layout.h): float32 panels,
// bfloat16 pair panels, or AMX's one pair panel.
enum class PanelLayout { float32, pairs, amx };

// The panels of a [depth, cols] operand at `out`: float32 panels of panel_elements(cols, depth)
// floats, bfloat16 pair panels of pair_panel_elements(cols, depth), or AMX's pair panel of
// amx_panel_elements(cols, depth).
Buf panels_at(void *out, int64_t cols, int64_t depth, PanelLayout layout = PanelLayout::float32) {
    switch (layout) {
    case PanelLayout::pairs:
        return Buf(Device::cpu, out, DType::bf16, {panels::panel_count(cols), (depth + 1) / 2, 2 * panels::kPanelCols});
    case PanelLayout::amx:
        return Buf(Device::cpu, out, DType::bf16, {panels::amx_panel_pairs(depth), panels::amx_panel_cols(cols), 2});
    case PanelLayout::float32: break;
    }
    return Buf(Device::cpu, out, DType::f32, {panels::panel_count(cols), depth, panels::kPanelCols});
}
int64_t panel_bytes(int64_t cols, int64_t depth, PanelLayout layout) {
    switch (layout) {
    case PanelLayout::pairs: return pair_panel_elements(cols, depth) * 2;
    case PanelLayout::amx: return amx_panel_elements(cols, depth) * 2;
    case PanelLayout::float32: break;
    }
    return panel_elements(cols, depth) * 4;
}
// `w` packed there by the CPU kernel `packer` (panels or panels_t).
Buf pack_panels(Exec &exec, const KernelEntry &packer, Buf w, int64_t cols, int64_t depth, void *out,
                PanelLayout layout = PanelLayout::float32) {
    Buf packed = panels_at(out, cols, depth, layout);
    run(packer, exec, PanelsArgs{.in = w, .out = packed});
    return packed;
}

// How this call's CPU target packs `dtype`'s weights: AMX's panel for bfloat16 weights where its
// products run on AMX, pair panels where they run in pairs.
PanelLayout panel_layout(const Exec &exec, DType dtype) {
    const int target = exec.cpu_target();
    if (panels::amx_panels(dtype == DType::bf16, cpu_target_amx_products(target))) return PanelLayout::amx;
    return panels::pair_panels(dtype == DType::bf16, cpu_target_bf16_dot_products(target)) ? PanelLayout::pairs
                                                                                           : PanelLayout::float32;
}

// What the backward's CPU kernels store the gate gradients (dgates) in on this call's CPU target:
// bfloat16 where its bfloat16 products run on AMX (schedules/panel_layout.h: bf16_gate_grads).
DType cpu_gate_grads(const Exec &exec, DType dtype) {
    return panels::bf16_gate_grads(dtype == DType::bf16, cpu_target_amx_products(exec.cpu_target())) ? DType::bf16
                                                                                                    : DType::f32;
}

// The recurrent weights as `step` holds them (kernels.inc's weights column): packed once per call
// into float32 panels of panels::kPanelCols columns by the plan's `packer` (generators/panels.cpp;
// panels: b(x, k) = w(x, k), panels_t: b(x, k) = w(k, x)) — bfloat16 pair panels where the CPU
// target's bfloat16 products run in pairs — or `matrix` itself.
Buf recurrent_weights(Exec &exec, const PlanKernels &kernels, const KernelEntry &step, Family packer, Buf w,
                      Buf matrix, int64_t cols, int64_t depth, std::optional<Scratch> &storage) {
    if (step.weights != Weights::panels) return matrix;
    const PanelLayout layout = panel_layout(exec, step.dtype);
    storage.emplace(exec, panel_bytes(cols, depth, layout), Scratch::Fill::none);
    return pack_panels(exec, kernels[packer], w, cols, depth, storage->data(), layout);
}

// W_x = w[0:I, :] as the input projection's kernel holds it (kernels.inc's weights column): on the
// CPU packed once per call into the panels that every chunk of steps' projection reads, else the
// matrix. With I = 0 one row of zeros (`zero`): input_projection then multiplies it by a zero
// column, a Halide kernel indexing no operand of extent 0.
Buf projection_weights(Exec &exec, const PlanKernels &kernels, DType dt, const void *w, int64_t I, int64_t H,
                       std::optional<Scratch> &zero, std::optional<Scratch> &storage) {
    const int64_t G = 4 * H, depth = std::max<int64_t>(I, 1);
    if (I == 0) {
        zero.emplace(exec, G * static_cast<int64_t>(size_of(dt)));
        w = zero->data();
    }
    const Buf matrix = Buf::matrix(exec.device(), const_cast<void *>(w), dt, depth, G, G);
    return recurrent_weights(exec, kernels, kernels[Family::gemm_nn_bias], Family::panels, matrix, matrix, G, depth,
                             storage);
}

// A call's Exec and the kernels of the plan it runs, found before any output is written: the plan
// its steps ask for (set_cuda_step), or its fused one where cuBLAS cannot be set up for the call.
template <typename Dims>
std::pair<std::unique_ptr<Exec>, PlanKernels> exec_and_kernels(plan::Kind kind, const Checked<Dims> &c, CellVariant cell) {
    const plan::Steps wanted = steps_for(kind, c.device, c.dtype);
    PlanKernels kernels(kind, c.device, c.dtype, cell, wanted);  // throws naming a kernel this build lacks
    auto exec = std::make_unique<Exec>(c.device, c.some_data);
    if (wanted == plan::Steps::split && steps_for(kind, *exec, c.dtype) != plan::Steps::split)
        kernels = PlanKernels(kind, c.device, c.dtype, cell, plan::Steps::fused);
    return {std::move(exec), kernels};
}

std::vector<std::vector<int64_t>> forward_shapes(const SeqDims &d) {
    return std::vector<std::vector<int64_t>>(7, {d.T, d.B, d.H});
}

std::vector<std::vector<int64_t>> grad_shapes(const SeqDims &d) {
    return {{d.T, d.B, d.I}, {d.B, d.H}, {d.B, d.H}, {d.I + d.H, 4 * d.H},
            {d.H},           {d.H},      {d.H},      {4 * d.H}};
}

Checked<SeqDims> validate_forward(const char *op, const SeqInputs &in, const LSTMOutputs<TV> *out) {
    Validator v(op);
    const SeqDims d = validate_sequence_inputs(v, in, false);
    validate_forward_outputs(v, out, {d.T, d.B, d.H}, {d.B, d.H});
    return checked(v, d, forward_shapes(d));
}

Checked<SeqDims> validate_grad(const char *op, const SeqInputs &in, const SeqActivations &act,
                               const BlockLSTMGradOutputs<TV> *out) {
    Validator v(op);
    const SeqDims d = validate_sequence_inputs(v, in, true);
    check_activations(v, act, {d.T, d.B, d.H});
    validate_outputs(v, out, grad_shapes(d));
    return checked(v, d, grad_shapes(d));
}

// ---- forward ------------------------------------------------------------------------------------

// Steps of the forward's input projection computed at once on the CPU: those whose xw (B x 4H
// float32 a step) fills twice the L2 cache of a core (sysconf; 1 MiB where it is not known).
// Measured on a Zen 5 (1 MiB L2, 2 threads, BlockLSTMV2 against one product for every step):
// 0.87x the time at T,B,I=H 100,32,256, 0.94x at 200,16,256, 0.99x at 100,64,512, level at
// 100,8,256; chunks of 1 or 4 L2s were no better. And at least kProjectionChunkRowsMin rows: each
// chunk's product streams all of W_x, and on a Zen 3 (512 KiB L2) two L2s were 2 steps (128 rows)
// at B = 64, H = 512, a product at 94 GFLOP/s where 6400 rows make 142 (bench/gemm_ab.sh); 512
// rows took BlockLSTM there to 0.90x the time at 100,64,512 and 0.92x at 200,16,256 and
// 100,32,256 (docs/tuning.md). But where each loop thread's share of W_h (the step's columns are
// split over the threads) outgrows its core's L2, so that the steps read W_h from L3 at every
// step, one product for the whole sequence before the steps (up to kProjectionOneProductBytes of
// xw; chunks that size past it): each chunk's product streams W_x and x through the L3 that W_h
// shares. On a Zen 3 (512 KiB L2, 2 threads; BlockLSTM in one process, the two rules alternated
// call by call, the median of the pairs' ratios) one product took 0.89-0.95x the time of the
// chunks at H = 512 (T = 100, B = 8 to 64), level at 50,64,1024, and at H = 256 (a share of 512
// KiB: chunks kept) 0.93-1.03x as the VM's speed wandered; on a Zen 5 (1 MiB L2) it had been
// level at 100,64,512, and at H = 256 the chunks took 0.87-0.94x its time.
// BLOCKLSTM_PROJECTION_CHUNK_STEPS=n sets n (the tests' shapes are far below these chunks: they
// run the chunks that way).
int64_t l2_cache_bytes() {
    static const int64_t bytes = [] {
        const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        return l2 > 0 ? static_cast<int64_t>(l2) : int64_t{1} << 20;
    }();
    return bytes;
}

constexpr int64_t kProjectionChunkRowsMin = 512;
constexpr int64_t kProjectionOneProductBytes = int64_t{64} << 20;

int64_t projection_chunk_steps(int64_t B, int64_t H) {
    static const int64_t fixed = [] {
        const char *env = std::getenv("BLOCKLSTM_PROJECTION_CHUNK_STEPS");
        return env ? std::max<int64_t>(0, std::atoll(env)) : 0;
    }();
    if (fixed > 0) return fixed;
    const int64_t xw_step_bytes = std::max<int64_t>(1, B * 4 * H * 4);
    const int64_t w_h_share_bytes = 4 * H * H * 4 / std::max(1, loop_threads());
    if (w_h_share_bytes > l2_cache_bytes()) return std::max<int64_t>(1, kProjectionOneProductBytes / xw_step_bytes);
    const int64_t in_l2 = 2 * l2_cache_bytes() / xw_step_bytes;
    return std::max({int64_t{1}, in_l2, (kProjectionChunkRowsMin + B - 1) / std::max<int64_t>(1, B)});
}

// Steps of a chunk whose steps run on one thread while the next chunk's input projection runs on
// another (thread_pool.h: run_side_by_side), or 0: each step's two loops on every thread. Where a
// step is too small to split, its two forks and the waits for the slower half cost more than the
// step's work, and then one thread runs the steps with no fork at all; where one core would read
// all of W_h alone each step, the split step is faster. Measured on an Intel Xeon 6 (2 vCPUs,
// BlockLSTM, float32, T,B,I=H): 500,1,128 0.79x the time, 200,4,128 0.75x, 50,8,128 0.89x; level
// at 100,16,128 and 100,8,192; slower at 100,1,256 (1.05x) and 100,2,384 (2.3x). So on 2 loop
// threads (the pool's, or the OpenMP team's), steps_on_one_thread (weight_grad_chunks.h: at most
// 8 rows of H <= 128, in the forward of H <= the table's one_thread_forward_cells, 64 on AVX2, whose
// split steps were the faster on a Zen 3; or H <= 64 up to 4096 units a step) and, on AMX,
// amx_steps_on_one_thread.
// A chunk is 32 rows' steps (16 and 64 rows were slower at 500,1,128 and 200,4,128). The backward
// runs its steps on one thread the same way, beside x_grad's product of the rows they have
// written, in runs of a chunk's rows or more, and at most 8 rows of H <= 128 beside w_grad's
// chunks too (GradPass::reverse_recurrence; weight_grad_chunks.h: BlockLSTMGrad 0.88x at
// 50,8,128, 0.77x at 500,1,128, 0.78x at 200,4,128).
// BLOCKLSTM_SIDE_BY_SIDE=always: every CPU call on 2 loop threads, in chunks of 2 steps (the
// tests'); =on: every CPU call on 2 loop threads in the usual chunks (for measuring where it
// pays); =off: never.
constexpr int64_t kSideBySideChunkRows = 32;

enum class SideBySide { fit, always, on, off };

SideBySide side_by_side_mode() {
    static const SideBySide mode = [] {
        const char *env = std::getenv("BLOCKLSTM_SIDE_BY_SIDE");
        if (env && std::string(env) == "always") return SideBySide::always;
        if (env && std::string(env) == "off") return SideBySide::off;
        if (env && std::string(env) == "on") return SideBySide::on;
        return SideBySide::fit;
    }();
    return mode;
}

// Steps on AMX's tiles (a bfloat16 call of an AMX target) are cheaper: a step's product of up to
// 16 rows takes a few tdpbf16ps a tile, W_h in bfloat16 is half the bytes, and what a split step
// costs is its forks and the waits for the slower half. Measured on an Intel Xeon 6 (2 MiB L2 a
// core; BlockLSTM(Grad), bfloat16, BLOCKLSTM_SIDE_BY_SIDE=on against the default, least of 3,
// T = 100, I = H): the forward 0.90-0.92x the time at B = 4, 8, 16 of H = 256, 0.79x and 0.90x at
// B = 16, 32 of H = 128, 0.83x at 64,64, but 1.03x at 24,256, 1.11x at 32,256, 1.02x at 64,128
// and level to 1.06x at H = 384 (the other thread's next projection is short, so one thread must
// take the steps at little more than a split step's time); the backward, whose other thread has
// x_grad's product of the rows done, 0.71-0.91x from B = 8 to 256 at H = 128 and 256, 0.92-0.97x
// at H = 384, but 1.10-1.17x at H = 512, whose W_h (2 MiB in bfloat16) no longer fits one core's
// L2 beside the rest (so: W_h at most 3/5 of the L2); up to B * H = 32768, the most measured.
bool amx_steps_on_one_thread(int64_t B, int64_t H, bool backward) {
    if (!backward) return H <= 256 && B * H <= 4096;
    return 4 * H * H * 2 <= l2_cache_bytes() * 3 / 5 && B * H <= 32768;
}

// `exec`: the call's (its CPU target's table); `amx`: the steps run on AMX's tiles; `backward`: the
// steps of a grad op.
int64_t side_by_side_chunk_steps(const Exec &exec, int64_t B, int64_t H, int64_t S, bool amx, bool backward) {
    const SideBySide mode = side_by_side_mode();
    if (mode == SideBySide::off || loop_threads() != 2) return 0;
    const int64_t steps = mode == SideBySide::always ? 2 : (kSideBySideChunkRows + B - 1) / std::max<int64_t>(1, B);
    const int64_t forward_cells = cpu_target_knob(exec.cpu_target(), "one_thread_forward_cells");
    const bool fits = mode == SideBySide::always || mode == SideBySide::on ||
                      steps_on_one_thread(B, H, backward, forward_cells) ||
                      (amx && amx_steps_on_one_thread(B, H, backward));
    return fits && steps < S ? steps : 0;
}

// The forward's steps in chunks for their input projections: each chunk as many steps as fit
// `rows` packed rows (at least one), so that where rows stop early a chunk keeps its rows and the
// projection of a late chunk is not a product of a few rows reading all of W_x. At 50,8,128 with
// lengths spread over [T/4, T] (side by side, 32 rows a chunk) the last chunks of 4 steps held
// 4-16 rows, and the projections cost 1.34x their rows' share of the padded call's (perf); in
// chunks of 32 rows 1.15x, and BlockLSTM took 0.75 of its padded time instead of 0.76 (AMD Zen 4,
// 2 threads, 3 alternations; level at 200,16,256 and 100,32,256). Without lengths the chunks are
// as before.
struct ProjectionChunks {
    std::vector<int64_t> start;  // chunk c's steps [start[c], start[c + 1])
    std::vector<int64_t> of;     // of[t]: the chunk of step t
    ProjectionChunks(const StepRows &steps, int64_t rows) : start{0}, of(steps.steps) {
        const int64_t S = steps.steps;
        for (int64_t t0 = 0; t0 < S;) {
            int64_t t1 = std::min(S, t0 + 1);
            while (t1 < S && steps.packed[t1 + 1] - steps.packed[t0] <= rows) ++t1;
            for (int64_t t = t0; t < t1; ++t) of[t] = count();
            start.push_back(t1);
            t0 = t1;
        }
    }
    int64_t count() const { return static_cast<int64_t>(start.size()) - 1; }
};

// This CPU call's bfloat16 products run on AMX's tiles (after off_amx_where_it_does_not_pay).
bool steps_on_amx(const Exec &exec, DType dtype) {
    return exec.device() == Device::cpu &&
           panels::amx_panels(dtype == DType::bf16, cpu_target_amx_products(exec.cpu_target()));
}

// The rows of the register tiles of this call's CPU step kernel `step` (schedules/step_tiles.h:
// the one or two rows past them run in one-row or two-row tiles); 0 where the kernel takes any rows in one
// call: on a GPU, and a step on AMX (its 16-row tiles have no one-row twin, and a row past them
// costs a tile either way).
int step_tile_rows(const Exec &exec, const KernelEntry &step) {
    if (exec.device() != Device::cpu) return 0;
    if (steps_on_amx(exec, step.dtype)) return 0;
    return cpu_target_knob(exec.cpu_target(), "gemm_step_tile_rows");
}

// How forward_steps' tensors hold their rows, where they are not as the op's (the defaults).
struct ForwardLayout {
    // false: the caller writes the rows no step writes (from_length_order, zeros included)
    bool zero_idle_outputs = true;
    // in.x holds the packed rows of the steps (StepRows::packed), not [T, B, I]
    bool x_packed = false;
    // The CPU on rows not in length order: in.cs_prev, in.h_prev and the outputs are the
    // caller's, whose rows are in the order of `caller`. Each step runs seq_fwd_step_rows: its
    // product on the rows run in length order (x's packed rows), h_prev and cs_prev read from the
    // caller's rows, and the outputs of the rows it runs written in the caller's rows (the zeros of
    // the others streamed before the steps, as on rows in length order). The steps had written a
    // ring of a chunk of steps in L2, in length order, copied into the caller's rows (zeros
    // included) as each chunk ended: on a Zen 4 (BlockLSTM, lengths spread over [T/4, T], time /
    // the padded run's, two runs each) 0.74-0.80x at 200,16,256,
    // 0.68-0.75x at 100,32,256, 0.89-0.92x at 50,8,128; now 0.72-0.75x, 0.66-0.69x, 0.84-0.85x,
    // as the same lengths in length order (0.72-0.73x, 0.67x, 0.85-0.87x). Unset on the CPU, the
    // rows are the caller's own (in length order, `caller` the identity): the CPU has no other step
    // kernel (forward_steps).
    const StepRows *caller = nullptr;
};

// The forward time loop on rows in length order (StepRows::in_order): step t computes its first
// n[t] rows, the input projection the packed rows of every step.
void forward_steps(Exec &exec, const PlanKernels &kernels, DType dt, const SeqDims &dims, const StepRows &rows,
                   const SeqInputs &in, const LSTMOutputs<TV> &out, float forget_bias, float cell_clip,
                   const ForwardLayout &layout = {}) {
    const Device dev = exec.device();
    const int64_t B = dims.B, I = dims.I, H = dims.H, S = rows.steps, N = rows.total();
    const int64_t es = static_cast<int64_t>(size_of(dt));
    const bool split = kernels.has(Family::seq_fwd_gates);
    // The CPU's steps always run seq_fwd_step_rows, on rows in length order with the identity for
    // order: seq_fwd_step's CPU kernels, a quarter of the CPU kernels' build time, are gone. On a
    // Zen 3 (bench: two settings of a switch alternated call by call, new / old time) BlockLSTM
    // 0.97-1.00x at 100,64,512, 200,16,256, 100,32,256, 50,8,128, 100,9,256 and 100,13,256, 0.99x
    // with lengths in length order, within +-1.5 % at B = 1, 1.01x at B = 5 (docs/performance.md).
    const StepRows *caller = layout.caller ? layout.caller : dev == Device::cpu && !split ? &rows : nullptr;

    // Every output is zero where no step writes: past a row's length (TF leaves i, f, o, ci, co
    // unwritten past seq_len_max). Written once the workspaces are held, so that running out of
    // memory for one writes nothing.
    // i, f, o, ci, co left out (inference): every step writes them into one [B, H] scratch each,
    // which stays in cache, instead of [T, B, H] outputs in memory.
    const bool only_state = left_out(out.i);
    // cs [B, H] (inference, the five left out): each row's final cell state alone. The steps write
    // cs into a ring of two [B, H] scratches (step t's in slot t % 2) and a row's value is copied
    // out after its last step: the next step but one writes its slot again (in the caller's rows,
    // zeros).
    const bool final_cs = only_state && out.cs.shape.size() == 2;
    const StepRows &by_caller = caller ? *caller : rows;  // the lengths in out's rows
    auto final_cs_of_idle_rows = [&] {  // rows that run no step keep cs_prev
        if (!final_cs) return;
        for (int64_t b = 0; b < B; ++b)
            if (by_caller.length[b] == 0) exec.copy_bytes(offset_bytes(out.cs.data, b * H, dt),
                                                          offset_bytes(in.cs_prev.data, b * H, dt), H * es);
    };
    auto zero_idle = [&] {
        final_cs_of_idle_rows();
        each_output(out, [&](const char *, const TV &t) {
            if (&t == &out.cs && final_cs) return;
            if (left_out(t) || !layout.zero_idle_outputs) return;
            zero_idle_rows(exec, by_caller, t);
        });
    };
    if (N == 0) return zero_idle();

    // xw = x . W_x + b: on the CPU in chunks of steps computed just ahead of the steps that read
    // them, so that a step reads its xw from cache, not from memory (projection_chunk_steps);
    // elsewhere for every step in one product. x's rows packed where rows stop early (a copy of I
    // per row against 8H(I+H) multiply-adds), else x itself.
    std::optional<Scratch> x_packed;
    const void *x_rows = in.x.data;
    if (!layout.x_packed && rows.ragged() && I > 0) {
        x_packed.emplace(exec, N * I * es, Scratch::Fill::none);
        pack_steps(exec, rows, in.x.data, x_packed->data(), I, dt);
        x_rows = x_packed->data();
    }
    const int64_t side_by_side =
        dev == Device::cpu && !split ? side_by_side_chunk_steps(exec, B, H, S, steps_on_amx(exec, dt), false) : 0;
    const int64_t chunk = side_by_side > 0            ? side_by_side
                          : dev == Device::cpu && !split ? projection_chunk_steps(B, H)
                                                         : S;
    const int64_t xw_rows = chunk >= S ? N : std::min(N, chunk * B);
    const ProjectionChunks chunks(rows, xw_rows);
    const int xw_buffers = side_by_side > 0 ? 2 : 1;  // side by side: the steps read one, the next chunk's is written
    Scratch xw(exec, xw_buffers * xw_rows * 4 * H * 4, Scratch::Fill::none);
    std::optional<Scratch> w_x_zero, w_x_panels;
    const Buf w_x = projection_weights(exec, kernels, dt, in.w.data, I, H, w_x_zero, w_x_panels);
    int64_t xw_first[2] = {0, 0};  // the packed row that each xw buffer's first row holds
    auto xw_buffer = [&](int64_t t) { return static_cast<int>(chunks.of[t] % xw_buffers); };
    auto project = [&](int64_t c) {  // chunk c's steps
        const int64_t t0 = chunks.start[c], end = rows.packed[chunks.start[c + 1]];
        const int b = xw_buffer(t0);
        xw_first[b] = rows.packed[t0];
        input_projection(exec, kernels[Family::gemm_nn_bias], dt, offset_bytes(x_rows, xw_first[b] * I, dt),
                         end - xw_first[b], I, H, in.w.data, w_x, in.b.data, xw.floats() + b * xw_rows * 4 * H);
    };
    if (chunks.count() == 1) {
        project(0);
        x_packed.reset();
    }

    // The recurrence: step t reads the outputs of step t-1 (its first n[t] rows).
    float fb = attr_in_dtype(forget_bias, dt), clip = attr_in_dtype(cell_clip, dt);
    Buf xw_t = Buf::matrix(dev, xw.data(), DType::f32, B, 4 * H, 4 * H);
    Buf h_prev(dev, in.h_prev.data, dt, {B, H}), cs_prev(dev, in.cs_prev.data, dt, {B, H});
    Buf wci(dev, in.wci.data, dt, {H}), wcf(dev, in.wcf.data, dt, {H}), wco(dev, in.wco.data, dt, {H});
    const TV *outs[7] = {&out.i, &out.cs, &out.f, &out.o, &out.ci, &out.co, &out.h};
    constexpr int kCs = 1, kH = 6;
    std::optional<Scratch> step_only;  // the left-out outputs' [B, H] each, then final_cs's ring
    if (only_state) step_only.emplace(exec, (final_cs ? 7 : 5) * B * H * es, Scratch::Fill::none);
    // Where the steps write each output: the left-out ones' scratch, final_cs's ring, or the
    // output itself (step t from its row t * B).
    void *written_to[7];
    for (int k = 0, unused = 0; k < 7; ++k)
        written_to[k] = left_out(*outs[k]) ? offset_bytes(step_only->data(), unused++ * B * H, dt) : outs[k]->data;
    if (final_cs) written_to[kCs] = offset_bytes(step_only->data(), 5 * B * H, dt);
    // The row where step t writes output k.
    auto step_row = [&](int k, int64_t t) -> int64_t {
        if (left_out(*outs[k])) return 0;
        return (k == kCs && final_cs ? t % 2 : t) * B;
    };
    // After step t: the final cs of the rows whose last step it was (in out's rows).
    auto keep_final_cs = [&](int64_t t) {
        if (!final_cs) return;
        const void *ring = offset_bytes(written_to[kCs], step_row(kCs, t) * H, dt);
        for (int64_t j = t + 1 < S ? rows.n[t + 1] : 0; j < rows.n[t]; ++j) {
            const int64_t b = by_caller.order[j];
            exec.copy_bytes(offset_bytes(out.cs.data, b * H, dt), offset_bytes(ring, b * H, dt), H * es);
        }
    };
    std::vector<Buf> slices;
    for (void *to : written_to) slices.emplace_back(dev, to, dt, std::initializer_list<int64_t>{B, H});
    const std::array<Buf *, 7> lstm{&slices[0], &slices[1], &slices[2], &slices[3], &slices[4], &slices[5], &slices[6]};
    // The caller's rows (ForwardLayout::caller): where each row runs, as seq_fwd_step_rows reads it.
    std::vector<int32_t> order32;
    if (caller)
        for (int64_t j = 0; j < B; ++j) order32.push_back(static_cast<int32_t>(caller->order[j]));
    Buf order(Device::cpu, order32.data(), DType::i32, {B});
    // Every argument of step t at the rows it runs, set whatever an earlier pass over the steps
    // left (run_loop's fingerprint pass runs them all before the steps that launch). On the
    // caller's rows the state and the outputs are all B rows.
    auto step_at = [&](int64_t t, Buf &gates_rows) {
        const int64_t count = rows.n[t];
        auto prev = [&](int k) { return t == 0 ? 0 : step_row(k, t - 1); };
        h_prev.set_data(offset_bytes(t == 0 ? in.h_prev.data : written_to[kH], prev(kH) * H, dt));
        cs_prev.set_data(offset_bytes(t == 0 ? in.cs_prev.data : written_to[kCs], prev(kCs) * H, dt));
        for (int k = 0; k < 7; ++k) slices[k].set_data(offset_bytes(written_to[k], step_row(k, t) * H, dt));
        const int b = xw_buffer(t);
        xw_t.set_data(xw.floats() + b * xw_rows * 4 * H + (rows.packed[t] - xw_first[b]) * 4 * H);
        const int64_t state_rows = caller ? B : count;
        for (Buf *b : {&h_prev, &cs_prev}) b->set_rows(state_rows);
        for (Buf *b : {&xw_t, &gates_rows, &order}) b->set_rows(count);
        for (Buf &b : slices) b.set_rows(state_rows);
    };

    if (split) {
        // Each step: xw[t] += h_{t-1} . W_h on cuBLAS, in place, then the gate math alone.
        KernelCall gates(kernels[Family::seq_fwd_gates], exec);
        bind(gates, SeqFwdGatesArgs{.pre_activations = xw_t, .cs_prev = cs_prev, .wci = wci, .wcf = wcf,
                                    .wco = wco, .forget_bias = fb, .cell_clip = clip, .lstm = lstm});
        const Operand w_h{offset_bytes(in.w.data, I * 4 * H, dt), dt, 4 * H};
        const auto es = static_cast<uint64_t>(size_of(dt)), cells = static_cast<uint64_t>(H);
        const int alignment = pointer_alignment({address(in.h_prev.data), address(out.h.data), B * cells * es,
                                                 cells * es, address(w_h.data), 4 * cells * es, address(xw.data()),
                                                 16 * cells});
        StepProducts products(exec, rows.n, 4 * H, H, {in.h_prev.data, dt, H}, w_h, DType::f32, 4 * H, 1.0f, alignment);
        zero_idle();  // the first write to an output
        exec.time_loop({0, S, N, B, I, H, static_cast<int64_t>(dt)}, [&] {
            for (int64_t t = 0; t < S; ++t) {
                float *xw_row = xw.floats() + rows.packed[t] * 4 * H;
                const void *h = t == 0 ? in.h_prev.data : offset_bytes(written_to[kH], (t - 1) * B * H, dt);
                products.run(rows.n[t], h, xw_row);
                step_at(t, xw_t);
                gates.run();
            }
        });
        return;
    }

    // Each step one seq_fwd_step (seq_fwd_step_rows on the caller's rows): xw[t] + h_{t-1} . W_h
    // and the gate math.
    const KernelEntry &step_kernel = kernels[caller ? Family::seq_fwd_step_rows : Family::seq_fwd_step];
    std::optional<Scratch> w_h_panels;
    const Buf w_h_rows = Buf::matrix(dev, offset_bytes(in.w.data, I * 4 * H, dt), dt, H, 4 * H, 4 * H);
    Buf w_h = recurrent_weights(exec, kernels, step_kernel, Family::panels, w_h_rows, w_h_rows, 4 * H, H, w_h_panels);
    Scratch gates(exec, B * 4 * H * 4, Scratch::Fill::none);  // one step's pre-activations, reused
    Buf gates_buf = Buf::matrix(dev, gates.data(), DType::f32, B, 4 * H, 4 * H);

    KernelCall step(step_kernel, exec);
    const SeqFwdStepArgs step_args{.xw = xw_t, .h_prev = h_prev, .w_h = w_h, .cs_prev = cs_prev, .wci = wci,
                                   .wcf = wcf, .wco = wco, .forget_bias = fb, .cell_clip = clip, .lstm = lstm,
                                   .gates = gates_buf, .layout = kernels.gate_layout()};
    if (caller)
        bind(step, SeqFwdStepRowsArgs{.step = step_args, .order = order});
    else
        bind(step, step_args);

    // A step is one call: on the caller's rows each call writes all B rows, and on a GPU a step's
    // kernel takes any rows (the CPU's step kernels run a step's rows past their whole tiles in
    // short or one-row tiles of their own: schedules/step_tiles.h).
    zero_idle();  // the first write to an output
    auto run_step = [&](int64_t t) {
        step_at(t, gates_buf);
        step.run();
        keep_final_cs(t);
    };
    if (side_by_side > 0 && chunks.count() > 1) {  // a chunk's steps beside the next chunk's projection
        project(0);
        for (int64_t c = 0; c < chunks.count(); ++c) {
            auto steps = [&] {
                for (int64_t t = chunks.start[c]; t < chunks.start[c + 1]; ++t) run_step(t);
            };
            if (c + 1 < chunks.count())
                run_side_by_side(steps, [&] { project(c + 1); });
            else
                steps();
        }
        return;
    }
    for (int64_t t = 0; t < S; ++t) {
        if (chunks.count() > 1 && chunks.start[chunks.of[t]] == t) project(chunks.of[t]);  // over the last one's xw
        run_step(t);
    }
}

// A [.., B, width] tensor in length order, in a workspace of the call (the call on rows that are
// not already in length order).
// A left-out output stays left out (no storage).
struct Reordered {
    Scratch storage;
    TV view;
    Reordered(Exec &exec, const TV &like)
        : storage(exec, left_out(like) ? 0 : static_cast<int64_t>(like.num_bytes()), Scratch::Fill::none),
          view(left_out(like) ? TV{} : TV{storage.data(), like.dtype, like.shape, like.device}) {}
};

// A bfloat16 call of an AMX target runs on the FMAs of the target whose float32 kernels that
// target runs (other_dtypes_as) where AMX's tiles do not pay for themselves; BLOCKLSTM_AMX=always
// keeps every call on the tiles (the tests' small shapes run AMX's kernels that way). Measured on
// an Emerald Rapids (`blocklstm bench`, least of 3; the FMAs' time / AMX's, at T,B,I=H):
// - forward: a step's product computes whole tiles of 16 rows, while the FMAs' cost follows the
//   rows until W_h (float32 in their panels) outgrows L2: on the FMAs where B * H < 768 at H < 512
//   (100,1,256 0.61x; 50,4,128 0.85x; 100,2,256 0.92x; 100,1,384 0.80x), on AMX above (100,3,256
//   1.12x; 50,8,128 1.02x; 100,2,384 1.39x; 100,1,512 1.33x). A call of one or two steps pays
//   the weights' packing for AMX's panels for those steps alone: on the FMAs there below
//   B * H = 2048 (1,8,128 0.85x; 2,8,128 0.95x against 1,16,128 1.04x; 1,8,256 1.12x; 5,8,128
//   1.11x).
// - backward: fewer than 8 rows (100,1,512: 18.0 ms on AMX, 8.9-11.5 on the FMAs), or fewer than
//   half a depth block of w_grad's product in all (L * B rows; AMX computes the depth in whole
//   blocks of panels::kAmxDepthBlock): 10,8,256 0.54x; 10,16,256 0.90x; 2,64,512 0.95x against
//   32,8,256 1.11x; 20,16,256 1.51x; 5,64,512 1.63x.
enum class Pass { forward, backward };

bool amx_pays(Pass pass, const SeqDims &d) {
    if (pass == Pass::forward) return d.H >= 512 || (d.B * d.H >= 768 && (d.L >= 3 || d.B * d.H >= 2048));
    return d.B >= panels::kAmxTileRows / 2 && d.L * d.B >= panels::kAmxDepthBlock / 2;
}

bool amx_always() {
    static const bool always = [] {
        const char *env = std::getenv("BLOCKLSTM_AMX");
        return env && std::string(env) == "always";
    }();
    return always;
}

std::atomic<uint64_t> amx_calls{0};

void off_amx_where_it_does_not_pay(Exec &exec, DType dtype, Pass pass, const SeqDims &d) {
    if (exec.device() != Device::cpu || dtype != DType::bf16 || !cpu_target_amx_products(exec.cpu_target())) return;
    if (amx_always() || amx_pays(pass, d)) {
        amx_calls.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    const int fma = cpu_target_other_dtypes_as(exec.cpu_target());
    if (fma >= 0) exec.run_as_cpu_target(fma);
}

// A sequence op's call, on one team of OpenMP threads where the CPU loops run on them
// (thread_pool.h: run_in_one_team; a GPU call as it is).
void on_one_team(const TV &x, const std::function<void()> &call) {
    if (x.device == Device::cpu) return run_in_one_team(call);
    call();
}

void forward_call(const char *op, Layout layout, const SeqInputs &in, const LSTMOutputs<TV> &out,
                  float forget_bias, float cell_clip, bool use_peephole) {
    const Checked<SeqDims> c = validate_forward(op, in, &out);
    const auto [exec_ptr, kernels] = exec_and_kernels(plan::Kind::forward, c, {use_peephole, layout});
    Exec &exec = *exec_ptr;
    off_amx_where_it_does_not_pay(exec, c.dtype, Pass::forward, c.dims);
    const StepRows rows = step_rows(c.dims.B, c.dims.L, in.seq_lengths);
    if (rows.in_order()) return forward_steps(exec, kernels, c.dtype, c.dims, rows, in, out, forget_bias, cell_clip);

    // Rows not in length order: the call runs on copies of x, h_prev and cs_prev in that order
    // (the rows that run only) and writes its outputs in that order, then in the caller's.
    const StepRows sorted = in_length_order(rows);
    const KernelEntry &gather = kernels[Family::gather_rows];
    if (exec.device() == Device::cpu && !kernels.has(Family::seq_fwd_gates)) {
        // x's rows that run packed (as forward_steps would pack them), the state and the outputs in
        // the caller's rows.
        Scratch x_packed(exec, rows.total() * c.dims.I * static_cast<int64_t>(size_of(c.dtype)), Scratch::Fill::none);
        if (c.dims.I > 0) to_packed_length_order(exec, gather, rows, in.x, x_packed.data());
        const TV x_view{x_packed.data(), in.x.dtype, {rows.total(), c.dims.I}, in.x.device};
        const SeqInputs packed_in{in.seq_len_max, x_view, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco,
                                  in.b, nullptr};
        return forward_steps(exec, kernels, c.dtype, c.dims, sorted, packed_in, out, forget_bias, cell_clip,
                             {.x_packed = true, .caller = &rows});
    }
    Reordered x(exec, in.x), cs_prev(exec, in.cs_prev), h_prev(exec, in.h_prev);
    std::vector<Reordered> outs;
    outs.reserve(7);
    each_output(out, [&](const char *, const TV &t) { outs.emplace_back(exec, t); });  // left out: empty
    to_length_order(exec, gather, rows, in.x, x.storage.data());
    to_length_order(exec, gather, rows, in.cs_prev, cs_prev.storage.data());
    to_length_order(exec, gather, rows, in.h_prev, h_prev.storage.data());
    const SeqInputs sorted_in{in.seq_len_max, x.view, cs_prev.view, h_prev.view, in.w, in.wci, in.wcf, in.wco, in.b,
                              nullptr};
    const LSTMOutputs<TV> sorted_out{outs[0].view, outs[1].view, outs[2].view, outs[3].view,
                                     outs[4].view, outs[5].view, outs[6].view};
    forward_steps(exec, kernels, c.dtype, c.dims, sorted, sorted_in, sorted_out, forget_bias, cell_clip,
                  {.zero_idle_outputs = false});
    std::size_t k = 0;
    each_output(out, [&](const char *, const TV &t) {
        if (!left_out(t)) from_length_order(exec, gather, rows, outs[k].storage.data(), t);
        ++k;
    });
}

// ---- backward -----------------------------------------------------------------------------------

// c[M,N] = a . b with the Halide GEMM kernel `product` (gemm_nn: a float32, b dtype; gemm_tn:
// a = the transpose of `a_t`, dtype, b float32), or with cuBLAS where it takes the operands.
// The gate gradients' operand (gemm_nn's a, gemm_tn's b) is in `gate_grads`: float32, or the
// dtype: the split steps' (CUDA), which only cuBLAS takes, or bfloat16 on AMX (cpu_gate_grads).
// sums_row (tn, Halide only): c has one more row, M, holding the column sums of b.
// b_panels: b as `product` holds it where that is packed panels (the CPU's gemm_nn; b unused).
void batched_product(Exec &exec, const KernelEntry &product, DType dt, int64_t M, int64_t N, int64_t K,
                     const void *a, int64_t lda, const void *b, int64_t ldb, void *c,
                     bool sums_row = false, DType gate_grads = DType::f32, const Buf *b_panels = nullptr) {
    const bool tn = product.family == Family::gemm_tn;
    const Operand a_op{a, tn ? dt : gate_grads, lda, tn}, b_op{b, tn ? gate_grads : dt, ldb};
    if (!sums_row && !b_panels && cublas_gemm(exec, M, N, K, a_op, b_op, c, dt, N, 0.0f)) return;
    const Device dev = exec.device();
    if (gate_grads != DType::f32 && dev == Device::cuda) cublas_lost_during_call();
    Buf a_buf = tn ? Buf::matrix(dev, const_cast<void *>(a), dt, K, M, lda)
                   : Buf::matrix(dev, const_cast<void *>(a), gate_grads, M, K, lda);
    Buf b_buf = b_panels ? *b_panels : Buf::matrix(dev, const_cast<void *>(b), tn ? gate_grads : dt, K, N, ldb);
    Buf c_buf = Buf::matrix(dev, c, dt, sums_row ? M + 1 : M, N, N);
    if (tn && dev == Device::cpu && panel_layout(exec, dt) == PanelLayout::amx) {
        // w_grad on AMX: the kernel copies b, the gate gradients, into AMX's pair panel here, in
        // whole blocks of k (generators/common.h: amx_product)
        const int64_t pair_rows = panels::amx_blocked_pairs(K), cols = panels::amx_panel_cols(N);
        Scratch pairs(exec, saturating_product({pair_rows, cols, 2}) * 2, Scratch::Fill::none);
        Buf pairs_buf(Device::cpu, pairs.data(), DType::bf16, {pair_rows, cols, 2});
        run(product, exec, GemmArgs{.a = a_buf, .b = b_buf, .c = c_buf, .b_pairs = &pairs_buf});
        return;
    }
    run(product, exec, GemmArgs{.a = a_buf, .b = b_buf, .c = c_buf});
}

// w_grad = [x | h_prev_seq]^T . dgates and b_grad = 1^T . dgates, on the CPU in float32: summed
// over chunks of `chunk_rows` rows of dgates (the packed rows of every step: weight_grad_chunk_rows),
// in order from the first row or from the last, each chunk packed once into panels
// (generators/panels.cpp) that one gemm_tn_panels product reads for w_grad's rows of x and of
// h_prev_seq and for b_grad (perf at 100,64,512: packing 2.1 -> 1.2 % of the samples against a
// gemm_tn per product; BlockLSTMGrad 0.98x the time). Run after the recurrence, or, where the
// steps run on one thread, beside it on the other (GradPass::reverse_recurrence): run between its
// steps on the same threads, while a chunk's rows were still in cache, it was 1-2 % slower. With
// I = 0, b_grad comes from the reductions (plan::b_grad_with_w_grad) and the chunks' sums go to a
// scratch. h_prev_seq's first `head_rows` rows are `h_head`'s, the rest `h_rest`'s.
class WeightGradChunks {
public:
    WeightGradChunks(Exec &exec, const PlanKernels &kernels, int64_t rows, int64_t I, int64_t H, const float *x,
                     const float *h_head, int64_t head_rows, const float *h_rest, float *dgates, float *w_grad,
                     float *b_grad, int64_t chunk_rows, bool from_the_end)
        : exec_(exec), product_(kernels[Family::gemm_tn_panels]), packer_(kernels[Family::panels]), rows_(rows),
          I_(I), H_(H), x_(x), h_head_(h_head), head_rows_(head_rows), h_rest_(h_rest), dgates_(dgates),
          chunk_(std::max<int64_t>(1, std::min(rows, chunk_rows))), from_the_end_(from_the_end),
          panels_(exec, panel_elements(4 * H, chunk_) * 4, Scratch::Fill::none),
          straddle_(exec, chunk_ * H * 4, Scratch::Fill::none),
          unused_sums_(exec, I == 0 ? 4 * H * 4 : 4, Scratch::Fill::none),  // (4: never read)
          c_(Buf::matrix(Device::cpu, w_grad, DType::f32, I + H, 4 * H, 4 * H)),
          sums_(Device::cpu, I > 0 ? b_grad : unused_sums_.floats(), DType::f32, {4 * H}) {}

    // The chunks not summed yet, in their order, while a chunk's rows all lie at or past `ready`
    // (the rows of dgates written so far are [ready, rows)); 0: all of them.
    void run_ready(int64_t ready) {
        while (run_next(ready)) {}
    }

    // The next chunk, if its rows all lie at or past `ready`; whether it ran.
    bool run_next(int64_t ready) {
        if (next_ * chunk_ >= rows_) return false;
        // the next_-th chunk summed: rows [r0, r1)
        const int64_t r1 = from_the_end_ ? rows_ - next_ * chunk_ : std::min(rows_, (next_ + 1) * chunk_);
        const int64_t r0 = from_the_end_ ? std::max<int64_t>(0, r1 - chunk_) : next_ * chunk_;
        if (r0 < ready) return false;
        run_chunk(r0, r1 - r0, next_ > 0);
        ++next_;
        return true;
    }

private:
    void run_chunk(int64_t r0, int64_t n, bool accumulate_into_c) {
        const int64_t H = H_, I = I_, G = 4 * H;
        const Device dev = Device::cpu;
        float accumulate = accumulate_into_c ? 1.0f : 0.0f;
        Buf b = pack_panels(exec_, packer_, Buf::matrix(dev, dgates_ + r0 * G, DType::f32, n, G, G), G, n,
                            panels_.data());
        // A chunk that straddles h_head and h_rest is copied, every other one read in place.
        const float *h_rows = r0 < head_rows_ ? h_head_ + r0 * H : h_rest_ + (r0 - head_rows_) * H;
        if (r0 < head_rows_ && r0 + n > head_rows_) {
            const int64_t from_head = head_rows_ - r0;
            std::copy_n(h_head_ + r0 * H, from_head * H, straddle_.floats());
            std::copy_n(h_rest_, (n - from_head) * H, straddle_.floats() + from_head * H);
            h_rows = straddle_.floats();
        }
        Buf h_buf = Buf::matrix(dev, const_cast<float *>(h_rows), DType::f32, n, H, H);
        // With I = 0 x has no columns to read: h's chunk stands in for it (not read).
        Buf x_buf = I > 0 ? Buf::matrix(dev, const_cast<float *>(x_ + r0 * I), DType::f32, n, I, I) : h_buf;
        run(product_, exec_,
            WeightGradChunkArgs{.x = x_buf, .h = h_buf, .b = b, .accumulate = &accumulate, .c = c_, .sums = sums_});
    }

    Exec &exec_;
    const KernelEntry &product_, &packer_;
    const int64_t rows_, I_, H_;
    const float *x_, *h_head_;
    const int64_t head_rows_;
    const float *h_rest_;
    float *dgates_;
    const int64_t chunk_;
    const bool from_the_end_;
    Scratch panels_, straddle_, unused_sums_;
    Buf c_, sums_;
    int64_t next_ = 0;  // the next chunk to sum
};

// One BlockLSTMGrad call on rows in length order (StepRows::in_order), in its phases: transpose
// the weights (GPU), the recurrence in reverse time (dgates of every step's running rows, packed), then
// the products batched over the packed rows (x_grad, h_prev_grad, w_grad) and the reductions
// (b_grad, the peephole grads, cs_prev_grad). The workspaces live as long as the pass; declare the
// Exec first, so that they are freed before it.
class GradPass {
public:
    // The CPU on rows not in length order (grad_call): `rows` (StepRows::order), and the caller's
    // cs and cs_prev, which the steps read at each row's caller row.
    struct Caller {
        const StepRows &rows;
        const TV &cs, &cs_prev;
    };
    // caller: x, act.cs and act.h hold the packed rows of the steps (StepRows::packed) in length
    // order (what the batched products and the reductions read), in.cs_prev and in.h_prev the rows
    // in length order; act's other tensors are the caller's, which only the steps read (at each
    // row's caller row); out.x_grad is the caller's, its rows in the order of `caller`.
    GradPass(Exec &exec, const PlanKernels &kernels, const Checked<SeqDims> &c, const StepRows &rows,
             const SeqInputs &in, const SeqActivations &act, const BlockLSTMGradOutputs<TV> &out, bool use_peephole,
             const Caller *caller = nullptr)
        : exec_(exec), kernels_(kernels), d_(c.dims), rows_(rows), caller_(caller), dt_(c.dtype), dev_(c.device),
          es_(static_cast<int64_t>(size_of(c.dtype))), in_(in), act_(act), out_(out), use_peephole_(use_peephole),
          b_grad_from_w_grad_(plan::b_grad_with_w_grad(c.device, c.dims.I)), split_(kernels.has(Family::seq_bwd_gates)),
          gate_grads_(split_ ? c.dtype : c.device == Device::cpu ? cpu_gate_grads(exec, c.dtype) : DType::f32) {}

    // With no step to run (L = 0, B = 0 or every length 0) every gradient is zero. False: nothing to run.
    bool anything_to_run() {
        if (rows_.total() > 0) return true;
        each_output(out_, [&](const char *, const TV &t) { zero(exec_, t); });
        return false;
    }

    // Zeroes what no phase writes: x_grad where a row does not run, h_prev_grad of rows that run no
    // step, the peephole grads without peepholes. (cs_prev_grad of those rows is their carry, zero.)
    void zero_unwritten() {
        if (!caller_) zero_idle_rows(exec_, rows_, out_.x_grad);  // else the gather into the caller's rows
        const int64_t n0 = rows_.n[0];
        if (n0 < d_.B) exec_.zero_bytes(offset_bytes(out_.h_prev_grad.data, n0 * d_.H, dt_), (d_.B - n0) * d_.H * es_);
        if (!use_peephole_) zero(exec_, out_.wci_grad), zero(exec_, out_.wcf_grad), zero(exec_, out_.wco_grad);
    }

    // Where the plan transposes w (CUDA): w^T [4H, I+H], so that the recurrent product reads
    // contiguous rows of W_h^T (and the Halide x_grad product those of W_x^T). A copy of 4H(I+H)
    // elements per call, against 2 L B 4H (I+H) multiply-adds. The CPU's kernels read W_h^T and
    // W_x^T in panels packed from w's rows instead (weights_t_panels).
    void transpose_weights() {
        if (!kernels_.has(Family::transpose)) return;
        const int64_t I = d_.I, H = d_.H;
        w_t_.emplace(exec_, 4 * H * (I + H) * es_, Scratch::Fill::none);
        Buf w_buf = Buf::matrix(dev_, in_.w.data, dt_, I + H, 4 * H, 4 * H);
        Buf w_t_buf = Buf::matrix(dev_, w_t_->data(), dt_, 4 * H, I + H, I + H);
        run(kernels_[Family::transpose], exec_, TransposeArgs{.in = w_buf, .out = w_t_buf});
    }

    // The recurrence, reverse time: dgates[t] for the running rows of every t; the cell-state carry
    // ping-pongs between two buffers and ends in carry1_. A row that stops at step t (runs no step
    // t+1) starts with a zero carry and a zero gradient from step t+1.
    void reverse_recurrence() {
        const int64_t B = d_.B, I = d_.I, H = d_.H, S = rows_.steps;
        Scratch carry0(exec_, B * H * 4);
        carry1_.emplace(exec_, B * H * 4);
        float *carry[2] = {carry0.floats(), carry1_->floats()};
        const TV *step_inputs[] = {&act_.h_grad, &act_.cs_grad, &act_.i, &act_.f, &act_.o, &act_.ci, &act_.co};
        std::vector<Buf> per_step;  // h_grad, cs_grad, i, f, o, ci, co at step t
        for (const TV *t : step_inputs) per_step.emplace_back(dev_, t->data, dt_, std::initializer_list<int64_t>{B, H});
        Buf cs_prev(dev_, in_.cs_prev.data, dt_, {B, H});
        Buf wci(dev_, in_.wci.data, dt_, {H}), wcf(dev_, in_.wcf.data, dt_, {H}), wco(dev_, in_.wco.data, dt_, {H});
        Buf carry_in(dev_, carry[0], DType::f32, {B, H}), carry_out(dev_, carry[1], DType::f32, {B, H});
        Buf dgates_t = Buf::gate_blocks(dev_, dgates_->data(), gate_grads_, B, H);
        Scratch dh(exec_, B * H * 4, Scratch::Fill::none);  // one step's gradient of h, reused
        Buf dh_buf = Buf::matrix(dev_, dh.data(), DType::f32, B, H, H);
        // seq_bwd_step_rows (the CPU's fused steps) reads the per-step inputs of all B rows, each
        // row run at its caller row: the caller's order, or the identity.
        const bool at_caller_rows = !kernels_.has(Family::seq_bwd_gates) && kernels_.has(Family::seq_bwd_step_rows);
        std::vector<int32_t> order32(B);
        for (int64_t j = 0; j < B; ++j) order32[j] = static_cast<int32_t>(caller_ ? caller_->rows.order[j] : j);
        Buf order(Device::cpu, order32.data(), DType::i32, {B});
        const TV &cs_first = caller_ ? caller_->cs_prev : in_.cs_prev, &cs_steps = caller_ ? caller_->cs : act_.cs;
        // Every per-row argument at rows [r0, r0 + count) of step t (with at_caller_rows, the
        // per-step inputs at all B of its rows).
        auto rows_at = [&](int64_t t, int64_t r0, int64_t count) {
            const int64_t first = at_caller_rows ? 0 : r0, rows = at_caller_rows ? B : count;
            for (std::size_t k = 0; k < per_step.size(); ++k)
                per_step[k].set_data(offset_bytes(step_inputs[k]->data, (t * B + first) * H, dt_));
            cs_prev.set_data(offset_bytes(t == 0 ? cs_first.data : cs_steps.data, ((t == 0 ? 0 : (t - 1) * B) + first) * H, dt_));
            carry_in.set_data(carry[t % 2] + r0 * H);
            carry_out.set_data(carry[(t + 1) % 2] + r0 * H);
            dgates_t.set_data(offset_bytes(dgates_->data(), (rows_.packed[t] + r0) * 4 * H, gate_grads_));
            dh_buf.set_data(dh.floats() + r0 * H);
            order.set_data(order32.data() + r0);
            for (Buf &b : per_step) b.set_rows(rows);
            cs_prev.set_rows(rows);
            for (Buf *b : {&carry_in, &carry_out, &dgates_t, &dh_buf, &order}) b->set_rows(count);
        };
        // The rows running at step t and at step t+1 (a prefix of them).
        auto running = [&](int64_t t) { return std::pair{rows_.n[t], t + 1 < S ? rows_.n[t + 1] : 0}; };

        if (kernels_.has(Family::seq_bwd_gates)) {
            // Each step: dh = dgates[t+1] . W_h^T on cuBLAS (W_h's rows read transposed; zero
            // for rows that stop at t), then the cell's backward math with h_grad[t] added.
            KernelCall gates(kernels_[Family::seq_bwd_gates], exec_);
            bind(gates, SeqBwdGatesArgs{.dh_product = dh_buf, .h_grad = per_step[0], .cs_grad = per_step[1],
                                        .dcs_carry = carry_in, .i = per_step[2], .f = per_step[3],
                                        .o = per_step[4], .ci = per_step[5], .co = per_step[6], .cs_prev = cs_prev,
                                        .wci = wci, .wcf = wcf, .wco = wco, .dgates = dgates_t,
                                        .dcs_carry_out = carry_out});
            const Operand w_h_t{offset_bytes(in_.w.data, I * 4 * H, dt_), dt_, 4 * H, /*transposed=*/true};
            const auto gs = static_cast<uint64_t>(size_of(gate_grads_)), cells = static_cast<uint64_t>(H);
            const int alignment =
                pointer_alignment({address(dgates_->data()), 4 * cells * gs, address(w_h_t.data),
                                   4 * cells * static_cast<uint64_t>(es_), address(dh.data()), 4 * cells});
            std::vector<int64_t> next_rows(rows_.n.begin() + 1, rows_.n.end());  // the product's rows: step t+1's
            StepProducts products(exec_, next_rows, H, 4 * H, {dgates_->data(), gate_grads_, 4 * H}, w_h_t, DType::f32,
                                  H, 0.0f, alignment);
            exec_.time_loop({1, S, rows_.total(), B, I, H, static_cast<int64_t>(dt_)}, [&] {
                for (int64_t t = S - 1; t >= 0; --t) {
                    const auto [n, m] = running(t);
                    if (m > 0)
                        products.run(m, offset_bytes(dgates_->data(), rows_.packed[t + 1] * 4 * H, gate_grads_),
                                     dh.floats());
                    if (m < n) {
                        exec_.zero_bytes(dh.floats() + m * H, (n - m) * H * 4);
                        exec_.zero_bytes(carry[t % 2] + m * H, (n - m) * H * 4);
                    }
                    rows_at(t, 0, n);
                    gates.run();
                }
            });
            return;
        }

        // Each step one seq_bwd_step (seq_bwd_step_rows on the CPU): dh = h_grad[t] + dgates[t+1] .
        // W_h^T and the cell's backward math. W_h^T: in panels straight from the rows of W_h, or
        // the rows of w^T. Where rows stop at t, dgates[t+1] is read from a copy whose rows past
        // step t+1's are zero (a second call for those rows instead read all of W_h^T again for a
        // row or two).
        const KernelEntry &step_kernel = kernels_[at_caller_rows ? Family::seq_bwd_step_rows : Family::seq_bwd_step];
        const int64_t gs = static_cast<int64_t>(size_of(gate_grads_));
        Scratch padded(exec_, B * 4 * H * gs);  // zeros past the rows copied in, which only grow
        Buf dnext = Buf::matrix(dev_, padded.data(), gate_grads_, B, 4 * H, 4 * H);
        const std::optional<Buf> w_h_t_packed = weights_t_panels(step_kernel, I, H, w_h_t_panels_);
        Buf w_h_t = w_h_t_packed ? *w_h_t_packed : Buf::matrix(dev_, w_t_bytes() + I * es_, dt_, 4 * H, H, I + H);
        // A step's last one or two rows past its whole register tiles in a call of their own.
        const int tile_rows = step_tile_rows(exec_, step_kernel);
        KernelCall step(step_kernel, exec_);
        const SeqBwdStepArgs step_args{.dgates_next = dnext, .w_h_t = w_h_t, .h_grad = per_step[0],
                                       .cs_grad = per_step[1], .dcs_carry = carry_in, .i = per_step[2],
                                       .f = per_step[3], .o = per_step[4], .ci = per_step[5], .co = per_step[6],
                                       .cs_prev = cs_prev, .wci = wci, .wcf = wcf, .wco = wco, .dgates = dgates_t,
                                       .dcs_carry_out = carry_out, .dh = dh_buf, .layout = kernels_.gate_layout()};
        if (at_caller_rows)
            bind(step, SeqBwdStepRowsArgs{.step = step_args, .order = order});
        else
            bind(step, step_args);

        auto step_back = [&](int64_t t) {
            const auto [n, m] = running(t);
            void *next = offset_bytes(dgates_->data(), (t + 1 < S ? rows_.packed[t + 1] : 0) * 4 * H, gate_grads_);
            if (m < n) {
                exec_.zero_bytes(carry[t % 2] + m * H, (n - m) * H * 4);
                if (m > 0) exec_.copy_bytes(padded.data(), next, m * 4 * H * gs);
                next = padded.data();
            }
            step_tiles::each_call(n, tile_rows, [&](int64_t r0, int64_t count) {
                dnext.set_data(offset_bytes(next, r0 * 4 * H, gate_grads_));
                dnext.set_rows(count);
                rows_at(t, r0, count);
                step.run();
            });
        };
        if (beside_steps_ == 0) {
            for (int64_t t = S - 1; t >= 0; --t) step_back(t);
        } else {
            // Side by side: the steps on one thread, on the other the products of the rows they
            // have written (those of steps [t, S)) until the steps are done: x_grad's, in runs of
            // beside_steps_ steps' rows or more, and w_grad's chunks as each is whole.
            std::atomic<int64_t> ready{rows_.total()};  // dgates' rows [ready, N) are written
            std::atomic<bool> steps_done{false};
            const int64_t run_rows = beside_steps_ * B;
            run_side_by_side(
                [&] {
                    struct Done {  // also when a step throws: the other thread waits for it
                        std::atomic<bool> &done;
                        ~Done() { done.store(true, std::memory_order_release); }
                    } done{steps_done};
                    for (int64_t t = S - 1; t >= 0; --t) {
                        step_back(t);
                        ready.store(rows_.packed[t], std::memory_order_release);
                    }
                },
                [&] {
                    while (!steps_done.load(std::memory_order_acquire)) {
                        const int64_t r = ready.load(std::memory_order_acquire);
                        if (d_.I > 0 && x_grad_from_ - r >= run_rows)
                            x_grad_rows_from(r);
                        else if (!w_grad_chunks_ || !w_grad_chunks_->run_next(r))
                            cpu_relax();
                    }
                });
        }
        // The step t = 0 wrote carry[1]; the zeros and dh go with this scope, W_h^T's panels stay
        // for h_prev_grad.
    }

    // Before the recurrence (so that x_grad's product of the rows it has finished can run beside
    // it): dgates, whether the steps run beside that product (side_by_side_chunk_steps), x_grad's
    // destination (its packed rows, or x_grad itself) and W_x^T's panels.
    void prepare_products() {
        const int64_t B = d_.B, I = d_.I, H = d_.H, N = rows_.total();
        dgates_.emplace(exec_, N * 4 * H * static_cast<int64_t>(size_of(gate_grads_)), Scratch::Fill::none);
        if (dev_ == Device::cpu && !split_)
            beside_steps_ = side_by_side_chunk_steps(exec_, B, H, rows_.steps, steps_on_amx(exec_, dt_), true);
        const bool w_grad_beside = side_by_side_mode() == SideBySide::always || weight_grads_beside_steps(B, H);
        if (beside_steps_ > 0 && w_grad_beside) prepare_weight_grad_chunks();
        x_grad_from_ = N;
        if (I == 0) return;
        if (rows_.ragged() || caller_) x_grad_packed_.emplace(exec_, N * I * es_, Scratch::Fill::none);
        x_grad_rows_ = x_grad_packed_ ? x_grad_packed_->data() : out_.x_grad.data;
        w_x_t_ = weights_t_panels(kernels_[Family::gemm_nn], 0, I, w_x_t_storage_);
    }

    // x_grad = dgates . W_x^T on the packed rows [ready, N) it has not run yet (0: every row).
    void x_grad_rows_from(int64_t ready) {
        const int64_t I = d_.I, H = d_.H;
        if (I == 0 || ready >= x_grad_from_) return;
        batched_product(exec_, kernels_[Family::gemm_nn], dt_, x_grad_from_ - ready, I, 4 * H,
                        offset_bytes(dgates_->data(), ready * 4 * H, gate_grads_), 4 * H,
                        w_t_ ? w_t_->data() : nullptr, I + H, offset_bytes(x_grad_rows_, ready * I, dt_), false,
                        gate_grads_, w_x_t_ ? &*w_x_t_ : nullptr);
        x_grad_from_ = ready;
    }

    // After the recurrence: x_grad's rows left (all of them unless they ran beside it), into the
    // caller's rows, and h_prev_grad = dgates[0] . W_h^T, batched.
    void input_and_state_grads() {
        const int64_t I = d_.I, H = d_.H;
        x_grad_rows_from(0);
        if (I > 0 && caller_) {  // into the caller's rows, zeros where a row does not run
            from_length_order_steps(caller_->rows, 0, d_.T, [&](int64_t t) { return rows_.packed[t]; },
                                    {{x_grad_rows_, &out_.x_grad}});
        } else if (I > 0 && x_grad_packed_) {
            unpack_steps(exec_, rows_, x_grad_rows_, out_.x_grad.data, I, dt_);
        }
        const KernelEntry &product = kernels_[Family::gemm_nn];
        const std::optional<Buf> w_h_t = weights_t_panels(product, I, H, w_h_t_panels_);
        batched_product(exec_, product, dt_, rows_.n[0], H, 4 * H, dgates_->data(), 4 * H,
                        w_t_ ? w_t_bytes() + I * es_ : nullptr, I + H, out_.h_prev_grad.data, false, gate_grads_,
                        w_h_t ? &*w_h_t : nullptr);
    }

    // x's rows as w_grad reads them: packed as dgates' are where rows stop early (once), else x.
    const void *w_grad_x_rows() {
        if (caller_ || !rows_.ragged() || d_.I == 0) return in_.x.data;
        if (!x_packed_) {
            x_packed_.emplace(exec_, rows_.total() * d_.I * es_, Scratch::Fill::none);
            pack_steps(exec_, rows_, in_.x.data, x_packed_->data(), d_.I, dt_);
        }
        return x_packed_->data();
    }

    // h_prev_seq = [h_prev, h[0], ...] packed as dgates' rows (once).
    const void *packed_h_prev_seq() {
        if (!h_seq_) {
            h_seq_.emplace(exec_, rows_.total() * d_.H * es_, Scratch::Fill::none);
            pack_prev_steps(in_.h_prev, act_.h, h_seq_->data());
        }
        return h_seq_->data();
    }

    // w_grad's chunks on the CPU in float32 (WeightGradChunks), before the recurrence where they run
    // beside it.
    void prepare_weight_grad_chunks() {
        const int64_t B = d_.B, I = d_.I, H = d_.H, N = rows_.total();
        if (!kernels_.has(Family::gemm_tn_panels) || w_grad_chunks_) return;
        auto f32 = [](const void *p) { return static_cast<float *>(const_cast<void *>(p)); };
        const bool always = side_by_side_mode() == SideBySide::always;
        const int64_t chunk_rows = always ? 4 : weight_grad_chunk_rows(B, H);
        const bool from_the_end = always || weight_grads_beside_steps(B, H);
        // h_prev_seq read in place where every row runs every step: h_prev's rows, then h's
        const bool packed = rows_.ragged();
        w_grad_chunks_.emplace(exec_, kernels_, N, I, H, f32(w_grad_x_rows()),
                               f32(packed ? packed_h_prev_seq() : in_.h_prev.data), packed ? N : B,
                               packed ? nullptr : f32(act_.h.data), dgates_->floats(), f32(out_.w_grad.data),
                               f32(out_.b_grad.data), chunk_rows, from_the_end);
    }

    // w_grad = [x | h_prev_seq]^T . dgates, and b_grad with it where the plan says
    // (plan::b_grad_with_w_grad): over chunks of dgates where the plan runs gemm_tn_panels (the
    // CPU in float32: the chunks left, all of them unless they ran beside the recurrence), else
    // one product each for x and h_prev_seq. Where rows stop early, x's and h_prev_seq's rows are
    // packed as dgates' are.
    void weight_grads() {
        const int64_t I = d_.I, H = d_.H, N = rows_.total();
        if (kernels_.has(Family::gemm_tn_panels)) {
            prepare_weight_grad_chunks();
            w_grad_chunks_->run_ready(0);
            return;
        }
        // One product each for x and h_prev_seq over the whole sequence (float16: c is rounded
        // once, so it cannot be summed over chunks; CUDA: cuBLAS or one kernel each). The x
        // product's extra row is w_grad's row I, rewritten by the h product below.
        const KernelEntry &product = kernels_[Family::gemm_tn];
        if (I > 0) {
            batched_product(exec_, product, dt_, I, 4 * H, N, w_grad_x_rows(), I, dgates_->data(), 4 * H,
                            out_.w_grad.data, b_grad_from_w_grad_, gate_grads_);
            if (b_grad_from_w_grad_) {
                exec_.copy_bytes(out_.b_grad.data, offset_bytes(out_.w_grad.data, I * 4 * H, dt_),
                                 4 * H * es_);
            }
        }
        batched_product(exec_, product, dt_, H, 4 * H, N, packed_h_prev_seq(), H, dgates_->data(),
                        4 * H, offset_bytes(out_.w_grad.data, I * 4 * H, dt_), false, gate_grads_);
    }

    // b_grad (unless weight_grads made it), the peephole grads and cs_prev_grad. The reductions
    // read cs and the cell state before each step by row of dgates: as [steps, B] rows, or, where
    // rows stop early, packed as one step of all the packed rows.
    void reductions() {
        const int64_t B = d_.B, H = d_.H, S = rows_.steps, N = rows_.total();
        Buf dgates_all = Buf::matrix(dev_, dgates_->data(), gate_grads_, N, 4 * H, 4 * H);
        std::optional<Scratch> cs_packed, cs_prev_packed;
        Buf cs_seq(dev_, act_.cs.data, dt_, {S, B, H});
        Buf cs_prev_all(dev_, in_.cs_prev.data, dt_, {B, H});
        if (caller_) cs_seq = Buf(dev_, act_.cs.data, dt_, {1, N, H});  // packed already
        if (use_peephole_ && (rows_.ragged() || caller_)) {
            const void *cs_rows = act_.cs.data;
            if (!caller_) {
                cs_packed.emplace(exec_, N * H * es_, Scratch::Fill::none);
                pack_steps(exec_, rows_, act_.cs.data, cs_packed->data(), H, dt_);
                cs_rows = cs_packed->data();
            }
            cs_prev_packed.emplace(exec_, N * H * es_, Scratch::Fill::none);
            pack_prev_steps(in_.cs_prev, act_.cs, cs_prev_packed->data());
            cs_seq = Buf(dev_, const_cast<void *>(cs_rows), dt_, {1, N, H});
            cs_prev_all = Buf(dev_, cs_prev_packed->data(), dt_, {N, H});
        }
        Buf carry_final(dev_, carry1_->data(), DType::f32, {B, H});
        Buf b_grad(dev_, out_.b_grad.data, dt_, {b_grad_from_w_grad_ ? 0 : 4 * H});  // empty: done
        Buf cs_prev_grad(dev_, out_.cs_prev_grad.data, dt_, {B, H});
        Buf wci_grad(dev_, out_.wci_grad.data, dt_, {H}), wcf_grad(dev_, out_.wcf_grad.data, dt_, {H});
        Buf wco_grad(dev_, out_.wco_grad.data, dt_, {H});
        SeqBwdReduceArgs args{.dgates = dgates_all, .cs = cs_seq, .cs_prev = cs_prev_all, .dcs_carry = carry_final,
                              .b_grad = b_grad, .cs_prev_grad = cs_prev_grad, .layout = kernels_.gate_layout()};
        if (use_peephole_) args.peephole_grads = {&wci_grad, &wcf_grad, &wco_grad};
        run(kernels_[split_ ? Family::seq_bwd_reduce_split : Family::seq_bwd_reduce], exec_, args);
    }

private:
    std::byte *w_t_bytes() const { return static_cast<std::byte *>(w_t_->data()); }

    // The row of x, act.h and act.cs where step t's rows start (packed on the caller's rows).
    int64_t step_row(int64_t t) const { return caller_ ? rows_.packed[t] : t * d_.B; }

    // The transpose of w's rows [first, first + count) (W_x^T: 0, I; W_h^T: I, H), [4H, count], in
    // the panels `kernel` reads (kernels.inc's weights column), packed from those rows of w into
    // `storage` once (a second kernel reading the same panels finds them there); nullopt where
    // `kernel` reads w^T's columns. On the CPU no transpose runs: at 100,1,512 the transpose of w
    // was 11.5 % of BlockLSTMGrad and x_grad's packing of W_x^T from it another 8 %.
    std::optional<Buf> weights_t_panels(const KernelEntry &kernel, int64_t first, int64_t count,
                                        std::optional<Scratch> &storage) {
        const int64_t H = d_.H;
        if (kernel.weights != Weights::panels) return std::nullopt;
        if (storage) return panels_at(storage->data(), count, 4 * H, panel_layout(exec_, dt_));
        const Buf rows = Buf::matrix(dev_, offset_bytes(in_.w.data, first * 4 * H, dt_), dt_, count, 4 * H, 4 * H);
        return recurrent_weights(exec_, kernels_, kernel, Family::panels_t, rows, rows, count, 4 * H, storage);
    }

    // The state before each step of the running rows, packed: `first`'s rows for step 0, then
    // `steps`' rows of the step before (h_prev_seq from h_prev and h; cs_prev's from cs).
    void pack_prev_steps(const TV &first, const TV &steps, void *packed) const {
        const int64_t H = d_.H;
        exec_.copy_bytes(packed, first.data, rows_.n[0] * H * es_);
        for (int64_t t = 1; t < rows_.steps; ++t)
            exec_.copy_bytes(offset_bytes(packed, rows_.packed[t] * H, dt_),
                             offset_bytes(steps.data, step_row(t - 1) * H, dt_), rows_.n[t] * H * es_);
    }

    Exec &exec_;
    const PlanKernels &kernels_;
    const SeqDims d_;
    const StepRows &rows_;
    const Caller *caller_;  // the CPU on rows not in length order, else null
    const DType dt_;
    const Device dev_;
    const int64_t es_;  // bytes per element of dtype
    const SeqInputs &in_;
    const SeqActivations &act_;
    const BlockLSTMGradOutputs<TV> &out_;
    const bool use_peephole_;
    // w^T (the plan's transpose); W_h^T's panels (the CPU); dgates [packed rows, 4H]; the final carry
    std::optional<Scratch> w_t_, w_h_t_panels_, dgates_, carry1_;
    // x_grad's (prepare_products): its packed rows (or none), W_x^T's panels, where its rows go,
    // and how many of them are done (the packed rows [x_grad_from_, N)).
    std::optional<Scratch> x_grad_packed_, w_x_t_storage_;
    std::optional<Buf> w_x_t_;
    void *x_grad_rows_ = nullptr;
    int64_t x_grad_from_ = 0;
    // Where the steps run on one thread beside x_grad's product, the fewest steps' rows it takes
    // at once (side_by_side_chunk_steps); 0: the steps split, x_grad after them.
    int64_t beside_steps_ = 0;
    // w_grad's chunks (prepare_weight_grad_chunks) and what w_grad reads: x's and h_prev_seq's
    // packed rows (w_grad_x_rows, packed_h_prev_seq).
    std::optional<Scratch> x_packed_, h_seq_;
    std::optional<WeightGradChunks> w_grad_chunks_;
    const bool b_grad_from_w_grad_;  // plan::b_grad_with_w_grad
    const bool split_;                // the split steps (plans.h), which store dgates in the dtype
    const DType gate_grads_;          // what dgates is stored in (generators/interface.h: GateGrads)
};

void grad_steps(Exec &exec, const PlanKernels &kernels, const Checked<SeqDims> &c, const StepRows &rows,
                const SeqInputs &in, const SeqActivations &act, const BlockLSTMGradOutputs<TV> &out,
                bool use_peephole, const GradPass::Caller *caller = nullptr) {
    GradPass pass(exec, kernels, c, rows, in, act, out, use_peephole, caller);
    if (!pass.anything_to_run()) return;
    // The weights' transpose and dgates (the largest workspace, 4H floats per packed row) come
    // before the first write to an output: running out of memory for them leaves the outputs as
    // they were.
    pass.transpose_weights();
    pass.prepare_products();
    pass.reverse_recurrence();
    pass.zero_unwritten();
    pass.input_and_state_grads();
    pass.weight_grads();
    pass.reductions();
}

void run_forward(const char *op, Layout layout, const SeqInputs &in, const LSTMOutputs<TV> &out,
                 float forget_bias, float cell_clip, bool use_peephole) {
    on_one_team(in.x, [&] { forward_call(op, layout, in, out, forget_bias, cell_clip, use_peephole); });
}

void grad_call(const char *op, Layout layout, const SeqInputs &in, const SeqActivations &act,
               const BlockLSTMGradOutputs<TV> &out, bool use_peephole) {
    const Checked<SeqDims> c = validate_grad(op, in, act, &out);
    const auto [exec, kernels] = exec_and_kernels(plan::Kind::sequence_grad, c, {use_peephole, layout});
    off_amx_where_it_does_not_pay(*exec, c.dtype, Pass::backward, c.dims);
    const StepRows rows = step_rows(c.dims.B, c.dims.L, in.seq_lengths);
    if (rows.in_order()) return grad_steps(*exec, kernels, c, rows, in, act, out, use_peephole);

    // Rows not in length order: the call runs on copies of its per-row inputs in that order
    // (the rows that run only) and writes x_grad, cs_prev_grad and h_prev_grad in that order, then in
    // the caller's; the weight gradients do not depend on the order.
    const KernelEntry &gather = kernels[Family::gather_rows];
    Reordered cs_prev_grad(*exec, out.cs_prev_grad), h_prev_grad(*exec, out.h_prev_grad);
    if (exec->device() == Device::cpu && !kernels.has(Family::seq_bwd_gates)) {
        // x, cs and h as the packed rows of the steps (what the batched products and the
        // reductions read; the [T, B] copies in length order were each packed again), x_grad
        // straight from its packed rows into the caller's: at 200,16,256 with lengths spread over
        // [T/4, T] the copies in length order wrote 1.6x the rows that run. The steps read the
        // rest at each row's caller row (seq_bwd_step_rows): copied, the nine per-step inputs'
        // gathers were 1322 of 19969 samples there (1.9 ms a call).
        const int64_t N = rows.total();
        std::vector<Scratch> packed;
        packed.reserve(3);
        std::vector<TV> views;
        views.reserve(3);
        auto packed_rows = [&](const TV &t) -> const TV & {
            const int64_t width = t.shape.back();
            packed.emplace_back(*exec, N * width * static_cast<int64_t>(size_of(t.dtype)), Scratch::Fill::none);
            if (width > 0) to_packed_length_order(*exec, gather, rows, t, packed.back().data());
            return views.emplace_back(TV{packed.back().data(), t.dtype, {N, width}, t.device});
        };
        Reordered cs_prev(*exec, in.cs_prev), h_prev(*exec, in.h_prev);
        to_length_order(*exec, gather, rows, in.cs_prev, cs_prev.storage.data());
        to_length_order(*exec, gather, rows, in.h_prev, h_prev.storage.data());
        const SeqInputs packed_in{in.seq_len_max, packed_rows(in.x), cs_prev.view, h_prev.view, in.w,
                                  in.wci, in.wcf, in.wco, in.b, nullptr};
        const SeqActivations packed_act{act.i, packed_rows(act.cs), act.f,          act.o,     act.ci,
                                        act.co, packed_rows(act.h), act.cs_grad, act.h_grad};
        const BlockLSTMGradOutputs<TV> packed_out{out.x_grad, cs_prev_grad.view, h_prev_grad.view, out.w_grad,
                                                  out.wci_grad, out.wcf_grad, out.wco_grad, out.b_grad};
        const GradPass::Caller caller{rows, act.cs, in.cs_prev};
        grad_steps(*exec, kernels, c, in_length_order(rows), packed_in, packed_act, packed_out, use_peephole, &caller);
    } else {
        std::vector<Reordered> ins;
        ins.reserve(12);
        auto reordered = [&](const TV &t) -> const TV & {
            ins.emplace_back(*exec, t);
            to_length_order(*exec, gather, rows, t, ins.back().storage.data());
            return ins.back().view;
        };
        const SeqInputs sorted_in{in.seq_len_max, reordered(in.x), reordered(in.cs_prev), reordered(in.h_prev), in.w,
                                  in.wci, in.wcf, in.wco, in.b, nullptr};
        const SeqActivations sorted_act{reordered(act.i),  reordered(act.cs), reordered(act.f),
                                        reordered(act.o),  reordered(act.ci), reordered(act.co),
                                        reordered(act.h),  reordered(act.cs_grad), reordered(act.h_grad)};
        Reordered x_grad(*exec, out.x_grad);
        const BlockLSTMGradOutputs<TV> sorted_out{x_grad.view, cs_prev_grad.view, h_prev_grad.view, out.w_grad,
                                                  out.wci_grad, out.wcf_grad, out.wco_grad, out.b_grad};
        grad_steps(*exec, kernels, c, in_length_order(rows), sorted_in, sorted_act, sorted_out, use_peephole);
        from_length_order(*exec, gather, rows, x_grad.storage.data(), out.x_grad);
    }
    from_length_order(*exec, gather, rows, cs_prev_grad.storage.data(), out.cs_prev_grad);
    from_length_order(*exec, gather, rows, h_prev_grad.storage.data(), out.h_prev_grad);
}

void run_grad(const char *op, Layout layout, const SeqInputs &in, const SeqActivations &act,
              const BlockLSTMGradOutputs<TV> &out, bool use_peephole) {
    on_one_team(in.x, [&] { grad_call(op, layout, in, act, out, use_peephole); });
}

// The allocating forms: validated (an error throws before anything is allocated), then run into
// fresh outputs.
LSTMOutputs<Tensor> allocate_forward(const char *op, Layout layout, const SeqInputs &in, float forget_bias,
                                     float cell_clip, bool use_peephole) {
    return into_new_outputs<LSTMOutputs>(
        [&](auto *none) { return validate_forward(op, in, none); },
        [&](const LSTMOutputs<TV> &out) { run_forward(op, layout, in, out, forget_bias, cell_clip, use_peephole); });
}

BlockLSTMGradOutputs<Tensor> allocate_grad(const char *op, Layout layout, const SeqInputs &in,
                                           const SeqActivations &act, bool use_peephole) {
    return into_new_outputs<BlockLSTMGradOutputs>(
        [&](auto *none) { return validate_grad(op, in, act, none); },
        [&](const BlockLSTMGradOutputs<TV> &out) { run_grad(op, layout, in, act, out, use_peephole); });
}

}  // namespace

void check_sequence_forward(const char *op, int64_t seq_len_max, const std::vector<TV> &a, const LSTMOutputs<TV> &out,
                            const TV *seq_lengths) {
    (void)validate_forward(op, {seq_len_max, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], seq_lengths}, &out);
}

void check_sequence_grad(const char *op, int64_t seq_len_max, const std::vector<TV> &a,
                         const BlockLSTMGradOutputs<TV> &out, const TV *seq_lengths) {
    (void)validate_grad(op, {seq_len_max, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], seq_lengths},
                        {a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16]}, &out);
}

void input_projection(Exec &exec, const KernelEntry &product, DType dt, const void *x, int64_t rows,
                      int64_t input_size, int64_t cell_size, const void *w, Buf w_x, const void *b, float *xw) {
    const int64_t I = input_size, G = 4 * cell_size;
    const Device dev = exec.device();
    if (rows > 0 && cublas_in_use(exec)) {
        // cuBLAS: xw = 1 . b (a rank-1 product: every row exactly b), then xw += x . W_x.
        Scratch ones(exec, rows * static_cast<int64_t>(size_of(dt)), Scratch::Fill::none);  // filled next
        exec.fill_ones(ones.data(), dt, rows);
        if (cublas_gemm(exec, rows, G, 1, {ones.data(), dt, 1}, {b, dt, G}, xw, DType::f32, G, 0.0f)) {
            // Each product asks again whether cuBLAS is in use: if another thread gave it up in
            // between (set_cuda_gemm, a failed cublasCreate), the Halide kernel below writes all
            // of xw instead of leaving it at b.
            if (I == 0 || cublas_gemm(exec, rows, G, I, {x, dt, I}, {w, dt, G}, xw, DType::f32, G, 1.0f)) return;
        }
    }
    // With I = 0 the product is empty, but a Halide kernel cannot be handed an operand of extent 0
    // that it indexes: x . W_x is then an exact zero, computed from one zero column.
    // (w_x is then a row of zeros: projection_weights).
    std::optional<Scratch> zero_x;
    if (I == 0) {
        zero_x.emplace(exec, rows * static_cast<int64_t>(size_of(dt)));
        x = zero_x->data();
    }
    const int64_t depth = std::max<int64_t>(I, 1);
    Buf a = Buf::matrix(dev, const_cast<void *>(x), dt, rows, depth, depth);
    Buf bias(dev, const_cast<void *>(b), dt, {G});
    Buf c = Buf::matrix(dev, xw, DType::f32, rows, G, G);
    run(product, exec, GemmArgs{.a = a, .b = w_x, .bias = &bias, .c = c});
}

}  // namespace detail

bool cuda_seq_lengths() {
    const char *env = std::getenv("BLOCKLSTM_CUDA_SEQ_LENGTHS");
    return env && std::string(env) == "1";
}

using detail::Layout;
using detail::SeqActivations;
using detail::SeqInputs;

uint64_t amx_call_count() { return detail::amx_calls.load(std::memory_order_relaxed); }

void BlockLSTM(int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w, const TV &wci,
               const TV &wcf, const TV &wco, const TV &b, const LSTMOutputs<TV> &out, const BlockLSTMAttrs &attrs, const TV *seq_lengths) {
    detail::run_forward("BlockLSTM", Layout::icfo, {seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, seq_lengths}, out,
                        attrs.forget_bias, attrs.cell_clip, attrs.use_peephole);
}

LSTMOutputs<Tensor> BlockLSTM(int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w,
                              const TV &wci, const TV &wcf, const TV &wco, const TV &b, const BlockLSTMAttrs &attrs, const TV *seq_lengths) {
    return detail::allocate_forward("BlockLSTM", Layout::icfo, {seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, seq_lengths},
                                    attrs.forget_bias, attrs.cell_clip, attrs.use_peephole);
}

void BlockLSTMV2(int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w, const TV &wci,
                 const TV &wcf, const TV &wco, const TV &b, const LSTMOutputs<TV> &out, const BlockLSTMV2Attrs &attrs, const TV *seq_lengths) {
    detail::run_forward("BlockLSTMV2", Layout::ifco, {seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, seq_lengths}, out,
                        0.0f, attrs.cell_clip, attrs.use_peephole);
}

LSTMOutputs<Tensor> BlockLSTMV2(int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w,
                                const TV &wci, const TV &wcf, const TV &wco, const TV &b,
                                const BlockLSTMV2Attrs &attrs, const TV *seq_lengths) {
    return detail::allocate_forward("BlockLSTMV2", Layout::ifco,
                                    {seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, seq_lengths}, 0.0f, attrs.cell_clip,
                                    attrs.use_peephole);
}

void BlockLSTMGrad(int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w, const TV &wci,
                   const TV &wcf, const TV &wco, const TV &b, const TV &i, const TV &cs, const TV &f, const TV &o,
                   const TV &ci, const TV &co, const TV &h, const TV &cs_grad, const TV &h_grad,
                   const BlockLSTMGradOutputs<TV> &out, const GradAttrs &attrs, const TV *seq_lengths) {
    detail::run_grad("BlockLSTMGrad", Layout::icfo, {seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, seq_lengths},
                     {i, cs, f, o, ci, co, h, cs_grad, h_grad}, out, attrs.use_peephole);
}

BlockLSTMGradOutputs<Tensor> BlockLSTMGrad(int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev,
                                           const TV &w, const TV &wci, const TV &wcf, const TV &wco, const TV &b,
                                           const TV &i, const TV &cs, const TV &f, const TV &o, const TV &ci,
                                           const TV &co, const TV &h, const TV &cs_grad, const TV &h_grad,
                                           const GradAttrs &attrs, const TV *seq_lengths) {
    return detail::allocate_grad("BlockLSTMGrad", Layout::icfo, {seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, seq_lengths},
                                 {i, cs, f, o, ci, co, h, cs_grad, h_grad}, attrs.use_peephole);
}

void BlockLSTMGradV2(int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w,
                     const TV &wci, const TV &wcf, const TV &wco, const TV &b, const TV &i, const TV &cs,
                     const TV &f, const TV &o, const TV &ci, const TV &co, const TV &h, const TV &cs_grad,
                     const TV &h_grad, const BlockLSTMGradOutputs<TV> &out, const GradAttrs &attrs, const TV *seq_lengths) {
    detail::run_grad("BlockLSTMGradV2", Layout::ifco, {seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, seq_lengths},
                     {i, cs, f, o, ci, co, h, cs_grad, h_grad}, out, attrs.use_peephole);
}

BlockLSTMGradOutputs<Tensor> BlockLSTMGradV2(int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev,
                                             const TV &w, const TV &wci, const TV &wcf, const TV &wco, const TV &b,
                                             const TV &i, const TV &cs, const TV &f, const TV &o, const TV &ci,
                                             const TV &co, const TV &h, const TV &cs_grad, const TV &h_grad,
                                             const GradAttrs &attrs, const TV *seq_lengths) {
    return detail::allocate_grad("BlockLSTMGradV2", Layout::ifco,
                                 {seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, seq_lengths},
                                 {i, cs, f, o, ci, co, h, cs_grad, h_grad}, attrs.use_peephole);
}

}  // namespace blocklstm
