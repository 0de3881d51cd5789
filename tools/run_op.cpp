// `blocklstm run <OpName>`: the op table, .npy inputs -> library call -> .npy outputs.
#include <blocklstm/blocklstm.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <unistd.h>

#include "cli.h"
#include "npy.h"

namespace blocklstm::cli {

namespace {

namespace fs = std::filesystem;

struct Attrs {
    std::optional<float> forget_bias;
    std::optional<float> cell_clip;
    bool use_peephole = false;
};

// Inputs by TF argument name (float tensors) plus seq_len_max for the sequence ops.
struct Inputs {
    int64_t seq_len_max = 0;
    std::map<std::string, Tensor> t;
    const Tensor &operator[](const char *name) const { return t.at(name); }
};

using Outputs = std::vector<Tensor>;  // in OpSpec::outputs order

struct OpSpec {
    const char *name;
    bool sequence;  // has a seq_len_max input
    std::vector<const char *> inputs;
    std::vector<const char *> outputs;
    bool has_forget_bias;
    bool has_cell_clip;
    std::function<Outputs(const Inputs &, const Attrs &)> run;
};

const std::vector<const char *> kFwdInputs = {"x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b"};
const std::vector<const char *> kCellGradInputs = {"x",  "cs_prev", "h_prev", "w",  "wci", "wcf",
                                                   "wco", "b",      "i",      "cs", "f",   "o",
                                                   "ci", "co",      "cs_grad", "h_grad"};
const std::vector<const char *> kSeqGradInputs = {"x",  "cs_prev", "h_prev", "w",  "wci", "wcf",
                                                  "wco", "b",      "i",      "cs", "f",   "o",
                                                  "ci", "co",      "h",      "cs_grad", "h_grad"};
const std::vector<const char *> kFwdOutputs = {"i", "cs", "f", "o", "ci", "co", "h"};
const std::vector<const char *> kCellGradOutputs = {"cs_prev_grad", "dicfo", "wci_grad", "wcf_grad",
                                                    "wco_grad"};
const std::vector<const char *> kSeqGradOutputs = {"x_grad",   "cs_prev_grad", "h_prev_grad",
                                                   "w_grad",   "wci_grad",     "wcf_grad",
                                                   "wco_grad", "b_grad"};

Outputs fwd_outputs(LSTMOutputs<Tensor> &&r) {
    return {std::move(r.i), std::move(r.cs), std::move(r.f), std::move(r.o),
            std::move(r.ci), std::move(r.co), std::move(r.h)};
}
Outputs seq_grad_outputs(BlockLSTMGradOutputs<Tensor> &&r) {
    return {std::move(r.x_grad),   std::move(r.cs_prev_grad), std::move(r.h_prev_grad),
            std::move(r.w_grad),   std::move(r.wci_grad),     std::move(r.wcf_grad),
            std::move(r.wco_grad), std::move(r.b_grad)};
}

const std::vector<OpSpec> &op_table() {
    static const std::vector<OpSpec> table = {
        {"LSTMBlockCell", false, kFwdInputs, kFwdOutputs, true, true,
         [](const Inputs &in, const Attrs &a) {
             LSTMBlockCellAttrs attrs;
             if (a.forget_bias) attrs.forget_bias = *a.forget_bias;
             if (a.cell_clip) attrs.cell_clip = *a.cell_clip;
             attrs.use_peephole = a.use_peephole;
             return fwd_outputs(LSTMBlockCell(in["x"], in["cs_prev"], in["h_prev"], in["w"],
                                              in["wci"], in["wcf"], in["wco"], in["b"], attrs));
         }},
        {"LSTMBlockCellGrad", false, kCellGradInputs, kCellGradOutputs, false, false,
         [](const Inputs &in, const Attrs &a) {
             GradAttrs attrs;
             attrs.use_peephole = a.use_peephole;
             auto r = LSTMBlockCellGrad(in["x"], in["cs_prev"], in["h_prev"], in["w"], in["wci"],
                                        in["wcf"], in["wco"], in["b"], in["i"], in["cs"], in["f"],
                                        in["o"], in["ci"], in["co"], in["cs_grad"], in["h_grad"],
                                        attrs);
             return Outputs{std::move(r.cs_prev_grad), std::move(r.dicfo), std::move(r.wci_grad),
                            std::move(r.wcf_grad), std::move(r.wco_grad)};
         }},
        {"BlockLSTM", true, kFwdInputs, kFwdOutputs, true, true,
         [](const Inputs &in, const Attrs &a) {
             BlockLSTMAttrs attrs;
             if (a.forget_bias) attrs.forget_bias = *a.forget_bias;
             if (a.cell_clip) attrs.cell_clip = *a.cell_clip;
             attrs.use_peephole = a.use_peephole;
             return fwd_outputs(BlockLSTM(in.seq_len_max, in["x"], in["cs_prev"], in["h_prev"],
                                          in["w"], in["wci"], in["wcf"], in["wco"], in["b"], attrs));
         }},
        {"BlockLSTMGrad", true, kSeqGradInputs, kSeqGradOutputs, false, false,
         [](const Inputs &in, const Attrs &a) {
             GradAttrs attrs;
             attrs.use_peephole = a.use_peephole;
             return seq_grad_outputs(BlockLSTMGrad(
                 in.seq_len_max, in["x"], in["cs_prev"], in["h_prev"], in["w"], in["wci"],
                 in["wcf"], in["wco"], in["b"], in["i"], in["cs"], in["f"], in["o"], in["ci"],
                 in["co"], in["h"], in["cs_grad"], in["h_grad"], attrs));
         }},
        {"BlockLSTMV2", true, kFwdInputs, kFwdOutputs, false, true,
         [](const Inputs &in, const Attrs &a) {
             BlockLSTMV2Attrs attrs;
             if (a.cell_clip) attrs.cell_clip = *a.cell_clip;
             attrs.use_peephole = a.use_peephole;
             return fwd_outputs(BlockLSTMV2(in.seq_len_max, in["x"], in["cs_prev"], in["h_prev"],
                                            in["w"], in["wci"], in["wcf"], in["wco"], in["b"],
                                            attrs));
         }},
        {"BlockLSTMGradV2", true, kSeqGradInputs, kSeqGradOutputs, false, false,
         [](const Inputs &in, const Attrs &a) {
             GradAttrs attrs;
             attrs.use_peephole = a.use_peephole;
             return seq_grad_outputs(BlockLSTMGradV2(
                 in.seq_len_max, in["x"], in["cs_prev"], in["h_prev"], in["w"], in["wci"],
                 in["wcf"], in["wco"], in["b"], in["i"], in["cs"], in["f"], in["o"], in["ci"],
                 in["co"], in["h"], in["cs_grad"], in["h_grad"], attrs));
         }},
    };
    return table;
}

const OpSpec &find_op(const std::string &name) {
    for (const auto &op : op_table())
        if (name == op.name) return op;
    std::string known;
    for (const auto &n : op_names()) known += (known.empty() ? "" : ", ") + n;
    throw CliError("unknown op '" + name + "' (expected one of: " + known + ")");
}

std::string input_file(const std::string &dir, const std::string &name) {
    return (fs::path(dir) / (name + ".npy")).string();
}

// The file name used in messages: "x.npy" (the directory is given once on the command line).
std::string label(const char *name) { return std::string(name) + ".npy"; }

npy::Array load(const std::string &dir, const char *name) {
    try {
        return npy::read(input_file(dir, name));
    } catch (const npy::Error &e) {
        // npy messages start with the full path; name the argument's file instead.
        const std::string path = input_file(dir, name);
        std::string msg = e.what();
        if (msg.compare(0, path.size(), path) == 0) msg = label(name) + msg.substr(path.size());
        if (msg == label(name) + ": no such file") msg += " in --in " + dir;
        throw CliError(msg);
    }
}

int64_t load_seq_len_max(const std::string &dir) {
    const npy::Array a = load(dir, "seq_len_max");
    if (a.type != npy::Type::i64)
        throw CliError(std::string("seq_len_max.npy: dtype must be int64 ('<i8'), got ") +
                       npy::numpy_name_of(a.type) + " ('" + npy::descr_of(a.type) + "')");
    if (!(a.shape.empty() || (a.shape.size() == 1 && a.shape[0] == 1)))
        throw CliError("seq_len_max.npy: must be a 0-d array or have shape (1,), got shape " +
                       npy::shape_to_string(a.shape));
    int64_t value;
    std::memcpy(&value, a.data.data(), sizeof value);
    return value;
}

// `t` on `device` (a copy when it is elsewhere).
Tensor on(Device device, const Tensor &t) {
    if (t.device() == device) return t;
    Tensor copy(t.dtype(), t.shape(), device);
    blocklstm::copy(t, copy);
    return copy;
}

Tensor to_tensor(const npy::Array &a) {
    Tensor t(a.type == npy::Type::f16 ? DType::f16 : DType::f32, a.shape);
    if (!a.data.empty()) std::memcpy(t.data(), a.data.data(), a.data.size());
    return t;
}

struct TempFiles {
    std::vector<std::string> paths;
    ~TempFiles() {
        for (const auto &p : paths) ::unlink(p.c_str());
    }
};

// Writes every output to a temporary name in out_dir, then renames them all into place. On any
// failure no output file is left behind.
void write_outputs(const std::string &out_dir, const OpSpec &op, const Outputs &outputs) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) throw CliError("--out " + out_dir + ": cannot create directory: " + ec.message());
    if (!fs::is_directory(out_dir, ec)) throw CliError("--out " + out_dir + ": not a directory");

