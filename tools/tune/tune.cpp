// blocklstm-tune (run as `blocklstm tune`): fits a tuning table to this machine, the CPU's or
// (--device cuda) the GPU schedules' on its NVIDIA GPU. It JIT-compiles the generators of generators/ through libHalide with candidate knob values
// (schedules/tuning.h), checks every candidate's outputs against the current table's kernel on
// the same random inputs, times the kernel families (tools/tune/families.h) on the shapes given,
// and searches the knobs: a coarse grid over the register (or GPU thread) tile, then coordinate descent around
// the best, until the time budget is spent. Every candidate is logged to CSV; a run given the
// same log resumes where it stopped. The best table so far is written after every improvement.
// With --baseline autoschedulers it times Halide's own autoschedulers on the same algorithms
// instead. Only this tool links libHalide; the library and apps do not.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "Halide.h"
#include "schedules/tuning.h"
#include "tools/tune/families.h"

#include <blocklstm/blocklstm.h>  // the CPU targets as the runtime reads this CPU: which one it runs

// The tuning tables this build was made with: {name, knob string, tuned on} (CMake).
#include "tuning_tables.inc"

namespace blocklstm::tune {
namespace {

using Clock = std::chrono::steady_clock;

// A tuning table being tuned: its name and every knob's value, in the order of its device's knob
// list (schedules/tuning.h: cpu_knobs or cuda_knobs).
struct Table {
    std::string table;
    bool gpu = false;
    std::vector<std::pair<std::string, int>> knobs;

    int get(const std::string &name) const {
        for (const auto &[k, v] : knobs)
            if (k == name) return v;
        throw std::logic_error("no knob " + name + " in table " + table);
    }
    void set(const std::string &name, int value) {
        for (auto &[k, v] : knobs)
            if (k == name) v = value;
    }
};

std::string knob_string(const Table &t) {
    std::string s;
    for (const auto &[k, v] : t.knobs) s += (s.empty() ? "" : ",") + k + ":" + std::to_string(v);
    return s;
}

// A knob string checked against the knobs' ranges and the rules of the device: the generators'
// own parser, so the tuner never tries what the build would refuse (it throws, saying why).
template <typename Tuning>
Table to_table(const Tuning &t, const std::vector<schedules::Knob<Tuning>> &list, bool gpu) {
    Table out{t.table, gpu, {}};
    for (const auto &k : list) out.knobs.emplace_back(k.name, t.*k.field);
    return out;
}
Table parse_table(bool gpu, const std::string &table, const std::string &knobs) {
    if (gpu) return to_table(schedules::parse_cuda_tuning(table, knobs), schedules::cuda_knobs(), true);
    return to_table(schedules::parse_cpu_tuning(table, knobs), schedules::cpu_knobs(), false);
}
std::string rule_broken(const Table &t) {
    try {
        parse_table(t.gpu, t.table, knob_string(t));
        return "";
    } catch (const std::invalid_argument &e) {
        return e.what();
    }
}

std::atomic<bool> interrupted{false};

struct Options {
    std::string shapes;  // default: the CPU peer benchmark's shapes, with --device cuda the GPU one's
    double minutes = 5;
    std::vector<std::string> families;
    std::string target = "host";
    std::string from, out, log;
    int threads = 0;
    std::string baseline;
    std::string autoscheduler;  // internal: time this one autoscheduler and print the result (a child)
    std::string schedule_file;  // internal: where that child writes the schedule it chose
    bool fresh = false;
    unsigned seed = 1;
    std::string device = "cpu";  // cpu | cuda | opencl (the GPU schedules on an OpenCL device)
};

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
    for (const blocklstm::CpuTarget &t : targets)
        if (!found && !t.check_only && t.halide_target == name && t.tuned_for_this_cpu) found = &t;
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

// The knobs of a table file (its "knobs" object of integers) and its name.
Table read_table_file(const std::string &path, bool gpu) {
    std::ifstream in(path);
    if (!in) throw std::invalid_argument("--from: cannot read '" + path + "'");
    std::stringstream text;
    text << in.rdbuf();
    const std::string json = text.str();
    auto fail = [&](const std::string &what) { throw std::invalid_argument("--from: '" + path + "' " + what); };
    // By hand: a regex over the whole file recurses once per character (and crashed on 40 KB).
    const size_t first = json.find_first_not_of(" \t\r\n"), last = json.find_last_not_of(" \t\r\n");
    if (first == std::string::npos || json[first] != '{' || json[last] != '}')
        fail("is not one JSON object (expected {...} as blocklstm tune writes it)");
    std::smatch m;
    if (!std::regex_search(json, m, std::regex("\"table\"\\s*:\\s*\"([^\"]+)\"")))
        fail("has no \"table\" name (expected e.g. \"table\": \"x86-64-avx2\")");
    const std::string table = m[1];
    if (!std::regex_search(json, m, std::regex("\"knobs\"\\s*:\\s*\\{([^{}]*)\\}")))
        fail("has no \"knobs\" object of \"name\": value members");
    // Each member as "name": value, the value as written: the knobs' own check then says what is
    // wrong with it (a fraction, a string, true).
    const std::string body = m[1];
    std::string knobs;
    std::stringstream members(body);
    for (std::string member; std::getline(members, member, ',');) {
        if (!std::regex_match(member, m, std::regex("\\s*\"(\\w+)\"\\s*:\\s*(\\S+)\\s*")))
            fail("has a knobs member '" + member + "': expected \"name\": integer");
        knobs += (knobs.empty() ? "" : ",") + m[1].str() + ":" + m[2].str();
    }
    return parse_table(gpu, table, knobs);
}

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    }
    return "unknown CPU";
}

// `text` inside a JSON string: quotes, backslashes and control characters escaped.
std::string json_text(const std::string &text) {
    std::string out;
    for (const char c : text) {
        if (c == '"' || c == '\\') out += std::string("\\") + c;
        else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        else out += c;
    }
    return out;
}

// Fails at once, not minutes into a search, when `path` cannot be written; leaves it as it was.
void check_writable(const std::string &option, const std::string &path) {
    std::error_code ec;
    const bool existed = std::filesystem::exists(path, ec);
    std::ofstream file(path, std::ios::app);
    const int error = errno;
    const bool ok = static_cast<bool>(file);
    file.close();
    if (!existed) std::filesystem::remove(path, ec);
    if (!ok) throw std::invalid_argument(option + ": cannot write " + path + " (" + std::strerror(error) + ")");
}

