// blocklstm/ops.h — the six ops as data: what each takes, gives and runs, and a call by name.
//
// ops() describes every op (runtime/src/ops.cpp holds the one table): its inputs and outputs in
// TF's order with their shapes, its attrs with TF's defaults, and the kernel families it runs.
// invoke() calls an op by name with tensors by TF argument name, for callers that handle the ops
// uniformly (the blocklstm tool, bindings, tests); it runs the typed function of blocklstm.h.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <blocklstm/blocklstm.h>

namespace blocklstm {

// The sizes an op's shapes are written in: T time steps, B batch rows, I inputs, H cell units.
struct OpDims {
    int64_t T = 1, B = 1, I = 1, H = 1;
};

// One tensor argument: its TF name and shape, in the letters of OpDims (e.g. "[T,B,I]", "[I+H,4H]").
struct BLOCKLSTM_API OpArg {
    std::string name;
    std::string shape;
    int rank() const;
    std::vector<int64_t> dims(const OpDims &d) const;  // the shape at these sizes
};

// Every attr of every op; an op reads the ones it has (OpInfo) and rejects the others.
struct OpAttrs {
    std::optional<float> forget_bias;  // unset: the op's default
    std::optional<float> cell_clip;    // unset: the op's default
    bool use_peephole = false;
};

// One step of an op's plan: a kernel family, how often a call runs it ("1"; "L": once per time
// step; "C": once per chunk of the CPU's float32 weight gradient's rows) and what it computes.
struct OpPlanStep {
    std::string family;
    std::string times;
    std::string does;
};

struct BLOCKLSTM_API OpInfo {
    std::string name;               // e.g. "BlockLSTMGrad"
    std::string summary;            // one line
    bool sequence = false;          // takes seq_len_max (an int64) before its tensors
    bool gradient = false;
    std::string layout;             // gate block order of w, b and the gate gradients: "icfo", "ifco"
    std::vector<OpArg> inputs;      // TF's order (without seq_len_max)
    std::vector<OpArg> outputs;     // TF's order
    std::optional<float> forget_bias;  // the attr's TF default, or none: the op has no such attr
    std::optional<float> cell_clip;
    std::string forward_op;         // a gradient op: the op whose outputs it takes ("" otherwise)
    // Inputs a call may leave out, blocklstm's extensions of TF's op: the sequence ops'
    // "seq_lengths" [B] (int32 or int64, host memory; blocklstm.h, docs/semantics.md).
    std::vector<OpArg> optional_inputs;

    // The plan a call on a device in a dtype runs now: the kernel families, in order, and how
    // often, e.g. BlockLSTM on the CPU: gemm_nn_bias 1, panels 1, seq_fwd_step L (on CUDA it
    // follows set_cuda_step).
    std::vector<OpPlanStep> plan(Device device, DType dtype) const;
    // The kernel families a call on a device in a dtype may run, whichever its steps
    // (kernels.inc), e.g. gemm_nn_bias, panels, seq_fwd_step.
    std::vector<std::string> kernel_families(Device device, DType dtype) const;
};

// The six ops, in TF's API order: LSTMBlockCell, LSTMBlockCellGrad, BlockLSTM, BlockLSTMGrad,
// BlockLSTMV2, BlockLSTMGradV2.
BLOCKLSTM_API const std::vector<OpInfo> &ops();
// One op by name; an unknown name throws blocklstm::Error listing the six.
BLOCKLSTM_API const OpInfo &op_info(const std::string &name);

// Whether this library has every kernel an op call needs on a device, in a dtype, with or
// without peepholes.
BLOCKLSTM_API bool op_available(const std::string &op, Device device, DType dtype, bool use_peephole);

// Calls `op` with every input by TF name, and any of its optional_inputs by name (seq_len_max is
// read by sequence ops only), and writes its outputs into `outputs` (every output by TF name,
// caller-owned; BlockLSTM and BlockLSTMV2 may leave out all of i, f, o, ci, co, and then write
// only cs and h, cs as [T,B,H] or, on the CPU, [B,H]: each row's final state; inference). A
// missing or unknown tensor name,
// or an attr the op does not have, throws blocklstm::Error naming it; then validation as the typed
// function does it.
BLOCKLSTM_API void invoke(const std::string &op, int64_t seq_len_max,
                          const std::map<std::string, TensorView> &inputs,
                          const std::map<std::string, TensorView> &outputs, const OpAttrs &attrs = {});
// The same, allocating the outputs (on the inputs' device, in their dtype).
BLOCKLSTM_API std::map<std::string, Tensor> invoke(const std::string &op, int64_t seq_len_max,
                                                   const std::map<std::string, TensorView> &inputs,
                                                   const OpAttrs &attrs = {});
// The call bound once to its tensors and attrs (checked as invoke checks them), to be run any
// number of times at the cost of the typed call (a benchmark's loop).
BLOCKLSTM_API std::function<void()> bind_op(const std::string &op, int64_t seq_len_max,
                                            const std::map<std::string, TensorView> &inputs,
                                            const std::map<std::string, TensorView> &outputs,
                                            const OpAttrs &attrs = {});

// One call of invoke's arguments (invoke_side_by_side).
struct OpCall {
    std::string op;
    int64_t seq_len_max = 0;
    std::map<std::string, TensorView> inputs;
    std::map<std::string, TensorView> outputs;
    OpAttrs attrs;
};

// Runs two independent op calls (neither reads what the other writes), each as invoke does. Both
// are checked before either runs: a bad argument in either throws as invoke would, as does an
// output of one that overlaps a tensor of the other, and nothing is written. Where both are CPU calls of a state (B x H) up to 4096 and the CPU kernels' loops have
// two threads (two cores, set_num_threads(2), or an OpenMP team of two), the calls run at once,
// each on one of the two threads with its parallel loops there alone: a small call's time steps
// split poorly over two cores, so two such calls side by side take less time than one after the
// other on both cores (the two directions of a bidirectional layer; docs/performance.md: 0.68-0.72x
// at T,B,I=H 500,1,128, 0.85x at 50,8,128, 0.98x at 200,16,256). Elsewhere `first`, then `second`.
BLOCKLSTM_API void invoke_side_by_side(const OpCall &first, const OpCall &second);

}  // namespace blocklstm
