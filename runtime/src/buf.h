// Halide buffers over caller memory.
#pragma once

#include <blocklstm/blocklstm.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "HalideRuntime.h"

namespace blocklstm::detail {

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
    // The extent of the outermost dimension (a [B,H] step's rows; a matrix's rows), e.g. the
    // rows of a batch still running at a step.
    void set_rows(int64_t rows) { dims_[buf_.dimensions - 1].extent = static_cast<int32_t>(rows); }

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

}  // namespace blocklstm::detail
