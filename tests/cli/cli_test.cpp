// Tests of the `blocklstm` command-line tool: runs the built executable on .npy files written with
// the tool's own npy writer and compares its outputs, bit for bit, with the library API called
// directly on the same inputs; checks that malformed input exits with code 2, names the culprit
// and leaves no output behind; checks `list` and the npy reader itself.
//
// The executable's path comes from the compile definition BLOCKLSTM_CLI (or argv[1] / the
// environment variable BLOCKLSTM_CLI).
#include <gtest/gtest.h>

#include <blocklstm/blocklstm.h>
#include <blocklstm/ops.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "test_env.h"
#include "npy.h"

namespace fs = std::filesystem;
using blocklstm::DType;
using blocklstm::Tensor;

namespace npy = blocklstm::npy;

namespace {

std::string g_cli =
#ifdef BLOCKLSTM_CLI
    BLOCKLSTM_CLI;
#else
    "blocklstm";
#endif

// ---- Running the tool -------------------------------------------------------------------------

struct Result {
    int code = -1;
    std::string out, err;
};

std::string slurp(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

class TempDir {
public:
    TempDir() {
        const char *base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base && *base ? base : "/tmp") + "/blocklstm_cli_test.XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
        path_ = buf.data();
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    const std::string &path() const { return path_; }
    std::string operator/(const std::string &name) const { return (fs::path(path_) / name).string(); }

private:
    std::string path_;
};

// file_size_limit > 0: the child may write no file past that many bytes (its writes fail with
// EFBIG), to make a write fail part way.
Result run_cli(const std::vector<std::string> &args, rlim_t file_size_limit = 0) {
    TempDir io;
    const std::string out_path = io / "stdout", err_path = io / "stderr";
    // Everything the child needs is made before fork: this process has the kernels' worker
    // threads, and a child that allocated could wait forever on a lock one of them held (seen
    // under ASan). Between fork and exec only async-signal-safe calls.
    std::vector<char *> argv;
    argv.push_back(const_cast<char *>(g_cli.c_str()));
    for (const auto &a : args) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        const int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0) ::_exit(127);
        ::dup2(o, 1);
        ::dup2(e, 2);
        if (file_size_limit > 0) {
            const struct rlimit limit = {file_size_limit, file_size_limit};
            ::signal(SIGXFSZ, SIG_IGN);  // kept across exec: a write past the limit fails instead
            if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(127);
        }
        ::execv(g_cli.c_str(), argv.data());
        ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    return r;
}

std::string describe(const Result &r) {
    return "exit code " + std::to_string(r.code) + "\n--- stdout ---\n" + r.out + "--- stderr ---\n" + r.err;
}

bool dir_is_empty_or_missing(const std::string &dir) {
    std::error_code ec;
    if (!fs::exists(dir, ec)) return true;
    return fs::is_empty(dir, ec);
}

std::string listing(const std::string &dir) {
    std::string s;
    std::error_code ec;
    if (!fs::exists(dir, ec)) return "(missing)";
    for (const auto &e : fs::directory_iterator(dir)) s += e.path().filename().string() + " ";
    return s;
}

// ---- Problems ---------------------------------------------------------------------------------

constexpr int64_t kT = 5, kB = 3, kI = 4, kH = 6;

npy::Type npy_type(DType d) {
    return d == DType::f16 ? npy::Type::f16 : d == DType::bf16 ? npy::Type::bf16 : npy::Type::f32;
}

Tensor random_tensor(std::mt19937_64 &rng, DType dtype, std::vector<int64_t> shape, double lo,
                     double hi) {
    Tensor t(dtype, std::move(shape));
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t k = 0; k < t.num_elements(); ++k) {
        const float v = static_cast<float>(dist(rng));
        if (dtype == DType::f32)
            t.data_as<float>()[k] = v;
        else if (dtype == DType::bf16)
            t.data_as<uint16_t>()[k] = blocklstm::float_to_bfloat16(v);
        else
            t.data_as<uint16_t>()[k] = blocklstm::float_to_half(v);
    }
    return t;
}

void write_tensor(const std::string &path, const Tensor &t) {
    npy::write(path, npy_type(t.dtype()), t.shape(), t.data(), t.num_bytes());
}

void write_seq_len_max(const std::string &path, int64_t L, std::vector<int64_t> shape = {}) {
    npy::write(path, npy::Type::i64, shape, &L, sizeof L);
}

bool is_sequence(const std::string &op) { return op.rfind("Block", 0) == 0; }
bool is_grad(const std::string &op) { return op.find("Grad") != std::string::npos; }

// A consistent random problem for `op`: every input by TF name (seq_len_max separately); the
// activations of grad ops come from the matching forward op.
struct Problem {
    std::string op;
    DType dtype;
    bool peephole;
    int64_t seq_len_max;
    std::map<std::string, Tensor> in;

    void write(const std::string &dir) const {
        fs::create_directories(dir);
        if (is_sequence(op)) write_seq_len_max((fs::path(dir) / "seq_len_max.npy").string(), seq_len_max);
        for (const auto &[name, t] : in) write_tensor((fs::path(dir) / (name + ".npy")).string(), t);
    }
    const Tensor &operator[](const std::string &name) const { return in.at(name); }
};

Problem make_problem(const std::string &op, DType dtype, bool peephole, int64_t L, uint64_t seed) {
    std::mt19937_64 rng(seed);
    Problem p{op, dtype, peephole, L, {}};
    const bool seq = is_sequence(op);
    const std::vector<int64_t> xs = seq ? std::vector<int64_t>{kT, kB, kI} : std::vector<int64_t>{kB, kI};
    const std::vector<int64_t> act = seq ? std::vector<int64_t>{kT, kB, kH} : std::vector<int64_t>{kB, kH};
    p.in["x"] = random_tensor(rng, dtype, xs, -1, 1);
    p.in["cs_prev"] = random_tensor(rng, dtype, {kB, kH}, -1, 1);
    p.in["h_prev"] = random_tensor(rng, dtype, {kB, kH}, -1, 1);
    p.in["w"] = random_tensor(rng, dtype, {kI + kH, 4 * kH}, -0.5, 0.5);
    p.in["wci"] = random_tensor(rng, dtype, {kH}, -0.5, 0.5);
    p.in["wcf"] = random_tensor(rng, dtype, {kH}, -0.5, 0.5);
    p.in["wco"] = random_tensor(rng, dtype, {kH}, -0.5, 0.5);
    p.in["b"] = random_tensor(rng, dtype, {4 * kH}, -0.5, 0.5);
    if (is_grad(op)) {
        blocklstm::LSTMOutputs<Tensor> fw;
        if (op == "LSTMBlockCellGrad") {
            blocklstm::LSTMBlockCellAttrs a;
            a.use_peephole = peephole;
            fw = blocklstm::LSTMBlockCell(p["x"], p["cs_prev"], p["h_prev"], p["w"], p["wci"],
                                          p["wcf"], p["wco"], p["b"], a);
        } else if (op == "BlockLSTMGrad") {
            blocklstm::BlockLSTMAttrs a;
            a.use_peephole = peephole;
            fw = blocklstm::BlockLSTM(L, p["x"], p["cs_prev"], p["h_prev"], p["w"], p["wci"],
                                      p["wcf"], p["wco"], p["b"], a);
        } else {
            blocklstm::BlockLSTMV2Attrs a;
            a.use_peephole = peephole;
            fw = blocklstm::BlockLSTMV2(L, p["x"], p["cs_prev"], p["h_prev"], p["w"], p["wci"],
                                        p["wcf"], p["wco"], p["b"], a);
        }
        p.in["i"] = fw.i;
        p.in["cs"] = fw.cs;
        p.in["f"] = fw.f;
        p.in["o"] = fw.o;
        p.in["ci"] = fw.ci;
        p.in["co"] = fw.co;
        if (seq) p.in["h"] = fw.h;
        p.in["cs_grad"] = random_tensor(rng, dtype, act, -1, 1);
        p.in["h_grad"] = random_tensor(rng, dtype, act, -1, 1);
    }
    return p;
}

struct Attrs {
    std::optional<float> forget_bias, cell_clip;
};

