#!/usr/bin/env bash
# Halide 21's AMX bfloat16 product (bench/amx_product.cpp) at the shapes of BlockLSTM's products at
# T,B,I=H 100,64,512 — the input projection (6400 x 2048 x 512) and a step's recurrent product
# (64 x 2048 x 512) — beside PyTorch's bfloat16 and float32 matmul on the same shapes (its oneDNN
# runs bfloat16 on AMX) when bench/.venv has torch (bench/run.sh installs it):
#
#   bench/amx_product.sh [--pad-cols P] [M,N,K ...]      e.g. bench/amx_product.sh 1024,2048,512
#
# --pad-cols P: b's pair rows P columns longer than the product (never read), as the runtime's
# AMX panels are (schedules/panel_layout.h: kAmxRowSlackCols); default 0.
#
# Needs a CPU with AMX (Intel Sapphire Rapids and later; elsewhere it says so and stops) and the
# toolchain of scripts/bootstrap.sh (.venv's Halide). GEMM_AB_THREADS threads (default 2).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pad=0
if [ "${1:-}" = --pad-cols ]; then pad=$2; shift 2; fi
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(6400,2048,512 64,2048,512)
threads=${GEMM_AB_THREADS:-2}
halide=$("$root/.venv/bin/python" -c 'import halide, os; print(os.path.dirname(halide.__file__))')
out=$root/build/amx_product
mkdir -p "$out"
g++ -O2 -std=c++17 -I"$halide/include" "$root/bench/amx_product.cpp" -L"$halide/lib64" -lHalide \
    -Wl,-rpath,"$halide/lib64" -lpthread -ldl -o "$out/amx_product"
echo "amx_product: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $threads threads, best of 10 rounds"
for s in "${shapes[@]}"; do
    HL_NUM_THREADS=$threads "$out/amx_product" ${s//,/ } "$pad"
done
[ -x "$root/bench/.venv/bin/python" ] || { echo "amx_product: no bench/.venv: PyTorch's matmul not run"; exit 0; }
"$root/bench/.venv/bin/python" - "$threads" "${shapes[@]}" <<'EOF'
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
for shape in sys.argv[2:]:
    M, N, K = map(int, shape.split(","))
    for dtype in (torch.bfloat16, torch.float32):
        a, b = torch.rand(M, K).to(dtype), torch.rand(K, N).to(dtype)
        for _ in range(3):
            a @ b
        best = float("inf")
        for _ in range(10):
            t0, calls = time.perf_counter(), 0
            while time.perf_counter() - t0 < 0.2:
                a @ b
                calls += 1
            best = min(best, (time.perf_counter() - t0) / calls)
        print(f"torch {torch.__version__} matmul {dtype} {M} x {N} x {K}: {best * 1e6:.1f} us, "
              f"{2 * M * N * K / best / 1e9:.1f} GFLOP/s")
EOF
