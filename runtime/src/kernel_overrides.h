// What `blocklstm tune` swaps into the library to time candidate schedules in the real ops
// (tune/ops_timing.cpp): the float32 CPU kernels of a family replaced by JIT-compiled code of the
// same generator, and the knobs the time loops read (cpu_target_knob) taken from the candidate's
// table. A kernel timed alone, its operands warm from the run before, is not what the ops' time
// loops meet (docs/tuning.md), so the tuner's verdicts come from the ops themselves. Exported for
// the tuner alone: not installed, and nothing in the library sets them.
#pragma once

#include <blocklstm/blocklstm.h>

#include <cstdint>
#include <functional>
#include <string>

#include "HalideRuntime.h"

namespace blocklstm::detail {

// Code called as the AOT kernel's argv function is: the same arguments in the same order
// (the generator's inputs, then its outputs), buffers as halide_buffer_t *, scalars by pointer.
using KernelOverride = std::function<int(void **args)>;

// From the next KernelCall on, every float32 CPU kernel of `family` (kernel::name, e.g.
// "gemm_nn_bias") with or without peepholes, on every CPU target, runs `code`, which takes
// `arguments` arguments: throws if the family has no such kernel or its kernels take another
// number. An empty `code` restores the compiled kernels.
BLOCKLSTM_API void override_cpu_kernel(const std::string &family, bool peephole, int arguments, KernelOverride code);

// From the next call on, cpu_target_knob reads "name:value,..." before the CPU target's own table
// ("" restores the table).
BLOCKLSTM_API void override_cpu_knobs(const std::string &knobs);

// Every kernel and knob override removed.
BLOCKLSTM_API void clear_overrides();

// The parallel loops of the library's own CPU kernels (halide_do_par_for's contract): a replaced
// kernel forks on it too, so that its loops cost what the compiled kernel's do.
BLOCKLSTM_API int ops_do_par_for(void *user_context, halide_task_t task, int min, int size, uint8_t *closure);

}  // namespace blocklstm::detail
