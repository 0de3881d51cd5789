// out[cols, rows] = in[rows, cols]^T. The grad ops on the GPU transpose w once per call, so that
// the recurrent product and x_grad read the rows of W^T contiguously (a copy of 4H(I+H) elements
// against 2 L B 4H (I+H) multiply-adds). The CPU's read W^T from panels packed from w's rows
// (generators/panels.cpp transpose=true) and run no transpose.
#include "generators/common.h"
#include "schedules/schedule.h"

namespace blocklstm::gen {

class Transpose : public KernelGenerator<Transpose> {
public:
    GeneratorParam<Type> dtype{"dtype", Float(32)};

    Input<Buffer<>> *in = nullptr;
    Output<Buffer<>> *out = nullptr;

    void configure() {
        in = add_input<Buffer<>>(args::transpose::in, dtype, 2);
        out = add_output<Buffer<>>(args::transpose::out, dtype, 2);
    }

    void generate() {
        Var x("x"), y("y");
        // The input, tile by tile (a shared-memory tile, which reads what it needs).
        Func staged("staged");
        staged(x, y) = (*in)(x, y);
        (*out)(x, y) = staged(y, x);
        schedules::schedule_transpose(*out, staged, x, y, machine());
    }
};

}  // namespace blocklstm::gen

HALIDE_REGISTER_GENERATOR(blocklstm::gen::Transpose, transpose)
