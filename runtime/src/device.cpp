// Where a call runs: Exec and Scratch for the CPU and for CUDA, the CUDA driver and cuBLAS
// (both loaded at run time, so the library loads and runs its CPU path on machines without
// either), Halide's CUDA hooks, and the public CUDA functions.
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>

#include "runtime/src/internal.h"

#if BLOCKLSTM_WITH_CUDA
#include <cublas_api.h>
#include <cuda.h>

#include "HalideRuntimeCuda.h"
#endif

namespace blocklstm {
namespace detail {

#if BLOCKLSTM_WITH_CUDA
namespace cuda {
namespace {

#define BLOCKLSTM_STR(x) #x
#define BLOCKLSTM_XSTR(x) BLOCKLSTM_STR(x)  // the versioned name cuda.h maps a function to

// The driver API functions the runtime calls. libcuda.so.1 is opened RTLD_GLOBAL before any
// Halide kernel runs, so Halide's CUDA runtime finds the same library by symbol lookup
// (DESIGN.md §5: it would otherwise try "libcuda.so", which driver-only machines lack).
struct Driver {
#define BLOCKLSTM_CU_FUNCTIONS(X)                                                                  \
    X(cuInit) X(cuGetErrorString) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)            \
    X(cuDevicePrimaryCtxRetain) X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuPointerGetAttribute)    \
    X(cuMemAlloc) X(cuMemFree) X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemsetD8Async)             \
    X(cuMemsetD16Async) X(cuMemsetD32Async) X(cuMemcpyAsync) X(cuStreamSynchronize)                \
    X(cuStreamGetCtx) X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuDeviceGetDefaultMemPool)            \
    X(cuMemPoolSetAttribute)
#define BLOCKLSTM_CU_FIELD(fn) decltype(&::fn) fn = nullptr;
    BLOCKLSTM_CU_FUNCTIONS(BLOCKLSTM_CU_FIELD)
#undef BLOCKLSTM_CU_FIELD
    int device_count = 0;
    std::string why_not;  // when unusable: why
};

const Driver &driver() {
    static const Driver d = [] {
        Driver d;
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (!lib) {
            d.why_not = "no CUDA driver (libcuda.so.1 not found)";
            return d;
        }
#define BLOCKLSTM_CU_LOAD(fn)                                                                     \
    d.fn = reinterpret_cast<decltype(&::fn)>(dlsym(lib, BLOCKLSTM_XSTR(fn)));                     \
    if (!d.fn && d.why_not.empty()) d.why_not = std::string("the CUDA driver lacks ") + BLOCKLSTM_XSTR(fn);
        BLOCKLSTM_CU_FUNCTIONS(BLOCKLSTM_CU_LOAD)
#undef BLOCKLSTM_CU_LOAD
        if (!d.why_not.empty()) return d;
        if (CUresult r = d.cuInit(0); r != CUDA_SUCCESS) {
            const char *name = nullptr;
            d.cuGetErrorString(r, &name);
            d.why_not = std::string("cuInit failed: ") + (name ? name : "") + " (CUresult " + std::to_string(r) + ")";
            return d;
        }
        if (d.cuDeviceGetCount(&d.device_count) != CUDA_SUCCESS) d.device_count = 0;
        if (d.device_count == 0) d.why_not = "no CUDA device";
        return d;
    }();
    return d;
}

const Driver &usable_driver() {
    const Driver &d = driver();
    if (d.device_count == 0) throw Error("blocklstm: CUDA: " + d.why_not);
    return d;
}

void check(CUresult r, const char *what) {
    if (r == CUDA_SUCCESS) return;
    const char *name = nullptr;
    if (driver().cuGetErrorString) driver().cuGetErrorString(r, &name);
    throw Error(std::string("blocklstm: CUDA: ") + what + " failed: " + (name ? name : "") +
                " (CUresult " + std::to_string(r) + ")");
}

// The primary context of each device, retained once and kept for the process: the context the
// CUDA runtime API (cudaMalloc, PyTorch, ...) uses, so caller memory and streams are valid in it.
// Its device's memory pool keeps what the workspaces (cuMemFreeAsync) give back: with the default
// release threshold of 0 the pool returns it to the driver at every synchronisation, and the next
// call maps it again.
CUcontext primary_context(int ordinal) {
    static std::mutex mutex;
    static std::map<int, CUcontext> contexts;
    std::lock_guard<std::mutex> lock(mutex);
    auto it = contexts.find(ordinal);
    if (it != contexts.end()) return it->second;
    const Driver &d = usable_driver();
    CUdevice dev;
    check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    CUcontext ctx;
    check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    CUmemoryPool pool;
    cuuint64_t keep_all = UINT64_MAX;
    if (d.cuDeviceGetDefaultMemPool(&pool, dev) == CUDA_SUCCESS) {  // best effort: speed only
        d.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all);
    }
    contexts[ordinal] = ctx;
    return ctx;
}

