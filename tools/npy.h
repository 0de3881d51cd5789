// NumPy .npy files (format versions 1.0, 2.0, 3.0): a strict, bounds-checked reader and a
// version-1.0 writer. Only what the blocklstm tool needs: dense C-order little-endian arrays of a
// handful of scalar types. Every error is an npy::Error whose message names the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace blocklstm::npy {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Element types the tool understands. `other` is never returned by read(): an unsupported
// descr is an error there.
// .npy has no bfloat16: ml_dtypes (np.save of an ml_dtypes.bfloat16 array) writes it as '<V2', two
// raw bytes, and np.load(...).view(ml_dtypes.bfloat16) reads it back; bf16 is that layout.
enum class Type { f16, f32, f64, i32, i64, bf16 };

const char *descr_of(Type type);       // "<f2", "<f4", "<f8", "<i4", "<i8", "<V2"
const char *numpy_name_of(Type type);  // "float16", "float32", ..., "bfloat16"
std::size_t itemsize_of(Type type);

struct Array {
    Type type = Type::f32;
    std::vector<int64_t> shape;       // empty = 0-d
    std::vector<unsigned char> data;  // little-endian, C order, num_elements * itemsize bytes

    int64_t num_elements() const;  // product of shape (1 for 0-d)
};

// The parsed header of a .npy file (exposed for tests).
struct Header {
    int major = 1, minor = 0;
    std::string descr;
    bool fortran_order = false;
    std::vector<int64_t> shape;
    std::size_t data_offset = 0;  // bytes before the data
};

// Parses and validates everything up to the data: magic, version, header length (against the
// buffer size), the header dict. `what` names the file in messages.
Header parse_header(const unsigned char *bytes, std::size_t size, const std::string &what);

// Reads a whole file. Rejects: bad magic, unknown version, header past EOF, malformed dict,
// unsupported / big-endian / structured dtypes, fortran_order, negative or overflowing shapes,
// data shorter or longer than the shape says. Messages are "<path>: <problem>".
Array read(const std::string &path);
// The same on an in-memory image.
Array parse(const unsigned char *bytes, std::size_t size, const std::string &what);

// The bytes of a .npy file (version 1.0 when the header fits, else 2.0; header padded with spaces
// to a multiple of 64 bytes and terminated by '\n').
std::string encode(Type type, const std::vector<int64_t> &shape, const void *data,
                   std::size_t num_bytes);
// Same with a free-form descr / fortran flag, for writing deliberately odd files in tests.
std::string encode_raw(const std::string &descr, bool fortran_order,
                       const std::vector<int64_t> &shape, const void *data, std::size_t num_bytes);

// Writes encode(...) to `path` (throws npy::Error naming the path on I/O failure).
void write(const std::string &path, Type type, const std::vector<int64_t> &shape,
           const void *data, std::size_t num_bytes);
void write(const std::string &path, const Array &array);
void write_bytes(const std::string &path, const std::string &bytes);

// "(2, 3)" style rendering of a shape.
std::string shape_to_string(const std::vector<int64_t> &shape);

}  // namespace blocklstm::npy