std::string today() {
    const std::time_t now = std::time(nullptr);
    char buf[16];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", std::localtime(&now));
    return buf;
}

// The knobs a family reads, as a string: the key of its compiled kernels and timings.
std::string relevant(const Family &f, const Table &t) {
    std::string s;
    for (const auto &[k, v] : t.knobs) {
        if (std::find(f.knobs.begin(), f.knobs.end(), k) == f.knobs.end()) continue;
        s += (s.empty() ? "" : ",") + k + ":" + std::to_string(v);
    }
    return s;
}

// Why the GPU of --device cannot run kernels here ("" when it can). Halide's JIT aborts the
// process when it finds no driver, so the tool asks the driver itself first.
std::string gpu_missing(const std::string &device) {
    const bool cuda = device == "cuda";
    const char *library = cuda ? "libcuda.so.1" : "libOpenCL.so.1";
    void *lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return std::string("no ") + library + " (" + dlerror() + ")";
    int count = 0;
    std::string why;
    if (cuda) {
        using Init = int (*)(unsigned);
        using Count = int (*)(int *);
        auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
        auto get_count = reinterpret_cast<Count>(dlsym(lib, "cuDeviceGetCount"));
        if (!init || !get_count) why = "libcuda.so.1 lacks cuInit or cuDeviceGetCount";
        else if (const int e = init(0); e != 0) why = "cuInit failed with CUDA error " + std::to_string(e);
        else if (const int e2 = get_count(&count); e2 != 0) why = "cuDeviceGetCount failed with CUDA error " + std::to_string(e2);
    } else {
        using Platforms = int (*)(unsigned, void **, unsigned *);
        auto platforms = reinterpret_cast<Platforms>(dlsym(lib, "clGetPlatformIDs"));
        unsigned n = 0;
        if (!platforms) why = "libOpenCL.so.1 lacks clGetPlatformIDs";
        else if (const int e = platforms(0, nullptr, &n); e != 0) why = "clGetPlatformIDs failed with OpenCL error " + std::to_string(e);
        count = int(n);
    }
    // The handle stays open: a driver initialised here may have started threads in it, and
    // Halide's JIT opens the same library next.
    if (why.empty() && count == 0) why = cuda ? "no CUDA device" : "no OpenCL platform (PoCL: Debian's pocl-opencl-icd)";
    return why;
}

// What the kernels ran on, for the table's tuned_on: the CPU, or the GPU nvidia-smi names.
std::string device_name(const Halide::Target &t) {
    if (t.has_feature(Halide::Target::OpenCL)) return "OpenCL on " + cpu_model() + " (not a GPU: a check of the tuner)";
    if (!t.has_feature(Halide::Target::CUDA)) return cpu_model();
    std::string name;
    if (FILE *p = popen("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null", "r")) {
        char line[256];
        if (std::fgets(line, sizeof line, p)) name = line;
        pclose(p);
    }
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    return name.empty() ? "an NVIDIA GPU (nvidia-smi gave no name)" : name;
}

// One family compiled with one set of knobs (or one autoscheduler).
struct Compiled {
    Halide::Internal::AbstractGeneratorPtr generator;
    Halide::Pipeline pipeline;
    std::vector<std::string> outputs;  // output buffer names in the pipeline's order
};

// The buffers of one call in the generator's order: inputs bound to its Parameters, outputs
// (a Tuple output's buffers named <output>.<k>) returned as a Realization's buffers.
std::vector<Halide::Buffer<>> bind(Compiled &c, Call &call) {
    std::vector<Halide::Buffer<>> outs;
    for (const auto &info : c.generator->arginfos()) {
        if (info.dir == Halide::Internal::ArgInfoDirection::Input) {
            Halide::Parameter p = c.generator->input_parameter(info.name).at(0);
            if (info.kind == Halide::Internal::ArgInfoKind::Buffer) p.set_buffer(call.buffers.at(info.name));
            else p.set_scalar<float>(call.scalars.at(info.name));
        } else {
            if (info.types.size() == 1) outs.push_back(call.buffers.at(info.name));
            else
                for (size_t k = 0; k < info.types.size(); ++k)
                    outs.push_back(call.buffers.at(info.name + "." + std::to_string(k)));
        }
    }
    return outs;
}

class Tuner {
public:
    Tuner(Options o, Halide::Target target, std::vector<Family> families, std::vector<LstmShape> shapes,
          Table base)
        : o_(std::move(o)), target_(target), families_(std::move(families)), shapes_(std::move(shapes)),
          base_(std::move(base)) {}

    int run_search();
    int run_autoscheduler_baselines();
    // The child of run_autoscheduler_baselines: one autoscheduler, one family, one shape; ends
    // the process.
    [[noreturn]] void run_one_autoscheduler();

private:
    struct Key {
        std::string family, shape, knobs;
        bool operator<(const Key &k) const {
            return std::tie(family, shape, knobs) < std::tie(k.family, k.shape, k.knobs);
        }
    };
    struct Result {
        bool ok = false;
        double ms = 0;
        std::string why;  // a failed candidate: what went wrong
    };

    Compiled compile(const Family &f, const std::string &table, const std::string &knobs,
                     const std::string &autoscheduler = "");
    Call &call(const Family &f, const LstmShape &s);
    // What a kernel's first run does with its outputs: keeps them as the reference (the base
    // table), compares them with it (a candidate), or neither (a kernel checked before).
    enum class Outputs { store, compare, ignore };
    // Kernel times (ms) taken together, overriding the stored ones (results_).
    using Times = std::map<Key, double>;

