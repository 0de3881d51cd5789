// The CUDA driver API, opened at run time (libcuda.so.1), and the device operations of
// runtime/src/cuda_device.h on it. The library has no load-time dependency on a driver.
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
    X(cuMemPoolSetAttribute) X(cuMemPoolTrimTo) X(cuStreamCreate) X(cuStreamDestroy)                \
    X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) X(cuGraphExecUpdate) \
    X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuEventCreate) X(cuEventRecord)       \
    X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventDestroy)
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
        // The register budget of every kernel, which Halide's runtime passes to the JIT as
        // CU_JIT_MAX_REGISTERS when it loads a module: 64. Only the Halide GEMM tiles want more
        // (72-80 registers, spilling 72-96 bytes a thread at 64: `ptxas -arch=sm_90 -v`; the
        // step and gate kernels use at most 48), and 128 made no call faster on an H200
        // (docs/cuda.md: Registers). Set before the first module loads; a value already in the
        // environment wins.
        setenv("HL_CUDA_JIT_MAX_REGISTERS", "64", /*overwrite=*/0);
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

namespace {
thread_local std::vector<uint64_t> *recording = nullptr;  // run_loop's fingerprint in progress
}  // namespace

std::vector<uint64_t> *fingerprint() { return recording; }

void zero(const Call &call, void *data, std::size_t bytes) {
    if (record({1, address(data), bytes})) return;
    check(driver().cuMemsetD8Async(device_ptr(data), 0, bytes, stream_of(call)), "cuMemsetD8Async");
}

void copy(const Call &call, void *dst, const void *src, std::size_t bytes) {
    // With unified addressing either side may be host or device memory.
    if (record({2, address(dst), address(src), bytes})) return;
    check(driver().cuMemcpyAsync(device_ptr(dst), device_ptr(src), bytes, stream_of(call)),
          "cuMemcpyAsync");
}