// The context the calling thread works in, as the CUDA runtime API sees it (cudaSetDevice,
// PyTorch's current device): the current context, else device 0's primary context.
CUcontext current_context() {
    CUcontext ctx = nullptr;
    if (driver().cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx) return ctx;
    return primary_context(0);
}

thread_local CUstream this_thread_stream = nullptr;

// Halide's CUDA runtime asks these for the context and stream of every kernel launch; the
// kernels are compiled with user_context, which is the Exec's CudaCall.
int acquire_context(void *user_context, void **ctx, bool) {
    *ctx = user_context ? static_cast<Exec::CudaCall *>(user_context)->context : nullptr;
    return *ctx ? 0 : -1;  // every blocklstm CUDA kernel runs with an Exec
}
int release_context(void *) { return 0; }
int get_stream(void *user_context, void *, void **stream) {
    *stream = user_context ? static_cast<Exec::CudaCall *>(user_context)->stream : nullptr;
    return 0;
}
void install_halide_hooks() {
    static const bool installed = [] {
        halide_set_cuda_acquire_context(acquire_context);
        halide_set_cuda_release_context(release_context);
        halide_set_cuda_get_stream(get_stream);
        // The kernels' own intermediates (the column sums' partial sums, float16 products'
        // float32 accumulators) are device allocations Halide makes in every call; its allocation
        // cache keeps them for the next call instead of cuMemFree, which synchronises the device.
        halide_reuse_device_allocations(nullptr, true);
        return true;
    }();
    (void)installed;
}

// ---- cuBLAS, loaded at run time -----------------------------------------------------------------

struct Cublas {
    decltype(&::cublasCreate_v2) create = nullptr;
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
        void *lib = nullptr;
        for (const std::string &n : names) {
            if ((lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
        }
        if (!lib) {
            c.why_not = names.back() + " not found (BLOCKLSTM_CUBLAS names another path)";
            return c;
        }
        auto load = [&](auto &fn, const char *name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
            if (!fn && c.why_not.empty()) c.why_not = std::string("the cuBLAS library lacks ") + name;
            return fn != nullptr;
        };
        c.ok = load(c.create, "cublasCreate_v2") && load(c.set_stream, "cublasSetStream_v2") &&
               load(c.set_math_mode, "cublasSetMathMode") && load(c.gemm_ex, "cublasGemmEx");
        Dl_info info{};
        c.path = c.ok && dladdr(reinterpret_cast<void *>(c.create), &info) && info.dli_fname
                     ? info.dli_fname
                     : "";
        return c;
    }();
    return c;
}

// BLOCKLSTM_CUDA_GEMM=halide in the environment starts with the Halide GEMM kernels.
std::atomic<CudaGemm> gemm_choice{[] {
    const char *env = std::getenv("BLOCKLSTM_CUDA_GEMM");
    return env && std::string(env) == "halide" ? CudaGemm::halide : CudaGemm::cublas;
}()};

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
cublasHandle_t cublas_handle(CUcontext ctx) {
    thread_local std::map<CUcontext, cublasHandle_t> handles;
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

cudaDataType cuda_type(DType t) { return t == DType::f16 ? CUDA_R_16F : CUDA_R_32F; }

}  // namespace

int device_of(const void *ptr, std::string *why) {
    const Driver &d = driver();
    if (d.device_count == 0) {
        *why = d.why_not + ": expected cpu tensors on this machine";
        return -1;
    }
    unsigned int memory_type = 0;
    int ordinal = -1;
    const auto p = reinterpret_cast<CUdeviceptr>(ptr);
    if (d.cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS ||
        d.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) != CUDA_SUCCESS ||
        (memory_type != CU_MEMORYTYPE_DEVICE && memory_type != CU_MEMORYTYPE_UNIFIED)) {
        *why = "its data pointer is not CUDA device memory: expected memory from cudaMalloc, "
               "cuMemAlloc or cudaMallocManaged";
        return -1;
    }
    return ordinal;
}

const halide_device_interface_t *halide_interface() { return halide_cuda_device_interface(); }