    Compiled &kernel(const Family &f, const Table &t);
    Result measure(Compiled &c, const Family &f, const LstmShape &s, Outputs outputs);
    Result compile_and_measure(const Family &f, const LstmShape &s, const Table &t, Outputs outputs);
    // A kernel's time: from `fresh` where it has it, else the stored one.
    double time_ms(const Key &key, const Times &fresh) const {
        const auto it = fresh.find(key);
        return it != fresh.end() ? it->second : results_.at(key).ms;
    }
    Result family_time(const Family &f, const LstmShape &s, const Table &t);
    // An autoscheduler's kernel for f at s, checked and timed; the schedule it chose goes to `path`.
    Result autoscheduled_time(const Family &f, const LstmShape &s, const std::string &name, const std::string &path);
    Result autoscheduled_time_in_child(const Family &f, const LstmShape &s, const std::string &name);
    // Where the autoscheduler's schedule for f at s goes: beside the log.
    std::string schedule_path(const Family &f, const LstmShape &s, const std::string &name) const {
        return o_.log + ".schedules/" + f.name + "_" + s.text() + "_" + name + ".h";
    }
    std::optional<double> cost(const Table &t, const std::string &label);
    double op_ms(const Table &t, const LstmShape &s, int which, const Times &fresh = {});
    std::optional<Times> side_by_side(const Table &a, const Table &b);
    double relative(const Table &a, const Table &b, const Times &fresh);
    void load_log();
    std::ofstream &log_file();
    void log(const Key &k, const Result &r);
    void log_verdict(const std::pair<std::string, std::string> &pair, double ratio);
    // What a verdict depends on besides the two tables: the shapes, the families, the threads.
    std::string verdict_scope() const {
        std::string scope = fmt::format("threads:{}", o_.threads);
        for (const LstmShape &s : shapes_) scope += ";" + s.text();
        for (const Family &f : families_) scope += "|" + f.name;
        return scope;
    }
    void write_table(const Table &t, int tried) const;
    std::optional<double> report(const Table &best);
    std::vector<std::pair<Table, std::string>> grid(const Table &best) const;
    // Whether a family being tuned reads the knob: the others leave every kernel unchanged, so
    // the search does not move them.
    bool read(const std::string &knob) const {
        return std::any_of(families_.begin(), families_.end(), [&](const Family &f) {
            return std::find(f.knobs.begin(), f.knobs.end(), knob) != f.knobs.end();
        });
    }
    // A candidate is kept when it beats the best by more than the timing noise (1 %): first by
    // its estimate (both estimates from the stored times, relative to the base), then timed side
    // by side with the best. The base (cost 1) is the first best.
    bool improves(double c) const { return c < best_cost_ * 0.99; }
    bool out_of_time() const { return interrupted || Clock::now() >= deadline_; }
    double minutes_left() const {
        return std::max(0.0, std::chrono::duration<double>(deadline_ - Clock::now()).count() / 60);
    }

    Options o_;
    Halide::Target target_;
    std::vector<Family> families_;
    std::vector<LstmShape> shapes_;
    Table base_;
    Clock::time_point deadline_;
    std::map<Key, Result> results_;                    // every measurement, also from the log
    std::map<std::string, Compiled> kernels_;          // family + knobs -> compiled
    std::map<std::string, Call> calls_;                // family + shape -> inputs
    std::map<std::string, std::vector<Halide::Buffer<>>> expected_;  // the base table's outputs
    std::ofstream log_;
    double best_cost_ = 1.0;  // the best table's estimate
    std::map<std::string, double> costs_;  // knob string -> cost, of every table costed
    // Side-by-side verdicts, (best, candidate) knob strings -> the candidate's time over the
    // best's: a later pass of the descent, or a resumed run (they are logged), meets them again.
    struct Verdict {
        double ratio;
        bool shown;  // printed in this run (one read from the log is printed when first used)
    };
    std::map<std::pair<std::string, std::string>, Verdict> verdicts_;
    int tried_ = 0;
};

Compiled Tuner::compile(const Family &f, const std::string &table, const std::string &knobs,
                        const std::string &autoscheduler) {
    Halide::GeneratorContext context(target_, Halide::AutoschedulerParams(autoscheduler));
    Compiled c;
    c.generator = Halide::Internal::GeneratorRegistry::create(f.generator, context);
    if (!c.generator) throw std::runtime_error("no generator '" + f.generator + "' in this tool");
    Halide::GeneratorParamsMap params = f.params;
    params["tuning_table"] = table;
    params["tuning"] = knobs;
    c.generator->set_generatorparam_values(params);
    c.pipeline = c.generator->build_pipeline();
    for (const auto &info : c.generator->arginfos()) {
        if (info.dir != Halide::Internal::ArgInfoDirection::Output) continue;
        if (info.types.size() == 1) c.outputs.push_back(info.name);
        else
            for (size_t k = 0; k < info.types.size(); ++k) c.outputs.push_back(info.name + "." + std::to_string(k));
    }
    return c;
}

Call &Tuner::call(const Family &f, const LstmShape &s) {
    const std::string key = f.name + "@" + s.text();
    auto it = calls_.find(key);
    if (it != calls_.end()) return it->second;
    std::mt19937 rng(o_.seed);
    return calls_.emplace(key, f.make(s, rng)).first->second;
}

// Runs the kernel once (its outputs kept, compared or ignored: `outputs`), then times it:
// the best of at least 5 runs and 0.2 s (a small step kernel runs thousands of times: the best of
// 50 runs of identical kernels came out 20 % apart).
Tuner::Result Tuner::measure(Compiled &c, const Family &f, const LstmShape &s, Outputs outputs) {
    Call &inputs = call(f, s);
    const bool gpu = target_.has_gpu_feature();
    // On a GPU the buffers go to the device on their first call and stay there: only the
    // outputs come back, to be checked, and a time ends when the device is done.
    if (gpu)
        for (auto &[name, b] : inputs.buffers)
            if (!b.has_device_allocation()) b.set_host_dirty(true);
    std::vector<Halide::Buffer<>> outs = bind(c, inputs);
    Halide::Realization r(outs);
    // Every kernel's first run starts from NaN outputs, so an output it leaves unwritten (a call
    // Halide took for a bounds query, a tile that misses an edge) is caught rather than passing
    // on the values an earlier kernel left there. Ignored outputs: the first run only warms up.
    const bool check = outputs != Outputs::ignore;
    for (auto &b : outs) {
        if (!b.data() || !check) continue;
        if (gpu) b.set_device_dirty(false);  // the last timing's values: overwritten here
        Halide::Buffer<float>(b).fill(std::numeric_limits<float>::quiet_NaN());
        if (gpu) {
            b.set_host_dirty(true);
            if (b.copy_to_device(Halide::DeviceAPI::Default_GPU, target_) != 0)
                return {false, 0, "copying an output to the device failed"};
        }
    }
    c.pipeline.realize(r, target_);
    if (gpu && check)
        for (size_t k = 0; k < outs.size(); ++k)
            if (outs[k].data() && outs[k].copy_to_host() != 0)
                return {false, 0, fmt::format("copying output {} from the device failed", c.outputs[k])};
    const std::string key = f.name + "@" + s.text();
    if (outputs == Outputs::store) {
        std::vector<Halide::Buffer<>> copies;
        for (size_t k = 0; k < outs.size(); ++k) {
            bool written = true;
            if (outs[k].data())
                Halide::Buffer<float>(outs[k]).for_each_value([&](float v) { written &= std::isfinite(v); });
            if (!written) return {false, 0, fmt::format("output {} not written (or not finite)", c.outputs[k])};
            copies.push_back(outs[k].copy());
        }
        expected_[key] = std::move(copies);
    } else if (outputs == Outputs::compare) {
        const auto &want = expected_.at(key);
        for (size_t k = 0; k < outs.size(); ++k) {
            // An empty output (b_grad on the CPU) has no memory to compare.
            if (outs[k].number_of_elements() == 0 || !outs[k].data() || !want[k].data()) continue;
            Halide::Buffer<float> got(outs[k]), ref(want[k]);
            double worst = 0, scale = 1;
            bool finite = true;
            got.for_each_element([&](const int *pos) {
                const double g = got(pos), e = ref(pos);
                if (!std::isfinite(g)) finite = false;
                scale = std::max(scale, std::fabs(e));
                worst = std::max(worst, std::fabs(g - e));
            });
            // Only the order of a sum changes between schedules: float32 rounding, ~1e-6 of the
            // largest value for K = 2048; a wrong tile or bound is off by O(1).
            if (!finite || worst > 1e-4 * scale)
                return {false, 0, fmt::format("wrong output {} (max error {:.3g}, largest value {:.3g})",
                                              c.outputs[k], worst, scale)};
        }
    }
    double best = 1e30, total = 0;
    for (int rep = 0; rep < 100000 && (rep < 5 || total < 0.2); ++rep) {
        const auto t0 = Clock::now();
        c.pipeline.realize(r, target_);
        if (gpu && outs[0].device_sync() != 0) return {false, 0, "the device failed while timing"};
        const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
        best = std::min(best, sec);
        total += sec;
    }
    return {true, best * 1e3, ""};
}

