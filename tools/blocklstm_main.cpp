// The `blocklstm` command-line tool: argument parsing and the subcommands run, bench, list, demo.
// Exit codes: 0 success, 2 usage or input error (one message on stderr naming the file or
// argument), 1 a failed demo self-check.
#include <blocklstm/blocklstm.h>
#include <blocklstm/ops.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli.h"

namespace blocklstm::cli {
namespace {

// Each command's usage and help; `blocklstm --help` prints them all, `blocklstm <command> --help`
// its own.
struct CommandHelp {
    const char *name, *usage, *help;
};
constexpr CommandHelp kCommands[] = {
    {"run",
     "blocklstm run <OpName> --in DIR --out DIR [--device cpu|cuda] [--forget-bias F]\n"
     "                     [--cell-clip C] [--use-peephole] [--threads N]\n",
     "  run <OpName>   Run one TensorFlow LSTM op on .npy files. OpName is one of LSTMBlockCell,\n"
     "                 LSTMBlockCellGrad, BlockLSTM, BlockLSTMGrad, BlockLSTMV2, BlockLSTMGradV2.\n"
     "                 --in DIR holds one .npy per input, named as TF names the argument\n"
     "                 (the op's list is below; float inputs all float16 or all float32, C order,\n"
     "                 little-endian; wci, wcf, wco may be left out without --use-peephole).\n"
     "                 One .npy per output is written to --out DIR (created if missing) in the\n"
     "                 input dtype, named as TF names the output, and one summary line printed.\n"
     "                 Attr defaults are TF's: forget_bias 1.0 and cell_clip 3.0 for\n"
     "                 LSTMBlockCell and BlockLSTM; cell_clip 0.0 and no forget_bias for\n"
     "                 BlockLSTMV2; the grad ops take only --use-peephole. use_peephole defaults\n"
     "                 to false. On error nothing is written. --device cuda copies the inputs to\n"
     "                 CUDA device 0, runs there and copies the outputs back.\n"},
    {"bench",
     "blocklstm bench <OpName> --time T --batch B --input I --cell H\n"
     "                       [--dtype float32|float16] [--use-peephole] [--device cpu|cuda]\n"
     "                       [--reps N] [--warmup N] [--threads N] [--seed S] [--print-reps]\n"
     "                       [--cpu-target TARGET]\n",
     "  bench <OpName> Time one op on random inputs of the given shape (the grad ops on the\n"
     "                 activations of the matching forward op) after a warm-up; print the median,\n"
     "                 min and max and, as the last line, \"median_ms=<float> gflops=<float>\".\n"
     "                 FLOPs are docs/performance.md's GEMM model with L = T (L = 1 for the cell\n"
     "                 ops, which take no --time): forward 2*L*B*4H*(I+H); BlockLSTMGrad(V2)\n"
     "                 2*L*B*4H*H + 2*L*B*4H*I + 2*L*B*4H*(I+H); LSTMBlockCellGrad has no GEMM\n"
     "                 and reports gflops=0. --dtype defaults to float32. --reps defaults to about\n"
     "                 1 s worth of calls (5 to 1000), --warmup to 0.2 s worth; runs expected to\n"
     "                 take over 2 s show progress on stderr. --print-reps also prints each\n"
     "                 timed call (reps_ms=a,b,...). Attrs are TF's defaults. With --device cuda\n"
     "                 the tensors live on the GPU and each call is timed to the end of its GPU\n"
     "                 work; the warm-up's first call includes the PTX JIT of the kernels.\n"
     "                 BLOCKLSTM_CUDA_GEMM=halide runs the batched GEMMs on the Halide kernels\n"
     "                 instead of cuBLAS. --cpu-target runs the CPU kernels compiled for TARGET\n"
     "                 (as BLOCKLSTM_CPU_TARGET does for every command).\n"},
    {"list", "blocklstm list [--kernels]\n",
     "  list           The op variants this build runs (op x backend x dtype x peephole), the CPU\n"
     "                 targets and the one in use, and CUDA's state; --kernels also every kernel.\n"},
    {"demo", "blocklstm demo [--steps N] [--seed S] [--device auto|cpu|cuda] [--threads N]\n",
     "  demo           Train a small peephole LSTM (BlockLSTM + BlockLSTMGrad, Adam) on noisy\n"
     "                 sums of sines, then check one BlockLSTMGrad against the float64 reference.\n"
     "                 --device auto (the default) trains on the GPU when one is present.\n"},
};

constexpr const char *kFooter =
    "\n"
    "Environment: BLOCKLSTM_CPU_TARGET=TARGET pins the CPU kernels to one compiled CPU target,\n"
    "  named as `blocklstm list` shows it or by its leading part (avx512, avx2, sse41); by default\n"
    "  the best one this CPU supports runs.\n"
    "\n"
    "Exit status: 0 success, 2 usage or input error, 1 demo self-check failure.\n";

void print_usage(std::FILE *out) {
    const char *lead = "usage: ";
    for (const CommandHelp &c : kCommands) std::fprintf(out, "%s%s", lead, c.usage), lead = "       ";
    std::fprintf(out, "       blocklstm --help | --version | <command> --help\n");
}

// `command` "": every command's help and the ops' files; else that command's.
void print_help(const std::string &command) {
    if (command.empty()) {
        print_usage(stdout);
        std::printf("\nCommands:\n");
        for (const CommandHelp &c : kCommands) std::fputs(c.help, stdout);
        std::fputs(kFooter, stdout);
        print_op_help();
        return;
    }
    for (const CommandHelp &c : kCommands) {
        if (command != c.name) continue;
        std::printf("usage: %s%s", c.usage, c.help);
        if (command == "run" || command == "bench") print_op_help();
    }
}

bool is_command(const std::string &name) {
    for (const CommandHelp &c : kCommands)
        if (name == c.name) return true;
    return false;
}

class UsageError : public CliError {
public:
    using CliError::CliError;
};

float parse_float(const std::string &option, const std::string &text) {
    char *end = nullptr;
    errno = 0;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) ||
        std::fabs(v) > 3.4e38)
        throw UsageError(option + ": '" + text + "' is not a finite number");
    return static_cast<float>(v);
}

