// The kernel table (runtime/kernels.inc), and one kernel call with its arguments bound by name.
#pragma once

#include <blocklstm/blocklstm.h>

#include <string>
#include <vector>

#include "runtime/src/buf.h"
#include "runtime/src/exec.h"

namespace blocklstm::detail {

// The gate order of an op (TF: BlockLSTM and the cell ops i, c, f, o; the V2 ops i, f, c, o).
enum class Layout { icfo, ifco };

// One compiled function of a kernel: its argv entry point and metadata (argument names).
struct KernelCode {
    int (*argv)(void **);
    const halide_filter_metadata_t *(*metadata)();
};

// How a kernel holds the recurrent weights (kernels.inc's weights column): packed float32 panels
// (schedules/panel_layout.h), the matrix in place, or none.
enum class KernelWeights { none, panels, matrix };

struct KernelEntry {
    const char *name;
    const char *family;
    Device backend;
    DType dtype;
    bool peephole;
    const char *layout;  // "icfo", "ifco", "any"
    KernelWeights weights;
    // cpu: one function per CPU target, in cpu_targets.inc's order; cuda: one.
    const KernelCode *code;
};

// The kernel of `family` for this backend and flags (layout ignored for "any" kernels, peephole
// for families without peephole variants). Throws if absent (e.g. a CUDA call in a build without
// BLOCKLSTM_CUDA).
const KernelEntry &find_kernel(const char *family, Device backend, DType dtype, bool peephole,
                               Layout layout);

// One call of a kernel with its arguments bound by name (the generator's input/output names;
// Tuple outputs as "name.0", "name.1", ...). Binding is checked against the kernel's metadata, so
// a mismatch between runtime and generator is an error, not a silent misread. A call object may
// be run many times; the bound buffers may be moved (Buf::set_data) between runs.
class KernelCall {
public:
    // CUDA kernels take the Exec's user_context (context and stream).
    KernelCall(const KernelEntry &kernel, Exec &exec);
    KernelCall &buffer(const char *name, Buf &buf);
    KernelCall &scalar(const char *name, float *value);
    void run();

private:
    int index_of(const char *name, bool is_buffer) const;
    const KernelEntry &kernel_;
    int cpu_target_;  // -1: not a CPU kernel
    const KernelCode &code_;
    std::vector<std::string> names_;
    std::vector<void *> args_;
    void *user_context_ = nullptr;
};

// Throws, naming the kernel, unless every kernel an op call needs is compiled in (runtime/src/
// ops.cpp: the op's kernel families): run before an op writes any output.
void preflight(const std::string &op, Device device, DType dtype, bool use_peephole);

}  // namespace blocklstm::detail
