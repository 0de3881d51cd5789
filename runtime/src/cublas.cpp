// cuBLAS, opened at run time, for the CUDA calls' batched products (runtime/src/products.h);
// the Halide GEMM kernels run them where cuBLAS is missing, fails or is switched off. cuBLASLt,
// opened beside it, for the split steps' recurrent products (StepProducts), with cublasGemmEx
// where it is missing.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <algorithm>
#include <cublasLt.h>
#include <cublas_api.h>

#include "runtime/src/exec.h"
#include "runtime/src/products.h"

#define BLOCKLSTM_STR(x) #x
#define BLOCKLSTM_XSTR(x) BLOCKLSTM_STR(x)

namespace blocklstm {
namespace detail {
namespace {

// A library opened at run time: the first of `names` dlopen finds, then `symbols` each
// resolving one function pointer; `why_not` says what failed, `path` what was loaded.
struct RuntimeLibrary {
    bool ok = false;
    std::string path, why_not;

    template <typename... Fns>
    void open(const std::vector<std::string> &names, const std::string &missing, const char *what,
              std::pair<Fns &, const char *>... symbols) {
        void *lib = nullptr;
        for (const std::string &n : names)
            if ((lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
        if (!lib) {
            why_not = missing;
            return;
        }
        auto load = [&](auto &fn, const char *name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
            if (!fn && why_not.empty()) why_not = std::string("the ") + what + " library lacks " + name;
            return fn != nullptr;
        };
        ok = (load(symbols.first, symbols.second) && ...);
        Dl_info info{};
        const void *first = reinterpret_cast<const void *>(std::get<0>(std::tie(symbols.first...)));
        path = ok && dladdr(first, &info) && info.dli_fname ? info.dli_fname : "";
    }
};

template <typename Fn>
std::pair<Fn &, const char *> sym(Fn &fn, const char *name) {
    return {fn, name};
}

struct Cublas : RuntimeLibrary {
    decltype(&::cublasCreate_v2) create = nullptr;
    decltype(&::cublasDestroy_v2) destroy = nullptr;
    decltype(&::cublasSetStream_v2) set_stream = nullptr;
    decltype(&::cublasSetMathMode) set_math_mode = nullptr;
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void *, const void *, cudaDataType, int, const void *,
                              cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
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
        c.open(names,
               "libcublas.so." BLOCKLSTM_XSTR(CUBLAS_VER_MAJOR) " not found (nor " + names.back() +
                   "; BLOCKLSTM_CUBLAS names another path)",
               "cuBLAS", sym(c.create, "cublasCreate_v2"),
               sym(c.destroy, "cublasDestroy_v2"),
               sym(c.set_stream, "cublasSetStream_v2"),
               sym(c.set_math_mode, "cublasSetMathMode"),
               sym(c.gemm_ex, "cublasGemmEx"));
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

// The split steps unless BLOCKLSTM_CUDA_STEP=fused in the environment.
std::atomic<CudaStep> &step_choice() {
    static std::atomic<CudaStep> choice{[] {
        const char *env = std::getenv("BLOCKLSTM_CUDA_STEP");
        return env && std::string(env) == "fused" ? CudaStep::fused : CudaStep::split;
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

void cublas_lost_during_call() {
    throw Error("blocklstm: CUDA: cuBLAS became unusable during a call with split steps (set_cuda_gemm on "
                    "another thread); the outputs may be partly written");
}

bool cublas_gemm(Exec &exec, int64_t M, int64_t N, int64_t K, const Operand &a, const Operand &b,
                 void *c, DType c_dtype, int64_t ldc, float beta) {
    if (!cublas_in_use(exec)) return false;
    // cublasGemmEx takes a and b of one type; float32 without TF32 needs float32 throughout.
    if (a.dtype != b.dtype || (a.dtype == DType::f32 && c_dtype != DType::f32)) return false;
    const Cublas &cb = cublas();
    cublasHandle_t h = cublas_handle(exec.cuda_call().context);
    if (!h) return false;  // cublasCreate failed: the Halide kernels run it
    // A time loop being fingerprinted (cuda::run_loop): the product's arguments, not the product.
    if (cuda::record({4, address(h), uint64_t(M), uint64_t(N), uint64_t(K), address(a.data), uint64_t(a.dtype),
                      uint64_t(a.ld), a.transposed, address(b.data), uint64_t(b.dtype), uint64_t(b.ld), b.transposed,
                      address(c), uint64_t(c_dtype), uint64_t(ldc), cuda::float_bits(beta)}))
        return true;
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

// ---- cuBLASLt: the split steps' recurrent products ------------------------------------------------

namespace {

struct CublasLt : RuntimeLibrary {
    decltype(&::cublasLtCreate) create = nullptr;
    decltype(&::cublasLtDestroy) destroy = nullptr;
    decltype(&::cublasLtMatmulDescCreate) desc_create = nullptr;
    decltype(&::cublasLtMatmulDescDestroy) desc_destroy = nullptr;
    decltype(&::cublasLtMatmulDescSetAttribute) desc_set = nullptr;
    decltype(&::cublasLtMatrixLayoutCreate) layout_create = nullptr;
    decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
    decltype(&::cublasLtMatmulPreferenceCreate) pref_create = nullptr;
    decltype(&::cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
    decltype(&::cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
    decltype(&::cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
    decltype(&::cublasLtMatmul) matmul = nullptr;
};

// cuBLASLt: $BLOCKLSTM_CUBLASLT, else the one cuBLAS loaded (its dependency, found by soname),
// else the soname, the toolkit's folder, CUDA 12's. BLOCKLSTM_CUDA_LT=0: not loaded (cublasGemmEx).
const CublasLt &cublaslt() {
    static const CublasLt c = [] {
        CublasLt c;
        if (const char *env = std::getenv("BLOCKLSTM_CUDA_LT"); env && std::string(env) == "0") {
            c.why_not = "switched off (BLOCKLSTM_CUDA_LT=0)";
            return c;
        }
        (void)cublas();  // a cuBLAS loaded from a path brings its cuBLASLt
        std::vector<std::string> names;
        if (const char *env = std::getenv("BLOCKLSTM_CUBLASLT")) names.push_back(env);
        const std::string soname = "libcublasLt.so." BLOCKLSTM_XSTR(CUBLAS_VER_MAJOR);
        names.push_back(soname);
        if (!cublas().path.empty()) names.push_back(cublas().path.substr(0, cublas().path.rfind('/') + 1) + soname);
        names.push_back(BLOCKLSTM_CUDA_LIBRARY_DIR "/" + soname);
        if (CUBLAS_VER_MAJOR == 13) names.push_back("libcublasLt.so.12");
        c.open(names, soname + " not found (BLOCKLSTM_CUBLASLT names another path)", "cuBLASLt",
               sym(c.create, "cublasLtCreate"), sym(c.destroy, "cublasLtDestroy"),
               sym(c.desc_create, "cublasLtMatmulDescCreate"), sym(c.desc_destroy, "cublasLtMatmulDescDestroy"),
               sym(c.desc_set, "cublasLtMatmulDescSetAttribute"), sym(c.layout_create, "cublasLtMatrixLayoutCreate"),
               sym(c.layout_destroy, "cublasLtMatrixLayoutDestroy"),
               sym(c.pref_create, "cublasLtMatmulPreferenceCreate"),
               sym(c.pref_destroy, "cublasLtMatmulPreferenceDestroy"),
               sym(c.pref_set, "cublasLtMatmulPreferenceSetAttribute"),
               sym(c.heuristic, "cublasLtMatmulAlgoGetHeuristic"), sym(c.matmul, "cublasLtMatmul"));
        return c;
    }();
    return c;
}

std::mutex lt_failure_mutex;
std::string lt_failure;  // why cuBLASLt was given up at run time ("" while it works)
std::atomic<bool> lt_failed{false};

void give_up_cublaslt(const std::string &why) {
    std::lock_guard<std::mutex> lock(lt_failure_mutex);
    if (lt_failed) return;
    lt_failure = why;
    lt_failed = true;
    std::fprintf(stderr, "blocklstm: warning: cuBLASLt unusable (%s); the split steps' recurrent products run on "
                         "cublasGemmEx\n", why.c_str());
}

thread_local std::map<void *, cublasLtHandle_t> lt_handles;  // by context, as the cuBLAS handles

cublasLtHandle_t lt_handle(void *ctx) {
    if (!cublaslt().ok || lt_failed) return nullptr;
    auto it = lt_handles.find(ctx);
    if (it != lt_handles.end()) return it->second;
    cublasLtHandle_t h = nullptr;
    if (const cublasStatus_t st = cublaslt().create(&h); st != CUBLAS_STATUS_SUCCESS) {
        give_up_cublaslt("cublasLtCreate failed with status " + std::to_string(st));
        return nullptr;
    }
    return lt_handles[ctx] = h;
}

// The algorithm of each product shape, chosen once per process (every thread's calls of a shape
// run the same one, so their results are the same bits): the fastest of the heuristic's first
// kLtCandidates by GPU time. found false: cuBLASLt offered none (cublasGemmEx runs it).
struct LtAlgo {
    bool found = false;
    cublasLtMatmulAlgo_t algo{};
    std::size_t workspace = 0;
};
constexpr int kLtCandidates = 8;
constexpr std::size_t kLtMaxWorkspace = std::size_t{32} << 20;  // split-K partials of 128 x 8192 floats x 8
std::mutex lt_algos_mutex;
std::map<std::vector<int64_t>, LtAlgo> lt_algos;

}  // namespace

void release_cublaslt_handles() {
    for (const auto &[ctx, h] : lt_handles) cuda::in_context(ctx, [h = h] { cublaslt().destroy(h); });
    lt_handles.clear();
}

// One M's cuBLASLt product: its descriptors (Lt's A is our b, Lt's B our a: column-major c^T =
// b^T . a^T, as cublas_gemm) and its algorithm. Empty (desc null) where cublasGemmEx runs it.
struct StepProducts::Plan {
    int64_t M = 0, K = 0;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // Lt's A, B, C (= D)
    LtAlgo algo;
};

// The heuristic's first kLtCandidates for the plan's shape, each timed on the call's stream on
// zeroed scratch copies of a and c (a's steps may not be written yet: the backward's
// dgates[t+1]): the fastest. Once per shape and process. How a candidate is timed
// (lt_timing_by_graph): by default one run to warm up, then `reps` between two events; with
// BLOCKLSTM_CUDA_LT_TIMING=graph, the candidates in turn over `rounds` rounds, each a CUDA graph of
// `reps` runs (cuda::graph_elapsed_ms), the least of its rounds. A step's product takes some 3 µs
// on the GPU at the small shapes, about as long as the host takes to launch it, and a process's
// first call finds the clocks still rising: the default timing measures both, and on an H100
// the float32 backward at 100,32,256 took 2.2 ms in one process and 3.7 in the next
// (docs/performance.md). The graph timing stays off until a GPU run shows what it changes.
namespace {
bool lt_timing_by_graph() {
    static const bool graph = [] {
        const char *env = std::getenv("BLOCKLSTM_CUDA_LT_TIMING");
        return env && std::string(env) == "graph";
    }();
    return graph;
}

LtAlgo choose_algo(Exec &exec_, const StepProducts::Plan &p, const Operand &a_, const Operand &b_, DType c_dtype_,
                   int64_t ldc_, float beta_, int alignment) {
    const CublasLt &lt = cublaslt();
    cublasLtHandle_t h = lt_handle(exec_.cuda_call().context);
    cublasLtMatmulPreference_t pref = nullptr;
    if (lt.pref_create(&pref) != CUBLAS_STATUS_SUCCESS) return {};
    const uint64_t max_workspace = kLtMaxWorkspace;
    const uint32_t align = static_cast<uint32_t>(alignment);
    lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace));
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        lt.pref_set(pref, attr, &align, sizeof(align));
    cublasLtMatmulHeuristicResult_t results[kLtCandidates] = {};
    int count = 0;
    const cublasStatus_t st = lt.heuristic(h, p.desc, p.a, p.b, p.c, p.c, pref, kLtCandidates, results, &count);
    lt.pref_destroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || count == 0) return {};
    std::size_t workspace = 0;
    for (int k = 0; k < count; ++k) workspace = std::max(workspace, results[k].workspaceSize);
    const std::size_t c_bytes = static_cast<std::size_t>(p.M * ldc_) * size_of(c_dtype_);
    const std::size_t a_bytes = static_cast<std::size_t>((a_.transposed ? p.K : p.M) * a_.ld) * size_of(a_.dtype);
    void *c = cuda::allocate(exec_.cuda_call(), c_bytes), *a = cuda::allocate(exec_.cuda_call(), a_bytes);
    cuda::zero(exec_.cuda_call(), c, c_bytes);  // beta = 1 reads it
    cuda::zero(exec_.cuda_call(), a, a_bytes);
    void *ws = workspace > 0 ? cuda::allocate(exec_.cuda_call(), workspace) : nullptr;
    const float alpha = 1.0f;
    const bool by_graph = lt_timing_by_graph();
    const int reps = by_graph ? 10 : 5, rounds = by_graph ? 3 : 1;
    auto once = [&](int k, void *stream) {
        return lt.matmul(h, p.desc, &alpha, b_.data, p.a, a, p.b, &beta_, c, p.c, c, p.c, &results[k].algo, ws,
                         results[k].workspaceSize, static_cast<cudaStream_t>(stream));
    };
    const cuda::Call &call = exec_.cuda_call();
    std::vector<double> ms(count, std::numeric_limits<double>::infinity());  // the least of the rounds
    std::vector<bool> viable(count);
    for (int round = 0; round < rounds; ++round) {
        for (int k = 0; k < count; ++k) {
            if (round == 0)  // one run to warm up, which also says whether it runs at all
                viable[k] = results[k].state == CUBLAS_STATUS_SUCCESS && once(k, call.stream) == CUBLAS_STATUS_SUCCESS;
            if (!viable[k]) continue;
            bool ran = true;
            auto timed_runs = [&](void *stream) {
                for (int r = 0; r < reps; ++r) ran = ran && once(k, stream) == CUBLAS_STATUS_SUCCESS;
            };
            double t = by_graph ? cuda::graph_elapsed_ms(call, timed_runs) : -1;
            if (t < 0) {  // timed directly: the default, or the graph failed
                ran = true;
                t = cuda::elapsed_ms(call, [&] { timed_runs(call.stream); });
            }
            if (ran) ms[k] = std::min(ms[k], t);
            else viable[k] = false;
        }
    }
    LtAlgo best;
    double best_ms = std::numeric_limits<double>::infinity();
    for (int k = 0; k < count; ++k) {
        if (viable[k] && ms[k] < best_ms) {
            best_ms = ms[k];
            best = {true, results[k].algo, results[k].workspaceSize};
        }
    }
    cuda::free(exec_.cuda_call(), c);
    cuda::free(exec_.cuda_call(), a);
    if (ws) cuda::free(exec_.cuda_call(), ws);
    return best;
}
}  // namespace

StepProducts::StepProducts(Exec &exec, const std::vector<int64_t> &rows, int64_t N, int64_t K, const Operand &a,
                           const Operand &b, DType c_dtype, int64_t ldc, float beta, int alignment)
    : exec_(exec), N_(N), K_(K), a_(a), b_(b), c_dtype_(c_dtype), ldc_(ldc), beta_(beta) {
    cublasLtHandle_t h = cublas_in_use(exec) ? lt_handle(exec.cuda_call().context) : nullptr;
    std::vector<int64_t> ms;
    for (int64_t m : rows)
        if (m > 0 && std::find(ms.begin(), ms.end(), m) == ms.end()) ms.push_back(m);
    std::size_t workspace = 0;
    for (int64_t M : ms) {
        Plan &p = plans_.emplace_back();
        p.M = M;
        p.K = K;
        if (!h) continue;
        const CublasLt &lt = cublaslt();
        bool ok = true;
        auto st = [&](cublasStatus_t s) { ok = ok && s == CUBLAS_STATUS_SUCCESS; };
        const bool f32 = a.dtype == DType::f32;
        st(lt.desc_create(&p.desc, f32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t ta = b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, tb = a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
        if (ok) st(lt.desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
        if (ok) st(lt.desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
        if (ok) st(lt.layout_create(&p.a, cuda_type(b.dtype), b.transposed ? K : N, b.transposed ? N : K, b.ld));
        if (ok) st(lt.layout_create(&p.b, cuda_type(a.dtype), a.transposed ? M : K, a.transposed ? K : M, a.ld));
        if (ok) st(lt.layout_create(&p.c, cuda_type(c_dtype), N, M, ldc));
        if (!ok) {
            give_up_cublaslt("creating a matmul descriptor failed");
            continue;
        }
        const std::vector<int64_t> key{reinterpret_cast<int64_t>(exec.cuda_call().context), M, N, K,
                                       static_cast<int64_t>(a.dtype), static_cast<int64_t>(b.dtype),
                                       static_cast<int64_t>(c_dtype), a.transposed, b.transposed, a.ld, b.ld, ldc,
                                       beta != 0.0f, alignment};
        std::lock_guard<std::mutex> lock(lt_algos_mutex);
        auto found = lt_algos.find(key);
        if (found == lt_algos.end())
            found = lt_algos.emplace(key, choose_algo(exec, p, a, b, c_dtype, ldc, beta, alignment)).first;
        p.algo = found->second;
        workspace = std::max(workspace, p.algo.workspace);
    }
    if (workspace > 0) workspace_.emplace(exec, static_cast<int64_t>(workspace), Scratch::Fill::none);
}

StepProducts::~StepProducts() {
    const CublasLt &lt = cublaslt();
    for (Plan &p : plans_) {
        if (p.a) lt.layout_destroy(p.a);
        if (p.b) lt.layout_destroy(p.b);
        if (p.c) lt.layout_destroy(p.c);
        if (p.desc) lt.desc_destroy(p.desc);
    }
}


void StepProducts::run(int64_t M, const void *a, void *c) {
    const Plan *p = nullptr;
    for (const Plan &q : plans_)
        if (q.M == M) p = &q;
    if (p && p->algo.found) {
        cublasLtHandle_t h = lt_handle(exec_.cuda_call().context);
        if (cuda::record({5, address(h), address(p), address(a), address(b_.data), address(c),
                          address(workspace_data()), cuda::float_bits(beta_)}))
            return;  // a time loop being fingerprinted
        const float alpha = 1.0f;
        const cublasStatus_t st =
            cublaslt().matmul(h, p->desc, &alpha, b_.data, p->a, a, p->b, &beta_, c, p->c, c, p->c, &p->algo.algo,
                              workspace_data(), p->algo.workspace, static_cast<cudaStream_t>(exec_.cuda_call().stream));
        if (st != CUBLAS_STATUS_SUCCESS)
            throw Error("blocklstm: CUDA: cublasLtMatmul failed (status " + std::to_string(st) + ")");
        ++cublas_products;
        return;
    }
    Operand a_step = a_;
    a_step.data = a;
    if (!cublas_gemm(exec_, M, N_, K_, a_step, b_, c, c_dtype_, ldc_, beta_)) cublas_lost_during_call();
}

}  // namespace detail

// ---- Public cuBLAS functions (blocklstm.h) -------------------------------------------------------

void set_cuda_gemm(CudaGemm gemm) { detail::gemm_choice() = gemm; }

void set_cuda_step(CudaStep step) { detail::step_choice() = step; }

CudaStep cuda_step() { return detail::step_choice().load(); }

CudaGemm cuda_gemm() { return detail::gemm_choice().load(); }

bool cublas_available() { return detail::cublas().ok && !detail::cublas_failed; }

uint64_t cublas_product_count() { return detail::cublas_products; }

std::string cuda_step_product_backend() {
    using namespace detail;
    if (!cublaslt().ok) return "cublasGemmEx (cuBLASLt: " + cublaslt().why_not + ")";
    if (lt_failed) {
        std::lock_guard<std::mutex> lock(lt_failure_mutex);
        return "cublasGemmEx (cuBLASLt: " + lt_failure + ")";
    }
    return "cuBLASLt (" + cublaslt().path + "), the fastest of its heuristic's first " +
           std::to_string(kLtCandidates) + " algorithms per shape";
}

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