// The library's outputs on the problem, by TF output name.
std::vector<std::pair<std::string, Tensor>> expected(const Problem &p, const Attrs &at) {
    const bool peep = p.peephole;
    auto fwd = [](blocklstm::LSTMOutputs<Tensor> r) {
        return std::vector<std::pair<std::string, Tensor>>{
            {"i", r.i}, {"cs", r.cs}, {"f", r.f}, {"o", r.o}, {"ci", r.ci}, {"co", r.co}, {"h", r.h}};
    };
    auto seqgrad = [](blocklstm::BlockLSTMGradOutputs<Tensor> r) {
        return std::vector<std::pair<std::string, Tensor>>{
            {"x_grad", r.x_grad},     {"cs_prev_grad", r.cs_prev_grad},
            {"h_prev_grad", r.h_prev_grad}, {"w_grad", r.w_grad},
            {"wci_grad", r.wci_grad}, {"wcf_grad", r.wcf_grad},
            {"wco_grad", r.wco_grad}, {"b_grad", r.b_grad}};
    };
    blocklstm::GradAttrs ga;
    ga.use_peephole = peep;
    if (p.op == "LSTMBlockCell") {
        blocklstm::LSTMBlockCellAttrs a;
        if (at.forget_bias) a.forget_bias = *at.forget_bias;
        if (at.cell_clip) a.cell_clip = *at.cell_clip;
        a.use_peephole = peep;
        return fwd(blocklstm::LSTMBlockCell(p["x"], p["cs_prev"], p["h_prev"], p["w"], p["wci"],
                                            p["wcf"], p["wco"], p["b"], a));
    }
    if (p.op == "BlockLSTM") {
        blocklstm::BlockLSTMAttrs a;
        if (at.forget_bias) a.forget_bias = *at.forget_bias;
        if (at.cell_clip) a.cell_clip = *at.cell_clip;
        a.use_peephole = peep;
        return fwd(blocklstm::BlockLSTM(p.seq_len_max, p["x"], p["cs_prev"], p["h_prev"], p["w"],
                                        p["wci"], p["wcf"], p["wco"], p["b"], a));
    }
    if (p.op == "BlockLSTMV2") {
        blocklstm::BlockLSTMV2Attrs a;
        if (at.cell_clip) a.cell_clip = *at.cell_clip;
        a.use_peephole = peep;
        return fwd(blocklstm::BlockLSTMV2(p.seq_len_max, p["x"], p["cs_prev"], p["h_prev"], p["w"],
                                          p["wci"], p["wcf"], p["wco"], p["b"], a));
    }
    if (p.op == "LSTMBlockCellGrad") {
        auto r = blocklstm::LSTMBlockCellGrad(p["x"], p["cs_prev"], p["h_prev"], p["w"], p["wci"],
                                              p["wcf"], p["wco"], p["b"], p["i"], p["cs"], p["f"],
                                              p["o"], p["ci"], p["co"], p["cs_grad"], p["h_grad"], ga);
        return {{"cs_prev_grad", r.cs_prev_grad}, {"dicfo", r.dicfo}, {"wci_grad", r.wci_grad},
                {"wcf_grad", r.wcf_grad}, {"wco_grad", r.wco_grad}};
    }
    auto fn = p.op == "BlockLSTMGrad"
                  ? static_cast<blocklstm::BlockLSTMGradOutputs<Tensor> (*)(
                        int64_t, const blocklstm::TV &, const blocklstm::TV &, const blocklstm::TV &,
                        const blocklstm::TV &, const blocklstm::TV &, const blocklstm::TV &,
                        const blocklstm::TV &, const blocklstm::TV &, const blocklstm::TV &,
                        const blocklstm::TV &, const blocklstm::TV &, const blocklstm::TV &,
                        const blocklstm::TV &, const blocklstm::TV &, const blocklstm::TV &,
                        const blocklstm::TV &, const blocklstm::TV &, const blocklstm::GradAttrs &,
                        const blocklstm::TV *)>(
                        &blocklstm::BlockLSTMGrad)
                  : static_cast<blocklstm::BlockLSTMGradOutputs<Tensor> (*)(
                        int64_t, const blocklstm::TV &, const blocklstm::TV &, const blocklstm::TV &,
                        const blocklstm::TV &, const blocklstm::TV &, const blocklstm::TV &,
                        const blocklstm::TV &, const blocklstm::TV &, const blocklstm::TV &,
                        const blocklstm::TV &, const blocklstm::TV &, const blocklstm::TV &,
                        const blocklstm::TV &, const blocklstm::TV &, const blocklstm::TV &,
                        const blocklstm::TV &, const blocklstm::TV &, const blocklstm::GradAttrs &,
                        const blocklstm::TV *)>(
                        &blocklstm::BlockLSTMGradV2);
    return seqgrad(fn(p.seq_len_max, p["x"], p["cs_prev"], p["h_prev"], p["w"], p["wci"], p["wcf"],
                      p["wco"], p["b"], p["i"], p["cs"], p["f"], p["o"], p["ci"], p["co"], p["h"],
                      p["cs_grad"], p["h_grad"], ga, nullptr));
}

// ---- run: every op, both dtypes, against the library -------------------------------------------

struct RunCase {
    std::string op;
    DType dtype;
    bool peephole;
    int64_t seq_len_max;
    Attrs attrs;
    std::string label;
};

std::vector<RunCase> run_cases() {
    std::vector<RunCase> cases;
    const char *ops[] = {"LSTMBlockCell", "LSTMBlockCellGrad", "BlockLSTM",
                         "BlockLSTMGrad", "BlockLSTMV2",       "BlockLSTMGradV2"};
    for (const char *op : ops)
        for (DType d : blocklstm::kFloatDTypes)
            for (bool peep : {false, true}) {
                RunCase c{op, d, peep, kT, {}, ""};
                c.label = std::string(op) + "_" + blocklstm::short_name(d) +
                          (peep ? "_peephole" : "_plain");
                cases.push_back(c);
            }
    // Attrs and a partial sequence.
    cases.push_back({"BlockLSTM", DType::f32, true, 3, {0.25f, 0.4f}, "BlockLSTM_f32_attrs_L3"});
    cases.push_back({"BlockLSTM", DType::f16, false, 0, {}, "BlockLSTM_f16_L0"});
    cases.push_back({"BlockLSTMV2", DType::f32, true, 4, {std::nullopt, 0.3f}, "BlockLSTMV2_f32_clip_L4"});
    cases.push_back({"LSTMBlockCell", DType::f16, true, 0, {0.0f, 0.0f}, "LSTMBlockCell_f16_attrs"});
    cases.push_back({"BlockLSTMGrad", DType::f32, true, 2, {}, "BlockLSTMGrad_f32_L2"});
    cases.push_back({"BlockLSTMGradV2", DType::f16, true, 3, {}, "BlockLSTMGradV2_f16_L3"});
    cases.push_back({"BlockLSTM", DType::bf16, true, 3, {0.25f, 0.4f}, "BlockLSTM_bf16_attrs_L3"});
    return cases;
}

std::string fmt_float(float v) {
    std::ostringstream s;
    s.precision(9);
    s << v;
    return s.str();
}

void PrintTo(const RunCase &c, std::ostream *os) { *os << c.label; }

class RunOp : public ::testing::TestWithParam<RunCase> {};

TEST_P(RunOp, MatchesLibrary) {
    const RunCase &c = GetParam();
    TempDir tmp;
    const std::string in = tmp / "in", out = tmp / "out/nested";  // out is created by the tool
    const Problem p = make_problem(c.op, c.dtype, c.peephole, c.seq_len_max,
                                   std::hash<std::string>{}(c.label));
    p.write(in);
    std::vector<std::string> args = {"run", c.op, "--in", in, "--out", out, "--device", "cpu"};
    if (c.peephole) args.push_back("--use-peephole");
    if (c.attrs.forget_bias) {
        args.push_back("--forget-bias");
        args.push_back(fmt_float(*c.attrs.forget_bias));
    }
    if (c.attrs.cell_clip) {
        args.push_back("--cell-clip=" + fmt_float(*c.attrs.cell_clip));
    }
    const Result r = run_cli(args);
    ASSERT_EQ(r.code, 0) << describe(r);
    EXPECT_TRUE(r.err.empty()) << describe(r);
    // One summary line: the op, x's shape, dtype, device, the time and what was written.
    const auto want = expected(p, c.attrs);
    EXPECT_TRUE(std::regex_match(r.out, std::regex(c.op + ": x \\[[0-9,]+\\] " + blocklstm::to_string(c.dtype) +
                                                   " on cpu.*: [0-9.]+ ms; wrote " + std::to_string(want.size()) +
                                                   " files to .*\n")))
        << r.out;

    std::size_t files = 0;
    for (const auto &e : fs::directory_iterator(out)) {
        (void)e;
        ++files;
    }
    EXPECT_EQ(files, want.size()) << "files in --out: " << listing(out);
    for (const auto &[name, t] : want) {
        SCOPED_TRACE(name + ".npy");
        npy::Array got;
        ASSERT_NO_THROW(got = npy::read((fs::path(out) / (name + ".npy")).string()));
        EXPECT_EQ(got.type, npy_type(c.dtype));
        EXPECT_EQ(got.shape, t.shape());
        ASSERT_EQ(got.data.size(), t.num_bytes());
        EXPECT_TRUE(t.num_bytes() == 0 || std::memcmp(got.data.data(), t.data(), t.num_bytes()) == 0)
            << name << " differs from the library's output";
    }
}

INSTANTIATE_TEST_SUITE_P(AllOps, RunOp, ::testing::ValuesIn(run_cases()),
                         [](const ::testing::TestParamInfo<RunCase> &info) { return info.param.label; });

// ---- run: seq_lengths.npy ----------------------------------------------------------------------

// The sequence ops read seq_lengths.npy where --in has it: the same bits as the library's call
// with those lengths; a float file is refused naming it, with nothing written.
TEST(RunSeqLengths, MatchesLibraryAndRefusesFloats) {
    for (const std::string op : {"BlockLSTM", "BlockLSTMGradV2"}) {
        SCOPED_TRACE(op);
        TempDir tmp;
        const std::string in = tmp / "in", out = tmp / "out";
        const Problem p = make_problem(op, DType::f32, true, kT, 17);
        p.write(in);
        Tensor lengths(DType::i32, {kB});
        for (int64_t b = 0; b < kB; ++b) lengths.data_as<int32_t>()[b] = static_cast<int32_t>((b * 3) % (kT + 1));
        npy::write((fs::path(in) / "seq_lengths.npy").string(), npy::Type::i32, {kB}, lengths.data(), lengths.num_bytes());
        const Result r = run_cli({"run", op, "--in", in, "--out", out, "--use-peephole"});
        ASSERT_EQ(r.code, 0) << describe(r);
        std::map<std::string, blocklstm::TensorView> views(p.in.begin(), p.in.end());
        views["seq_lengths"] = lengths;
        blocklstm::OpAttrs attrs;
        attrs.use_peephole = true;
        const auto want = blocklstm::invoke(op, kT, views, attrs);
        for (const auto &[name, t] : want) {
            const npy::Array got = npy::read((fs::path(out) / (name + ".npy")).string());
            ASSERT_EQ(got.data.size(), t.num_bytes()) << name;
            EXPECT_TRUE(t.num_bytes() == 0 || std::memcmp(got.data.data(), t.data(), t.num_bytes()) == 0) << name;
        }
        const float wrong[kB] = {};
        npy::write((fs::path(in) / "seq_lengths.npy").string(), npy::Type::f32, {kB}, wrong, sizeof wrong);
        const std::string out2 = tmp / "out2";
        const Result bad = run_cli({"run", op, "--in", in, "--out", out2, "--use-peephole"});
        EXPECT_EQ(bad.code, 2) << describe(bad);
        EXPECT_NE(bad.err.find("seq_lengths.npy: unsupported dtype float32 ('<f4'); expected int32 ('<i4') or int64"),
                  std::string::npos)
            << describe(bad);
        EXPECT_FALSE(fs::exists(out2));
    }
}

