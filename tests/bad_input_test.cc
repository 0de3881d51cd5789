// Bad input: every validation check, one test each. Each asserts that a blocklstm::Error is
// thrown whose message names the op and the argument and says what was expected, and that no
// output buffer (pre-filled with a sentinel) was touched. Also the valid empty cases.
#include <sys/resource.h>

#include <fstream>
#include <map>
#include <set>

#include <blocklstm/ops.h>

#include "test_util.h"

namespace blt {
namespace {

using namespace blocklstm;

enum class OpId { cell, cell_grad, seq, seq_v2, grad, grad_v2 };
const char *op_name(OpId op) {
    switch (op) {
    case OpId::cell: return "LSTMBlockCell";
    case OpId::cell_grad: return "LSTMBlockCellGrad";
    case OpId::seq: return "BlockLSTM";
    case OpId::seq_v2: return "BlockLSTMV2";
    case OpId::grad: return "BlockLSTMGrad";
    case OpId::grad_v2: return "BlockLSTMGradV2";
    }
    return "?";
}
const std::vector<OpId> kAllOps = {OpId::cell, OpId::cell_grad, OpId::seq, OpId::seq_v2, OpId::grad, OpId::grad_v2};

constexpr float kSentinel = 12345.0f;

// One op call: named input and output views (TF order) plus the storage behind them.
struct Call {
    OpId op;
    int64_t L = 0;
    DType dtype = DType::f32;
    std::vector<std::string> names;  // inputs then outputs
    std::size_t num_inputs = 0;
    std::map<std::string, TensorView> v;
    std::vector<Tensor> storage;

    bool is_output(const std::string &n) const {
        return std::find(names.begin() + num_inputs, names.end(), n) != names.end();
    }
    // A fresh tensor for argument n with this shape and dtype: inputs filled with 0.25,
    // outputs with the sentinel.
    void set(const std::string &n, std::vector<int64_t> shape, DType dt) {
        Array a = ref::zeros(std::move(shape));
        std::fill(a.data.begin(), a.data.end(), is_output(n) ? kSentinel : 0.25);
        storage.push_back(ref::to_tensor(a, dt));
        v[n] = storage.back().view();
    }
    void set(const std::string &n, std::vector<int64_t> shape) { set(n, std::move(shape), dtype); }

