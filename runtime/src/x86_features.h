// Which Halide x86 target features this CPU and its operating system support, read from cpuid and
// XCR0 by the runtime itself. Halide 21's own answer (halide_default_can_use_target_features) is
// not enough to choose a kernel: it never asks the OS (XCR0) whether the AVX / AVX-512 registers
// are enabled, it reports AVX-512 for every AMD family 0x1a part (and 0x19 model 0x61) without
// reading a feature bit, so a VM that hides AVX-512 on Zen 5 would run AVX-512 code (SIGILL), and
// it reports no AVX2 where RDRAND is hidden. The kernels are built with LLVM's -mcpu for each
// target (haswell, skylake-avx512, znver4), so their code also holds BMI1's `andn`, which is
// checked too, and avx512_zen4's every AVX-512 extension of -mcpu=znver4 that vector code may use.
// Header-only, so that the tests can check the decoding against fixed register values.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace blocklstm {
namespace detail {

// The registers the decision is made from.
struct X86State {
    uint32_t leaf1_ecx = 0;  // cpuid(1).ecx
    uint32_t leaf7_ebx = 0;  // cpuid(7, 0).ebx; 0 where leaf 7 does not exist
    uint64_t xcr0 = 0;       // XGETBV(0); 0 where the OS has not enabled XSAVE (no OSXSAVE)
    std::string vendor;      // cpuid(0)'s vendor string, e.g. "AuthenticAMD", "GenuineIntel"
    int family = 0;          // cpuid(1)'s family: base + extended (0x19: AMD Zen 3 and Zen 4)
    int model = 0;           // cpuid(1)'s model: base + extended << 4 (families 6 and 0xf on)
    uint32_t leaf7_ecx = 0;    // cpuid(7, 0).ecx
    uint32_t leaf7_1_eax = 0;  // cpuid(7, 1).eax; 0 where sub-leaf 1 does not exist
    uint32_t leaf7_edx = 0;    // cpuid(7, 0).edx
};

// A range of one vendor's CPU models (schedules/cpu_targets.json's "cpus": the CPUs a tuning table
// is for), e.g. {"AuthenticAMD", 0x19, 0x10, 0x1f}: AMD Zen 4's Genoa.
struct X86Models {
    const char *vendor;
    int family, first_model, last_model;
};

// Whether the CPU is one of `models` (an empty list: any CPU).
inline bool x86_is_one_of(const X86State &state, const std::vector<X86Models> &models) {
    for (const X86Models &m : models)
        if (state.vendor == m.vendor && state.family == m.family && state.model >= m.first_model &&
            state.model <= m.last_model)
            return true;
    return models.empty();
}

// One requirement of a feature: a bit of one register, and its name for messages.
struct X86Bit {
    enum Register { leaf1_ecx, leaf7_ebx, xcr0, leaf7_ecx, leaf7_1_eax, leaf7_edx } reg;
    uint64_t mask;  // every bit of the mask must be set
    const char *name;
};

// What each Halide feature's code needs; nullopt for a feature this table does not describe (its
// answer is then Halide's).
inline std::optional<std::vector<X86Bit>> x86_requirements(const std::string &feature) {
    using R = X86Bit;
    const X86Bit avx_state{R::xcr0, 0x6, "OS support for AVX state (XCR0 bits 1-2)"};
    const X86Bit osxsave{R::leaf1_ecx, 1u << 27, "OSXSAVE"};
    const X86Bit avx{R::leaf1_ecx, 1u << 28, "AVX"};
    const X86Bit avx2{R::leaf7_ebx, 1u << 5, "AVX2"};
    const X86Bit bmi1{R::leaf7_ebx, 1u << 3, "BMI1"};
    const X86Bit avx512_f{R::leaf7_ebx, 1u << 16, "AVX-512F"};
    const X86Bit avx512_cd{R::leaf7_ebx, 1u << 28, "AVX-512CD"};
    if (feature == "sse41")
        return std::vector<X86Bit>{{R::leaf1_ecx, 1u << 0, "SSE3"}, {R::leaf1_ecx, 1u << 9, "SSSE3"},
                                   {R::leaf1_ecx, 1u << 19, "SSE4.1"}};
    if (feature == "avx") return std::vector<X86Bit>{osxsave, avx_state, avx};
    if (feature == "avx2") return std::vector<X86Bit>{osxsave, avx_state, avx, avx2, bmi1};  // -mcpu=haswell
    if (feature == "fma") return std::vector<X86Bit>{osxsave, avx_state, {R::leaf1_ecx, 1u << 12, "FMA"}};
    if (feature == "f16c") return std::vector<X86Bit>{osxsave, avx_state, {R::leaf1_ecx, 1u << 29, "F16C"}};
    const X86Bit zmm_state{R::xcr0, 0xe6, "OS support for AVX-512 state (XCR0 bits 1-2, 5-7)"};
    if (feature == "avx512") return std::vector<X86Bit>{osxsave, zmm_state, avx, avx2, avx512_f, avx512_cd};
    const std::vector<X86Bit> skylake{osxsave, zmm_state, avx, avx2, bmi1, avx512_f, avx512_cd,
                                      {R::leaf7_ebx, 1u << 17, "AVX-512DQ"}, {R::leaf7_ebx, 1u << 30, "AVX-512BW"},
                                      {R::leaf7_ebx, 1u << 31, "AVX-512VL"}};
    if (feature == "avx512_skylake") return skylake;  // -mcpu=skylake-avx512
    if (feature == "avx512_zen4" || feature == "avx512_sapphirerapids") {
        // -mcpu=znver4: AMD Zen 4 and 5, Intel Sapphire Rapids on
        std::vector<X86Bit> zen4 = skylake;
        zen4.insert(zen4.end(), {{R::leaf7_ebx, 1u << 21, "AVX-512IFMA"},
                                 {R::leaf7_ecx, 1u << 1, "AVX-512VBMI"},
                                 {R::leaf7_ecx, 1u << 6, "AVX-512VBMI2"},
                                 {R::leaf7_ecx, 1u << 8, "GFNI"},
                                 {R::leaf7_ecx, 1u << 11, "AVX-512VNNI"},
                                 {R::leaf7_ecx, 1u << 12, "AVX-512BITALG"},
                                 {R::leaf7_ecx, 1u << 14, "AVX-512VPOPCNTDQ"},
                                 {R::leaf7_1_eax, 1u << 5, "AVX-512BF16"}});
        if (feature == "avx512_zen4") return zen4;
        // -mcpu=sapphirerapids: Zen 4's and AVX-512FP16, AVX-VNNI and AMX, whose tile state the OS
        // must enable (XCR0 bits 17-18; Linux then hands it out per process: cpu_target.cpp)
        zen4.insert(zen4.end(), {{R::leaf7_edx, 1u << 23, "AVX-512FP16"},
                                 {R::leaf7_1_eax, 1u << 4, "AVX-VNNI"},
                                 {R::leaf7_edx, 1u << 24, "AMX-TILE"},
                                 {R::leaf7_edx, 1u << 22, "AMX-BF16"},
                                 {R::leaf7_edx, 1u << 25, "AMX-INT8"},
                                 {R::xcr0, 0x60000, "OS support for AMX state (XCR0 bits 17-18)"}});
        return zen4;
    }
    return std::nullopt;
}

// The requirements of `feature` that `state` lacks (empty: it runs); nullopt for an unknown feature.
inline std::optional<std::vector<std::string>> x86_missing(const X86State &state, const std::string &feature) {
    const auto needs = x86_requirements(feature);
    if (!needs) return std::nullopt;
    std::vector<std::string> missing;
    for (const X86Bit &b : *needs) {
        const uint64_t value = b.reg == X86Bit::leaf1_ecx   ? state.leaf1_ecx
                               : b.reg == X86Bit::leaf7_ebx ? state.leaf7_ebx
                               : b.reg == X86Bit::leaf7_ecx ? state.leaf7_ecx
                               : b.reg == X86Bit::leaf7_1_eax ? state.leaf7_1_eax
                               : b.reg == X86Bit::leaf7_edx ? state.leaf7_edx
                                                            : state.xcr0;
        if ((value & b.mask) != b.mask) missing.push_back(b.name);
    }
    return missing;
}

// This CPU's registers (all zero off x86, where every x86 feature is then missing).
inline X86State read_x86_state() {
    X86State s;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0, &a, &b, &c, &d)) {
        char vendor[12];
        std::memcpy(vendor, &b, 4), std::memcpy(vendor + 4, &d, 4), std::memcpy(vendor + 8, &c, 4);
        s.vendor.assign(vendor, 12);
    }
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        s.leaf1_ecx = c;
        const int base = (a >> 8) & 0xf;  // the extended family counts only above base 0xf
        s.family = base == 0xf ? base + int((a >> 20) & 0xff) : base;
        // The extended model counts in families 6 and 0xf on (Intel's and AMD's manuals).
        s.model = int((a >> 4) & 0xf) + (base == 6 || base == 0xf ? int((a >> 16) & 0xf) << 4 : 0);
    }
    if (__get_cpuid_max(0, nullptr) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        s.leaf7_ebx = b;
        s.leaf7_ecx = c;
        s.leaf7_edx = d;
        const unsigned subleaves = a;  // cpuid(7, 0).eax: the last sub-leaf
        if (subleaves >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            s.leaf7_1_eax = a;
        }
    }
    if (s.leaf1_ecx & (1u << 27)) {  // OSXSAVE: XGETBV may be executed
        uint32_t lo = 0, hi = 0;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        s.xcr0 = (uint64_t(hi) << 32) | lo;
    }
#endif
    return s;
}

// Asks Linux for AMX's tile data state (8 KiB more per thread's signal frame), once: without it the
// first AMX instruction is SIGILL.
inline bool x86_amx_tile_state_granted() {
#if defined(__linux__) && defined(__x86_64__)
    static const bool granted = [] {
        constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // <asm/prctl.h>
        return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
    }();
    return granted;
#else
    return false;
#endif
}

}  // namespace detail
}  // namespace blocklstm