// ---- run: inputs in other .npy versions and shapes ---------------------------------------------

// Re-encodes a valid file as format version 2.0 or 3.0 (4-byte header length).
std::string as_version(const std::string &bytes, int major) {
    const npy::Header h = npy::parse_header(reinterpret_cast<const unsigned char *>(bytes.data()),
                                            bytes.size(), "file");
    std::string dict = bytes.substr(10, h.data_offset - 10);
    std::string out = bytes.substr(0, 6);
    out += static_cast<char>(major);
    out += '\0';
    const uint32_t len = static_cast<uint32_t>(dict.size());
    for (int k = 0; k < 4; ++k) out += static_cast<char>((len >> (8 * k)) & 0xff);
    return out + dict + bytes.substr(h.data_offset);
}

// The GPU run of every case against the library's CPU result: the CUDA kernels sum in another
// order, so within the variant tests' tolerances rather than bitwise.
TEST_P(RunOp, CudaMatchesCpu) {
    if (blt::skip_without_cuda()) GTEST_SKIP() << "no CUDA device";
    const RunCase &c = GetParam();
    TempDir tmp;
    const std::string in = tmp / "in", out = tmp / "out";
    const Problem p = make_problem(c.op, c.dtype, c.peephole, c.seq_len_max,
                                   std::hash<std::string>{}(c.label));
    p.write(in);
    std::vector<std::string> args = {"run", c.op, "--in", in, "--out", out, "--device", "cuda"};
    if (c.peephole) args.push_back("--use-peephole");
    if (c.attrs.forget_bias) args.insert(args.end(), {"--forget-bias", fmt_float(*c.attrs.forget_bias)});
    if (c.attrs.cell_clip) args.push_back("--cell-clip=" + fmt_float(*c.attrs.cell_clip));
    const Result r = run_cli(args);
    if (!blt::cuda_kernels_in(c.dtype)) {  // refused (exit 2), naming the kernel, and nothing written
        EXPECT_EQ(r.code, 2) << describe(r);
        EXPECT_NE(r.err.find("no compiled kernel"), std::string::npos) << describe(r);
        EXPECT_FALSE(std::filesystem::exists(out) && !std::filesystem::is_empty(out)) << "outputs written";
        return;
    }
    ASSERT_EQ(r.code, 0) << describe(r);
    // The library's tolerances against its float64 reference (tests/test_util.h), here between two
    // results each within them.
    const double tol = c.dtype == DType::f32 ? 1e-5 : c.dtype == DType::f16 ? 1e-2 : 6.25e-2;
    auto values = [&](const void *data, std::size_t count) {
        std::vector<double> v(count);
        const auto *bits = static_cast<const uint16_t *>(data);
        for (std::size_t k = 0; k < count; ++k)
            v[k] = c.dtype == DType::f32 ? static_cast<const float *>(data)[k]
                   : c.dtype == DType::f16 ? blocklstm::half_to_float(bits[k])
                                           : blocklstm::bfloat16_to_float(bits[k]);
        return v;
    };
    for (const auto &[name, t] : expected(p, c.attrs)) {
        npy::Array got;
        ASSERT_NO_THROW(got = npy::read((fs::path(out) / (name + ".npy")).string()));
        ASSERT_EQ(got.data.size(), t.num_bytes()) << name;
        const auto n = static_cast<std::size_t>(t.num_elements());
        const std::vector<double> gpu = values(got.data.data(), n), cpu = values(t.data(), n);
        double scale = 1, worst = 0;
        for (double x : cpu) scale = std::max(scale, std::abs(x));
        for (std::size_t k = 0; k < n; ++k) worst = std::max(worst, std::abs(gpu[k] - cpu[k]));
        EXPECT_LE(worst, tol * scale) << name << ": max |cuda - cpu|";
    }
}

TEST(Version, NamesLibraryHalideAndTargets) {
    for (const char *flag : {"--version", "version"}) {
        const Result r = run_cli({flag});
        ASSERT_EQ(r.code, 0) << r.err;
        EXPECT_NE(r.out.find(std::string("blocklstm ") + BLOCKLSTM_VERSION + " (kernels generated with Halide 21."),
                  std::string::npos) << r.out;
        for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets())
            EXPECT_NE(r.out.find(t.name), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("CUDA: "), std::string::npos) << r.out;
    }
}

TEST(RunInputs, AcceptsVersion2And3AndOneElementSeqLenMax) {
    TempDir tmp;
    const std::string in = tmp / "in", out = tmp / "out";
    const Problem p = make_problem("BlockLSTM", DType::f32, false, kT, 7);
    p.write(in);
    for (const char *name : {"x", "w"}) {
        const std::string path = (fs::path(in) / (std::string(name) + ".npy")).string();
        npy::write_bytes(path, as_version(slurp(path), name[0] == 'x' ? 2 : 3));
    }
    write_seq_len_max(in + "/seq_len_max.npy", kT, {1});
    const Result r = run_cli({"run", "BlockLSTM", "--in", in, "--out", out});
    ASSERT_EQ(r.code, 0) << describe(r);
    const auto want = expected(p, {});
    const npy::Array h = npy::read(out + "/h.npy");
    const Tensor &h_want = want.back().second;
    ASSERT_EQ(h.data.size(), h_want.num_bytes());
    EXPECT_EQ(std::memcmp(h.data.data(), h_want.data(), h_want.num_bytes()), 0);
}

// ---- run: malformed input -------------------------------------------------------------------

struct BadCase {
    std::string label;
    std::string op;
    std::function<void(const std::string &in)> corrupt;  // applied to a valid input dir
    std::vector<std::string> extra_args;
    std::vector<std::string> stderr_has;  // substrings (or regex when starting with "re:")
};

std::string file_in(const std::string &dir, const std::string &name) {
    return (fs::path(dir) / (name + ".npy")).string();
}

void replace_file(const std::string &dir, const std::string &name,
                  const std::function<std::string(std::string)> &edit) {
    const std::string path = file_in(dir, name);
    npy::write_bytes(path, edit(slurp(path)));
}

std::string header_text(const std::string &bytes) {
    return bytes.substr(10, static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8);
}

