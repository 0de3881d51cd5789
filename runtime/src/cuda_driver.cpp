// The CUDA driver API, opened at run time (libcuda.so.1), and the device operations of
// runtime/src/cuda_device.h on it. The library has no load-time dependency on a driver.
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include <cuda.h>

#include "HalideRuntimeCuda.h"
#include "runtime/src/cuda_device.h"

#define BLOCKLSTM_STR(x) #x
#define BLOCKLSTM_XSTR(x) BLOCKLSTM_STR(x)  // the versioned name cuda.h maps a function to

namespace blocklstm {
namespace detail::cuda {
namespace {

// The driver API functions the runtime calls. libcuda.so.1 is opened RTLD_GLOBAL before any
// Halide kernel runs, so Halide's CUDA runtime finds the same library by symbol lookup
// (it would otherwise try "libcuda.so", which driver-only machines lack).
struct Driver {
#define BLOCKLSTM_CU_FUNCTIONS(X)                                                                  \
    X(cuInit) X(cuGetErrorString) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)            \
    X(cuDevicePrimaryCtxRetain) X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuPointerGetAttribute)    \
    X(cuMemAlloc) X(cuMemFree) X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemsetD8Async)             \
    X(cuMemsetD16Async) X(cuMemsetD32Async) X(cuMemcpyAsync) X(cuStreamSynchronize)                \
    X(cuStreamGetCtx) X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuDeviceGetDefaultMemPool)            \
    X(cuMemPoolSetAttribute) X(cuMemPoolTrimTo)
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
// kernels are compiled with user_context, which is the op call's cuda::Call.
int acquire_context(void *user_context, void **ctx, bool) {
    *ctx = user_context ? static_cast<Call *>(user_context)->context : nullptr;
    return *ctx ? 0 : -1;  // every blocklstm CUDA kernel runs with an Exec
}
int release_context(void *) { return 0; }
int get_stream(void *user_context, void *, void **stream) {
    *stream = user_context ? static_cast<Call *>(user_context)->stream : nullptr;
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
    auto query = [&] {
        CUresult r = d.cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
        return r == CUDA_SUCCESS ? d.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) : r;
    };
    CUresult r = query();
    // A driver may answer CUDA_ERROR_INVALID_CONTEXT while no context is current (a thread's first
    // call): then once more inside device 0's primary context (any context serves under unified
    // addressing; only then is one made, so a process on another GPU is not given one on GPU 0).
    CUcontext current = nullptr;
    if (r == CUDA_ERROR_INVALID_CONTEXT && d.cuCtxGetCurrent(&current) == CUDA_SUCCESS && !current &&
        d.cuCtxPushCurrent(primary_context(0)) == CUDA_SUCCESS) {
        r = query();
        d.cuCtxPopCurrent(&current);
    }
    if (r == CUDA_SUCCESS && (memory_type == CU_MEMORYTYPE_DEVICE || memory_type == CU_MEMORYTYPE_UNIFIED))
        return ordinal;
    // CUDA_ERROR_INVALID_VALUE: memory the driver does not know (a host pointer); any other error
    // (a context lost to an earlier fault) is named as it is.
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_VALUE) {
        const char *name = nullptr;
        if (d.cuGetErrorString) d.cuGetErrorString(r, &name);
        *why = std::string("the driver cannot say where its data pointer is: cuPointerGetAttribute failed: ") +
               (name ? name : "") + " (CUresult " + std::to_string(r) + ")";
        return -1;
    }
    *why = "its data pointer is not CUDA device memory: expected memory from cudaMalloc, "
           "cuMemAlloc or cudaMallocManaged";
    return -1;
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


Call enter(const void *any_tensor) {
    std::string why;
    const int ordinal = device_of(any_tensor, &why);
    if (ordinal < 0) throw Error("blocklstm: CUDA call: " + why);
    install_halide_hooks();
    Call call{primary_context(ordinal), this_thread_stream};
    check(driver().cuCtxPushCurrent(static_cast<CUcontext>(call.context)), "cuCtxPushCurrent");
    return call;
}

void leave(const Call &) {
    CUcontext popped;
    driver().cuCtxPopCurrent(&popped);
}

namespace {
CUdeviceptr device_ptr(const void *p) { return reinterpret_cast<CUdeviceptr>(p); }
CUstream stream_of(const Call &call) { return static_cast<CUstream>(call.stream); }
}  // namespace

