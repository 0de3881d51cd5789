// Where an op call runs: its device (Exec), its workspaces (Scratch), its CPU target.
#pragma once

#include <blocklstm/blocklstm.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/src/cuda_device.h"

namespace blocklstm::detail {

// The device of one op call and what it needs there. CPU: nothing. CUDA: the primary context of
// the device that holds the call's tensors is made current for the Exec's life, kernels and copies
// go on this thread's stream (set_cuda_stream), and the Halide kernels receive both through their
// user_context. Declare an Exec before any Scratch of the call, so the scratch is freed first.
class Exec {
public:
    // `any_tensor`: a pointer into the call's memory (CUDA: it selects the device).
    Exec(Device device, const void *any_tensor);
    ~Exec();
    Exec(const Exec &) = delete;
    Exec &operator=(const Exec &) = delete;

    Device device() const { return device_; }
    // CPU: the CPU target every kernel of this call runs as (cpu_target.cpp), read once per call.
    int cpu_target() const { return cpu_target_; }
    // CPU: the rest of the call runs as `target` (the index of a compiled target this CPU runs).
    void run_as_cpu_target(int target) { cpu_target_ = target; }
    // CUDA: the call's context and stream; a pointer to them is the kernels' user_context.
    const cuda::Call &cuda_call() const { return cuda_; }
    void *user_context() { return &cuda_; }

    // Memory on the call's device: zeroing and copying (CUDA: asynchronous, on the stream).
    void zero_bytes(void *data, int64_t bytes) const;
    void copy_bytes(void *dst, const void *src, int64_t bytes) const;
    void fill_ones(void *data, DType dtype, int64_t count) const;  // count elements of 1.0
    // Runs `loop`, a time loop's steps enqueued on this call's stream: on CUDA as a graph where
    // set_cuda_graphs has them on (cuda::run_loop; `shape`: what the loop's launches depend on).
    void time_loop(const std::vector<int64_t> &shape, const std::function<void()> &loop);

private:
    Device device_;
    int cpu_target_ = 0;
    cuda::Call cuda_;
};

// ---- CPU targets (runtime/src/cpu_target.cpp) --------------------------------------------------

// The index in cpu_targets.inc of the target the CPU kernels run as now: the pinned one, else the
// first production target this CPU supports. Throws when the BLOCKLSTM_CPU_TARGET pin is invalid.
int current_cpu_target();
const std::string &cpu_target_name(int index);
// Whether that target's bfloat16 kernels take W_h in pair panels (schedules/panel_layout.h).
bool cpu_target_bf16_dot_products(int index);
// Whether that target's bfloat16 products run on AMX tiles (their weights in AMX's pair panel).
bool cpu_target_amx_products(int index);
// The index of the target whose float32 and float16 kernels that target runs (its
// other_dtypes_as), or -1.
int cpu_target_other_dtypes_as(int index);
// A knob of that target's tuning table (schedules/tuning.h), as its kernels were compiled with (a
// knob the table leaves out: its row's fallback, schedules/cpu_knobs.inc).
int cpu_target_knob(int index, const std::string &knob);

// Scratch memory of one call on its device (CUDA: stream-ordered, cuMemAllocAsync /
// cuMemFreeAsync on the call's stream, so it is reused from the driver's pool and needs no
// synchronisation). Zero-initialised unless the caller writes all of it first (Fill::none: no
// memset of tens of MB per call, and no page faults from touching it twice).
class Scratch {
public:
    enum class Fill { zeros, none };
    Scratch(Exec &exec, int64_t bytes, Fill fill = Fill::zeros);
    ~Scratch();
    Scratch(const Scratch &) = delete;
    Scratch &operator=(const Scratch &) = delete;
    Scratch(Scratch &&other) noexcept;

    void *data() const { return data_; }
    float *floats() const { return static_cast<float *>(data_); }

private:
    Exec *exec_;
    void *data_ = nullptr;
};

// Host memory from the cache of blocks freed by earlier calls (runtime/src/host_cache.cpp), 128-byte
// aligned; Halide's own buffers come from it too.
void *host_allocate(std::size_t bytes);
void host_free(void *p);


// Zero a whole output; zero steps [from, T) of a [T, ...] output (on the call's device).
void zero(const Exec &exec, const TensorView &t);
void zero_steps(const Exec &exec, const TensorView &t, int64_t from);

}  // namespace blocklstm::detail
