// The knobs of the schedules, as plain numbers free of Halide. Their values come from one tuning
// table per target (schedules/tuned/<table>.json, written by `blocklstm tune`): CMake reads the
// table a kernel is built for and hands its knobs to the generator as one generator param
// (`tuning=name:value,...`); the generators' schedules read them from there (schedules/schedule.h:
// Machine), the tests derive their tile-boundary shapes from the tables compiled in, and the
// tuner writes new values in the same form. The rules below bound what a table may say; a table
// that breaks one is rejected when a kernel is generated from it, naming the table and the rule.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "generators/interface.h"
#include "schedules/panel_layout.h"

namespace blocklstm::schedules {

// The CPU schedules (schedules/cpu.h).
struct CpuTuning {
    std::string table;  // e.g. "x86-64-avx2": the table the values came from, for messages
    // Floats per vector: 4 (SSE4.1), 8 (AVX2), 16 (AVX-512).
    int vector_floats = 0;
    // A batched product's register tile: rows x vectors accumulators, plus one vector of B per
    // column vector and one broadcast, must fit the vector registers (16 below AVX-512, 32 with it).
    int gemm_tile_rows = 0;
    int gemm_tile_vectors = 0;  // the tile's columns, in vectors
    // A per-step product's register tile: rows (the batch B, usually a multiple of 4 and often
    // small) x vectors of accumulators, under the same register rule.
    int gemm_step_tile_rows = 0;
    int gemm_step_tile_vectors = 0;
    // A step of more rows than that tile's, up to this many, in one tall tile of all its rows
    // (schedules/step_tiles.h), gemm_step_tall_tile_vectors wide; 0: none (two short tiles).
    int gemm_step_tall_tile_rows = 0;
    // Steps of k per block of a batched product: its B panel (tile columns x k block) is meant
    // to stay in L1.
    int gemm_k_block = 0;
    // Steps of k per block of the forward's input projection (x . W_x, depth I), where it differs
    // from the other batched products' (0, a table that leaves it out: gemm_k_block). On a Zen 3
    // the two-layer bidirectional module's second layer (I = 2H = 1024) ran its projection at
    // 0.56x the rate of I = 512 in two blocks of 512, while the backward's deep products lost with
    // blocks of 1024.
    int gemm_projection_k_block = 0;
    // Steps of k per block of a per-step product (each block is one parallel loop).
    int gemm_step_k_block = 0;
    // Register tiles per row block (the rows a packed B panel is reused for), and column chunks:
    // a batched product's work items are row blocks x column chunks (its parallel grain).
    int gemm_row_block_tiles = 0;
    int gemm_column_chunks = 0;
    // The order of a batched product's register tiles within a work item and k block: 0, the
    // row block's tiles innermost under each column tile (the column tile's B panel stays in L1
    // while A streams); 1, the column chunk's tiles innermost under each row tile (the row tile's
    // A stays in L1 while the B panels stream from L2).
    int gemm_columns_inner = 0;
    // A column sum's parallel chunk, in vectors of one row (summed in groups that fit the registers).
    int column_sum_vectors = 0;
    // The runtime's, read by no kernel: the most cells H at which a forward step of at most 8 rows
    // runs on one thread, without a fork, beside the input projection on the other (2 loop
    // threads; runtime/src/weight_grad_chunks.h: steps_on_one_thread). Where one core's L2 feeds
    // W_h slower than two forks a step cost, the steps of larger H are split over both threads.
    int one_thread_forward_cells = 0;