std::vector<BadCase> bad_cases() {
    std::vector<BadCase> c;
    c.push_back({"truncated_data", "BlockLSTM",
                 [](const std::string &in) {
                     replace_file(in, "x", [](std::string s) { return s.substr(0, s.size() - 3); });
                 },
                 {}, {"x.npy", "truncated"}});
    c.push_back({"header_past_eof", "BlockLSTM",
                 [](const std::string &in) {
                     replace_file(in, "cs_prev", [](std::string s) { return s.substr(0, 40); });
                 },
                 {}, {"cs_prev.npy", "header length"}});
    c.push_back({"bad_magic", "BlockLSTM",
                 [](const std::string &in) {
                     replace_file(in, "w", [](std::string s) {
                         s[1] = 'X';
                         return s;
                     });
                 },
                 {}, {"w.npy", "magic"}});
    c.push_back({"bad_header", "LSTMBlockCell",
                 [](const std::string &in) {
                     replace_file(in, "b", [](std::string s) {
                         const auto pos = s.find("'shape'");
                         s.replace(pos, 7, "'shap\"'");
                         return s;
                     });
                 },
                 {}, {"b.npy", "header"}});
    c.push_back({"bad_header_dict", "LSTMBlockCellGrad",
                 [](const std::string &in) {
                     replace_file(in, "h_grad", [](std::string s) {
                         s[10] = '[';
                         return s;
                     });
                 },
                 {}, {"h_grad.npy", "header"}});
    c.push_back({"bad_version", "BlockLSTMGrad",
                 [](const std::string &in) {
                     replace_file(in, "h", [](std::string s) {
                         s[6] = 4;
                         return s;
                     });
                 },
                 {}, {"h.npy", "version"}});
    c.push_back({"fortran_order", "BlockLSTM",
                 [](const std::string &in) {
                     const npy::Array a = npy::read(file_in(in, "x"));
                     npy::write_bytes(file_in(in, "x"), npy::encode_raw("<f4", true, a.shape,
                                                                        a.data.data(), a.data.size()));
                 },
                 {}, {"x.npy", "fortran_order"}});
    c.push_back({"big_endian", "BlockLSTMV2",
                 [](const std::string &in) {
                     const npy::Array a = npy::read(file_in(in, "h_prev"));
                     npy::write_bytes(file_in(in, "h_prev"), npy::encode_raw(">f4", false, a.shape,
                                                                             a.data.data(), a.data.size()));
                 },
                 {}, {"h_prev.npy", "big-endian"}});
    c.push_back({"float64", "BlockLSTM",
                 [](const std::string &in) {
                     const npy::Array a = npy::read(file_in(in, "cs_prev"));
                     std::vector<double> d(a.num_elements(), 0.5);
                     npy::write(file_in(in, "cs_prev"), npy::Type::f64, a.shape, d.data(), d.size() * 8);
                 },
                 {}, {"cs_prev.npy", "float64"}});
    c.push_back({"mixed_f16_f32", "BlockLSTMGradV2",
                 [](const std::string &in) {
                     const npy::Array a = npy::read(file_in(in, "wci"));
                     std::vector<uint16_t> d(a.num_elements(), blocklstm::float_to_half(0.25f));
                     npy::write(file_in(in, "wci"), npy::Type::f16, a.shape, d.data(), d.size() * 2);
                 },
                 {}, {"wci.npy", "float16", "float32"}});
    c.push_back({"mixed_bf16_f32", "BlockLSTM",
                 [](const std::string &in) {
                     const npy::Array a = npy::read(file_in(in, "b"));
                     std::vector<uint16_t> d(a.num_elements(), blocklstm::float_to_bfloat16(0.25f));
                     npy::write(file_in(in, "b"), npy::Type::bf16, a.shape, d.data(), d.size() * 2);
                 },
                 {}, {"b.npy", "bfloat16", "float32"}});
    c.push_back({"void4", "BlockLSTM",
                 [](const std::string &in) {
                     const npy::Array a = npy::read(file_in(in, "x"));
                     npy::write_bytes(file_in(in, "x"), npy::encode_raw("|V4", false, a.shape, a.data.data(), a.data.size()));
                 },
                 {}, {"x.npy", "'|V4'", "<V2 (bfloat16"}});
    c.push_back({"missing_file", "BlockLSTM",
                 [](const std::string &in) { fs::remove(file_in(in, "x")); }, {},
                 {"missing x.npy"}});
    c.push_back({"missing_files_named_at_once", "BlockLSTMGrad",
                 [](const std::string &in) {
                     for (const char *name : {"h_prev", "wco", "cs_grad"}) fs::remove(file_in(in, name));
                 },
                 {"--use-peephole"}, {"missing h_prev.npy, wco.npy, cs_grad.npy (3 files)"}});
    c.push_back({"missing_seq_len_max", "BlockLSTMGrad",
                 [](const std::string &in) { fs::remove(file_in(in, "seq_len_max")); }, {},
                 {"seq_len_max.npy"}});
    c.push_back({"wrong_shape", "BlockLSTM",
                 [](const std::string &in) {
                     std::vector<float> d((kI + kH + 1) * 4 * kH, 0.1f);
                     npy::write(file_in(in, "w"), npy::Type::f32, {kI + kH + 1, 4 * kH}, d.data(),
                                d.size() * 4);
                 },
                 {}, {"BlockLSTM", "re:\\bw\\b"}});
    c.push_back({"wrong_shape_grad", "LSTMBlockCellGrad",
                 [](const std::string &in) {
                     std::vector<float> d(kB * (kH + 1), 0.1f);
                     npy::write(file_in(in, "cs_grad"), npy::Type::f32, {kB, kH + 1}, d.data(), d.size() * 4);
                 },
                 {}, {"LSTMBlockCellGrad", "cs_grad"}});
    c.push_back({"seq_len_max_negative", "BlockLSTM",
                 [](const std::string &in) { write_seq_len_max(file_in(in, "seq_len_max"), -1); },
                 {}, {"seq_len_max"}});
    c.push_back({"seq_len_max_too_large", "BlockLSTMGrad",
                 [](const std::string &in) { write_seq_len_max(file_in(in, "seq_len_max"), kT + 1); },
                 {}, {"seq_len_max"}});
    c.push_back({"seq_len_max_2d", "BlockLSTMV2",
                 [](const std::string &in) {
                     write_seq_len_max(file_in(in, "seq_len_max"), 2, {1, 1});
                 },
                 {}, {"seq_len_max.npy", "(1, 1)"}});
    c.push_back({"seq_len_max_float", "BlockLSTM",
                 [](const std::string &in) {
                     const float v = 2;
                     npy::write(file_in(in, "seq_len_max"), npy::Type::f32, {}, &v, 4);
                 },
                 {}, {"seq_len_max.npy", "int64"}});
    c.push_back({"unknown_op", "FooLSTM", [](const std::string &) {}, {}, {"FooLSTM"}});
    c.push_back({"forget_bias_v2", "BlockLSTMV2", [](const std::string &) {},
                 {"--forget-bias", "1.0"}, {"--forget-bias", "BlockLSTMV2"}});
    c.push_back({"cell_clip_grad", "BlockLSTMGrad", [](const std::string &) {},
                 {"--cell-clip", "1.0"}, {"--cell-clip", "BlockLSTMGrad"}});
    c.push_back({"unknown_option", "BlockLSTM", [](const std::string &) {}, {"--bogus"},
                 {"--bogus"}});
    c.push_back({"bad_float", "BlockLSTM", [](const std::string &) {}, {"--cell-clip", "abc"},
                 {"--cell-clip", "abc"}});
    c.push_back({"device_cuda", "BlockLSTM", [](const std::string &) {}, {"--device", "cuda"},
                 {"cuda"}});
    c.push_back({"device_unknown", "BlockLSTM", [](const std::string &) {}, {"--device", "tpu"},
                 {"--device", "tpu"}});
    return c;
}

void PrintTo(const BadCase &c, std::ostream *os) { *os << c.label; }

class BadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadInput, ExitsTwoNamesCulpritWritesNothing) {
    const BadCase &c = GetParam();
    if (c.label == "device_cuda" && blocklstm::cuda_device_count() > 0)
        GTEST_SKIP() << "a CUDA device is present: --device cuda is valid here";
    TempDir tmp;
    const std::string in = tmp / "in", out = tmp / "out";
    const std::string base_op = c.op == "FooLSTM" ? "BlockLSTM" : c.op;
    make_problem(base_op, DType::f32, true, kT, 11).write(in);
    c.corrupt(in);
    fs::create_directories(out);
    std::vector<std::string> args = {"run", c.op, "--in", in, "--out", out};
    args.insert(args.end(), c.extra_args.begin(), c.extra_args.end());
    const Result r = run_cli(args);
    EXPECT_EQ(r.code, 2) << describe(r);
    EXPECT_EQ(r.err.rfind("blocklstm: ", 0), 0u) << describe(r);
    for (const std::string &s : c.stderr_has) {
        if (s.rfind("re:", 0) == 0)
            EXPECT_TRUE(std::regex_search(r.err, std::regex(s.substr(3)))) << s << "\n" << describe(r);
        else
            EXPECT_NE(r.err.find(s), std::string::npos) << "stderr lacks '" << s << "'\n" << describe(r);
    }
    EXPECT_TRUE(r.out.empty()) << describe(r);
    EXPECT_TRUE(dir_is_empty_or_missing(out)) << "left in --out: " << listing(out);
}

INSTANTIATE_TEST_SUITE_P(Malformed, BadInput, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase> &info) { return info.param.label; });

TEST(BadInput, OutDirNotCreatedOnError) {
    TempDir tmp;
    const std::string in = tmp / "in", out = tmp / "never";
    make_problem("BlockLSTM", DType::f32, false, kT, 3).write(in);
    write_seq_len_max(file_in(in, "seq_len_max"), kT + 7);
    const Result r = run_cli({"run", "BlockLSTM", "--in", in, "--out", out});
    EXPECT_EQ(r.code, 2) << describe(r);
    EXPECT_FALSE(fs::exists(out)) << listing(out);
}

// A write that fails part way (here: past a file size limit) leaves no directory it created.
TEST(BadInput, OutDirsCreatedAreRemovedWhenAWriteFails) {
    TempDir tmp;
    const std::string in = tmp / "in", out = (fs::path(tmp / "new") / "deeper").string();
    make_problem("BlockLSTM", DType::f32, false, kT, 3).write(in);
    const Result r = run_cli({"run", "BlockLSTM", "--in", in, "--out", out}, 300);  // h.npy is 488 bytes
    EXPECT_EQ(r.code, 2) << describe(r);
    EXPECT_NE(r.err.find("cannot write"), std::string::npos) << describe(r);
    EXPECT_FALSE(fs::exists(tmp / "new")) << listing(tmp / "new");
    EXPECT_EQ(run_cli({"run", "BlockLSTM", "--in", in, "--out", out}).code, 0);  // the same run, no limit
}

TEST(BadInput, ExistingOutputsUntouchedOnError) {
    TempDir tmp;
    const std::string in = tmp / "in", out = tmp / "out";
    make_problem("BlockLSTM", DType::f32, false, kT, 3).write(in);
    ASSERT_EQ(run_cli({"run", "BlockLSTM", "--in", in, "--out", out}).code, 0);
    const std::string h_before = slurp(out + "/h.npy");
    write_seq_len_max(file_in(in, "seq_len_max"), -3);
    const Result r = run_cli({"run", "BlockLSTM", "--in", in, "--out", out});
    EXPECT_EQ(r.code, 2) << describe(r);
    EXPECT_EQ(slurp(out + "/h.npy"), h_before);
    std::size_t files = 0;
    for (const auto &e : fs::directory_iterator(out)) {
        (void)e;
        ++files;
    }
    EXPECT_EQ(files, 7u) << listing(out);  // no temporaries left behind
}

