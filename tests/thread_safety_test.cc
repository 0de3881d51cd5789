// Thread safety: several threads run BlockLSTM + BlockLSTMGrad concurrently on different data;
// every result must equal (bitwise) the single-threaded result of the same call. The host memory
// cache (workspaces reused across calls and threads) must not change any result either.
#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <iterator>
#include <thread>

#include <blocklstm/ops.h>

#include "test_util.h"

namespace blt {
namespace {

struct Job {
    Problem p;
    std::unique_ptr<Inputs> in;
    blocklstm::LSTMOutputs<Tensor> fwd;
    blocklstm::BlockLSTMGradOutputs<Tensor> grad;
};

// Runs forward then backward (the backward consumes the library's own forward).
void run_job(const Job &j, blocklstm::LSTMOutputs<Tensor> &fwd, blocklstm::BlockLSTMGradOutputs<Tensor> &grad) {
    fwd = run_fwd(j.p, *j.in);
    Inputs in = *j.in;
    in.i = fwd.i, in.cs = fwd.cs, in.f = fwd.f, in.o = fwd.o, in.ci = fwd.ci, in.co = fwd.co, in.h = fwd.h;
    grad = run_seq_grad(j.p, in);
}

::testing::AssertionResult same(const blocklstm::LSTMOutputs<Tensor> &a, const blocklstm::LSTMOutputs<Tensor> &b) {
    for (auto r : {same_bits("i", a.i, b.i), same_bits("cs", a.cs, b.cs), same_bits("f", a.f, b.f),
                   same_bits("o", a.o, b.o), same_bits("ci", a.ci, b.ci), same_bits("co", a.co, b.co),
                   same_bits("h", a.h, b.h)})
        if (!r) return r;
    return ::testing::AssertionSuccess();
}
::testing::AssertionResult same(const blocklstm::BlockLSTMGradOutputs<Tensor> &a,
                                const blocklstm::BlockLSTMGradOutputs<Tensor> &b) {
    for (auto r : {same_bits("x_grad", a.x_grad, b.x_grad), same_bits("cs_prev_grad", a.cs_prev_grad, b.cs_prev_grad),
                   same_bits("h_prev_grad", a.h_prev_grad, b.h_prev_grad), same_bits("w_grad", a.w_grad, b.w_grad),
                   same_bits("wci_grad", a.wci_grad, b.wci_grad), same_bits("wcf_grad", a.wcf_grad, b.wcf_grad),
                   same_bits("wco_grad", a.wco_grad, b.wco_grad), same_bits("b_grad", a.b_grad, b.b_grad)})
        if (!r) return r;
    return ::testing::AssertionSuccess();
}

// Runs the forward and backward of `job_of(t)` `iterations` times on each of `threads` threads at
// once, each result against the job's single-threaded one; returns each thread's first mismatch or
// exception ("" where it had none).
std::vector<std::string> run_concurrently(int threads, int iterations, const std::function<const Job &(int)> &job_of) {
    std::vector<std::string> first_error(threads);
    std::vector<std::thread> running;
    for (int t = 0; t < threads; ++t) {
        running.emplace_back([&, t] {
            const Job &job = job_of(t);
            try {
                for (int it = 0; it < iterations && first_error[t].empty(); ++it) {
                    blocklstm::LSTMOutputs<Tensor> fwd;
                    blocklstm::BlockLSTMGradOutputs<Tensor> grad;
                    run_job(job, fwd, grad);
                    auto a = same(fwd, job.fwd), b = same(grad, job.grad);
                    if (!a || !b) first_error[t] = "iteration " + std::to_string(it) + ": " + (a ? b : a).message();
                }
            } catch (const std::exception &e) {
                first_error[t] = std::string("exception: ") + e.what();
            }
        });
    }
    for (auto &th : running) th.join();
    return first_error;
}

TEST(ThreadSafety, ConcurrentForwardAndBackward) {
    constexpr int kThreads = 4, kIterations = 150;
    // Different shapes, dtypes, layouts and peephole settings per thread.
    // Large enough that the kernels' parallel loops use Halide's thread pool from all threads.
    const Shape shapes[kThreads] = {{8, 16, 48, 64, 8, 1, 0.0, 1.0, "t0"},
                                    {4, 3, 7, 17, 3, 2, 1.0, 0.5, "t1"},
                                    {6, 9, 31, 16, 6, 1, 3.0, 1.0, "t2"},
                                    {3, 17, 5, 33, 2, 1, 0.0, 1.0, "t3"}};
    std::vector<Job> jobs(kThreads);
    for (int t = 0; t < kThreads; ++t) {
        BLT_SEED(seed, "ThreadSafety/" + std::to_string(t));
        jobs[t].p = make_problem(seed, shapes[t], t == 2 ? DType::f16 : DType::f32, false, t % 2 == 1,
                                 t == 3 ? Layout::ifco : Layout::icfo);
        jobs[t].in = std::make_unique<Inputs>(jobs[t].p);
        run_job(jobs[t], jobs[t].fwd, jobs[t].grad);  // single-threaded results
    }
    const auto errors = run_concurrently(kThreads, kIterations, [&](int t) -> const Job & { return jobs[t]; });
    for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
}

// CUDA: four threads, each on a stream of its own (set_cuda_stream), run the forward and backward
// of their problems at once (float32 and float16, both layouts, peepholes or not), with the fused
// steps and with the split steps as CUDA graphs; every result has the bits of the same calls run
// alone on the default stream.
TEST(ThreadSafety, cuda_ThreadsWithOwnStreams) {
    if (skip_without_cuda()) GTEST_SKIP() << "no CUDA device: " << blocklstm::cuda_unavailable_reason();
    // The driver's stream functions, from the library the runtime opens (no link-time dependency).
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    ASSERT_NE(lib, nullptr);
    using Retain = int (*)(void **, int);
    using SetCurrent = int (*)(void *);
    using Create = int (*)(void **, unsigned);
    using Destroy = int (*)(void *);
    const auto retain = reinterpret_cast<Retain>(dlsym(lib, "cuDevicePrimaryCtxRetain"));
    const auto set_current = reinterpret_cast<SetCurrent>(dlsym(lib, "cuCtxSetCurrent"));
    const auto create = reinterpret_cast<Create>(dlsym(lib, "cuStreamCreate"));
    const auto destroy = reinterpret_cast<Destroy>(dlsym(lib, "cuStreamDestroy_v2"));
    ASSERT_TRUE(retain && set_current && create && destroy);
    const CudaSwitchesRestored restore;
    constexpr int kThreads = 4, kIterations = 10;
    const Shape shapes[kThreads] = {{8, 16, 48, 64, 8, 1, 0.0, 1.0, "t0"},
                                    {4, 3, 7, 17, 3, 2, 1.0, 0.5, "t1"},
                                    {6, 9, 31, 16, 6, 1, 3.0, 1.0, "t2"},
                                    {3, 17, 5, 33, 2, 1, 0.0, 1.0, "t3"}};
    auto host_fwd = [](const blocklstm::LSTMOutputs<Tensor> &o) {
        return blocklstm::LSTMOutputs<Tensor>{on_host(o.i),  on_host(o.cs), on_host(o.f), on_host(o.o),
                                              on_host(o.ci), on_host(o.co), on_host(o.h)};
    };
    auto host_grad = [](const blocklstm::BlockLSTMGradOutputs<Tensor> &g) {
        return blocklstm::BlockLSTMGradOutputs<Tensor>{on_host(g.x_grad),   on_host(g.cs_prev_grad),
                                                       on_host(g.h_prev_grad), on_host(g.w_grad),
                                                       on_host(g.wci_grad), on_host(g.wcf_grad),
                                                       on_host(g.wco_grad), on_host(g.b_grad)};
    };
    for (const blocklstm::CudaStep steps : {blocklstm::CudaStep::fused, blocklstm::CudaStep::split}) {
        const bool split = steps == blocklstm::CudaStep::split;
        SCOPED_TRACE(split ? "split steps, CUDA graphs" : "fused steps");
        blocklstm::set_cuda_step(steps);
        blocklstm::set_cuda_graphs(split);
        std::vector<Job> jobs(kThreads);
        for (int t = 0; t < kThreads; ++t) {
            BLT_SEED(seed, "ThreadSafety/cuda/" + std::to_string(t));
            jobs[t].p = make_problem(seed, shapes[t], t == 2 ? DType::f16 : DType::f32, false, t % 2 == 1,
                                     t == 3 ? Layout::ifco : Layout::icfo);
            jobs[t].in = std::make_unique<Inputs>(jobs[t].p, blocklstm::Device::cuda);
            blocklstm::LSTMOutputs<Tensor> fwd;
            blocklstm::BlockLSTMGradOutputs<Tensor> grad;
            run_job(jobs[t], fwd, grad);  // alone, on the default stream
            jobs[t].fwd = host_fwd(fwd);
            jobs[t].grad = host_grad(grad);
        }
        std::vector<std::string> first_error(kThreads);
        std::vector<std::thread> running;
        for (int t = 0; t < kThreads; ++t) {
            running.emplace_back([&, t] {
                void *ctx = nullptr, *stream = nullptr;
                if (retain(&ctx, 0) != 0 || set_current(ctx) != 0 || create(&stream, /*NON_BLOCKING=*/1) != 0) {
                    first_error[t] = "could not make a stream";
                    return;
                }
                blocklstm::set_cuda_stream(reinterpret_cast<blocklstm::CudaStream>(stream));
                try {
                    for (int it = 0; it < kIterations && first_error[t].empty(); ++it) {
                        blocklstm::LSTMOutputs<Tensor> fwd;
                        blocklstm::BlockLSTMGradOutputs<Tensor> grad;
                        run_job(jobs[t], fwd, grad);
                        blocklstm::cuda_synchronize();
                        auto a = same(host_fwd(fwd), jobs[t].fwd), b = same(host_grad(grad), jobs[t].grad);
                        if (!a || !b) first_error[t] = "iteration " + std::to_string(it) + ": " + (a ? b : a).message();
                    }
                } catch (const std::exception &e) {
                    first_error[t] = std::string("exception: ") + e.what();
                }
                blocklstm::set_cuda_stream(nullptr);
                destroy(stream);
            });
        }
        for (auto &th : running) th.join();
        for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(first_error[t].empty()) << "thread " << t << ": " << first_error[t];
    }
}

// Threads that share their input tensors, read-only, as a training loop's threads share weights:
// four threads run the same two problems (each input tensor read by two threads at once, the
// weights by all four in the float32 pair), and every result equals the single-threaded one.
TEST(ThreadSafety, ThreadsSharingInputTensors) {
    constexpr int kThreads = 4, kIterations = 60;
    const Shape shape{8, 16, 48, 64, 7, 1, 3.0, 1.0, "shared"};
    std::vector<Job> jobs(2);
    for (int k = 0; k < 2; ++k) {
        BLT_SEED(seed, "ThreadSafety/shared/" + std::to_string(k));
        jobs[k].p = make_problem(seed, shape, k == 0 ? DType::f32 : DType::f16, false, true,
                                 k == 0 ? Layout::icfo : Layout::ifco);
        jobs[k].in = std::make_unique<Inputs>(jobs[k].p);
        run_job(jobs[k], jobs[k].fwd, jobs[k].grad);
    }
    const auto errors = run_concurrently(kThreads, kIterations, [&](int t) -> const Job & { return jobs[t % 2]; });
    for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
}

// set_num_threads with valid counts, between calls: every count gives the bits of 2 threads (the
// kernels split their work the same way whatever the pool's size), and 0 returns to the default.
// At 4 rows of 32 cells the 2-thread calls run their steps on one thread beside the batched
// products (ops_sequence.cpp: side_by_side_chunk_steps), the other counts each step split.
void expect_every_thread_count_gives_the_bits(const Shape &shape) {
    SCOPED_TRACE(describe(shape));
    BLT_SEED(seed, "Threads/set_num_threads");
    Job job;
    job.p = make_problem(seed, shape, DType::f32, false, true, Layout::icfo);
    job.in = std::make_unique<Inputs>(job.p);
    blocklstm::set_num_threads(2);
    run_job(job, job.fwd, job.grad);
    for (int threads : {1, 2, 3, 8, 0}) {
        SCOPED_TRACE("set_num_threads(" + std::to_string(threads) + ")");
        ASSERT_NO_THROW(blocklstm::set_num_threads(threads));
        blocklstm::LSTMOutputs<Tensor> fwd;
        blocklstm::BlockLSTMGradOutputs<Tensor> grad;
        run_job(job, fwd, grad);
        EXPECT_TRUE(same(fwd, job.fwd));
        EXPECT_TRUE(same(grad, job.grad));
        if (threads == 8) {  // the pool grew to the count: this thread and 7 workers at least
            const auto tasks = std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                                             std::filesystem::directory_iterator{});
            EXPECT_GE(tasks, 8) << "threads in this process after calls with set_num_threads(8)";
        }
    }
}

TEST(Threads, SetNumThreadsKeepsEveryBit) {
    expect_every_thread_count_gives_the_bits({6, 16, 40, 48, 6, 1, 3.0, 1.0, "threads"});
    expect_every_thread_count_gives_the_bits({40, 4, 24, 32, 37, 1, 3.0, 1.0, "steps on one thread"});
    expect_every_thread_count_gives_the_bits({40, 8, 24, 32, 37, 1, 3.0, 1.0, "w_grad's two chunks beside the steps"});
    EXPECT_THROW(blocklstm::set_num_threads(-1), blocklstm::Error);
}

// A job's forward (BlockLSTMV2: Layout::ifco) or gradient call by name, into fresh outputs.
struct NamedCall {
    blocklstm::OpCall call;
    std::vector<Tensor> outputs;  // what call.outputs views, in the op's output order
};

NamedCall named_call(const Job &job, bool grad) {
    const Inputs &in = *job.in;
    const blocklstm::OpInfo &op = blocklstm::op_info(grad ? "BlockLSTMGradV2" : "BlockLSTMV2");
    NamedCall c;
    c.call.op = op.name;
    c.call.seq_len_max = job.p.s.L;
    c.call.attrs.use_peephole = job.p.peephole;
    if (!grad) c.call.attrs.cell_clip = static_cast<float>(job.p.s.cell_clip);
    c.call.inputs = {{"x", in.x}, {"cs_prev", in.cs_prev}, {"h_prev", in.h_prev}, {"w", in.w},
                     {"wci", in.wci}, {"wcf", in.wcf}, {"wco", in.wco}, {"b", in.b}};
    if (grad) {
        const blocklstm::LSTMOutputs<Tensor> &f = job.fwd;
        for (const auto &[name, t] : {std::pair{"i", &f.i}, {"cs", &f.cs}, {"f", &f.f}, {"o", &f.o}, {"ci", &f.ci},
                                      {"co", &f.co}, {"h", &f.h}, {"cs_grad", &in.cs_grad}, {"h_grad", &in.h_grad}})
            c.call.inputs[name] = *t;
    }
    const blocklstm::OpDims dims{job.p.s.T, job.p.s.B, job.p.s.I, job.p.s.H};
    c.outputs.reserve(op.outputs.size());
    for (const blocklstm::OpArg &a : op.outputs) {
        c.outputs.emplace_back(job.p.dtype, a.dims(dims));
        std::memset(c.outputs.back().data(), 0x5a, c.outputs.back().view().num_bytes());  // "nothing written" marks
        c.call.outputs[a.name] = c.outputs.back();
    }
    return c;
}

// The bits of a NamedCall's outputs against the job's own calls.
::testing::AssertionResult same_as_job(const NamedCall &c, const Job &job) {
    if (c.call.op == "BlockLSTMV2")
        return same({c.outputs[0], c.outputs[1], c.outputs[2], c.outputs[3], c.outputs[4], c.outputs[5], c.outputs[6]},
                    job.fwd);
    return same({c.outputs[0], c.outputs[1], c.outputs[2], c.outputs[3], c.outputs[4], c.outputs[5], c.outputs[6],
                 c.outputs[7]},
                job.grad);
}

bool untouched(const NamedCall &c) {
    for (const Tensor &t : c.outputs) {
        const auto *bytes = static_cast<const unsigned char *>(t.data());
        for (std::size_t k = 0; k < t.view().num_bytes(); ++k)
            if (bytes[k] != 0x5a) return false;
    }
    return true;
}

// invoke_side_by_side: two forward calls, then two gradient calls, by name, at 1, 2 (side by side)
// and 3 loop threads, for calls small enough to run side by side (B x H up to 4096; steps on one
// thread and split ones) and a pair over that (one after the other): each call's outputs have the
// bits of the same call alone. A bad argument in either call throws naming it, and neither writes.
TEST(Threads, SideBySideKeepsEveryBit) {
    const Shape shapes[] = {{5, 3, 24, 32, 5, 1, 3.0, 1.0, "steps on one thread"},
                            {4, 16, 40, 96, 3, 1, 0.0, 1.0, "split steps, seq_len_max below T"},
                            {3, 64, 8, 136, 3, 1, 3.0, 1.0, "B x H 8704: one after the other"}};
    std::vector<Job> jobs(std::size(shapes));
    blocklstm::set_num_threads(2);
    for (std::size_t k = 0; k < jobs.size(); ++k) {
        BLT_SEED(seed, "Threads/side_by_side/" + std::to_string(k));
        jobs[k].p = make_problem(seed, shapes[k], DType::f32, false, k != 1, Layout::ifco);
        jobs[k].in = std::make_unique<Inputs>(jobs[k].p);
        run_job(jobs[k], jobs[k].fwd, jobs[k].grad);
    }
    const std::pair<std::size_t, std::size_t> pairs[] = {{0, 1}, {1, 0}, {2, 2}};
    for (int threads : {2, 1, 3}) {
        ASSERT_NO_THROW(blocklstm::set_num_threads(threads));
        for (const auto &[a, b] : pairs) {
            for (bool grad : {false, true}) {
                SCOPED_TRACE("set_num_threads(" + std::to_string(threads) + "), " + (grad ? "gradients" : "forward") +
                             " of " + shapes[a].note + " beside " + shapes[b].note);
                NamedCall first = named_call(jobs[a], grad), second = named_call(jobs[b], grad);
                ASSERT_NO_THROW(blocklstm::invoke_side_by_side(first.call, second.call));
                EXPECT_TRUE(same_as_job(first, jobs[a]));
                EXPECT_TRUE(same_as_job(second, jobs[b]));
            }
        }
    }
    blocklstm::set_num_threads(2);
    for (bool bad_second : {true, false}) {
        SCOPED_TRACE(bad_second ? "a bad second call" : "a bad first call");
        NamedCall first = named_call(jobs[0], false), second = named_call(jobs[1], false);
        NamedCall &bad = bad_second ? second : first;
        bad.call.inputs["wco"] = jobs[bad_second ? 0 : 1].in->wco;  // another H
        try {
            blocklstm::invoke_side_by_side(first.call, second.call);
            ADD_FAILURE() << "no error for a bad wco in the " << (bad_second ? "second" : "first") << " call";
        } catch (const blocklstm::Error &e) {
            EXPECT_NE(std::string(e.what()).find("'wco'"), std::string::npos) << e.what();
        }
        EXPECT_TRUE(untouched(first)) << "the first call wrote its outputs";
        EXPECT_TRUE(untouched(second)) << "the second call wrote its outputs";
    }
    // Calls that are not independent: the second call's h where the first reads x (one tensor, x a
    // view of its first T*B*I floats) or where the first writes its h.
    for (bool on_x : {true, false}) {
        SCOPED_TRACE(on_x ? "the second call's h on the first's x" : "the second call's h on the first's h");
        NamedCall first = named_call(jobs[0], false), second = named_call(jobs[0], false);
        const Tensor shared(DType::f32, first.outputs[6].shape());
        if (on_x) {
            blocklstm::TensorView x = first.call.inputs["x"];
            x.data = shared.data();
            first.call.inputs["x"] = x;
            second.call.outputs["h"] = shared;
        } else {
            second.call.outputs["h"] = first.outputs[6];
        }
        try {
            blocklstm::invoke_side_by_side(first.call, second.call);
            ADD_FAILURE() << "no error for overlapping calls";
        } catch (const blocklstm::Error &e) {
            EXPECT_EQ(std::string(e.what()),
                      on_x ? "invoke_side_by_side: output 'h' of the second call (BlockLSTMV2) overlaps input 'x' of "
                             "the first call (BlockLSTMV2): expected two independent calls (neither reads or writes "
                             "what the other writes)"
                           : "invoke_side_by_side: output 'h' of the first call (BlockLSTMV2) overlaps output 'h' of "
                             "the second call (BlockLSTMV2): expected two independent calls (neither reads or writes "
                             "what the other writes)");
        }
        EXPECT_TRUE(untouched(first)) << "the first call wrote its outputs";
        if (on_x) EXPECT_TRUE(untouched(second)) << "the second call wrote its outputs";
    }
    blocklstm::set_num_threads(0);
}

// set_thread_pool: "own" by default; another name refused, naming it; "openmp" refused while no
// OpenMP runtime is loaded (this program links none), then, with GCC's libgomp loaded by dlopen,
// chosen and named, the ops on its threads giving the own pool's bits. Left out of the TSan pass
// (libgomp is not built with TSan: bootstrap.sh).
TEST(Threads, ThreadPoolChoice) {
    auto error_of = [](const std::function<void()> &call) -> std::string {
        try {
            call();
        } catch (const blocklstm::Error &e) {
            return e.what();
        }
        return "(no error)";
    };
    if (const char *env = std::getenv("BLOCKLSTM_THREAD_POOL"); env && std::string(env) == "halide") {
        EXPECT_EQ(blocklstm::thread_pool_in_use(), "halide");
        EXPECT_NE(error_of([] { blocklstm::set_thread_pool("openmp"); }).find("BLOCKLSTM_THREAD_POOL=halide is set"),
                  std::string::npos);
        return;
    }
    EXPECT_EQ(blocklstm::thread_pool_in_use(), "own");
    EXPECT_EQ(error_of([] { blocklstm::set_thread_pool("OpenMP"); }),
              "set_thread_pool: pool is \"OpenMP\": expected \"own\" or \"openmp\"");
    if (!dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD)) {
        EXPECT_EQ(error_of([] { blocklstm::set_thread_pool("openmp"); }),
                  "set_thread_pool: pool is \"openmp\", but no OpenMP runtime (libgomp, libomp or libiomp5) is "
                  "loaded in this process");
        EXPECT_EQ(blocklstm::thread_pool_in_use(), "own");
    }
    void *gomp = dlopen("libgomp.so.1", RTLD_NOW);  // GCC's OpenMP runtime, as PyTorch brings its own
    ASSERT_NE(gomp, nullptr) << "libgomp.so.1 (GCC's OpenMP runtime, which the build requires): " << dlerror();