    // The op by name (blocklstm/ops.h) with peepholes, the clip off and TF's forget bias.
    void invoke() const {
        std::map<std::string, TensorView> in, out;
        for (std::size_t k = 0; k < names.size(); ++k) (k < num_inputs ? in : out)[names[k]] = v.at(names[k]);
        OpAttrs attrs;
        attrs.use_peephole = true;
        if (op_info(op_name(op)).cell_clip) attrs.cell_clip = 0.0f;
        blocklstm::invoke(op_name(op), L, in, out, attrs);
    }
};

// A valid call: T=3, B=2, I=3, H=4, L=2 (sequence ops); B=2, I=3, H=4 (cell ops).
Call valid_call(OpId op, DType dtype = DType::f32, int64_t T = 3, int64_t B = 2, int64_t I = 3, int64_t H = 4,
                int64_t L = 2) {
    Call c;
    c.op = op;
    c.L = L;
    c.dtype = dtype;
    const OpInfo &info = op_info(op_name(op));
    const OpDims dims{T, B, I, H};
    std::vector<const OpArg *> args;
    for (const OpArg &a : info.inputs) args.push_back(&a);
    c.num_inputs = args.size();
    for (const OpArg &a : info.outputs) args.push_back(&a);
    for (const OpArg *a : args) c.names.push_back(a->name);
    for (const OpArg *a : args) c.set(a->name, a->dims(dims));
    return c;
}

std::vector<std::vector<uint8_t>> snapshot(const Call &c) {
    std::vector<std::vector<uint8_t>> s;
    for (std::size_t k = c.num_inputs; k < c.names.size(); ++k) {
        const TensorView &t = c.v.at(c.names[k]);
        const auto *p = static_cast<const uint8_t *>(t.data);
        s.emplace_back(p && t.device == Device::cpu ? std::vector<uint8_t>(p, p + t.num_bytes()) : std::vector<uint8_t>{});
    }
    return s;
}

bool names_op(const std::string &m, const std::string &op) {
    for (std::size_t at = m.find(op); at != std::string::npos; at = m.find(op, at + 1)) {
        const std::size_t e = at + op.size();
        if ((at == 0 || !std::isalnum(static_cast<unsigned char>(m[at - 1]))) &&
            (e == m.size() || !(std::isalnum(static_cast<unsigned char>(m[e])) || m[e] == '_')))
            return true;
    }
    return false;
}

// Runs the call; expects blocklstm::Error naming the op, one of `accepted` (quoted) and
// "expected", and every output unchanged. An empty `accepted` accepts any argument of the op.
void expect_rejected(const Call &c, std::set<std::string> accepted, bool check_outputs = true,
                     bool require_argument = true) {
    if (accepted.empty()) {
        accepted.insert(c.names.begin(), c.names.end());
        accepted.insert("seq_len_max");
    }
    const auto before = check_outputs ? snapshot(c) : std::vector<std::vector<uint8_t>>{};
    std::string msg;
    try {
        c.invoke();
        ADD_FAILURE() << op_name(c.op) << ": no exception thrown";
        return;
    } catch (const Error &e) {
        msg = e.what();
    } catch (const std::exception &e) {
        ADD_FAILURE() << op_name(c.op) << ": threw a non-blocklstm exception: " << e.what();
        return;
    }
    std::cout << "[ message  ] " << msg << std::endl;
    EXPECT_TRUE(names_op(msg, op_name(c.op))) << "message does not name the op " << op_name(c.op) << ": " << msg;
    bool named = false;
    for (const auto &a : accepted) named |= msg.find("'" + a + "'") != std::string::npos;
    std::string list;
    for (const auto &a : accepted) list += " '" + a + "'";
    if (require_argument) EXPECT_TRUE(named) << "message names none of" << list << ": " << msg;
    EXPECT_NE(msg.find("expected"), std::string::npos) << "message does not say what was expected: " << msg;
    if (check_outputs) {
        const auto after = snapshot(c);
        for (std::size_t k = 0; k < before.size(); ++k)
            EXPECT_TRUE(before[k] == after[k]) << "output '" << c.names[c.num_inputs + k] << "' was written";
    }
}

std::string label(OpId op, const std::string &what) { return std::string(op_name(op)) + ": " + what; }

// Whether a dim of an argument defines a size (T, B, I or H) that the other arguments are
// checked against: changing it may legitimately be reported against another argument.
bool defining_dim(OpId op, const std::string &n, std::size_t k) {
    if (n == "x") return true;
    if (n == "cs_prev" && k == 1) return true;
    (void)op;
    return false;
}

// ---- The valid calls are valid (so every rejection below is caused by the one change) ----------
TEST(BadInput, BaseCallsAreValid) {
    for (OpId op : kAllOps) {
        for (DType dt : blocklstm::kFloatDTypes) {
            SCOPED_TRACE(op_name(op));
            const Call c = valid_call(op, dt);
            EXPECT_NO_THROW(c.invoke());
        }
    }
}

TEST(BadInput, WrongRank) {
    for (OpId op : kAllOps) {
        const Call base = valid_call(op);
        for (const auto &n : base.names) {
            const auto shape = base.v.at(n).shape;
            {
                SCOPED_TRACE(label(op, n + " rank + 1"));
                Call c = valid_call(op);
                auto s = shape;
                s.push_back(1);
                c.set(n, s);
                expect_rejected(c, {n});
            }
            {
                SCOPED_TRACE(label(op, n + " rank - 1"));
                Call c = valid_call(op);
                auto s = shape;
                s.pop_back();
                c.set(n, s);
                expect_rejected(c, {n});
            }
        }
    }
}

TEST(BadInput, WrongDims) {
    for (OpId op : kAllOps) {
        const Call base = valid_call(op);
        for (const auto &n : base.names) {
            const auto shape = base.v.at(n).shape;
            for (std::size_t k = 0; k < shape.size(); ++k) {
                SCOPED_TRACE(label(op, n + " dim " + std::to_string(k) + " + 1"));
                Call c = valid_call(op);
                auto s = shape;
                ++s[k];
                c.set(n, s);
                if (defining_dim(op, n, k))
                    expect_rejected(c, {});
                else
                    expect_rejected(c, {n});
            }
        }
    }
}

TEST(BadInput, CellSizeZero) {
    for (OpId op : kAllOps) {
        SCOPED_TRACE(label(op, "H = 0"));
        expect_rejected(valid_call(op, DType::f32, 3, 2, 3, 0), {});
    }
}

TEST(BadInput, CellOpEmptyState) {
    for (OpId op : {OpId::cell, OpId::cell_grad}) {
        SCOPED_TRACE(label(op, "B = 0"));
        expect_rejected(valid_call(op, DType::f32, 3, 0, 3, 4), {});
    }
}

TEST(BadInput, SeqLenMaxOutOfRange) {
    for (OpId op : {OpId::seq, OpId::seq_v2, OpId::grad, OpId::grad_v2}) {
        for (int64_t L : {int64_t{-1}, int64_t{4}, int64_t{1} << 40}) {
            SCOPED_TRACE(label(op, "seq_len_max = " + std::to_string(L)));
            Call c = valid_call(op);
            c.L = L;
            expect_rejected(c, {"seq_len_max"});
        }
    }
}

TEST(BadInput, GradWColumnsNotPositiveMultipleOf4) {
    for (OpId op : {OpId::grad, OpId::grad_v2}) {
        for (int64_t cols : {int64_t{18}, int64_t{15}, int64_t{0}}) {
            SCOPED_TRACE(label(op, "w [7," + std::to_string(cols) + "]"));
            Call c = valid_call(op);
            c.set("w", {7, cols});
            expect_rejected(c, cols == 0 ? std::set<std::string>{} : std::set<std::string>{"w"});
        }
    }
}

TEST(BadInput, BiasLength4HPlus3) {
    for (OpId op : kAllOps) {
        SCOPED_TRACE(label(op, "b [19]"));
        Call c = valid_call(op);
        c.set("b", {19});
        expect_rejected(c, {"b"});
    }
}

TEST(BadInput, MixedDtypes) {
    for (OpId op : kAllOps) {
        for (DType base_dt : blocklstm::kFloatDTypes) {
            const DType other = base_dt == DType::f32 ? DType::f16 : DType::f32;
            const Call base = valid_call(op, base_dt);
            for (const auto &n : base.names) {
                SCOPED_TRACE(label(op, n + " is " + to_string(other) + ", the rest " + to_string(base_dt)));
                Call c = valid_call(op, base_dt);
                c.set(n, base.v.at(n).shape, other);
                // The dtype of the call may be taken from x; then the first other argument is blamed.
                expect_rejected(c, n == "x" ? std::set<std::string>{} : std::set<std::string>{n});
            }
        }
    }
}

TEST(BadInput, NullDataWithNonZeroSize) {
    for (OpId op : kAllOps) {
        const Call base = valid_call(op);
        for (const auto &n : base.names) {
            SCOPED_TRACE(label(op, n + " data = nullptr"));
            Call c = valid_call(op);
            c.v[n].data = nullptr;
            expect_rejected(c, {n});
        }
    }
}

// A data pointer not aligned to its element (a float32 one byte off, a float16 one byte off):
// refused naming the argument, before any kernel reads it.
TEST(BadInput, MisalignedData) {
    for (OpId op : kAllOps) {
        for (DType dt : blocklstm::kFloatDTypes) {
            const Call base = valid_call(op, dt);
            for (const auto &n : base.names) {
                SCOPED_TRACE(label(op, n + " data one byte off"));
                Call c = valid_call(op, dt);
                if (c.v[n].num_elements() == 0) continue;
                c.v[n].data = static_cast<std::byte *>(c.v[n].data) + 1;
                expect_rejected(c, {n}, /*check_outputs=*/!c.is_output(n));  // a shifted output's last byte is past its storage
                try {
                    c.invoke();
                } catch (const Error &e) {
                    EXPECT_NE(std::string(e.what()).find("expected an address aligned to " +
                                                         std::to_string(size_of(dt)) + " bytes"),
                              std::string::npos) << e.what();
                }
            }
        }
    }
}

// A negative dimension in any argument is refused before any kernel runs (its element count can
// be positive: [-2,-3] has 6).
TEST(BadInput, NegativeDimension) {
    for (OpId op : kAllOps) {
        const Call base = valid_call(op);
        for (const auto &n : base.names) {
            for (std::size_t k = 0; k < base.v.at(n).shape.size(); ++k) {
                for (bool both : {false, true}) {
                    Call c = valid_call(op);
                    std::vector<int64_t> &shape = c.v[n].shape;
                    if (both && shape.size() < 2) continue;
                    shape[k] = -std::max<int64_t>(shape[k], 1);
                    if (both) shape[(k + 1) % shape.size()] = -std::max<int64_t>(shape[(k + 1) % shape.size()], 1);
                    SCOPED_TRACE(label(op, n + " shape " + shape_str(shape)));
                    expect_rejected(c, defining_dim(op, n, k) || both ? std::set<std::string>{} : std::set<std::string>{n},
                                    /*check_outputs=*/!c.is_output(n));  // a negative output has no bytes to compare
                }
            }
        }
    }
}

// A tensor marked cuda whose data is host memory (or, on a machine without a GPU, any cuda tensor)
// is rejected before any kernel runs, naming the argument: the driver is asked what the pointer
// is. Mixed devices name the first tensor on the other device.
TEST(BadInput, CudaTensorWithHostMemory) {
    for (OpId op : kAllOps) {
        for (const char *n : {"x", "w"}) {
            SCOPED_TRACE(label(op, std::string(n) + " device = cuda"));
            Call c = valid_call(op);
            c.v[n].device = Device::cuda;
            expect_rejected(c, {n});
        }
        SCOPED_TRACE(label(op, "every tensor device = cuda"));
        Call c = valid_call(op);
        for (auto &[name, t] : c.v) t.device = Device::cuda;
        expect_rejected(c, {c.names.front()}, /*check_outputs=*/true);
    }
}

// A device value outside the enum.
TEST(BadInput, UnknownDevice) {
    for (OpId op : kAllOps) {
        SCOPED_TRACE(label(op, "x device = 7"));
        Call c = valid_call(op);
        c.v["x"].device = static_cast<Device>(7);
        expect_rejected(c, {"x"});
    }
}

// An output sharing memory with an input or with another output.
TEST(BadInput, OutputOverlapsInput) {
    for (OpId op : kAllOps) {
        const Call base = valid_call(op);
        for (std::size_t k = base.num_inputs; k < base.names.size(); ++k) {
            const std::string &out = base.names[k];
            for (const std::string &in : {std::string("x"), std::string("cs_prev"), base.names[base.num_inputs - 1]}) {
                for (bool partial : {false, true}) {
                    SCOPED_TRACE(label(op, out + (partial ? " partially overlaps " : " aliases ") + in));
                    Call c = valid_call(op);
                    // One buffer holding both, big enough for either view; the output starts at
                    // the input (or one element into it).
                    TensorView &vi = c.v[in], &vo = c.v[out];
                    const std::size_t off = partial ? size_of(c.dtype) : 0;
                    Tensor big(DType::f32, {static_cast<int64_t>((vi.num_bytes() + vo.num_bytes() + off) / 4 + 1)});
                    c.storage.push_back(big);
                    auto *p = static_cast<uint8_t *>(big.data());
                    std::memcpy(p, vi.data, vi.num_bytes());
                    vi.data = p;
                    vo.data = p + off;
                    if (partial && vi.num_elements() <= 1) continue;  // no partial overlap possible
                    expect_rejected(c, {out, in});
                }
            }
        }
    }
}

TEST(BadInput, OutputsOverlapEachOther) {
    for (OpId op : kAllOps) {
        const Call base = valid_call(op);
        for (std::size_t k = base.num_inputs; k + 1 < base.names.size(); ++k) {
            const std::string &a = base.names[k], &b = base.names[k + 1];
            SCOPED_TRACE(label(op, a + " overlaps " + b));
            Call c = valid_call(op);
            TensorView &va = c.v[a], &vb = c.v[b];
            Tensor big(DType::f32, {static_cast<int64_t>((va.num_bytes() + vb.num_bytes()) / 4 + 1)});
            c.storage.push_back(big);
            std::memset(big.data(), 0x5a, big.num_bytes());
            va.data = big.data();
            vb.data = static_cast<uint8_t *>(big.data()) + (va.num_bytes() > size_of(c.dtype) ? size_of(c.dtype) : 0);
            expect_rejected(c, {a, b});
        }
    }
}

// Sizes whose element count or strides overflow Halide's int32 buffer fields. All pointers point
// at a small dummy buffer: validation must reject the call before any data is read or written.
TEST(BadInput, Int32ExtentOverflow) {
    static float dummy[64];
    const int64_t Bn = 70000, In = 70000, H = 4;
    for (OpId op : kAllOps) {
        SCOPED_TRACE(label(op, "x [.., 70000, 70000]"));
        Call c = valid_call(op, DType::f32, 1, 2, 3, H, 1);
        const bool cell = op == OpId::cell || op == OpId::cell_grad;
        for (const auto &n : c.names) {
            TensorView &t = c.v[n];
            t.data = dummy;
            for (std::size_t k = 0; k < t.shape.size(); ++k) {
                // Replace B and I by the huge sizes wherever they occur.
                const bool is_x = n == "x" || n == "x_grad";
                const std::size_t bdim = (cell || n == "cs_prev" || n == "h_prev" || n == "cs_prev_grad" ||
                                          n == "h_prev_grad" || n == "dicfo")
                                             ? 0
                                             : 1;
                if (n == "w" || n == "w_grad" || n.rfind("wc", 0) == 0 || n == "b" || n == "b_grad") {
                    if ((n == "w" || n == "w_grad") && k == 0) t.shape[0] = In + H;
                    continue;
                }
                if (k == bdim) t.shape[k] = Bn;
                if (is_x && k == t.shape.size() - 1) t.shape[k] = In;
            }
        }
        expect_rejected(c, {}, /*check_outputs=*/false);
    }
}

// An empty x whose input size is beyond int32 (and near int64's limit, so I + H would overflow
// the expected shape of w): rejected by its own dimension, naming 'x'.
TEST(BadInput, HugeDimensionOfEmptyTensor) {
    for (OpId op : kAllOps) {
        SCOPED_TRACE(label(op, "x [.., 0, INT64_MAX]"));
        Call c = valid_call(op);
        TensorView &x = c.v["x"];
        x.shape[x.shape.size() - 2] = 0;
        x.shape.back() = INT64_MAX;
        expect_rejected(c, {"x"});
    }
}

// While alive, the process may map at most `extra` more bytes: a missing size check then shows as
// std::bad_alloc (a test failure) instead of a multi-GB allocation on a shared machine.
class AddressSpaceLimit {
public:
    explicit AddressSpaceLimit(std::size_t extra) {
        getrlimit(RLIMIT_AS, &old_);
        std::size_t pages = 0;
        std::ifstream("/proc/self/statm") >> pages;
        rlimit r = old_;
        r.rlim_cur = static_cast<rlim_t>(pages) * 4096 + extra;
        if (old_.rlim_cur != RLIM_INFINITY && old_.rlim_cur < r.rlim_cur) r.rlim_cur = old_.rlim_cur;
        setrlimit(RLIMIT_AS, &r);
    }
    ~AddressSpaceLimit() { setrlimit(RLIMIT_AS, &old_); }

private:
    rlimit old_{};
};

// Every tensor fits int32, but an intermediate the op needs does not: LSTMBlockCell's gates
// [B, 4H] with B*H < 2^31 <= 4*B*H, and the sequence ops' gate workspace [T*B, 4H]. Dummy data
// pointers again: nothing may be read, allocated or run. The intermediate is not an argument, so
// the message need not quote one.
TEST(BadInput, Int32IntermediateOverflow) {
    struct Case {
        OpId op;
        int64_t T, B, I, H;
    };
    // The panels of w: H = 23170 fits w [H, 4H] in int32 but not its 16-column panels (the cell
    // ops pack them as BlockLSTM does, and must say so under their own name).
    const Case cases[] = {{OpId::cell, 1, 70000, 1, 8000},   {OpId::cell_grad, 1, 70000, 1, 8000},
                          {OpId::cell, 1, 1, 0, 23170},      {OpId::cell_grad, 1, 1, 0, 23170},
                          {OpId::seq, 4, 70000, 1, 2000},
                          {OpId::seq_v2, 4, 70000, 1, 2000}, {OpId::grad, 4, 70000, 1, 2000},
                          {OpId::grad_v2, 4, 70000, 1, 2000}};
    for (const Case &k : cases) {
        SCOPED_TRACE(label(k.op, "T=" + std::to_string(k.T) + " B=" + std::to_string(k.B) + " H=" + std::to_string(k.H)));
        // Shapes only: build the call at a small size, then rewrite every shape.
        Call c = valid_call(k.op, DType::f32, 1, 1, 1, 1, 1);
        const bool cell = k.op == OpId::cell || k.op == OpId::cell_grad;
        uintptr_t fake = uintptr_t{1} << 40;  // never dereferenced; 64 GiB apart, so no overlaps
        for (const auto &n : c.names) {
            TensorView &t = c.v[n];
            t.data = reinterpret_cast<void *>(fake);
            fake += uintptr_t{1} << 36;
            if (n == "x" || n == "x_grad") t.shape = cell ? std::vector<int64_t>{k.B, k.I} : std::vector<int64_t>{k.T, k.B, k.I};
            else if (n == "cs_prev" || n == "h_prev" || n == "cs_prev_grad" || n == "h_prev_grad") t.shape = {k.B, k.H};
            else if (n == "w" || n == "w_grad") t.shape = {k.I + k.H, 4 * k.H};
            else if (n.rfind("wc", 0) == 0) t.shape = {k.H};
            else if (n == "b" || n == "b_grad") t.shape = {4 * k.H};
            else if (n == "dicfo") t.shape = {k.B, 4 * k.H};
            else t.shape = cell ? std::vector<int64_t>{k.B, k.H} : std::vector<int64_t>{k.T, k.B, k.H};
        }
        c.L = k.T;
        AddressSpaceLimit limit(std::size_t{1} << 30);
        expect_rejected(c, {}, /*check_outputs=*/false, /*require_argument=*/false);
        if (k.op == OpId::cell_grad) {  // the allocating overload must not allocate dicfo [B, 4H] first
            auto g = [&](const char *n) -> const TensorView & { return c.v.at(n); };
            try {
                LSTMBlockCellGrad(g("x"), g("cs_prev"), g("h_prev"), g("w"), g("wci"), g("wcf"), g("wco"), g("b"),
                                  g("i"), g("cs"), g("f"), g("o"), g("ci"), g("co"), g("cs_grad"), g("h_grad"),
                                  GradAttrs{true});
                ADD_FAILURE() << "allocating LSTMBlockCellGrad: no exception thrown";
            } catch (const Error &e) {
                std::cout << "[ message  ] " << e.what() << std::endl;
                EXPECT_TRUE(names_op(e.what(), "LSTMBlockCellGrad")) << e.what();
            } catch (const std::exception &e) {
                ADD_FAILURE() << "allocating LSTMBlockCellGrad threw a non-blocklstm exception: " << e.what();
            }
        }
    }
}

// ---- blocklstm::copy ---------------------------------------------------------------------------

// copy rejects what would make it read or write out of bounds, naming the argument, and writes
// nothing then; a valid copy copies.
TEST(Copy, ChecksBothSidesAndCopies) {
    std::vector<float> src(8), dst(8, kSentinel);
    for (int k = 0; k < 8; ++k) src[k] = 0.5f * static_cast<float>(k) - 1.0f;
    const TensorView s{src.data(), DType::f32, {2, 4}}, d{dst.data(), DType::f32, {8}};
    auto rejected = [&](const TensorView &from, const TensorView &to, const std::string &arg) {
        SCOPED_TRACE("copy naming '" + arg + "'");
        try {
            copy(from, to);
            ADD_FAILURE() << "no exception thrown";
        } catch (const Error &e) {
            std::cout << "[ message  ] " << e.what() << std::endl;
            EXPECT_NE(std::string(e.what()).find("copy: argument '" + arg + "'"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("expected"), std::string::npos) << e.what();
        }
        for (float v : dst) EXPECT_EQ(v, kSentinel) << "dst was written";
    };
    TensorView t = s;
    t.data = nullptr;
    rejected(t, d, "src");
    t = d;
    t.data = nullptr;
    rejected(s, t, "dst");
    rejected(TensorView{src.data(), DType::f32, {-1}}, TensorView{dst.data(), DType::f32, {-1}}, "src");
    rejected(s, TensorView{dst.data(), DType::f32, {2, -4}}, "dst");
    rejected(TensorView{src.data(), DType::f32, {INT64_MAX, 2, 2}}, d, "src");
    rejected(TensorView{src.data(), static_cast<DType>(7), {8}}, d, "src");
    rejected(s, TensorView{dst.data(), DType::f32, {8}, static_cast<Device>(5)}, "dst");
    rejected(s, TensorView{dst.data(), DType::f32, {7}}, "dst");
    rejected(s, TensorView{dst.data(), DType::f16, {8}}, "dst");
    rejected(TensorView{dst.data(), DType::f32, {4}}, TensorView{dst.data() + 2, DType::f32, {4}}, "dst");

    copy(s, d);
    EXPECT_EQ(src, dst);
    copy(d, d);  // the same memory: nothing to do
    EXPECT_EQ(src, dst);
}

// An owning tensor of an unknown dtype or device is refused, not allocated as something else.
// The library's tensors start on a 64-byte boundary (a cache line, an AVX-512 vector) and are zeroed.
TEST(OwningTensor, SixtyFourByteAlignedAndZeroed) {
    for (int64_t n : {1, 3, 1000, 100003}) {
        const Tensor t(DType::f32, {n});
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u) << n;
        const float *f = static_cast<const float *>(t.data());
        EXPECT_TRUE(std::all_of(f, f + n, [](float v) { return v == 0.0f; })) << n;
    }
}

TEST(OwningTensor, UnknownDtypeOrDevice) {
    EXPECT_THROW(Tensor(static_cast<DType>(7), {4}), Error);
    EXPECT_THROW(Tensor(DType::f32, {4}, static_cast<Device>(5)), Error);
    EXPECT_THROW(Tensor(DType::f32, {2, -1}), Error);
    EXPECT_EQ(Tensor(DType::f16, {2, 3}).num_bytes(), 12u);
}

// ---- Valid empty cases: no throw, zero outputs -----------------------------------------------------
Array fetch(const Call &c, const std::string &n) { return ref::to_array(c.v.at(n)); }

void expect_all_outputs_zero(const Call &c) {
    for (std::size_t k = c.num_inputs; k < c.names.size(); ++k)
        EXPECT_EQ(max_abs(fetch(c, c.names[k])), 0.0) << "output '" << c.names[k] << "' is not all zero";
}

TEST(EmptyInput, SeqLenMaxZero) {
    for (OpId op : {OpId::seq, OpId::seq_v2, OpId::grad, OpId::grad_v2}) {
        for (DType dt : blocklstm::kFloatDTypes) {
            SCOPED_TRACE(label(op, "seq_len_max = 0"));
            Call c = valid_call(op, dt, 3, 2, 3, 4, 0);
            ASSERT_NO_THROW(c.invoke());
            expect_all_outputs_zero(c);
        }
    }
}

TEST(EmptyInput, TimeZero) {
    for (OpId op : {OpId::seq, OpId::seq_v2, OpId::grad, OpId::grad_v2}) {
        SCOPED_TRACE(label(op, "T = 0"));
        Call c = valid_call(op, DType::f32, 0, 2, 3, 4, 0);
        ASSERT_NO_THROW(c.invoke());
        expect_all_outputs_zero(c);
    }
}

TEST(EmptyInput, BatchZero) {
    for (OpId op : {OpId::seq, OpId::seq_v2, OpId::grad, OpId::grad_v2}) {
        SCOPED_TRACE(label(op, "B = 0"));
        Call c = valid_call(op, DType::f32, 3, 0, 3, 4, 2);
        ASSERT_NO_THROW(c.invoke());
        expect_all_outputs_zero(c);  // w_grad, b_grad, peephole grads: sums over nothing
    }
}

// I = 0: x is empty and w has only its H recurrent rows; every op against the reference.
TEST(EmptyInput, InputSizeZero) {
    const Shape s{3, 2, 0, 4, 2, 1, 3.0, 1.0, "I = 0"};
    for (const OpInfo &op : ops()) {
        for (DType dt : blocklstm::kFloatDTypes) {
            SCOPED_TRACE(op.name + " " + to_string(dt) + ", I = 0");
            const Layout layout = op.layout == "ifco" ? Layout::ifco : Layout::icfo;
            const Problem p = make_problem(seed_for("I = 0"), s, dt, !op.sequence, true, layout);
            expect_op_matches_reference(p, Inputs(p), op.gradient);
        }
    }
}

// Empty tensors need no storage: a null data pointer is fine when there are no elements.
TEST(EmptyInput, NullDataOfEmptyTensors) {
    for (OpId op : {OpId::seq, OpId::seq_v2, OpId::grad, OpId::grad_v2}) {
        SCOPED_TRACE(label(op, "T = 0, null x"));
        Call c = valid_call(op, DType::f32, 0, 2, 3, 4, 0);
        for (auto &kv : c.v)
            if (kv.second.num_elements() == 0) kv.second.data = nullptr;
        ASSERT_NO_THROW(c.invoke());
        expect_all_outputs_zero(c);
    }
}

}  // namespace
}  // namespace blt