std::shared_ptr<std::byte[]> allocate_zeroed(std::size_t bytes) {
    const Driver &d = usable_driver();
    CUcontext ctx = current_context();  // as cudaMalloc: the calling thread's device
    check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
    CUdeviceptr p = 0;
    CUresult r = d.cuMemAlloc(&p, bytes > 0 ? bytes : 1);
    if (r == CUDA_SUCCESS) r = d.cuMemsetD8Async(p, 0, bytes, nullptr);
    if (r == CUDA_SUCCESS) r = d.cuStreamSynchronize(nullptr);
    CUcontext popped;
    d.cuCtxPopCurrent(&popped);
    check(r, "allocating a device tensor");
    return std::shared_ptr<std::byte[]>(reinterpret_cast<std::byte *>(p), [ctx](std::byte *q) {
        const Driver &dd = driver();
        CUcontext old;
        if (dd.cuCtxPushCurrent(ctx) != CUDA_SUCCESS) return;
        dd.cuMemFree(reinterpret_cast<CUdeviceptr>(q));
        dd.cuCtxPopCurrent(&old);
    });
}

}  // namespace cuda
#else
namespace cuda {
int device_of(const void *, std::string *why) {
    *why = "this build has no CUDA kernels: expected cpu tensors (or a build configured with "
           "-DBLOCKLSTM_CUDA=ON)";
    return -1;
}
const halide_device_interface_t *halide_interface() {
    throw Error("blocklstm: this build has no CUDA kernels (configure with -DBLOCKLSTM_CUDA=ON)");
}
std::shared_ptr<std::byte[]> allocate_zeroed(std::size_t) {
    throw Error("Tensor: this build has no CUDA support (configure with -DBLOCKLSTM_CUDA=ON)");
}
}  // namespace cuda
#endif  // BLOCKLSTM_WITH_CUDA

// ---- Exec and Scratch -----------------------------------------------------------------------------

Exec::Exec(Device device, const void *any_tensor) : device_(device) {
    if (device == Device::cpu) {
        cpu_target_ = current_cpu_target();
        return;
    }
#if BLOCKLSTM_WITH_CUDA
    std::string why;
    const int ordinal = cuda::device_of(any_tensor, &why);
    if (ordinal < 0) throw Error("blocklstm: CUDA call: " + why);
    cuda::install_halide_hooks();
    cuda_.context = cuda::primary_context(ordinal);
    cuda_.stream = cuda::this_thread_stream;
    cuda::check(cuda::driver().cuCtxPushCurrent(static_cast<CUcontext>(cuda_.context)),
                "cuCtxPushCurrent");
#else
    (void)any_tensor;
    throw Error("blocklstm: this build has no CUDA kernels (configure with -DBLOCKLSTM_CUDA=ON)");
#endif
}

Exec::~Exec() {
#if BLOCKLSTM_WITH_CUDA
    if (device_ == Device::cuda) {
        CUcontext popped;
        cuda::driver().cuCtxPopCurrent(&popped);
    }
#endif
}

void Exec::zero_bytes(void *data, int64_t bytes) const {
    if (bytes <= 0) return;
    if (device_ == Device::cpu) {
        std::memset(data, 0, static_cast<std::size_t>(bytes));
        return;
    }
#if BLOCKLSTM_WITH_CUDA
    cuda::check(cuda::driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(data), 0,
                                               static_cast<std::size_t>(bytes),
                                               static_cast<CUstream>(cuda_.stream)),
                "cuMemsetD8Async");
#endif
}

void Exec::copy_bytes(void *dst, const void *src, int64_t bytes) const {
    if (bytes <= 0) return;
    if (device_ == Device::cpu) {
        std::memcpy(dst, src, static_cast<std::size_t>(bytes));
        return;
    }
#if BLOCKLSTM_WITH_CUDA
    cuda::check(cuda::driver().cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst),
                                             reinterpret_cast<CUdeviceptr>(src),
                                             static_cast<std::size_t>(bytes),
                                             static_cast<CUstream>(cuda_.stream)),
                "cuMemcpyAsync");
#endif
}

