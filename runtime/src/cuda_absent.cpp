// A build without CUDA (BLOCKLSTM_CUDA off): the device operations of runtime/src/cuda_device.h,
// cuBLAS and the public CUDA functions, each an error that says how to build with CUDA, or the
// answer "none". The validation rejects CUDA tensors before any of these is reached.
#include "runtime/src/cuda_device.h"
#include "runtime/src/products.h"

namespace blocklstm {
namespace detail {
namespace cuda {
namespace {
[[noreturn]] void no_cuda(const char *who) {
    throw Error(std::string(who) + ": this build has no CUDA kernels (configure with -DBLOCKLSTM_CUDA=ON)");
}
}  // namespace

int device_of(const void *, std::string *why) {
    *why = "this build has no CUDA kernels: expected cpu tensors (or a build configured with "
           "-DBLOCKLSTM_CUDA=ON)";
    return -1;
}
Call enter(const void *) { no_cuda("blocklstm"); }
void leave(const Call &) {}
void zero(const Call &, void *, std::size_t) { no_cuda("blocklstm"); }
void copy(const Call &, void *, const void *, std::size_t) { no_cuda("copy"); }
void fill_ones(const Call &, void *, DType, std::size_t) { no_cuda("blocklstm"); }
void *allocate(const Call &, std::size_t) { no_cuda("blocklstm"); }
void free(const Call &, void *) {}
void synchronize(const Call &) { no_cuda("blocklstm"); }
double elapsed_ms(const Call &, const std::function<void()> &) { no_cuda("blocklstm"); }
double graph_elapsed_ms(const Call &, const std::function<void(void *)> &) { no_cuda("blocklstm"); }
const halide_device_interface_t *halide_interface() { no_cuda("blocklstm"); }
std::shared_ptr<std::byte[]> allocate_zeroed(std::size_t) { no_cuda("Tensor"); }
void run_loop(Call &, const std::vector<int64_t> &, const std::function<void()> &loop) { loop(); }
std::vector<uint64_t> *fingerprint() { return nullptr; }
}  // namespace cuda

bool cublas_in_use(const Exec &) { return false; }
void cublas_lost_during_call() { cuda::no_cuda("blocklstm"); }
struct StepProducts::Plan {};
StepProducts::StepProducts(Exec &exec, const std::vector<int64_t> &, int64_t N, int64_t K, const Operand &a,
                           const Operand &b, DType c_dtype, int64_t ldc, float beta, int)
    : exec_(exec), N_(N), K_(K), a_(a), b_(b), c_dtype_(c_dtype), ldc_(ldc), beta_(beta) {
    cuda::no_cuda("blocklstm");
}
StepProducts::~StepProducts() = default;
void StepProducts::run(int64_t, const void *, void *) { cuda::no_cuda("blocklstm"); }
plan::Steps steps_for(plan::Kind, Device, DType) { return plan::Steps::fused; }
plan::Steps steps_for(plan::Kind, Exec &, DType) { return plan::Steps::fused; }
bool cublas_gemm(Exec &, int64_t, int64_t, int64_t, const Operand &, const Operand &, void *,
                 DType, int64_t, float) {
    return false;
}
}  // namespace detail

bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() {
    return "this build has no CUDA kernels (configure with -DBLOCKLSTM_CUDA=ON)";
}
std::string cuda_device_name(int) { throw Error("blocklstm: this build has no CUDA kernels"); }
void set_cuda_stream(CudaStream) {}
CudaStream cuda_stream() { return nullptr; }
void cuda_synchronize() {}
void cuda_release_memory() {}
void set_cuda_gemm(CudaGemm) {}
void set_cuda_step(CudaStep) {}
void set_cuda_graphs(bool) {}
bool cuda_graphs() { return false; }
CudaGraphStats cuda_graph_stats() { return {}; }
CudaStep cuda_step() { return CudaStep::split; }
CudaGemm cuda_gemm() { return CudaGemm::halide; }
bool cublas_available() { return false; }
uint64_t cublas_product_count() { return 0; }
std::string cuda_gemm_backend() { return "none (this build has no CUDA kernels)"; }
std::string cuda_step_product_backend() { return "none (this build has no CUDA kernels)"; }

}  // namespace blocklstm
