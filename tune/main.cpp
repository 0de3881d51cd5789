// blocklstm-tune's main: its options, the CPU target and table it tunes, and the tuning run, which
// drives the search (tune/search.h) with the kernels' measured times (tune/measure.cpp).
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>

#include <blocklstm/blocklstm.h>  // the CPU targets and CUDA devices as the runtime reads this machine

#include "tune/search.h"
#include "tune/tuner.h"

// The tuning tables this build was made with: {name, knob string, tuned on} (CMake).
#include "tuning_tables.inc"

namespace blocklstm::tune {

std::atomic<bool> interrupted{false};

namespace {

std::vector<LstmShape> parse_shapes(const std::string &text) {
    // Shapes are separated by ';' or spaces (`blocklstm list` shows a table's command with spaces:
    // ';' separates CMake's list items).
    std::vector<LstmShape> shapes;
    std::string spaced = text;
    std::replace(spaced.begin(), spaced.end(), ';', ' ');
    std::stringstream in(spaced);
    std::string item;
    while (in >> item) {
        LstmShape s{};
        char c1 = 0, c2 = 0, c3 = 0;
        std::stringstream one(item);
        if (!(one >> s.T >> c1 >> s.B >> c2 >> s.I >> c3 >> s.H) || c1 != ',' || c2 != ',' || c3 != ',' ||
            !one.eof() || s.T < 1 || s.B < 1 || s.I < 1 || s.H < 1)
            throw std::invalid_argument("--shapes: '" + item + "' is not T,B,I,H (four positive integers)");
        shapes.push_back(s);
    }
    if (shapes.empty()) throw std::invalid_argument("--shapes: no shape given (expected 'T,B,I,H;...')");
    return shapes;
}

// The CPU target the tuner times and whose table it tunes, as the runtime knows it
// (blocklstm::cpu_targets(): schedules/cpu_targets.json and the runtime's own reading of this CPU):
// by default the one the library runs here ("host": cpu_target_in_use(), a pin included), else
// the one --target names, by its name or by its Halide target (the first target of that
// instruction set whose table is for this CPU). Its kernels run here: a target this CPU cannot
// run would end in SIGILL.
blocklstm::CpuTarget cpu_target_to_tune(const std::string &wanted) {
    const std::vector<blocklstm::CpuTarget> targets = blocklstm::cpu_targets();
    const std::string name = wanted == "host" ? blocklstm::cpu_target_in_use() : wanted;
    const blocklstm::CpuTarget *found = nullptr;
    for (const blocklstm::CpuTarget &t : targets)
        if (t.name == name) found = &t;
    if (!found && !Halide::Target::validate_target_string(name))
        throw std::invalid_argument("--target: '" + name + "' is not a Halide target (e.g. x86-64-linux-avx2-fma-f16c)");
    // Compared as targets, not strings: Halide writes a target's features in its own order
    // (x86-64-linux-avx2-f16c-fma for the manifest's x86-64-linux-avx2-fma-f16c), and the tuner
    // passes its target to its autoscheduler children in that form.
    for (const blocklstm::CpuTarget &t : targets)
        if (!found && !t.check_only && Halide::Target(t.halide_target) == Halide::Target(name) &&
            t.tuned_for_this_cpu)
            found = &t;
    if (!found) {
        std::string names;
        for (const blocklstm::CpuTarget &t : targets)
            if (!t.check_only) names += (names.empty() ? "" : ", ") + t.name + " (" + t.halide_target + ")";
        throw std::invalid_argument("--target: " + name + " is none of this build's CPU targets: " + names +
                                    " (schedules/cpu_targets.json)");
    }
    if (!found->runs_here)
        throw std::invalid_argument("--target: " + found->halide_target + " needs " + found->missing +
                                    ", which this CPU lacks: the tuner times its kernels here");
    return *found;
}

struct BuiltTable {
    const char *name, *knobs, *tuned_on;
};

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    }
    return "unknown CPU";
}