Tuner::Result Tuner::family_time(const Family &f, const LstmShape &s, const Table &t) {
    const Key key{f.name, s.text(), relevant(f, t)};
    const std::string at = f.name + "@" + s.text();
    // The base table's run gives the outputs every candidate is checked against, so it runs in
    // every process, also when the log has its time.
    const bool is_base = key.knobs == relevant(f, base_);
    if (!is_base && !expected_.count(at)) {
        const Result base = family_time(f, s, base_);
        if (!base.ok) return base;
    }
    if (auto it = results_.find(key); it != results_.end() && (!is_base || expected_.count(at))) return it->second;
    const Result r = compile_and_measure(f, s, t, is_base ? Outputs::store : Outputs::compare);
    results_[key] = r;
    log(key, r);
    return r;
}

// measure() of t's kernel for f, compiled on first use; a compile or run error is a failed result.
Tuner::Result Tuner::compile_and_measure(const Family &f, const LstmShape &s, const Table &t, Outputs outputs) {
    try {
        return measure(kernel(f, t), f, s, outputs);
    } catch (const Halide::Error &e) {
        return {false, 0, std::string("Halide: ") + e.what()};
    } catch (const std::exception &e) {
        return {false, 0, e.what()};
    }
}

Compiled &Tuner::kernel(const Family &f, const Table &t) {
    const std::string name = f.name + "|" + relevant(f, t);
    auto it = kernels_.find(name);
    if (it == kernels_.end()) it = kernels_.emplace(name, compile(f, t.table, knob_string(t))).first;
    return it->second;
}

// calls x time of every family at shape s: which 0 = BlockLSTM, 1 = BlockLSTMGrad, 2 = with
// peepholes (its peephole-only kernels added); a time in `fresh` replaces the stored one.
double Tuner::op_ms(const Table &t, const LstmShape &s, int which, const Times &fresh) {
    double ms = 0;
    for (const Family &f : families_) {
        const int n = which == 0 ? f.forward_calls(s) : which == 1 ? f.grad_calls(s) : f.grad_peephole_calls(s);
        if (n == 0) continue;
        ms += n * time_ms({f.name, s.text(), relevant(f, t)}, fresh);
    }
    return ms;
}

// The kernels in which two tables differ, timed side by side: for each such family and shape,
// three alternations of a's kernel and b's (the order swapped each time), the best of each.
// Times taken minutes apart drift with the machine's load by more than the 1 % a decision
// needs (on a shared 2-vCPU machine, candidates estimated 0.956x and 0.972x from such times came
// out 0.998x and 1.001x side by side), so a move is kept, and the final speedup reported, only
// from times taken together. nullopt when interrupted or a kernel failed (said why).
std::optional<Tuner::Times> Tuner::side_by_side(const Table &a, const Table &b) {
    constexpr int kRounds = 3;
    Times fresh;
    for (const Family &f : families_) {
        if (relevant(f, a) == relevant(f, b)) continue;  // the same kernel
        for (const LstmShape &s : shapes_) {
            for (int round = 0; round < 2 * kRounds; ++round) {
                if (interrupted) return std::nullopt;
                const Table &t = (round % 2 == round / 2 % 2) ? a : b;  // a b, b a, a b, ...
                const Key key{f.name, s.text(), relevant(f, t)};
                const Result r = compile_and_measure(f, s, t, Outputs::ignore);
                if (!r.ok) {
                    fmt::print("        side by side: {} at {} failed ({})\n", f.name, s.text(), r.why);
                    return std::nullopt;
                }
                const auto it = fresh.find(key);
                fresh[key] = it == fresh.end() ? r.ms : std::min(it->second, r.ms);
            }
        }
    }
    return fresh;
}

// b's time over a's (geometric mean over the shapes of BlockLSTM + BlockLSTMGrad + its peephole
// kernels), from the times in `fresh` where it has them.
double Tuner::relative(const Table &a, const Table &b, const Times &fresh) {
    double log_sum = 0;
    for (const LstmShape &s : shapes_) {
        const double ta = op_ms(a, s, 0, fresh) + op_ms(a, s, 1, fresh) + op_ms(a, s, 2, fresh);
        const double tb = op_ms(b, s, 0, fresh) + op_ms(b, s, 1, fresh) + op_ms(b, s, 2, fresh);
        log_sum += std::log(tb / ta);
    }
    return std::exp(log_sum / shapes_.size());
}

