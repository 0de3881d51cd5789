// Run at configure time (cmake/BlocklstmCpuTargets.cmake): for each Halide target string given,
// prints "1" if the building machine runs its code, else "0", decided as the runtime decides
// (runtime/src/x86_features.h). A test build leaves out the check targets whose table this machine
// runs natively; an unknown feature counts as not run, so its check target stays.
#include <cstdio>
#include <string>

#include "runtime/src/x86_features.h"

int main(int argc, char **argv) {
    using namespace blocklstm::detail;
    const X86State cpu = read_x86_state();
    for (int i = 1; i < argc; ++i) {
        // x86-64-linux-<feature>-<feature>...: the features after architecture, bits and OS.
        std::string rest = argv[i];
        for (int dash = 0; dash < 3 && !rest.empty(); ++dash) {
            const std::size_t at = rest.find('-');
            rest = at == std::string::npos ? "" : rest.substr(at + 1);
        }
        bool runs = true;
        while (!rest.empty() && runs) {
            const std::size_t at = rest.find('-');
            const std::string feature = rest.substr(0, at);
            rest = at == std::string::npos ? "" : rest.substr(at + 1);
            const auto missing = x86_missing(cpu, feature);
            runs = missing && missing->empty() &&
                   (feature != "avx512_sapphirerapids" || x86_amx_tile_state_granted());
        }
        std::printf("%d\n", runs ? 1 : 0);
    }
    return 0;
}
