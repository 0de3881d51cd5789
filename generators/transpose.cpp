// out[cols, rows] = in[rows, cols]^T. The grad ops transpose w once per call, so that the
// recurrent product and x_grad read the rows of W^T contiguously (a copy of 4H(I+H) elements
// against 2 L B 4H (I+H) multiply-adds).
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
        // The input, tile by tile. The CPU's register tiles are whole at the edges too, so there
        // the reads are clamped (schedules/cpu.h); a GPU's shared-memory tile reads what it needs.
        Func staged("staged");
        staged(x, y) = get_target().has_gpu_feature()
                           ? (*in)(x, y)
                           : (*in)(min(likely(x), in->dim(0).extent() - 1), min(likely(y), in->dim(1).extent() - 1));
        (*out)(x, y) = staged(y, x);
        schedules::schedule_transpose(*out, staged, x, y, machine());
    }
};

}  // namespace blocklstm::gen

HALIDE_REGISTER_GENERATOR(blocklstm::gen::Transpose, transpose)
