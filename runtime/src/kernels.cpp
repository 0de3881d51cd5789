// The kernel table built from runtime/kernels.inc (and, for the CPU kernels, cpu_targets.inc),
// kernel calls bound by argument name, and the Halide runtime hooks (errors, threads).
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>
#include <string_view>

#include "runtime/src/kernel_overrides.h"
#include "runtime/src/kernel_table.h"
#include "runtime/src/thread_pool.h"
#include "runtime/src/validate.h"

#include "cpu_targets.inc"        // generated: BLOCKLSTM_FOR_EACH_CPU_TARGET
#include "cpu_kernels_shared.inc"  // generated: <kernel>__<tag> defined as another's function

#define BLOCKLSTM_KERNEL_NAME(family, backend, dtype, flags, layout) \
    family##__##backend##_##dtype##_##flags##_##layout

// The table's lines of the backends this build has (CMake builds the cuda lines only with
// BLOCKLSTM_CUDA). A cpu line has one function per CPU target, <kernel>__<tag>.
#define BLOCKLSTM_IF_BACKEND_cpu(...) __VA_ARGS__
#if BLOCKLSTM_WITH_CUDA
#define BLOCKLSTM_IF_BACKEND_cuda(...) __VA_ARGS__
#else
#define BLOCKLSTM_IF_BACKEND_cuda(...)
#endif

// A CPU function's name <kernel>__<tag> may be defined as another's (cpu_kernels_shared.inc): the
// outer macro expands it before the inner one pastes it.
#define BLOCKLSTM_PASTE_FUNCTION(fn)                   \
    extern "C" int fn##_argv(void **);                 \
    extern "C" const halide_filter_metadata_t *fn##_metadata();
#define BLOCKLSTM_DECLARE_FUNCTION(fn) BLOCKLSTM_PASTE_FUNCTION(fn)
#define BLOCKLSTM_DECLARE_CPU_FUNCTION(kernel, tag) BLOCKLSTM_DECLARE_FUNCTION(kernel##__##tag)
#define BLOCKLSTM_DECLARE_cpu(kernel) BLOCKLSTM_FOR_EACH_CPU_TARGET(BLOCKLSTM_DECLARE_CPU_FUNCTION, kernel)
#define BLOCKLSTM_DECLARE_cuda(kernel) BLOCKLSTM_DECLARE_FUNCTION(kernel)
#define BLOCKLSTM_KERNEL(family, backend, dtype, flags, layout, ...) \
    BLOCKLSTM_IF_BACKEND_##backend(                                  \
        BLOCKLSTM_DECLARE_##backend(BLOCKLSTM_KERNEL_NAME(family, backend, dtype, flags, layout)))
#include "runtime/kernels.inc"
#undef BLOCKLSTM_KERNEL