// The geometric mean over the shapes of (BlockLSTM + BlockLSTMGrad + its peephole kernels)
// estimated from the kernels, relative to the base table; nullopt if any kernel failed.
std::optional<double> Tuner::cost(const Table &t, const std::string &label) {
    if (const std::string broken = rule_broken(t); !broken.empty()) return std::nullopt;
    // A later pass of the descent meets tables it has costed: their cost again, not a new line.
    if (auto it = costs_.find(knob_string(t)); it != costs_.end()) return it->second;
    ++tried_;
    for (const Family &f : families_) {
        for (const LstmShape &s : shapes_) {
            if (interrupted) return std::nullopt;
            const Result r = family_time(f, s, t);
            if (!r.ok) {
                fmt::print("  {:<44} discarded: {} at {} ({})\n", label, f.name, s.text(), r.why);
                return std::nullopt;
            }
        }
    }
    const double c = relative(base_, t, {});
    costs_[knob_string(t)] = c;
    fmt::print("  [{:>3}] {:<44} {:.3f}x the base time   best {:.3f}x   {:.1f} min left\n", tried_, label, c,
               best_cost_, minutes_left());
    std::fflush(stdout);
    return c;
}

void Tuner::load_log() {
    if (o_.fresh) return;
    std::ifstream in(o_.log);
    std::string line;
    int loaded = 0, verdicts = 0, line_number = 0;
    bool threads_seen = false;
    // A time or ratio of the log: a positive finite number, or an error naming the file and line.
    auto number = [&](const std::string &text) {
        double v = 0;
        size_t used = 0;
        try {
            v = std::stod(text, &used);
        } catch (const std::exception &) {
            used = 0;
        }
        if (used != text.size() || !std::isfinite(v) || v <= 0)
            throw std::invalid_argument(fmt::format("--log: {} line {}: '{}' is not a positive number (a damaged log: give "
                                                    "another --log, or --fresh)", o_.log, line_number, text));
        return v;
    };
    while (std::getline(in, line)) {
        ++line_number;
        // Times at another thread count are not this run's (the kernels' parallel loops).
        if (line.rfind("# threads=", 0) == 0) {
            threads_seen = true;
            if (line.substr(10) != std::to_string(o_.threads))
                throw std::invalid_argument(fmt::format("--log: {} holds times at --threads {}, not {} (give another "
                                                        "--log, or --fresh)", o_.log, line.substr(10), o_.threads));
            continue;
        }
        // Times from another target (a CUDA run resuming an OpenCL check's log) mean nothing here.
        if (line.rfind("# target=", 0) == 0 && line.substr(9) != target_.to_string())
            throw std::invalid_argument("--log: " + o_.log + " holds times for " + line.substr(9) + ", not " +
                                        target_.to_string() + " (give another --log, or --fresh)");
        // A side-by-side verdict: its scope, the best's and the candidate's knobs, the candidate's
        // time over the best's.
        std::smatch m;
        if (std::regex_match(line, m, std::regex("# side_by_side,\"([^\"]*)\",\"([a-z_0-9:,]+)\",\"([a-z_0-9:,]+)\",([0-9.eE+-]+)"))) {
            if (m[1] == verdict_scope()) {
                verdicts_[{m[2], m[3]}] = {number(m[4]), false};
                ++verdicts;
            }
            continue;
        }
        // family,shape,knobs,status,ms,why: the shape and knobs are quoted (they hold commas)
        if (!std::regex_match(line, m, std::regex("([a-z_0-9]+),\"([0-9,]+)\",\"([a-z_0-9:,]+)\",(ok|failed),([0-9.eE+-]+),(.*)")))
            continue;
        if (!threads_seen)
            throw std::invalid_argument("--log: " + o_.log + " does not say its thread count (written by an older "
                                        "blocklstm tune): give another --log, or --fresh");
        Result r{m[4] == "ok", m[4] == "ok" ? number(m[5]) : 0.0, m[4] == "ok" ? "" : m[6].str()};
        results_[{m[1], m[2], m[3]}] = r;
        ++loaded;
    }
    if (loaded) fmt::print("Resuming: {} measurements and {} side-by-side verdicts from {}\n", loaded, verdicts, o_.log);
}

std::ofstream &Tuner::log_file() {
    if (!log_.is_open()) {
        std::error_code ec;
        const bool existed = std::filesystem::file_size(o_.log, ec) > 0 && !ec && !o_.fresh;  // an empty file gets the header
        log_.open(o_.log, existed ? std::ios::app : std::ios::trunc);
        if (!log_) throw std::runtime_error("--log: cannot write " + o_.log + " (" + std::strerror(errno) + ")");
        if (!existed)
            log_ << "# target=" << target_.to_string() << "\n# threads=" << o_.threads
                 << "\nfamily,shape,knobs,status,ms,why\n";
    }
    return log_;
}

void Tuner::log(const Key &k, const Result &r) {
    if (!o_.autoscheduler.empty()) return;  // a child's results are its parent's to log
    std::string why = r.why;
    std::replace(why.begin(), why.end(), '\n', ' ');
    log_file() << k.family << ",\"" << k.shape << "\",\"" << k.knobs << "\"," << (r.ok ? "ok" : "failed") << ","
               << fmt::format("{:.6g}", r.ms) << "," << why << std::endl;
}

void Tuner::log_verdict(const std::pair<std::string, std::string> &pair, double ratio) {
    log_file() << "# side_by_side,\"" << verdict_scope() << "\",\"" << pair.first << "\",\"" << pair.second << "\"," << fmt::format("{:.6g}", ratio)
               << std::endl;
}

void Tuner::write_table(const Table &t, int tried) const {
    // Kernels timed on PoCL say nothing about a GPU: such a table is marked not measured.
    const bool measured = !target_.has_feature(Halide::Target::OpenCL);
    std::ostringstream j;
    j << "{\n  \"table\": \"" << t.table << "\",\n  \"measured\": " << (measured ? "true" : "false") << ",\n";
    j << "  \"tuned_on\": \"" << json_text(device_name(target_));
    if (!t.gpu) j << ", " << std::thread::hardware_concurrency() << " logical CPUs";
    j << " (" << target_.to_string() << ")";
    if (!t.gpu) j << ", " << (o_.threads ? std::to_string(o_.threads) : std::string("all")) << " threads";
    j << ": blocklstm tune " << (t.gpu ? "--device " + o_.device + " " : std::string()) << "--minutes " << o_.minutes
      << " --shapes '" << o_.shapes << "', " << tried << " candidates\",\n";
    j << "  \"date\": \"" << today() << "\",\n";
    j << "  \"knobs\": {\n";
    for (size_t k = 0; k < t.knobs.size(); ++k)
        j << "    \"" << t.knobs[k].first << "\": " << t.knobs[k].second << (k + 1 < t.knobs.size() ? ",\n" : "\n");
    j << "  }\n}\n";
    // Written whole to a temporary file first: a failed write never replaces the table there.
    const std::string tmp = o_.out + ".tmp";
    std::ofstream file(tmp);
    file << j.str();
    file.close();
    if (!file) {
        std::filesystem::remove(tmp);
        throw std::runtime_error("--out: cannot write " + tmp + " (" + std::strerror(errno) + "); " + o_.out + " is unchanged");
    }
    std::filesystem::rename(tmp, o_.out);
}