// --out into a directory that holds other files and older outputs: the outputs replace the older
// ones (the bytes of a run into an empty directory), the other files stay as they were.
TEST(RunOutput, IntoANonEmptyDirectory) {
    TempDir tmp;
    const std::string in = tmp / "in", fresh = tmp / "fresh", out = tmp / "out";
    make_problem("BlockLSTM", DType::f32, true, kT, 5).write(in);
    ASSERT_EQ(run_cli({"run", "BlockLSTM", "--in", in, "--out", fresh, "--use-peephole"}).code, 0);
    fs::create_directories(out);
    std::ofstream(out + "/notes.txt") << "the user's notes";
    std::ofstream(out + "/h.npy") << "an older h";
    std::ofstream(out + "/cs.npy") << "an older cs";
    const Result r = run_cli({"run", "BlockLSTM", "--in", in, "--out", out, "--use-peephole"});
    ASSERT_EQ(r.code, 0) << describe(r);
    EXPECT_EQ(slurp(out + "/notes.txt"), "the user's notes");
    std::size_t files = 0;
    for (const auto &e : fs::directory_iterator(fresh)) {
        const std::string name = e.path().filename().string();
        EXPECT_EQ(slurp(out + "/" + name), slurp(e.path().string())) << name;
        ++files;
    }
    EXPECT_EQ(files, 7u) << listing(fresh);
    std::size_t now = 0;
    for (const auto &e : fs::directory_iterator(out)) {
        (void)e;
        ++now;
    }
    EXPECT_EQ(now, 8u) << listing(out);  // the seven outputs and the notes, no temporary
}

// An output that cannot be put in place (a directory of its name) after others were: the files
// there before the run are all back as they were, and no output or temporary is left.
TEST(BadInput, FailedRenameRestoresEarlierFiles) {
    TempDir tmp;
    const std::string in = tmp / "in", out = tmp / "out";
    make_problem("BlockLSTM", DType::f32, false, kT, 3).write(in);
    fs::create_directories(out + "/h.npy");  // h is the last output
    for (const char *name : {"i", "cs"}) std::ofstream(out + "/" + name + ".npy") << "old " << name;
    const Result r = run_cli({"run", "BlockLSTM", "--in", in, "--out", out});
    EXPECT_EQ(r.code, 2) << describe(r);
    EXPECT_NE(r.err.find("cannot write h.npy"), std::string::npos) << describe(r);
    EXPECT_EQ(slurp(out + "/i.npy"), "old i");
    EXPECT_EQ(slurp(out + "/cs.npy"), "old cs");
    std::size_t files = 0;
    for (const auto &e : fs::directory_iterator(out)) {
        (void)e;
        ++files;
    }
    EXPECT_EQ(files, 3u) << listing(out);  // i.npy, cs.npy and the directory h.npy
}

// ---- bench ------------------------------------------------------------------------------------

std::vector<std::string> lines_of(const std::string &text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

// The value printed as "  <name> <float> ms" (median / min / max), or NaN.
double stat_line(const std::string &out, const std::string &name) {
    std::smatch m;
    if (std::regex_search(out, m, std::regex("\\n  " + name + " +([0-9.]+) ms\\n"))) return std::stod(m[1]);
    return NAN;
}

std::vector<std::string> with_args(std::vector<std::string> a, const std::vector<std::string> &more) {
    a.insert(a.end(), more.begin(), more.end());
    return a;
}

struct BenchShape {
    int64_t T = 3, B = 2, I = 5, H = 4;
};

std::vector<std::string> bench_args(const std::string &op, const std::string &dtype, bool peephole,
                                    const BenchShape &s = {}) {
    std::vector<std::string> a = {"bench", op};
    if (op != "LSTMBlockCell" && op != "LSTMBlockCellGrad")
        a.insert(a.end(), {"--time", std::to_string(s.T)});
    a.insert(a.end(), {"--batch", std::to_string(s.B), "--input", std::to_string(s.I), "--cell",
                       std::to_string(s.H), "--dtype", dtype, "--threads", "2"});
    if (peephole) a.push_back("--use-peephole");
    return a;
}

// docs/performance.md, written out independently of the tool: GEMM FLOPs, L = T (1 for the cell ops).
double expected_flops(const std::string &op, const BenchShape &s) {
    const bool cell = op == "LSTMBlockCell" || op == "LSTMBlockCellGrad";
    const double L = cell ? 1 : s.T;
    if (op == "LSTMBlockCellGrad") return 0;
    if (op == "BlockLSTMGrad" || op == "BlockLSTMGradV2")
        return 2 * L * s.B * 4 * s.H * s.H + 2 * L * s.B * 4 * s.H * s.I +
               2 * L * s.B * 4 * s.H * (s.I + s.H);
    return 2 * L * s.B * 4 * s.H * (s.I + s.H);
}

TEST(Bench, EveryOpAndDtypeEndsWithMedianAndGflops) {
    const std::regex final_re(R"(^median_ms=([0-9]+\.[0-9]+) gflops=([0-9]+\.[0-9]+)$)");
    const BenchShape shape;
    int k = 0;
    for (const char *op : {"LSTMBlockCell", "LSTMBlockCellGrad", "BlockLSTM", "BlockLSTMGrad",
                           "BlockLSTMV2", "BlockLSTMGradV2"})
        for (const char *dtype : {"float32", "float16", "bfloat16"}) {
            const bool peephole = (k++ % 3) != 0;
            std::vector<std::string> args = bench_args(op, dtype, peephole, shape);
            args.insert(args.end(), {"--reps", "3", "--warmup", "1"});
            const Result r = run_cli(args);
            SCOPED_TRACE(std::string(op) + " " + dtype + (peephole ? " peephole" : ""));
            ASSERT_EQ(r.code, 0) << describe(r);
            const std::vector<std::string> lines = lines_of(r.out);
            ASSERT_FALSE(lines.empty());
            std::smatch m;
            ASSERT_TRUE(std::regex_match(lines.back(), m, final_re)) << describe(r);
            const double median = std::stod(m[1]), gflops = std::stod(m[2]);
            EXPECT_NE(r.out.find(op), std::string::npos) << r.out;
            EXPECT_NE(r.out.find(dtype), std::string::npos) << r.out;
            EXPECT_NE(r.out.find("timing 3 calls"), std::string::npos) << r.out;
            const double med = stat_line(r.out, "median"), lo = stat_line(r.out, "min"),
                         hi = stat_line(r.out, "max");
            EXPECT_NEAR(med, median, 1e-6) << r.out;
            EXPECT_LE(lo, med) << r.out;
            EXPECT_LE(med, hi) << r.out;
            EXPECT_GT(median, 0.0) << r.out;
            const double want = expected_flops(op, shape) / (median * 1e6);
            EXPECT_NEAR(gflops, want, 1e-3 + 2e-3 * want) << r.out;
            if (std::string(op) == "LSTMBlockCellGrad")  // no GEMM: reported as 0
                EXPECT_EQ(std::string(m[2]), "0.000") << r.out;
        }
}

TEST(Bench, PrintRepsGivesEveryTimedCall) {
    std::vector<std::string> args = bench_args("BlockLSTMGrad", "float32", true);
    args.insert(args.end(), {"--reps", "4", "--print-reps"});
    const Result r = run_cli(args);
    ASSERT_EQ(r.code, 0) << describe(r);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(\n  reps_ms=([0-9.,]+)\n)"))) << r.out;
    std::vector<double> v;
    std::stringstream list(m[1].str());
    for (std::string item; std::getline(list, item, ',');) v.push_back(std::stod(item));
    ASSERT_EQ(v.size(), 4u) << r.out;
    std::sort(v.begin(), v.end());
    EXPECT_NEAR(stat_line(r.out, "median"), 0.5 * (v[1] + v[2]), 2e-6) << r.out;
    EXPECT_NEAR(stat_line(r.out, "min"), v[0], 1e-6) << r.out;
    EXPECT_NEAR(stat_line(r.out, "max"), v[3], 1e-6) << r.out;
}

// The comma-separated list printed as "  <name>=a,b,...".
std::vector<double> printed_list(const std::string &out, const std::string &name) {
    std::smatch m;
    std::vector<double> v;
    if (!std::regex_search(out, m, std::regex("\\n  " + name + "=([0-9.,]+)\\n"))) return v;
    std::stringstream list(m[1].str());
    for (std::string item; std::getline(list, item, ',');) v.push_back(std::stod(item));
    return v;
}

// A bench run of 5 timed calls, each alternating with another (`other`: "padded" or "apart"): the
// last line's "<other>_median_ms" and ratio are those of the printed calls (the median of the
// pairs' ratios, not of the medians).
void expect_the_pairs_printed(const Result &r, const std::string &other) {
    const std::vector<double> timed = printed_list(r.out, "reps_ms"), others = printed_list(r.out, other + "_reps_ms");
    ASSERT_EQ(timed.size(), 5u) << r.out;
    ASSERT_EQ(others.size(), 5u) << r.out;
    std::vector<double> ratios;
    for (std::size_t k = 0; k < 5; ++k) ratios.push_back(timed[k] / others[k]);
    std::sort(ratios.begin(), ratios.end());
    std::vector<double> sorted_others = others;
    std::sort(sorted_others.begin(), sorted_others.end());
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex(" " + other + R"(_median_ms=([0-9.]+) ratio=([0-9.]+)\n$)")))
        << r.out;
    EXPECT_NEAR(std::stod(m[1]), sorted_others[2], 1e-6) << r.out;
    EXPECT_NEAR(std::stod(m[2]), ratios[2], 1e-4 + 1e-3 * ratios[2]) << r.out;
    EXPECT_NE(r.out.find("median_ms="), std::string::npos) << r.out;
}

// --against-padded: every timed call paired with the padded one.
TEST(Bench, AgainstPaddedPairsEveryCallWithThePaddedOne) {
    for (const char *op : {"BlockLSTM", "BlockLSTMGradV2"}) {
        std::vector<std::string> args = bench_args(op, "float32", false, {7, 5, 3, 4});
        args.insert(args.end(), {"--reps", "5", "--lengths", "spread", "--against-padded", "--print-reps"});
        const Result r = run_cli(args);
        SCOPED_TRACE(op);
        ASSERT_EQ(r.code, 0) << describe(r);
        expect_the_pairs_printed(r, "padded");
    }
}