    int gemm_tile_cols() const { return vector_floats * gemm_tile_vectors; }
    int gemm_step_tile_cols() const { return vector_floats * gemm_step_tile_vectors; }
    // A tall tile of `rows` rows: as many vectors as the step tile's accumulators fill.
    int gemm_step_tall_tile_vectors(int rows) const { return gemm_step_tile_rows * gemm_step_tile_vectors / rows; }
    int gemm_step_tall_tile_cols(int rows) const { return vector_floats * gemm_step_tall_tile_vectors(rows); }
    // The step tiles one task of a step's one-row product covers (schedules/step_tiles.h): the
    // fewest whose columns are whole weight panels (AVX2's 24-column tiles: two, 48 columns), if
    // their accumulators fit the registers and the panels' slack (panels::kOneRowSlackCols)
    // covers them. One row streams W_h's panels from L3 at every step, and a tile that ends
    // inside a panel reads both of its panels in part: on a Zen 3 one-row tasks of 48 columns
    // made BlockLSTM 0.86-0.88x and BlockLSTMGrad 0.87-0.90x the time of 24-column ones at
    // 100,1,512 (docs/tuning.md).
    int gemm_one_row_task_tiles() const {
        const int cols = gemm_step_tile_cols();
        int tiles = 1;
        while (tiles * cols % panels::kPanelCols != 0) ++tiles;
        const bool fits = tiles * gemm_step_tile_vectors + 1 <= registers() &&
                          (tiles - 1) * cols <= panels::kOneRowSlackCols;
        return fits ? tiles : 1;
    }
    // The partial sums each vector of a one-row task of `task_tiles` step tiles keeps (the
    // runtime's panels: gemm_one_row_task_tiles; a copy of b per tile: one): two (even and odd
    // k, twice the FMA chains in flight) where their accumulators and a broadcast for each leave
    // LLVM three registers for the k loop's invariants, else one. AVX2's 48-column task in two
    // sums was 12 accumulators and 2 broadcasts of 16 registers, and LLVM spilled two
    // accumulators to the stack and back at every step of k; in one sum the loop is 6 FMAs
    // reading W_h's panels and a broadcast, chains enough for a row whose every FMA loads its
    // vector of W_h: BlockLSTM 0.88x the time at 500,1,128, 0.97x at 100,1,256 (AMD Zen 3,
    // docs/performance.md). The cell's copy of w per tile is one tile, 3 vectors: two sums.
    int gemm_one_row_partial_sums(int task_tiles) const {
        const int vectors = task_tiles * gemm_step_tile_vectors;
        constexpr int kLoopInvariants = 3;
        return 2 * vectors + 2 + kLoopInvariants <= registers() ? 2 : 1;
    }
    // Vector registers of the instruction set whose vectors these are.
    int registers() const { return vector_floats >= 16 ? 32 : 16; }
};

// The CUDA schedules (schedules/cuda.h). A product's thread block is warps along the columns
// (32 threads, each `cols_per_thread` adjacent columns) times `thread_rows` along the rows; a
// thread keeps cols_per_thread x rows_per_thread accumulators in registers for all of k.
struct CudaTuning {
    std::string table;
    int batched_cols_per_thread = 0, batched_rows_per_thread = 0, batched_thread_rows = 0;
    int step_cols_per_thread = 0, step_rows_per_thread = 0, step_thread_rows = 0;
    // The step products' depth in blocks of this many (0: one block), summed in parallel, then
    // in order: B x H outputs are too few threads for an H100 (B = 64, H = 512: 2 warps per
    // multiprocessor with 1 x 4 tiles) to cover a depth of 4H = 2048 one after another.
    int step_k_block = 0;
    // Element-wise kernels: units x rows per thread block.
    int elementwise_cols = 0, elementwise_rows = 0;
    // Column sums: rows summed per chunk (one thread each, in parallel), then the chunks in order.
    int sum_rows_per_chunk = 0;
    // The backward step's two outputs (the gate gradients and the cell-state carry) in one kernel,
    // each thread writing both (compute_with): one launch a step fewer, where a launch costs
    // 2-3 us (H200, float16 200,16,256: 2.4 and 2.1 us for the two kernels). 0: a kernel each;
    // 1: one kernel; 2: one kernel for the 16-bit dtypes only (on an H100 one kernel took
    // 0.85-0.96x the time in float16, but 1.30x in float32 at 1024,16,768).
    int gate_outputs_one_kernel = 0;
};

// A knob, one row each (the CPU's: schedules/cpu_knobs.inc, where CMake reads them too): its name
// in the tables, the field the schedules read it from, the range a table may give it, the values
// the tuner's search tries (none: not searched, e.g. vector_floats, which is the target's), its
// place in the search's coordinate descent (1 first: the knobs that move the most time; 0: not in
// it), the products whose schedules read it (the tuner times a family again only for the knobs it
// reads; CMake shares a CPU kernel between targets whose tables agree on them), and the value a
// table that leaves it out gets (none: every table must give it; a new knob with the old behaviour
// as its default needs no table edited).
template <typename Tuning>
struct Knob {
    const char *name;
    int Tuning::*field;
    int min, max;
    std::vector<int> candidates;
    int priority;
    std::vector<kernel::Products> read_by;
    std::optional<int> fallback = std::nullopt;