long long parse_int(const std::string &option, const std::string &text, long long lo,
                    long long hi) {
    char *end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
        throw UsageError(option + ": '" + text + "' is not an integer in [" + std::to_string(lo) +
                         ", " + std::to_string(hi) + "]");
    return v;
}

// Iterates over "--name value", "--name=value" and flags.
class Args {
public:
    Args(int argc, char **argv, int start) : argv_(argv + start, argv + argc) {}

    bool done() const { return pos_ >= argv_.size(); }
    const std::string &peek() const { return argv_[pos_]; }

    // If the next argument is option `name`, consumes it and (when `value` is given) its value.
    bool take(const std::string &name, std::string *value = nullptr) {
        const std::string &a = argv_[pos_];
        if (value) {
            if (a == name) {
                if (pos_ + 1 >= argv_.size()) throw UsageError(name + ": missing value");
                *value = argv_[pos_ + 1];
                pos_ += 2;
                return true;
            }
            if (a.compare(0, name.size() + 1, name + "=") == 0) {
                *value = a.substr(name.size() + 1);
                ++pos_;
                return true;
            }
            return false;
        }
        if (a == name) {
            ++pos_;
            return true;
        }
        if (a.compare(0, name.size() + 1, name + "=") == 0)
            throw UsageError(name + ": takes no value");
        return false;
    }
    std::string next() { return argv_[pos_++]; }

private:
    std::vector<std::string> argv_;
    std::size_t pos_ = 0;
};

[[noreturn]] void unknown(const std::string &command, const std::string &arg) {
    if (arg.size() > 1 && arg[0] == '-') throw UsageError(command + ": unknown option '" + arg + "'");
    throw UsageError(command + ": unexpected argument '" + arg + "'");
}

void set_threads(const std::string &text) {
    set_num_threads(static_cast<int>(parse_int("--threads", text, 0, 1024)));
}

