// Parity with TensorFlow itself: every golden case of tests/data/tf (inputs and outputs of
// tf.raw_ops, written by tests/golden/generate.sh) through the library API and through
// `blocklstm run`, compared output by output; and the BlockLSTMV2 gradient study.
//
// What must agree: everything outside the documented differences (docs/semantics.md). Of those, the
// goldens meet two:
//   * padding: TF leaves i, f, o, ci, co past seq_len_max uninitialised (the generator stores zeros
//     there and lists them under unspecified_past_seq_len_max); those slices are not compared, ours
//     must be exactly zero instead. cs, h and x_grad past seq_len_max are zero in TF too: compared.
//   * float16: TF rounds to half after every operation, we round once per stored value; the
//     float16 tolerances below are TF's rounding budget, not ours.
// The clip is straight-through in backward in both (the clipped cases feed clipped activations into
// the grad ops and compare as usual).
//
// Error measure, per output tensor: err = max |ours - tf| / max(1, max |tf|), i.e. the absolute error
// for values of order one and below, the relative error at the tensor's scale for larger ones
// (gradients summed over time and batch). Elementwise relative errors would be meaningless where
// values cancel to near zero.
#include <blocklstm/blocklstm.h>
#include <blocklstm/ops.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "npy.h"
#include "test_env.h"

namespace {

namespace fs = std::filesystem;
using namespace blocklstm;

// The cases' folder: the build's, or $BLOCKLSTM_TF_GOLDEN_DIR (a packed test binary run from
// another checkout, scripts/gpu_check.sh).
const fs::path kGoldenDir = std::getenv("BLOCKLSTM_TF_GOLDEN_DIR") ? std::getenv("BLOCKLSTM_TF_GOLDEN_DIR")
                                                                   : BLOCKLSTM_TF_GOLDEN_DIR;

// ---- Manifests ----------------------------------------------------------------------------------

struct Manifest {
    std::map<std::string, std::string> kv;

