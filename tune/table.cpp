#include "tune/table.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "schedules/tuning.h"

namespace blocklstm::tune {

namespace {

template <typename Tuning>
Table to_table(const Tuning &t, const std::vector<schedules::Knob<Tuning>> &list, bool gpu) {
    Table out{t.table, gpu, {}};
    for (const auto &k : list) out.knobs.emplace_back(k.name, t.*k.field);
    return out;
}

// `text` inside a JSON string: quotes, backslashes and control characters escaped.
std::string json_text(const std::string &text) {
    std::string out;
    for (const char c : text) {
        if (c == '"' || c == '\\') out += std::string("\\") + c;
        else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        else out += c;
    }
    return out;
}

std::string today() {
    const std::time_t now = std::time(nullptr);
    char buf[16];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", std::localtime(&now));
    return buf;
}

}  // namespace

std::string knob_string(const Table &t) {
    std::string s;
    for (const auto &[k, v] : t.knobs) s += (s.empty() ? "" : ",") + k + ":" + std::to_string(v);
    return s;
}

Table parse_table(bool gpu, const std::string &table, const std::string &knobs) {
    if (gpu) return to_table(schedules::parse_cuda_tuning(table, knobs), schedules::cuda_knobs(), true);
    return to_table(schedules::parse_cpu_tuning(table, knobs), schedules::cpu_knobs(), false);
}
std::string rule_broken(const Table &t) {
    try {
        parse_table(t.gpu, t.table, knob_string(t));
        return "";
    } catch (const std::invalid_argument &e) {
        return e.what();
    }
}

// The knobs of a table file (its "knobs" object of integers) and its name.
Table read_table_file(const std::string &path, bool gpu) {
    std::ifstream in(path);
    if (!in) throw std::invalid_argument("--from: cannot read '" + path + "'");
    std::stringstream text;
    text << in.rdbuf();
    const std::string json = text.str();
    auto fail = [&](const std::string &what) { throw std::invalid_argument("--from: '" + path + "' " + what); };
    // By hand: a regex over the whole file recurses once per character (and crashed on 40 KB).
    const size_t first = json.find_first_not_of(" \t\r\n"), last = json.find_last_not_of(" \t\r\n");
    if (first == std::string::npos || json[first] != '{' || json[last] != '}')
        fail("is not one JSON object (expected {...} as blocklstm tune writes it)");
    std::smatch m;
    if (!std::regex_search(json, m, std::regex("\"table\"\\s*:\\s*\"([^\"]+)\"")))
        fail("has no \"table\" name (expected e.g. \"table\": \"x86-64-avx2\")");
    const std::string table = m[1];
    if (!std::regex_search(json, m, std::regex("\"knobs\"\\s*:\\s*\\{([^{}]*)\\}")))
        fail("has no \"knobs\" object of \"name\": value members");
    // Each member as "name": value, the value as written: the knobs' own check then says what is
    // wrong with it (a fraction, a string, true).
    const std::string body = m[1];
    std::string knobs;
    std::stringstream members(body);
    for (std::string member; std::getline(members, member, ',');) {
        if (!std::regex_match(member, m, std::regex("\\s*\"(\\w+)\"\\s*:\\s*(\\S+)\\s*")))
            fail("has a knobs member '" + member + "': expected \"name\": integer");
        knobs += (knobs.empty() ? "" : ",") + m[1].str() + ":" + m[2].str();
    }
    return parse_table(gpu, table, knobs);
}

void write_table_file(const std::string &path, const Table &t, bool measured, const std::string &tuned_on) {
    std::ostringstream j;
    j << "{\n  \"table\": \"" << t.table << "\",\n  \"measured\": " << (measured ? "true" : "false") << ",\n";
    j << "  \"tuned_on\": \"" << json_text(tuned_on) << "\",\n";
    j << "  \"date\": \"" << today() << "\",\n";
    j << "  \"knobs\": {\n";
    for (size_t k = 0; k < t.knobs.size(); ++k)
        j << "    \"" << t.knobs[k].first << "\": " << t.knobs[k].second << (k + 1 < t.knobs.size() ? ",\n" : "\n");
    j << "  }\n}\n";
    const std::string tmp = path + ".tmp";
    std::ofstream file(tmp);
    file << j.str();
    file.close();
    if (!file) {
        std::filesystem::remove(tmp);
        throw std::runtime_error("--out: cannot write " + tmp + " (" + std::strerror(errno) + "); " + path + " is unchanged");
    }
    std::filesystem::rename(tmp, path);
}

// Fails at once, not minutes into a search, when `path` cannot be written; leaves it as it was.
void check_writable(const std::string &option, const std::string &path) {
    std::error_code ec;
    const bool existed = std::filesystem::exists(path, ec);
    std::ofstream file(path, std::ios::app);
    const int error = errno;
    const bool ok = static_cast<bool>(file);
    file.close();
    if (!existed) std::filesystem::remove(path, ec);
    if (!ok) throw std::invalid_argument(option + ": cannot write " + path + " (" + std::strerror(error) + ")");
}

}  // namespace blocklstm::tune
