// Internals of the `blocklstm` command-line tool, shared by its source files.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <blocklstm/blocklstm.h>

namespace blocklstm::cli {

// An error the tool reports as "blocklstm: <message>" and exit code 2. The message names the file
// or argument at fault.
class CliError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// ---- run ----------------------------------------------------------------------------------------

struct RunOptions {
    std::string op;
    std::string in_dir;
    std::string out_dir;
    std::string device = "cpu";
    std::optional<float> forget_bias;
    std::optional<float> cell_clip;
    bool use_peephole = false;
};

// The six TF op names, in spec order.
const std::vector<std::string> &op_names();
bool is_op_name(const std::string &name);

// Reads the op's inputs from in_dir, runs it, writes its outputs to out_dir (all or nothing).
// Throws CliError (bad options / files) or blocklstm::Error (rejected by the library).
std::string run_op(const RunOptions &options);

// The device named by --device: cpu, or cuda where this build has CUDA kernels and the machine a
// CUDA device; otherwise CliError saying why.
Device check_device(const std::string &device, const std::string &option = "--device");

// ---- bench --------------------------------------------------------------------------------------

struct BenchOptions {
    std::string op;
    int64_t time = 1;  // T (sequence ops); the cell ops run one step
    int64_t batch = 0, input = 0, cell = 0;
    DType dtype = DType::f32;
    bool use_peephole = false;
    std::string device = "cpu";
    int reps = 0;    // timed calls; 0 = about 1 s worth (at least 5, at most 1000)
    int warmup = 0;  // warm-up calls; 0 = calls until 0.2 s have passed (at least 1, at most 50)
    int threads = 0; // as given to --threads (0 = not given: Halide's default); for the header only
    uint64_t seed = 1;
    bool print_reps = false;  // also print every timed call ("reps_ms=a,b,...")
    std::string cpu_target;   // a CPU target to pin (set_cpu_target); "" = as the environment says
    // seq_lengths of the sequence ops: "" none (TF's op); "full" every row T; "spread" each row's
    // length uniform in [ceil(T/4), T] (from the seed)
    std::string lengths;
    // With `lengths`: each timed call alternates with the same call padded (no seq_lengths), and
    // the ratio of the two is printed: on a machine whose speed wanders, a ratio from one process
    // and alternating calls, not from two runs minutes apart
    bool against_padded = false;
    // The sequence forward ops' i, f, o, ci, co left out: only cs and h written (inference)
    bool inference = false;
    // Two calls of the op (the second on inputs from seed + 1) in one invoke_side_by_side, each
    // timed call alternating with the same two one after the other, and the ratio printed
    bool side_by_side = false;
};

// Times the op on random inputs (grad ops: on the matching forward op's activations) and prints
// the median, min and max, ending with the line "median_ms=<float> gflops=<float>".
// Returns the exit code. Throws CliError / blocklstm::Error like run_op.
int bench(const BenchOptions &options);

// ---- list, help ---------------------------------------------------------------------------------

void list_kernels(bool kernel_rows);
void list_plans();
void print_op_help();  // each op's files and attrs (the op registry)

// ---- demo ---------------------------------------------------------------------------------------

struct DemoOptions {
    int steps = 300;
    uint64_t seed = 20240607;
    std::string device = "auto";  // auto: CUDA when a device is present, else the CPU
};

// Returns the process exit code (0 on success).
int demo(const DemoOptions &options);

// splitmix64: small, fast, identical everywhere (deterministic demo and bench inputs).
class Rng {
public:
    explicit Rng(uint64_t seed) : s_(seed) {}
    uint64_t next() {
        uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    double uniform(double lo = 0.0, double hi = 1.0) {
        return lo + (hi - lo) * static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);
    }
    double normal() {  // Box-Muller
        const double u1 = uniform(1e-300, 1.0), u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
    }

private:
    uint64_t s_;
};

// The median of a sample (0 for none).
inline double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace blocklstm::cli
