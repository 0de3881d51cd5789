// blocklstm — TensorFlow's fused LSTM block ops as ahead-of-time Halide kernels.
//
// One function per TF op, named after it, taking the op's inputs in TF's order, writing TF's
// outputs (in TF's order) into caller-owned tensors, with the op's attrs and TF's defaults.
// A second overload of each op allocates its outputs and returns them.
//
// Semantics: TensorFlow's (tf.raw_ops.<OpName>); where blocklstm differs from TF, the project's
// README ("Semantics and differences from TensorFlow") says how and why.
//
// Every input is validated before any kernel runs. On bad input a blocklstm::Error is thrown
// whose message names the op, the argument, the expected and the actual value, and no output
// has been written.
//
// Thread safety: every op may be called concurrently from several threads on different outputs.
//
// Devices: every tensor of a call is on the CPU (host memory) or every one is on the same CUDA
// device (device memory: cudaMalloc / cuMemAlloc / cuMemAllocAsync or managed memory). A CUDA
// call runs in that device's primary context, is enqueued on this thread's stream
// (set_cuda_stream) and returns without waiting for the GPU, as cuDNN does; its workspace is
// stream-ordered memory (cuMemAllocAsync) freed on the same stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <blocklstm/version.h>

// Symbols of the shared library that users may call.
#if defined(_WIN32)
#define BLOCKLSTM_API
#else
#define BLOCKLSTM_API __attribute__((visibility("default")))
#endif

namespace blocklstm {

// The version of the library loaded (BLOCKLSTM_VERSION of the headers it was built with).
BLOCKLSTM_API const char *version();
// The version of Halide its kernels were generated with, e.g. "21.0.0".
BLOCKLSTM_API const char *halide_version();

// The ops' float types are f32, f16 and bf16 (the 16-bit types are stored in 16 bits, with all
// arithmetic and accumulation in float32 and one rounding per stored value); i32 and i64 serve only
// seq_lengths. bf16 came last: the other values are unchanged.
enum class DType : int { f16, f32, i32, i64, bf16 };
enum class Device : int { cpu, cuda };

// The ops' float types, in the order the tools list them.
inline constexpr DType kFloatDTypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr bool is_float(DType dtype) { return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16; }

BLOCKLSTM_API const char *to_string(DType dtype);    // "float16", "float32", "int32", "int64", "bfloat16"
BLOCKLSTM_API const char *short_name(DType dtype);   // "f16", "f32", "i32", "i64", "bf16" (kernel names)
// The dtype that to_string or short_name names `name`; throws Error naming the known names.
BLOCKLSTM_API DType dtype_named(const std::string &name);
BLOCKLSTM_API const char *to_string(Device device);  // "cpu", "cuda"
BLOCKLSTM_API std::size_t size_of(DType dtype);      // bytes per element

// The one exception type of the library.
class BLOCKLSTM_API Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A non-owning view of a dense, row-major (C order) tensor.
struct BLOCKLSTM_API TensorView {
    void *data = nullptr;
    DType dtype = DType::f32;
    std::vector<int64_t> shape;
    Device device = Device::cpu;

    int rank() const { return static_cast<int>(shape.size()); }
    int64_t num_elements() const;
    std::size_t num_bytes() const { return static_cast<std::size_t>(num_elements()) * size_of(dtype); }
};

// An owning, zero-initialised tensor in host memory or, with Device::cuda, in the memory of the
// calling thread's current CUDA device, as cudaMalloc (device 0 where no context is current);
// converts to a TensorView. The ops' allocating forms allocate on their inputs' device.
class BLOCKLSTM_API Tensor {
public:
    Tensor() = default;
    Tensor(DType dtype, std::vector<int64_t> shape, Device device = Device::cpu);
    Device device() const { return view_.device; }

    DType dtype() const { return view_.dtype; }
    const std::vector<int64_t> &shape() const { return view_.shape; }
    int64_t num_elements() const { return view_.num_elements(); }
    std::size_t num_bytes() const { return view_.num_bytes(); }
    void *data() const { return view_.data; }
    template <typename T>
    T *data_as() const { return static_cast<T *>(view_.data); }

