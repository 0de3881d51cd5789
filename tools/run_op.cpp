// `blocklstm run <OpName>`: .npy inputs -> the op by name (blocklstm/ops.h) -> .npy outputs.
#include <chrono>
#include <blocklstm/blocklstm.h>
#include <blocklstm/ops.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli.h"
#include "npy.h"

namespace blocklstm::cli {

namespace {

namespace fs = std::filesystem;

using Outputs = std::vector<Tensor>;  // in the op's output order

const OpInfo &find_op(const std::string &name) {
    try {
        return op_info(name);
    } catch (const Error &e) {
        throw CliError(e.what());
    }
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
        throw CliError(fmt::format("seq_len_max.npy: dtype must be int64 ('<i8'), got {} ('{}')",
                                   npy::numpy_name_of(a.type), npy::descr_of(a.type)));
    if (!(a.shape.empty() || (a.shape.size() == 1 && a.shape[0] == 1)))
        throw CliError(fmt::format("seq_len_max.npy: must be a 0-d array or have shape (1,), got shape {}",
                                   npy::shape_to_string(a.shape)));
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

npy::Type npy_type_of(DType dtype) {
    return dtype == DType::f16 ? npy::Type::f16 : dtype == DType::bf16 ? npy::Type::bf16 : npy::Type::f32;
}

DType dtype_of(npy::Type type) {
    return type == npy::Type::f16    ? DType::f16
           : type == npy::Type::bf16 ? DType::bf16
           : type == npy::Type::i32  ? DType::i32
           : type == npy::Type::i64  ? DType::i64
                                     : DType::f32;
}

Tensor to_tensor(const npy::Array &a) {
    Tensor t(dtype_of(a.type), a.shape);
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
void write_outputs(const std::string &out_dir, const OpInfo &op, const Outputs &outputs) {
    std::error_code ec;
    // The directories this call creates, deepest first; removed again (if still empty) on failure.
    struct CreatedDirs {
        std::vector<fs::path> paths;
        bool keep = false;
        ~CreatedDirs() {
            std::error_code ignored;
            if (!keep)
                for (const fs::path &p : paths) fs::remove(p, ignored);  // removes empty directories only
        }
    } created;
    for (fs::path p = fs::absolute(out_dir, ec); !ec && !p.empty(); p = p.parent_path()) {
        std::error_code not_found;  // set for a missing path, which is what is looked for
        if (fs::symlink_status(p, not_found).type() != fs::file_type::not_found || p == p.parent_path()) break;
        created.paths.push_back(p);
    }
    fs::create_directories(out_dir, ec);
    if (ec) throw CliError(fmt::format("--out {}: cannot create directory: {}", out_dir, ec.message()));
    if (!fs::is_directory(out_dir, ec)) throw CliError(fmt::format("--out {}: not a directory", out_dir));

    TempFiles temps;
    const std::string suffix = ".tmp." + std::to_string(::getpid());
    for (std::size_t k = 0; k < outputs.size(); ++k) {
        const Tensor &t = outputs[k];
        const std::string hidden = std::string(".").append(label(op.outputs[k].name.c_str())).append(suffix);
        const std::string tmp = (fs::path(out_dir) / hidden).string();
        temps.paths.push_back(tmp);
        try {
            npy::write(tmp, npy_type_of(t.dtype()), t.shape(), t.data(), t.num_bytes());
        } catch (const npy::Error &e) {
            throw CliError(fmt::format("--out {}: cannot write {} ({})", out_dir, label(op.outputs[k].name.c_str()),
                                       e.what()));
        }
    }
    // Into place one by one; a file already there is set aside first, so that a failure part way
    // puts every earlier file back as it was (none of the outputs, and no user file lost).
    struct Moved {
        std::string final_path, set_aside;  // set_aside "": nothing was there
    };
    std::vector<Moved> done;
    auto undo = [&] {
        for (auto it = done.rbegin(); it != done.rend(); ++it) {
            ::unlink(it->final_path.c_str());
            if (!it->set_aside.empty()) std::rename(it->set_aside.c_str(), it->final_path.c_str());
        }
    };
    for (std::size_t k = 0; k < outputs.size(); ++k) {
        Moved m{input_file(out_dir, op.outputs[k].name), ""};
        int err = 0;
        if (fs::is_directory(m.final_path, ec)) err = EISDIR;
        if (!err && fs::exists(fs::symlink_status(m.final_path, ec))) {
            m.set_aside = (fs::path(out_dir) / std::string(".").append(label(op.outputs[k].name.c_str())).append(".old").append(suffix))
                              .string();
            if (std::rename(m.final_path.c_str(), m.set_aside.c_str()) != 0) err = errno;
        }
        if (!err && std::rename(temps.paths[k].c_str(), m.final_path.c_str()) != 0) {
            err = errno;
            if (!m.set_aside.empty()) std::rename(m.set_aside.c_str(), m.final_path.c_str());
        }
        if (err) {
            undo();
            throw CliError(fmt::format("--out {}: cannot write {}: {} (the files there are as they were)", out_dir,
                                       label(op.outputs[k].name.c_str()), std::strerror(err)));
        }
        done.push_back(m);
    }
    for (const Moved &m : done)
        if (!m.set_aside.empty()) ::unlink(m.set_aside.c_str());
    temps.paths.clear();
    created.keep = true;
}

}  // namespace

const std::vector<std::string> &op_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> n;
        for (const OpInfo &op : ops()) n.push_back(op.name);
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
            throw CliError(option + " cuda: no CUDA device on this machine: " + cuda_unavailable_reason() +
                           " (use --device cpu)");
        return Device::cuda;
    }
    throw CliError(fmt::format("{}: unknown device '{}' (expected cpu or cuda)", option, device));
}

std::string run_op(const RunOptions &options) {
    const OpInfo &op = find_op(options.op);
    if (options.forget_bias && !op.forget_bias)
        throw CliError(fmt::format("--forget-bias: {} has no forget_bias attr", op.name) +
                       (op.name == "BlockLSTMV2" ? " (its forget bias is always 0)" : ""));
    if (options.cell_clip && !op.cell_clip)
        throw CliError(fmt::format("--cell-clip: {} has no cell_clip attr", op.name));
    const Device device = check_device(options.device);

    std::error_code ec;
    if (!fs::is_directory(options.in_dir, ec))
        throw CliError(fmt::format("--in {}: no such directory", options.in_dir));

    // Every missing file at once. The peephole vectors are optional without --use-peephole
    // (the op does not read them): zeros then.
    auto peephole_vector = [](const std::string &name) { return name == "wci" || name == "wcf" || name == "wco"; };
    std::vector<std::string> missing;
    if (op.sequence && !fs::exists(input_file(options.in_dir, "seq_len_max"), ec)) missing.push_back(label("seq_len_max"));
    for (const OpArg &arg : op.inputs) {
        if (fs::exists(input_file(options.in_dir, arg.name), ec)) continue;
        if (!options.use_peephole && peephole_vector(arg.name)) continue;
        missing.push_back(label(arg.name.c_str()));
    }
    if (!missing.empty()) {
        throw CliError(fmt::format("--in {}: missing {}{}", options.in_dir, fmt::join(missing, ", "),
                                   missing.size() > 1 ? fmt::format(" ({} files)", missing.size()) : ""));
    }

    const int64_t seq_len_max = op.sequence ? load_seq_len_max(options.in_dir) : 0;
    std::map<std::string, Tensor> inputs;
    const char *first = nullptr;
    npy::Type float_type = npy::Type::f32;
    std::vector<std::string> zero_peepholes;
    for (const OpArg &arg : op.inputs) {
        const char *name = arg.name.c_str();
        if (peephole_vector(arg.name) && !fs::exists(input_file(options.in_dir, arg.name), ec)) {
            zero_peepholes.push_back(arg.name);
            continue;
        }
        npy::Array a = load(options.in_dir, name);
        if (a.type != npy::Type::f16 && a.type != npy::Type::f32 && a.type != npy::Type::bf16)
            throw CliError(fmt::format("{}: unsupported dtype {} ('{}'); float inputs must be float32 ('<f4'), "
                                       "float16 ('<f2') or bfloat16 ('<V2', as ml_dtypes saves it)",
                                       label(name), npy::numpy_name_of(a.type), npy::descr_of(a.type)));
        if (!first) {
            first = name;
            float_type = a.type;
        } else if (a.type != float_type) {
            throw CliError(fmt::format("{}: dtype {} differs from {} ({}); all float inputs must have the same dtype",
                                       label(name), npy::numpy_name_of(a.type), label(first),
                                       npy::numpy_name_of(float_type)));
        }
        inputs.emplace(arg.name, on(device, to_tensor(a)));
    }
    // Zero peephole vectors of the cell size H of cs_prev [B, H], once w [I + H, 4H] agrees with
    // it (so they are never larger than w, which was read from a file: an empty cs_prev may
    // declare any H). Otherwise empty ones: the op then names cs_prev, h_prev or w, which it
    // checks before them.
    const std::vector<int64_t> &cs_prev = inputs.at("cs_prev").shape(), &w = inputs.at("w").shape(),
                               &x_shape = inputs.at("x").shape();
    const int64_t cell_size = cs_prev.size() == 2 ? cs_prev[1] : -1;
    const bool w_agrees = w.size() == 2 && !x_shape.empty() && cell_size >= 0 && w[1] % 4 == 0 &&
                          w[1] / 4 == cell_size && w[0] - cell_size == x_shape.back();
    for (const std::string &name : zero_peepholes)
        inputs.emplace(name, on(device, Tensor(dtype_of(float_type), {w_agrees ? cell_size : 0})));

    // The op's optional inputs (seq_lengths), where --in has their file: integers, in host memory.
    for (const OpArg &arg : op.optional_inputs) {
        if (!fs::exists(input_file(options.in_dir, arg.name), ec)) continue;
        npy::Array a = load(options.in_dir, arg.name.c_str());
        if (a.type != npy::Type::i32 && a.type != npy::Type::i64)
            throw CliError(fmt::format("{}: unsupported dtype {} ('{}'); expected int32 ('<i4') or int64 ('<i8')",
                                       label(arg.name.c_str()), npy::numpy_name_of(a.type), npy::descr_of(a.type)));
        inputs.emplace(arg.name, to_tensor(a));
    }

    OpAttrs attrs;
    attrs.forget_bias = options.forget_bias;
    attrs.cell_clip = options.cell_clip;
    attrs.use_peephole = options.use_peephole;
    const std::map<std::string, TensorView> views(inputs.begin(), inputs.end());
    // blocklstm::Error propagates to main
    const auto start = std::chrono::steady_clock::now();
    const std::map<std::string, Tensor> outputs = invoke(op.name, seq_len_max, views, attrs);
    if (device == Device::cuda) cuda_synchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    Outputs host_outputs;
    for (const OpArg &arg : op.outputs) host_outputs.push_back(on(Device::cpu, outputs.at(arg.name)));
    write_outputs(options.out_dir, op, host_outputs);

    // The one-line summary of a successful run.
    const Tensor &x = inputs.at("x");
    return fmt::format("{}: x [{}] {} on {}{}{}: {:.2f} ms; wrote {} files to {}", op.name,
                       fmt::join(x.shape(), ","), to_string(x.dtype()), to_string(device),
                       op.sequence ? fmt::format(", seq_len_max {}", seq_len_max) : "",
                       options.use_peephole ? ", peephole" : "", ms, op.outputs.size(), options.out_dir);
}

}  // namespace blocklstm::cli
