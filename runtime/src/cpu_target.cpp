// The CPU targets of the kernels (the generated cpu_targets.inc, best first) and which one an op
// call runs. The runtime chooses between the per-target functions of every CPU kernel itself, once
// per call (Exec), rather than through Halide's multi-target wrappers, which choose once per
// process and keep the choice: so a pin takes effect at the next call, and one test process can
// run every target this CPU supports.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <utility>

#include "runtime/src/exec.h"
#include "runtime/src/kernel_overrides.h"
#include "runtime/src/validate.h"
#include "runtime/src/x86_features.h"
#include "schedules/tuning.h"

#include "cpu_targets.inc"  // generated: BLOCKLSTM_CPU_TARGET_SPECS

namespace blocklstm {
namespace detail {
namespace {

struct CpuTargetSpec {
    const char *name, *halide_target, *tuning_table, *tuning, *tuned_on;
    bool check_only;
    bool bf16_dot_products;
    bool amx_products;
    const char *other_dtypes_as;
    std::vector<X86Models> cpus;  // the CPUs the table is for (none: any CPU)
    std::vector<std::pair<int, const char *>> features;  // Halide feature, its name
};

const X86State &this_cpu() {
    static const X86State state = read_x86_state();
    return state;
}

// "AuthenticAMD family 0x19 models 0x10-0x1f, 0x60-0x7f" ("" for any CPU).
std::string cpu_description(const std::vector<X86Models> &cpus) {
    std::string out;
    for (std::size_t k = 0; k < cpus.size(); ++k) {
        const X86Models &m = cpus[k];
        const bool same_family = k > 0 && std::string(m.vendor) == cpus[k - 1].vendor && m.family == cpus[k - 1].family;
        char text[64];
        if (same_family) {
            std::snprintf(text, sizeof text, ", 0x%x-0x%x", unsigned(m.first_model), unsigned(m.last_model));
        } else {
            std::snprintf(text, sizeof text, "%s%s family 0x%x models 0x%x-0x%x", k > 0 ? "; " : "", m.vendor,
                          unsigned(m.family), unsigned(m.first_model), unsigned(m.last_model));
        }
        out += text;
    }
    return out;
}

// What this CPU lacks of one Halide feature: "" if nothing, else the feature's name with the
// missing parts. The runtime's own reading of cpuid and XCR0 decides (x86_features.h says why
// Halide's is not enough); Halide's answer only for a feature that reading does not describe.
std::string cpu_lacks(int bit, const char *feature) {
    if (const auto missing = x86_missing(this_cpu(), feature)) {
        std::string parts;
        for (const std::string &m : *missing) parts += (parts.empty() ? "" : ", ") + m;
        return parts.empty() ? "" : std::string(feature) + " (" + parts + ")";
    }
    uint64_t words[(halide_target_feature_end + 63) / 64] = {};
    words[bit / 64] |= uint64_t(1) << (bit % 64);
    return halide_default_can_use_target_features(sizeof(words) / sizeof(words[0]), words) ? "" : feature;
}

// Whether a target's code may hold AMX instructions (Halide's avx512_sapphirerapids).
bool uses_amx(const std::vector<std::pair<int, const char *>> &features) {
    for (const auto &[bit, name] : features)
        if (bit == halide_target_feature_avx512_sapphirerapids) return true;
    return false;
}

// Each compiled target and what this CPU makes of it.
const std::vector<CpuTarget> &compiled() {
    static const std::vector<CpuTarget> targets = [] {
        const CpuTargetSpec specs[] = {BLOCKLSTM_CPU_TARGET_SPECS};
        std::vector<CpuTarget> out;
        for (const CpuTargetSpec &s : specs) {
            CpuTarget t;
            t.name = s.name, t.halide_target = s.halide_target;
            t.tuning_table = s.tuning_table, t.tuning = s.tuning, t.tuned_on = s.tuned_on;
            t.check_only = s.check_only;
            t.bf16_dot_products = s.bf16_dot_products;
            t.amx_products = s.amx_products;
            t.other_dtypes_as = s.other_dtypes_as;
            t.tuned_for = cpu_description(s.cpus);
            t.tuned_for_this_cpu = x86_is_one_of(this_cpu(), s.cpus);
            for (const auto &[bit, name] : s.features) {
                const std::string lacks = cpu_lacks(bit, name);
                if (!lacks.empty()) t.missing += (t.missing.empty() ? "" : "; ") + lacks;
            }
            // AMX's tile registers are state that Linux hands a process only when asked (else the
            // first tile instruction dies with SIGILL): asked once, for the whole process, here.
            if (t.missing.empty() && uses_amx(s.features) && !x86_amx_tile_state_granted())
                t.missing = "the AMX tile state (Linux refused arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA))";
            t.runs_here = t.missing.empty();
            out.push_back(std::move(t));
        }
        return out;
    }();
    return targets;
}

std::string names(bool only_runnable) {
    std::string s;
    for (const CpuTarget &t : compiled()) {
        if (only_runnable && !t.runs_here) continue;
        s += (s.empty() ? "" : ", ") + t.name + (t.check_only ? " (check)" : "");
    }
    return s.empty() ? "none" : s;
}

std::string what_there_is() {
    return "This library has (best first): " + names(false) + "; this CPU runs: " + names(true);
}

// `pin` is a target's name or Halide target (the target with that instruction set's own table),
// or the leading part of a name up to a '-' or '_' (before an '@'; the table after it in full:
// "avx2@avx512" names avx2-fma-f16c@avx512).
int match(const std::string &pin) {
    const std::vector<CpuTarget> &ts = compiled();
    auto split = [](const std::string &s) {
        const std::size_t at = s.find('@');
        return at == std::string::npos ? std::pair{s, std::string()}
                                       : std::pair{s.substr(0, at), s.substr(at + 1)};
    };
    auto leads = [](const std::string &part, const std::string &whole) {
        return whole.compare(0, part.size(), part) == 0 &&
               (whole.size() == part.size() || whole[part.size()] == '-' || whole[part.size()] == '_');
    };
    std::vector<int> found;
    for (int k = 0; k < static_cast<int>(ts.size()); ++k) {
        // A Halide target string names its instruction set with its own table (no "@<table>").
        if (pin == ts[k].name || (pin == ts[k].halide_target && ts[k].name.find('@') == std::string::npos)) {
            found = {k};
            break;
        }
        const auto [isa, geometry] = split(pin);
        const auto [t_isa, t_geometry] = split(ts[k].name);
        if (!isa.empty() && leads(isa, t_isa) && geometry == t_geometry) found.push_back(k);
    }
    if (found.empty()) {
        throw Error("CPU target '" + pin + "' is unknown. " + what_there_is());
    }
    if (found.size() > 1) {
        std::string which;
        for (int k : found) which += (which.empty() ? "" : ", ") + ts[k].name;
        throw Error("CPU target '" + pin + "' could be any of " + which + "; name one");
    }
    const CpuTarget &t = ts[found[0]];
    if (!t.runs_here) {
        throw Error("CPU target '" + pin + "' (" + t.halide_target + ") needs " + t.missing +
                    ", which this CPU lacks. " + what_there_is());
    }
    return found[0];
}

// The pin: -1 automatic, else an index of compiled(). BLOCKLSTM_CPU_TARGET sets it at the first
// use; an invalid value is reported by every call until set_cpu_target replaces it.
std::atomic<int> pinned{-1};
std::atomic<bool> pin_set_by_call{false};
std::string environment_error;
std::once_flag environment_read;

void read_environment() {
    std::call_once(environment_read, [] {
        const char *env = std::getenv("BLOCKLSTM_CPU_TARGET");
        if (!env || !*env) return;
        try {
            pinned = match(env);
        } catch (const Error &e) {
            environment_error = std::string("BLOCKLSTM_CPU_TARGET=") + env + ": " + e.what();
        }
    });
}

int automatic() {
    static const int best = [] {
        const std::vector<CpuTarget> &ts = compiled();
        for (int k = 0; k < static_cast<int>(ts.size()); ++k) {
            if (ts[k].runs_here && !ts[k].check_only && ts[k].tuned_for_this_cpu) return k;
        }
        return -1;
    }();
    if (best < 0) throw Error("This CPU runs none of the production CPU targets. " + what_there_is());
    return best;
}

}  // namespace

int current_cpu_target() {
    read_environment();
    if (!pin_set_by_call && !environment_error.empty()) throw Error(environment_error);
    const int p = pinned;
    return p >= 0 ? p : automatic();
}

const std::string &cpu_target_name(int index) { return compiled().at(index).name; }
bool cpu_target_bf16_dot_products(int index) { return compiled().at(index).bf16_dot_products; }
bool cpu_target_amx_products(int index) { return compiled().at(index).amx_products; }
int cpu_target_other_dtypes_as(int index) {
    const std::vector<CpuTarget> &ts = compiled();
    const std::string &other = ts.at(index).other_dtypes_as;
    for (int k = 0; k < static_cast<int>(ts.size()) && !other.empty(); ++k)
        if (ts[k].name == other) return k;
    return -1;
}

namespace {

// A knob's value in "name:value,...", or nullopt.
std::optional<int> knob_in(const std::string &knobs, const std::string &knob) {
    const std::string key = knob + ":";
    for (std::size_t at = 0; at < knobs.size();) {
        const std::size_t end = std::min(knobs.find(',', at), knobs.size());
        if (knobs.compare(at, key.size(), key) == 0) return std::stoi(knobs.substr(at + key.size(), end - at - key.size()));
        at = end + 1;
    }
    return std::nullopt;
}

// override_cpu_knobs' (kernel_overrides.h); `any` spares the time loops the lock while there is
// none (always, but in the tuner).
std::mutex knob_override_mutex;
std::string knob_override;
std::atomic<bool> any_knob_override{false};

}  // namespace

void override_cpu_knobs(const std::string &knobs) {
    std::lock_guard<std::mutex> lock(knob_override_mutex);
    knob_override = knobs;
    any_knob_override.store(!knobs.empty(), std::memory_order_release);
}

int cpu_target_knob(int index, const std::string &knob) {
    if (any_knob_override.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> lock(knob_override_mutex);
        if (const std::optional<int> v = knob_in(knob_override, knob)) return *v;
    }
    if (const std::optional<int> v = knob_in(compiled().at(index).tuning, knob)) return *v;  // "name:value,..."
    for (const auto &row : schedules::cpu_knobs())  // left out of the table: its row's fallback
        if (row.name == knob && row.fallback) return *row.fallback;
    throw Error("CPU target " + compiled().at(index).name + ": its tuning table has no knob " + knob);
}

}  // namespace detail

std::vector<CpuTarget> cpu_targets() { return detail::compiled(); }

void set_cpu_target(const std::string &target) {
    detail::read_environment();
    detail::pinned = target.empty() ? -1 : detail::match(target);
    detail::pin_set_by_call = true;
}

std::string cpu_target_in_use() { return detail::cpu_target_name(detail::current_cpu_target()); }

bool cpu_target_pinned() {
    (void)detail::current_cpu_target();  // reports an invalid BLOCKLSTM_CPU_TARGET
    return detail::pinned >= 0;
}

}  // namespace blocklstm
