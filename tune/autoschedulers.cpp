// --baseline autoschedulers: Halide's own autoschedulers on the same algorithms as the hand
// schedules, each in a child process (tune/tuner.h).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <filesystem>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "tune/tuner.h"

namespace blocklstm::tune {

namespace {

// The directory of libHalide.so, where the halide wheel keeps its autoscheduler plugins.
std::string halide_library_dir() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void *>(&Halide::load_plugin), &info) == 0 || !info.dli_fname) return "";
    return std::filesystem::path(info.dli_fname).parent_path().string();
}

}  // namespace

const std::vector<std::string> kCpuAutoschedulers{"Adams2019", "Li2018", "Mullapudi2016"};
const std::vector<std::string> kGpuAutoschedulers{"Anderson2021"};

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
                    p.set_estimate(Halide::cast(p.type(), Halide::Expr(inputs.scalars.at(info.name))));
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

}  // namespace blocklstm::tune
