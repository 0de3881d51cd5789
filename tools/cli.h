// Internals of the `blocklstm` command-line tool, shared by its source files.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

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
void run_op(const RunOptions &options);

// Throws CliError unless `device` is "cpu"; "cuda" gets a message saying why it cannot run.
void check_device(const std::string &device, const std::string &option = "--device");

// ---- list ---------------------------------------------------------------------------------------

void list_kernels();

// ---- demo ---------------------------------------------------------------------------------------

struct DemoOptions {
    int steps = 300;
    uint64_t seed = 20240607;
    std::string device = "cpu";
};

// Returns the process exit code (0 on success).
int demo(const DemoOptions &options);

}  // namespace blocklstm::cli
