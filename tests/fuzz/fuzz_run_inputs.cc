// libFuzzer target: `blocklstm run`'s input loading (tools/run_op.cpp) — the .npy files of an op's
// inputs read from a directory, checked, handed to the library, and the outputs written — on
// arbitrary files. Every input must end in a result or in the tool's error (CliError) or the
// library's (blocklstm::Error); any other exception, a crash or a sanitizer report is a bug.
//
// An input is one op call: byte 0 picks the op (of the six), byte 1 its flags (bit 0
// use_peephole, bit 1 --forget-bias 0.5, bit 2 --cell-clip 1.5), then any number of files, each
// [name index: 1 byte][length: 2 bytes, little-endian][bytes]; the name index picks one of
// kFileNames (mod its size). tests/fuzz/make_corpus.py writes the seed corpus in this format.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli.h"

namespace fs = std::filesystem;
using blocklstm::cli::CliError;

namespace {

const char *const kFileNames[] = {"seq_len_max", "x", "cs_prev", "h_prev", "w",  "wci",     "wcf",
                                  "wco",         "b", "i",       "cs",     "f",  "o",       "ci",
                                  "co",          "h", "cs_grad", "h_grad"};
constexpr std::size_t kNumNames = sizeof(kFileNames) / sizeof(kFileNames[0]);

const fs::path &work_dir() {
    static const fs::path dir = [] {
        const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
        fs::path d = base / ("blocklstm-fuzz-run-" + std::to_string(::getpid()));
        fs::create_directories(d);
        return d;
    }();
    return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    blocklstm::cli::RunOptions o;
    const auto &ops = blocklstm::cli::op_names();
    o.op = ops[data[0] % ops.size()];
    o.use_peephole = data[1] & 1;
    if (data[1] & 2) o.forget_bias = 0.5f;
    if (data[1] & 4) o.cell_clip = 1.5f;

    const fs::path in = work_dir() / "in", out = work_dir() / "out";
    fs::remove_all(in);
    fs::remove_all(out);
    fs::create_directories(in);
    for (std::size_t pos = 2; pos + 3 <= size;) {
        const char *name = kFileNames[data[pos] % kNumNames];
        std::size_t length = data[pos + 1] | (std::size_t(data[pos + 2]) << 8);
        pos += 3;
        length = std::min(length, size - pos);
        std::ofstream(in / (std::string(name) + ".npy"), std::ios::binary)
            .write(reinterpret_cast<const char *>(data + pos), static_cast<std::streamsize>(length));
        pos += length;
    }
    o.in_dir = in.string();
    o.out_dir = out.string();
    try {
        blocklstm::cli::run_op(o);
    } catch (const CliError &) {
    } catch (const blocklstm::Error &) {
    }
    return 0;
}
