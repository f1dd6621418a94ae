// Binds the int8 quantization core (csrc/quant: calibration histograms and thresholds, the
// requantization rule, weight/bias quantization, batch-norm folding) as _C.quant, for
// dnnfusion/quantize.py. Tensors cross as contiguous CPU arrays of the exact dtype each function
// names (float32 data, int32 accumulators); anything else is a ValueError naming the argument and
// what is accepted, so no conversion happens behind the caller's back. Errors of the core
// (InvalidInput) reach Python as _C.InvalidInput, itself a ValueError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <cstring>
#include <string>
#include <vector>

#include "quant/calibration.h"
#include "quant/quantize_weights.h"
#include "quant/requant.h"
#include "target_apis.h"

namespace py = pybind11;
using namespace dnnfusion;

namespace {

// torch's Python spelling ("float32"), the one users see in their own code.
std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}

std::string describe(const at::Tensor& t) {
  return dtype_name(t.scalar_type()) + " on " + t.device().str() +
         (t.is_contiguous() ? "" : " (not contiguous)");
}

void check_tensor(const at::Tensor& t, at::ScalarType want, const char* what) {
  if (!t.defined() || !t.device().is_cpu() || t.scalar_type() != want || !t.is_contiguous())
    throw py::value_error(std::string("dnnfusion.quant: ") + what + " must be a contiguous " +
                          dtype_name(want) + " CPU tensor, got " + (t.defined() ? describe(t) : "an undefined tensor"));
}

const float* f32(const at::Tensor& t, const char* what) {
  check_tensor(t, at::kFloat, what);
  return t.data_ptr<float>();
}

std::vector<float> f32_vector(const at::Tensor& t, const char* what) {
  const float* p = f32(t, what);
  return std::vector<float>(p, p + t.numel());
}

// A float32 buffer from a torch tensor or a numpy array (no copy); the owner stays referenced by
// the caller's argument for the duration of the call.
std::pair<const float*, int64_t> float_buffer(const py::object& obj, const char* what) {
  if (py::isinstance<py::array>(obj)) {
    auto a = py::reinterpret_borrow<py::array>(obj);
    if (!py::isinstance<py::array_t<float>>(obj) || !(a.flags() & py::array::c_style))
      throw py::value_error(std::string("dnnfusion.quant: ") + what +
                            " must be a C-contiguous float32 numpy array, got dtype " +
                            py::str(a.dtype()).cast<std::string>() +
                            ((a.flags() & py::array::c_style) ? "" : " (not C-contiguous)"));
    return {static_cast<const float*>(a.data()), static_cast<int64_t>(a.size())};
  }
  at::Tensor t;
  try {
    t = obj.cast<at::Tensor>();
  } catch (const py::cast_error&) {
    throw py::value_error(std::string("dnnfusion.quant: ") + what +
                          " must be a float32 CPU torch tensor or numpy array, got " +
                          py::str(py::type::of(obj)).cast<std::string>());
  }
  return {f32(t, what), t.numel()};
}

std::vector<double> double_vector(const py::object& obj) {
  if (py::isinstance<py::array>(obj) || py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj))
    return obj.cast<std::vector<double>>();
  at::Tensor t;
  try {
    t = obj.cast<at::Tensor>();
  } catch (const py::cast_error&) {
    throw py::value_error("dnnfusion.quant: histogram counts must be a sequence, numpy array or tensor of numbers");
  }
  if (!t.device().is_cpu() || !(t.is_floating_point() || t.scalar_type() == at::kLong || t.scalar_type() == at::kInt))
    throw py::value_error("dnnfusion.quant: histogram counts must be a real-valued CPU tensor, got " + describe(t));
  at::Tensor d = t.to(at::kDouble).contiguous().reshape({-1});
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

at::Tensor to_tensor(const std::vector<double>& v) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kDouble);
  if (!v.empty()) std::memcpy(t.data_ptr<double>(), v.data(), v.size() * sizeof(double));
  return t;
}

py::tuple threshold_tuple(const quant::Threshold& t) { return py::make_tuple(t.threshold, t.scale); }

