// Binds the cuda target's user-facing API (csrc/target/cuda/api.h) as _C.cuda, for
// dnnfusion/cuda.py; built into the extension only. Host data (weights for building, tensors for
// emulating) crosses as numpy views of CPU tensors (python/target_apis.h), results come back as
// numpy arrays; device pointers (data_ptr) and PyTorch's current stream (an integer handle from
// Python) cross as integers for launching, so this file needs neither a torch nor a CUDA header.
// Argument checking that names the user's mistake lives in dnnfusion/cuda.py; the checks here
// guard the pointers.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "python/target_apis.h"
#include "target/cuda/api.h"

namespace py = pybind11;
using namespace dnnfusion;

namespace {

// The array keeps `obj`'s memory alive while its pointer is in use.
py::array_t<float, py::array::c_style> host_f32(const py::handle& obj, int64_t numel, const char* what) {
  const std::string name = std::string("dnnfusion.cuda: ") + what;
  auto a = python::host_view<float>(obj, name);
  if (a.size() != numel)
    throw py::value_error(name + " must have " + std::to_string(numel) + " elements, got " + std::to_string(a.size()));
  return a;
}

const float* data_or_null(const py::object& a) {
  return a.is_none() ? nullptr : a.cast<py::array_t<float, py::array::c_style>>().data();
}

cuda::Activation parse_activation(const std::string& s) {
  if (s == "none") return cuda::Activation::none;
  if (s == "relu") return cuda::Activation::relu;
  if (s == "relu6") return cuda::Activation::relu6;
  throw py::value_error("dnnfusion.cuda: activation must be None, 'relu' or 'relu6', not '" + s + "'");
}

cuda::ConvShape to_shape(const py::dict& d) {
  cuda::ConvShape s;
  s.n = d["n"].cast<int64_t>(), s.c = d["c"].cast<int64_t>(), s.h = d["h"].cast<int64_t>(), s.w = d["w"].cast<int64_t>();
  s.k = d["k"].cast<int64_t>(), s.r = d["r"].cast<int64_t>(), s.s = d["s"].cast<int64_t>();
  s.stride_h = d["stride_h"].cast<int64_t>(), s.stride_w = d["stride_w"].cast<int64_t>();
  s.pad_h = d["pad_h"].cast<int64_t>(), s.pad_w = d["pad_w"].cast<int64_t>();
  s.dil_h = d["dil_h"].cast<int64_t>(), s.dil_w = d["dil_w"].cast<int64_t>();
  return s;
}

py::dict stats_dict(const cuda::SparseConvKernel& k) {
  const cuda::SparseConvStats& s = k.stats;
  py::dict d;
  d["weights"] = s.weights, d["nonzeros"] = s.nonzeros;
  d["density"] = s.weights ? double(s.nonzeros) / double(s.weights) : 0.0;
  d["ptx_fma"] = s.ptx_fma, d["ptx_fma_dense"] = s.ptx_fma_dense;
  d["sass_ffma"] = s.sass_ffma, d["sass_instructions"] = s.sass_instructions, d["sass_note"] = s.sass_note;
  d["registers"] = s.registers, d["spills"] = s.spill_bytes, d["cubin_bytes"] = s.cubin_bytes;
  d["tile"] = k.tile.key(), d["tile_shrinks"] = s.tile_shrinks, d["template_cache_hit"] = s.template_cache_hit;
  d["template_s"] = s.template_seconds, d["nvrtc_s"] = s.nvrtc_seconds;
  d["rewrite_s"] = s.rewrite_seconds, d["ptxas_s"] = s.ptxas_seconds;
  return d;
}

py::array_t<float> emulate(const cuda::SparseConvKernel& k, const py::object& x, const py::object& bias,
                           const py::object& residual, int threads) {
  const cuda::ConvShape& s = k.shape;
  const int64_t y_numel = s.n * s.k * s.out_h() * s.out_w();
  const auto xa = host_f32(x, s.n * s.c * s.h * s.w, "input");
  const py::object ba = bias.is_none() ? py::none() : py::object(host_f32(bias, s.k, "bias"));
  const py::object ra = residual.is_none() ? py::none() : py::object(host_f32(residual, y_numel, "residual"));
  py::array_t<float> y({s.n, s.k, s.out_h(), s.out_w()});
  const float* xp = xa.data();
  const float *bp = data_or_null(ba), *rp = data_or_null(ra);
  float* yp = y.mutable_data();
  {
    py::gil_scoped_release nogil;
    cuda::emulate_sparse_conv(k, xp, bp, rp, yp, threads);
  }
  return y;
}

void bind(py::module_& m) {
  py::class_<cuda::SparseConvKernel, std::shared_ptr<cuda::SparseConvKernel>>(m, "SparseConvKernel")
      .def_property_readonly("ptx", [](const cuda::SparseConvKernel& k) { return k.ptx; })
      .def_property_readonly("cubin", [](const cuda::SparseConvKernel& k) { return py::bytes(k.cubin); })
      .def_property_readonly("entry", [](const cuda::SparseConvKernel& k) { return k.entry; })
      .def_property_readonly("arch", [](const cuda::SparseConvKernel& k) { return k.arch; })
      .def_property_readonly("stats", &stats_dict)
      .def_property_readonly("launch_dims", [](const cuda::SparseConvKernel& k) {
        const auto& l = k.launch;
        return py::make_tuple(py::make_tuple(l.grid[0], l.grid[1], l.grid[2]),
                              py::make_tuple(l.block[0], l.block[1], l.block[2]));
      })
      .def("emulate", &emulate, py::arg("x"), py::arg("bias"), py::arg("residual"), py::arg("threads"))
      .def("launch", [](const cuda::SparseConvKernel& k, uint64_t x, uint64_t bias, uint64_t residual, uint64_t y,
                        uint64_t stream, int device) {
        py::gil_scoped_release nogil;
        cuda::launch_sparse_conv(k, x, bias, residual, y, reinterpret_cast<void*>(stream), device);
      });
  m.def("build_sparse_conv", [](const py::object& weight, const py::dict& shape, bool bias, bool residual,
                                const std::string& activation, const std::string& arch, const std::string& cache_dir) {
    const cuda::ConvShape s = to_shape(shape);
    const auto wa = host_f32(weight, s.k * s.c * s.r * s.s, "weight");
    const float* w = wa.data();
    cuda::Epilogue e{bias, residual, parse_activation(activation)};
    cuda::SparseConvOptions o{arch, cache_dir};
    py::gil_scoped_release nogil;
    return std::const_pointer_cast<cuda::SparseConvKernel>(cuda::build_sparse_conv(s, e, w, o));
  });
  m.def("add_tool_dir", &cuda::add_cuda_tool_dir);
  m.def("add_nvrtc_dir", &cuda::add_nvrtc_search_dir);
  m.def("find_tool", &cuda::find_cuda_tool);
  m.def("known_archs", &cuda::known_archs);
  m.def("supported_archs", &cuda::supported_archs);
  m.def("nvrtc_path", []() { return cuda::nvrtc_info().path; });
  m.def("driver_unavailable_reason", &cuda::driver_unavailable_reason);
  m.def("device_arch", &cuda::device_arch);
}

const bool registered = python::register_target_api("cuda", &bind);

}  // namespace
