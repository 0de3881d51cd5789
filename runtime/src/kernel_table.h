// The kernel table (runtime/kernels.inc), and one kernel call with its arguments bound by name.
#pragma once

#include <blocklstm/blocklstm.h>

#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "generators/interface.h"
#include "runtime/src/buf.h"
#include "runtime/src/exec.h"
#include "runtime/src/kernel_overrides.h"
#include "runtime/src/plans.h"

namespace blocklstm::detail {

using kernel::Family;
using kernel::Layout;
using kernel::Weights;

// One compiled function of a kernel: its argv entry point and metadata (argument names).
struct KernelCode {
    int (*argv)(void **);
    const halide_filter_metadata_t *(*metadata)();
};

struct KernelEntry {
    const char *name;
    Family family;
    Device backend;
    DType dtype;
    bool peephole;
    const char *layout;  // "icfo", "ifco", "any"
    Weights weights;     // how it holds the recurrent weights
    // cpu: one function per CPU target, in cpu_targets.inc's order; cuda: one.
    const KernelCode *code;
};

// Every compiled kernel (runtime/kernels.inc's lines of the backends this build has).
std::span<const KernelEntry> kernel_entries();

// The kernel of `family` for this backend and dtype, and for the cell math's families
// (families.inc's variants) the peephole flag and gate layout. Throws if absent (e.g. a CUDA call
// in a build without BLOCKLSTM_CUDA).
struct CellVariant {
    bool peephole;
    Layout layout;
};
const KernelEntry &find_kernel(Family family, Device backend, DType dtype, CellVariant cell);
// A family without such variants (the products, transposes, panels).
const KernelEntry &find_kernel(Family family, Device backend, DType dtype);

// One call of a kernel with its arguments bound by name (the generator's input/output names,
// generators/interface.h; Tuple outputs as "name.0", "name.1", ...): through the typed binders of
// runtime/src/kernel_args.h. Binding is checked against the kernel's metadata too. A call object
// may be run many times; the bound buffers may be moved (Buf::set_data) between runs.
class KernelCall {
public:
    // CUDA kernels take the Exec's user_context (context and stream).
    KernelCall(const KernelEntry &kernel, Exec &exec);
    KernelCall &buffer(const std::string &name, Buf &buf);
    KernelCall &scalar(const std::string &name, float *value);
    // The op's gate layout (icfo or ifco): the argument gate_order of a kernel compiled for any
    // (generators/interface.h: Layout::any); a kernel compiled for one layout must be of that one.
    KernelCall &gate_order(Layout layout);
    void run();

private:
    int index_of(const std::string &name, bool is_buffer) const;
    const KernelEntry &kernel_;
    int cpu_target_;  // -1: not a CPU kernel
    const KernelCode &code_;
    std::shared_ptr<const KernelOverride> override_;  // the tuner's code in place of code_ (kernel_overrides.h)
    std::vector<std::string> names_;
    std::vector<void *> args_;
    void *user_context_ = nullptr;
};

// The kernels of a call's plan (runtime/src/plans.h), found before any output is written: a
// kernel this build lacks throws, naming it. The time loop takes each family's kernel from here.
class PlanKernels {
public:
    PlanKernels(plan::Kind kind, Device device, DType dtype, CellVariant cell, plan::Steps steps = plan::Steps::fused);
    // The plan's kernel of `family`; a family the plan does not run is a bug of the time loop.
    const KernelEntry &operator[](Family family) const;
    // Whether the plan runs `family` (a time loop's path between plans).
    bool has(Family family) const { return (*kernels_)[static_cast<std::size_t>(family)] != nullptr; }
    // The call's gate layout, which its cell math kernels compiled for any take as an argument.
    Layout gate_layout() const { return layout_; }

private:
    const std::array<const KernelEntry *, kernel::kFamilyCount> *kernels_;
    Layout layout_;
};

// Throws, naming the kernel, unless every kernel an op call needs is compiled in (the op's plan).
void preflight(const std::string &op, Device device, DType dtype, bool use_peephole);

}  // namespace blocklstm::detail