// Times the tuned table's kernels side by side with the base's and prints both per family and
// per op; returns the tuned table's time over the base's, so timed (nullopt when interrupted:
// the stored times are printed).
std::optional<double> Tuner::report(const Table &best) {
    Times fresh;
    const bool differs = std::any_of(families_.begin(), families_.end(),
                                     [&](const Family &f) { return relevant(f, base_) != relevant(f, best); });
    if (differs && !interrupted) {
        fmt::print("\nTiming the tuned kernels side by side with the base ones ...\n");
        std::fflush(stdout);
        fresh = side_by_side(base_, best).value_or(Times{});
    }
    fmt::print("\nPer family, the tuned table against the base one (best of >= 5 runs{}, ms):\n",
               fresh.empty() ? "" : ", side by side");
    fmt::print("  {:<24} {:<16} {:>10} {:>10} {:>8}\n", "family", "T,B,I,H", "base", "tuned", "speedup");
    for (const Family &f : families_) {
        for (const LstmShape &s : shapes_) {
            const double b = time_ms({f.name, s.text(), relevant(f, base_)}, fresh);
            const double t = time_ms({f.name, s.text(), relevant(f, best)}, fresh);
            fmt::print("  {:<24} {:<16} {:>10.3f} {:>10.3f} {:>7.3f}x\n", f.name, s.text(), b, t, b / t);
        }
    }
    if (best.gpu)  // cuBLAS's products and the weights' transpose are not tuned, so not timed
        fmt::print("\nThe tuned kernels' part of each op (calls x time; cuBLAS's products and the transpose left out):\n");
    else
        fmt::print("\nEnd to end, estimated as the sum of the kernels each op runs (calls x time):\n");
    fmt::print("  {:<16} {:<30} {:<30} {}\n", "T,B,I,H", "BlockLSTM", "BlockLSTMGrad",
               "BlockLSTMGrad peephole");
    for (const LstmShape &s : shapes_) {
        std::string cols;
        for (int which = 0; which < 3; ++which) {
            const double b = op_ms(base_, s, which, fresh), t = op_ms(best, s, which, fresh);
            cols += fmt::format("{:<30} ", b > 0 ? fmt::format("{:.2f} -> {:.2f} ms {:.3f}x", b, t, b / t) : "-");
        }
        fmt::print("  {:<16} {}\n", s.text(), cols);
    }
    if (fresh.empty()) return std::nullopt;
    return relative(base_, best, fresh);
}

// The values the search tries for a knob, and the knobs of coordinate descent in their order:
// the knob rows' (schedules/tuning.h).
std::vector<int> candidates(const std::string &knob) {
    for (const auto &k : schedules::cpu_knobs())
        if (knob == k.name) return k.candidates;
    for (const auto &k : schedules::cuda_knobs())
        if (knob == k.name) return k.candidates;
    return {};
}

template <typename Tuning>
std::vector<std::string> by_priority(const std::vector<schedules::Knob<Tuning>> &knobs) {
    std::vector<const schedules::Knob<Tuning> *> in_order;
    for (const auto &k : knobs)
        if (k.priority > 0) in_order.push_back(&k);
    std::stable_sort(in_order.begin(), in_order.end(), [](auto *a, auto *b) { return a->priority < b->priority; });
    std::vector<std::string> names;
    for (const auto *k : in_order) names.push_back(k->name);
    return names;
}

const std::vector<std::string> &descent_order(bool gpu) {
    static const std::vector<std::string> cpu = by_priority(schedules::cpu_knobs());
    static const std::vector<std::string> gpu_order = by_priority(schedules::cuda_knobs());
    return gpu ? gpu_order : cpu;
}

// The first, coarse stage of the search: on the CPU each register-tile width with the most rows
// the registers hold and two fewer; on the GPU the products' thread tiles (accumulators per
// thread, columns x rows), the step's and, when a batched family is tuned, the batched one's.
std::vector<std::pair<Table, std::string>> Tuner::grid(const Table &best) const {
    std::vector<std::pair<Table, std::string>> out;
    auto add = [&](const Table &t, const std::string &label) { out.emplace_back(t, label); };
    if (!best.gpu) {
        if (!read("gemm_tile_vectors")) return out;
        const int registers = best.get("vector_floats") >= 16 ? 32 : 16;
        for (int vectors : candidates("gemm_tile_vectors")) {
            // The most rows the registers hold, two fewer, and 16 accumulators: one FMA port's
            // latency needs fewer than two ports' (AMD Zen 4 ran its batched products 1.2x
            // faster on 8 x 2 vectors than on 12 x 2; a step of -1 from 12 never gets there).
            const int most = (registers - vectors - 1) / vectors;
            std::vector<int> rows_tried{most, most - 2};
            if (16 / vectors < most - 2) rows_tried.push_back(16 / vectors);
            for (int rows : rows_tried) {
                if (rows < 1) continue;
                Table t = best;
                t.set("gemm_tile_vectors", vectors);
                t.set("gemm_tile_rows", rows);
                t.set("gemm_step_tile_rows", std::min(rows, base_.get("gemm_step_tile_rows")));
                add(t, fmt::format("tile {} x {} vectors", rows, vectors));
            }
        }
        return out;
    }
    for (const std::string which : {"step", "batched"}) {
        if (!read(which + "_cols_per_thread")) continue;
        for (int cols : {1, 2, 4})
            for (int rows : {1, 2, 4, 8}) {
                Table t = best;
                t.set(which + "_cols_per_thread", cols);
                t.set(which + "_rows_per_thread", rows);
                add(t, fmt::format("{} thread tile {} x {}", which, cols, rows));
            }
    }
    return out;
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
            const std::optional<Times> fresh = side_by_side(best, t);
            if (!fresh && interrupted) return false;
            // A failed timing (said why) refuses the candidate for good.
            const double r = fresh ? relative(best, t, *fresh) : std::numeric_limits<double>::infinity();
            it = verdicts_.emplace(pair, Verdict{r, false}).first;
            if (fresh) log_verdict(pair, r);
        } else if (!it->second.shown) {
            from = " (from the log)";
        }
        const bool kept = it->second.ratio < 0.99;
        if (!it->second.shown && std::isfinite(it->second.ratio))
            fmt::print("        side by side with the best: {:.3f}x its time{}{}\n", it->second.ratio,
                       kept ? " (kept)" : ", not kept", from);
        it->second.shown = true;
        std::fflush(stdout);
        if (!kept) return false;
        best_cost_ = *c;
        best = t;
        write_table(best, tried_);
        return true;
    };
    // 1. A coarse grid (Tuner::grid), each candidate made from the best so far (a move kept
    // earlier stays in the later candidates).
    for (size_t i = 0; !out_of_time(); ++i) {
        const auto cells = grid(best);  // the same count every time, from the current best
        if (i >= cells.size()) break;
        const auto &[t, label] = cells[i];
        if (knob_string(t) != knob_string(best)) consider(t, label);
    }
    // 2. Coordinate descent: each knob's neighbouring values around the best, one knob at a time,
    // following a direction while it gains; passes until one changes nothing.
    for (bool moved = true; moved && !out_of_time();) {
        moved = false;
        for (const std::string &name : descent_order(best.gpu)) {
            if (!read(name)) continue;
            const std::vector<int> values = candidates(name);
            for (int step : {+1, -1}) {
                while (!out_of_time()) {
                    const int now = best.get(name);
                    auto at = std::lower_bound(values.begin(), values.end(), now);
                    const long next = (at - values.begin()) + (at != values.end() && *at == now ? step : (step > 0 ? 0 : -1));
                    if (next < 0 || next >= long(values.size())) break;
                    Table t = best;
                    t.set(name, values[next]);
                    if (!consider(t, fmt::format("{} {} -> {}", name, now, values[next]))) break;
                    moved = true;
                }
            }
        }
    }
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
    fmt::print("\nWrote {}: {:.3f}x the base table's time (geometric mean over the shapes, estimated from the kernels{}).\n",
               o_.out, timed.value_or(best_cost_), timed ? ", timed side by side" : "");
    if (!best.gpu) fmt::print("Confirm it on the real ops (builds with it, times both builds): tools/tune/confirm.sh {}\n", file);
    if (!target_.has_feature(Halide::Target::OpenCL))  // an OpenCL check's table is not for building
        fmt::print("Build with it: cmake -B build -DBLOCKLSTM_TUNING={0} && cmake --build build\n", file);
    return interrupted ? 130 : 0;  // as --baseline: a Ctrl-C ends with 128 + SIGINT
}

