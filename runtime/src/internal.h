// Runtime internals: Halide buffer views, the kernel table and kernel calls, validation.
#pragma once

#include <blocklstm/blocklstm.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "HalideRuntime.h"
#include "schedules/panel_layout.h"

namespace blocklstm::detail {

enum class Layout { icfo, ifco };

// ---- Where a call runs ---------------------------------------------------------------------------

// The device of one op call and what it needs there. CPU: nothing. CUDA: the primary context of
// the device that holds the call's tensors is made current for the Exec's life, kernels and copies
// go on this thread's stream (set_cuda_stream), and the Halide kernels receive both through their
// user_context. Declare an Exec before any Scratch of the call, so the scratch is freed first.
class Exec {
public:
    // `any_tensor`: a pointer into the call's memory (CUDA: it selects the device).
    Exec(Device device, const void *any_tensor);
    ~Exec();
    Exec(const Exec &) = delete;
    Exec &operator=(const Exec &) = delete;

    Device device() const { return device_; }
    // CPU: the CPU target every kernel of this call runs as (cpu_target.cpp), read once per call.
    int cpu_target() const { return cpu_target_; }
    // The Halide user_context of a CUDA kernel: a pointer to the (context, stream) pair.
    void *user_context() { return &cuda_; }
    void *context() const { return cuda_.context; }
    void *stream() const { return cuda_.stream; }

    // Memory on the call's device: zeroing and copying (CUDA: asynchronous, on the stream).
    void zero_bytes(void *data, int64_t bytes) const;
    void copy_bytes(void *dst, const void *src, int64_t bytes) const;
    void fill_ones(void *data, DType dtype, int64_t count) const;  // count elements of 1.0

    struct CudaCall {
        void *context = nullptr;  // CUcontext
        void *stream = nullptr;   // CUstream
    };

private:
    Device device_;
    int cpu_target_ = 0;
    CudaCall cuda_;
};

// ---- CPU targets (runtime/src/cpu_target.cpp) --------------------------------------------------

// The index in cpu_targets.inc of the target the CPU kernels run as now: the pinned one, else the
// first production target this CPU supports. Throws when the BLOCKLSTM_CPU_TARGET pin is invalid.
int current_cpu_target();
const std::string &cpu_target_name(int index);

// Scratch memory of one call on its device (CUDA: stream-ordered, cuMemAllocAsync /
// cuMemFreeAsync on the call's stream, so it is reused from the driver's pool and needs no
// synchronisation). Zero-initialised unless the caller writes all of it first (Fill::none: no
// memset of tens of MB per call, and no page faults from touching it twice).
class Scratch {
public:
    enum class Fill { zeros, none };
    Scratch(Exec &exec, int64_t bytes, Fill fill = Fill::zeros);
    ~Scratch();
    Scratch(const Scratch &) = delete;
    Scratch &operator=(const Scratch &) = delete;
    Scratch(Scratch &&other) noexcept;

    void *data() const { return data_; }
    float *floats() const { return static_cast<float *>(data_); }

private:
    Exec *exec_;
    void *data_ = nullptr;
};

// Host memory from the cache of blocks freed by earlier calls (runtime/src/host_cache.cpp), 128-byte
// aligned; Halide's own buffers come from it too.
void *host_allocate(std::size_t bytes);
void host_free(void *p);

// ---- Halide buffers over caller memory ----------------------------------------------------------

// A halide_buffer_t over host memory (Device::cpu) or over CUDA device memory (Device::cuda: the
// pointer is wrapped as the buffer's device allocation; there is no host copy, and Halide never
// copies: the buffers are neither host- nor device-dirty). Shapes are given outermost first, as TF
// writes them; the Halide dimensions are innermost first. The object is self-contained (owns its
// dims array), so the time loops move one along a sequence by changing the data pointer only.
class Buf {
public:
    // Dense row-major tensor of the given shape.
    Buf(Device device, void *data, DType dtype, std::initializer_list<int64_t> shape);
    // Row-major matrix with a row stride (in elements), e.g. a column block of a wider matrix.
    static Buf matrix(Device device, void *data, DType dtype, int64_t rows, int64_t cols,
                      int64_t row_stride);
    // [rows, 4H] viewed as (unit j, gate block, row): what the gate-gradient kernels write.
    static Buf gate_blocks(Device device, void *data, DType dtype, int64_t rows, int64_t cell_size);

