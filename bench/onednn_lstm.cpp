// oneDNN peer of the CPU benchmark (bench/run.sh): times oneDNN's LSTM forward-training and
// backward primitives for one shape, one layer, one direction, with or without peepholes.
//
// Built by bench/run.sh with g++ against Debian's libdnnl-dev (oneDNN 2.6), not by the
// project's CMake build. Threads: OpenMP, set with OMP_NUM_THREADS (the driver sets 2).
//
//   onednn_lstm --time T --batch B --input I --cell H [--peephole] [--dtype f32|bf16|f16]
//               [--reps N] [--warmup N] [--seed S]
//
// Setup, outside the timing: primitive descriptors with format `any` for the weights; all inputs
// are random. Each rep runs, in order:
//   the user's weights (ldigo) reordered into the forward primitive's layout (timed apart) ->
//   forward_training (timed) -> zero the weight gradients (untimed: oneDNN accumulates into
//   diff_weights_layer / diff_weights_iter / diff_weights_peephole / diff_bias) -> the weights
//   reordered into the backward primitive's layout, which differs (timed apart) -> backward (timed),
// the backward consuming the workspace of the forward just run. A training step pays the reorders
// at every step (the weights change), where blocklstm's ops pack their weights inside each call:
// so they are reported beside the primitives' times, not in them (each call then finds the
// weights just converted in cache, as in a training step). Each timed part is
// execute + stream::wait, measured with steady_clock.
//
// Output (stdout):
//   onednn_version=2.6.3 threads=2 dtype=f32 peephole=0 T=.. B=.. I=.. H=..
//   fwd_ms=a,b,...           forward_training
//   bwd_ms=a,b,...           backward
//   fwd_reorder_ms=a,b,...   the weights into the forward's layout
//   bwd_reorder_ms=a,b,...   the weights into the backward's layout
// Exit status 0; 2 bad arguments; 3 oneDNN has no implementation for this configuration on this
// CPU (e.g. f16 or bf16 LSTM): one line "unsupported: <reason>" on stdout.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

using namespace dnnl;
using dt = memory::data_type;
using tag = memory::format_tag;
using dims = memory::dims;

namespace {

struct Options {
    long T = 0, B = 0, I = 0, H = 0;
    bool peephole = false;
    std::string dtype = "f32";
    int reps = 5, warmup = 1;
    unsigned seed = 1;
};

[[noreturn]] void usage(const std::string &msg) {
    std::fprintf(stderr,
                 "onednn_lstm: %s\nusage: onednn_lstm --time T --batch B --input I --cell H "
                 "[--peephole] [--dtype f32|bf16|f16] [--reps N] [--warmup N] [--seed S]\n",
                 msg.c_str());
    std::exit(2);
}

long to_long(const char *opt, const char *s, long lo) {
    char *end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (!*s || *end || v < lo) usage(std::string(opt) + ": bad value '" + s + "'");
    return v;
}

Options parse(int argc, char **argv) {
    Options o;
    for (int k = 1; k < argc; ++k) {
        const std::string a = argv[k];
        auto val = [&]() -> const char * {
            if (k + 1 >= argc) usage(a + ": missing value");
            return argv[++k];
        };
        if (a == "--time") o.T = to_long("--time", val(), 1);
        else if (a == "--batch") o.B = to_long("--batch", val(), 1);
        else if (a == "--input") o.I = to_long("--input", val(), 1);
        else if (a == "--cell") o.H = to_long("--cell", val(), 1);
        else if (a == "--peephole") o.peephole = true;
        else if (a == "--dtype") o.dtype = val();
        else if (a == "--reps") o.reps = static_cast<int>(to_long("--reps", val(), 1));
        else if (a == "--warmup") o.warmup = static_cast<int>(to_long("--warmup", val(), 0));
        else if (a == "--seed") o.seed = static_cast<unsigned>(to_long("--seed", val(), 0));
        else usage("unknown argument '" + a + "'");
    }
    if (!o.T || !o.B || !o.I || !o.H) usage("--time, --batch, --input and --cell are required");
    if (o.dtype != "f32" && o.dtype != "bf16" && o.dtype != "f16") usage("--dtype: f32, bf16 or f16");
    return o;
}

tag plain(std::size_t rank) { return rank == 3 ? tag::abc : rank == 4 ? tag::abcd : tag::abcde; }

// Fills `dst` (any layout, any dtype) with uniform values in [-scale, scale] via an f32 plain copy.
void fill(const engine &eng, stream &s, memory &dst, std::mt19937 &rng, float scale) {
    const memory::desc d = dst.get_desc();
    const dims shape = d.dims();
    memory src({shape, dt::f32, plain(shape.size())}, eng);
    const std::size_t n = src.get_desc().get_size() / sizeof(float);
    std::uniform_real_distribution<float> u(-scale, scale);
    float *p = static_cast<float *>(src.get_data_handle());
    for (std::size_t k = 0; k < n; ++k) p[k] = u(rng);
    reorder(src, dst).execute(s, src, dst);
    s.wait();
}

void zero(memory &m) { std::memset(m.get_data_handle(), 0, m.get_desc().get_size()); }

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void print_list(const char *name, const std::vector<double> &v) {
    std::printf("%s=", name);
    for (std::size_t k = 0; k < v.size(); ++k) std::printf("%s%.6f", k ? "," : "", v[k]);
    std::printf("\n");
}

}  // namespace

