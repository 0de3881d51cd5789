// Thread safety: several threads run BlockLSTM + BlockLSTMGrad concurrently on different data;
// every result must equal (bitwise) the single-threaded result of the same call.
#include <atomic>
#include <thread>

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
    std::atomic<int> mismatches{0};
    std::vector<std::string> first_error(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            try {
                for (int it = 0; it < kIterations; ++it) {
                    blocklstm::LSTMOutputs<Tensor> fwd;
                    blocklstm::BlockLSTMGradOutputs<Tensor> grad;
                    run_job(jobs[t], fwd, grad);
                    auto a = same(fwd, jobs[t].fwd), b = same(grad, jobs[t].grad);
                    if (!a || !b) {
                        ++mismatches;
                        if (first_error[t].empty())
                            first_error[t] = "iteration " + std::to_string(it) + ": " + (a ? b : a).message();
                    }
                }
            } catch (const std::exception &e) {
                ++mismatches;
                first_error[t] = std::string("exception: ") + e.what();
            }
        });
    }
    for (auto &th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(first_error[t].empty()) << "thread " << t << ": " << first_error[t];
    EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace blt