    bool has(const std::string &key) const { return kv.count(key) != 0; }
    const std::string &at(const std::string &key) const {
        auto it = kv.find(key);
        if (it == kv.end()) throw std::runtime_error("manifest has no '" + key + "'");
        return it->second;
    }
    int64_t i64(const std::string &key) const { return std::stoll(at(key)); }
    double f64(const std::string &key) const { return std::stod(at(key)); }
    // A comma-separated list that the manifest must have (a missing one is an error, not an empty
    // comparison), or, with `optional`, may leave out.
    std::vector<std::string> list(const std::string &key, bool optional = false) const {
        std::vector<std::string> out;
        if (optional && !has(key)) return out;
        std::stringstream s(at(key));
        std::string item;
        while (std::getline(s, item, ','))
            if (!item.empty()) out.push_back(item);
        return out;
    }
};

Manifest read_manifest(const fs::path &dir) {
    std::ifstream in(dir / "manifest.txt");
    if (!in) throw std::runtime_error((dir / "manifest.txt").string() + ": cannot open");
    Manifest m;
    std::string line;
    while (std::getline(in, line)) {
        const auto eq = line.find('=');
        if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
        m.kv[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return m;
}

// The golden cases (directories with a manifest.txt whose op is one of the six), sorted.
std::vector<std::string> list_cases() {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto &e : fs::directory_iterator(kGoldenDir, ec)) {
        if (!e.is_directory() || !fs::exists(e.path() / "manifest.txt")) continue;
        if (read_manifest(e.path()).at("op") == "study") continue;
        names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
}

struct Case {
    std::string name, op;
    fs::path dir;
    Manifest m;
    DType dtype;
    bool peephole;
    bool sequence;  // has seq_len_max
    bool grad;
    int64_t T = 1, B, H, L = 1;
};

Case load_case(const std::string &name) {
    Case c;
    c.name = name;
    c.dir = kGoldenDir / name;
    c.m = read_manifest(c.dir);
    c.op = c.m.at("op");
    c.dtype = c.m.at("dtype") == "float16" ? DType::f16 : DType::f32;
    c.peephole = c.m.i64("use_peephole") != 0;
    c.sequence = c.m.has("seq_len_max");
    c.grad = c.op.find("Grad") != std::string::npos;
    c.B = c.m.i64("B");
    c.H = c.m.i64("H");
    if (c.sequence) {
        c.T = c.m.i64("T");
        c.L = c.m.i64("seq_len_max");
    }
    return c;
}

// ---- Tensors ------------------------------------------------------------------------------------

Tensor to_tensor(const npy::Array &a, const std::string &what) {
    if (a.type != npy::Type::f16 && a.type != npy::Type::f32)
        throw std::runtime_error(what + ": expected float16 or float32");
    Tensor t(a.type == npy::Type::f16 ? DType::f16 : DType::f32, a.shape);
    if (!a.data.empty()) std::memcpy(t.data(), a.data.data(), a.data.size());
    return t;
}
Tensor load_tensor(const fs::path &file) { return to_tensor(npy::read(file.string()), file.string()); }

int64_t load_seq_len_max(const fs::path &dir) {
    const npy::Array a = npy::read((dir / "seq_len_max.npy").string());
    if (a.type != npy::Type::i64 || !a.shape.empty()) throw std::runtime_error("seq_len_max.npy: not a 0-d int64");
    int64_t v;
    std::memcpy(&v, a.data.data(), sizeof v);
    return v;
}

// A tensor's values as doubles, with its dtype and shape.
struct Values {
    DType dtype = DType::f32;
    std::vector<int64_t> shape;
    std::vector<double> v;
};
Values values(const Tensor &t) {
    Values out{t.dtype(), t.shape(), std::vector<double>(static_cast<std::size_t>(t.num_elements()))};
    for (std::size_t k = 0; k < out.v.size(); ++k)
        out.v[k] = t.dtype() == DType::f16 ? half_to_float(t.data_as<uint16_t>()[k]) : t.data_as<float>()[k];
    return out;
}

std::string shape_str(const std::vector<int64_t> &s) {
    std::ostringstream o;
    o << "[";
    for (std::size_t k = 0; k < s.size(); ++k) o << (k ? "," : "") << s[k];
    return o.str() + "]";
}

using Outputs = std::map<std::string, Tensor>;

// ---- Running a case -----------------------------------------------------------------------------

// The case through the library, by op name (blocklstm/ops.h, which runs the typed functions). Its
// inputs are the ones TF's op took when the case was written, in TF's order: the registry's.
Outputs run_library(const Case &c, Device device = Device::cpu) {
    const OpInfo &op = op_info(c.op);
    std::vector<std::string> names = c.sequence ? std::vector<std::string>{"seq_len_max"} : std::vector<std::string>{};
    for (const OpArg &a : op.inputs) names.push_back(a.name);
    EXPECT_EQ(c.m.list("inputs"), names) << "TF's inputs of " << c.op << " differ from blocklstm's op registry";
    std::map<std::string, Tensor> in;
    for (const OpArg &a : op.inputs) {
        in[a.name] = load_tensor(c.dir / (a.name + ".npy"));
        if (device != Device::cpu) {
            Tensor on(in[a.name].dtype(), in[a.name].shape(), device);
            blocklstm::copy(in[a.name], on);
            in[a.name] = on;
        }
    }
    OpAttrs attrs;  // TF's defaults unless the case passed the attr to TF explicitly
    if (c.m.has("attr.forget_bias")) attrs.forget_bias = static_cast<float>(c.m.f64("attr.forget_bias"));
    if (c.m.has("attr.cell_clip")) attrs.cell_clip = static_cast<float>(c.m.f64("attr.cell_clip"));
    attrs.use_peephole = c.peephole;
    Outputs out = invoke(c.op, c.sequence ? load_seq_len_max(c.dir) : 0,
                         std::map<std::string, TensorView>(in.begin(), in.end()), attrs);
    for (auto &[name, t] : out) {  // host copies to compare
        if (t.device() == Device::cpu) continue;
        Tensor host(t.dtype(), t.shape());
        blocklstm::copy(t, host);
        t = host;
    }
    return out;
}

#ifdef BLOCKLSTM_CLI
std::string quoted(const std::string &s) {
    std::string q = "'";
    for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return q + "'";
}

// `blocklstm run <op> --in <case> --out <tmp> [attrs]`; the outputs it wrote, or a failure.
::testing::AssertionResult run_cli(const Case &c, Outputs *out) {
    const fs::path tmp = fs::temp_directory_path() /
                         ("blocklstm_golden_" + std::to_string(::getpid()) + "_" + c.name);
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    std::string cmd = quoted(BLOCKLSTM_CLI) + " run " + c.op + " --in " + quoted(c.dir.string()) + " --out " +
                      quoted((tmp / "out").string());
    if (c.m.has("attr.forget_bias")) cmd += " --forget-bias " + c.m.at("attr.forget_bias");
    if (c.m.has("attr.cell_clip")) cmd += " --cell-clip " + c.m.at("attr.cell_clip");
    if (c.peephole) cmd += " --use-peephole";
    const fs::path log = tmp / "log.txt";
    const int rc = std::system((cmd + " > " + quoted(log.string()) + " 2>&1").c_str());
    std::stringstream text;
    text << std::ifstream(log).rdbuf();
    ::testing::AssertionResult result = ::testing::AssertionSuccess();
    if (rc != 0) {
        result = ::testing::AssertionFailure() << cmd << "\nexited with status " << rc << ":\n" << text.str();
    } else {
        try {
            for (const auto &n : c.m.list("outputs")) (*out)[n] = load_tensor(tmp / "out" / (n + ".npy"));
        } catch (const std::exception &e) {
            result = ::testing::AssertionFailure() << cmd << ": " << e.what();
        }
    }
    fs::remove_all(tmp);
    return result;
}
#endif

// ---- Tolerances ---------------------------------------------------------------------------------
// Bounds on err (see the top of the file), from TF's arithmetic (docs/semantics.md: Precision); the measured worst errors
// (TFGolden.WorstErrorTable, recorded in tests/golden/README.md) sit 3-10x below them.
//
// float32, forward ops and LSTMBlockCellGrad: 2e-6 (16 ulps of 1). TF's sigmoid and tanh are Eigen's
// vectorised approximations (a few ulps each, up to ~4.5), ours are Halide's; TF's GEMM sums I+H
// products in another order than ours (u * sum|w*xh| ~ 6e-8 * 10 for the largest pre-activations
// here, times sigma' <= 1/4 or tanh' <= 1). Along the sequence a cs error is damped by f < 1 and an
// h error re-enters through the next GEMM; over 20 steps the differences stay a few ulps (measured
// 6.7e-7 worst, in the clipped case with large weights).
//
// float32, BlockLSTMGrad / BlockLSTMGradV2: 1e-5 of the tensor's scale. Besides the element-wise
// differences above, w_grad, b_grad and the peephole gradients are sums over L*B terms and x_grad,
// h_prev_grad sums over 4H terms; TF accumulates w_grad step by step (beta = 1), we batch over time
// (docs/semantics.md: same math, other rounding). A sum of n float32 terms is off by at most ~n*u of the
// sum of magnitudes; n <= 160 here gives 1e-5 (measured 5e-7).
//
// float16: TF rounds to half after every operation (docs/semantics.md: Precision), we compute in float32 and round
// once per stored value (docs/semantics.md), so the difference is TF's rounding error: up to half an ulp
// (u = 2^-11 relative) per operation along the longest chain feeding an output, times the derivative
// of what follows (sigma' <= 1/4, tanh' <= 1, products of values <= 1), plus our one rounding.
//   * forward cell step: GEMM, + b, peephole product and sum, (+ forget_bias), sigma/tanh, i*ci,
//     f*cs_prev, their sum, tanh, o's own chain, o*co: ~12 roundings = 6 ulps (2^-10) of the scale.
//   * LSTMBlockCellGrad: do (4 roundings), dcs (6, 8 with peephole), dci/df/di (4 more),
//     cs_prev_grad (1, 5 with peephole), batch sums of the peephole gradients: 6 ulps again.
//   * sequence forward: 8 ulps: the step's 6 plus the error carried in from the previous steps'
//     cs (damped by f < 1) and h (through the next GEMM); measured 3.4 after 20 steps.
//   * sequence grads: 8 ulps for the step's chain and the carries, plus L/2 ulps because TF adds every
//     step's contribution to w_grad, b_grad and the peephole gradients in half (docs/semantics.md: Precision): L
//     roundings of the running sum, each up to half an ulp of it.
constexpr double kHalfEps = 1.0 / 1024;  // 2^-10, float16's machine epsilon (one ulp at 1)

double tolerance(const Case &c, const std::string & /*output*/) {
    const bool seq_grad = c.grad && c.sequence;
    if (c.dtype == DType::f32) return seq_grad ? 1e-5 : 2e-6;
    if (!c.sequence) return 6 * kHalfEps;
    if (!c.grad) return 8 * kHalfEps;
    return (8 + 0.5 * static_cast<double>(c.L)) * kHalfEps;
}

// ---- Comparison ---------------------------------------------------------------------------------

struct Measured {
    double err = 0;  // max |ours - tf| / scale
    double scale = 1;
    int64_t at = -1;
    double ours = 0, tf = 0;
};

// Compares one output. Past seq_len_max, outputs that TF leaves unspecified must be zero in ours.
::testing::AssertionResult compare(const Case &c, const std::string &name, const Tensor &ours_t,
                                   const Tensor &tf_t, Measured *m) {
    const Values ours = values(ours_t), tf = values(tf_t);
    if (ours.shape != tf.shape || ours.dtype != tf.dtype)
        return ::testing::AssertionFailure() << name << ": ours is " << to_string(ours.dtype) << " "
                                             << shape_str(ours.shape) << ", TF's is " << to_string(tf.dtype)
                                             << " " << shape_str(tf.shape);
    std::size_t n = tf.v.size();
    const auto unspecified = c.m.list("unspecified_past_seq_len_max", /*optional=*/true);
    if (std::find(unspecified.begin(), unspecified.end(), name) != unspecified.end()) {
        n = static_cast<std::size_t>(c.L * c.B * c.H);
        for (std::size_t k = n; k < ours.v.size(); ++k)
            if (ours.v[k] != 0.0)
                return ::testing::AssertionFailure()
                       << name << ": ours is " << ours.v[k] << " at flat index " << k << " (t = " << k / (c.B * c.H)
                       << " >= seq_len_max = " << c.L << "); docs/semantics.md says every output is zero there";
    }
    double mx = 0;
    for (std::size_t k = 0; k < n; ++k) mx = std::max(mx, std::abs(tf.v[k]));
    m->scale = std::max(1.0, mx);
    double worst = 0;
    for (std::size_t k = 0; k < n; ++k) {
        const double d = std::abs(ours.v[k] - tf.v[k]);
        if (!(d <= worst)) {  // NaN counts as the worst
            worst = std::isnan(d) ? INFINITY : d;
            m->at = static_cast<int64_t>(k);
        }
    }
    m->err = worst / m->scale;
    if (m->at >= 0) {
        m->ours = ours.v[m->at];
        m->tf = tf.v[m->at];
    }
    const double tol = tolerance(c, name);
    if (m->err <= tol) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << c.op << " " << name << " " << shape_str(tf.shape)
                                         << ": max |ours - tf| / " << m->scale << " = " << m->err << " > " << tol
                                         << " at flat index " << m->at << " (ours " << std::setprecision(9) << m->ours
                                         << ", tf " << m->tf << ")";
}

void compare_all(const Case &c, const Outputs &ours, const char *how) {
    const std::vector<std::string> outputs = c.m.list("outputs");
    ASSERT_FALSE(outputs.empty()) << c.dir << ": the manifest lists no outputs";
    for (const auto &name : outputs) {
        SCOPED_TRACE(std::string(how) + ", output " + name);
        const auto it = ours.find(name);
        ASSERT_NE(it, ours.end()) << "no output " << name;
        const Tensor tf = load_tensor(c.dir / (name + ".npy"));
        Measured m;
        blt::record_output_digest(std::string(how) + " " + name, it->second.view());
        EXPECT_TRUE(compare(c, name, it->second, tf, &m));
        std::cout << "[ error    ] " << how << " " << name << ": " << std::setprecision(3) << m.err
                  << " (tolerance " << tolerance(c, name) << ")" << std::endl;
    }
}

// ---- The tests ----------------------------------------------------------------------------------

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, Library) {
    const Case c = load_case(GetParam());
    SCOPED_TRACE("case " + c.dir.string() + " (" + c.m.at("note") + ")");
    compare_all(c, run_library(c), "library");
}

// The case on a CUDA device, fused steps and split steps (float16: the gate gradients stored in
// half, as TF's GPU kernel stores them, so that every product reading them runs on the tensor
// cores): within the same tolerances of TF's outputs as on the CPU.
TEST_P(Golden, cuda_FusedAndSplitSteps) {
    if (blt::skip_without_cuda()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
    const Case c = load_case(GetParam());
    SCOPED_TRACE("case " + c.dir.string() + " (" + c.m.at("note") + ")");
    struct Restore {
        const CudaStep steps = cuda_step();
        ~Restore() { set_cuda_step(steps); }
    } restore;
    for (CudaStep steps : {CudaStep::fused, CudaStep::split}) {
        set_cuda_step(steps);
        compare_all(c, run_library(c, Device::cuda), steps == CudaStep::split ? "cuda split steps" : "cuda fused steps");
    }
}

TEST_P(Golden, Cli) {
#ifdef BLOCKLSTM_CLI
    const Case c = load_case(GetParam());
    SCOPED_TRACE("case " + c.dir.string() + " (" + c.m.at("note") + ")");
    Outputs out;
    ASSERT_TRUE(run_cli(c, &out));
    compare_all(c, out, "blocklstm run");
#else
    GTEST_SKIP() << "the blocklstm tool is not built (BLOCKLSTM_BUILD_TOOLS=OFF)";
#endif
}

std::string param_name(const ::testing::TestParamInfo<std::string> &info) {
    std::string s = info.param;
    for (char &ch : s)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return s;
}
INSTANTIATE_TEST_SUITE_P(TF, Golden, ::testing::ValuesIn(list_cases()), param_name);

TEST(TFGolden, HasCases) {
    EXPECT_GE(list_cases().size(), 100u) << "tests/data/tf is missing cases: run tests/golden/generate.sh";
}

// Runs every case through the library and prints the worst error per op and dtype (the table of
// tests/golden/README.md), and checks it: every op in both dtypes has cases, every worst error is
// within its tolerance, and none is zero: the goldens are TensorFlow's outputs, whose rounding
// differs from ours, so a table of zeros means the library is being compared with itself.
TEST(TFGolden, WorstErrorTable) {
    struct Worst {
        Measured m;
        std::string output, case_name;
        double tol = 0;
        int cases = 0;
    };
    std::map<std::pair<std::string, std::string>, Worst> table;
    for (const auto &name : list_cases()) {
        const Case c = load_case(name);
        const Outputs ours = run_library(c);
        Worst &w = table[{c.op, to_string(c.dtype)}];
        ++w.cases;
        for (const auto &out : c.m.list("outputs")) {
            Measured m;
            EXPECT_TRUE(compare(c, out, ours.at(out), load_tensor(c.dir / (out + ".npy")), &m)) << name;
            if (m.err >= w.m.err) {
                w.m = m;
                w.output = out;
                w.case_name = name;
                w.tol = tolerance(c, out);
            }
        }
    }
    std::ostringstream o;
    // "ulps": err in units of the dtype's machine epsilon (2^-23 for float32, 2^-10 for float16).
    o << "\n| op | dtype | cases | worst error | ulps | output | case | tolerance |\n"
      << "|---|---|---|---|---|---|---|---|\n";
    for (const auto &[key, w] : table)
        o << "| " << key.first << " | " << key.second << " | " << w.cases << " | " << std::setprecision(2)
          << std::scientific << w.m.err << " | " << std::fixed << std::setprecision(1) << w.m.err / (key.second == "float16" ? kHalfEps : 0x1p-23) << " | "
          << w.output << " | " << w.case_name << " | " << std::scientific << std::setprecision(1) << w.tol
          << " |\n";
    std::cout << o.str() << std::endl;
    EXPECT_EQ(table.size(), 2 * ops().size()) << "every op in float32 and float16";
    for (const auto &[key, w] : table) {
        SCOPED_TRACE(key.first + " " + key.second);
        EXPECT_GT(w.cases, 0);
        EXPECT_GT(w.m.err, 0.0) << "no difference from TensorFlow at all: are the goldens ours?";
        EXPECT_LE(w.m.err, w.tol) << w.output << " of " << w.case_name;
    }
}

// ---- The BlockLSTMV2 gradient study ----------------------------------------------------------------
// tests/data/tf/v2_gradient_study: inputs of BlockLSTMGradV2 (the forward outputs of BlockLSTMV2 and
// loss weights cs_grad, h_grad), and three gradients of loss = sum(cs*cs_grad + h*h_grad) computed by
// TF: fd_* (central differences through tf.raw_ops.BlockLSTMV2), tf_* (tf.raw_ops.BlockLSTMGradV2),
// autodiff_* (TF's registered gradient of BlockLSTMV2, which runs the ICFO BlockLSTMGrad, docs/semantics.md: TensorFlow's bugs).
TEST(TFGolden, V2GradientStudy) {
    const fs::path dir = kGoldenDir / "v2_gradient_study";
    ASSERT_TRUE(fs::exists(dir / "manifest.txt")) << dir << " missing: run tests/golden/generate.sh";
    const Manifest m = read_manifest(dir);
    const int64_t H = m.i64("H");
    std::map<std::string, Tensor> in;
    for (const auto &n : m.list("inputs"))
        if (n != "seq_len_max") in[n] = load_tensor(dir / (n + ".npy"));
    auto I = [&](const char *n) -> const Tensor & { return in.at(n); };
    GradAttrs ga;
    ga.use_peephole = m.i64("use_peephole") != 0;
    const auto r = BlockLSTMGradV2(load_seq_len_max(dir), I("x"), I("cs_prev"), I("h_prev"), I("w"), I("wci"),
                                   I("wcf"), I("wco"), I("b"), I("i"), I("cs"), I("f"), I("o"), I("ci"), I("co"),
                                   I("h"), I("cs_grad"), I("h_grad"), ga);
    const std::map<std::string, const Tensor *> ours = {
        {"w", &r.w_grad},           {"b", &r.b_grad},     {"x", &r.x_grad},     {"cs_prev", &r.cs_prev_grad},
        {"h_prev", &r.h_prev_grad}, {"wci", &r.wci_grad}, {"wcf", &r.wcf_grad}, {"wco", &r.wco_grad}};
    for (const auto &k : m.list("wrt")) {
        SCOPED_TRACE("gradient w.r.t. " + k);
        const Values us = values(*ours.at(k)), fd = values(load_tensor(dir / ("fd_" + k + "_grad.npy"))),
                     op = values(load_tensor(dir / ("tf_" + k + "_grad.npy"))),
                     ad = values(load_tensor(dir / ("autodiff_" + k + "_grad.npy")));
        ASSERT_EQ(us.shape, fd.shape);
        const double fd_max = m.f64("fd_max_abs." + k);
        // The finite differences are accurate to about fd_error_est (2 * the change when the step is
        // halved: truncation O(step^2) plus the float32 rounding of the outputs divided by the step).
        // Ours must be within that, with a floor of 1e-4 relative for the float32 rounding of the
        // gradient itself (summed over T*B terms). Measured: ours and TF's BlockLSTMGradV2 both within
        // 2.6e-5 relative of the FD gradient where the estimate is >= 5e-5.
        const double tol = std::max(m.f64("fd_error_est." + k), 1e-4 * fd_max);
        double d_fd = 0, d_op = 0;
        for (std::size_t j = 0; j < us.v.size(); ++j) {
            d_fd = std::max(d_fd, std::abs(us.v[j] - fd.v[j]));
            d_op = std::max(d_op, std::abs(us.v[j] - op.v[j]));
        }
        EXPECT_LE(d_fd, tol) << "BlockLSTMGradV2 is not the finite-difference gradient of BlockLSTMV2";
        // TF's own BlockLSTMGradV2 is the same float32 computation in another order: 1e-5 of the scale.
        EXPECT_LE(d_op, 1e-5 * std::max(1.0, fd_max)) << "ours differs from tf.raw_ops.BlockLSTMGradV2";
        std::cout << "[ study    ] d/d" << k << ": max|ours - FD| / max|FD| = " << d_fd / fd_max
                  << " (bound " << tol / fd_max << "), max|ours - TF BlockLSTMGradV2| = " << d_op << std::endl;
        if (k != "w" && k != "b") continue;
        // TF's autodiff gradient runs the ICFO kernel on IFCO weights: its c and f blocks are the
        // gradients of the other gate. They must differ from ours by O(1) of the gradient's scale.
        const int64_t rows = k == "w" ? us.shape[0] : 1;
        for (const auto &[block, off] : {std::pair<const char *, int64_t>{"f", H}, {"c", 2 * H}}) {
            double d_ad = 0;
            for (int64_t row = 0; row < rows; ++row)
                for (int64_t j = off; j < off + H; ++j) {
                    const std::size_t at = static_cast<std::size_t>(row * 4 * H + j);
                    d_ad = std::max(d_ad, std::abs(us.v[at] - ad.v[at]));
                }
            EXPECT_GE(d_ad / fd_max, 0.25) << "the " << block << " block of TF's autodiff gradient of BlockLSTMV2 "
                                           << "agrees with ours: docs/semantics.md: TensorFlow's bugs predicts the wrong (ICFO) layout";
            std::cout << "[ study    ] d/d" << k << " " << block << " block: max|ours - TF autodiff| / max|FD| = "
                      << d_ad / fd_max << std::endl;
        }
    }
}

}  // namespace
