// The kernel table built from runtime/kernels.inc, kernel calls bound by argument name, and the
// Halide runtime hooks (errors, threads, CPU target).
#include <cstring>
#include <algorithm>
#include <mutex>
#include <utility>
#include <string_view>

#include "runtime/src/internal.h"

#define BLOCKLSTM_KERNEL_NAME(family, backend, dtype, flags, layout) \
    family##__##backend##_##dtype##_##flags##_##layout

// The table's lines of the backends this build has (CMake builds the cuda lines only with
// BLOCKLSTM_CUDA).
#define BLOCKLSTM_IF_BACKEND_cpu(...) __VA_ARGS__
#if BLOCKLSTM_WITH_CUDA
#define BLOCKLSTM_IF_BACKEND_cuda(...) __VA_ARGS__
#else
#define BLOCKLSTM_IF_BACKEND_cuda(...)
#endif

#define BLOCKLSTM_KERNEL(family, backend, dtype, flags, layout)                                  \
    BLOCKLSTM_IF_BACKEND_##backend(                                                              \
        extern "C" int BLOCKLSTM_KERNEL_NAME(family, backend, dtype, flags, layout##_argv)(void **); \
        extern "C" const halide_filter_metadata_t *BLOCKLSTM_KERNEL_NAME(                        \
            family, backend, dtype, flags, layout##_metadata)();)
#include "runtime/kernels.inc"
#undef BLOCKLSTM_KERNEL

namespace blocklstm {
namespace detail {
namespace {

const KernelEntry kernel_table[] = {
#define BLOCKLSTM_KERNEL(family, backend, dtype, flags, layout)                                 \
    BLOCKLSTM_IF_BACKEND_##backend(                                                             \
        {#family "__" #backend "_" #dtype "_" #flags "_" #layout,                               \
         #family,                                                                               \
         Device::backend,                                                                       \
         DType::dtype,                                                                          \
         std::string_view(#flags) == "peephole",                                                \
         #layout,                                                                               \
         &BLOCKLSTM_KERNEL_NAME(family, backend, dtype, flags, layout##_argv),                  \
         &BLOCKLSTM_KERNEL_NAME(family, backend, dtype, flags, layout##_metadata)},)
#include "runtime/kernels.inc"
#undef BLOCKLSTM_KERNEL
};

const char *layout_name(Layout layout) { return layout == Layout::icfo ? "icfo" : "ifco"; }

// Halide reports errors through a global handler, on the calling thread or on a worker of its
// thread pool; keep the message for the exception instead of printing it (kernels only fail on
// a runtime bug: validation runs first).
std::mutex halide_error_mutex;
std::string last_halide_error;
void capture_halide_error(void *, const char *message) {
    std::lock_guard<std::mutex> lock(halide_error_mutex);
    last_halide_error = message ? message : "";
}
const bool error_handler_installed = (halide_set_error_handler(capture_halide_error), true);

// The TF ops that run a kernel, for `blocklstm list`.
std::string ops_of(const KernelEntry &k) {
    const std::string_view family = k.family, layout = k.layout;
    const bool v1 = layout != "ifco", v2 = layout != "icfo";
    std::string ops;
    auto add = [&](bool yes, const char *op) {
        if (!yes) return;
        if (!ops.empty()) ops += ' ';
        ops += op;
    };
    if (family == "cell_bwd") add(true, "LSTMBlockCellGrad");
    if (family == "seq_fwd_step" || family == "gemm_nn_bias" || family == "panels") {
        add(v1, "LSTMBlockCell");
        add(v1, "BlockLSTM");
        add(v2, "BlockLSTMV2");
    }
    if (family == "panels" && k.dtype == DType::f32) {
        add(v1, "BlockLSTMGrad");
        add(v2, "BlockLSTMGradV2");
    }
    if (family == "seq_bwd_step" || family == "seq_bwd_reduce" || family == "gemm_nn" ||
        family == "gemm_tn" || family == "gemm_tn_panels" || family == "transpose" ||
        family == "panels_t") {
        add(v1, "BlockLSTMGrad");
        add(v2, "BlockLSTMGradV2");
    }
    return ops;
}

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

}  // namespace

const KernelEntry &find_kernel(const char *family, Device backend, DType dtype, bool peephole,
                               Layout layout) {
    for (const KernelEntry &k : kernel_table) {
        if (std::strcmp(k.family, family) == 0 && k.backend == backend && k.dtype == dtype &&
            k.peephole == peephole &&
            (std::strcmp(k.layout, "any") == 0 || std::strcmp(k.layout, layout_name(layout)) == 0)) {
            return k;
        }
    }
    throw Error(std::string("blocklstm: no compiled kernel ") + family + " for " +
                to_string(backend) + " " + to_string(dtype) + (peephole ? " peephole " : " plain ") +
                layout_name(layout) +
                (backend == Device::cuda && !BLOCKLSTM_WITH_CUDA
                     ? " (this build has no CUDA kernels: configure with -DBLOCKLSTM_CUDA=ON)"
                     : " (runtime/kernels.inc)"));
}

KernelCall::KernelCall(const KernelEntry &kernel, Exec &exec) : kernel_(kernel) {
    if (kernel.backend != exec.device()) {
        throw Error(std::string("blocklstm internal error: kernel ") + kernel.name + " run on " +
                    to_string(exec.device()) + " tensors");
    }
    const halide_filter_metadata_t *md = kernel.metadata();
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

int KernelCall::index_of(const char *name, bool is_buffer) const {
    const halide_filter_metadata_t *md = kernel_.metadata();
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

KernelCall &KernelCall::buffer(const char *name, Buf &buf) {
    args_[index_of(name, true)] = buf.get();
    return *this;
}

KernelCall &KernelCall::scalar(const char *name, float *value) {
    args_[index_of(name, false)] = value;
    return *this;
}

void KernelCall::run() {
    for (std::size_t i = 0; i < args_.size(); ++i) {
        if (!args_[i]) {
            throw Error(std::string("blocklstm internal error: argument '") + names_[i] +
                        "' of kernel " + kernel_.name + " is not bound");
        }
    }
    (void)error_handler_installed;
    if (int code = kernel_.argv(args_.data())) {
        std::lock_guard<std::mutex> lock(halide_error_mutex);
        throw Error(std::string("blocklstm internal error: kernel ") + kernel_.name +
                    " failed (Halide error " + std::to_string(code) + "): " + last_halide_error);
    }
}

}  // namespace detail

std::vector<KernelInfo> kernels() {
    std::vector<KernelInfo> out;
    for (const detail::KernelEntry &k : detail::kernel_table) {
        KernelInfo info;
        info.name = k.name;
        info.family = k.family;
        info.ops = detail::ops_of(k);
        info.backend = k.backend;
        info.dtype = k.dtype;
        info.peephole = k.peephole;
        info.layout = k.layout;
        info.targets = k.backend == Device::cuda ? BLOCKLSTM_CUDA_TARGET : BLOCKLSTM_CPU_TARGETS;
        out.push_back(std::move(info));
    }
    return out;
}

std::string cpu_target_in_use() {
    // The multi-target kernels take the first target (best first) whose features this CPU has;
    // ask the Halide runtime the same question with the same feature sets.
    const std::string targets = BLOCKLSTM_CPU_TARGETS;
    std::size_t begin = 0;
    while (begin <= targets.size()) {
        std::size_t end = targets.find(',', begin);
        if (end == std::string::npos) end = targets.size();
        const std::string target = targets.substr(begin, end - begin);
        // The feature tokens of the default targets (CMake: BLOCKLSTM_CPU_TARGETS); a target
        // with any other token cannot be checked here and is reported as such.
        static const std::pair<const char *, halide_target_feature_t> known[] = {
            {"avx512_skylake", halide_target_feature_avx512_skylake},
            {"avx2", halide_target_feature_avx2},
            {"fma", halide_target_feature_fma},
            {"f16c", halide_target_feature_f16c},
            {"sse41", halide_target_feature_sse41}};
        uint64_t features[(halide_target_feature_end + 63) / 64] = {};
        bool checkable = target.rfind("x86-64-linux", 0) == 0;
        std::size_t pos = std::string("x86-64-linux").size();
        while (checkable && pos < target.size()) {
            const std::size_t next = std::min(target.find('-', pos + 1), target.size());
            const std::string token = target.substr(pos + 1, next - pos - 1);
            bool found = false;
            for (const auto &[name, feature] : known) {
                if (token == name) {
                    features[feature / 64] |= uint64_t(1) << (feature % 64);
                    found = true;
                }
            }
            checkable = found;
            pos = next;
        }
        if (!checkable) return target + " (if this CPU has its features: not checked)";
        if (halide_can_use_target_features(sizeof(features) / sizeof(features[0]), features)) {
            return target;
        }
        begin = end + 1;
    }
    return "none (this CPU lacks every compiled target)";
}

void set_num_threads(int threads) { halide_set_num_threads(threads); }

}  // namespace blocklstm