    bool reads(kernel::Products p) const { return std::find(read_by.begin(), read_by.end(), p) != read_by.end(); }
};

inline const std::vector<Knob<CpuTuning>> &cpu_knobs() {
    using enum kernel::Products;
    static const std::vector<Knob<CpuTuning>> knobs{
#define BLOCKLSTM_UNPAREN(...) __VA_ARGS__
#define BLOCKLSTM_CPU_KNOB(name, min, max, candidates, priority, read_by, fallback) \
    {#name, &CpuTuning::name, min, max, {BLOCKLSTM_UNPAREN candidates}, priority, {BLOCKLSTM_UNPAREN read_by}, fallback},
#include "schedules/cpu_knobs.inc"
#undef BLOCKLSTM_CPU_KNOB
#undef BLOCKLSTM_UNPAREN
    };
    return knobs;
}

inline const std::vector<Knob<CudaTuning>> &cuda_knobs() {
    using P = kernel::Products;
    static const std::vector<Knob<CudaTuning>> knobs{
        {"batched_cols_per_thread", &CudaTuning::batched_cols_per_thread, 1, 16, {1, 2, 4, 8}, 9, {P::batched}},
        {"batched_rows_per_thread", &CudaTuning::batched_rows_per_thread, 1, 16, {1, 2, 4, 8, 16}, 8, {P::batched}},
        {"batched_thread_rows", &CudaTuning::batched_thread_rows, 1, 32, {1, 2, 4, 8, 16, 32}, 10, {P::batched}},
        {"step_cols_per_thread", &CudaTuning::step_cols_per_thread, 1, 16, {1, 2, 4, 8}, 2, {P::step}},
        {"step_rows_per_thread", &CudaTuning::step_rows_per_thread, 1, 16, {1, 2, 4, 8, 16}, 1, {P::step}},
        {"step_thread_rows", &CudaTuning::step_thread_rows, 1, 32, {1, 2, 4, 8, 16, 32}, 3, {P::step}},
        {"step_k_block", &CudaTuning::step_k_block, 0, 8192, {0, 128, 256, 512, 1024}, 4, {P::step}},
        {"elementwise_cols", &CudaTuning::elementwise_cols, 1, 1024, {32, 64, 128, 256}, 5, {P::step, P::sums}},
        {"elementwise_rows", &CudaTuning::elementwise_rows, 1, 1024, {1, 2, 4, 8}, 6, {P::step, P::sums}},
        {"sum_rows_per_chunk", &CudaTuning::sum_rows_per_chunk, 1, 65536, {16, 32, 64, 128, 256, 512}, 7, {P::sums}},
        {"gate_outputs_one_kernel", &CudaTuning::gate_outputs_one_kernel, 0, 2, {0, 1, 2}, 11, {P::step}, 0},
    };
    return knobs;
}

inline std::string tuning_error(const std::string &table, const std::string &what) {
    return "tuning table " + (table.empty() ? std::string("(unnamed)") : table) + ": " + what;
}

// The rules a CPU table must keep; "" when it does, else what it breaks.
inline std::string cpu_rule_broken(const CpuTuning &t) {
    if (t.vector_floats != 4 && t.vector_floats != 8 && t.vector_floats != 16)
        return "vector_floats " + std::to_string(t.vector_floats) + " is not 4, 8 or 16";
    // That they are the vectors of the instruction set that runs the table is checked where the
    // targets are (schedules/cpu_targets.json, cmake/BlocklstmCpuTargets.cmake).
    // The batched and the step products' register tiles.
    struct Tile {
        const char *rows_name, *vectors_name;
        int rows, vectors;
    };
    const Tile tiles[] = {{"gemm_tile_rows", "gemm_tile_vectors", t.gemm_tile_rows, t.gemm_tile_vectors},
                          {"gemm_step_tile_rows", "gemm_step_tile_vectors", t.gemm_step_tile_rows,
                           t.gemm_step_tile_vectors}};
    // The geometry rule (schedules/panel_layout.h): a register tile lies inside one panel group,
    // so no tile reads a weight panel the runtime did not allocate.
    for (const Tile &tile : tiles) {
        const int cols = t.vector_floats * tile.vectors;
        if (panels::kPanelGroupCols % cols != 0)
            return "register tiles of " + std::string(tile.vectors_name) + " " + std::to_string(tile.vectors) +
                   " x " + std::to_string(t.vector_floats) + " = " + std::to_string(cols) +
                   " columns do not divide a panel group of " + std::to_string(panels::kPanelGroupCols) +
                   " columns";
    }
    // Tall tiles (schedules/step_tiles.h): taller than the step tile, shorter than two of it (the
    // steps of more rows run in whole tiles), at least one vector wide, in whole panel groups.
    if (const int tall = t.gemm_step_tall_tile_rows; tall != 0) {
        if (tall <= t.gemm_step_tile_rows || tall >= 2 * t.gemm_step_tile_rows ||
            t.gemm_step_tall_tile_vectors(tall) < 1)
            return "gemm_step_tall_tile_rows " + std::to_string(tall) + " is not between gemm_step_tile_rows " +
                   std::to_string(t.gemm_step_tile_rows) + " and twice it, or its tiles hold no vector";
        // One width for all of them: a tall twin is computed inside the column split of every branch,
        // the tall branches' one split their whole tile, so a narrower twin there would be asked for
        // more columns than its bound (a bounds error at run time: AVX2's 5 rows of 2 vectors beside
        // 7 rows of one).
        const int cols = t.gemm_step_tall_tile_cols(tall);
        for (int rows = t.gemm_step_tile_rows + 1; rows <= tall; ++rows)
            if (t.gemm_step_tall_tile_cols(rows) != cols)
                return "gemm_step_tall_tile_rows " + std::to_string(tall) + ": tall tiles of " +
                       std::to_string(rows) + " rows are " + std::to_string(t.gemm_step_tall_tile_cols(rows)) +
                       " columns wide, those of " + std::to_string(tall) + " rows " + std::to_string(cols) +
                       "; all must be as wide";
        if (panels::kPanelGroupCols % cols != 0)
            return "gemm_step_tall_tile_rows " + std::to_string(tall) + ": tall tiles " + std::to_string(cols) +
                   " columns wide do not divide a panel group of " + std::to_string(panels::kPanelGroupCols) +
                   " columns";
    }
    // The accumulators, a vector of B per column vector and a broadcast live in registers.
    for (const Tile &tile : tiles) {
        const int live = tile.rows * tile.vectors + tile.vectors + 1;
        if (live > t.registers())
            return std::string(tile.rows_name) + " " + std::to_string(tile.rows) + " x " + tile.vectors_name + " " +
                   std::to_string(tile.vectors) + " accumulators need " + std::to_string(live) +
                   " vector registers, more than the " + std::to_string(t.registers()) + " there are";
    }
    return "";
}

inline std::string cuda_rule_broken(const CudaTuning &t) {
    auto check_tile = [](const char *which, int cols, int rows, int thread_rows) -> std::string {
        if (32 * thread_rows > 1024)
            return std::string(which) + "_thread_rows " + std::to_string(thread_rows) +
                   " makes thread blocks of more than 1024 threads";
        if (cols * rows > 64)
            return std::string(which) + " tiles of " + std::to_string(cols) + " x " + std::to_string(rows) +
                   " accumulators per thread are more than 64";
        // A block's registers must fit a multiprocessor's 65,536: per thread the accumulators and
        // about 48 more (ptxas -v, sm_90, the products with 4 x 8 tiles: 72 and 80 registers).
        const int threads = 32 * thread_rows, registers = cols * rows + 48;
        if (threads * registers > 65536)
            return std::string(which) + "_thread_rows " + std::to_string(thread_rows) + " with " +
                   std::to_string(cols) + " x " + std::to_string(rows) + " accumulators: " +
                   std::to_string(threads) + " threads of about " + std::to_string(registers) +
                   " registers need more than a multiprocessor's 65,536";
        return "";
    };
    std::string broken = check_tile("batched", t.batched_cols_per_thread, t.batched_rows_per_thread,
                                    t.batched_thread_rows);
    if (broken.empty())
        broken = check_tile("step", t.step_cols_per_thread, t.step_rows_per_thread, t.step_thread_rows);
    if (broken.empty() && t.elementwise_cols * t.elementwise_rows > 1024)
        broken = "elementwise_cols x elementwise_rows is more than 1024 threads per block";
    return broken;
}

// "name:value,name:value,...": every knob of the list, in its order.
template <typename Tuning>
std::string knob_string(const Tuning &t, const std::vector<Knob<Tuning>> &knobs) {
    std::string s;
    for (const Knob<Tuning> &k : knobs) s += (s.empty() ? "" : ",") + std::string(k.name) + ":" + std::to_string(t.*k.field);
    return s;
}
inline std::string knob_string(const CpuTuning &t) { return knob_string(t, cpu_knobs()); }
inline std::string knob_string(const CudaTuning &t) { return knob_string(t, cuda_knobs()); }

// Parses a knob string: every knob exactly once, each an integer inside its range, then the
// rules; throws std::invalid_argument naming the table and what is wrong.
template <typename Tuning>
Tuning parse_knobs(const std::string &table, const std::string &text,
                   const std::vector<Knob<Tuning>> &knobs, std::string (*rule_broken)(const Tuning &)) {
    Tuning t;
    t.table = table;
    std::vector<bool> seen(knobs.size(), false);
    size_t at = 0;
    while (at < text.size()) {
        size_t end = text.find(',', at);
        if (end == std::string::npos) end = text.size();
        const std::string item = text.substr(at, end - at);
        at = end + 1;
        const size_t colon = item.find(':');
        const std::string name = item.substr(0, colon);
        size_t k = 0;
        while (k < knobs.size() && name != knobs[k].name) ++k;
        if (colon == std::string::npos || k == knobs.size())
            throw std::invalid_argument(tuning_error(table, "unknown knob '" + name + "'"));
        if (seen[k]) throw std::invalid_argument(tuning_error(table, "knob " + name + " given twice"));
        const std::string value = item.substr(colon + 1);
        char *value_end = nullptr;
        const long v = std::strtol(value.c_str(), &value_end, 10);
        if (value.empty() || *value_end != '\0' || v < knobs[k].min || v > knobs[k].max)
            throw std::invalid_argument(tuning_error(table, "knob " + name + " is '" + value + "', expected an integer in [" +
                                                                std::to_string(knobs[k].min) + ", " +
                                                                std::to_string(knobs[k].max) + "]"));
        t.*knobs[k].field = static_cast<int>(v);
        seen[k] = true;
    }
    for (size_t k = 0; k < knobs.size(); ++k) {
        if (seen[k]) continue;
        if (!knobs[k].fallback)
            throw std::invalid_argument(tuning_error(table, std::string("knob ") + knobs[k].name + " is missing"));
        t.*knobs[k].field = *knobs[k].fallback;
    }
    if (const std::string broken = rule_broken(t); !broken.empty())
        throw std::invalid_argument(tuning_error(table, broken));
    return t;
}

inline CpuTuning parse_cpu_tuning(const std::string &table, const std::string &text) {
    return parse_knobs(table, text, cpu_knobs(), cpu_rule_broken);
}
inline CudaTuning parse_cuda_tuning(const std::string &table, const std::string &text) {
    return parse_knobs(table, text, cuda_knobs(), cuda_rule_broken);
}

}  // namespace blocklstm::schedules