    TempFiles temps;
    const std::string suffix = ".tmp." + std::to_string(::getpid());
    for (std::size_t k = 0; k < outputs.size(); ++k) {
        const Tensor &t = outputs[k];
        const std::string tmp = (fs::path(out_dir) / ("." + label(op.outputs[k]) + suffix)).string();
        temps.paths.push_back(tmp);
        try {
            npy::write(tmp, t.dtype() == DType::f16 ? npy::Type::f16 : npy::Type::f32, t.shape(),
                       t.data(), t.num_bytes());
        } catch (const npy::Error &e) {
            throw CliError("--out " + out_dir + ": cannot write " + label(op.outputs[k]) + " (" +
                           e.what() + ")");
        }
    }
    std::vector<std::string> done;
    for (std::size_t k = 0; k < outputs.size(); ++k) {
        const std::string final_path = input_file(out_dir, op.outputs[k]);
        if (std::rename(temps.paths[k].c_str(), final_path.c_str()) != 0) {
            const int err = errno;
            for (const auto &p : done) ::unlink(p.c_str());
            throw CliError("--out " + out_dir + ": cannot rename into " + label(op.outputs[k]) +
                           ": " + std::strerror(err));
        }
        done.push_back(final_path);
    }
    temps.paths.clear();
}

}  // namespace

