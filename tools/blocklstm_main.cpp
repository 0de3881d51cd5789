// The `blocklstm` command-line tool: argument parsing (CLI11) and the subcommands run, bench,
// list, demo.
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
#include <optional>
#include <map>
#include <string>
#include <vector>

#include <filesystem>
#include <unistd.h>
#include <cstring>
#include <CLI/CLI.hpp>
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
     "                 (the op's list is below; float inputs all float32, all float16 or all\n"
     "                 bfloat16, C order, little-endian; .npy has no bfloat16: it is read and\n"
     "                 written as ml_dtypes saves it, descr '<V2' -- np.save of an\n"
     "                 ml_dtypes.bfloat16 array, np.load(f).view(ml_dtypes.bfloat16) to read;\n"
     "                 wci, wcf, wco may be left out without --use-peephole;\n"
     "                 the sequence ops also read seq_lengths.npy, int32 or int64 [B], where\n"
     "                 present: each row's own length, blocklstm's extension of TF's ops).\n"
     "                 One .npy per output is written to --out DIR (created if missing) in the\n"
     "                 input dtype, named as TF names the output, and one summary line printed.\n"
     "                 Attr defaults are TF's: forget_bias 1.0 and cell_clip 3.0 for\n"
     "                 LSTMBlockCell and BlockLSTM; cell_clip 0.0 and no forget_bias for\n"
     "                 BlockLSTMV2; the grad ops take only --use-peephole. use_peephole defaults\n"
     "                 to false. On error nothing is written. --device cuda copies the inputs to\n"
     "                 CUDA device 0, runs there and copies the outputs back.\n"},
    {"bench",
     "blocklstm bench <OpName> --time T --batch B --input I --cell H\n"
     "                       [--dtype float32|float16|bfloat16] [--use-peephole]\n"
     "                       [--device cpu|cuda]\n"
     "                       [--reps N] [--warmup N] [--threads N] [--seed S] [--print-reps]\n"
     "                       [--cpu-target TARGET] [--lengths full|spread|sorted [--against-padded]]\n"
     "                       [--inference] [--side-by-side]\n",
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
     "                 (as BLOCKLSTM_CPU_TARGET does for every command). --lengths gives the\n"
     "                 sequence ops seq_lengths: full, every row T steps; spread, each row's\n"
     "                 length uniform in [ceil(T/4), T] (from --seed); sorted, the same lengths\n"
     "                 longest first (as a PackedSequence's rows; the op then reorders no rows);\n"
     "                 FLOPs count the steps run.\n"
     "                 --against-padded alternates each timed call with the same call without\n"
     "                 seq_lengths (every row T steps) and adds \"padded_median_ms=<float>\n"
     "                 ratio=<float>\" to the last line: the median over the pairs of calls of\n"
     "                 the call's time over the padded call's.\n"
     "                 --inference leaves out a forward op's i, f, o, ci, co: only cs and h written,\n"
     "                 on the CPU a sequence op's cs as each row's final state [B, H].\n"
     "                 --side-by-side times two calls of the op, on two sets of inputs (the\n"
     "                 second from --seed + 1), in one invoke_side_by_side (on 2 loop threads:\n"
     "                 each call on one thread, at once), alternating with the same two calls\n"
     "                 one after the other, and adds \"apart_median_ms=<float> ratio=<float>\"\n"
     "                 to the last line (the median over the pairs of times of side by side over\n"
     "                 one after the other); median_ms and gflops are the two calls'. CPU only.\n"},
    {"list", "blocklstm list [--kernels] [--plans]\n",
     "  list           The op variants this build runs (op x backend x dtype x peephole), the CPU\n"
     "                 targets and the one in use, and CUDA's state; --kernels also every kernel,\n"
     "                 --plans what each op call runs (kernel families, how often, what for).\n"},
    {"tune",
     "blocklstm tune [--minutes M] [--shapes 'T,B,I,H;...'] [--families F,...] [--threads N]\n"
     "                      [--device cpu|cuda|opencl] [--out FILE] [--log FILE] [--from FILE]\n"
     "                      [--target T] [--fresh] [--verdicts ops|kernels] [--compare FILE]\n"
     "                      [--baseline autoschedulers]\n",
     "  tune           Fit a tuning table to this machine, the CPU's (--device cpu, the default)\n"
     "                 or the CUDA one on its NVIDIA GPU (--device cuda; --device opencl runs\n"
     "                 the GPU schedules on an OpenCL device such as PoCL, to check the tuner,\n"
     "                 and marks the table not measured): JIT-compiles the\n"
     "                 kernels with candidate tile sizes, checks each against the current kernel,\n"
     "                 times them on the shapes (default: the benchmark's four), searches for\n"
     "                 --minutes (default 5), keeping a move only when BlockLSTM and\n"
     "                 BlockLSTMGrad, run with its kernels swapped in, gain in pairs of calls\n"
     "                 (--verdicts kernels: its kernels timed side by side, as on a GPU),\n"
     "                 and writes the best table to --out (default\n"
     "                 ./<table>.json, e.g. x86-64-avx2.json or cuda.json) with every candidate in --log\n"
     "                 (default <out>.csv; run again with the same log to resume; Ctrl-C stops\n"
     "                 and keeps the best so far). Build with the table:\n"
     "                 cmake -B build -DBLOCKLSTM_TUNING=$PWD/x86-64-avx2.json. --compare FILE\n"
     "                 times that table against the built one (or --from) the same way and\n"
     "                 writes no table. --baseline\n"
     "                 autoschedulers times Halide's autoschedulers (Adams2019, Li2018,\n"
     "                 Mullapudi2016; Anderson2021 with --device cuda) on the same kernels\n"
     "                 instead, each checked against ours and run in a process of its own, and\n"
     "                 writes the schedules they chose to <log>.schedules/. Runs the\n"
     "                 blocklstm-tune program beside this one (it links libHalide;\n"
     "                 docs/tuning.md).\n"},
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