int cmd_run(Args &args) {
    RunOptions o;
    bool have_in = false, have_out = false;
    std::string v, threads;
    std::vector<std::string> positional;
    while (!args.done()) {
        if (args.take("--in", &v)) {
            o.in_dir = v;
            have_in = true;
        } else if (args.take("--out", &v)) {
            o.out_dir = v;
            have_out = true;
        } else if (args.take("--device", &v)) {
            o.device = v;
        } else if (args.take("--forget-bias", &v)) {
            o.forget_bias = parse_float("--forget-bias", v);
        } else if (args.take("--cell-clip", &v)) {
            o.cell_clip = parse_float("--cell-clip", v);
        } else if (args.take("--use-peephole")) {
            o.use_peephole = true;
        } else if (args.take("--threads", &v)) {
            threads = v;
        } else if (args.peek().size() > 1 && args.peek()[0] == '-') {
            unknown("run", args.peek());
        } else {
            positional.push_back(args.next());
        }
    }
    if (positional.empty()) throw UsageError("run: missing <OpName>");
    if (positional.size() > 1) unknown("run", positional[1]);
    o.op = positional[0];
    if (!is_op_name(o.op)) {
        std::string known;
        for (const auto &n : op_names()) known += (known.empty() ? "" : ", ") + n;
        throw CliError("unknown op '" + o.op + "' (expected one of: " + known + ")");
    }
    if (!have_in) throw UsageError("run: missing --in DIR");
    if (!have_out) throw UsageError("run: missing --out DIR");
    if (o.in_dir.empty()) throw UsageError("--in: empty directory name");
    if (o.out_dir.empty()) throw UsageError("--out: empty directory name");
    if (!threads.empty()) set_threads(threads);
    std::printf("%s\n", run_op(o).c_str());
    return 0;
}

int cmd_bench(Args &args) {
    BenchOptions o;
    std::string v, threads;
    bool have_time = false, have_batch = false, have_input = false, have_cell = false;
    std::vector<std::string> positional;
    constexpr long long kMaxDim = 1000000;
    while (!args.done()) {
        if (args.take("--time", &v)) {
            o.time = parse_int("--time", v, 1, kMaxDim);
            have_time = true;
        } else if (args.take("--batch", &v)) {
            o.batch = parse_int("--batch", v, 1, kMaxDim);
            have_batch = true;
        } else if (args.take("--input", &v)) {
            o.input = parse_int("--input", v, 0, kMaxDim);
            have_input = true;
        } else if (args.take("--cell", &v)) {
            o.cell = parse_int("--cell", v, 1, kMaxDim);
            have_cell = true;
        } else if (args.take("--dtype", &v)) {
            if (v == "float32")
                o.dtype = DType::f32;
            else if (v == "float16")
                o.dtype = DType::f16;
            else
                throw UsageError("--dtype: '" + v + "' is not float32 or float16");
        } else if (args.take("--use-peephole")) {
            o.use_peephole = true;
        } else if (args.take("--device", &v)) {
            o.device = v;
        } else if (args.take("--reps", &v)) {
            o.reps = static_cast<int>(parse_int("--reps", v, 1, 1000000));
        } else if (args.take("--warmup", &v)) {
            o.warmup = static_cast<int>(parse_int("--warmup", v, 1, 1000000));
        } else if (args.take("--threads", &v)) {
            threads = v;
        } else if (args.take("--seed", &v)) {
            o.seed = static_cast<uint64_t>(parse_int("--seed", v, 0, INT64_MAX));
        } else if (args.take("--print-reps")) {
            o.print_reps = true;
        } else if (args.take("--cpu-target", &v)) {
            o.cpu_target = v;
        } else if (args.peek().size() > 1 && args.peek()[0] == '-') {
            unknown("bench", args.peek());
        } else {
            positional.push_back(args.next());
        }
    }
    if (positional.empty()) throw UsageError("bench: missing <OpName>");
    if (positional.size() > 1) unknown("bench", positional[1]);
    o.op = positional[0];
    if (!is_op_name(o.op)) {
        std::string known;
        for (const auto &n : op_names()) known += (known.empty() ? "" : ", ") + n;
        throw CliError("unknown op '" + o.op + "' (expected one of: " + known + ")");
    }
    const bool cell_op = o.op == "LSTMBlockCell" || o.op == "LSTMBlockCellGrad";
    if (cell_op && have_time && o.time != 1)
        throw UsageError("--time: " + o.op + " runs one step (omit --time, or give 1)");
    if (!cell_op && !have_time) throw UsageError("bench: missing --time T");
    if (!have_batch) throw UsageError("bench: missing --batch B");
    if (!have_input) throw UsageError("bench: missing --input I");
    if (!have_cell) throw UsageError("bench: missing --cell H");
    if (!threads.empty()) {
        set_threads(threads);
        o.threads = static_cast<int>(parse_int("--threads", threads, 0, 1024));
    }
    if (!o.cpu_target.empty()) set_cpu_target(o.cpu_target);
    return bench(o);
}