// The autoschedulers the halide wheel ships as plugins, by the device they schedule for.
const std::vector<std::string> kCpuAutoschedulers{"Adams2019", "Li2018", "Mullapudi2016"};
const std::vector<std::string> kGpuAutoschedulers{"Anderson2021"};

// The directory of libHalide.so, where the halide wheel keeps its autoscheduler plugins.
std::string halide_library_dir() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void *>(&Halide::load_plugin), &info) == 0 || !info.dli_fname) return "";
    return std::filesystem::path(info.dli_fname).parent_path().string();
}

// The autoscheduler `name`'s kernel for f at shape s: its outputs checked against the base
// table's (measured first), then timed.
Tuner::Result Tuner::autoscheduled_time(const Family &f, const LstmShape &s, const std::string &name,
                                        const std::string &path) {
    const Result ours = family_time(f, s, base_);  // stores the outputs to compare with
    if (!ours.ok) return {false, 0, "the hand schedule's kernel failed: " + ours.why};
    try {
        Compiled c = compile(f, base_.table, knob_string(base_), name);
        // Estimates: the extents of this shape's buffers and the scalars' values.
        Call &inputs = call(f, s);
        for (const auto &info : c.generator->arginfos()) {
            if (info.dir == Halide::Internal::ArgInfoDirection::Input) {
                Halide::Parameter p = c.generator->input_parameter(info.name).at(0);
                if (info.kind != Halide::Internal::ArgInfoKind::Buffer) {
                    p.set_estimate(Halide::Expr(inputs.scalars.at(info.name)));
                    continue;
                }
                const Halide::Buffer<> &b = inputs.buffers.at(info.name);
                for (int d = 0; d < b.dimensions(); ++d) {
                    p.set_min_constraint_estimate(d, 0);
                    p.set_extent_constraint_estimate(d, b.dim(d).extent());
                }
            } else {
                const std::string first = info.types.size() == 1 ? info.name : info.name + ".0";
                const Halide::Buffer<> &b = inputs.buffers.at(first);
                // An output the kernel leaves empty (b_grad on the CPU) is estimated as one
                // element: Adams2019 aborts on an empty region.
                Halide::Region region;
                for (int d = 0; d < b.dimensions(); ++d) region.push_back({0, std::max(1, b.dim(d).extent())});
                c.generator->output_func(info.name).at(0).set_estimates(region);
            }
        }
        Halide::AutoschedulerParams params(name);
        if (name != "Li2018")  // the cores the kernels run on
            params.extra["parallelism"] = std::to_string(
                o_.threads > 0 ? unsigned(o_.threads) : std::max(1u, std::thread::hardware_concurrency()));
        const Halide::AutoSchedulerResults chosen = c.pipeline.apply_autoscheduler(target_, params);
        if (!path.empty() && !(std::ofstream(path) << chosen.schedule_source))
            return {false, 0, "could not write the schedule to " + path};
        return measure(c, f, s, Outputs::compare);
    } catch (const Halide::Error &e) {
        return {false, 0, e.what()};
    } catch (const std::exception &e) {
        return {false, 0, e.what()};
    }
}