// --side-by-side: every timed call (two calls in one invoke_side_by_side) paired with the same two
// one after the other; the FLOPs the two calls'.
TEST(Bench, SideBySidePairsEveryCallWithTheTwoApart) {
    for (const char *op : {"BlockLSTMV2", "BlockLSTMGrad"}) {
        std::vector<std::string> args = bench_args(op, "float32", false, {7, 5, 3, 4});
        const Result one = run_cli(with_args(args, {"--reps", "2", "--warmup", "1"}));
        args.insert(args.end(), {"--reps", "5", "--side-by-side", "--print-reps"});
        const Result r = run_cli(args);
        SCOPED_TRACE(op);
        ASSERT_EQ(r.code, 0) << describe(r);
        ASSERT_EQ(one.code, 0) << describe(one);
        expect_the_pairs_printed(r, "apart");
        const std::regex flops(R"(FLOPs per call ([0-9.e+]+))");
        std::smatch f1, f2;
        ASSERT_TRUE(std::regex_search(one.out, f1, flops)) << one.out;
        ASSERT_TRUE(std::regex_search(r.out, f2, flops)) << r.out;
        EXPECT_DOUBLE_EQ(std::stod(f2[1]), 2 * std::stod(f1[1])) << r.out;
    }
}

// --inference: the forward ops with i, f, o, ci, co left out (a sequence op's cs, on the CPU, each
// row's final state), with lengths too; the grad ops refuse it (BadArgumentsExitTwoAndNameTheOption).
TEST(Bench, InferenceRunsTheForwardOps) {
    const std::regex final_re(R"(\nmedian_ms=[0-9]+\.[0-9]+ gflops=[0-9]+\.[0-9]+\n$)");
    for (const char *op : {"LSTMBlockCell", "BlockLSTM", "BlockLSTMV2"})
        for (bool lengths : {false, true}) {
            if (lengths && std::string(op) == "LSTMBlockCell") continue;
            std::vector<std::string> args = bench_args(op, "float32", true, {7, 9, 3, 4});
            args.insert(args.end(), {"--reps", "3", "--warmup", "1", "--inference"});
            if (lengths) args.insert(args.end(), {"--lengths", "spread"});
            const Result r = run_cli(args);
            SCOPED_TRACE(std::string(op) + (lengths ? " lengths" : ""));
            ASSERT_EQ(r.code, 0) << describe(r);
            EXPECT_TRUE(std::regex_search(r.out, final_re)) << r.out;
        }
}

// --lengths sorted: spread's lengths (the same seed) longest first, so the same row-steps run,
// fewer than T * B, and the header says which.
TEST(Bench, SortedLengthsAreTheSpreadOnesLongestFirst) {
    auto row_steps = [](const std::string &lengths, std::string *line) {
        std::vector<std::string> args = bench_args("BlockLSTM", "float32", false, {20, 7, 3, 4});
        args.insert(args.end(), {"--reps", "2", "--warmup", "1", "--seed", "11", "--lengths", lengths});
        const Result r = run_cli(args);
        EXPECT_EQ(r.code, 0) << describe(r);
        std::smatch m;
        if (!std::regex_search(r.out, m, std::regex(R"(\n  seq_lengths ([^:]+): ([0-9]+) of ([0-9]+) row-steps run\n)")))
            return std::pair<long, long>{-1, -1};
        *line = m[1];
        return std::pair<long, long>{std::stol(m[2]), std::stol(m[3])};
    };
    std::string spread_line, sorted_line;
    const auto spread = row_steps("spread", &spread_line), sorted = row_steps("sorted", &sorted_line);
    EXPECT_EQ(spread_line, "spread uniformly over [ceil(T/4), T]");
    EXPECT_EQ(sorted_line, "spread uniformly over [ceil(T/4), T], longest first");
    EXPECT_EQ(spread.second, 20 * 7);
    EXPECT_EQ(sorted, spread);
    EXPECT_LT(spread.first, 20 * 7);
    EXPECT_GE(spread.first, 5 * 7);  // every row at least ceil(T/4) = 5 steps
}

TEST(Bench, DefaultRepsAndWarmup) {
    const Result r = run_cli(bench_args("BlockLSTM", "float32", false));
    ASSERT_EQ(r.code, 0) << describe(r);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(timing ([0-9]+) calls)"))) << r.out;
    const int reps = std::stoi(m[1]);
    EXPECT_GE(reps, 5);
    EXPECT_LE(reps, 1000);
    EXPECT_NE(r.out.find("warm-up:"), std::string::npos) << r.out;
}

TEST(Bench, DeviceCudaRunsOnTheGpu) {
    if (blt::skip_without_cuda()) GTEST_SKIP() << "no CUDA device";
    for (const char *op : {"BlockLSTM", "BlockLSTMGrad"}) {
        std::vector<std::string> args = bench_args(op, "float32", true);
        args.insert(args.end(), {"--device", "cuda"});
        const Result r = run_cli(args);
        ASSERT_EQ(r.code, 0) << describe(r);
        EXPECT_NE(r.out.find("device cuda"), std::string::npos) << r.out;
        EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(median_ms=[0-9.]+ gflops=[0-9.]+\n$)"))) << r.out;
    }
}

TEST(Bench, DeviceCudaFailsLikeRun) {
    if (blocklstm::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
    std::vector<std::string> args = bench_args("BlockLSTM", "float32", false);
    args.insert(args.end(), {"--device", "cuda"});
    const Result b = run_cli(args);
    TempDir tmp;
    const Result r = run_cli({"run", "BlockLSTM", "--in", tmp / "in", "--out", tmp / "out", "--device", "cuda"});
    EXPECT_EQ(b.code, 2) << describe(b);
    EXPECT_EQ(r.code, 2) << describe(r);
    EXPECT_NE(b.err.find("cuda"), std::string::npos) << describe(b);
    if (blocklstm::cuda_built())  // the reason, as `blocklstm list` gives it
        EXPECT_NE(b.err.find(blocklstm::cuda_unavailable_reason()), std::string::npos) << describe(b);
    EXPECT_EQ(b.err, r.err);  // the same check, the same message
    EXPECT_EQ(b.out, "");
    args.back() = "tpu";
    const Result t = run_cli(args);
    EXPECT_EQ(t.code, 2) << describe(t);
    EXPECT_NE(t.err.find("tpu"), std::string::npos) << describe(t);
}

TEST(Bench, BadArgumentsExitTwoAndNameTheOption) {
    const std::vector<std::string> shape = {"--batch", "2", "--input", "3", "--cell", "4"};
    const auto with = with_args;
    const struct {
        std::vector<std::string> args;
        std::string culprit;
    } cases[] = {
        {{"bench"}, "<OpName>"},
        {with({"bench", "BlockLSTM"}, shape), "--time"},
        {{"bench", "BlockLSTM", "--time", "3", "--input", "3", "--cell", "4"}, "--batch"},
        {{"bench", "BlockLSTM", "--time", "3", "--batch", "2", "--cell", "4"}, "--input"},
        {{"bench", "BlockLSTM", "--time", "3", "--batch", "2", "--input", "3"}, "--cell"},
        {with({"bench", "BlockLSTM", "--time", "3", "--dtype", "float64"}, shape), "--dtype"},
        {with({"bench", "BlockLSTM", "--time", "3", "--reps", "0"}, shape), "--reps"},
        {with({"bench", "BlockLSTM", "--time", "0"}, shape), "--time"},
        {with({"bench", "BlockLSTM", "--time", "3", "--batch", "0"}, shape), "--batch"},
        {with({"bench", "BlockLSTM", "--time", "3", "--warmup", "x"}, shape), "--warmup"},
        {with({"bench", "BlockLSTM", "--time", "3", "--frobnicate"}, shape), "--frobnicate"},
        {with({"bench", "LSTMBlockCell", "--time", "5"}, shape), "--time"},
        {with({"bench", "BlockLSTMv3", "--time", "3"}, shape), "BlockLSTMv3"},
        {with({"bench", "BlockLSTM", "BlockLSTMGrad", "--time", "3"}, shape), "BlockLSTMGrad"},
        {with({"bench", "BlockLSTM", "--time", "3", "--seed", "-1"}, shape), "--seed"},  // not wrapped to 2^64-1
        {with({"bench", "BlockLSTM", "--time", "3", "--against-padded"}, shape), "--against-padded"},
        {with({"bench", "BlockLSTMGrad", "--time", "3", "--inference"}, shape), "--inference"},
        {with({"bench", "BlockLSTM", "--time", "3", "--lengths", "full", "--against-padded", "--side-by-side"}, shape),
         "--side-by-side is given with --against-padded"},
        {with({"bench", "BlockLSTM", "--time", "3", "--seed", "99999999999999999999999"}, shape), "--seed"},
        // The library's int32 limit, before any tensor is allocated: w [I+H, 4H] at H = 23200.
        {{"bench", "BlockLSTM", "--time", "1", "--batch", "1", "--input", "1", "--cell", "23200", "--dtype", "float16"},
         "'w' of [I+H,4H] would have 2153052800 elements"},
    };
    for (const auto &c : cases) {
        const Result r = run_cli(c.args);
        std::string cmd;
        for (const auto &a : c.args) cmd += a + " ";
        EXPECT_EQ(r.code, 2) << cmd << describe(r);
        EXPECT_NE(r.err.find(c.culprit), std::string::npos) << cmd << describe(r);
        EXPECT_EQ(r.err.find("median_ms"), std::string::npos);
        EXPECT_EQ(r.out, "") << cmd;
    }
}

TEST(Bench, LongRunsShowProgressOnStderr) {
    // Calibrate, then ask for at least 5 s of calls: more than the 2 s above which progress shows.
    // The fastest call of the calibration bounds every later one (a median of a few cold calls
    // once overestimated the time by 3x, and the run finished in 1.5 s without progress).
    const BenchShape shape{50, 8, 64, 64};
    std::vector<std::string> args = bench_args("BlockLSTM", "float32", false, shape);
    Result r = run_cli(with_args(args, {"--reps", "200"}));
    ASSERT_EQ(r.code, 0) << describe(r);
    const double per_call = stat_line(r.out, "min");
    ASSERT_GT(per_call, 0.0) << r.out;
    const long reps = std::clamp(static_cast<long>(5000.0 / per_call), 1L, 1000000L);
    r = run_cli(with_args(args, {"--reps", std::to_string(reps)}));
    ASSERT_EQ(r.code, 0) << describe(r);
    EXPECT_NE(r.err.find("bench: rep "), std::string::npos) << describe(r);
    EXPECT_NE(r.err.find("bench: rep " + std::to_string(reps) + "/" + std::to_string(reps)),
              std::string::npos) << describe(r);
    EXPECT_TRUE(std::regex_match(lines_of(r.out).back(), std::regex(R"(median_ms=[0-9.]+ gflops=[0-9.]+)")))
        << r.out;
    // A short run shows none.
    EXPECT_EQ(run_cli(with_args(args, {"--reps", "3"})).err, "");
}

TEST(Bench, HelpDescribesBench) {
    const Result r = run_cli({"--help"});
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.out.find("blocklstm bench <OpName> --time T --batch B --input I --cell H"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("median_ms=<float> gflops=<float>"), std::string::npos) << r.out;
}

// ---- usage ------------------------------------------------------------------------------------

TEST(Usage, NoArgumentsExitsTwoWithUsage) {
    const Result r = run_cli({});
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("usage:"), std::string::npos) << describe(r);
}