const std::vector<std::string> &op_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> n;
        for (const auto &op : op_table()) n.push_back(op.name);
        return n;
    }();
    return names;
}

bool is_op_name(const std::string &name) {
    for (const auto &n : op_names())
        if (n == name) return true;
    return false;
}

Device check_device(const std::string &device, const std::string &option) {
    if (device == "cpu") return Device::cpu;
    if (device == "cuda") {
        if (!cuda_built())
            throw CliError(option + " cuda: CUDA backend not built (this blocklstm has CPU kernels "
                                    "only; see `blocklstm list`)");
        if (cuda_device_count() == 0)
            throw CliError(option + " cuda: no CUDA device on this machine (use --device cpu)");
        return Device::cuda;
    }
    throw CliError(option + ": unknown device '" + device + "' (expected cpu or cuda)");
}

void run_op(const RunOptions &options) {
    const OpSpec &op = find_op(options.op);
    if (options.forget_bias && !op.has_forget_bias)
        throw CliError(std::string("--forget-bias: ") + op.name + " has no forget_bias attr" +
                       (std::string(op.name) == "BlockLSTMV2" ? " (its forget bias is always 0)" : ""));
    if (options.cell_clip && !op.has_cell_clip)
        throw CliError(std::string("--cell-clip: ") + op.name + " has no cell_clip attr");
    const Device device = check_device(options.device);

    std::error_code ec;
    if (!fs::is_directory(options.in_dir, ec))
        throw CliError("--in " + options.in_dir + ": no such directory");

    Inputs in;
    if (op.sequence) in.seq_len_max = load_seq_len_max(options.in_dir);
    const char *first = nullptr;
    npy::Type float_type = npy::Type::f32;
    for (const char *name : op.inputs) {
        npy::Array a = load(options.in_dir, name);
        if (a.type != npy::Type::f16 && a.type != npy::Type::f32)
            throw CliError(label(name) + ": unsupported dtype " + npy::numpy_name_of(a.type) +
                           " ('" + npy::descr_of(a.type) +
                           "'); float inputs must be float16 ('<f2') or float32 ('<f4')");
        if (!first) {
            first = name;
            float_type = a.type;
        } else if (a.type != float_type) {
            throw CliError(label(name) + ": dtype " + npy::numpy_name_of(a.type) + " differs from " +
                           label(first) + " (" + npy::numpy_name_of(float_type) +
                           "); all float inputs must have the same dtype");
        }
        in.t.emplace(name, on(device, to_tensor(a)));
    }

    Attrs attrs;
    attrs.forget_bias = options.forget_bias;
    attrs.cell_clip = options.cell_clip;
    attrs.use_peephole = options.use_peephole;
    const Outputs outputs = op.run(in, attrs);  // blocklstm::Error propagates to main
    if (outputs.size() != op.outputs.size())
        throw CliError(std::string(op.name) + ": internal error: wrong number of outputs");
    Outputs host_outputs;
    for (const Tensor &t : outputs) host_outputs.push_back(on(Device::cpu, t));
    write_outputs(options.out_dir, op, host_outputs);
}

}  // namespace blocklstm::cli
