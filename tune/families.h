// The kernel families `blocklstm tune` times: each a family of runtime/families.inc (its generator
// and params) in its float32 variant for the device (kernels.inc: how it holds the weights), the
// knobs its schedule reads (by its products), its buffers for an LSTM shape, and the plan steps
// it stands for (runtime/src/plans.h), which say how many times BlockLSTM and BlockLSTMGrad run it
// at that shape and so turn kernel times into an estimate of the ops' time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "Halide.h"

namespace blocklstm::tune {

struct LstmShape {
    int T, B, I, H;
    std::string text() const;
};

// The buffers of one call, by the generator's input and output names; scalars by name.
struct Call {
    std::map<std::string, Halide::Buffer<>> buffers;
    std::map<std::string, float> scalars;
};

struct Family {
    std::string name;       // e.g. "gemm_nn_bias", or "seq_bwd_reduce_peephole" for a family's peephole variant
    std::string kernel;     // the runtime's family (families.inc), e.g. "seq_fwd_step_rows"
    bool peephole = false;  // compiled with peepholes
    std::string generator;  // e.g. "gemm" (families.inc)
    Halide::GeneratorParamsMap params;
    std::vector<std::string> knobs;  // the knobs its schedule reads: others leave it unchanged
    std::function<Call(const LstmShape &, std::mt19937 &)> make;
    // Calls per BlockLSTM and per BlockLSTMGrad (peephole off / on) at a shape, from the plans.
    std::function<int(const LstmShape &)> forward_calls, grad_calls, grad_peephole_calls;
    bool by_default = true;  // tuned when --families is not given
};

// The CPU families (float32): the products and the steps, and the peephole reduction.
std::vector<Family> cpu_families();

// Every float32 CPU kernel that BlockLSTM and BlockLSTMGrad run (with and without peepholes)
// whose schedule reads a knob, each variant apart: what the tuner swaps into the ops to time a
// table there (tune/ops_timing.cpp). Only name, kernel, peephole, generator, params and knobs set.
std::vector<Family> cpu_op_kernels();

// The GPU families (float32, the CUDA kernels' schedules): the steps and the reductions by
// default; the batched products, which cuBLAS does where it loads, when asked for.
std::vector<Family> gpu_families();

// The families whose names are in `only` (those tuned by default when it is empty); an unknown
// name throws.
std::vector<Family> select_families(const std::vector<Family> &all, const std::vector<std::string> &only);

}  // namespace blocklstm::tune