void Exec::fill_ones(void *data, DType dtype, int64_t count) const {
    if (count <= 0) return;
    const uint16_t half_one = float_to_half(1.0f);
    const float one = 1.0f;
    if (device_ == Device::cpu) {
        for (int64_t k = 0; k < count; ++k) {
            if (dtype == DType::f16) std::memcpy(static_cast<uint16_t *>(data) + k, &half_one, 2);
            else std::memcpy(static_cast<float *>(data) + k, &one, 4);
        }
        return;
    }
#if BLOCKLSTM_WITH_CUDA
    const auto p = reinterpret_cast<CUdeviceptr>(data);
    const auto stream = static_cast<CUstream>(cuda_.stream);
    const auto n = static_cast<std::size_t>(count);
    if (dtype == DType::f16) {
        cuda::check(cuda::driver().cuMemsetD16Async(p, half_one, n, stream), "cuMemsetD16Async");
    } else {
        uint32_t bits;
        std::memcpy(&bits, &one, 4);
        cuda::check(cuda::driver().cuMemsetD32Async(p, bits, n, stream), "cuMemsetD32Async");
    }
#endif
}

Scratch::Scratch(Exec &exec, int64_t bytes, Fill fill) : exec_(&exec) {
    const auto n = static_cast<std::size_t>(bytes > 0 ? bytes : 0);
    if (exec.device() == Device::cpu) {
        data_ = host_allocate(n);
        if (!data_) throw Error("blocklstm: out of host memory for a workspace of " + std::to_string(n) + " bytes");
        if (fill == Fill::zeros) std::memset(data_, 0, n);
        return;
    }
#if BLOCKLSTM_WITH_CUDA
    CUdeviceptr p = 0;
    cuda::check(cuda::driver().cuMemAllocAsync(&p, n > 0 ? n : 1, static_cast<CUstream>(exec.stream())),
                "cuMemAllocAsync (workspace)");
    data_ = reinterpret_cast<void *>(p);
    if (fill == Fill::zeros) exec.zero_bytes(data_, bytes);
#endif
}

Scratch::Scratch(Scratch &&other) noexcept : exec_(other.exec_), data_(other.data_) {
    other.data_ = nullptr;
}

Scratch::~Scratch() {
    if (data_ && exec_->device() == Device::cpu) host_free(data_);
#if BLOCKLSTM_WITH_CUDA
    if (data_ && exec_->device() == Device::cuda) {
        cuda::driver().cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(data_),
                                      static_cast<CUstream>(exec_->stream()));
    }
#endif
}

// ---- cuBLAS products ----------------------------------------------------------------------------

bool cublas_in_use(const Exec &exec) {
#if BLOCKLSTM_WITH_CUDA
    if (exec.device() != Device::cuda || cuda::gemm_choice.load() != CudaGemm::cublas) return false;
    if (!cuda::cublas().ok) {
        cuda::give_up_cublas(cuda::cublas().why_not);
        return false;
    }
    return !cuda::cublas_failed;
#else
    (void)exec;
    return false;
#endif
}

bool cublas_gemm(Exec &exec, int64_t M, int64_t N, int64_t K, const Operand &a, const Operand &b,
                 void *c, DType c_dtype, int64_t ldc, float beta) {
#if BLOCKLSTM_WITH_CUDA
    if (!cublas_in_use(exec)) return false;
    // cublasGemmEx takes a and b of one type; float32 without TF32 needs float32 throughout.
    if (a.dtype != b.dtype || (a.dtype == DType::f32 && c_dtype != DType::f32)) return false;
    const cuda::Cublas &cb = cuda::cublas();
    cublasHandle_t h = cuda::cublas_handle(static_cast<CUcontext>(exec.context()));
    if (!h) return false;  // cublasCreate failed: the Halide kernels run it
    if (cb.set_stream(h, static_cast<cudaStream_t>(exec.stream())) != CUBLAS_STATUS_SUCCESS) {
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
        cuda::cuda_type(b.dtype), static_cast<int>(b.ld), a.data, cuda::cuda_type(a.dtype),
        static_cast<int>(a.ld), &beta, c, cuda::cuda_type(c_dtype), static_cast<int>(ldc), compute,
        CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        throw Error("blocklstm: CUDA: cublasGemmEx failed (status " + std::to_string(st) + ")");
    }
    ++cuda::cublas_products;
    return true;
#else
    (void)exec, (void)M, (void)N, (void)K, (void)a, (void)b, (void)c, (void)c_dtype, (void)ldc,
        (void)beta;
    return false;
#endif
}

}  // namespace detail

// ---- Public CUDA functions -------------------------------------------------------------------------

bool cuda_built() { return BLOCKLSTM_WITH_CUDA; }

int cuda_device_count() {
#if BLOCKLSTM_WITH_CUDA
    return detail::cuda::driver().device_count;
#else
    return 0;
#endif
}

