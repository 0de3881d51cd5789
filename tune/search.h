// The search over a tuning table's knobs, free of kernels, clocks and files: what it tries comes
// from the knob rows (schedules/tuning.h) and the families being tuned, what it keeps from the
// caller's verdict on each candidate. tests/tune_search_test.cc drives it with costs of its own.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tune/table.h"

namespace blocklstm::tune {

// The values the search tries for a knob, and the knobs of coordinate descent in their order.
std::vector<int> candidates(const std::string &knob);
const std::vector<std::string> &descent_order(bool gpu);

struct SearchHooks {
    // Whether a family being tuned reads the knob: the others leave every kernel unchanged, so
    // the search does not move them.
    std::function<bool(const std::string &knob)> reads;
    // The verdict on a candidate made from the best so far: true keeps it as the new best.
    std::function<bool(const Table &candidate, const std::string &label)> consider;
    // The budget is spent (or the run interrupted): the search stops at once.
    std::function<bool()> stop;
};

// The first, coarse stage: on the CPU each register-tile width with the most rows the registers
// hold, two fewer, and 16 accumulators; on the GPU the products' thread tiles (accumulators per
// thread, columns x rows), the step's and, when a batched family is tuned, the batched one's.
// Made from `best`; the step tiles' rows stay within the base table's.
std::vector<std::pair<Table, std::string>> grid(const Table &best, const Table &base, const SearchHooks &hooks);

// The search from `base`: the grid, each candidate made from the best so far (a move kept earlier
// stays in the later candidates), then coordinate descent: each knob's neighbouring values around
// the best, one knob at a time, following a direction while it gains, passes until one changes
// nothing. Returns the best table.
Table search(const Table &base, const SearchHooks &hooks);

}  // namespace blocklstm::tune