quant::Requant checked_requant(int64_t multiplier, int64_t shift) {
  if (multiplier < 0 || multiplier > 2147483647LL || shift < 0 || shift > 31)
    throw py::value_error("dnnfusion.quant: requantization needs a multiplier in [0, 2^31) and a shift in [0, 31], got (" +
                          std::to_string(multiplier) + ", " + std::to_string(shift) + ")");
  return quant::Requant{static_cast<int32_t>(multiplier), static_cast<int32_t>(shift)};
}

void check_bounds(int64_t lo, int64_t hi) {
  if (lo < -128 || hi > 127 || lo > hi)
    throw py::value_error("dnnfusion.quant: requantization bounds must satisfy -128 <= lo <= hi <= 127 (int8 output), got [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

at::Tensor requantize_tensor(const at::Tensor& acc, int64_t multiplier, int64_t shift, int64_t lo, int64_t hi) {
  check_tensor(acc, at::kInt, "accumulator");
  const quant::Requant r = checked_requant(multiplier, shift);
  check_bounds(lo, hi);
  at::Tensor y = at::empty(acc.sizes(), at::kChar);
  const int32_t* a = acc.data_ptr<int32_t>();
  int8_t* o = y.data_ptr<int8_t>();
  const int64_t n = acc.numel();
  py::gil_scoped_release nogil;
  for (int64_t k = 0; k < n; ++k) o[k] = static_cast<int8_t>(quant::requantize(a[k], r, int32_t(lo), int32_t(hi)));
  return y;
}

// Per-channel: multipliers[c] / shifts[c] apply along dimension `dim` of acc.
at::Tensor requantize_per_channel(const at::Tensor& acc, const at::Tensor& multipliers, const at::Tensor& shifts,
                                  int64_t dim, int64_t lo, int64_t hi) {
  check_tensor(acc, at::kInt, "accumulator");
  check_tensor(multipliers, at::kInt, "multipliers");
  check_tensor(shifts, at::kInt, "shifts");
  check_bounds(lo, hi);
  const int64_t rank = acc.dim();
  if (rank == 0 || dim < -rank || dim >= rank)
    throw py::value_error("dnnfusion.quant: channel dimension " + std::to_string(dim) + " is out of range for an accumulator of rank " +
                          std::to_string(rank));
  if (dim < 0) dim += rank;
  const int64_t channels = acc.size(dim);
  if (multipliers.numel() != channels || shifts.numel() != channels)
    throw py::value_error("dnnfusion.quant: per-channel requantization needs " + std::to_string(channels) +
                          " multipliers and shifts (size of dimension " + std::to_string(dim) + "), got " +
                          std::to_string(multipliers.numel()) + " and " + std::to_string(shifts.numel()));
  std::vector<quant::Requant> rq(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c)
    rq[c] = checked_requant(multipliers.data_ptr<int32_t>()[c], shifts.data_ptr<int32_t>()[c]);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= acc.size(d);
  for (int64_t d = dim + 1; d < rank; ++d) inner *= acc.size(d);
  at::Tensor y = at::empty(acc.sizes(), at::kChar);
  const int32_t* a = acc.data_ptr<int32_t>();
  int8_t* out = y.data_ptr<int8_t>();
  py::gil_scoped_release nogil;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t base = (o * channels + c) * inner;
      for (int64_t i = 0; i < inner; ++i)
        out[base + i] = static_cast<int8_t>(quant::requantize(a[base + i], rq[c], int32_t(lo), int32_t(hi)));
    }
  return y;
}

// dim 0 is the output channel; the rest is flattened.
std::pair<int64_t, int64_t> weight_dims(const at::Tensor& w, const char* what) {
  if (w.dim() < 1 || w.numel() == 0)
    throw py::value_error(std::string("dnnfusion.quant: ") + what +
                          " must have at least one dimension (dim 0 = output channel) and no zero-size dimension");
  return {w.size(0), w.numel() / w.size(0)};
}

py::tuple quantize_weights(const at::Tensor& w, bool per_channel) {
  const float* p = f32(w, "weight");
  const auto [channels, inner] = weight_dims(w, "weight");
  quant::QuantizedWeights qw = quant::quantize_weights(p, channels, inner, per_channel);
  at::Tensor q = at::empty(w.sizes(), at::kChar);
  std::memcpy(q.data_ptr<int8_t>(), qw.q.data(), qw.q.size());
  at::Tensor s = at::empty({static_cast<int64_t>(qw.scales.size())}, at::kFloat);
  std::memcpy(s.data_ptr<float>(), qw.scales.data(), qw.scales.size() * sizeof(float));
  return py::make_tuple(q, s);
}

py::tuple quantize_bias(const at::Tensor& b, double in_scale, const at::Tensor& w_scales) {
  const float* p = f32(b, "bias");
  if (b.dim() != 1) throw py::value_error("dnnfusion.quant: bias must be 1-D (one value per output channel), got " +
                                          std::to_string(b.dim()) + "-D");
  quant::QuantizedBias qb = quant::quantize_bias(p, b.numel(), in_scale, f32_vector(w_scales, "weight scales"));
  at::Tensor q = at::empty({b.numel()}, at::kInt);
  std::memcpy(q.data_ptr<int32_t>(), qb.q.data(), qb.q.size() * sizeof(int32_t));
  return py::make_tuple(q, qb.saturated);
}

py::tuple fold_batch_norm(const at::Tensor& w, const at::Tensor& b, const at::Tensor& gamma, const at::Tensor& beta,
                          const at::Tensor& mean, const at::Tensor& var, double eps) {
  f32(w, "weight");
  const auto [channels, inner] = weight_dims(w, "weight");
  const char* names[] = {"bias", "gamma", "beta", "running mean", "running var"};
  const at::Tensor* per_channel[] = {&b, &gamma, &beta, &mean, &var};
  for (int k = 0; k < 5; ++k) {
    f32(*per_channel[k], names[k]);
    if (per_channel[k]->numel() != channels)
      throw py::value_error(std::string("dnnfusion.quant: batch-norm folding: ") + names[k] + " has " +
                            std::to_string(per_channel[k]->numel()) + " values, the weight has " +
                            std::to_string(channels) + " output channels");
  }
  at::Tensor fw = w.clone(), fb = b.clone();
  quant::fold_batch_norm(fw.data_ptr<float>(), fb.data_ptr<float>(), channels, inner, gamma.data_ptr<float>(),
                         beta.data_ptr<float>(), mean.data_ptr<float>(), var.data_ptr<float>(), eps);
  return py::make_tuple(fw, fb);
}

py::tuple layer_requant(double in_scale, const at::Tensor& w_scales, double out_scale, int64_t channels) {
  const std::vector<quant::Requant> r =
      quant::layer_requant(in_scale, f32_vector(w_scales, "weight scales"), out_scale, channels);
  at::Tensor m = at::empty({static_cast<int64_t>(r.size())}, at::kInt), s = at::empty_like(m);
  for (size_t k = 0; k < r.size(); ++k) m.data_ptr<int32_t>()[k] = r[k].multiplier, s.data_ptr<int32_t>()[k] = r[k].shift;
  return py::make_tuple(m, s);
}

void bind_histogram(py::module_& m) {
  py::class_<quant::Histogram>(m, "Histogram")
      .def(py::init<int, double>(), py::arg("bins") = quant::kHistogramBins, py::arg("initial_range") = 0.0)
      .def_static(
          "from_counts",
          [](const py::object& counts, double range, double max_abs) {
            return quant::Histogram::from_counts(double_vector(counts), range, max_abs);
          },
          py::arg("counts"), py::arg("range"), py::arg("max_abs") = -1.0)
      .def(
          "add",
          [](quant::Histogram& h, const py::object& data) {
            const auto [p, n] = float_buffer(data, "calibration data");
            py::gil_scoped_release nogil;
            h.add(p, n);
          },
          py::arg("data"))
      .def_property_readonly("bins", &quant::Histogram::bins)
      .def_property_readonly("range", &quant::Histogram::range)
      .def_property_readonly("bin_width", &quant::Histogram::bin_width)
      .def_property_readonly("max_abs", &quant::Histogram::max_abs)
      .def_property_readonly("total", &quant::Histogram::total)
      .def_property_readonly("zeros", &quant::Histogram::zeros)
      .def_property_readonly("empty", &quant::Histogram::empty)
      .def("counts", [](const quant::Histogram& h) { return to_tensor(h.counts()); });
}

void bind(py::module_& m) {
  m.attr("HISTOGRAM_BINS") = quant::kHistogramBins;
  m.attr("QUANT_LEVELS") = quant::kQuantLevels;
  m.attr("ZERO_DATA_THRESHOLD") = quant::kZeroDataThreshold;
  m.attr("KL_EPSILON") = quant::kKlEpsilon;
  m.attr("ZERO_CHANNEL_SCALE") = quant::kZeroChannelScale;
  m.attr("BIAS_MAX") = quant::kBiasMax;
  bind_histogram(m);
  m.def("calib_methods", [] { return std::vector<std::string>{"kl", "minmax", "percentile"}; });
  m.def("parse_method", [](const std::string& s) { return std::string(quant::calib_method_name(quant::parse_calib_method(s))); });
  m.def("kl_threshold", [](const quant::Histogram& h) {
    quant::Threshold t;
    {
      py::gil_scoped_release nogil;
      t = quant::kl_threshold(h);
    }
    return threshold_tuple(t);
  });
  m.def("kl_divergences", [](const quant::Histogram& h) {
    std::vector<double> kl;
    {
      py::gil_scoped_release nogil;
      kl = quant::kl_divergences(h);
    }
    return to_tensor(kl);
  });
  m.def("minmax_threshold", [](const quant::Histogram& h) { return threshold_tuple(quant::minmax_threshold(h)); });
  m.def("percentile_threshold",
        [](const quant::Histogram& h, double p) { return threshold_tuple(quant::percentile_threshold(h, p)); },
        py::arg("hist"), py::arg("percentile") = quant::kDefaultPercentile);
  m.def("threshold",
        [](const quant::Histogram& h, const std::string& method, double p) {
          const quant::CalibMethod cm = quant::parse_calib_method(method);
          quant::Threshold t;
          {
            py::gil_scoped_release nogil;
            t = quant::compute_threshold(h, cm, p);
          }
          return threshold_tuple(t);
        },
        py::arg("hist"), py::arg("method") = "kl", py::arg("percentile") = quant::kDefaultPercentile);
  m.def("choose_multiplier", [](double s) {
    const quant::Requant r = quant::choose_multiplier(s);
    return py::make_tuple(r.multiplier, r.shift);
  });
  m.def("relu6_bound", [](double out_scale) {
    if (!(out_scale > 0) || !std::isfinite(out_scale))
      throw py::value_error("dnnfusion.quant: the output scale must be finite and > 0, got " + std::to_string(out_scale));
    return quant::relu6_bound(out_scale);
  });
  m.def("requantize", &requantize_tensor, py::arg("acc"), py::arg("multiplier"), py::arg("shift"), py::arg("lo") = -128,
        py::arg("hi") = 127);
  m.def("requantize_per_channel", &requantize_per_channel, py::arg("acc"), py::arg("multipliers"), py::arg("shifts"),
        py::arg("dim") = 1, py::arg("lo") = -128, py::arg("hi") = 127);
  m.def("quantize_weights", &quantize_weights, py::arg("weight"), py::arg("per_channel") = true);
  m.def("quantize_bias", &quantize_bias, py::arg("bias"), py::arg("in_scale"), py::arg("weight_scales"));
  m.def("fold_batch_norm", &fold_batch_norm, py::arg("weight"), py::arg("bias"), py::arg("gamma"), py::arg("beta"),
        py::arg("mean"), py::arg("var"), py::arg("eps"));
  m.def("layer_requant", &layer_requant, py::arg("in_scale"), py::arg("weight_scales"), py::arg("out_scale"),
        py::arg("channels") = -1);
}

const bool registered = python::register_target_api("quant", &bind);

}  // namespace