    const Shape shape{6, 16, 40, 48, 6, 1, 3.0, 1.0, "threads"};
    BLT_SEED(seed, "Threads/set_thread_pool");
    Job job;
    job.p = make_problem(seed, shape, DType::f32, false, true, Layout::ifco);
    job.in = std::make_unique<Inputs>(job.p);
    run_job(job, job.fwd, job.grad);  // on the own pool
    ASSERT_NO_THROW(blocklstm::set_thread_pool("openmp"));
    EXPECT_EQ(blocklstm::thread_pool_in_use(), "openmp (libgomp.so.1)");
    for (int threads : {0, 3}) {  // OpenMP's own count, then set_num_threads'
        SCOPED_TRACE("set_num_threads(" + std::to_string(threads) + ") on OpenMP's threads");
        blocklstm::set_num_threads(threads);
        blocklstm::LSTMOutputs<Tensor> fwd;
        blocklstm::BlockLSTMGradOutputs<Tensor> grad;
        run_job(job, fwd, grad);
        EXPECT_TRUE(same(fwd, job.fwd));
        EXPECT_TRUE(same(grad, job.grad));
    }
    // An op's error comes out of the OpenMP team its call runs on (the into-outputs form validates
    // inside it), and the next call runs.
    const Inputs &in = *job.in;
    const blocklstm::LSTMOutputs<blocklstm::TensorView> into{job.fwd.i, job.fwd.cs, job.fwd.f, job.fwd.o,
                                                             job.fwd.ci, job.fwd.co, job.fwd.h};
    EXPECT_NE(error_of([&] {
                  blocklstm::BlockLSTMV2(-1, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b, into,
                                         blocklstm::BlockLSTMV2Attrs{});
              }).find("seq_len_max"),
              std::string::npos);
    blocklstm::LSTMOutputs<Tensor> fwd;
    blocklstm::BlockLSTMGradOutputs<Tensor> grad;
    run_job(job, fwd, grad);
    EXPECT_TRUE(same(fwd, job.fwd));
    blocklstm::set_num_threads(0);
    blocklstm::set_thread_pool("own");
    EXPECT_EQ(blocklstm::thread_pool_in_use(), "own");
}

