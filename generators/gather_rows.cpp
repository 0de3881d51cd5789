// out[r, :] = index[r] >= 0 ? in[index[r], :] : 0: rows of a matrix gathered by an index. The
// sequence ops with seq_lengths put a batch's rows in length order and back, and pack the rows
// each step runs, with it (one launch where a copy per row cost a call per row); ReverseSequence
// reverses each row within its length with it. Memory-bound: vectors along the row, rows in
// parallel (schedules/schedule.h).
#include "generators/common.h"
#include "schedules/schedule.h"

namespace blocklstm::gen {

class GatherRows : public KernelGenerator<GatherRows> {
public:
    GeneratorParam<Type> dtype{"dtype", Float(32)};

    Input<Buffer<>> *in = nullptr, *index = nullptr;
    Output<Buffer<>> *out = nullptr;

    void configure() {
        namespace a = args::gather_rows;
        in = add_input<Buffer<>>(a::in, dtype, 2);          // [rows_in, width]
        index = add_input<Buffer<>>(a::index, Int(32), 1);  // [rows_out]: a row of in, or -1: zeros
        out = add_output<Buffer<>>(a::out, dtype, 2);       // [rows_out, width]
    }

    void generate() {
        Var c("c"), r("r");
        Expr row = (*index)(r);
        Expr from = clamp(row, 0, in->dim(1).extent() - 1);  // read only where row >= 0
        (*out)(c, r) = select(row >= 0, (*in)(c, from), stored(dtype, 0));
        schedules::schedule_gather_rows(*out, c, r, machine());
    }
};

}  // namespace blocklstm::gen

HALIDE_REGISTER_GENERATOR(blocklstm::gen::GatherRows, gather_rows)