    halide_buffer_t *get() { return &buf_; }
    void set_data(void *data);  // non-null

    Buf(const Buf &other);
    Buf &operator=(const Buf &other);

private:
    Buf() = default;
    void init(Device device, void *data, DType dtype);
    Device device_ = Device::cpu;
    halide_buffer_t buf_{};
    halide_dimension_t dims_[4]{};
};

inline std::byte *offset_bytes(const void *p, int64_t elements, DType dtype) {
    return static_cast<std::byte *>(const_cast<void *>(p)) + elements * static_cast<int64_t>(size_of(dtype));
}

// ---- The kernel table (runtime/kernels.inc) -------------------------------------------------------

// One compiled function of a kernel: its argv entry point and metadata (argument names).
struct KernelCode {
    int (*argv)(void **);
    const halide_filter_metadata_t *(*metadata)();
};

// How a kernel holds the recurrent weights (kernels.inc's weights column): packed float32 panels
// (schedules/panel_layout.h), the matrix in place, or none.
enum class KernelWeights { none, panels, matrix };

struct KernelEntry {
    const char *name;
    const char *family;
    Device backend;
    DType dtype;
    bool peephole;
    const char *layout;  // "icfo", "ifco", "any"
    KernelWeights weights;
    // cpu: one function per CPU target, in cpu_targets.inc's order; cuda: one.
    const KernelCode *code;
};

// The kernel of `family` for this backend and flags (layout ignored for "any" kernels, peephole
// for families without peephole variants). Throws if absent (e.g. a CUDA call in a build without
// BLOCKLSTM_CUDA).
const KernelEntry &find_kernel(const char *family, Device backend, DType dtype, bool peephole,
                               Layout layout);

// One call of a kernel with its arguments bound by name (the generator's input/output names;
// Tuple outputs as "name.0", "name.1", ...). Binding is checked against the kernel's metadata, so
// a mismatch between runtime and generator is an error, not a silent misread. A call object may
// be run many times; the bound buffers may be moved (Buf::set_host) between runs.
class KernelCall {
public:
    // CUDA kernels take the Exec's user_context (context and stream).
    KernelCall(const KernelEntry &kernel, Exec &exec);
    KernelCall &buffer(const char *name, Buf &buf);
    KernelCall &scalar(const char *name, float *value);
    void run();

private:
    int index_of(const char *name, bool is_buffer) const;
    const KernelEntry &kernel_;
    int cpu_target_;  // -1: not a CPU kernel
    const KernelCode &code_;
    std::vector<std::string> names_;
    std::vector<void *> args_;
    void *user_context_ = nullptr;
};

// Throws, naming the kernel, unless every kernel an op call needs is compiled in (runtime/src/
// ops.cpp: the op's kernel families): run before an op writes any output.
void preflight(const std::string &op, Device device, DType dtype, bool use_peephole);

// ---- Validation -------------------------------------------------------------------------------------

// Checks of one op's arguments, collected in the order they are made; the first failure throws
// blocklstm::Error naming the op and the argument.
class Validator {
public:
    explicit Validator(const char *op) : op_(op) {}

    [[noreturn]] void fail(const std::string &what) const;
    [[noreturn]] void fail_arg(const char *arg, const std::string &what) const;

