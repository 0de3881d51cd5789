#include "tune/search.h"

#include <algorithm>

#include <fmt/format.h>

#include "schedules/tuning.h"

namespace blocklstm::tune {

namespace {

template <typename Tuning>
std::vector<std::string> by_priority(const std::vector<schedules::Knob<Tuning>> &knobs) {
    std::vector<const schedules::Knob<Tuning> *> in_order;
    for (const auto &k : knobs)
        if (k.priority > 0) in_order.push_back(&k);
    std::stable_sort(in_order.begin(), in_order.end(), [](auto *a, auto *b) { return a->priority < b->priority; });
    std::vector<std::string> names;
    for (const auto *k : in_order) names.push_back(k->name);
    return names;
}

}  // namespace

// The knob rows' (schedules/tuning.h).
std::vector<int> candidates(const std::string &knob) {
    for (const auto &k : schedules::cpu_knobs())
        if (knob == k.name) return k.candidates;
    for (const auto &k : schedules::cuda_knobs())
        if (knob == k.name) return k.candidates;
    return {};
}

const std::vector<std::string> &descent_order(bool gpu) {
    static const std::vector<std::string> cpu = by_priority(schedules::cpu_knobs());
    static const std::vector<std::string> gpu_order = by_priority(schedules::cuda_knobs());
    return gpu ? gpu_order : cpu;
}

std::vector<std::pair<Table, std::string>> grid(const Table &best, const Table &base, const SearchHooks &hooks) {
    std::vector<std::pair<Table, std::string>> out;
    auto add = [&](const Table &t, const std::string &label) { out.emplace_back(t, label); };
    if (!best.gpu) {
        if (!hooks.reads("gemm_tile_vectors")) return out;
        const int registers = best.get("vector_floats") >= 16 ? 32 : 16;
        for (int vectors : candidates("gemm_tile_vectors")) {
            // The most rows the registers hold, two fewer, and 16 accumulators: one FMA port's
            // latency needs fewer than two ports' (AMD Zen 4 ran its batched products 1.2x
            // faster on 8 x 2 vectors than on 12 x 2; a step of -1 from 12 never gets there).
            const int most = (registers - vectors - 1) / vectors;
            std::vector<int> rows_tried{most, most - 2};
            if (16 / vectors < most - 2) rows_tried.push_back(16 / vectors);
            for (int rows : rows_tried) {
                if (rows < 1) continue;
                Table t = best;
                t.set("gemm_tile_vectors", vectors);
                t.set("gemm_tile_rows", rows);
                t.set("gemm_step_tile_rows", std::min(rows, base.get("gemm_step_tile_rows")));
                add(t, fmt::format("tile {} x {} vectors", rows, vectors));
            }
        }
        return out;
    }
    for (const std::string which : {"step", "batched"}) {
        if (!hooks.reads(which + "_cols_per_thread")) continue;
        for (int cols : {1, 2, 4})
            for (int rows : {1, 2, 4, 8}) {
                Table t = best;
                t.set(which + "_cols_per_thread", cols);
                t.set(which + "_rows_per_thread", rows);
                add(t, fmt::format("{} thread tile {} x {}", which, cols, rows));
            }
    }
    return out;
}

Table search(const Table &base, const SearchHooks &hooks) {
    Table best = base;
    auto consider = [&](const Table &t, const std::string &label) {
        if (hooks.stop() || !hooks.consider(t, label)) return false;
        best = t;
        return true;
    };
    for (size_t i = 0; !hooks.stop(); ++i) {
        const auto cells = grid(best, base, hooks);  // the same count every time, from the current best
        if (i >= cells.size()) break;
        const auto &[t, label] = cells[i];
        if (knob_string(t) != knob_string(best)) consider(t, label);
    }
    for (bool moved = true; moved && !hooks.stop();) {
        moved = false;
        for (const std::string &name : descent_order(best.gpu)) {
            if (!hooks.reads(name)) continue;
            const std::vector<int> values = candidates(name);
            for (int step : {+1, -1}) {
                while (!hooks.stop()) {
                    const int now = best.get(name);
                    auto at = std::lower_bound(values.begin(), values.end(), now);
                    const long next = (at - values.begin()) + (at != values.end() && *at == now ? step : (step > 0 ? 0 : -1));
                    if (next < 0 || next >= long(values.size())) break;
                    Table t = best;
                    t.set(name, values[next]);
                    if (!consider(t, fmt::format("{} {} -> {}", name, now, values[next]))) break;
                    moved = true;
                }
            }
        }
    }
    return best;
}

}  // namespace blocklstm::tune
