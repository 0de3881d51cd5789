// The CUDA device as the rest of the runtime sees it: one op call's context and stream, and the
// memory operations on them. runtime/src/cuda_driver.cpp implements it on the driver API (libcuda,
// opened at run time); runtime/src/cuda_absent.cpp in a build without CUDA, where every use is an
// error that says how to build with it. Nothing else in the runtime includes a CUDA header.
#pragma once

#include <blocklstm/blocklstm.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "HalideRuntime.h"

namespace blocklstm::detail::cuda {

// The context and stream of one op call. It is also the Halide kernels' user_context: the hooks
// cuda_driver.cpp installs in Halide's CUDA runtime read both from it at every launch.
struct Call {
    void *context = nullptr;  // CUcontext
    void *stream = nullptr;   // CUstream
};

// The device ordinal holding `ptr`, or -1 with `why` set when it is not CUDA device memory.
int device_of(const void *ptr, std::string *why);

// Makes the primary context of the device holding `any_tensor` current on this thread and
// returns it with this thread's stream (set_cuda_stream); leave() restores the previous context.
Call enter(const void *any_tensor);
void leave(const Call &call);

// Asynchronous on the call's stream.
void zero(const Call &call, void *data, std::size_t bytes);
void copy(const Call &call, void *dst, const void *src, std::size_t bytes);
void fill_ones(const Call &call, void *data, DType dtype, std::size_t count);
// Stream-ordered workspace (cuMemAllocAsync / cuMemFreeAsync): reused from the device's pool,
// no synchronisation.
void *allocate(const Call &call, std::size_t bytes);
void free(const Call &call, void *data);
void synchronize(const Call &call);
// The GPU time of the work `work` enqueues on the call's stream (CUDA events), waiting for it.
double elapsed_ms(const Call &call, const std::function<void()> &work);
// The GPU time of the operations `launch` enqueues on the stream it is given, run back to back:
// captured into a CUDA graph on a private stream, the graph launched on the call's stream once
// to warm up, then timed, so the host's time to launch them does not count. Negative when the
// capture or the graph fails (nothing captured has run then).
double graph_elapsed_ms(const Call &call, const std::function<void(void *stream)> &launch);

// Runs fn with `context` (a CUcontext) current on this thread.
void in_context(void *context, const std::function<void()> &fn);

// ---- CUDA graphs of the time loops (docs/cuda.md) ----------------------------------------------

// Runs `loop`, which enqueues a call's time loop on call.stream, as a CUDA graph where
// set_cuda_graphs has them on: the first call of a shape (`shape`: what the loop's topology
// depends on) runs directly (it loads the kernels, makes the cuBLAS handle); a later one whose
// fingerprint (every argument of every operation the loop enqueues, recorded by running `loop`
// with the operations off) equals the cached graph's launches that graph on call.stream; any other
// captures `loop` on a private stream and updates the cached graph (cuGraphExecUpdate) or
// instantiates a new one. Anything that fails in capture runs `loop` directly instead, and that
// shape stays direct. Elsewhere (graphs off): `loop` directly.
void run_loop(Call &call, const std::vector<int64_t> &shape, const std::function<void()> &loop);
// While run_loop fingerprints a loop: the list its operations append their arguments to instead
// of running (kernels: kernel_table.cpp; cuBLAS products: cublas.cpp; memsets and copies here).
// nullptr when operations run.
std::vector<uint64_t> *fingerprint();
// Appends an operation's `values` to the fingerprint in progress; false, appending nothing, when
// operations run.
inline bool record(std::initializer_list<uint64_t> values) {
    std::vector<uint64_t> *fp = fingerprint();
    if (fp) fp->insert(fp->end(), values);
    return fp != nullptr;
}
inline uint64_t address(const void *p) { return reinterpret_cast<uint64_t>(p); }
inline uint64_t float_bits(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return bits;
}

// Halide's CUDA device interface.
const halide_device_interface_t *halide_interface();
// Zeroed memory on the calling thread's current device, freed (cuMemFree) with the last reference.
std::shared_ptr<std::byte[]> allocate_zeroed(std::size_t bytes);

}  // namespace blocklstm::detail::cuda

namespace blocklstm::detail {
// cublasDestroy of the calling thread's cuBLAS handles (runtime/src/cublas.cpp), each in its
// context: cuda_release_memory.
void release_cublas_handles();
void release_cublaslt_handles();
}  // namespace blocklstm::detail