TEST(Usage, HelpExitsZero) {
    const Result r = run_cli({"--help"});
    EXPECT_EQ(r.code, 0) << describe(r);
    EXPECT_NE(r.out.find("usage:"), std::string::npos) << describe(r);
}

// --help lists every op's files from the op registry: inputs, outputs and attrs.
TEST(Usage, HelpListsEveryOpsFilesAndAttrs) {
    const Result r = run_cli({"--help"});
    ASSERT_EQ(r.code, 0) << describe(r);
    for (const blocklstm::OpInfo &op : blocklstm::ops()) {
        const std::size_t at = r.out.find("\n  " + op.name + ": ");
        ASSERT_NE(at, std::string::npos) << op.name << "\n" << r.out;
        const std::string block = r.out.substr(at, r.out.find("attrs:", at) - at);
        for (const blocklstm::OpArg &a : op.inputs) EXPECT_NE(block.find(" " + a.name + a.shape), std::string::npos) << op.name << " " << a.name;
        for (const blocklstm::OpArg &a : op.outputs) EXPECT_NE(block.find(" " + a.name + a.shape), std::string::npos) << op.name << " " << a.name;
        EXPECT_EQ(block.find("seq_len_max") != std::string::npos, op.sequence) << op.name;
    }
}

// A usage error is one line that says where the help is, not the whole usage.
TEST(Usage, UnknownCommandAndMissingOptions) {
    for (const std::vector<std::string> &args :
         {std::vector<std::string>{"frobnicate"}, {"run"}, {"run", "BlockLSTM", "--in", "x"},
          {"run", "BlockLSTM", "--out"}, {"list", "extra"}, {"demo", "--steps", "0"}}) {
        const Result r = run_cli(args);
        EXPECT_EQ(r.code, 2) << args[0] << " " << describe(r);
        const std::string help = args[0] == "frobnicate" ? "blocklstm --help" : "blocklstm " + args[0] + " --help";
        EXPECT_TRUE(std::regex_match(r.err, std::regex("blocklstm: [^\n]+ \\(see '" + help + "'\\)\n"))) << describe(r);
    }
}

// `<command> --help` is that command's usage and help only; run's and bench's list the ops' files.
TEST(Usage, EachCommandHasItsOwnHelp) {
    const std::map<std::string, std::string> own = {{"run", "run <OpName>   Run one"}, {"bench", "median_ms=<float>"},
                                                    {"list", "--kernels also every kernel"}, {"demo", "Train a small"}};
    for (const auto &[command, text] : own) {
        const Result r = run_cli({command, "--help"});
        ASSERT_EQ(r.code, 0) << describe(r);
        EXPECT_EQ(r.out.rfind("usage: blocklstm " + command, 0), 0u) << r.out;
        for (const auto &[other, other_text] : own)
            EXPECT_EQ(r.out.find(other_text) != std::string::npos, other == command) << command << " / " << other << "\n" << r.out;
        EXPECT_EQ(r.out.find("\n  BlockLSTMGrad: ") != std::string::npos, command == "run" || command == "bench") << r.out;
    }
}

// Help is asked for by `help <command>` or a --help / -h among a command's options, never by the
// value of an option nor for a command that does not exist.
TEST(Usage, HelpOnlyWhereAsked) {
    const Result help_run = run_cli({"help", "run"});
    EXPECT_EQ(help_run.code, 0) << describe(help_run);
    EXPECT_EQ(help_run.out.rfind("usage: blocklstm run", 0), 0u) << help_run.out;
    const Result value = run_cli({"run", "BlockLSTM", "--in", "/no/such/dir", "--out", "-h"});
    EXPECT_EQ(value.code, 2) << describe(value);
    EXPECT_NE(value.err.find("--in /no/such/dir: no such directory"), std::string::npos) << describe(value);
    const Result unknown = run_cli({"frob", "--help"});
    EXPECT_EQ(unknown.code, 2) << describe(unknown);
    EXPECT_NE(unknown.err.find("unknown command 'frob'"), std::string::npos) << describe(unknown);
}

// ---- list ---------------------------------------------------------------------------------------

// Every kernel of the library's table (which variants_test holds to kernels.inc) is listed.
TEST(List, PrintsEveryKernelOfTheTable) {
    const Result r = run_cli({"list", "--kernels"});
    ASSERT_EQ(r.code, 0) << describe(r);
    ASSERT_FALSE(blocklstm::kernels().empty());
    for (const blocklstm::KernelInfo &k : blocklstm::kernels())
        EXPECT_TRUE(std::regex_search(r.out, std::regex("(^|\\n)" + k.name + "\\s"))) << k.name << "\n" << r.out;
    EXPECT_NE(r.out.find(blocklstm::cpu_target_in_use()), std::string::npos) << r.out;
}

// Plain `list` opens with the op variants and names the kernel count, not the kernel rows.
TEST(List, OpVariantsFirstKernelRowsOnRequest) {
    const Result r = run_cli({"list"});
    ASSERT_EQ(r.code, 0) << describe(r);
    EXPECT_EQ(r.out.rfind("op variants", 0), 0u) << r.out;
    EXPECT_NE(r.out.find(std::to_string(blocklstm::kernels().size()) + " kernels; `blocklstm list --kernels` lists them."),
              std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(blocklstm::kernels().front().name + " "), std::string::npos) << r.out;
}

// Without --use-peephole the peephole vectors may be left out: the op runs as with zeros.
TEST(RunInputs, PeepholeVectorsOptionalWithoutUsePeephole) {
    TempDir tmp;
    const std::string in = tmp / "in", with = tmp / "with", without = tmp / "without";
    make_problem("BlockLSTMGrad", DType::f32, false, kT, 5).write(in);
    ASSERT_EQ(run_cli({"run", "BlockLSTMGrad", "--in", in, "--out", with}).code, 0);
    for (const char *name : {"wci", "wcf", "wco"}) fs::remove(file_in(in, name));
    const Result r = run_cli({"run", "BlockLSTMGrad", "--in", in, "--out", without});
    ASSERT_EQ(r.code, 0) << describe(r);
    for (const char *name : {"x_grad", "w_grad", "b_grad", "wci_grad"})
        EXPECT_EQ(npy::read(file_in(with, name)).data, npy::read(file_in(without, name)).data) << name;
    const Result needs = run_cli({"run", "BlockLSTMGrad", "--in", in, "--out", without, "--use-peephole"});
    EXPECT_EQ(needs.code, 2);
    EXPECT_NE(needs.err.find("missing wci.npy, wcf.npy, wco.npy (3 files)"), std::string::npos) << describe(needs);
}

// The left-out peephole vectors are sized by cs_prev only when w agrees: an empty cs_prev that
// declares 2^40 units is an error naming it, not terabytes of zeros (std::bad_alloc before).
TEST(RunInputs, LeftOutPeepholesNeverLargerThanW) {
    TempDir tmp;
    const std::string in = tmp / "in", out = tmp / "out";
    make_problem("BlockLSTM", DType::f32, false, kT, 5).write(in);
    for (const char *name : {"wci", "wcf", "wco"}) fs::remove(file_in(in, name));
    const std::vector<int64_t> empty_huge{0, int64_t{1} << 40};
    for (const char *name : {"cs_prev", "h_prev"}) npy::write(file_in(in, name), npy::Type::f32, empty_huge, nullptr, 0);
    const Result r = run_cli({"run", "BlockLSTM", "--in", in, "--out", out});
    EXPECT_EQ(r.code, 2) << describe(r);
    EXPECT_NE(r.err.find("argument 'cs_prev'"), std::string::npos) << describe(r);
    EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << describe(r);
}

// ---- CPU targets --------------------------------------------------------------------------------

// An environment variable set for the scope of one test (the tool inherits the environment), then
// put back as the test process had it.
class ScopedEnvironment {
public:
    ScopedEnvironment(std::string name, const std::string &value) : name_(std::move(name)) {
        if (const char *old = std::getenv(name_.c_str())) old_ = old;
        ::setenv(name_.c_str(), value.c_str(), 1);
    }
    ~ScopedEnvironment() {
        if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
        else ::unsetenv(name_.c_str());
    }

private:
    std::string name_;
    std::optional<std::string> old_;
};