namespace blocklstm {
namespace detail {
namespace {

// The functions of each kernel: kernel_code_<kernel>[] = {{argv, metadata}, ...}.
#define BLOCKLSTM_PASTE_CODE(fn) {&fn##_argv, &fn##_metadata},
#define BLOCKLSTM_CODE(fn) BLOCKLSTM_PASTE_CODE(fn)
#define BLOCKLSTM_CPU_CODE(kernel, tag) BLOCKLSTM_CODE(kernel##__##tag)
#define BLOCKLSTM_CODE_cpu(kernel) BLOCKLSTM_FOR_EACH_CPU_TARGET(BLOCKLSTM_CPU_CODE, kernel)
#define BLOCKLSTM_CODE_cuda(kernel) BLOCKLSTM_CODE(kernel)
#define BLOCKLSTM_KERNEL(family, backend, dtype, flags, layout, ...)                                \
    BLOCKLSTM_IF_BACKEND_##backend(                                                                 \
        const KernelCode kernel_code_##family##__##backend##_##dtype##_##flags##_##layout[] = {      \
            BLOCKLSTM_CODE_##backend(BLOCKLSTM_KERNEL_NAME(family, backend, dtype, flags, layout))};)
#include "runtime/kernels.inc"
#undef BLOCKLSTM_KERNEL

const KernelEntry kernel_table[] = {
#define BLOCKLSTM_KERNEL(family, backend, dtype, flags, layout, weights)                       \
    BLOCKLSTM_IF_BACKEND_##backend(                                                             \
        {#family "__" #backend "_" #dtype "_" #flags "_" #layout,                               \
         Family::family,                                                                        \
         Device::backend,                                                                       \
         DType::dtype,                                                                          \
         std::string_view(#flags) == "peephole",                                                \
         #layout,                                                                               \
         Weights::weights,                                                                      \
         kernel_code_##family##__##backend##_##dtype##_##flags##_##layout},)
#include "runtime/kernels.inc"
#undef BLOCKLSTM_KERNEL
};

const char *layout_name(Layout layout) { return layout == Layout::icfo ? "icfo" : layout == Layout::ifco ? "ifco" : "any"; }

// Halide reports errors through a global handler, on the calling thread or on a worker of its
// thread pool; keep the message for the exception instead of printing it (validation runs first,
// so a kernel fails only for the machine's limits (memory), a device error, or a bug).
std::mutex halide_error_mutex;
std::string last_halide_error;
void capture_halide_error(void *, const char *message) {
    try {  // called from Halide's C runtime: nothing may leave it
        std::lock_guard<std::mutex> lock(halide_error_mutex);
        last_halide_error = message ? message : "";
    } catch (...) {
    }
}
const bool error_handler_installed = (halide_set_error_handler(capture_halide_error), true);
const bool thread_pool_installed = install_thread_pool();  // thread_pool.cpp: why

std::string normalized_argument_name(const char *name) {
    // Halide decorates the buffers of multi-stage outputs as "name$1.0"; drop the "$<n>".
    std::string out;
    for (const char *p = name; *p; ++p) {
        if (*p == '$') {
            while (p[1] >= '0' && p[1] <= '9') ++p;
            continue;
        }
        out += *p;
    }
    return out;
}

const KernelEntry &find(Family family, Device backend, DType dtype, const CellVariant *cell) {
    const kernel::FamilyRecord &r = kernel::record(family);
    if (backend == Device::cuda && dtype == DType::bf16 && !cuda_bfloat16())
        throw Error(std::string("blocklstm: no compiled kernel ") + r.name +
                    " for cuda bfloat16 is enabled: bfloat16 on CUDA has not run on a GPU yet "
                    "(BLOCKLSTM_CUDA_BF16=1 enables its kernels; docs/cuda.md)");
    for (const KernelEntry &k : kernel_table) {
        if (k.family == family && k.backend == backend && k.dtype == dtype &&
            (!r.has_peephole_variants() || k.peephole == cell->peephole) &&
            (std::strcmp(k.layout, "any") == 0 || (cell && std::strcmp(k.layout, layout_name(cell->layout)) == 0))) {
            return k;
        }
    }
    throw Error(std::string("blocklstm: no compiled kernel ") + r.name + " for " + to_string(backend) + " " +
                to_string(dtype) +
                (cell ? std::string(cell->peephole ? " peephole " : " plain ") + layout_name(cell->layout) : "") +
                (backend == Device::cuda && !BLOCKLSTM_WITH_CUDA
                     ? " (this build has no CUDA kernels: configure with -DBLOCKLSTM_CUDA=ON)"
                     : " (runtime/kernels.inc)"));
}

}  // namespace

std::span<const KernelEntry> kernel_entries() { return kernel_table; }


const KernelEntry &find_kernel(Family family, Device backend, DType dtype, CellVariant cell) {
    return find(family, backend, dtype, &cell);
}

namespace {

// Every plan's kernels for every device, dtype, peephole flag and layout, found once (a lookup per
// family per call was 2 % of BlockLSTMGrad at T=10, B=8, H=64); what a build lacks is kept as the
// error its calls throw.
struct Resolved {
    std::array<const KernelEntry *, kernel::kFamilyCount> kernels{};
    std::string missing;
};
constexpr int kKinds = 4, kDevices = 2, kDTypes = static_cast<int>(std::size(kFloatDTypes)), kSteps = 2;

int dtype_index(DType dtype) {
    for (int k = 0; k < kDTypes; ++k)
        if (kFloatDTypes[k] == dtype) return k;
    throw Error(std::string("no kernels for dtype ") + to_string(dtype));
}

int slot(plan::Kind kind, Device device, DType dtype, CellVariant cell, plan::Steps steps) {
    return ((((static_cast<int>(kind) * kDevices + static_cast<int>(device)) * kDTypes + dtype_index(dtype)) * 2 +
             (cell.peephole ? 1 : 0)) * 2 + (cell.layout == Layout::ifco ? 1 : 0)) * kSteps + static_cast<int>(steps);
}

const Resolved &resolved(plan::Kind kind, Device device, DType dtype, CellVariant cell, plan::Steps steps) {
    static const std::vector<Resolved> all = [] {
        std::vector<Resolved> r(kKinds * kDevices * kDTypes * 2 * 2 * kSteps);
        for (int k = 0; k < kKinds; ++k)
            for (Device d : {Device::cpu, Device::cuda})
                for (DType t : kFloatDTypes)
                    for (bool peephole : {false, true})
                        for (Layout layout : {Layout::icfo, Layout::ifco})
                            for (plan::Steps st : {plan::Steps::fused, plan::Steps::split}) {
                                const auto kind_k = static_cast<plan::Kind>(k);
                                const CellVariant c{peephole, layout};
                                Resolved &out = r[slot(kind_k, d, t, c, st)];
                                for (const plan::Step &step : plan::plan_of(kind_k, d, t, st)) {
                                    try {
                                        const bool cell_math = kernel::record(step.family).has_layout_variants();
                                        out.kernels[static_cast<std::size_t>(step.family)] =
                                            cell_math ? &find_kernel(step.family, d, t, c) : &find_kernel(step.family, d, t);
                                    } catch (const Error &e) {
                                        if (out.missing.empty()) out.missing = e.what();
                                    }
                                }
                            }
        return r;
    }();
    return all[slot(kind, device, dtype, cell, steps)];
}

}  // namespace

PlanKernels::PlanKernels(plan::Kind kind, Device device, DType dtype, CellVariant cell, plan::Steps steps)
    : layout_(cell.layout) {
    const Resolved &r = resolved(kind, device, dtype, cell, steps);
    if (!r.missing.empty()) throw Error(r.missing);
    kernels_ = &r.kernels;
}

const KernelEntry &PlanKernels::operator[](Family family) const {
    const KernelEntry *k = (*kernels_)[static_cast<std::size_t>(family)];
    if (!k)
        throw Error(std::string("blocklstm internal error: kernel family ") + kernel::name(family) +
                    " is not in the call's plan (runtime/src/plans.h)");
    return *k;
}

const KernelEntry &find_kernel(Family family, Device backend, DType dtype) {
    if (kernel::record(family).has_layout_variants())
        throw Error(std::string("blocklstm internal error: kernel family ") + kernel::name(family) +
                    " asked for without its peephole flag and gate layout");
    return find(family, backend, dtype, nullptr);
}

namespace {

// override_cpu_kernel's code by kernel (kernel_overrides.h); `any` spares every KernelCall the
// lock while there is none (always, but in the tuner).
std::mutex overrides_mutex;
std::map<const KernelEntry *, std::shared_ptr<const KernelOverride>> overrides;
std::atomic<bool> any_override{false};

std::shared_ptr<const KernelOverride> override_of(const KernelEntry &kernel) {
    if (!any_override.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard<std::mutex> lock(overrides_mutex);
    const auto it = overrides.find(&kernel);
    return it == overrides.end() ? nullptr : it->second;
}

}  // namespace

void override_cpu_kernel(const std::string &family, bool peephole, int arguments, KernelOverride code) {
    std::vector<const KernelEntry *> replaced;
    const int targets = static_cast<int>(cpu_targets().size());  // a CPU kernel's functions, one per target
    for (const KernelEntry &k : kernel_table) {
        if (k.backend != Device::cpu || k.dtype != DType::f32 || kernel::name(k.family) != family) continue;
        if (kernel::record(k.family).has_peephole_variants() && k.peephole != peephole) continue;
        for (int t = 0; t < targets; ++t)
            if (const int n = k.code[t].metadata()->num_arguments; n != arguments)
                throw Error(std::string("override_cpu_kernel: ") + k.name + " (CPU target " + cpu_target_name(t) +
                            ") takes " + std::to_string(n) + " arguments, the code " + std::to_string(arguments));
        replaced.push_back(&k);
    }
    if (replaced.empty())
        throw Error("override_cpu_kernel: no float32 CPU kernel of family '" + family + "'" +
                    (peephole ? " with peepholes" : ""));
    std::lock_guard<std::mutex> lock(overrides_mutex);
    auto shared = code ? std::make_shared<const KernelOverride>(std::move(code)) : nullptr;
    for (const KernelEntry *k : replaced)
        if (shared) overrides[k] = shared;
        else overrides.erase(k);
    any_override.store(!overrides.empty(), std::memory_order_release);
}

void clear_overrides() {
    {
        std::lock_guard<std::mutex> lock(overrides_mutex);
        overrides.clear();
        any_override.store(false, std::memory_order_release);
    }
    override_cpu_knobs("");
}

int ops_do_par_for(void *user_context, halide_task_t task, int min, int size, uint8_t *closure) {
    return halide_do_par_for(user_context, task, min, size, closure);  // the pool install_thread_pool installed
}

KernelCall::KernelCall(const KernelEntry &kernel, Exec &exec)
    : kernel_(kernel),
      cpu_target_(kernel.backend == Device::cpu ? exec.cpu_target() : -1),
      code_(kernel.code[std::max(cpu_target_, 0)]),
      override_(override_of(kernel)) {
    if (kernel.backend != exec.device()) {
        throw Error(std::string("blocklstm internal error: kernel ") + kernel.name + " run on " +
                    to_string(exec.device()) + " tensors");
    }
    const halide_filter_metadata_t *md = code_.metadata();
    for (int i = 0; i < md->num_arguments; ++i) {
        names_.push_back(normalized_argument_name(md->arguments[i].name));
    }
    args_.assign(names_.size(), nullptr);
    // CUDA kernels are compiled with user_context: the context and stream of this call.
    user_context_ = exec.user_context();
    bool has_user_context = false;
    for (std::size_t i = 0; i < names_.size(); ++i) {
        if (names_[i] == "__user_context") args_[i] = &user_context_, has_user_context = true;
    }
    if (kernel.backend == Device::cuda && !has_user_context) {
        throw Error(std::string("blocklstm internal error: CUDA kernel ") + kernel.name +
                    " was compiled without user_context (BLOCKLSTM_CUDA_TARGET)");
    }
}

int KernelCall::index_of(const std::string &name, bool is_buffer) const {
    const halide_filter_metadata_t *md = code_.metadata();
    for (std::size_t i = 0; i < names_.size(); ++i) {
        if (names_[i] == name) {
            const bool buffer = md->arguments[i].kind != halide_argument_kind_input_scalar;
            if (buffer != is_buffer) break;
            return static_cast<int>(i);
        }
    }
    throw Error(std::string("blocklstm internal error: kernel ") + kernel_.name +
                " has no " + (is_buffer ? "buffer" : "scalar") + " argument '" + name + "'");
}

KernelCall &KernelCall::buffer(const std::string &name, Buf &buf) {
    args_[index_of(name, true)] = buf.get();
    return *this;
}

KernelCall &KernelCall::scalar(const std::string &name, float *value) {
    args_[index_of(name, false)] = value;
    return *this;
}

KernelCall &KernelCall::gate_order(Layout layout) {
    static const int32_t orders[] = {static_cast<int32_t>(Layout::icfo), static_cast<int32_t>(Layout::ifco)};
    if (layout == Layout::any)
        throw Error(std::string("blocklstm internal error: kernel ") + kernel_.name + " run without a gate layout");
    if (std::strcmp(kernel_.layout, "any") != 0) {  // compiled for one
        if (std::strcmp(kernel_.layout, layout_name(layout)) != 0)
            throw Error(std::string("blocklstm internal error: kernel ") + kernel_.name + " run for gate layout " +
                        layout_name(layout));
        return *this;
    }
    args_[index_of(kernel::args::seq_fwd_step::gate_order, false)] =
        const_cast<int32_t *>(&orders[static_cast<int>(layout)]);  // an input: never written
    return *this;
}

void KernelCall::run() {
    for (std::size_t i = 0; i < args_.size(); ++i) {
        if (!args_[i]) {
            throw Error(std::string("blocklstm internal error: argument '") + names_[i] +
                        "' of kernel " + kernel_.name + " is not bound");
        }
    }
    if (std::vector<uint64_t> *fp = cpu_target_ < 0 ? cuda::fingerprint() : nullptr) {
        // A time loop being fingerprinted (cuda::run_loop): the kernel and every argument it
        // would be launched with (buffers: device address, type and dimensions; scalars: bits).
        const halide_filter_metadata_t *md = code_.metadata();
        fp->push_back(reinterpret_cast<uint64_t>(&code_));
        for (std::size_t i = 0; i < args_.size(); ++i) {
            if (names_[i] == "__user_context") continue;
            if (md->arguments[i].kind == halide_argument_kind_input_scalar) {
                uint32_t bits;
                std::memcpy(&bits, args_[i], 4);  // every scalar argument is 4 bytes (float, or int32: gate_order)
                fp->push_back(bits);
                continue;
            }
            const auto *b = static_cast<const halide_buffer_t *>(args_[i]);
            fp->push_back(b->device);
            fp->push_back(b->type.as_u32());
            for (int k = 0; k < b->dimensions; ++k)
                for (int32_t v : {b->dim[k].min, b->dim[k].extent, b->dim[k].stride})
                    fp->push_back(static_cast<uint32_t>(v));
        }
        return;
    }
    (void)error_handler_installed;
    if (int code = override_ ? (*override_)(args_.data()) : code_.argv(args_.data())) {
        std::lock_guard<std::mutex> lock(halide_error_mutex);
        const std::string where = cpu_target_ >= 0 ? " (CPU target " + cpu_target_name(cpu_target_) + ")" : "";
        const std::string what = last_halide_error + " (Halide error " + std::to_string(code) + ")";
        switch (code) {
        case halide_error_code_out_of_memory:
        case halide_error_code_device_malloc_failed:  // the machine's limits, not the call's input or a bug
            throw Error(std::string("blocklstm: out of ") +
                        (code == halide_error_code_out_of_memory ? "host" : "device") + " memory in kernel " +
                        kernel_.name + where + ": " + what + "; the outputs may be partly written");
        case halide_error_code_copy_to_host_failed:
        case halide_error_code_copy_to_device_failed:
        case halide_error_code_device_sync_failed:
        case halide_error_code_device_free_failed:
        case halide_error_code_device_run_failed:  // the driver's word: a lost context, an earlier fault
            throw Error(std::string("blocklstm: CUDA error in kernel ") + kernel_.name + ": " + what +
                        "; the outputs may be partly written");
        default:
            throw Error(std::string("blocklstm: internal error in kernel ") + kernel_.name + where + ": " + what +
                        ". This is a bug in blocklstm, not in the call's input: please report it with "
                        "the call that caused it.");
        }
    }
}

}  // namespace detail

bool cuda_bfloat16() {
    const char *env = std::getenv("BLOCKLSTM_CUDA_BF16");
    return env && std::string(env) == "1";
}

void set_num_threads(int threads) {
    if (threads < 0)
        throw Error("set_num_threads: threads is " + std::to_string(threads) + ": expected 0 (one per core) or more");
    halide_set_num_threads(threads);  // loops forked inside a task, or by a second caller at once
    detail::set_pool_threads(threads);
}

void set_thread_pool(const std::string &pool) {
    if (!detail::own_thread_pool())
        throw Error("set_thread_pool: pool is \"" + pool + "\", but BLOCKLSTM_THREAD_POOL=halide is set: the kernels "
                    "run on Halide's pool for the life of the process");
    if (pool == "own") {
        detail::use_openmp_threads(false);
    } else if (pool == "openmp") {
        if (detail::use_openmp_threads(true).empty())
            throw Error("set_thread_pool: pool is \"openmp\", but no OpenMP runtime (libgomp, libomp or libiomp5) is "
                        "loaded in this process");
    } else {
        throw Error("set_thread_pool: pool is \"" + pool + "\": expected \"own\" or \"openmp\"");
    }
}

std::string thread_pool_in_use() {
    if (!detail::own_thread_pool()) return "halide";
    const std::string library = detail::openmp_library_in_use();
    return library.empty() ? "own" : "openmp (" + library + ")";
}

}  // namespace blocklstm