// A finite float32 (CLI11 converts; this rejects what float32 cannot hold).
CLI::Validator finite_float() {
    return CLI::Validator(
        [](std::string &text) {
            char *end = nullptr;
            errno = 0;
            const double v = std::strtod(text.c_str(), &end);
            if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || std::fabs(v) > 3.4e38)
                return "'" + text + "' is not a finite number";
            return std::string();
        },
        "FLOAT");
}

// A seed: digits only, within 64 bits (CLI11 would wrap -1 and saturate a larger number, so two
// wrong seeds became the same one).
CLI::Validator seed_value() {
    return CLI::Validator(
        [](std::string &text) {
            char *end = nullptr;
            errno = 0;
            std::strtoull(text.c_str(), &end, 10);
            if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || errno == ERANGE)
                return "'" + text + "' is not an integer in [0, 18446744073709551615]";
            return std::string();
        },
        "UINT64");
}

// The op named by the positional <OpName>, checked against the registry.
std::string op_name_of(const std::string &command, const std::vector<std::string> &positional) {
    if (positional.empty()) throw UsageError(command + ": missing <OpName>");
    if (positional.size() > 1) throw UsageError(command + ": unexpected argument '" + positional[1] + "'");
    if (!is_op_name(positional[0]))
        throw CliError(fmt::format("unknown op '{}' (expected one of: {})", positional[0], fmt::join(op_names(), ", ")));
    return positional[0];
}

// The commands' options on CLI11; the help texts are ours (kCommands), so CLI11's help is off.
struct Parsed {
    RunOptions run;
    BenchOptions bench;
    DemoOptions demo;
    bool list_kernels = false, list_plans = false;
    std::vector<std::string> positional;
    std::optional<int> threads;
};

CLI::App *add_command(CLI::App &app, const char *name) {
    CLI::App *c = app.add_subcommand(name);
    c->set_help_flag();
    c->allow_extras(false);
    return c;
}