TEST(CpuTarget, ListShowsEveryTargetAndThePin) {
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        if (!t.runs_here) continue;
        ScopedEnvironment pin("BLOCKLSTM_CPU_TARGET", t.name);
        const Result r = run_cli({"list"});
        ASSERT_EQ(r.code, 0) << describe(r);
        EXPECT_NE(r.out.find("CPU target in use: " + t.name + " (pinned)"), std::string::npos) << r.out;
        for (const blocklstm::CpuTarget &u : blocklstm::cpu_targets())
            EXPECT_TRUE(std::regex_search(  // names and targets hold no regex metacharacters
                r.out, std::regex("\n  " + u.name + " +" + u.halide_target + " +table " + u.tuning_table)))
                << u.name << "\n" << r.out;
        // And where each table compiled in was tuned.
        for (const blocklstm::CpuTarget &u : blocklstm::cpu_targets())
            EXPECT_NE(r.out.find(u.tuning_table + " " ), std::string::npos) << r.out;
    }
}

TEST(CpuTarget, BenchRunsThePinnedTarget) {
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        if (!t.runs_here) continue;
        std::vector<std::string> args = bench_args("BlockLSTMGrad", "float32", true);
        args.insert(args.end(), {"--reps", "1", "--warmup", "1", "--cpu-target", t.name});
        const Result r = run_cli(args);
        ASSERT_EQ(r.code, 0) << describe(r);
        EXPECT_NE(r.out.find("(CPU target " + t.name + ", pinned)"), std::string::npos) << r.out;
    }
}

TEST(CpuTarget, UnknownOrUnrunnableTargetExitsTwoAndSaysWhatThereIs) {
    std::vector<std::string> pins = {"avx9"};
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets())
        if (!t.runs_here) pins.push_back(t.name);
    for (const std::string &pin : pins) {
        SCOPED_TRACE(pin);
        std::vector<std::string> args = bench_args("BlockLSTM", "float32", false);
        args.insert(args.end(), {"--reps", "1", "--cpu-target", pin});
        const Result by_option = run_cli(args);
        EXPECT_EQ(by_option.code, 2) << describe(by_option);
        EXPECT_NE(by_option.err.find("CPU target '" + pin + "'"), std::string::npos) << describe(by_option);
        EXPECT_NE(by_option.err.find("this CPU runs: "), std::string::npos) << describe(by_option);
        ScopedEnvironment env("BLOCKLSTM_CPU_TARGET", pin);
        const Result by_environment = run_cli({"list"});
        EXPECT_EQ(by_environment.code, 2) << describe(by_environment);
        EXPECT_NE(by_environment.err.find("BLOCKLSTM_CPU_TARGET=" + pin + ": "), std::string::npos)
            << describe(by_environment);
        // The demo fails before its first line, not after printing a header.
        const Result demo = run_cli({"demo", "--device", "cpu", "--steps", "1"});
        EXPECT_EQ(demo.code, 2) << describe(demo);
        EXPECT_EQ(demo.out, "") << describe(demo);
    }
}

// ---- CUDA --------------------------------------------------------------------------------------

// `list` says where CUDA calls would run and what runs their batched products, and why.
TEST(CudaStatus, ListNamesTheDeviceAndTheProducts) {
    if (!blocklstm::cuda_built()) GTEST_SKIP() << "built without CUDA";
    const Result r = run_cli({"list"});
    ASSERT_EQ(r.code, 0) << describe(r);
    const std::string devices = blocklstm::cuda_device_count() > 0
                                    ? "CUDA: " + std::to_string(blocklstm::cuda_device_count()) + " device(s)"
                                    : "CUDA: no device (" + blocklstm::cuda_unavailable_reason() + ")";
    EXPECT_NE(r.out.find(devices), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("CUDA batched products: " + blocklstm::cuda_gemm_backend()), std::string::npos) << r.out;
    ScopedEnvironment halide("BLOCKLSTM_CUDA_GEMM", "halide");
    const Result h = run_cli({"list"});
    EXPECT_NE(h.out.find("CUDA batched products: Halide GEMM kernels (chosen"), std::string::npos) << h.out;
}

// ---- npy ------------------------------------------------------------------------------------

std::string sample_file() {
    const float d[6] = {1, 2, 3, 4, 5, 6};
    return npy::encode(npy::Type::f32, {2, 3}, d, sizeof d);
}

npy::Array parse_str(const std::string &s) {
    return npy::parse(reinterpret_cast<const unsigned char *>(s.data()), s.size(), "t.npy");
}

TEST(Npy, WriterFormat) {
    const std::string s = sample_file();
    EXPECT_EQ(s.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    const npy::Header h = npy::parse_header(reinterpret_cast<const unsigned char *>(s.data()), s.size(), "t");
    EXPECT_EQ(h.data_offset % 64, 0u);
    EXPECT_EQ(s[h.data_offset - 1], '\n');
    EXPECT_EQ(header_text(s).rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u);
    const npy::Array a = parse_str(s);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
    float back[6];
    std::memcpy(back, a.data.data(), sizeof back);
    EXPECT_EQ(back[5], 6.0f);
    EXPECT_NE(header_text(npy::encode(npy::Type::i64, {}, "12345678", 8)).find("'shape': ()"),
              std::string::npos);
    EXPECT_NE(header_text(npy::encode(npy::Type::f16, {7}, "12345678901234", 14)).find("'shape': (7,)"),
              std::string::npos);
}

TEST(Npy, HeaderVariants) {
    auto make = [](const std::string &dict, const std::string &data) {
        std::string hdr = dict;
        while ((10 + hdr.size() + 1) % 64) hdr += ' ';
        hdr += '\n';
        std::string s("\x93NUMPY\x01\x00", 8);
        s += static_cast<char>(hdr.size() & 0xff);
        s += static_cast<char>(hdr.size() >> 8);
        return s + hdr + data;
    };
    const std::string d8(8, '\0');
    EXPECT_EQ(parse_str(make("{'shape': (2,), 'descr': '<f4', 'fortran_order': False}", d8)).shape,
              (std::vector<int64_t>{2}));
    EXPECT_EQ(parse_str(make("{ \"fortran_order\" :False,'shape':( 1 , 2 ,),'descr':'<f2' , }", std::string(4, '\0'))).shape,
              (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(parse_str(make("{'descr': '<i8', 'fortran_order': False, 'shape': ()}", d8)).type, npy::Type::i64);
    // bfloat16 as ml_dtypes saves it ('<V2'), and as NumPy describes a loaded one ('|V2').
    EXPECT_EQ(parse_str(make("{'descr': '<V2', 'fortran_order': False, 'shape': (4,)}", d8)).type, npy::Type::bf16);
    EXPECT_EQ(parse_str(make("{'descr': '|V2', 'fortran_order': False, 'shape': (4,)}", d8)).type, npy::Type::bf16);
    EXPECT_NE(header_text(npy::encode(npy::Type::bf16, {4}, "12345678", 8)).find("'descr': '<V2'"), std::string::npos);
    const char *bad[] = {
        "{'descr': '<f4', 'fortran_order': False}",                           // no shape
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",             // int, not tuple
        "{'descr': '<f4', 'fortran_order': False, 'shape': [2]}",             // list
        "{'descr': '<f4', 'fortran_order': false, 'shape': (2,)}",            // lowercase
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",           // negative
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",    // extra key
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",  // duplicate
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk",       // trailing text
        "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}",   // structured
        "{'descr': '<c8', 'fortran_order': False, 'shape': (1,)}",            // complex
        "{'descr': '|V8', 'fortran_order': False, 'shape': (1,)}",            // raw bytes, not bfloat16
        "{'descr': '|f4', 'fortran_order': False, 'shape': (2,)}",            // '|' on a float32
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 9999999999)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
        "{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}",             // missing comma
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)",             // unclosed
    };
    for (const char *dict : bad) EXPECT_THROW(parse_str(make(dict, d8)), npy::Error) << dict;
}

TEST(Npy, EveryTruncationAndByteFlipIsRejectedOrValid) {
    const std::string s = sample_file();
    for (std::size_t n = 0; n < s.size(); ++n) {
        try {
            parse_str(s.substr(0, n));
            ADD_FAILURE() << "prefix of " << n << " bytes accepted";
        } catch (const npy::Error &e) {
            EXPECT_EQ(std::string(e.what()).rfind("t.npy: ", 0), 0u) << e.what();
        }
    }
    for (std::size_t k = 0; k < s.size(); ++k)
        for (int v : {0, 0x20, 0x7f, 0xff}) {
            std::string t = s;
            t[k] = static_cast<char>(v);
            try {
                const npy::Array a = parse_str(t);
                EXPECT_EQ(a.data.size(), static_cast<std::size_t>(a.num_elements()) * npy::itemsize_of(a.type));
            } catch (const npy::Error &) {
            }
        }
    EXPECT_THROW(parse_str(s + "x"), npy::Error);  // trailing bytes
}

TEST(Npy, ReadErrorsNameThePath) {
    TempDir tmp;
    try {
        npy::read(tmp / "absent.npy");
        ADD_FAILURE();
    } catch (const npy::Error &e) {
        EXPECT_NE(std::string(e.what()).find("absent.npy"), std::string::npos);
    }
    EXPECT_THROW(npy::read(tmp.path()), npy::Error);  // a directory
}

}  // namespace

int main(int argc, char **argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (const int status = blt::check_cpu_target_pin()) return status;
    if (argc > 1) g_cli = argv[1];
    if (const char *e = std::getenv("BLOCKLSTM_CLI")) g_cli = e;
    return RUN_ALL_TESTS();
}
