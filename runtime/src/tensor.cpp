// Tensor views, owning tensors, float16 conversions and Halide buffers over caller memory.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/src/buf.h"
#include "runtime/src/exec.h"
#include "runtime/src/validate.h"

namespace blocklstm {

const char *version() { return BLOCKLSTM_VERSION; }

#define BLOCKLSTM_STR(x) #x
#define BLOCKLSTM_XSTR(x) BLOCKLSTM_STR(x)
const char *halide_version() {
    return BLOCKLSTM_XSTR(HALIDE_VERSION_MAJOR) "." BLOCKLSTM_XSTR(HALIDE_VERSION_MINOR) "." BLOCKLSTM_XSTR(
        HALIDE_VERSION_PATCH);
}

const char *to_string(DType dtype) {
    switch (dtype) {
    case DType::f16: return "float16";
    case DType::f32: return "float32";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::bf16: return "bfloat16";
    }
    return "unknown";
}
const char *short_name(DType dtype) {
    switch (dtype) {
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::bf16: return "bf16";
    }
    return "unknown";
}

DType dtype_named(const std::string &name) {
    for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64})
        if (name == to_string(d) || name == short_name(d)) return d;
    throw Error("dtype '" + name + "': expected float32, float16, bfloat16, int32 or int64 (or f32, f16, bf16, i32, i64)");
}

const char *to_string(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }
std::size_t size_of(DType dtype) {
    return dtype == DType::f16 || dtype == DType::bf16 ? 2 : dtype == DType::i64 ? 8 : 4;
}

int64_t TensorView::num_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape, Device device) {
    view_.dtype = dtype;
    view_.shape = std::move(shape);
    view_.device = device;
    if (!is_float(dtype) && dtype != DType::i32 && dtype != DType::i64) {
        throw Error("Tensor: dtype value " + std::to_string(static_cast<int>(dtype)) +
                    ": expected float32, float16, bfloat16, int32 or int64");
    }
    if (device != Device::cpu && device != Device::cuda) {
        throw Error("Tensor: device value " + std::to_string(static_cast<int>(device)) + ": expected cpu or cuda");
    }
    int64_t bytes_signed = static_cast<int64_t>(size_of(dtype));
    for (int64_t d : view_.shape) {
        if (d < 0) throw Error("Tensor: negative dimension in shape " + detail::shape_string(view_.shape));
        if (__builtin_mul_overflow(bytes_signed, d, &bytes_signed)) {
            throw Error("Tensor: shape " + detail::shape_string(view_.shape) +
                        " has more bytes than a 64-bit size can count");
        }
    }
    const auto bytes = static_cast<std::size_t>(bytes_signed);
    if (device == Device::cuda) {
        storage_ = detail::cuda::allocate_zeroed(bytes);
    } else {
        // 64-byte aligned: a cache line and an AVX-512 vector (new[] gave 16, so every 64-byte load
        // of a row start straddled two lines).
        constexpr std::size_t kAlign = 64;
        const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
        void *p = std::aligned_alloc(kAlign, rounded);
        if (!p) throw Error("Tensor: out of host memory for " + std::to_string(bytes) + " bytes");
        std::memset(p, 0, rounded);
        storage_ = std::shared_ptr<std::byte[]>(static_cast<std::byte *>(p), [](std::byte *q) { std::free(q); });
    }
    view_.data = storage_.get();
}

uint16_t float_to_half(float value) {
    uint32_t x;
    std::memcpy(&x, &value, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) {  // inf or nan
        return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    }
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
    if (abs < 0x38800000u) {  // subnormal half (or zero): round |x| * 2^24 to an integer
        float f;
        const uint32_t a = abs;
        std::memcpy(&f, &a, 4);
        const float scaled = f * 16777216.0f;  // exact
        uint32_t m = static_cast<uint32_t>(scaled);
        const float rest = scaled - static_cast<float>(m);
        if (rest > 0.5f || (rest == 0.5f && (m & 1u))) ++m;
        return static_cast<uint16_t>(sign | m);
    }
    // normal: rebias the exponent, round the mantissa to 10 bits, nearest even
    uint32_t h = ((abs - 0x38000000u) >> 13);
    const uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
}

float half_to_float(uint16_t bits) { return halide_float16_bits_to_float(bits); }