int cmd_list(Args &args) {
    bool kernel_rows = false;
    while (!args.done()) {
        if (args.take("--kernels")) kernel_rows = true;
        else unknown("list", args.peek());
    }
    list_kernels(kernel_rows);
    return 0;
}

int cmd_demo(Args &args) {
    DemoOptions o;
    std::string v;
    while (!args.done()) {
        if (args.take("--steps", &v)) {
            o.steps = static_cast<int>(parse_int("--steps", v, 1, 1000000));
        } else if (args.take("--seed", &v)) {
            o.seed = static_cast<uint64_t>(parse_int("--seed", v, 0, INT64_MAX));
        } else if (args.take("--device", &v)) {
            o.device = v;
        } else if (args.take("--threads", &v)) {
            set_threads(v);
        } else {
            unknown("demo", args.peek());
        }
    }
    if (o.device != "auto") check_device(o.device);
    return demo(o);
}

}  // namespace

// Each op's .npy files and attrs, from the op registry (blocklstm/ops.h).
void print_op_help() {
    std::printf("\nOps: the inputs `run` reads from --in and the outputs it writes (name[shape] in T steps,\n"
                "B batch rows, I inputs, H cell units), and the attrs with TF's defaults:\n");
    // The arguments after a 9-column label, wrapped at 100 columns.
    auto args = [](std::string line, const std::vector<OpArg> &list) {
        std::string out;
        for (const OpArg &a : list) {
            const std::string item = " " + a.name + a.shape;
            if (line.size() + item.size() > 100) out += line + "\n", line = std::string(8, ' ');
            line += item;
        }
        return out + line;
    };
    auto number = [](float v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", v);
        return std::string(buf);
    };
    for (const OpInfo &op : ops()) {
        std::string attrs;
        if (op.forget_bias) attrs += " --forget-bias " + number(*op.forget_bias);
        if (op.cell_clip) attrs += " --cell-clip " + number(*op.cell_clip);
        const std::string in = args(op.sequence ? "    in:  seq_len_max (int64)" : "    in: ", op.inputs);
        std::printf("  %s: %s\n%s\n%s\n    attrs:%s --use-peephole (off)\n", op.name.c_str(), op.summary.c_str(),
                    in.c_str(), args("    out:", op.outputs).c_str(), attrs.c_str());
    }
}