// Why the GPU of --device cannot run kernels here ("" when it can). Halide's JIT aborts the
// process when it finds no driver, so the tool asks first: CUDA through the library's own
// reading of the driver, OpenCL (the GPU schedules' check on PoCL) through its loader.
std::string gpu_missing(const std::string &device) {
    if (device == "cuda") return blocklstm::cuda_device_count() > 0 ? "" : blocklstm::cuda_unavailable_reason();
    void *lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return std::string("no libOpenCL.so.1 (") + dlerror() + ")";
    using Platforms = int (*)(unsigned, void **, unsigned *);
    auto platforms = reinterpret_cast<Platforms>(dlsym(lib, "clGetPlatformIDs"));
    unsigned n = 0;
    if (!platforms) return "libOpenCL.so.1 lacks clGetPlatformIDs";
    if (const int e = platforms(0, nullptr, &n); e != 0) return "clGetPlatformIDs failed with OpenCL error " + std::to_string(e);
    // The handle stays open: Halide's JIT opens the same library next.
    return n == 0 ? "no OpenCL platform (PoCL: Debian's pocl-opencl-icd)" : "";
}

}  // namespace

std::string device_name(const Halide::Target &t) {
    if (t.has_feature(Halide::Target::OpenCL)) return "OpenCL on " + cpu_model() + " (not a GPU: a check of the tuner)";
    if (!t.has_feature(Halide::Target::CUDA)) return cpu_model();
    return blocklstm::cuda_device_count() > 0 ? blocklstm::cuda_device_name(0) : "an NVIDIA GPU";
}

void Tuner::write_table(const Table &t, int tried) const {
    // Kernels timed on PoCL say nothing about a GPU: such a table is marked not measured.
    const bool measured = !target_.has_feature(Halide::Target::OpenCL);
    std::string tuned_on = device_name(target_);
    if (!t.gpu) tuned_on += fmt::format(", {} logical CPUs", std::thread::hardware_concurrency());
    tuned_on += " (" + target_.to_string() + ")";
    if (!t.gpu) tuned_on += fmt::format(", {} threads", o_.threads ? std::to_string(o_.threads) : std::string("all"));
    tuned_on += fmt::format(": blocklstm tune {}--minutes {} --shapes '{}', {} candidates",
                            t.gpu ? "--device " + o_.device + " " : std::string(), o_.minutes, o_.shapes, tried);
    write_table_file(o_.out, t, measured, tuned_on);
}

int Tuner::run_search() {
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.minutes * 60));
    load_log();
    fmt::print("Tuning table {} for {} on {}{}, shapes {}, {} min\n", base_.table, target_.to_string(),
               device_name(target_),
               base_.gpu ? "" : fmt::format(" ({} threads)", o_.threads ? std::to_string(o_.threads) : std::string("all")),
               o_.shapes, o_.minutes);
    fmt::print("Base: {}\n", knob_string(base_));
    fmt::print("Log: {}   table: {}\n\n", o_.log, o_.out);
    Table best = base_;
    if (!cost(base_, "base")) {
        if (interrupted) {
            std::cerr << "blocklstm tune: interrupted while timing the base table; nothing written\n";
            return 130;
        }
        std::cerr << "blocklstm tune: the base table's kernels did not run (above); nothing to tune from\n";
        return 1;
    }
    best_cost_ = 1.0;
    // A candidate whose estimate beats the best is timed side by side with it before it is kept.
    auto consider = [&](const Table &t, const std::string &label) {
        if (out_of_time()) return false;
        const std::optional<double> c = cost(t, label);
        if (!c || !improves(*c)) return false;
        const std::pair<std::string, std::string> pair{knob_string(best), knob_string(t)};
        auto it = verdicts_.find(pair);
        std::string from = "";
        if (it == verdicts_.end()) {
            const std::optional<double> ratio = verdict(best, t);
            if (!ratio && interrupted) return false;
            // A failed timing (said why) refuses the candidate for good.
            const double r = ratio.value_or(std::numeric_limits<double>::infinity());
            it = verdicts_.emplace(pair, Verdict{r, false}).first;
            if (ratio) log_verdict(pair, r);
        } else if (!it->second.shown) {
            from = " (from the log)";
        }
        const bool kept = improves_by_margin(it->second.ratio);
        if (!it->second.shown && std::isfinite(it->second.ratio))
            fmt::print("        {} with the best: {:.3f}x its time{}{}\n",
                       in_ops() ? "in the ops, alternated" : "side by side", it->second.ratio,
                       kept ? " (kept)" : ", not kept", from);
        it->second.shown = true;
        std::fflush(stdout);
        if (!kept) return false;
        best_cost_ = *c;
        best = t;
        write_table(best, tried_);
        return true;
    };
    // The search; `consider` keeps its best in `best`.
    search(base_, {.reads = [&](const std::string &knob) { return read(knob); },
                   .consider = consider,
                   .stop = [&] { return out_of_time(); }});
    if (interrupted) fmt::print("\nInterrupted: the best table so far is kept; run again with --log {} to resume.\n", o_.log);
    else if (Clock::now() >= deadline_) fmt::print("\nTime budget spent ({} min).\n", o_.minutes);
    else fmt::print("\nConverged: no single knob improves the best table.\n");
    // A run that kept no move (out of time at once, say) leaves a table an earlier run wrote at
    // --out as it is: the base table would replace a tuned one.
    const bool keep_out = knob_string(best) == knob_string(base_) && std::filesystem::exists(o_.out);
    if (!keep_out) write_table(best, tried_);
    fmt::print("Tuned: {}\n", knob_string(best));
    const std::optional<double> timed = report(best);
    const std::string file = std::filesystem::absolute(o_.out).string();
    if (keep_out) {
        fmt::print("\nNo move kept: {} stays as it was (remove it, or give another --out, to write the base table).\n",
                   o_.out);
        return interrupted ? 130 : 0;
    }
    fmt::print("\nWrote {}: {:.3f}x the base table's time (geometric mean over the shapes, {}).\n", o_.out,
               timed.value_or(best_cost_),
               !timed     ? "estimated from the kernels"
               : in_ops() ? "the ops timed with each table's kernels, alternated"
                          : "estimated from the kernels, timed side by side");
    if (!best.gpu)
        fmt::print("Confirm it on a build with it (its kernels compiled ahead of time, both builds timed): "
                   "tune/confirm.sh {}\n", file);
    if (!target_.has_feature(Halide::Target::OpenCL))  // an OpenCL check's table is not for building
        fmt::print("Build with it: cmake -B build -DBLOCKLSTM_TUNING={0} && cmake --build build\n", file);
    return interrupted ? 130 : 0;  // as --baseline: a Ctrl-C ends with 128 + SIGINT
}

