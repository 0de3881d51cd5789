// blocklstm._core: the op registry (blocklstm/ops.h) for Python. Every op is called by name with
// its tensors by TF name, so the six Python functions are generated from the registry
// (python/blocklstm/__init__.py) and no op signature is written here.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/set.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <set>
#include <type_traits>

#include <blocklstm/blocklstm.h>
#include <blocklstm/ops.h>

namespace nb = nanobind;
using namespace blocklstm;

namespace {

// An error of the caller's arguments: Python's ValueError, with the library's message.
struct ArgumentError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::string dtype_name(const nb::dlpack::dtype &t) {
    // DLPack's type codes, in their order (dlpack.h: DLDataTypeCode).
    static const char *kinds[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
    if (t.code == 6) return "bool";
    const std::string kind = t.code < 7 ? kinds[t.code] : "code" + std::to_string(t.code) + "_";
    return kind + std::to_string(t.bits);
}

// The framework the allocating form returns its outputs in: x's, where nanobind can make its arrays
// (NumPy, torch, CuPy, JAX, TensorFlow); for another DLPack producer NumPy, which holds CPU memory
// only, so such an x on a GPU is refused.
enum class Framework { numpy, torch, cupy, jax, tensorflow };
Framework framework_of(const std::string &op, const nb::handle &x, Device device) {
    const std::string type = nb::cast<std::string>(nb::type_name(x.type()));
    auto from = [&](const char *module) { return type.rfind(module, 0) == 0; };
    if (from("torch.")) return Framework::torch;
    if (from("cupy.")) return Framework::cupy;
    if (from("jax.") || from("jaxlib.")) return Framework::jax;
    if (from("tensorflow.")) return Framework::tensorflow;
    if (device == Device::cuda)
        throw ArgumentError(op + ": argument 'x' is a CUDA array of type " + type +
                            ": expected torch, CuPy, JAX or TensorFlow, whose arrays the outputs can be");
    return Framework::numpy;
}

// NumPy has no bfloat16 that DLPack or the buffer protocol carry: the Python layer passes an
// ml_dtypes.bfloat16 array as its uint16 view and names it here (and takes bfloat16 outputs back
// as uint16 arrays, viewed as bfloat16).
using Bfloat16Names = std::set<std::string>;

// A view of a C-contiguous float32/float16/bfloat16 array on the CPU or a CUDA device, zero-copy.
// Array: nb::ndarray<nb::ro> for inputs (read-only arrays are fine: inputs are never written), or
// nb::ndarray<> for outputs.
template <typename Array>
TensorView view_of(const std::string &op, const std::string &name, const Array &a, const Bfloat16Names &bfloat16) {
    const std::string arg = op + ": argument '" + name + "'";
    TensorView v;
    if (a.dtype() == nb::dtype<float>()) v.dtype = DType::f32;
    else if (a.dtype().code == uint8_t(nb::dlpack::dtype_code::Float) && a.dtype().bits == 16) v.dtype = DType::f16;
    else if (a.dtype().code == uint8_t(nb::dlpack::dtype_code::Bfloat) && a.dtype().bits == 16) v.dtype = DType::bf16;
    else if (a.dtype() == nb::dtype<uint16_t>() && bfloat16.count(name)) v.dtype = DType::bf16;
    else if (name == "seq_lengths" && a.dtype() == nb::dtype<int32_t>()) v.dtype = DType::i32;
    else if (name == "seq_lengths" && a.dtype() == nb::dtype<int64_t>()) v.dtype = DType::i64;
    else throw ArgumentError(arg + (name == "seq_lengths" ? ": expected int32 or int64 data, got "
                                                          : ": expected float32, float16 or bfloat16 data, got ") +
                             dtype_name(a.dtype()));
    if (a.device_type() == nb::device::cpu::value) v.device = Device::cpu;
    else if (a.device_type() == nb::device::cuda::value) v.device = Device::cuda;
    else throw ArgumentError(arg + ": expected a CPU or CUDA tensor, got DLPack device type " +
                             std::to_string(a.device_type()));
    int64_t expected_stride = 1;
    const bool empty = a.size() == 0;  // any strides (NumPy gives empty arrays zero strides)
    for (std::size_t d = a.ndim(); d-- > 0 && !empty;) {
        if (a.shape(d) > 1 && a.stride(d) != expected_stride)
            throw ArgumentError(arg + " is not C-contiguous: expected a dense row-major array (call .contiguous() or numpy.ascontiguousarray)");
        expected_stride *= static_cast<int64_t>(a.shape(d));
    }
    for (std::size_t d = 0; d < a.ndim(); ++d) v.shape.push_back(static_cast<int64_t>(a.shape(d)));
    v.data = const_cast<void *>(a.data());
    return v;
}

// An owned tensor handed to Python zero-copy: the array keeps the Tensor (its storage) alive.
template <typename Framework>
nb::object to_array(Tensor t, int32_t device_id) {
    auto *owned = new Tensor(std::move(t));
    nb::capsule owner(owned, [](void *p) noexcept { delete static_cast<Tensor *>(p); });
    std::vector<size_t> shape(owned->shape().begin(), owned->shape().end());
    constexpr bool numpy = std::is_same_v<Framework, nb::numpy>;  // bfloat16 as uint16 (Bfloat16Names)
    const nb::dlpack::dtype dt =
        owned->dtype() == DType::f32    ? nb::dtype<float>()
        : owned->dtype() == DType::f16  ? nb::dlpack::dtype{uint8_t(nb::dlpack::dtype_code::Float), 16, 1}
        : numpy                         ? nb::dtype<uint16_t>()
                                        : nb::dlpack::dtype{uint8_t(nb::dlpack::dtype_code::Bfloat), 16, 1};
    const int device = owned->device() == Device::cuda ? nb::device::cuda::value : nb::device::cpu::value;
    return nb::ndarray<Framework>(owned->data(), shape.size(), shape.data(), owner, nullptr, dt, device, device_id)
        .cast();
}

// Why `value` is not an array of the kind a call takes: what DLPack cannot describe of a NumPy
// array (its byte order, strides that are not whole elements), a read-only output, or not an
// array at all.
// What refuses a tensor before it is asked for DLPack (whose own errors for these, a meta tensor's
// among them, do not reach the caller as such): autograd, or a device other than a CPU or CUDA one.
// A DLPack capsule (blocklstm.torch passes its tensors so) has neither, and asking for them raised
// and formatted two AttributeErrors per tensor: about 2 us each, 40 % of a small cell op's call.
std::string refused_tensor(const nb::handle &value) {
    if (PyCapsule_CheckExact(value.ptr())) return "";
    if (nb::hasattr(value, "requires_grad") && PyObject_IsTrue(nb::object(value.attr("requires_grad")).ptr()) == 1)
        return " requires grad: expected a tensor without autograd (pass .detach(), or call the op through "
               "blocklstm.torch, whose ops have TF's gradients)";
    if (nb::hasattr(value, "device")) {
        const nb::object device = value.attr("device");
        if (nb::hasattr(device, "type")) {
            const std::string type = nb::str(nb::object(device.attr("type"))).c_str();
            if (type != "cpu" && type != "cuda")
                return std::string(" is on device ") + nb::str(device).c_str() + ": expected a CPU or CUDA tensor";
        }
    }
    PyErr_Clear();  // PyObject_IsTrue's, if any
    return "";
}

std::string why_not_an_array(const nb::handle &value, bool output) {
    if (nb::hasattr(value, "dtype") && nb::hasattr(value, "strides") && nb::hasattr(value, "itemsize")) {
        const nb::object dtype = value.attr("dtype");
        if (nb::hasattr(dtype, "isnative") && !nb::cast<bool>(dtype.attr("isnative")))
            return " has dtype " + nb::cast<std::string>(nb::str(dtype)) +
                   ", not in this machine's byte order: expected a native-endian array (a.astype(a.dtype.newbyteorder('=')))";
        const nb::object itemsize = value.attr("itemsize"), strides = value.attr("strides");
        for (nb::handle stride : strides) {
            if (nb::cast<int64_t>(stride % itemsize) != 0)
                return " has strides " + nb::cast<std::string>(nb::str(strides)) +
                       " that are not whole elements: expected a dense row-major array (numpy.ascontiguousarray)";
        }
        if (output && nb::hasattr(value, "flags") && !nb::cast<bool>(value.attr("flags").attr("writeable")))
            return " is read-only: expected a writable array for an output";
    }
    return ": expected an array (NumPy, or any DLPack tensor), got " + nb::cast<std::string>(nb::type_name(value.type()));
}

template <typename Array>
std::map<std::string, TensorView> views(const std::string &op, const nb::dict &tensors, std::vector<Array> &keep,
                                        bool output, const Bfloat16Names &bfloat16) {
    std::map<std::string, TensorView> out;
    for (auto [key, value] : tensors) {
        const std::string name = nb::cast<std::string>(key);
        if (const std::string why = refused_tensor(value); !why.empty())
            throw ArgumentError(op + ": argument '" + name + "'" + why);
        Array a;
        if (!nb::try_cast(value, a))
            throw ArgumentError(op + ": argument '" + name + "'" + why_not_an_array(value, output));
        keep.push_back(a);
        out[name] = view_of(op, name, a, bfloat16);
    }
    return out;
}

nb::dict arg_info(const OpArg &a) {
    nb::dict d;
    d["name"] = a.name;
    d["shape"] = a.shape;
    return d;
}

}  // namespace

NB_MODULE(_core, m) {
    m.doc() = "blocklstm's C++ library: the op registry and calls by name";
    nb::register_exception_translator([](const std::exception_ptr &p, void *) {
        try {
            std::rethrow_exception(p);
        } catch (const ArgumentError &e) {
            PyErr_SetString(PyExc_ValueError, e.what());
        } catch (const Error &e) {
            PyErr_SetString(PyExc_ValueError, e.what());
        }
    });

    m.def("ops", [] {
        nb::list out;
        for (const OpInfo &op : ops()) {
            nb::dict d;
            d["name"] = op.name;
            d["summary"] = op.summary;
            d["sequence"] = op.sequence;
            d["gradient"] = op.gradient;
            d["layout"] = op.layout;
            nb::list in, outs;
            for (const OpArg &a : op.inputs) in.append(arg_info(a));
            for (const OpArg &a : op.outputs) outs.append(arg_info(a));
            nb::list optional;
            for (const OpArg &a : op.optional_inputs) optional.append(arg_info(a));
            d["inputs"] = in;
            d["optional_inputs"] = optional;
            d["outputs"] = outs;
            d["forget_bias"] = op.forget_bias;
            d["cell_clip"] = op.cell_clip;
            d["forward_op"] = op.forward_op;
            out.append(d);
        }
        return out;
    }, "Every op: its inputs and outputs (TF names and shapes), attr defaults, layout.");

    // outputs None: allocated by the library and returned zero-copy as arrays of x's framework
    // (framework_of); else written into the given arrays.
    m.def("invoke",
          [](const std::string &op, int64_t seq_len_max, const nb::dict &inputs,
             std::optional<nb::dict> outputs, std::optional<float> forget_bias,
             std::optional<float> cell_clip, bool use_peephole, const Bfloat16Names &bfloat16) -> nb::object {
              std::vector<nb::ndarray<nb::ro>> keep_inputs;
              std::vector<nb::ndarray<>> keep_outputs;
              const auto in = views(op, inputs, keep_inputs, false, bfloat16);
              OpAttrs attrs{forget_bias, cell_clip, use_peephole};

              if (outputs) {
                  const auto out = views(op, *outputs, keep_outputs, true, bfloat16);
                  nb::gil_scoped_release no_gil;
                  invoke(op, seq_len_max, in, out, attrs);
                  return nb::none();
              }
              const auto x = in.find("x");
              const Framework framework = x == in.end() || !inputs.contains("x")
                                              ? Framework::numpy
                                              : framework_of(op, inputs["x"], x->second.device);
              std::map<std::string, Tensor> result;
              {
                  nb::gil_scoped_release no_gil;
                  result = invoke(op, seq_len_max, in, attrs);
              }
              // The outputs are on the inputs' device (all inputs share one; CPU: 0).
              const int32_t device_id = keep_inputs.empty() ? 0 : keep_inputs.front().device_id();
              nb::dict d;
              for (auto &[name, t] : result) {
                  switch (framework) {
                  case Framework::torch: d[name.c_str()] = to_array<nb::pytorch>(std::move(t), device_id); break;
                  case Framework::cupy: d[name.c_str()] = to_array<nb::cupy>(std::move(t), device_id); break;
                  case Framework::jax: d[name.c_str()] = to_array<nb::jax>(std::move(t), device_id); break;
                  case Framework::tensorflow:
                      d[name.c_str()] = to_array<nb::tensorflow>(std::move(t), device_id);
                      break;
                  case Framework::numpy: d[name.c_str()] = to_array<nb::numpy>(std::move(t), device_id); break;
                  }
              }
              return d;
          },
          nb::arg("op"), nb::arg("seq_len_max"), nb::arg("inputs"), nb::arg("outputs").none(),
          nb::arg("forget_bias").none(), nb::arg("cell_clip").none(), nb::arg("use_peephole"),
          nb::arg("bfloat16") = Bfloat16Names{});

    // Two calls of one op with the same attrs on two sets of tensors, each into given outputs, at
    // once where the library runs them side by side (invoke_side_by_side).
    m.def("invoke_side_by_side",
          [](const std::string &op, int64_t seq_len_max, const std::array<nb::dict, 2> &inputs,
             const std::array<nb::dict, 2> &outputs, std::optional<float> forget_bias,
             std::optional<float> cell_clip, bool use_peephole, const Bfloat16Names &bfloat16) {
              std::vector<nb::ndarray<nb::ro>> keep_inputs;
              std::vector<nb::ndarray<>> keep_outputs;
              std::array<OpCall, 2> calls;
              for (std::size_t k = 0; k < 2; ++k)
                  calls[k] = {op, seq_len_max, views(op, inputs[k], keep_inputs, false, bfloat16),
                              views(op, outputs[k], keep_outputs, true, bfloat16),
                              OpAttrs{forget_bias, cell_clip, use_peephole}};
              nb::gil_scoped_release no_gil;
              invoke_side_by_side(calls[0], calls[1]);
          },
          nb::arg("op"), nb::arg("seq_len_max"), nb::arg("inputs"), nb::arg("outputs"),
          nb::arg("forget_bias").none(), nb::arg("cell_clip").none(), nb::arg("use_peephole"),
          nb::arg("bfloat16") = Bfloat16Names{});

    // ReverseSequence into a new array of input's framework, or into `output`.
    m.def("reverse_sequence",
          [](nb::handle input, nb::handle seq_lengths, std::optional<nb::handle> output,
             const Bfloat16Names &bfloat16) -> nb::object {
              const std::string op = "ReverseSequence";
              std::vector<nb::ndarray<nb::ro>> keep;
              std::vector<nb::ndarray<>> keep_out;
              nb::dict in;
              in["input"] = input;
              in["seq_lengths"] = seq_lengths;
              const auto v = views(op, in, keep, false, bfloat16);
              if (output) {
                  nb::dict out;
                  out["output"] = *output;
                  const auto o = views(op, out, keep_out, true, bfloat16);
                  nb::gil_scoped_release no_gil;
                  ReverseSequence(v.at("input"), v.at("seq_lengths"), o.at("output"));
                  return nb::none();
              }
              const Framework framework = framework_of(op, input, v.at("input").device);
              Tensor t;
              {
                  nb::gil_scoped_release no_gil;
                  t = ReverseSequence(v.at("input"), v.at("seq_lengths"));
              }
              const int32_t device_id = keep.front().device_id();
              switch (framework) {
              case Framework::torch: return to_array<nb::pytorch>(std::move(t), device_id);
              case Framework::cupy: return to_array<nb::cupy>(std::move(t), device_id);
              case Framework::jax: return to_array<nb::jax>(std::move(t), device_id);
              case Framework::tensorflow: return to_array<nb::tensorflow>(std::move(t), device_id);
              case Framework::numpy: break;
              }
              return to_array<nb::numpy>(std::move(t), device_id);
          },
          nb::arg("input"), nb::arg("seq_lengths"), nb::arg("output").none() = nb::none(),
          nb::arg("bfloat16") = Bfloat16Names{});

    m.def("set_cuda_stream", [](uintptr_t stream) { set_cuda_stream(reinterpret_cast<CudaStream>(stream)); },
          "The CUDA stream this thread's calls run on (0: the legacy default stream).");
    m.def("cuda_stream", [] { return reinterpret_cast<uintptr_t>(cuda_stream()); },
          "This thread's CUDA stream (set_cuda_stream).");
    m.def("cuda_available", [] { return cuda_device_count() > 0; });
    m.def("cuda_built", [] { return cuda_built(); });
    m.def("cuda_seq_lengths", [] { return cuda_seq_lengths(); });
    m.def("cuda_unavailable_reason", [] { return cuda_unavailable_reason(); });
    m.def("cuda_release_memory", [] { cuda_release_memory(); });
    m.def("cuda_graph_stats", [] {
        const CudaGraphStats s = cuda_graph_stats();
        nb::dict d;
        d["direct"] = s.direct, d["captures"] = s.captures, d["updates"] = s.updates;
        d["launches"] = s.launches, d["failures"] = s.failures;
        return d;
    });
    m.def("cpu_target_in_use", [] { return cpu_target_in_use(); });
    m.def("cpu_target_pinned", [] { return cpu_target_pinned(); });
    m.def("set_cpu_target", [](const std::string &target) { set_cpu_target(target); }, nb::arg("target"));
    m.def("cpu_targets", [] {
        nb::list out;
        for (const CpuTarget &t : cpu_targets()) {
            nb::dict d;
            d["name"] = t.name;
            d["halide_target"] = t.halide_target;
            d["tuning_table"] = t.tuning_table;
            d["tuned_on"] = t.tuned_on;
            d["check_only"] = t.check_only;
            d["bf16_dot_products"] = t.bf16_dot_products;
            d["amx_products"] = t.amx_products;
            d["other_dtypes_as"] = t.other_dtypes_as;
            d["tuned_for"] = t.tuned_for;
            d["tuned_for_this_cpu"] = t.tuned_for_this_cpu;
            d["runs_here"] = t.runs_here;
            d["missing"] = t.missing;
            out.append(d);
        }
        return out;
    });
    m.def("set_num_threads", [](int threads) { set_num_threads(threads); }, nb::arg("threads"));
    m.def("set_thread_pool", [](const std::string &pool) { set_thread_pool(pool); }, nb::arg("pool"));
    m.def("thread_pool_in_use", [] { return thread_pool_in_use(); });
    m.def("set_host_cache_limit", [](int64_t max_bytes) {
        if (max_bytes < 0)
            throw ArgumentError("set_host_cache_limit: max_bytes is " + std::to_string(max_bytes) +
                                ": expected 0 (keep none) or more");
        set_host_cache_limit(static_cast<std::size_t>(max_bytes));
    }, nb::arg("max_bytes"));
    m.def("host_cache_bytes", [] { return host_cache_bytes(); });
    m.attr("__version__") = version();
}
