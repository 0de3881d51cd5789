// The kernel families `blocklstm tune` times: each is one generator of generators/ with the
// generator params the runtime's float32 kernels are built with (runtime/kernels.inc), the knobs
// its schedule reads, its buffers for an LSTM shape, and how many times BlockLSTM and
// BlockLSTMGrad run it at that shape (runtime/src/ops_sequence.cpp), which turns kernel times
// into an estimate of the ops' time.
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
    std::string name;       // e.g. "gemm_nn_bias" (kernels.inc's family)
    std::string generator;  // e.g. "gemm"
    Halide::GeneratorParamsMap params;
    std::vector<std::string> knobs;  // the knobs its schedule reads: others leave it unchanged
    std::function<Call(const LstmShape &, std::mt19937 &)> make;
    // Calls per BlockLSTM and per BlockLSTMGrad (peephole off / on) at a shape.
    std::function<int(const LstmShape &)> forward_calls, grad_calls, grad_peephole_calls;
    bool by_default = true;  // tuned when --families is not given
};

// The CPU families (float32): the products and the steps, and the peephole reduction.
std::vector<Family> cpu_families();

// The GPU families (float32, the CUDA kernels' schedules): the steps and the reductions by
// default; the batched products, which cuBLAS does where it loads, when asked for.
std::vector<Family> gpu_families();

// The families whose names are in `only` (those tuned by default when it is empty); an unknown
// name throws.
std::vector<Family> select_families(const std::vector<Family> &all, const std::vector<std::string> &only);

}  // namespace blocklstm::tune
