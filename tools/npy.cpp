#include "npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <sys/stat.h>

namespace blocklstm::npy {

namespace {

constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr std::size_t kAlign = 64;

[[noreturn]] void fail(const std::string &what, const std::string &message) {
    throw Error(what + ": " + message);
}

// Multiplies non-negative a and b; false on overflow of int64.
bool mul_overflows(int64_t a, int64_t b, int64_t *result) {
    if (a < 0 || b < 0) return true;
    if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return true;
    *result = a * b;
    return false;
}

// A minimal parser for the Python dict literal of an .npy header.
class HeaderParser {
public:
    HeaderParser(const std::string &text, const std::string &what) : s_(text), what_(what) {}

    void parse(Header *h) {
        bool have_descr = false, have_fortran = false, have_shape = false;
        skip_ws();
        expect('{', "the header is not a dict (expected '{')");
        skip_ws();
        while (!at('}')) {
            const std::string key = parse_string("a dict key");
            skip_ws();
            expect(':', "expected ':' after key '" + key + "'");
            skip_ws();
            if (key == "descr") {
                if (have_descr) bad("duplicate key 'descr'");
                have_descr = true;
                if (at('[') || at('('))
                    bad_value("structured dtypes (descr is a list) are not supported");
                if (!at('\'') && !at('"')) bad("'descr' must be a string");
                h->descr = parse_string("the 'descr' value");
            } else if (key == "fortran_order") {
                if (have_fortran) bad("duplicate key 'fortran_order'");
                have_fortran = true;
                h->fortran_order = parse_bool();
            } else if (key == "shape") {
                if (have_shape) bad("duplicate key 'shape'");
                have_shape = true;
                h->shape = parse_shape();
            } else {
                bad("unexpected key '" + key + "' (expected 'descr', 'fortran_order', 'shape')");
            }
            skip_ws();
            if (at(',')) {
                ++pos_;
                skip_ws();
            } else if (!at('}')) {
                bad("expected ',' or '}' after the value of '" + key + "'");
            }
        }
        ++pos_;  // '}'
        skip_ws();
        if (pos_ != s_.size()) bad("unexpected text after the closing '}'");
        if (!have_descr) bad("missing key 'descr'");
        if (!have_fortran) bad("missing key 'fortran_order'");
        if (!have_shape) bad("missing key 'shape'");
    }

private:
    [[noreturn]] void bad(const std::string &message) {
        fail(what_, "malformed .npy header: " + message);
    }
    [[noreturn]] void bad_value(const std::string &message) { fail(what_, message); }