void fill_ones(const Call &call, void *data, DType dtype, std::size_t count) {
    if (record({3, address(data), static_cast<uint64_t>(dtype), count})) return;
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

double elapsed_ms(const Call &call, const std::function<void()> &work) {
    const Driver &d = driver();
    CUevent start = nullptr, stop = nullptr;
    check(d.cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
    struct Destroy {
        CUevent &a, &b;
        ~Destroy() {
            if (a) driver().cuEventDestroy(a);
            if (b) driver().cuEventDestroy(b);
        }
    } destroy{start, stop};
    check(d.cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
    check(d.cuEventRecord(start, stream_of(call)), "cuEventRecord");
    work();
    check(d.cuEventRecord(stop, stream_of(call)), "cuEventRecord");
    check(d.cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    check(d.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    return ms;
}

// ---- CUDA graphs of the time loops ------------------------------------------------------------

namespace {

// On unless BLOCKLSTM_CUDA_GRAPHS=0 in the environment. A function's static, so that a
// set_cuda_graphs from another library's static initialiser is not overwritten.
std::atomic<bool> &graphs_choice() {
    static std::atomic<bool> on{[] {
        const char *env = std::getenv("BLOCKLSTM_CUDA_GRAPHS");
        return !(env && std::string(env) == "0");
    }()};
    return on;
}

std::atomic<uint64_t> graph_direct{0}, graph_captures{0}, graph_updates{0}, graph_launches{0}, graph_failures{0};

// One cached graph per (thread, context, shape): the graph and the fingerprint it was captured
// with. Per thread, as the cuBLAS handles whose workspaces the captured products use.
struct LoopGraph {
    CUgraphExec exec = nullptr;
    std::vector<uint64_t> fingerprint;
    bool direct_only = false;  // its capture failed once: this shape runs direct launches
};
struct ThreadGraphs {
    std::map<std::vector<int64_t>, LoopGraph> graphs;  // by shape, the context first
    std::map<void *, CUstream> capture_streams;        // by context
};
// Not destroyed at the thread's exit, when the driver may be going away (as the cuBLAS handles):
// cuda_release_memory gives them back.
thread_local ThreadGraphs *thread_graphs = nullptr;
constexpr std::size_t kGraphsPerThread = 32;  // shapes; beyond, the cache starts again

ThreadGraphs &graphs() {
    if (!thread_graphs) thread_graphs = new ThreadGraphs;
    return *thread_graphs;
}

void destroy_graphs(ThreadGraphs &g) {
    const Driver &d = driver();
    for (auto &[shape, graph] : g.graphs)
        if (graph.exec) d.cuGraphExecDestroy(graph.exec);
    g.graphs.clear();
}

void capture_failed(LoopGraph &graph, const std::string &why) {
    graph.direct_only = true;
    ++graph_failures;
    static std::once_flag once;
    std::call_once(once, [&] {
        std::fprintf(stderr, "blocklstm: warning: a CUDA graph of a time loop could not be made (%s); that loop "
                             "runs direct launches\n", why.c_str());
    });
}

std::string error_name(CUresult r) {
    const char *name = nullptr;
    if (driver().cuGetErrorString) driver().cuGetErrorString(r, &name);
    return (name ? std::string(name) : "") + " (CUresult " + std::to_string(r) + ")";
}

// This thread's stream for capturing graphs in `context` (the caller's may be the legacy default
// stream, which cannot be captured).
CUstream capture_stream(void *context) {
    CUstream &capture = graphs().capture_streams[context];
    if (!capture) check(driver().cuStreamCreate(&capture, CU_STREAM_NON_BLOCKING), "cuStreamCreate (graph capture)");
    return capture;
}

}  // namespace

double graph_elapsed_ms(const Call &call, const std::function<void(void *stream)> &launch) {
    const Driver &d = driver();
    const CUstream capture = capture_stream(call.context);
    if (d.cuStreamBeginCapture(capture, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) return -1;
    bool launched = true;
    try {
        launch(capture);
    } catch (const std::exception &) {
        launched = false;
    }
    CUgraph captured = nullptr;
    const CUresult ended = d.cuStreamEndCapture(capture, &captured);
    CUgraphExec exec = nullptr;
    const bool made = launched && ended == CUDA_SUCCESS && captured &&
                      d.cuGraphInstantiateWithFlags(&exec, captured, 0) == CUDA_SUCCESS;
    if (captured) d.cuGraphDestroy(captured);
    if (!made) return -1;
    struct Destroy {
        CUgraphExec exec;
        ~Destroy() { driver().cuGraphExecDestroy(exec); }  // after elapsed_ms has waited for both launches
    } destroy{exec};
    check(d.cuGraphLaunch(exec, stream_of(call)), "cuGraphLaunch");
    return elapsed_ms(call, [&] { check(d.cuGraphLaunch(exec, stream_of(call)), "cuGraphLaunch"); });
}

void run_loop(Call &call, const std::vector<int64_t> &shape, const std::function<void()> &loop) {
    if (!graphs_choice().load()) return loop();
    const Driver &d = driver();
    ThreadGraphs &tg = graphs();
    std::vector<int64_t> key{reinterpret_cast<int64_t>(call.context)};
    key.insert(key.end(), shape.begin(), shape.end());
    auto found = tg.graphs.find(key);
    if (found == tg.graphs.end()) {  // the shape's first call: direct (loads kernels, makes handles)
        if (tg.graphs.size() >= kGraphsPerThread) destroy_graphs(tg);
        tg.graphs[key];
        ++graph_direct;
        return loop();
    }
    LoopGraph &graph = found->second;
    if (graph.direct_only) {
        ++graph_direct;
        return loop();
    }
    std::vector<uint64_t> fp;
    {
        recording = &fp;
        struct Stop {
            ~Stop() { recording = nullptr; }
        } stop;
        loop();  // records every operation's arguments, runs none
    }
    if (!graph.exec || graph.fingerprint != fp) {
        // Captured on a private stream, the graph then runs on the caller's, in its order.
        const CUstream capture = capture_stream(call.context);
        void *callers = call.stream;
        CUgraph captured = nullptr;
        check(d.cuStreamBeginCapture(capture, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
        call.stream = capture;
        std::string failure;
        try {
            loop();
        } catch (const std::exception &e) {
            failure = e.what();
        }
        call.stream = callers;
        const CUresult ended = d.cuStreamEndCapture(capture, &captured);
        if (failure.empty() && ended != CUDA_SUCCESS) failure = "cuStreamEndCapture: " + error_name(ended);
        if (!failure.empty()) {
            if (captured) d.cuGraphDestroy(captured);
            capture_failed(graph, failure);
            ++graph_direct;
            return loop();  // nothing captured ran: the loop runs now
        }
        ++graph_captures;
        bool updated = false;
        if (graph.exec) {
            CUgraphExecUpdateResultInfo info{};
            updated = d.cuGraphExecUpdate(graph.exec, captured, &info) == CUDA_SUCCESS;
            if (updated) ++graph_updates;
            else d.cuGraphExecDestroy(graph.exec), graph.exec = nullptr;  // another topology: instantiate
        }
        if (!updated) {
            const CUresult r = d.cuGraphInstantiateWithFlags(&graph.exec, captured, 0);
            if (r != CUDA_SUCCESS) {
                graph.exec = nullptr;
                d.cuGraphDestroy(captured);
                capture_failed(graph, "cuGraphInstantiate: " + error_name(r));
                ++graph_direct;
                return loop();
            }
        }
        d.cuGraphDestroy(captured);
        graph.fingerprint = std::move(fp);
    }
    check(d.cuGraphLaunch(graph.exec, stream_of(call)), "cuGraphLaunch");
    ++graph_launches;
}

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
    detail::release_cublaslt_handles();
    if (thread_graphs) {  // this thread's graphs (their products used the handles' workspaces)
        destroy_graphs(*thread_graphs);
        for (auto &[ctx, stream] : thread_graphs->capture_streams)
            in_context(ctx, [s = stream] { driver().cuStreamDestroy(s); });
        thread_graphs->capture_streams.clear();
    }
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

void set_cuda_graphs(bool on) { detail::cuda::graphs_choice() = on; }

bool cuda_graphs() { return detail::cuda::graphs_choice().load(); }

CudaGraphStats cuda_graph_stats() {
    using namespace detail::cuda;
    return {graph_direct.load(), graph_captures.load(), graph_updates.load(), graph_launches.load(),
            graph_failures.load()};
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
