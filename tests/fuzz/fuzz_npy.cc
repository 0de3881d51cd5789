// libFuzzer target: the .npy reader (tools/npy.cpp) on arbitrary bytes. A file it accepts must
// hold exactly the bytes its shape says, and re-encode to a file that parses to the same array.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "npy.h"

namespace npy = blocklstm::npy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    npy::Array a;
    try {
        a = npy::parse(data, size, "input");
    } catch (const npy::Error &) {
        return 0;  // rejected, as it should be
    }
    if (a.data.size() != static_cast<std::size_t>(a.num_elements()) * npy::itemsize_of(a.type)) std::abort();
    const std::string again = npy::encode(a.type, a.shape, a.data.data(), a.data.size());
    const npy::Array b =
        npy::parse(reinterpret_cast<const unsigned char *>(again.data()), again.size(), "re-encoded");
    if (b.type != a.type || b.shape != a.shape || b.data != a.data) std::abort();
    return 0;
}