    bool at(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
    void skip_ws() {
        while (pos_ < s_.size() &&
               (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
            ++pos_;
    }
    void expect(char c, const std::string &message) {
        if (!at(c)) bad(message);
        ++pos_;
    }
    std::string parse_string(const std::string &what) {
        if (!at('\'') && !at('"')) bad("expected a quoted string for " + what);
        const char quote = s_[pos_++];
        std::string out;
        while (pos_ < s_.size() && s_[pos_] != quote) {
            if (s_[pos_] == '\\' || s_[pos_] == '\n') bad("unsupported character in " + what);
            out += s_[pos_++];
        }
        if (pos_ >= s_.size()) bad("unterminated string in " + what);
        ++pos_;
        return out;
    }
    bool parse_bool() {
        if (s_.compare(pos_, 4, "True") == 0) {
            pos_ += 4;
            return true;
        }
        if (s_.compare(pos_, 5, "False") == 0) {
            pos_ += 5;
            return false;
        }
        bad("'fortran_order' must be True or False");
    }
    std::vector<int64_t> parse_shape() {
        std::vector<int64_t> shape;
        expect('(', "'shape' must be a tuple");
        skip_ws();
        bool trailing_comma = false;
        while (!at(')')) {
            if (at('-')) bad_value("negative dimension in 'shape'");
            if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9')
                bad("'shape' must be a tuple of non-negative integers");
            int64_t v = 0;
            while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
                const int d = s_[pos_++] - '0';
                if (v > (std::numeric_limits<int64_t>::max() - d) / 10)
                    bad_value("dimension in 'shape' is too large");
                v = v * 10 + d;
            }
            if (at('L')) ++pos_;  // Python 2 long suffix
            shape.push_back(v);
            if (shape.size() > 64) bad_value("'shape' has more than 64 dimensions");
            skip_ws();
            trailing_comma = false;
            if (at(',')) {
                ++pos_;
                trailing_comma = true;
                skip_ws();
            } else if (!at(')')) {
                bad("expected ',' or ')' in 'shape'");
            }
        }
        ++pos_;  // ')'
        // "(3)" is an int in Python, not a tuple.
        if (shape.size() == 1 && !trailing_comma) bad("'shape' must be a tuple, e.g. (3,)");
        return shape;
    }

    const std::string &s_;
    const std::string &what_;
    std::size_t pos_ = 0;
};

bool type_from_descr(const std::string &descr, Type *type) {
    static const struct {
        const char *code;
        Type type;
    } table[] = {{"f2", Type::f16}, {"f4", Type::f32}, {"f8", Type::f64},
                 {"i4", Type::i32}, {"i8", Type::i64}, {"V2", Type::bf16}};
    if (descr.size() != 3) return false;
    const std::string code = descr.substr(1);
    for (const auto &e : table) {
        if (code == e.code) {
            *type = e.type;
            return true;
        }
    }
    return false;
}

void put_u16(std::string &s, uint32_t v) {
    s += static_cast<char>(v & 0xff);
    s += static_cast<char>((v >> 8) & 0xff);
}
void put_u32(std::string &s, uint32_t v) {
    for (int k = 0; k < 4; ++k) s += static_cast<char>((v >> (8 * k)) & 0xff);
}

}  // namespace

const char *descr_of(Type type) {
    switch (type) {
        case Type::f16: return "<f2";
        case Type::f32: return "<f4";
        case Type::f64: return "<f8";
        case Type::i32: return "<i4";
        case Type::i64: return "<i8";
        case Type::bf16: return "<V2";
    }
    return "?";
}

const char *numpy_name_of(Type type) {
    switch (type) {
        case Type::f16: return "float16";
        case Type::f32: return "float32";
        case Type::f64: return "float64";
        case Type::i32: return "int32";
        case Type::i64: return "int64";
        case Type::bf16: return "bfloat16";
    }
    return "?";
}

std::size_t itemsize_of(Type type) {
    switch (type) {
        case Type::f16: return 2;
        case Type::f32: return 4;
        case Type::f64: return 8;
        case Type::i32: return 4;
        case Type::i64: return 8;
        case Type::bf16: return 2;
    }
    return 0;
}

int64_t Array::num_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string shape_to_string(const std::vector<int64_t> &shape) {
    std::string s = "(";
    for (std::size_t k = 0; k < shape.size(); ++k) {
        if (k) s += ", ";
        s += std::to_string(shape[k]);
    }
    if (shape.size() == 1) s += ",";
    return s + ")";
}

Header parse_header(const unsigned char *bytes, std::size_t size, const std::string &what) {
    Header h;
    if (size < 8 || std::memcmp(bytes, kMagic, sizeof kMagic) != 0)
        fail(what, "not a .npy file (bad magic string)");
    h.major = bytes[6];
    h.minor = bytes[7];
    if (!((h.major == 1 || h.major == 2 || h.major == 3) && h.minor == 0))
        fail(what, "unsupported .npy format version " + std::to_string(h.major) + "." +
                       std::to_string(h.minor) + " (supported: 1.0, 2.0, 3.0)");
    const std::size_t prefix = h.major == 1 ? 10 : 12;
    if (size < prefix) fail(what, "truncated .npy file (incomplete header length field)");
    std::size_t header_len = 0;
    if (h.major == 1) {
        header_len = static_cast<std::size_t>(bytes[8]) | static_cast<std::size_t>(bytes[9]) << 8;
    } else {
        for (int k = 0; k < 4; ++k) header_len |= static_cast<std::size_t>(bytes[8 + k]) << (8 * k);
    }
    if (header_len > size - prefix)
        fail(what, "truncated .npy file (header length " + std::to_string(header_len) +
                       " runs past the end of the file, " + std::to_string(size) + " bytes)");
    h.data_offset = prefix + header_len;
    const std::string text(reinterpret_cast<const char *>(bytes + prefix), header_len);
    for (unsigned char c : text)
        if (c == 0 || c >= 0x80)
            fail(what, "malformed .npy header: unexpected non-ASCII byte");
    HeaderParser(text, what).parse(&h);
    return h;
}

Array parse(const unsigned char *bytes, std::size_t size, const std::string &what) {
    const Header h = parse_header(bytes, size, what);
    Array a;
    if (!type_from_descr(h.descr, &a.type))
        fail(what, "unsupported dtype '" + h.descr + "' (supported: <f2, <f4, <V2 (bfloat16, as ml_dtypes writes it), <i4, <i8)");
    if (h.descr[0] == '>')
        fail(what, "big-endian arrays ('" + h.descr + "') are not supported; use little-endian");
    if (h.descr[0] != '<' && h.descr[0] != '=' && !(h.descr[0] == '|' && a.type == Type::bf16))
        fail(what, "unsupported dtype '" + h.descr + "'");
    if (h.fortran_order) fail(what, "fortran_order arrays are not supported; save in C order");
    a.shape = h.shape;
    int64_t n = 1;
    for (int64_t d : a.shape)
        if (mul_overflows(n, d, &n)) fail(what, "shape " + shape_to_string(a.shape) + " is too large");
    int64_t nbytes = 0;
    if (mul_overflows(n, static_cast<int64_t>(itemsize_of(a.type)), &nbytes) ||
        static_cast<uint64_t>(nbytes) > std::numeric_limits<std::size_t>::max())
        fail(what, "shape " + shape_to_string(a.shape) + " is too large");
    const std::size_t available = size - h.data_offset;
    if (static_cast<std::size_t>(nbytes) > available)
        fail(what, "truncated .npy file: shape " + shape_to_string(a.shape) + " of " +
                       numpy_name_of(a.type) + " needs " + std::to_string(nbytes) +
                       " data bytes, the file has " + std::to_string(available));
    if (static_cast<std::size_t>(nbytes) < available)
        fail(what, std::to_string(available - nbytes) +
                       " unexpected trailing bytes after the array data");
    a.data.assign(bytes + h.data_offset, bytes + h.data_offset + nbytes);
    return a;
}

Array read(const std::string &path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        const int err = errno;
        fail(path, err == ENOENT ? "no such file" : std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
    std::unique_ptr<FILE, int (*)(FILE *)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!f) fail(path, std::strerror(errno));
    std::vector<unsigned char> bytes;
    unsigned char buf[1 << 16];
    std::size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, f.get())) > 0) bytes.insert(bytes.end(), buf, buf + got);
    if (std::ferror(f.get())) fail(path, "read error");
    return parse(bytes.data(), bytes.size(), path);
}

