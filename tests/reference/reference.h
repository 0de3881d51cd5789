// tests/reference/reference.h — an independent float64 reference of the six TF LSTM block ops.
//
// Plain loops in double precision, no Halide, written from the equations of
// docs/semantics.md (Forward, Backward) and our contract there: clip only when cell_clip > 0, straight-through clip in
// backward, wco sees the clipped new cell, every forward output and x_grad zero past seq_len_max.
// Shapes are not validated beyond what the loops need (std::invalid_argument on inconsistency).
#pragma once
#include <blocklstm/blocklstm.h>
#include <cstdint>
#include <vector>
namespace blocklstm::reference {
struct Array { std::vector<int64_t> shape; std::vector<double> data; };  // row-major
Array zeros(std::vector<int64_t> shape);
enum class Layout { icfo, ifco };
struct LSTMOut { Array i, cs, f, o, ci, co, h; };
struct CellGradOut { Array cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad; };
struct SeqGradOut { Array x_grad, cs_prev_grad, h_prev_grad, w_grad, wci_grad, wcf_grad, wco_grad, b_grad; };
// LSTMBlockCell (ICFO)
LSTMOut lstm_block_cell(const Array& x, const Array& cs_prev, const Array& h_prev, const Array& w, const Array& wci, const Array& wcf, const Array& wco, const Array& b, double forget_bias, double cell_clip, bool use_peephole);
CellGradOut lstm_block_cell_grad(const Array& x, const Array& cs_prev, const Array& h_prev, const Array& w, const Array& wci, const Array& wcf, const Array& wco, const Array& b, const Array& i, const Array& cs, const Array& f, const Array& o, const Array& ci, const Array& co, const Array& cs_grad, const Array& h_grad, bool use_peephole);
// BlockLSTM (icfo, forget_bias) / BlockLSTMV2 (ifco, forget_bias 0): every output zero past seq_len_max.
// lengths (blocklstm's per-example lengths, each already capped at seq_len_max): row n runs
// lengths[n] steps; its outputs past them are zero, and its gradient takes nothing from there.
LSTMOut block_lstm(int64_t seq_len_max, const Array& x, const Array& cs_prev, const Array& h_prev, const Array& w, const Array& wci, const Array& wcf, const Array& wco, const Array& b, double forget_bias, double cell_clip, bool use_peephole, Layout layout, const std::vector<int64_t>* lengths = nullptr);
SeqGradOut block_lstm_grad(int64_t seq_len_max, const Array& x, const Array& cs_prev, const Array& h_prev, const Array& w, const Array& wci, const Array& wcf, const Array& wco, const Array& b, const Array& i, const Array& cs, const Array& f, const Array& o, const Array& ci, const Array& co, const Array& h, const Array& cs_grad, const Array& h_grad, bool use_peephole, Layout layout, const std::vector<int64_t>* lengths = nullptr);
Array to_array(const blocklstm::TensorView& t);               // f16/f32 host tensor -> double
blocklstm::Tensor to_tensor(const Array& a, blocklstm::DType dtype);  // rounds to dtype
}