    // rank, then every dim; dims < 0 in `expected` are not checked.
    void shape(const char *arg, const TensorView &t, const std::vector<int64_t> &expected) const;
    void rank(const char *arg, const TensorView &t, int expected) const;
    // dtype and device of every float tensor (the first one given sets the dtype), a non-null
    // pointer when there is data, and every extent the kernels index with int32.
    void tensor(const char *arg, const TensorView &t);
    void output(const char *arg, const TensorView &t);
    // No output may overlap an input or another output.
    void no_overlaps() const;
    DType dtype() const { return dtype_; }
    Device device() const { return device_; }
    const void *first_data() const { return first_data_; }  // a pointer on the call's device

private:
    struct Range {
        const char *arg;
        uintptr_t begin, end;
        bool is_output;
    };
    const char *op_;
    DType dtype_ = DType::f32;
    Device device_ = Device::cpu;
    int cuda_ordinal_ = -1;
    const void *first_data_ = nullptr;
    bool have_dtype_ = false;
    std::vector<Range> ranges_;
};

std::string shape_string(const std::vector<int64_t> &shape);

// Input checks in TF's order: every rank first, then dtype, device, data and int32 limits.
struct InputArg {
    const char *name;
    const TensorView &tensor;
    int rank;
};
void check_inputs(Validator &v, std::initializer_list<InputArg> inputs);

// The state and weight shapes every op shares: cs_prev, h_prev [B,H], w [I+H,4H], wci, wcf,
// wco [H], b [4H].
void check_state_and_weights(const Validator &v, const TensorView &cs_prev,
                             const TensorView &h_prev, const TensorView &w, const TensorView &wci,
                             const TensorView &wcf, const TensorView &wco, const TensorView &b,
                             int64_t B, int64_t I, int64_t H);

// The forward activations and output gradients a grad op takes (acts.each(fn(name, tensor))):
// ranks, then tensor checks, then each exactly `shape`.
template <typename Activations>
void check_activations(Validator &v, const Activations &acts, const std::vector<int64_t> &shape) {
    const int rank = static_cast<int>(shape.size());
    acts.each([&](const char *name, const TensorView &t) { v.rank(name, t, rank); });
    acts.each([&](const char *name, const TensorView &t) { v.tensor(name, t); });
    acts.each([&](const char *name, const TensorView &t) { v.shape(name, t, shape); });
}

// ---- Output bundles ---------------------------------------------------------------------------------

template <typename Bundle, template <typename> class Of>
constexpr bool is_bundle = std::is_same_v<Bundle, Of<TensorView>> || std::is_same_v<Bundle, Of<Tensor>>;

// fn(name, tensor) for every output of a bundle (const or not), in TF's output order.
template <typename Out, typename F>
void each_output(Out &&out, F &&fn) {
    using B = std::decay_t<Out>;
    if constexpr (is_bundle<B, LSTMOutputs>) {
        fn("i", out.i), fn("cs", out.cs), fn("f", out.f), fn("o", out.o), fn("ci", out.ci),
            fn("co", out.co), fn("h", out.h);
    } else if constexpr (is_bundle<B, LSTMBlockCellGradOutputs>) {
        fn("cs_prev_grad", out.cs_prev_grad), fn("dicfo", out.dicfo),
            fn("wci_grad", out.wci_grad), fn("wcf_grad", out.wcf_grad),
            fn("wco_grad", out.wco_grad);
    } else {
        static_assert(is_bundle<B, BlockLSTMGradOutputs>, "not an output bundle");
        fn("x_grad", out.x_grad), fn("cs_prev_grad", out.cs_prev_grad),
            fn("h_prev_grad", out.h_prev_grad), fn("w_grad", out.w_grad),
            fn("wci_grad", out.wci_grad), fn("wcf_grad", out.wcf_grad),
            fn("wco_grad", out.wco_grad), fn("b_grad", out.b_grad);
    }
}

// The outputs (when given) in order: rank, tensor checks, exact shape; then no overlaps.
template <typename Outputs>
void validate_outputs(Validator &v, const Outputs *out,
                      const std::vector<std::vector<int64_t>> &shapes) {
    if (!out) return;
    std::size_t k = 0;
    each_output(*out, [&](const char *name, const TensorView &t) {
        v.rank(name, t, static_cast<int>(shapes[k].size()));
        v.output(name, t);
        v.shape(name, t, shapes[k++]);
    });
    v.no_overlaps();
}

// An owning bundle of zeroed tensors of `shapes` (in output order) on `device`, and views of one.
template <template <typename> class Bundle>
Bundle<Tensor> allocate_outputs(DType dtype, Device device,
                                const std::vector<std::vector<int64_t>> &shapes) {
    Bundle<Tensor> out;
    std::size_t k = 0;
    each_output(out, [&](const char *, Tensor &t) { t = Tensor(dtype, shapes[k++], device); });
    return out;
}
template <template <typename> class Bundle>
Bundle<TensorView> views(const Bundle<Tensor> &owned) {
    std::vector<TensorView> v;
    each_output(owned, [&](const char *, const Tensor &t) { v.push_back(t.view()); });
    Bundle<TensorView> out;
    std::size_t k = 0;
    each_output(out, [&](const char *, TensorView &t) { t = v[k++]; });
    return out;
}

// The product of sizes, saturated at INT64_MAX instead of overflowing.
int64_t saturating_product(std::initializer_list<int64_t> factors);

// Rows of dgates per chunk of the CPU's float32 w_grad (ops_sequence.cpp: weight_grads_in_chunks),
// one k block of its product in the AVX2 geometry (schedules/cpu_params.h: gemm_k_block).
constexpr int64_t kWeightGradChunkRows = 512;

// Elements of a [depth, cols] operand in packed panels: the panel count every CPU geometry may
// read (schedules/panel_layout.h), which the kernels check.
inline int64_t panel_elements(int64_t cols, int64_t depth) {
    return saturating_product({panels::panel_count(cols), depth, panels::kPanelCols});
}

// Products of sizes that become Halide extents or strides must fit int32; `arg` is the input
// whose size sets the product.
void check_int32_extent(const Validator &v, const char *arg, const char *what, int64_t value);

// The value of a float attr as the kernels see it: TF converts forget_bias and cell_clip to the
// element type first, so float16 ops use the half-rounded value.
float attr_in_dtype(float value, DType dtype);

// xw[rows, 4H] = x[rows, I] . w[0:I, :] + b in float32: the input projection of every step of a
// sequence at once (rows = L*B), or of one cell step (rows = B).
void input_projection(Exec &exec, DType dtype, const void *x, int64_t rows, int64_t input_size,
                      int64_t cell_size, const void *w, const void *b, float *xw);

// A row-major matrix operand of a batched product: `data` holds the operand (rows x cols, row
// stride ld) or, when `transposed`, its transpose (cols x rows, row stride ld).
struct Operand {
    const void *data;
    DType dtype;
    int64_t ld;
    bool transposed = false;
};

// c[M,N] (row-major, row stride ldc, dtype c_dtype) = a[M,K] . b[K,N] + beta * c through cuBLAS
// (float32 accumulation; float32 without TF32). Returns false, doing nothing, where cuBLAS is not
// in use (CudaGemm::halide, no library, or operand types it cannot take); the caller then runs
// the Halide GEMM kernel.
// Whether this call's batched products go to cuBLAS (a CUDA call, CudaGemm::cublas, the library
// loaded); cublas_gemm may still decline operand types it cannot take.
bool cublas_in_use(const Exec &exec);
bool cublas_gemm(Exec &exec, int64_t M, int64_t N, int64_t K, const Operand &a, const Operand &b,
                 void *c, DType c_dtype, int64_t ldc, float beta);

// Zero a whole output; zero steps [from, T) of a [T, ...] output (on the call's device).
void zero(const Exec &exec, const TensorView &t);
void zero_steps(const Exec &exec, const TensorView &t, int64_t from);

// CUDA internals (runtime/src/device.cpp).
namespace cuda {
// The device ordinal holding `ptr`, or -1 with `why` set when it is not CUDA device memory.
int device_of(const void *ptr, std::string *why);
// Halide's CUDA device interface (throws in a build without CUDA).
const halide_device_interface_t *halide_interface();
// Zeroed memory on CUDA device 0, freed (cuMemFree) with the last reference.
std::shared_ptr<std::byte[]> allocate_zeroed(std::size_t bytes);
}  // namespace cuda

}  // namespace blocklstm::detail
