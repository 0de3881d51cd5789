// Exec and Scratch: an op call's device and workspaces. The CUDA side is runtime/src/
// cuda_device.h's; this file never names a CUDA type.
#include <cstdint>
#include <cstring>

#include "runtime/src/exec.h"
#include "runtime/src/validate.h"

namespace blocklstm {
namespace detail {

Exec::Exec(Device device, const void *any_tensor) : device_(device) {
    if (device == Device::cpu) cpu_target_ = current_cpu_target();
    else cuda_ = cuda::enter(any_tensor);
}

Exec::~Exec() {
    if (device_ == Device::cuda) cuda::leave(cuda_);
}

void Exec::zero_bytes(void *data, int64_t bytes) const {
    if (bytes <= 0) return;
    if (device_ == Device::cpu) std::memset(data, 0, static_cast<std::size_t>(bytes));
    else cuda::zero(cuda_, data, static_cast<std::size_t>(bytes));
}

void Exec::copy_bytes(void *dst, const void *src, int64_t bytes) const {
    if (bytes <= 0) return;
    if (device_ == Device::cpu) std::memcpy(dst, src, static_cast<std::size_t>(bytes));
    else cuda::copy(cuda_, dst, src, static_cast<std::size_t>(bytes));
}

void Exec::time_loop(const std::vector<int64_t> &shape, const std::function<void()> &loop) {
    if (device_ == Device::cuda) cuda::run_loop(cuda_, shape, loop);
    else loop();
}

void Exec::fill_ones(void *data, DType dtype, int64_t count) const {
    if (count <= 0) return;
    if (device_ == Device::cuda) return cuda::fill_ones(cuda_, data, dtype, static_cast<std::size_t>(count));
    const uint16_t one16 = dtype == DType::bf16 ? float_to_bfloat16(1.0f) : float_to_half(1.0f);
    const float one = 1.0f;
    for (int64_t k = 0; k < count; ++k) {
        if (size_of(dtype) == 2) std::memcpy(static_cast<uint16_t *>(data) + k, &one16, 2);
        else std::memcpy(static_cast<float *>(data) + k, &one, 4);
    }
}

Scratch::Scratch(Exec &exec, int64_t bytes, Fill fill) : exec_(&exec) {
    const auto n = static_cast<std::size_t>(bytes > 0 ? bytes : 0);
    if (exec.device() == Device::cuda) {
        data_ = cuda::allocate(exec.cuda_call(), n);
        if (fill == Fill::zeros) {
            try {
                exec.zero_bytes(data_, bytes);
            } catch (...) {  // a throwing constructor runs no destructor: give the block back here
                try {
                    cuda::free(exec.cuda_call(), data_);
                } catch (...) {
                }
                throw;
            }
        }
        return;
    }
    data_ = host_allocate(n);
    if (!data_) throw Error("blocklstm: out of host memory for a workspace of " + std::to_string(n) + " bytes");
    if (fill == Fill::zeros) std::memset(data_, 0, n);
}

Scratch::Scratch(Scratch &&other) noexcept : exec_(other.exec_), data_(other.data_) {
    other.data_ = nullptr;
}

Scratch::~Scratch() {
    if (!data_) return;
    if (exec_->device() == Device::cpu) host_free(data_);
    else cuda::free(exec_->cuda_call(), data_);
}

}  // namespace detail

namespace {

// copy's own checks of one side: what the ops' Validator checks, less the rules of an op call
// (one dtype and device, int32 sizes). Returns the element count.
int64_t checked_elements(const char *arg, const TensorView &t) {
    auto fail = [&](const std::string &what) {
        throw Error(std::string("copy: argument '") + arg + "' " + what);
    };
    if (!is_float(t.dtype) && t.dtype != DType::i32 && t.dtype != DType::i64) {
        fail("has dtype value " + std::to_string(static_cast<int>(t.dtype)) +
             ": expected float32, float16, bfloat16, int32 or int64");
    }
    if (t.device != Device::cpu && t.device != Device::cuda) {
        fail("has device value " + std::to_string(static_cast<int>(t.device)) + ": expected cpu or cuda");
    }
    int64_t bytes = static_cast<int64_t>(size_of(t.dtype));
    for (int64_t d : t.shape) {
        if (d < 0) fail("has a dimension of " + std::to_string(d) + ": expected no negative dimension");
        if (__builtin_mul_overflow(bytes, d, &bytes)) {
            fail("has shape " + detail::shape_string(t.shape) + ": expected at most " +
                 std::to_string(INT64_MAX) + " bytes");
        }
    }
    const int64_t elements = bytes / static_cast<int64_t>(size_of(t.dtype));
    if (elements > 0 && t.data == nullptr) {
        fail("has a null data pointer: expected data for " + std::to_string(elements) + " elements");
    }
    return elements;
}

}  // namespace

void copy(const TensorView &src, const TensorView &dst) {
    const int64_t elements = checked_elements("src", src);
    if (src.dtype != dst.dtype || elements != checked_elements("dst", dst)) {
        throw Error(std::string("copy: argument 'dst' has ") + to_string(dst.dtype) + " " +
                    detail::shape_string(dst.shape) + ": expected " + to_string(src.dtype) +
                    " with the " + std::to_string(src.num_elements()) + " elements of 'src'");
    }
    if (elements == 0) return;
    if (src.device == Device::cpu && dst.device == Device::cpu) {
        const auto *s = static_cast<const std::byte *>(src.data), *d = static_cast<const std::byte *>(dst.data);
        if (s == d) return;
        if (s < d + src.num_bytes() && d < s + src.num_bytes()) {
            throw Error("copy: argument 'dst' overlaps 'src': expected separate memory");
        }
        std::memcpy(dst.data, src.data, src.num_bytes());
        return;
    }
    const void *on_device = src.device == Device::cuda ? src.data : dst.data;
    detail::Exec exec(Device::cuda, on_device);
    exec.copy_bytes(dst.data, src.data, static_cast<int64_t>(src.num_bytes()));
    detail::cuda::synchronize(exec.cuda_call());
}

}  // namespace blocklstm
