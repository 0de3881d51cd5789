// cuBLAS, opened at run time, for the CUDA calls' batched products (runtime/src/products.h);
// the Halide GEMM kernels run them where cuBLAS is missing, fails or is switched off.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <type_traits>
#include <vector>

#include <cublas_api.h>

#include "runtime/src/exec.h"
#include "runtime/src/products.h"

#define BLOCKLSTM_STR(x) #x
#define BLOCKLSTM_XSTR(x) BLOCKLSTM_STR(x)

namespace blocklstm {
namespace detail {
namespace {

struct Cublas {
    decltype(&::cublasCreate_v2) create = nullptr;
    decltype(&::cublasDestroy_v2) destroy = nullptr;
    decltype(&::cublasSetStream_v2) set_stream = nullptr;
    decltype(&::cublasSetMathMode) set_math_mode = nullptr;
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void *, const void *, cudaDataType, int, const void *,
                              cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
    bool ok = false;
    std::string path;     // the library loaded
    std::string why_not;  // when not ok: why
};

const Cublas &cublas() {
    static const Cublas c = [] {
        Cublas c;
        // The soname of the toolkit built against; then the toolkit's own folder; or a path
        // given in BLOCKLSTM_CUBLAS.
        std::vector<std::string> names;
        if (const char *env = std::getenv("BLOCKLSTM_CUBLAS")) names.push_back(env);
        names.push_back("libcublas.so." BLOCKLSTM_XSTR(CUBLAS_VER_MAJOR));
        names.push_back(BLOCKLSTM_CUDA_LIBRARY_DIR "/libcublas.so." BLOCKLSTM_XSTR(CUBLAS_VER_MAJOR));
        // CUDA 12's cuBLAS (drivers before 580): the four functions used keep their ABI.
        if (CUBLAS_VER_MAJOR == 13) names.push_back("libcublas.so.12");
        void *lib = nullptr;
        for (const std::string &n : names) {
            if ((lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
        }
        if (!lib) {
            c.why_not = "libcublas.so." BLOCKLSTM_XSTR(CUBLAS_VER_MAJOR) " not found (nor " + names.back() +
                        "; BLOCKLSTM_CUBLAS names another path)";
            return c;
        }
        auto load = [&](auto &fn, const char *name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
            if (!fn && c.why_not.empty()) c.why_not = std::string("the cuBLAS library lacks ") + name;
            return fn != nullptr;
        };
        c.ok = load(c.create, "cublasCreate_v2") && load(c.destroy, "cublasDestroy_v2") &&
               load(c.set_stream, "cublasSetStream_v2") &&
               load(c.set_math_mode, "cublasSetMathMode") && load(c.gemm_ex, "cublasGemmEx");
        Dl_info info{};
        c.path = c.ok && dladdr(reinterpret_cast<void *>(c.create), &info) && info.dli_fname
                     ? info.dli_fname
                     : "";
        return c;
    }();
    return c;
}

// BLOCKLSTM_CUDA_GEMM=halide in the environment starts with the Halide GEMM kernels. A function's
// static, so that a set_cuda_gemm from another library's static initialiser is not overwritten.
std::atomic<CudaGemm> &gemm_choice() {
    static std::atomic<CudaGemm> choice{[] {
        const char *env = std::getenv("BLOCKLSTM_CUDA_GEMM");
        return env && std::string(env) == "halide" ? CudaGemm::halide : CudaGemm::cublas;
    }()};
    return choice;
}

// BLOCKLSTM_CUDA_STEP=split in the environment starts with the split steps.
std::atomic<CudaStep> &step_choice() {
    static std::atomic<CudaStep> choice{[] {
        const char *env = std::getenv("BLOCKLSTM_CUDA_STEP");
        return env && std::string(env) == "split" ? CudaStep::split : CudaStep::fused;
    }()};
    return choice;
}

// Why cuBLAS is not used although it is chosen: the library is missing or cublasCreate failed.
// The CUDA calls then run their products on the Halide GEMM kernels, and say so once on stderr.
std::mutex cublas_failure_mutex;
std::string cublas_failure;  // "" while cuBLAS works
std::atomic<bool> cublas_failed{false};
std::atomic<uint64_t> cublas_products{0};

void give_up_cublas(const std::string &why) {
    std::lock_guard<std::mutex> lock(cublas_failure_mutex);
    if (cublas_failed) return;
    cublas_failure = why;
    cublas_failed = true;
    std::fprintf(stderr, "blocklstm: warning: cuBLAS unusable (%s); the CUDA calls' batched products "
                         "run on the Halide GEMM kernels\n", why.c_str());
}

// One handle per (thread, context): a cuBLAS handle belongs to the context current at its
// creation, and a handle shared between threads would race on cublasSetStream. nullptr (and
// cuBLAS given up for the process) when cublasCreate fails.
thread_local std::map<void *, cublasHandle_t> handles;  // by context

cublasHandle_t cublas_handle(void *ctx) {
    auto it = handles.find(ctx);
    if (it != handles.end()) return it->second;
    cublasHandle_t h = nullptr;
    if (const cublasStatus_t st = cublas().create(&h); st != CUBLAS_STATUS_SUCCESS) {
        give_up_cublas("cublasCreate failed with status " + std::to_string(st));
        return nullptr;
    }
    cublas().set_math_mode(h, CUBLAS_DEFAULT_MATH);  // no TF32 for float32
    handles[ctx] = h;
    return h;
}

}  // namespace

// A handle holds a workspace of device memory (64 MiB on an H100: compute-sanitizer's leak check).
void release_cublas_handles() {
    for (const auto &[ctx, h] : handles) cuda::in_context(ctx, [h = h] { cublas().destroy(h); });
    handles.clear();
}

namespace {

cudaDataType cuda_type(DType t) { return t == DType::f16 ? CUDA_R_16F : t == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

}  // namespace

namespace {

bool cublas_in_use(Device device) {
    if (device != Device::cuda || gemm_choice().load() != CudaGemm::cublas) return false;
    if (!cublas().ok) {
        give_up_cublas(cublas().why_not);
        return false;
    }
    return !cublas_failed;
}

}  // namespace

bool cublas_in_use(const Exec &exec) { return cublas_in_use(exec.device()); }

plan::Steps steps_for(plan::Kind kind, Device device, DType dtype) {
    const bool split = step_choice().load() == CudaStep::split && plan::has_split_steps(kind, device, dtype) &&
                       cublas_in_use(device);
    return split ? plan::Steps::split : plan::Steps::fused;
}

plan::Steps steps_for(plan::Kind kind, Exec &exec, DType dtype) {
    if (steps_for(kind, exec.device(), dtype) != plan::Steps::split) return plan::Steps::fused;
    return cublas_handle(exec.cuda_call().context) ? plan::Steps::split : plan::Steps::fused;
}

bool cublas_gemm(Exec &exec, int64_t M, int64_t N, int64_t K, const Operand &a, const Operand &b,
                 void *c, DType c_dtype, int64_t ldc, float beta) {
    if (!cublas_in_use(exec)) return false;
    // cublasGemmEx takes a and b of one type; float32 without TF32 needs float32 throughout.
    if (a.dtype != b.dtype || (a.dtype == DType::f32 && c_dtype != DType::f32)) return false;
    const Cublas &cb = cublas();
    cublasHandle_t h = cublas_handle(exec.cuda_call().context);
    if (!h) return false;  // cublasCreate failed: the Halide kernels run it
    if (cb.set_stream(h, static_cast<cudaStream_t>(exec.cuda_call().stream)) != CUBLAS_STATUS_SUCCESS) {
        throw Error("blocklstm: CUDA: cublasSetStream failed");
    }
    // Row-major c = a . b is column-major c^T = b^T . a^T: the row-major memory of each operand
    // is its transpose in column-major terms, so the operands swap places and keep their flags.
    const float alpha = 1.0f;
    const cublasComputeType_t compute =
        a.dtype == DType::f32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
    const cublasStatus_t st = cb.gemm_ex(
        h, b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
        static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha, b.data,
        cuda_type(b.dtype), static_cast<int>(b.ld), a.data, cuda_type(a.dtype),
        static_cast<int>(a.ld), &beta, c, cuda_type(c_dtype), static_cast<int>(ldc), compute,
        CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        throw Error("blocklstm: CUDA: cublasGemmEx failed (status " + std::to_string(st) + ")");
    }
    ++cublas_products;
    return true;
}

}  // namespace detail

// ---- Public cuBLAS functions (blocklstm.h) -------------------------------------------------------

void set_cuda_gemm(CudaGemm gemm) { detail::gemm_choice() = gemm; }

void set_cuda_step(CudaStep step) { detail::step_choice() = step; }

CudaStep cuda_step() { return detail::step_choice().load(); }

CudaGemm cuda_gemm() { return detail::gemm_choice().load(); }

bool cublas_available() { return detail::cublas().ok && !detail::cublas_failed; }

uint64_t cublas_product_count() { return detail::cublas_products; }

std::string cuda_gemm_backend() {
    using namespace detail;
    if (gemm_choice().load() == CudaGemm::halide) return "Halide GEMM kernels (chosen: set_cuda_gemm or BLOCKLSTM_CUDA_GEMM=halide)";
    if (!cublas().ok) return "Halide GEMM kernels (cuBLAS: " + cublas().why_not + ")";
    if (cublas_failed) {
        std::lock_guard<std::mutex> lock(cublas_failure_mutex);
        return "Halide GEMM kernels (cuBLAS: " + cublas_failure + ")";
    }
    return "cuBLAS (" + cublas().path + ")";
}

}  // namespace blocklstm