// The cell ops beside the sequence ops, while another thread keeps changing the host cache's limit
// (down to 0, which frees every kept block): blocks in use by a call are never freed under it, and
// every result still equals the single-threaded one.
TEST(ThreadSafety, CellOpsAndCacheLimitChangesDuringCalls) {
    constexpr int kWorkers = 4, kIterations = 60;
    const Shape shapes[kWorkers] = {{1, 16, 48, 64, 1, 1, 0.0, 1.0, "cell"},
                                    {1, 5, 7, 17, 1, 2, 1.0, 0.5, "cell, clip active"},
                                    {8, 16, 48, 64, 8, 1, 0.0, 1.0, "sequence"},
                                    {6, 9, 31, 16, 4, 1, 3.0, 1.0, "sequence, L < T"}};
    struct CellJob {
        Problem p;
        std::unique_ptr<Inputs> in;
        blocklstm::LSTMOutputs<Tensor> fwd;
        blocklstm::LSTMBlockCellGradOutputs<Tensor> grad;
    };
    auto run_cell = [](const CellJob &j, blocklstm::LSTMOutputs<Tensor> &fwd,
                       blocklstm::LSTMBlockCellGradOutputs<Tensor> &grad) {
        fwd = run_fwd(j.p, *j.in);
        Inputs in = *j.in;
        in.i = fwd.i, in.cs = fwd.cs, in.f = fwd.f, in.o = fwd.o, in.ci = fwd.ci, in.co = fwd.co;
        grad = run_cell_grad(j.p, in);
    };
    auto same_cell_grad = [](const blocklstm::LSTMBlockCellGradOutputs<Tensor> &a,
                             const blocklstm::LSTMBlockCellGradOutputs<Tensor> &b) {
        for (auto r : {same_bits("cs_prev_grad", a.cs_prev_grad, b.cs_prev_grad), same_bits("dicfo", a.dicfo, b.dicfo),
                       same_bits("wci_grad", a.wci_grad, b.wci_grad), same_bits("wcf_grad", a.wcf_grad, b.wcf_grad),
                       same_bits("wco_grad", a.wco_grad, b.wco_grad)})
            if (!r) return r;
        return ::testing::AssertionSuccess();
    };
    std::vector<CellJob> cells(2);
    std::vector<Job> seqs(2);
    for (int t = 0; t < kWorkers; ++t) {
        BLT_SEED(seed, "ThreadSafety/cell+cache/" + std::to_string(t));
        const bool cell = t < 2;
        Problem p = make_problem(seed, shapes[t], t == 1 ? DType::f16 : DType::f32, cell, t % 2 == 0, Layout::icfo);
        if (cell) {
            cells[t].p = std::move(p);
            cells[t].in = std::make_unique<Inputs>(cells[t].p);
            run_cell(cells[t], cells[t].fwd, cells[t].grad);
        } else {
            seqs[t - 2].p = std::move(p);
            seqs[t - 2].in = std::make_unique<Inputs>(seqs[t - 2].p);
            run_job(seqs[t - 2], seqs[t - 2].fwd, seqs[t - 2].grad);
        }
    }
    std::atomic<int> running{kWorkers};
    std::vector<std::string> first_error(kWorkers);
    std::vector<std::thread> threads;
    for (int t = 0; t < kWorkers; ++t) {
        threads.emplace_back([&, t] {
            try {
                for (int it = 0; it < kIterations && first_error[t].empty(); ++it) {
                    blocklstm::LSTMOutputs<Tensor> fwd;
                    ::testing::AssertionResult a = ::testing::AssertionSuccess(), b = a;
                    if (t < 2) {
                        blocklstm::LSTMBlockCellGradOutputs<Tensor> grad;
                        run_cell(cells[t], fwd, grad);
                        a = same(fwd, cells[t].fwd), b = same_cell_grad(grad, cells[t].grad);
                    } else {
                        blocklstm::BlockLSTMGradOutputs<Tensor> grad;
                        run_job(seqs[t - 2], fwd, grad);
                        a = same(fwd, seqs[t - 2].fwd), b = same(grad, seqs[t - 2].grad);
                    }
                    if (!a || !b) first_error[t] = "iteration " + std::to_string(it) + ": " + (a ? b : a).message();
                }
            } catch (const std::exception &e) {
                first_error[t] = std::string("exception: ") + e.what();
            }
            --running;
        });
    }
    std::thread limits([&] {
        const std::size_t steps[] = {0, std::size_t(64) << 10, std::size_t(1) << 30, std::size_t(1) << 20};
        for (int k = 0; running > 0; ++k) {
            blocklstm::set_host_cache_limit(steps[k % 4]);
            std::this_thread::yield();
        }
    });
    for (auto &th : threads) th.join();
    limits.join();
    blocklstm::set_host_cache_limit(std::size_t(1) << 30);
    for (int t = 0; t < kWorkers; ++t) EXPECT_TRUE(first_error[t].empty()) << "thread " << t << ": " << first_error[t];
}

