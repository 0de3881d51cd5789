// The CPU kernels' thread pool (thread_pool.cpp): installed as Halide's do_par_for when the
// library loads, unless BLOCKLSTM_THREAD_POOL=halide.
#pragma once

namespace blocklstm::detail {

// Threads of the pool's loops, the caller included; 0: HL_NUM_THREADS where set, else one per core.
void set_pool_threads(int threads);

// Whether the CPU kernels run on this pool (false: on Halide's default one).
bool own_thread_pool();

}  // namespace blocklstm::detail