int Tuner::run_compare() {
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.minutes * 60));
    const Table other = read_table_file(o_.compare, base_.gpu);
    if (other.table != base_.table)
        throw std::invalid_argument("--compare: the table is " + other.table + ", the base " + base_.table);
    if (knob_string(other) == knob_string(base_))
        throw std::invalid_argument("--compare: " + o_.compare + " has the base table's knobs: nothing to compare");
    load_log();
    fmt::print("Comparing {} with the base table {} on {}{}, shapes {}\n", o_.compare, base_.table, device_name(target_),
               base_.gpu ? "" : fmt::format(" ({} threads)", o_.threads ? std::to_string(o_.threads) : std::string("all")),
               o_.shapes);
    fmt::print("Base:     {}\nCompared: {}\n\n", knob_string(base_), knob_string(other));
    if (!cost(base_, "base") || !cost(other, "compared")) {
        std::cerr << "blocklstm tune: " << (interrupted ? "interrupted" : "a kernel did not run (above)") << "\n";
        return interrupted ? 130 : 1;
    }
    const std::optional<double> timed = report(other);
    if (!timed) return interrupted ? 130 : 1;
    fmt::print("\n{}: {:.3f}x the base table's time (geometric mean over the shapes, {}).\n", o_.compare, *timed,
               in_ops() ? "the ops timed with each table's kernels, alternated" : "its kernels timed side by side");
    return 0;
}

}  // namespace blocklstm::tune