std::string cuda_device_name(int device) {
#if BLOCKLSTM_WITH_CUDA
    const auto &d = detail::cuda::usable_driver();
    CUdevice dev;
    detail::cuda::check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
    char name[256] = {};
    detail::cuda::check(d.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
    return name;
#else
    (void)device;
    throw Error("blocklstm: this build has no CUDA kernels");
#endif
}

void set_cuda_stream(CudaStream stream) {
#if BLOCKLSTM_WITH_CUDA
    detail::cuda::this_thread_stream = reinterpret_cast<CUstream>(stream);
#else
    (void)stream;
#endif
}

CudaStream cuda_stream() {
#if BLOCKLSTM_WITH_CUDA
    return reinterpret_cast<CudaStream>(detail::cuda::this_thread_stream);
#else
    return nullptr;
#endif
}

void cuda_synchronize() {
#if BLOCKLSTM_WITH_CUDA
    const auto &d = detail::cuda::usable_driver();
    // The context of this thread's stream; the legacy default stream is the current context's.
    CUstream stream = detail::cuda::this_thread_stream;
    CUcontext ctx = nullptr;
    if (stream) detail::cuda::check(d.cuStreamGetCtx(stream, &ctx), "cuStreamGetCtx");
    else ctx = detail::cuda::current_context();
    detail::cuda::check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
    const CUresult r = d.cuStreamSynchronize(stream);
    CUcontext popped;
    d.cuCtxPopCurrent(&popped);
    detail::cuda::check(r, "cuStreamSynchronize");
#endif
}

void set_cuda_gemm(CudaGemm gemm) {
#if BLOCKLSTM_WITH_CUDA
    detail::cuda::gemm_choice = gemm;
#else
    (void)gemm;
#endif
}

CudaGemm cuda_gemm() {
#if BLOCKLSTM_WITH_CUDA
    return detail::cuda::gemm_choice.load();
#else
    return CudaGemm::halide;
#endif
}

bool cublas_available() {
#if BLOCKLSTM_WITH_CUDA
    return detail::cuda::cublas().ok && !detail::cuda::cublas_failed;
#else
    return false;
#endif
}

std::string cuda_gemm_backend() {
#if BLOCKLSTM_WITH_CUDA
    using namespace detail::cuda;
    if (gemm_choice.load() == CudaGemm::halide) return "Halide GEMM kernels (chosen: set_cuda_gemm or BLOCKLSTM_CUDA_GEMM=halide)";
    if (!cublas().ok) return "Halide GEMM kernels (cuBLAS: " + cublas().why_not + ")";
    if (cublas_failed) {
        std::lock_guard<std::mutex> lock(cublas_failure_mutex);
        return "Halide GEMM kernels (cuBLAS: " + cublas_failure + ")";
    }
    return "cuBLAS (" + cublas().path + ")";
#else
    return "none (this build has no CUDA kernels)";
#endif
}

uint64_t cublas_product_count() {
#if BLOCKLSTM_WITH_CUDA
    return detail::cuda::cublas_products;
#else
    return 0;
#endif
}

std::string cuda_unavailable_reason() {
#if BLOCKLSTM_WITH_CUDA
    return detail::cuda::driver().device_count > 0 ? "" : detail::cuda::driver().why_not;
#else
    return "this build has no CUDA kernels (configure with -DBLOCKLSTM_CUDA=ON)";
#endif
}

void copy(const TensorView &src, const TensorView &dst) {
    if (src.dtype != dst.dtype || src.num_elements() != dst.num_elements()) {
        throw Error(std::string("copy: argument 'dst' has ") + to_string(dst.dtype) + " " +
                    detail::shape_string(dst.shape) + ": expected " + to_string(src.dtype) +
                    " with the " + std::to_string(src.num_elements()) + " elements of 'src'");
    }
    if (src.num_elements() == 0) return;
    if (src.device == Device::cpu && dst.device == Device::cpu) {
        std::memcpy(dst.data, src.data, src.num_bytes());
        return;
    }
#if BLOCKLSTM_WITH_CUDA
    // cuMemcpyAsync with unified addressing takes either side on host or device.
    const void *on_device = src.device == Device::cuda ? src.data : dst.data;
    detail::Exec exec(Device::cuda, on_device);
    exec.copy_bytes(dst.data, src.data, static_cast<int64_t>(src.num_bytes()));
    detail::cuda::check(detail::cuda::driver().cuStreamSynchronize(
                            static_cast<CUstream>(exec.stream())),
                        "cuStreamSynchronize");
#else
    throw Error("copy: this build has no CUDA support");
#endif
}

}  // namespace blocklstm