    const TensorView &view() const { return view_; }
    operator const TensorView &() const { return view_; }

private:
    std::shared_ptr<std::byte[]> storage_;
    TensorView view_;
};

// float16 <-> float32 conversions (IEEE binary16, round to nearest even).
BLOCKLSTM_API uint16_t float_to_half(float value);
BLOCKLSTM_API float half_to_float(uint16_t bits);
// bfloat16 <-> float32 conversions (float32's upper 16 bits, round to nearest even; a NaN stays a
// NaN). The kernels round the same way.
BLOCKLSTM_API uint16_t float_to_bfloat16(float value);
BLOCKLSTM_API float bfloat16_to_float(uint16_t bits);
// `value` rounded to `dtype` (f16 or bf16) and back; f32 as it is.
BLOCKLSTM_API float round_to(DType dtype, float value);

// ---- Attributes, with TF's defaults -------------------------------------------------------

struct LSTMBlockCellAttrs {
    float forget_bias = 1.0f;
    float cell_clip = 3.0f;  // clipping only when > 0
    bool use_peephole = false;
};
struct BlockLSTMAttrs {
    float forget_bias = 1.0f;
    float cell_clip = 3.0f;
    bool use_peephole = false;
};
// BlockLSTMV2 has no forget_bias attr: its forget bias is exactly 0.
struct BlockLSTMV2Attrs {
    float cell_clip = 0.0f;
    bool use_peephole = false;
};
// TF makes use_peephole a required attr of the grad ops; false here.
struct GradAttrs {
    bool use_peephole = false;
};

// ---- Output bundles, in TF's output order ----------------------------------------------------
// T is TensorView (caller-owned outputs) or Tensor (allocated by the convenience overloads).

// LSTMBlockCell ([B,H] each) and BlockLSTM / BlockLSTMV2 ([T,B,H] each).
template <typename T>
struct LSTMOutputs {
    T i, cs, f, o, ci, co, h;
};
// LSTMBlockCellGrad.
template <typename T>
struct LSTMBlockCellGradOutputs {
    T cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad;
};
// BlockLSTMGrad / BlockLSTMGradV2.
template <typename T>
struct BlockLSTMGradOutputs {
    T x_grad, cs_prev_grad, h_prev_grad, w_grad, wci_grad, wcf_grad, wco_grad, b_grad;
};

using TV = TensorView;

// ---- The six ops ------------------------------------------------------------------------------

// One LSTM step, gate layout ICFO. x [B,I], cs_prev/h_prev [B,H], w [I+H,4H], wci/wcf/wco [H], b [4H].
// Inference: i, f, o, ci and co may all be left out of the outputs (TensorView{}), as with
// BlockLSTM; the call then writes only cs and h.
BLOCKLSTM_API void LSTMBlockCell(const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w, const TV &wci,
                   const TV &wcf, const TV &wco, const TV &b, const LSTMOutputs<TV> &out,
                   const LSTMBlockCellAttrs &attrs = {});
BLOCKLSTM_API LSTMOutputs<Tensor> LSTMBlockCell(const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w,
                                  const TV &wci, const TV &wcf, const TV &wco, const TV &b,
                                  const LSTMBlockCellAttrs &attrs = {});

// Gradient of one LSTMBlockCell step (ICFO): dicfo [B,4H] = pre-activation gate gradients.
BLOCKLSTM_API void LSTMBlockCellGrad(const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w, const TV &wci,
                       const TV &wcf, const TV &wco, const TV &b, const TV &i, const TV &cs,
                       const TV &f, const TV &o, const TV &ci, const TV &co, const TV &cs_grad,
                       const TV &h_grad, const LSTMBlockCellGradOutputs<TV> &out,
                       const GradAttrs &attrs = {});
BLOCKLSTM_API LSTMBlockCellGradOutputs<Tensor> LSTMBlockCellGrad(
    const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w, const TV &wci, const TV &wcf,
    const TV &wco, const TV &b, const TV &i, const TV &cs, const TV &f, const TV &o, const TV &ci,
    const TV &co, const TV &cs_grad, const TV &h_grad, const GradAttrs &attrs = {});

// The whole sequence, ICFO, seq_len_max steps of x [T,B,I]; every output is zero past seq_len_max.
//
// seq_lengths (blocklstm's extension, not TF's; docs/semantics.md "Per-example lengths"): an
// optional [B] int32 or int64 tensor in host memory, each value in [0, T]. Row b then runs
// min(seq_lengths[b], seq_len_max) steps: its outputs past that are zero, its final state is its
// h and cs at its last step, and the gradient ops neither read its cs_grad and h_grad past it nor
// pass anything from there back (x_grad zero there). Only the steps rows run are computed: the
// rows are ordered by length inside the call, so that each step runs on those still running.
// nullptr: TF's op exactly.
//
// Inference: i, f, o, ci and co may all be left out of the outputs (TensorView{}: no data, no
// shape); the call then writes only cs and h (the state the next step reads and the output), each
// step's gates staying in cache instead of five [T,B,H] tensors in memory. On the CPU cs may then
// be [B,H] instead of [T,B,H]: the final cell state of each row (cs at its last step; cs_prev
// where it runs none), the steps' cs kept in two [B,H] scratches (CUDA: [T,B,H]). The gradient
// ops need all seven.
BLOCKLSTM_API void BlockLSTM(int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w,
               const TV &wci, const TV &wcf, const TV &wco, const TV &b,
               const LSTMOutputs<TV> &out, const BlockLSTMAttrs &attrs = {},
               const TV *seq_lengths = nullptr);
BLOCKLSTM_API LSTMOutputs<Tensor> BlockLSTM(int64_t seq_len_max, const TV &x, const TV &cs_prev,
                              const TV &h_prev, const TV &w, const TV &wci, const TV &wcf,
                              const TV &wco, const TV &b, const BlockLSTMAttrs &attrs = {},
                              const TV *seq_lengths = nullptr);

// As BlockLSTM with gate layout IFCO and no forget bias.
BLOCKLSTM_API void BlockLSTMV2(int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev,
                 const TV &w, const TV &wci, const TV &wcf, const TV &wco, const TV &b,
                 const LSTMOutputs<TV> &out, const BlockLSTMV2Attrs &attrs = {},
                 const TV *seq_lengths = nullptr);
BLOCKLSTM_API LSTMOutputs<Tensor> BlockLSTMV2(int64_t seq_len_max, const TV &x, const TV &cs_prev,
                                const TV &h_prev, const TV &w, const TV &wci, const TV &wcf,
                                const TV &wco, const TV &b, const BlockLSTMV2Attrs &attrs = {},
                                const TV *seq_lengths = nullptr);

// Gradient of BlockLSTM (ICFO). i..h are BlockLSTM's outputs, cs_grad/h_grad [T,B,H].
BLOCKLSTM_API void BlockLSTMGrad(int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev,
                   const TV &w, const TV &wci, const TV &wcf, const TV &wco, const TV &b,
                   const TV &i, const TV &cs, const TV &f, const TV &o, const TV &ci,
                   const TV &co, const TV &h, const TV &cs_grad, const TV &h_grad,
                   const BlockLSTMGradOutputs<TV> &out, const GradAttrs &attrs = {},
                   const TV *seq_lengths = nullptr);
BLOCKLSTM_API BlockLSTMGradOutputs<Tensor> BlockLSTMGrad(
    int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w,
    const TV &wci, const TV &wcf, const TV &wco, const TV &b, const TV &i, const TV &cs,
    const TV &f, const TV &o, const TV &ci, const TV &co, const TV &h, const TV &cs_grad,
    const TV &h_grad, const GradAttrs &attrs = {}, const TV *seq_lengths = nullptr);

// The exact gradient of BlockLSTMV2 (IFCO).
BLOCKLSTM_API void BlockLSTMGradV2(int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev,
                     const TV &w, const TV &wci, const TV &wcf, const TV &wco, const TV &b,
                     const TV &i, const TV &cs, const TV &f, const TV &o, const TV &ci,
                     const TV &co, const TV &h, const TV &cs_grad, const TV &h_grad,
                     const BlockLSTMGradOutputs<TV> &out, const GradAttrs &attrs = {},
                     const TV *seq_lengths = nullptr);
BLOCKLSTM_API BlockLSTMGradOutputs<Tensor> BlockLSTMGradV2(
    int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w,
    const TV &wci, const TV &wcf, const TV &wco, const TV &b, const TV &i, const TV &cs,
    const TV &f, const TV &o, const TV &ci, const TV &co, const TV &h, const TV &cs_grad,
    const TV &h_grad, const GradAttrs &attrs = {}, const TV *seq_lengths = nullptr);

// ReverseSequence: TF's op with seq_axis 0 and batch_axis 1 (not one of the LSTM ops): output[t, b]
// = input[seq_lengths[b] - 1 - t, b] for t < seq_lengths[b], input[t, b] past it, for an input
// [T,B,W] (float16 or float32, CPU or CUDA: a CUDA call as the sequence ops' seq_lengths,
// cuda_seq_lengths()) and seq_lengths [B] (int32 or int64, host memory, each in [0, T]): the
// reverse direction of a bidirectional LSTM over rows of their own lengths. One kernel launch;
// input and output must not overlap.
BLOCKLSTM_API void ReverseSequence(const TV &input, const TV &seq_lengths, const TV &output);
BLOCKLSTM_API Tensor ReverseSequence(const TV &input, const TV &seq_lengths);

// ---- CUDA ----------------------------------------------------------------------------------

struct CUstream_st;
using CudaStream = CUstream_st *;  // the same type as cudaStream_t and CUstream

// Whether this build has the CUDA kernels (CMake BLOCKLSTM_CUDA), and how many CUDA devices a
// driver reports (0 without a driver or a GPU; never throws).
BLOCKLSTM_API bool cuda_built();
BLOCKLSTM_API int cuda_device_count();
BLOCKLSTM_API std::string cuda_device_name(int device = 0);
// Why cuda_device_count() is 0 ("" when it is not): no driver, a driver function missing (named),
// cuInit's error, no device, or a build without CUDA.
BLOCKLSTM_API std::string cuda_unavailable_reason();

// The stream this thread's CUDA calls are enqueued on (default: nullptr, the legacy default
// stream); cuda_synchronize() waits for it.
BLOCKLSTM_API void set_cuda_stream(CudaStream stream);
BLOCKLSTM_API CudaStream cuda_stream();
BLOCKLSTM_API void cuda_synchronize();
// Gives back the device memory blocklstm keeps between CUDA calls for speed: the calling thread's
// cuBLAS handles (a 64 MiB workspace each on an H100), the kernels' cached intermediates (every
// thread's) and the workspace pools' free memory. Call it when no blocklstm CUDA call is running
// (e.g. before handing the GPU to other work, or before exit under a leak checker); later calls
// allocate again. Waits for the devices. Without a device it does nothing.
BLOCKLSTM_API void cuda_release_memory();

// The batched matrix products of the sequence ops on CUDA (input projection, x_grad, h_prev_grad,
// w_grad): cuBLAS (loaded at run time; float32 without TF32) where it can take the operands,
// else the Halide GEMM kernels. halide forces the Halide kernels everywhere. Where cuBLAS cannot
// be loaded (BLOCKLSTM_CUBLAS names its path) or initialised, the calls fall back to the Halide
// kernels and say so once on stderr.
enum class CudaGemm : int { cublas, halide };
BLOCKLSTM_API void set_cuda_gemm(CudaGemm gemm);
BLOCKLSTM_API CudaGemm cuda_gemm();
BLOCKLSTM_API bool cublas_available();
// How the CUDA time loops run a step: split (the default), the recurrent product on cuBLASLt (in
// place: xw[t] += h . W_h, and dgates[t+1] . W_h^T with a transposed operand) and one Halide
// kernel with the gate math; or fused, one Halide kernel per step with its recurrent product
// inside (the portable path). Split runs where cuBLAS is in use, for the forward ops and the
// sequence gradients (whose float16 gate gradients are then stored in half, as TF's GPU kernel
// stores them, so that every product reading them runs on the tensor cores; docs/semantics.md),
// and the fused steps elsewhere. BLOCKLSTM_CUDA_STEP=fused in the environment starts with fused.
enum class CudaStep : int { fused, split };
BLOCKLSTM_API void set_cuda_step(CudaStep step);
BLOCKLSTM_API CudaStep cuda_step();
// CUDA graphs of the split steps' time loops: with them on, a call's recurrence (two launches a
// step) runs as one graph launch where a cached graph of the same shape was captured with the
// same arguments (pointers included), and is captured again (cuGraphExecUpdate) where they
// differ; a shape's first call, and any loop whose capture fails, run direct launches. Graphs
// are per thread (as the cuBLAS handles) and cuda_release_memory gives this thread's back. On by
// default; BLOCKLSTM_CUDA_GRAPHS=0 in the environment starts with them off.
BLOCKLSTM_API void set_cuda_graphs(bool on);
BLOCKLSTM_API bool cuda_graphs();
// What the time loops did in this process: direct runs (graphs off excluded), captures, of them
// updates of a cached graph, graph launches, and failed captures.
struct CudaGraphStats {
    uint64_t direct = 0, captures = 0, updates = 0, launches = 0, failures = 0;
};
BLOCKLSTM_API CudaGraphStats cuda_graph_stats();
// Whether the sequence ops take seq_lengths with CUDA tensors. Off until a GPU run has shown them
// correct (docs/cuda.md): a CUDA call with seq_lengths is then refused, naming the argument.
// BLOCKLSTM_CUDA_SEQ_LENGTHS=1 in the environment turns them on (read at every call).
BLOCKLSTM_API bool cuda_seq_lengths();
// Whether bfloat16 runs on CUDA tensors. Its kernels are built (their conversions by bits, as
// Halide's CUDA back end cannot cast bfloat16) but off until a GPU run has shown them correct
// (docs/cuda.md): a bfloat16 CUDA call is then refused, naming the kernel. BLOCKLSTM_CUDA_BF16=1
// in the environment turns them on (read here at every call; by the kernels at a process's first
// CUDA call).
BLOCKLSTM_API bool cuda_bfloat16();
// What runs the products now and why, e.g. "cuBLAS (/usr/local/cuda/lib64/libcublas.so.13)" or
// "Halide GEMM kernels (cuBLAS: cublasCreate failed with status 1)".
BLOCKLSTM_API std::string cuda_gemm_backend();
// What runs the split steps' recurrent products, e.g. "cuBLASLt (/usr/local/cuda/lib64/libcublasLt.so.13),
// the fastest of its heuristic's first 8 algorithms per shape" or "cublasGemmEx (cuBLASLt: ...)".
// BLOCKLSTM_CUDA_LT=0 in the environment runs them on cublasGemmEx.
BLOCKLSTM_API std::string cuda_step_product_backend();
// The products cuBLAS (and cuBLASLt) has run in this process: evidence that the cuBLAS path was taken.
BLOCKLSTM_API uint64_t cublas_product_count();

// Copies src into dst (same dtype and element count; host or CUDA memory on either side) on this
// thread's stream and waits for the copy.
BLOCKLSTM_API void copy(const TensorView &src, const TensorView &dst);

// ---- Kernels -------------------------------------------------------------------------------

// One compiled kernel of the variant table (runtime/kernels.inc).
struct KernelInfo {
    std::string name;    // e.g. "seq_bwd_step__cpu_f32_peephole_icfo"
    std::string family;  // e.g. "seq_bwd_step"
    std::string ops;     // the TF ops that run it, e.g. "BlockLSTMGrad BlockLSTMGradV2"
    Device backend;
    DType dtype;
    bool peephole;
    std::string layout;   // "icfo", "ifco" or "any"
    std::string targets;  // the targets compiled into it, ','-separated, best first: CPU kernels
                          // the names of cpu_targets(); CUDA kernels one Halide target
};
BLOCKLSTM_API std::vector<KernelInfo> kernels();

// ---- CPU targets ---------------------------------------------------------------------------

// Every CPU kernel is compiled once per CPU target (CMake: BLOCKLSTM_CPU_TARGETS, best first).
// By default each op call runs the first one this CPU supports (of those whose table is for this
// CPU: tuned_for); a pin picks one for the process.
struct CpuTarget {
    std::string name;           // what a pin names, e.g. "avx2-fma-f16c", "avx2-fma-f16c@avx512"
    std::string halide_target;  // e.g. "x86-64-linux-avx2-fma-f16c"
    std::string tuning_table;   // the schedules' tuning table: "x86-64-avx2", ...
    std::string tuning;         // its knobs, "name:value,..." (docs/tuning.md)
    std::string tuned_on;       // where and how the table was tuned, or "(not measured) ..."
    bool check_only = false;    // a test build's check target: its instruction set with another
                                // target's table; never chosen automatically
    bool bf16_dot_products = false;  // its bfloat16 kernels' products of two bfloat16 operands run
                                     // as pairs of bfloat16 products (vdpbf16ps on AVX512-BF16)
    bool amx_products = false;  // its bfloat16 forward products (the input projection, a step's
                                // h . W_h) run on AMX tiles (tdpbf16ps; Intel Sapphire Rapids on)
    std::string other_dtypes_as;  // the target whose float32 and float16 kernels it runs ("" for
                                  // its own): a target that differs in its bfloat16 kernels only
    std::string tuned_for;      // the CPUs its table is for, e.g. "AuthenticAMD family 0x19 models
                                // 0x10-0x1f, 0x60-0x7f, 0xa0-0xaf" (AMD Zen 4); "" for any CPU.
                                // Chosen automatically only on them (schedules/cpu_targets.json).
    bool tuned_for_this_cpu = true;  // tuned_for is "" or this CPU
    bool runs_here = false;     // this CPU has every feature it needs
    std::string missing;        // what this CPU (or its OS) lacks, '; '-separated, e.g.
                                // "avx512_skylake (AVX-512BW, AVX-512VL)"; "" if runs_here
};
BLOCKLSTM_API std::vector<CpuTarget> cpu_targets();

// Pins the CPU kernels of every later op call (all threads) to one compiled target, named by its
// name, its Halide target string, or a leading part of its name ending at '-' or '_' ("avx2",
// "avx512", "sse41"); "" returns to the automatic choice. An unknown target, or one this CPU
// cannot run, throws blocklstm::Error listing what this library has and what this CPU runs.
// The environment variable BLOCKLSTM_CPU_TARGET sets the initial pin (checked at the first call).
BLOCKLSTM_API void set_cpu_target(const std::string &target);

// The name of the CPU target the kernels run as now (throws if BLOCKLSTM_CPU_TARGET is invalid),
// and whether it is pinned.
BLOCKLSTM_API std::string cpu_target_in_use();
BLOCKLSTM_API bool cpu_target_pinned();

// A bfloat16 sequence op on a target with amx_products runs its products on AMX's tiles where its
// shape pays for them, else on the FMAs of that target's other_dtypes_as (docs/performance.md:
// 'Where AMX pays'); BLOCKLSTM_AMX=always in the environment keeps every call on the tiles.
// amx_call_count(): the op calls of this process that ran on the tiles.
BLOCKLSTM_API uint64_t amx_call_count();

// ---- Threads and memory --------------------------------------------------------------------

// Threads of the CPU kernels (Halide's thread pool); 0 = one per core (the default, or the
// environment variable HL_NUM_THREADS where set). Call before any op. Negative: blocklstm::Error.
BLOCKLSTM_API void set_num_threads(int threads);

// Where the CPU kernels' parallel loops run: "own", the library's thread pool (the default), or
// "openmp", the threads of an OpenMP runtime the process has already loaded (GNU libgomp, LLVM's
// libomp or Intel's libiomp5: PyTorch's, for one). A framework's OpenMP workers spin for
// milliseconds after each of its own parallel loops; where there are no more cores than threads
// they take the cores the library's own workers need (on 2 vCPUs a 9 ms BlockLSTMV2 call took
// 14 ms right after a torch op), while on OpenMP's threads the kernels use those spinning workers.
// blocklstm.torch chooses "openmp" when PyTorch runs on OpenMP. Threads there: set_num_threads'
// number where one was set, else OpenMP's (omp_set_num_threads, OMP_NUM_THREADS,
// torch.set_num_threads). BLOCKLSTM_THREAD_POOL=openmp chooses it when the library loads.
// Throws blocklstm::Error for another name, for "openmp" when no OpenMP runtime is loaded, and
// under BLOCKLSTM_THREAD_POOL=halide (Halide's own pool, for the life of the process).
BLOCKLSTM_API void set_thread_pool(const std::string &pool);

// "own", "openmp (<the OpenMP library's file name>)" or "halide" (BLOCKLSTM_THREAD_POOL=halide).
BLOCKLSTM_API std::string thread_pool_in_use();

// CPU workspaces (the gate gradients of a sequence, packed weights, GEMM panels) are kept for the
// next call when freed, so that a training loop does not pay the page faults of fresh memory on
// every call. At most `max_bytes` are kept (default 1 GiB, largest blocks released first); 0
// releases them all and keeps none from then on. host_cache_bytes(): what is kept now.
BLOCKLSTM_API void set_host_cache_limit(std::size_t max_bytes);
BLOCKLSTM_API std::size_t host_cache_bytes();

}  // namespace blocklstm