int main(int argc, char **argv) {
    using namespace blocklstm::tune;
    // An exception that ends the process (out of a plugin's destructor) says what it was.
    std::set_terminate([] {
        // On one line: the parent of a child that dies keeps its last line.
        const auto say = [](std::string what) {
            std::replace(what.begin(), what.end(), '\n', ' ');
            std::cerr << "blocklstm tune: aborted by an exception it cannot catch: " << what << std::endl;
        };
        try {
            if (std::current_exception()) std::rethrow_exception(std::current_exception());
        } catch (const Halide::Error &e) {
            say(e.what());
        } catch (const std::exception &e) {
            say(e.what());
        } catch (...) {
        }
        std::abort();
    });
    Options o;
    CLI::App app("blocklstm tune: fit the schedules' tuning table to this machine's CPU or GPU (docs/tuning.md)");
    app.add_option("--shapes", o.shapes, "LSTM shapes 'T,B,I,H;...' to time the kernels on (default: the "
                                         "benchmark's, bench/bench.py's or with --device cuda gpu_bench.py's)");
    app.add_option("--minutes", o.minutes, "time budget of the search")->check(CLI::Range(0.0, 100000.0));
    app.add_option("--families", o.families, "kernel families to tune (default: all but, on a GPU, the batched "
                                             "products cuBLAS does)")->delimiter(',');
    app.add_option("--target", o.target, "Halide target to tune for (default: the build's best CPU target this CPU "
                                         "runs, as the runtime picks it; with --device cuda "
                                         "host-cuda-cuda_capability_80, as the CUDA kernels are built)");
    app.add_option("--from", o.from, "table to start from (default: the one this build used for the target)");
    app.add_option("--out", o.out, "table to write (default: ./<table>.json)");
    app.add_option("--log", o.log, "CSV log of every candidate, read back to resume (default: <out>.csv)");
    app.add_option("--threads", o.threads, "threads of the kernels (default: all)")->check(CLI::Range(1, 1024));
    app.add_option("--baseline", o.baseline, "'autoschedulers': time Halide's autoschedulers instead of tuning")
        ->check(CLI::IsMember({"autoschedulers"}));
    app.add_option("--autoscheduler", o.autoscheduler)  // internal: the child of --baseline
        ->check(CLI::IsMember([] {
            std::vector<std::string> all = kCpuAutoschedulers;
            all.insert(all.end(), kGpuAutoschedulers.begin(), kGpuAutoschedulers.end());
            return all;
        }()))
        ->group("");
    app.add_option("--schedule-file", o.schedule_file)->group("");
    app.add_option("--verdicts", o.verdicts, "what keeps a move: ops (the CPU's default: BlockLSTM and BlockLSTMGrad "
                                             "timed with each table's kernels swapped in, alternated) or kernels (the "
                                             "kernels it changes timed side by side; the GPU's only way)")
        ->check(CLI::IsMember({"ops", "kernels"}));
    app.add_option("--compare", o.compare, "a table file to time against the base table (--from, or the built one) "
                                           "instead of searching: each kernel, then the ops with each table's kernels; "
                                           "nothing written but the log");
    app.add_flag("--fresh", o.fresh, "ignore an existing log (start over)");
    app.add_option("--seed", o.seed, "seed of the random inputs");
    app.add_option("--device", o.device, "cpu, cuda (the CUDA table, on this machine's NVIDIA GPU), or opencl (the "
                                         "GPU schedules on an OpenCL device such as PoCL: a check of the tuner, "
                                         "not a tuning)")
        ->check(CLI::IsMember({"cpu", "cuda", "opencl"}));
    // A later value of an option replaces an earlier one (scripts/gpu_check.sh puts its defaults
    // first and the caller's after them).
    for (CLI::Option *opt : app.get_options())
        if (opt->get_name() != "--families" && opt->get_name() != "--help") opt->take_last();
    try {
        app.parse(argc, argv);
        if (!std::isfinite(o.minutes)) throw CLI::ValidationError("--minutes", "'nan' is not a number of minutes");
    } catch (const CLI::Success &e) {  // --help
        return app.exit(e);
    } catch (const CLI::ParseError &e) {
        // Usage errors as the blocklstm tool reports them: one line, exit code 2.
        std::cerr << "blocklstm tune: " << e.what() << " (see blocklstm tune --help)\n";
        return 2;
    }
    try {
        if (o.threads > 0) setenv("HL_NUM_THREADS", std::to_string(o.threads).c_str(), 1);
        // A table tuned on the CPU shapes alone (H <= 512) picked 1 x 1 step tiles on an H100 that
        // ran BlockLSTM 1.5x slower at H = 2048: the GPU's table is tuned on the GPU's shapes.
        if (o.shapes.empty())
            o.shapes = o.device == "cuda" ? "100,64,512,512;100,64,1024,1024;50,128,2048,2048;200,16,256,256;100,32,256,256"
                                          : "100,64,512,512;200,16,256,256;100,32,256,256;50,8,128,128";
        const bool gpu = o.device != "cpu";
        // The GPU schedules (CUDA, and their OpenCL twins) read one table; a CPU target its own.
        std::optional<blocklstm::CpuTarget> cpu_target;
        if (!gpu) cpu_target = cpu_target_to_tune(o.target);
        if (o.verdicts.empty()) o.verdicts = gpu ? "kernels" : "ops";
        if (gpu && o.verdicts == "ops")
            throw std::invalid_argument("--verdicts ops: only on the CPU (--device " + o.device +
                                        " times its kernels side by side: --verdicts kernels)");
        // The kernels' loops run on the library's pool (ops_pool), on the tuner's threads.
        if (!gpu && o.threads > 0) blocklstm::set_num_threads(o.threads);
        // The ops run the tuned target's kernels where the tuner has not replaced them.
        if (!gpu && o.verdicts == "ops" && o.autoscheduler.empty() && o.baseline.empty())
            blocklstm::set_cpu_target(cpu_target->name);
        std::string target_text = gpu ? o.target : cpu_target->halide_target;
        if (target_text == "host" && o.device == "cuda") target_text = "host-cuda-cuda_capability_80";
        if (target_text == "host" && o.device == "opencl") target_text = "host-opencl";
        if (target_text != "host" && !Halide::Target::validate_target_string(target_text))
            throw std::invalid_argument("--target: '" + target_text + "' is not a Halide target (e.g. x86-64-linux-avx2-fma-f16c)");
        const Halide::Target target = target_text != "host" ? Halide::Target(target_text) : Halide::get_host_target();
        const bool fits = o.device == "cuda"     ? target.has_feature(Halide::Target::CUDA)
                          : o.device == "opencl" ? target.has_feature(Halide::Target::OpenCL)
                                                 : !target.has_gpu_feature();
        if (!fits)
            throw std::invalid_argument("--target: " + target.to_string() + " does not fit --device " + o.device +
                                        " (cpu: no GPU feature, cuda: cuda, opencl: opencl)");
        const std::vector<LstmShape> shapes = parse_shapes(o.shapes);
        o.shapes = "";  // as parsed (any whitespace the option had never reaches the table's JSON)
        for (const LstmShape &s : shapes) o.shapes += (o.shapes.empty() ? "" : " ") + s.text();
        if (gpu)
            if (const std::string why = gpu_missing(o.device); !why.empty())
                throw std::invalid_argument("--device " + o.device + ": cannot run kernels here: " + why);
        const std::vector<Family> families = select_families(gpu ? gpu_families() : cpu_families(), o.families);
        const std::string table = gpu ? "cuda" : cpu_target->tuning_table;
        Table base;
        if (!o.from.empty()) {
            base = read_table_file(o.from, gpu);
            if (base.table != table)
                throw std::invalid_argument("--from: the table is " + base.table + ", target " + target.to_string() +
                                            " uses " + table);
        } else if (!gpu) {
            base = parse_table(false, table, cpu_target->tuning);
        } else {
            const BuiltTable tables[] = {BLOCKLSTM_BUILT_TUNING_TABLES};
            const BuiltTable *found = nullptr;
            for (const BuiltTable &t : tables)
                if (table == t.name) found = &t;
            if (!found) throw std::invalid_argument("this build has no tuning table " + table + " (give --from FILE)");
            base = parse_table(gpu, found->name, found->knobs);
        }
        // An OpenCL check's table is not the CUDA one: its own default name, so it never overwrites or
        // resumes a CUDA run's files.
        if (o.out.empty()) o.out = table + (o.device == "opencl" ? "-opencl-check" : "") + ".json";
        if (o.log.empty()) o.log = o.out + ".csv";
        if (o.autoscheduler.empty() && o.baseline.empty() && o.compare.empty()) check_writable("--out", o.out + ".tmp");
        if (o.autoscheduler.empty()) check_writable("--log", o.log);
        if (o.autoscheduler.empty()) std::signal(SIGINT, [](int) { interrupted = true; });  // a child just ends
        // As the runtime does (runtime/src/cuda_driver.cpp): device memory is kept between calls,
        // so a kernel's time has no allocation in it.
        Halide::Internal::JITSharedRuntime::reuse_device_allocations(true);
        // The JIT runtimes hold the GPU context, the compiled GPU programs and that memory until
        // released, after the tuner's buffers have freed theirs.
        struct Release {
            ~Release() { Halide::Internal::JITSharedRuntime::release_all(); }
        } release;
        Tuner tuner(o, target, families, shapes, base);
        if (!o.autoscheduler.empty()) tuner.run_one_autoscheduler();
        if (!o.compare.empty()) return tuner.run_compare();
        return o.baseline.empty() ? tuner.run_search() : tuner.run_autoscheduler_baselines();
    } catch (const Halide::Error &e) {
        std::cerr << "blocklstm tune: " << e.what() << "\n";
        return 1;
    } catch (const std::exception &e) {
        std::cerr << "blocklstm tune: " << e.what() << "\n";
        return 2;
    }
}