// autoscheduled_time in a child process, this tool run again with --autoscheduler: the plugins
// end the process on some of their internal errors (Adams2019 throws from a destructor while
// unwinding from an error, so std::terminate; seen with an empty output region), which no try
// block here can catch. The child prints one result line; a child that dies is a failed result.
Tuner::Result Tuner::autoscheduled_time_in_child(const Family &f, const LstmShape &s, const std::string &name) {
    std::vector<std::string> args{"blocklstm-tune", "--autoscheduler", name,           "--families",
                                  f.name,           "--shapes",        s.text(),       "--target",
                                  target_.to_string(), "--device",     o_.device,      "--seed",
                                  std::to_string(o_.seed)};
    if (o_.threads > 0) args.insert(args.end(), {"--threads", std::to_string(o_.threads)});
    if (!o_.from.empty()) args.insert(args.end(), {"--from", o_.from});
    const std::string path = schedule_path(f, s, name);
    std::filesystem::remove(path);  // no earlier run's schedule beside this run's result
    args.insert(args.end(), {"--schedule-file", path});
    std::vector<char *> argv;
    for (std::string &a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return {false, 0, std::string("pipe: ") + std::strerror(errno)};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDERR_FILENO);
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    std::string text;
    char chunk[4096];
    for (ssize_t n; spawned == 0 && (n = ::read(out[0], chunk, sizeof chunk)) != 0;)
        if (n > 0) text.append(chunk, size_t(n));
        else if (errno != EINTR) break;
    close(out[0]);
    if (spawned != 0) return {false, 0, std::string("could not start the child: ") + std::strerror(spawned)};
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    // The child's last line: "autoscheduler_result ok <ms>" or "autoscheduler_result failed <why>",
    // whole (up to its newline).
    const std::string tag = "autoscheduler_result ";
    if (const size_t at = text.rfind(tag); at != std::string::npos && text.find('\n', at) != std::string::npos) {
        std::stringstream line(text.substr(at + tag.size()));
        std::string verdict;
        line >> verdict;
        if (verdict == "ok") {
            double ms = 0;
            if (line >> ms) return {true, ms, ""};
        } else if (verdict == "failed") {
            std::string why;
            std::getline(line >> std::ws, why);
            return {false, 0, why};
        }
    }
    // Its last line of output says why, if anything does.
    while (!text.empty() && text.back() == '\n') text.pop_back();
    const std::string last = text.substr(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
    const std::string how = WIFSIGNALED(status) ? fmt::format("ended by signal {} ({})", WTERMSIG(status),
                                                               strsignal(WTERMSIG(status)))
                                                : fmt::format("exited with {}", WEXITSTATUS(status));
    return {false, 0, "the autoscheduler's process " + how + (last.empty() ? "" : ": " + last)};
}

void Tuner::run_one_autoscheduler() {
    std::string lower = o_.autoscheduler;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    Halide::load_plugin(halide_library_dir() + "/libautoschedule_" + lower + ".so");
    // The test of a child that dies (tests/check_tune_baseline.cmake) makes one die as Adams2019
    // did: an exception out of a function that cannot throw.
    if (const char *die = std::getenv("BLOCKLSTM_TUNE_TEST_CHILD_ABORT"); die && o_.autoscheduler == die) {
        try {
            throw std::runtime_error("a test's exception out of a noexcept function");
        } catch (...) {
            std::terminate();
        }
    }
    const Result r = autoscheduled_time(families_.at(0), shapes_.at(0), o_.autoscheduler, o_.schedule_file);
    std::string why = r.why;
    std::replace(why.begin(), why.end(), '\n', ' ');
    fmt::print("\nautoscheduler_result {}\n", r.ok ? fmt::format("ok {:.9g}", r.ms) : "failed " + why);
    // The result is out: end without the JIT runtimes' and the plugins' teardown at exit, which
    // gives the parent nothing.
    std::fflush(stdout);
    std::_Exit(0);
}

int Tuner::run_autoscheduler_baselines() {
    const bool gpu = target_.has_gpu_feature();
    if (gpu && !target_.has_feature(Halide::Target::CUDA))
        throw std::invalid_argument("--baseline autoschedulers: Halide's GPU autoscheduler (Anderson2021) "
                                    "schedules for CUDA only; give --device cuda");
    const std::vector<std::string> &names = gpu ? kGpuAutoschedulers : kCpuAutoschedulers;
    std::filesystem::create_directories(o_.log + ".schedules");
    fmt::print("Halide's autoschedulers against the hand schedule with table {} ({}), ms, best of >= 5 runs:\n",
               base_.table, target_.to_string());
    fmt::print("  {:<16} {:<16} {:>10}", "family", "T,B,I,H", "ours");
    for (const auto &n : names) fmt::print(" {:>14}", n);
    fmt::print("\n");
    for (const Family &f : families_) {
        for (const LstmShape &s : shapes_) {
            const Result ours = family_time(f, s, base_);
            fmt::print("  {:<16} {:<16} {:>10}", f.name, s.text(), ours.ok ? fmt::format("{:.3f}", ours.ms) : "failed");
            if (!ours.ok) {  // nothing to check the autoschedulers' kernels against
                fmt::print("\n      ours: {}\n", ours.why.substr(0, 300));
                continue;
            }
            std::string failures;  // under the row, so that its columns stay aligned
            for (const std::string &n : names) {
                if (interrupted) break;
                const Result r = autoscheduled_time_in_child(f, s, n);
                if (interrupted) break;  // the child got the Ctrl-C too: no result
                std::string why = r.why;  // one line (the child's result line, or its last line)
                if (why.find_first_not_of("Error: ") == std::string::npos) why += "(Halide gave no message)";
                log({f.name, s.text(), "autoscheduler:" + n}, r);
                fmt::print(" {:>14}", r.ok ? fmt::format("{:.3f} {:.2f}x", r.ms, ours.ms / r.ms) : "failed");
                if (!r.ok) failures += fmt::format("      {}: {}\n", n, why.substr(0, 300));
                std::fflush(stdout);
            }
            fmt::print("\n{}", failures);
            if (interrupted) {
                fmt::print("Interrupted.\n");
                return 130;
            }
        }
    }
    fmt::print("(NxX: our time / the autoscheduler's; above 1 the autoscheduler is faster. Log: {}; the schedules "
               "they chose: {}.schedules/)\n", o_.log, o_.log);
    return 0;
}

}  // namespace
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
                                         "benchmark's, tools/peers/bench.py's or with --device cuda gpu_bench.py's)");
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
    app.add_flag("--fresh", o.fresh, "ignore an existing log (start over)");
    app.add_option("--seed", o.seed, "seed of the random inputs");
    app.add_option("--device", o.device, "cpu, cuda (the CUDA table, on this machine's NVIDIA GPU), or opencl (the "
                                         "GPU schedules on an OpenCL device such as PoCL: a check of the tuner, "
                                         "not a tuning)")
        ->check(CLI::IsMember({"cpu", "cuda", "opencl"}));
    // A later value of an option replaces an earlier one (tools/gpu_check.sh puts its defaults
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
        if (o.autoscheduler.empty() && o.baseline.empty()) check_writable("--out", o.out + ".tmp");
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
        return o.baseline.empty() ? tuner.run_search() : tuner.run_autoscheduler_baselines();
    } catch (const Halide::Error &e) {
        std::cerr << "blocklstm tune: " << e.what() << "\n";
        return 1;
    } catch (const std::exception &e) {
        std::cerr << "blocklstm tune: " << e.what() << "\n";
        return 2;
    }
}
