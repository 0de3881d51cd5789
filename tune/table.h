// A tuning table as the tuner holds it (schedules/tuning.h's knobs, by name), and the table files:
// read with --from, written with --out, each knob checked by the generators' own parser.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace blocklstm::tune {

// A tuning table being tuned: its name and every knob's value, in the order of its device's knob
// list (schedules/tuning.h: cpu_knobs or cuda_knobs).
struct Table {
    std::string table;
    bool gpu = false;
    std::vector<std::pair<std::string, int>> knobs;

    int get(const std::string &name) const {
        for (const auto &[k, v] : knobs)
            if (k == name) return v;
        throw std::logic_error("no knob " + name + " in table " + table);
    }
    void set(const std::string &name, int value) {
        for (auto &[k, v] : knobs)
            if (k == name) v = value;
    }
};

// "name:value,..." in the table's order.
std::string knob_string(const Table &t);

// A knob string checked against the knobs' ranges and the rules of the device: the generators'
// own parser, so the tuner never tries what the build would refuse (it throws, saying why).
Table parse_table(bool gpu, const std::string &table, const std::string &knobs);
// The rule a table breaks, or "".
std::string rule_broken(const Table &t);

// The knobs of a table file (its "knobs" object of integers) and its name.
Table read_table_file(const std::string &path, bool gpu);
// Writes the table file at `path`, whole to a temporary file first: a failed write never
// replaces the table there. `tuned_on`: where and how it was tuned.
void write_table_file(const std::string &path, const Table &t, bool measured, const std::string &tuned_on);

// Fails at once, not minutes into a search, when `path` cannot be written; leaves it as it was.
void check_writable(const std::string &option, const std::string &path);

}  // namespace blocklstm::tune