void list_kernels(bool kernel_rows) {
    const std::string in_use = cpu_target_in_use();  // first: an invalid pin is an error, not a half list
    // The op variants these kernels make: an op runs on a backend in a dtype, with or without
    // peepholes, when every kernel its call needs is compiled in.
    std::printf("op variants (op  backend  dtype: peephole flags):\n");
    for (const OpInfo &op : ops()) {
        for (Device backend : {Device::cpu, Device::cuda}) {
            std::string line;
            for (DType dtype : {DType::f32, DType::f16}) {
                std::string flags;
                for (bool peephole : {false, true}) {
                    if (!op_available(op.name, backend, dtype, peephole)) continue;
                    flags += flags.empty() ? "" : ", ";
                    flags += peephole ? "peephole" : "plain";
                }
                if (!flags.empty()) line += std::string("  ") + to_string(dtype) + ": " + flags;
            }
            if (!line.empty()) std::printf("  %-18s %-5s%s\n", op.name.c_str(), to_string(backend), line.c_str());
        }
    }
    // The CPU targets every CPU kernel was compiled for, and which one runs.
    std::printf("\nCPU targets (best first; check targets: an instruction set with another target's\n"
                "tile geometry, for the tests):\n");
    for (const CpuTarget &t : cpu_targets()) {
        fmt::print("  {:<22} {:<30} geometry {:<7} {}{}{}\n", t.name, t.halide_target, t.geometry,
                   t.runs_here ? "runs here" : "this CPU lacks " + t.missing, t.check_only ? ", check target" : "",
                   t.name == in_use ? "  <- in use" : "");
    }
    std::printf("CPU target in use: %s (%s)\n", in_use.c_str(),
                cpu_target_pinned() ? "pinned" : "automatic; pin with BLOCKLSTM_CPU_TARGET");
    if (cuda_built()) {
        const std::string devices = cuda_device_count() > 0
                                        ? std::to_string(cuda_device_count()) + " device(s), 0: " + cuda_device_name(0)
                                        : "no device (" + cuda_unavailable_reason() + ")";
        std::printf("\nCUDA: %s\nCUDA batched products: %s\n", devices.c_str(), cuda_gemm_backend().c_str());
    }

    const std::vector<KernelInfo> ks = kernels();
    if (!kernel_rows) {
        std::printf("\n%zu kernels; `blocklstm list --kernels` lists them.\n", ks.size());
        return;
    }
    std::printf("\n");
    const char *headers[] = {"name", "ops", "backend", "dtype", "peephole", "layout", "targets"};
    std::vector<std::vector<std::string>> rows;
    for (const auto &k : ks)
        rows.push_back({k.name, k.family + " (" + k.ops + ")", to_string(k.backend),
                        to_string(k.dtype), k.peephole ? "yes" : "no", k.layout, k.targets});
    std::size_t width[7];
    for (int c = 0; c < 7; ++c) {
        width[c] = std::string(headers[c]).size();
        for (const auto &r : rows) width[c] = std::max(width[c], r[c].size());
    }
    auto print_row = [&](const std::vector<std::string> &r) {
        std::string line;
        for (int c = 0; c < 7; ++c) {
            line += r[c];
            if (c < 6) line += std::string(width[c] - r[c].size() + 2, ' ');
        }
        std::printf("%s\n", line.c_str());
    };
    print_row({headers, headers + 7});
    for (const auto &r : rows) print_row(r);
    std::printf("\n%zu kernels.\n", ks.size());
}

// The library's version, the Halide it was built with, and what it runs.
void print_version() {
    std::vector<std::string> targets;
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets())
        targets.push_back(t.name + (t.runs_here ? "" : " (not on this CPU)"));
    fmt::print("blocklstm {} (kernels generated with Halide {})\nCPU targets: {}\nCUDA: {}\n",
               blocklstm::version(), blocklstm::halide_version(), fmt::join(targets, ", "),
               blocklstm::cuda_built() ? "built" : "not built");
}

}  // namespace blocklstm::cli

int main(int argc, char **argv) {
    using namespace blocklstm::cli;
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const std::string command = argv[1];
    if (command == "--version" || command == "version") {
        print_version();
        return 0;
    }
    bool help = command == "help";
    for (int k = 1; k < argc; ++k)
        help = help || std::string(argv[k]) == "--help" || std::string(argv[k]) == "-h";
    if (help) {
        print_help(is_command(command) ? command : "");
        return 0;
    }
    try {
        Args args(argc, argv, 2);
        if (command == "run") return cmd_run(args);
        if (command == "bench") return cmd_bench(args);
        if (command == "list") return cmd_list(args);
        if (command == "demo") return cmd_demo(args);
        throw UsageError("unknown command '" + command + "'");
    } catch (const UsageError &e) {  // one line, and where the help is
        const std::string where = is_command(command) ? "blocklstm " + command + " --help" : "blocklstm --help";
        std::fprintf(stderr, "blocklstm: %s (see '%s')\n", e.what(), where.c_str());
        return 2;
    } catch (const CliError &e) {
        std::fprintf(stderr, "blocklstm: %s\n", e.what());
        return 2;
    } catch (const blocklstm::Error &e) {  // the library's own "blocklstm: " prefix is not repeated
        std::string message = e.what();
        if (message.rfind("blocklstm: ", 0) == 0) message.erase(0, 11);
        std::fprintf(stderr, "blocklstm: %s\n", message.c_str());
        return 2;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "blocklstm: error: %s\n", e.what());
        return 2;
    }
}