uint16_t float_to_bfloat16(float value) {
    uint32_t x;
    std::memcpy(&x, &value, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN: keep it quiet
    x += 0x7fffu + ((x >> 16) & 1u);  // nearest even; past the largest finite value this carries to inf
    return static_cast<uint16_t>(x >> 16);
}

float bfloat16_to_float(uint16_t bits) {
    const uint32_t x = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

float round_to(DType dtype, float value) {
    if (dtype == DType::f16) return half_to_float(float_to_half(value));
    if (dtype == DType::bf16) return bfloat16_to_float(float_to_bfloat16(value));
    return value;
}

}  // namespace blocklstm

namespace blocklstm::detail {

namespace {
// Halide reads a buffer whose host pointer is null as a bounds query and computes nothing; empty
// tensors may come with a null pointer, so they get this address instead (never dereferenced).
alignas(64) std::byte empty_tensor_storage[64];

uint8_t *host_pointer(void *data) {
    return static_cast<uint8_t *>(data ? data : static_cast<void *>(empty_tensor_storage));
}

halide_type_t halide_type(DType dtype) {
    if (dtype == DType::i32 || dtype == DType::i64) return halide_type_t(halide_type_int, dtype == DType::i32 ? 32 : 64, 1);
    if (dtype == DType::bf16) return halide_type_t(halide_type_bfloat, 16, 1);
    return halide_type_t(halide_type_float, dtype == DType::f16 ? 16 : 32, 1);
}
}  // namespace

void Buf::init(Device device, void *data, DType dtype) {
    device_ = device;
    buf_.type = halide_type(dtype);
    buf_.dim = dims_;
    if (device == Device::cuda) {
        buf_.device_interface = cuda::halide_interface();
    }
    set_data(data);
}

void Buf::set_data(void *data) {
    if (device_ == Device::cuda) {
        buf_.device = reinterpret_cast<uint64_t>(data);  // the allocation of a wrapped pointer
        buf_.host = nullptr;
    } else {
        buf_.host = host_pointer(data);
    }
}

Buf::Buf(Device device, void *data, DType dtype, std::initializer_list<int64_t> shape) {
    init(device, data, dtype);
    buf_.dimensions = static_cast<int32_t>(shape.size());
    int64_t stride = 1;
    const std::vector<int64_t> s(shape);  // outermost first; Halide's dims are innermost first
    for (int i = 0; i < buf_.dimensions; ++i) {
        const int64_t extent = s[s.size() - 1 - i];
        dims_[i] = halide_dimension_t(0, static_cast<int32_t>(extent), static_cast<int32_t>(stride));
        stride *= extent;
    }
}

Buf Buf::matrix(Device device, void *data, DType dtype, int64_t rows, int64_t cols,
                int64_t row_stride) {
    Buf b;
    b.init(device, data, dtype);
    b.buf_.dimensions = 2;
    b.dims_[0] = halide_dimension_t(0, static_cast<int32_t>(cols), 1);
    b.dims_[1] = halide_dimension_t(0, static_cast<int32_t>(rows), static_cast<int32_t>(row_stride));
    return b;
}

Buf Buf::gate_blocks(Device device, void *data, DType dtype, int64_t rows, int64_t cell_size) {
    Buf b;
    b.init(device, data, dtype);
    b.buf_.dimensions = 3;
    const auto h = static_cast<int32_t>(cell_size);
    b.dims_[0] = halide_dimension_t(0, h, 1);
    b.dims_[1] = halide_dimension_t(0, 4, h);
    b.dims_[2] = halide_dimension_t(0, static_cast<int32_t>(rows), 4 * h);
    return b;
}

Buf::Buf(const Buf &other) : device_(other.device_), buf_(other.buf_) {
    std::memcpy(dims_, other.dims_, sizeof(dims_));
    buf_.dim = dims_;
}

Buf &Buf::operator=(const Buf &other) {
    device_ = other.device_;
    buf_ = other.buf_;
    std::memcpy(dims_, other.dims_, sizeof(dims_));
    buf_.dim = dims_;
    return *this;
}

void zero(const Exec &exec, const TensorView &t) {
    if (t.num_elements() > 0) exec.zero_bytes(t.data, static_cast<int64_t>(t.num_bytes()));
}

void zero_steps(const Exec &exec, const TensorView &t, int64_t from) {
    const int64_t step = t.num_elements() / std::max<int64_t>(t.shape[0], 1);
    const int64_t count = (t.shape[0] - from) * step;
    if (count > 0) exec.zero_bytes(offset_bytes(t.data, from * step, t.dtype), count * size_of(t.dtype));
}

float attr_in_dtype(float value, DType dtype) {
    return round_to(dtype, value);
}

}  // namespace blocklstm::detail