void zero(const Call &call, void *data, std::size_t bytes) {
    check(driver().cuMemsetD8Async(device_ptr(data), 0, bytes, stream_of(call)), "cuMemsetD8Async");
}

void copy(const Call &call, void *dst, const void *src, std::size_t bytes) {
    // With unified addressing either side may be host or device memory.
    check(driver().cuMemcpyAsync(device_ptr(dst), device_ptr(src), bytes, stream_of(call)),
          "cuMemcpyAsync");
}

void fill_ones(const Call &call, void *data, DType dtype, std::size_t count) {
    if (size_of(dtype) == 2) {
        const uint16_t one = dtype == DType::bf16 ? float_to_bfloat16(1.0f) : float_to_half(1.0f);
        check(driver().cuMemsetD16Async(device_ptr(data), one, count, stream_of(call)), "cuMemsetD16Async");
        return;
    }
    const float one = 1.0f;
    uint32_t bits;
    std::memcpy(&bits, &one, 4);
    check(driver().cuMemsetD32Async(device_ptr(data), bits, count, stream_of(call)), "cuMemsetD32Async");
}

void *allocate(const Call &call, std::size_t bytes) {
    CUdeviceptr p = 0;
    check(driver().cuMemAllocAsync(&p, bytes > 0 ? bytes : 1, stream_of(call)),
          "cuMemAllocAsync (workspace)");
    return reinterpret_cast<void *>(p);
}

void free(const Call &call, void *data) { driver().cuMemFreeAsync(device_ptr(data), stream_of(call)); }

void synchronize(const Call &call) { check(driver().cuStreamSynchronize(stream_of(call)), "cuStreamSynchronize"); }

}  // namespace detail::cuda

// ---- Public CUDA functions (blocklstm.h) ---------------------------------------------------------

bool cuda_built() { return true; }

int cuda_device_count() { return detail::cuda::driver().device_count; }

std::string cuda_unavailable_reason() {
    const auto &d = detail::cuda::driver();
    return d.device_count > 0 ? "" : d.why_not;
}

std::string cuda_device_name(int device) {
    using namespace detail::cuda;
    const auto &d = usable_driver();
    CUdevice dev;
    check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
    char name[256] = {};
    check(d.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
    return name;
}

namespace detail::cuda {
void in_context(void *context, const std::function<void()> &fn) {
    const auto &d = usable_driver();
    check(d.cuCtxPushCurrent(static_cast<CUcontext>(context)), "cuCtxPushCurrent");
    struct Pop {
        ~Pop() {
            CUcontext popped;
            driver().cuCtxPopCurrent(&popped);
        }
    } pop;
    fn();
}
}  // namespace detail::cuda

void cuda_release_memory() {
    using namespace detail::cuda;
    if (driver().device_count == 0) return;  // no device: nothing was allocated
    detail::release_cublas_handles();
    in_context(current_context(), [] {
        // Halide's allocation cache (install_halide_hooks) holds blocks of every device; cuMemFree,
        // which synchronises the device, takes any context under unified addressing.
        halide_cuda_release_unused_device_allocations(nullptr);
    });
    // The workspaces' pools (primary_context keeps all they are given back): trimmed to nothing.
    const auto &d = driver();
    for (int ordinal = 0; ordinal < d.device_count; ++ordinal) {
        CUdevice dev;
        CUmemoryPool pool;
        if (d.cuDeviceGet(&dev, ordinal) == CUDA_SUCCESS && d.cuDeviceGetDefaultMemPool(&pool, dev) == CUDA_SUCCESS)
            d.cuMemPoolTrimTo(pool, 0);
    }
}

void set_cuda_stream(CudaStream stream) {
    detail::cuda::this_thread_stream = reinterpret_cast<CUstream>(stream);
}

CudaStream cuda_stream() { return reinterpret_cast<CudaStream>(detail::cuda::this_thread_stream); }

void cuda_synchronize() {
    using namespace detail::cuda;
    const auto &d = usable_driver();
    // The context of this thread's stream; the legacy default stream is the current context's.
    CUstream stream = this_thread_stream;
    CUcontext ctx = nullptr;
    if (stream) check(d.cuStreamGetCtx(stream, &ctx), "cuStreamGetCtx");
    else ctx = current_context();
    check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
    const CUresult r = d.cuStreamSynchronize(stream);
    CUcontext popped;
    d.cuCtxPopCurrent(&popped);
    check(r, "cuStreamSynchronize");
}

}  // namespace blocklstm