int parse_and_run(int argc, char **argv, const std::string &command) {
    CLI::App app("blocklstm");
    app.set_help_flag();
    app.require_subcommand(1);
    Parsed p;
    const auto threads = [&](CLI::App *c) {
        c->add_option("--threads", p.threads)->check(CLI::Range(0, 1024));
    };
    constexpr int64_t kMaxDim = 1000000;

    CLI::App *run = add_command(app, "run");
    run->add_option("OpName", p.positional);
    run->add_option("--in", p.run.in_dir)->required()->check([](const std::string &v) {
        return v.empty() ? std::string("empty directory name") : std::string();
    });
    run->add_option("--out", p.run.out_dir)->required()->check([](const std::string &v) {
        return v.empty() ? std::string("empty directory name") : std::string();
    });
    run->add_option("--device", p.run.device);
    run->add_option("--forget-bias", p.run.forget_bias)->check(finite_float());
    run->add_option("--cell-clip", p.run.cell_clip)->check(finite_float());
    run->add_flag("--use-peephole", p.run.use_peephole);
    threads(run);

    CLI::App *bench = add_command(app, "bench");
    BenchOptions &b = p.bench;
    bench->add_option("OpName", p.positional);
    CLI::Option *time = bench->add_option("--time", b.time)->check(CLI::Range(int64_t{1}, kMaxDim));
    // Required, but checked after <OpName> (below), so that the first thing missing is named.
    CLI::Option *batch = bench->add_option("--batch", b.batch)->check(CLI::Range(int64_t{1}, kMaxDim));
    CLI::Option *input = bench->add_option("--input", b.input)->check(CLI::Range(int64_t{0}, kMaxDim));
    CLI::Option *cell = bench->add_option("--cell", b.cell)->check(CLI::Range(int64_t{1}, kMaxDim));
    std::string dtype = "float32";
    bench->add_option("--dtype", dtype)->check(CLI::IsMember({"float32", "float16", "bfloat16"}));
    bench->add_flag("--use-peephole", b.use_peephole);
    bench->add_option("--device", b.device);
    bench->add_option("--reps", b.reps)->check(CLI::Range(1, 1000000));
    bench->add_option("--warmup", b.warmup)->check(CLI::Range(1, 1000000));
    bench->add_option("--seed", b.seed)->check(seed_value());
    bench->add_flag("--print-reps", b.print_reps);
    bench->add_option("--cpu-target", b.cpu_target);
    bench->add_option("--lengths", b.lengths)->check(CLI::IsMember({"full", "spread", "sorted"}));
    bench->add_flag("--against-padded", b.against_padded);
    bench->add_flag("--inference", b.inference);
    bench->add_flag("--side-by-side", b.side_by_side);
    threads(bench);

    CLI::App *list = add_command(app, "list");
    list->add_flag("--kernels", p.list_kernels);
    list->add_flag("--plans", p.list_plans);

    CLI::App *demo = add_command(app, "demo");
    demo->add_option("--steps", p.demo.steps)->check(CLI::Range(1, 1000000));
    demo->add_option("--seed", p.demo.seed)->check(seed_value());
    demo->add_option("--device", p.demo.device);
    threads(demo);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        // One line naming the option; "A subcommand is required" etc. for an unknown command.
        std::string what = e.what();
        if (!is_command(command)) what = "unknown command '" + command + "'";
        throw UsageError(is_command(command) ? command + ": " + what : what);
    }
    if (p.threads) set_num_threads(*p.threads);
    if (*run) {
        p.run.op = op_name_of("run", p.positional);
        std::printf("%s\n", run_op(p.run).c_str());
        return 0;
    }
    if (*bench) {
        b.op = op_name_of("bench", p.positional);
        const bool cell_op = b.op == "LSTMBlockCell" || b.op == "LSTMBlockCellGrad";
        if (cell_op && time->count() > 0 && b.time != 1)
            throw UsageError("--time: " + b.op + " runs one step (omit --time, or give 1)");
        if (!cell_op && time->count() == 0) throw UsageError("bench: missing --time T");
        if (batch->count() == 0) throw UsageError("bench: missing --batch B");
        if (input->count() == 0) throw UsageError("bench: missing --input I");
        if (cell->count() == 0) throw UsageError("bench: missing --cell H");
        b.dtype = dtype_named(dtype);
        b.threads = p.threads.value_or(0);
        if (!b.cpu_target.empty()) set_cpu_target(b.cpu_target);
        return cli::bench(b);
    }
    if (*list) {
        list_kernels(p.list_kernels);
        if (p.list_plans) list_plans();
        return 0;
    }
    if (p.demo.device != "auto") check_device(p.demo.device);
    return cli::demo(p.demo);
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
            for (DType dtype : kFloatDTypes) {
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
    std::printf("\nCPU targets (best first; <instruction set>@<table>: the instruction set with that\n"
                "tuning table, chosen only on the CPUs the table is for; check targets: for the tests;\n"
                "bf16 pairs: the bfloat16 products in pairs of bfloat16 products, vdpbf16ps;\n"
                "bf16 on AMX: the bfloat16 forward products on AMX tiles):\n");
    std::map<std::string, std::string> tables;  // the tuning tables compiled in, and where they were tuned
    for (const CpuTarget &t : cpu_targets()) {
        const std::string chosen = t.tuned_for.empty() || t.check_only ? ""
                                   : t.tuned_for_this_cpu          ? ", tuned for this CPU"
                                                                   : ", tuned for " + t.tuned_for + " only";
        fmt::print("  {:<26} {:<30} table {:<18} {}{}{}{}{}{}{}\n", t.name, t.halide_target, t.tuning_table,
                   t.runs_here ? "runs here" : "this CPU lacks " + t.missing, chosen,
                   t.check_only ? ", check target" : "", t.bf16_dot_products ? ", bf16 pairs" : "",
                   t.amx_products ? ", bf16 on AMX" : "",
                   t.other_dtypes_as.empty() ? "" : ", float32/float16 as " + t.other_dtypes_as,
                   t.name == in_use ? "  <- in use" : "");
        tables[t.tuning_table] = (t.tuned_for.empty() ? "" : "for " + t.tuned_for + ": ") + t.tuned_on;
    }
    std::printf("Tuning tables (blocklstm tune writes them; docs/tuning.md):\n");
    for (const auto &[table, tuned_on] : tables) fmt::print("  {:<18} {}\n", table, tuned_on);
    std::printf("CPU target in use: %s (%s)\n", in_use.c_str(),
                cpu_target_pinned() ? "pinned" : "automatic; pin with BLOCKLSTM_CPU_TARGET");
    if (cuda_built()) {
        const std::string devices = cuda_device_count() > 0
                                        ? std::to_string(cuda_device_count()) + " device(s), 0: " + cuda_device_name(0)
                                        : "no device (" + cuda_unavailable_reason() + ")";
        std::printf("\nCUDA: %s\nCUDA batched products: %s\n", devices.c_str(), cuda_gemm_backend().c_str());
        std::printf("CUDA steps: %s\n", cuda_step() == CudaStep::split
                                             ? "split (the default: the recurrent products on cuBLASLt; "
                                               "BLOCKLSTM_CUDA_STEP=fused fuses them)"
                                             : "fused (BLOCKLSTM_CUDA_STEP=fused)");
        std::printf("CUDA split steps' products: %s\n", cuda_step_product_backend().c_str());
        std::printf("CUDA graphs of the split time loops: %s\n",
                    cuda_graphs() ? "on (the default; BLOCKLSTM_CUDA_GRAPHS=0 turns them off)" : "off (BLOCKLSTM_CUDA_GRAPHS=0)");
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

// Each op's plan per device and dtype (OpInfo::plan), the ops and dtypes that share one together.
void list_plans() {
    std::printf("\nPlans (the kernel families an op call runs, in order; 1: once, L: once per time step\n"
                "(the cell ops: 1), C: once per chunk of 512 rows of the CPU's float32 weight gradient):\n");
    std::vector<std::pair<std::string, std::vector<std::string>>> plans;  // plan text, who runs it
    for (const OpInfo &op : ops())
        for (Device device : {Device::cpu, Device::cuda})
            for (DType dtype : kFloatDTypes) {
                std::string text;
                for (const OpPlanStep &s : op.plan(device, dtype))
                    text += fmt::format("    {:<15} {:<2} {}\n", s.family, s.times, s.does);
                const std::string who = op.name + " " + to_string(device) + " " + to_string(dtype);
                auto it = std::find_if(plans.begin(), plans.end(), [&](const auto &p) { return p.first == text; });
                if (it == plans.end()) plans.push_back({text, {who}});
                else it->second.push_back(who);
            }
    for (const auto &[text, who] : plans) fmt::print("  {}:\n{}", fmt::join(who, ", "), text);
}

// The library's version, the Halide it was built with, and what it runs.
void print_version() {
    std::vector<std::string> targets;
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets())
        targets.push_back(t.name + (t.check_only ? " (check target, for the tests)" : "") +
                          (t.runs_here ? "" : " (not on this CPU)"));
    fmt::print("blocklstm {} (kernels generated with Halide {})\nCPU targets: {}\nCUDA: {}\n",
               blocklstm::version(), blocklstm::halide_version(), fmt::join(targets, ", "),
               blocklstm::cuda_built() ? "built" : "not built");
    if (blocklstm::cuda_built() && blocklstm::cuda_device_count() > 0)
        fmt::print("CUDA products: {}; split steps' products: {}\n", blocklstm::cuda_gemm_backend(),
                   blocklstm::cuda_step_product_backend());
}

// The options that take no value (the others' next argument is their value).
bool is_flag(const std::string &option) {
    return option == "--use-peephole" || option == "--print-reps" || option == "--kernels" || option == "--plans" ||
           option == "--fresh";
}

// `blocklstm tune`: the tuner is a program of its own (blocklstm-tune, beside this one), so that
// only it links libHalide.
int run_tuner(int argc, char **argv) {
    std::error_code error;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
    const std::filesystem::path tuner = self.parent_path() / "blocklstm-tune";
    std::vector<char *> args{const_cast<char *>("blocklstm tune")};
    for (int k = 2; k < argc; ++k) args.push_back(argv[k]);
    args.push_back(nullptr);
    ::execv(tuner.c_str(), args.data());
    std::fprintf(stderr,
                 "blocklstm: tune: cannot run %s (%s): the tuner links libHalide, so it is not installed; "
                 "run `blocklstm tune` from a build tree (build/tools/blocklstm, CMake: BLOCKLSTM_BUILD_TOOLS)\n",
                 tuner.c_str(), std::strerror(errno));
    return 2;
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
    // Help: `blocklstm --help`, `blocklstm help [command]`, or --help / -h among a command's
    // options, but not as an option's value (`run ... --out -h` names a directory).
    auto is_help = [](const std::string &a) { return a == "--help" || a == "-h"; };
    if (is_help(command) || command == "help") {
        print_help(command == "help" && argc > 2 && is_command(argv[2]) ? argv[2] : "");
        return 0;
    }
    for (int k = 2; k < argc && is_command(command); ++k) {
        const std::string before = argv[k - 1];
        const bool value_of_option = k > 2 && before.rfind("--", 0) == 0 && before.find('=') == std::string::npos &&
                                     !is_flag(before);
        if (is_help(argv[k]) && !value_of_option) {
            print_help(command);
            return 0;
        }
    }
    if (command == "tune") return run_tuner(argc, argv);
    try {
        return parse_and_run(argc, argv, command);
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
