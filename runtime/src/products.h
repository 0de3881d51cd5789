// The batched matrix products of an op call: Halide GEMM kernels, or cuBLAS on CUDA.
#pragma once

#include <blocklstm/blocklstm.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "runtime/src/exec.h"
#include "runtime/src/kernel_table.h"
#include "runtime/src/plans.h"
#include "runtime/src/validate.h"
#include "runtime/src/weight_grad_chunks.h"
#include "schedules/panel_layout.h"

namespace blocklstm::detail {

// Elements of a [depth, cols] operand in packed panels: the panel count every CPU geometry may
// read (schedules/panel_layout.h), which the kernels check.
inline int64_t panel_elements(int64_t cols, int64_t depth) {
    return saturating_product({panels::panel_count(cols), depth, panels::kPanelCols});
}
// The same operand in bfloat16 pair panels: elements of 2 bytes, 2 * kPanelCols per pair of k.
inline int64_t pair_panel_elements(int64_t cols, int64_t depth) {
    return saturating_product({panels::panel_count(cols), (depth + 1) / 2, 2 * panels::kPanelCols});
}

// The same operand in AMX's one pair panel: elements of 2 bytes, its columns and depth in whole tiles.
inline int64_t amx_panel_elements(int64_t cols, int64_t depth) {
    return saturating_product({panels::amx_panel_pairs(depth), panels::amx_panel_cols(cols), 2});
}

// xw[rows, 4H] = x[rows, I] . W_x + b in float32: the input projection of every step of a
// sequence at once (rows = L*B), of a chunk of its steps, or of one cell step (rows = B): on
// cuBLAS from w's rows, or by `product` from w_x, W_x = w[0:I, :] as that kernel holds it
// (ops_sequence.cpp: projection_weights).
void input_projection(Exec &exec, const KernelEntry &product, DType dtype, const void *x, int64_t rows,
                      int64_t input_size, int64_t cell_size, const void *w, Buf w_x, const void *b, float *xw);

// A row-major matrix operand of a batched product: `data` holds the operand (rows x cols, row
// stride ld) or, when `transposed`, its transpose (cols x rows, row stride ld).
struct Operand {
    const void *data;
    DType dtype;
    int64_t ld;
    bool transposed = false;
};

// The steps a call's recurrence runs on `device` (plan::Steps): split where set_cuda_step asks
// for them, the plan has them and cuBLAS is in use; fused otherwise.
plan::Steps steps_for(plan::Kind kind, Device device, DType dtype);
// The same for a call about to run: split only once this thread's cuBLAS handle for the call's
// context exists (a cublasCreate that fails gives the fused steps, not a failed call).
plan::Steps steps_for(plan::Kind kind, Exec &exec, DType dtype);

// Whether this call's batched products go to cuBLAS (a CUDA call, CudaGemm::cublas, the library
// loaded); cublas_gemm may still decline operand types it cannot take (runtime/src/cublas.cpp).
bool cublas_in_use(const Exec &exec);
// c[M,N] (row-major, row stride ldc, dtype c_dtype) = a[M,K] . b[K,N] + beta * c through cuBLAS
// (float32 accumulation; float32 without TF32). Returns false, doing nothing, where cuBLAS is not
// in use (CudaGemm::halide, no library, or operand types it cannot take); the caller then runs
// the Halide GEMM kernel.
bool cublas_gemm(Exec &exec, int64_t M, int64_t N, int64_t K, const Operand &a, const Operand &b,
                 void *c, DType c_dtype, int64_t ldc, float beta);
// A split-step call, which chose cuBLAS once (steps_for), found it given up since (set_cuda_gemm
// on another thread): the call fails rather than leave a product undone.
[[noreturn]] void cublas_lost_during_call();

// The recurrent product of a split time loop, c[M,N] (row stride ldc) = a[M,K] . b + beta * c for
// each step's a and c (b fixed), on cuBLASLt where it loads: for each row count M a step runs, the
// fastest of the heuristic's first candidates (split-K included; its reductions are
// deterministic), chosen by timing them once per shape and process at a call's start (which
// then waits for the stream), and a workspace of the call. Where cuBLASLt is missing, off
// (BLOCKLSTM_CUDA_LT=0) or offers no algorithm: cublasGemmEx. `alignment`: bytes every a, b and
// c pointer the loop passes is a multiple of (pointer_alignment).
class StepProducts {
public:
    struct Plan;  // one row count's descriptors and algorithm (runtime/src/cublas.cpp)
    StepProducts(Exec &exec, const std::vector<int64_t> &rows, int64_t N, int64_t K, const Operand &a, const Operand &b,
                 DType c_dtype, int64_t ldc, float beta, int alignment);
    ~StepProducts();
    StepProducts(const StepProducts &) = delete;
    StepProducts &operator=(const StepProducts &) = delete;
    // One step: M rows (one of `rows`), its a and c.
    void run(int64_t M, const void *a, void *c);

private:
    void *workspace_data() const { return workspace_ ? workspace_->data() : nullptr; }
    Exec &exec_;
    int64_t N_, K_;
    Operand a_, b_;
    DType c_dtype_;
    int64_t ldc_;
    float beta_;
    std::vector<Plan> plans_;
    std::optional<Scratch> workspace_;
};
using cuda::address;
// The largest power of two (at most 256) dividing every value: pointers and byte strides.
inline int pointer_alignment(std::initializer_list<uint64_t> values) {
    uint64_t all = 256;
    for (uint64_t v : values) all |= v;
    return static_cast<int>(all & (~all + 1));  // the lowest set bit
}

}  // namespace blocklstm::detail