std::string encode_raw(const std::string &descr, bool fortran_order,
                       const std::vector<int64_t> &shape, const void *data, std::size_t num_bytes) {
    std::string dict = "{'descr': '" + descr + "', 'fortran_order': " +
                       (fortran_order ? "True" : "False") + ", 'shape': " + shape_to_string(shape) +
                       ", }";
    std::size_t prefix = 10;
    std::size_t total = prefix + dict.size() + 1;  // + '\n'
    if (total + (kAlign - total % kAlign) % kAlign - prefix > 65535) prefix = 12;  // version 2.0
    total = prefix + dict.size() + 1;
    dict.append((kAlign - total % kAlign) % kAlign, ' ');
    dict += '\n';
    std::string out(reinterpret_cast<const char *>(kMagic), sizeof kMagic);
    out += static_cast<char>(prefix == 10 ? 1 : 2);
    out += '\0';
    if (prefix == 10)
        put_u16(out, static_cast<uint32_t>(dict.size()));
    else
        put_u32(out, static_cast<uint32_t>(dict.size()));
    out += dict;
    if (num_bytes) out.append(static_cast<const char *>(data), num_bytes);
    return out;
}

std::string encode(Type type, const std::vector<int64_t> &shape, const void *data,
                   std::size_t num_bytes) {
    return encode_raw(descr_of(type), false, shape, data, num_bytes);
}

void write_bytes(const std::string &path, const std::string &bytes) {
    std::unique_ptr<FILE, int (*)(FILE *)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
    if (!f) fail(path, std::string("cannot create: ") + std::strerror(errno));
    if (std::fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size())
        fail(path, std::string("write failed: ") + std::strerror(errno));
    if (std::fclose(f.release()) != 0) fail(path, std::string("write failed: ") + std::strerror(errno));
}

void write(const std::string &path, Type type, const std::vector<int64_t> &shape,
           const void *data, std::size_t num_bytes) {
    write_bytes(path, encode(type, shape, data, num_bytes));
}

void write(const std::string &path, const Array &array) {
    write(path, array.type, array.shape, array.data.data(), array.data.size());
}

}  // namespace blocklstm::npy
