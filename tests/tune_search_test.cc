// The tuner's search (tune/search.h) on costs of the test's own: it finds the best table a
// separable cost has among the knob rows' candidates, moves no knob that no tuned family reads,
// stops when told, and keeps the step tiles within the base table's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "schedules/tuning.h"
#include "tune/search.h"

namespace blocklstm::tune {
namespace {

// An AVX2 table (8-float vectors), every knob given.
Table avx2_table() {
    return parse_table(false, "x86-64-avx2",
                       "vector_floats:8,gemm_tile_rows:6,gemm_tile_vectors:2,gemm_step_tile_rows:4,gemm_k_block:512,"
                       "gemm_step_k_block:2048,gemm_row_block_tiles:16,gemm_column_chunks:2,gemm_columns_inner:0,"
                       "column_sum_vectors:8");
}

// A cost with one best value per knob, the sum of each knob's distance from it (in candidate
// steps), and the tuner's rule: a candidate is kept when it beats the best by 1 % or more, and
// never when it breaks a table rule.
struct SeparableCost {
    std::map<std::string, int> best_values;
    int considered = 0;
    double operator()(const Table &t) const {
        double c = 1.0;
        for (const auto &[name, want] : best_values) {
            const std::vector<int> values = candidates(name);
            const auto at = [&](int v) { return double(std::find(values.begin(), values.end(), v) - values.begin()); };
            c += std::abs(at(t.get(name)) - at(want));
        }
        return c;
    }
};

SearchHooks hooks_for(SeparableCost &cost, Table &best, std::set<std::string> unread = {}) {
    return {.reads = [unread](const std::string &knob) { return !unread.count(knob); },
            .consider =
                [&cost, &best](const Table &t, const std::string &) {
                    ++cost.considered;
                    if (!rule_broken(t).empty() || !(cost(t) < 0.99 * cost(best))) return false;
                    best = t;
                    return true;
                },
            .stop = [] { return false; }};
}

TEST(TuneSearch, FindsTheBestOfASeparableCost) {
    const Table base = avx2_table();
    SeparableCost cost{{{"gemm_k_block", 256}, {"gemm_tile_rows", 5}, {"gemm_columns_inner", 1},
                        {"gemm_step_k_block", 1024}, {"column_sum_vectors", 16}}};
    Table best = base;
    const Table found = search(base, hooks_for(cost, best));
    EXPECT_EQ(knob_string(found), knob_string(best));
    for (const auto &[name, want] : cost.best_values) EXPECT_EQ(found.get(name), want) << name;
    EXPECT_EQ(cost(found), 1.0);
    EXPECT_TRUE(rule_broken(found).empty()) << rule_broken(found);
    EXPECT_EQ(found.get("vector_floats"), 8);  // the target's: never searched
}

TEST(TuneSearch, MovesNoKnobNoFamilyReads) {
    const Table base = avx2_table();
    SeparableCost cost{{{"gemm_k_block", 256}, {"gemm_step_k_block", 1024}}};
    Table best = base;
    const Table found = search(base, hooks_for(cost, best, {"gemm_k_block"}));
    EXPECT_EQ(found.get("gemm_k_block"), 512);   // unread: as in the base
    EXPECT_EQ(found.get("gemm_step_k_block"), 1024);
}

TEST(TuneSearch, StopsWhenTold) {
    const Table base = avx2_table();
    SeparableCost cost{{{"gemm_k_block", 128}, {"gemm_step_k_block", 256}, {"column_sum_vectors", 32}}};
    Table best = base;
    SearchHooks hooks = hooks_for(cost, best);
    hooks.stop = [&] { return cost.considered >= 3; };
    search(base, hooks);
    EXPECT_EQ(cost.considered, 3);
}

// The grid: per tile width, the most rows the 16 AVX2 registers hold and two fewer (16
// accumulators are more than either here), the step tiles' rows never above the base's.
TEST(TuneSearch, GridOfRegisterTiles) {
    const Table base = avx2_table();
    SeparableCost cost{{}};
    Table best = base;
    const auto cells = grid(base, base, hooks_for(cost, best));
    std::set<std::pair<int, int>> tiles;
    for (const auto &[t, label] : cells) {
        tiles.insert({t.get("gemm_tile_rows"), t.get("gemm_tile_vectors")});
        EXPECT_LE(t.get("gemm_step_tile_rows"), base.get("gemm_step_tile_rows")) << label;
    }
    // vectors 1: (16 - 2) / 1 = 14 rows, 12; 2: 6, 4; 4: 2, 0 (none)
    EXPECT_EQ(tiles, (std::set<std::pair<int, int>>{{14, 1}, {12, 1}, {6, 2}, {4, 2}, {2, 4}}));
    EXPECT_TRUE(grid(base, base, hooks_for(cost, best, {"gemm_tile_vectors"})).empty());
}

}  // namespace
}  // namespace blocklstm::tune