int main(int argc, char **argv) {
    const Options o = parse(argc, argv);
    const dnnl_version_t *ver = dnnl_version();
    std::printf("onednn_version=%d.%d.%d threads=%d dtype=%s peephole=%d T=%ld B=%ld I=%ld H=%ld\n",
                ver->major, ver->minor, ver->patch, omp_get_max_threads(), o.dtype.c_str(),
                o.peephole ? 1 : 0, o.T, o.B, o.I, o.H);
    std::fflush(stdout);

    engine eng(engine::kind::cpu, 0);
    stream s(eng);
    const dt data = o.dtype == "f32" ? dt::f32 : o.dtype == "bf16" ? dt::bf16 : dt::f16;
    const long T = o.T, B = o.B, I = o.I, H = o.H, G = 4;

    // Activations and states in `data`; bias (and for low precision the cell state) in f32, as
    // oneDNN requires for its bf16 RNNs.
    const dt cdt = dt::f32;
    const memory::desc src_layer_md({T, B, I}, data, tag::tnc);
    const memory::desc src_iter_md({1, 1, B, H}, data, tag::ldnc);
    const memory::desc src_iter_c_md({1, 1, B, H}, cdt, tag::ldnc);
    const memory::desc wl_any({1, 1, I, G, H}, data, tag::any);
    const memory::desc wi_any({1, 1, H, G, H}, data, tag::any);
    const memory::desc wp_md = o.peephole ? memory::desc({1, 1, 3, H}, dt::f32, tag::ldgo) : memory::desc();
    const memory::desc bias_md({1, 1, G, H}, dt::f32, tag::ldgo);
    const memory::desc dst_layer_md({T, B, H}, data, tag::tnc);
    const memory::desc dst_iter_md({1, 1, B, H}, data, tag::ldnc);
    const memory::desc dst_iter_c_md({1, 1, B, H}, cdt, tag::ldnc);
    const memory::desc diff_src_layer_md({T, B, I}, data, tag::tnc);

    lstm_forward::primitive_desc fwd_pd;
    lstm_backward::primitive_desc bwd_pd;
    try {
        const lstm_forward::desc fwd_d(prop_kind::forward_training, rnn_direction::unidirectional_left2right,
                                       src_layer_md, src_iter_md, src_iter_c_md, wl_any, wi_any, wp_md,
                                       bias_md, dst_layer_md, dst_iter_md, dst_iter_c_md);
        fwd_pd = lstm_forward::primitive_desc(fwd_d, eng);
        const memory::desc dwp_md = wp_md;
        const lstm_backward::desc bwd_d(
            prop_kind::backward, rnn_direction::unidirectional_left2right, src_layer_md, src_iter_md,
            src_iter_c_md, wl_any, wi_any, wp_md, bias_md, dst_layer_md, dst_iter_md, dst_iter_c_md,
            diff_src_layer_md, src_iter_md, src_iter_c_md, wl_any, wi_any, dwp_md, bias_md,
            dst_layer_md, dst_iter_md, dst_iter_c_md);
        bwd_pd = lstm_backward::primitive_desc(bwd_d, eng, fwd_pd);
    } catch (const dnnl::error &e) {
        std::printf("unsupported: oneDNN %d.%d.%d has no %s LSTM%s on this CPU (%s)\n", ver->major,
                    ver->minor, ver->patch, o.dtype.c_str(), o.peephole ? " with peephole" : "",
                    e.what());
        return 3;
    }

    std::mt19937 rng(o.seed);
    const float ws = 1.0f / std::sqrt(static_cast<float>(I + H));
    // Forward.
    memory src_layer(fwd_pd.src_layer_desc(), eng), src_iter(fwd_pd.src_iter_desc(), eng),
        src_iter_c(fwd_pd.src_iter_c_desc(), eng), wl(fwd_pd.weights_layer_desc(), eng),
        wi(fwd_pd.weights_iter_desc(), eng), bias(fwd_pd.bias_desc(), eng),
        dst_layer(fwd_pd.dst_layer_desc(), eng), dst_iter(fwd_pd.dst_iter_desc(), eng),
        dst_iter_c(fwd_pd.dst_iter_c_desc(), eng), workspace(fwd_pd.workspace_desc(), eng);
    memory wp = o.peephole ? memory(fwd_pd.weights_peephole_desc(), eng) : memory();
    // User weights in ldigo, converted (reordered) into each primitive's layout.
    memory wl_user({{1, 1, I, G, H}, dt::f32, tag::ldigo}, eng), wi_user({{1, 1, H, G, H}, dt::f32, tag::ldigo}, eng);
    fill(eng, s, wl_user, rng, ws);
    fill(eng, s, wi_user, rng, ws);
    reorder to_wl(wl_user, wl), to_wi(wi_user, wi);
    fill(eng, s, src_layer, rng, 1.0f);
    fill(eng, s, src_iter, rng, 0.9f);
    fill(eng, s, src_iter_c, rng, 1.0f);
    fill(eng, s, bias, rng, 0.1f);
    if (o.peephole) fill(eng, s, wp, rng, 0.1f);

    // Backward: its own weight layouts, gradient buffers, random output gradients.
    memory bwl(bwd_pd.weights_layer_desc(), eng), bwi(bwd_pd.weights_iter_desc(), eng),
        diff_src_layer(bwd_pd.diff_src_layer_desc(), eng), diff_src_iter(bwd_pd.diff_src_iter_desc(), eng),
        diff_src_iter_c(bwd_pd.diff_src_iter_c_desc(), eng),
        diff_wl(bwd_pd.diff_weights_layer_desc(), eng), diff_wi(bwd_pd.diff_weights_iter_desc(), eng),
        diff_bias(bwd_pd.diff_bias_desc(), eng), diff_dst_layer(bwd_pd.diff_dst_layer_desc(), eng),
        diff_dst_iter(bwd_pd.diff_dst_iter_desc(), eng), diff_dst_iter_c(bwd_pd.diff_dst_iter_c_desc(), eng);
    memory diff_wp = o.peephole ? memory(bwd_pd.diff_weights_peephole_desc(), eng) : memory();
    reorder to_bwl(wl_user, bwl), to_bwi(wi_user, bwi);
    fill(eng, s, diff_dst_layer, rng, 0.1f);
    fill(eng, s, diff_dst_iter, rng, 0.1f);
    fill(eng, s, diff_dst_iter_c, rng, 0.1f);

    lstm_forward fwd(fwd_pd);
    lstm_backward bwd(bwd_pd);
    std::unordered_map<int, memory> fwd_args = {
        {DNNL_ARG_SRC_LAYER, src_layer}, {DNNL_ARG_SRC_ITER, src_iter},
        {DNNL_ARG_SRC_ITER_C, src_iter_c}, {DNNL_ARG_WEIGHTS_LAYER, wl},
        {DNNL_ARG_WEIGHTS_ITER, wi},       {DNNL_ARG_BIAS, bias},
        {DNNL_ARG_DST_LAYER, dst_layer},   {DNNL_ARG_DST_ITER, dst_iter},
        {DNNL_ARG_DST_ITER_C, dst_iter_c}, {DNNL_ARG_WORKSPACE, workspace}};
    std::unordered_map<int, memory> bwd_args = {
        {DNNL_ARG_SRC_LAYER, src_layer},           {DNNL_ARG_SRC_ITER, src_iter},
        {DNNL_ARG_SRC_ITER_C, src_iter_c},         {DNNL_ARG_WEIGHTS_LAYER, bwl},
        {DNNL_ARG_WEIGHTS_ITER, bwi},              {DNNL_ARG_BIAS, bias},
        {DNNL_ARG_DST_LAYER, dst_layer},           {DNNL_ARG_DST_ITER, dst_iter},
        {DNNL_ARG_DST_ITER_C, dst_iter_c},         {DNNL_ARG_WORKSPACE, workspace},
        {DNNL_ARG_DIFF_SRC_LAYER, diff_src_layer}, {DNNL_ARG_DIFF_SRC_ITER, diff_src_iter},
        {DNNL_ARG_DIFF_SRC_ITER_C, diff_src_iter_c}, {DNNL_ARG_DIFF_WEIGHTS_LAYER, diff_wl},
        {DNNL_ARG_DIFF_WEIGHTS_ITER, diff_wi},     {DNNL_ARG_DIFF_BIAS, diff_bias},
        {DNNL_ARG_DIFF_DST_LAYER, diff_dst_layer}, {DNNL_ARG_DIFF_DST_ITER, diff_dst_iter},
        {DNNL_ARG_DIFF_DST_ITER_C, diff_dst_iter_c}};
    if (o.peephole) {
        fwd_args.insert({DNNL_ARG_WEIGHTS_PEEPHOLE, wp});
        bwd_args.insert({DNNL_ARG_WEIGHTS_PEEPHOLE, wp});
        bwd_args.insert({DNNL_ARG_DIFF_WEIGHTS_PEEPHOLE, diff_wp});
    }

    std::vector<double> fwd_ms, bwd_ms, fwd_reorder_ms, bwd_reorder_ms;
    for (int k = 0; k < o.warmup + o.reps; ++k) {
        auto t0 = std::chrono::steady_clock::now();
        to_wl.execute(s, wl_user, wl);
        to_wi.execute(s, wi_user, wi);
        s.wait();
        const double fr = ms_since(t0);
        t0 = std::chrono::steady_clock::now();
        fwd.execute(s, fwd_args);
        s.wait();
        const double f = ms_since(t0);
        zero(diff_wl);  // oneDNN accumulates the weight gradients: zero them, untimed
        zero(diff_wi);
        zero(diff_bias);
        if (o.peephole) zero(diff_wp);
        t0 = std::chrono::steady_clock::now();
        to_bwl.execute(s, wl_user, bwl);
        to_bwi.execute(s, wi_user, bwi);
        s.wait();
        const double br = ms_since(t0);
        t0 = std::chrono::steady_clock::now();
        bwd.execute(s, bwd_args);
        s.wait();
        const double b = ms_since(t0);
        if (k >= o.warmup) {
            fwd_ms.push_back(f);
            bwd_ms.push_back(b);
            fwd_reorder_ms.push_back(fr);
            bwd_reorder_ms.push_back(br);
        }
    }
    print_list("fwd_ms", fwd_ms);
    print_list("bwd_ms", bwd_ms);
    print_list("fwd_reorder_ms", fwd_reorder_ms);
    print_list("bwd_reorder_ms", bwd_reorder_ms);
    return 0;
}