// Workspaces kept from a call of another shape hold that call's numbers: a kernel that read any
// of it before writing it would change the result. The reference run keeps no cache at all.
TEST(HostCache, ReusedWorkspacesGiveTheSameResults) {
    const Shape big{12, 16, 48, 64, 12, 1, 0.0, 1.0, "fills the cache"};
    const Shape small{12, 16, 40, 48, 10, 1, 3.0, 1.0, "reuses its blocks"};
    BLT_SEED(seed_big, "HostCache/big");
    BLT_SEED(seed_small, "HostCache/small");
    Job filler, job;
    filler.p = make_problem(seed_big, big, DType::f32, false, true, Layout::icfo);
    filler.in = std::make_unique<Inputs>(filler.p);
    job.p = make_problem(seed_small, small, DType::f32, false, true, Layout::icfo);
    job.in = std::make_unique<Inputs>(job.p);

    blocklstm::set_host_cache_limit(0);
    EXPECT_EQ(blocklstm::host_cache_bytes(), 0u);
    run_job(job, job.fwd, job.grad);  // fresh memory only
    EXPECT_EQ(blocklstm::host_cache_bytes(), 0u) << "a limit of 0 keeps nothing";

    blocklstm::set_host_cache_limit(std::size_t(1) << 30);
    blocklstm::LSTMOutputs<Tensor> fwd;
    blocklstm::BlockLSTMGradOutputs<Tensor> grad;
    run_job(filler, fwd, grad);
    EXPECT_GT(blocklstm::host_cache_bytes(), 0u) << "the gate gradients' workspace is kept";
    for (int it = 0; it < 3; ++it) {
        run_job(job, fwd, grad);
        EXPECT_TRUE(same(fwd, job.fwd)) << "iteration " << it;
        EXPECT_TRUE(same(grad, job.grad)) << "iteration " << it;
        run_job(filler, fwd, grad);
    }
}

}  // namespace
}  // namespace blt
