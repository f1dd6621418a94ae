// Binds the fpga target's core (csrc/target/fpga: ISA v1 encoder / validating decoder /
// disassembler / cost model, the device-memory packers, the bit-exact datapath model, the OpenCL
// queries and the host driver) as _C.fpga, for dnnfusion/fpga/; built into the extension only.
//
// Conventions. A layer crosses as a dict with the keys of fpga::fields() ("type" may be the name
// "conv3x3" / "conv1x1" / "dw3x3" / "maxpool" / "add" or its Switch_REG number; out_h/out_w are
// ignored on the way in). Data crosses as numpy arrays (python/target_apis.h): a CPU tensor is
// accepted wherever an array is (viewed, not copied), results are numpy arrays that the Python
// side wraps with torch.from_numpy. An instruction stream comes back as a 1-D uint32 array; on the
// way in a uint32/int32/int64 tensor or array or a list of ints is accepted (every value must fit
// in 32 bits). Device memory is a contiguous 1-D uint8 CPU tensor or array, written in place by
// simulate. Errors of the core (InvalidInput) reach Python as _C.InvalidInput, a ValueError; bad
// argument types are ValueErrors.
//
// Activation quantization at the accelerator boundary (quantize_pack): q = clamp(
// round_half_away_from_zero(x / scale), -128, 127) computed in double, written straight into the
// channel-blocked layout (padded lanes 0); dequantize_unpack is q * scale in float.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "python/target_apis.h"
#include "quant/requant.h"
#include "target/fpga/api.h"

namespace py = pybind11;
using namespace dnnfusion;

namespace {

[[noreturn]] void bad(const std::string& msg) { throw py::value_error("dnnfusion.fpga: " + msg); }

fpga::LayerType parse_type(const py::handle& v) {
  if (py::isinstance<py::str>(v)) {
    const std::string s = v.cast<std::string>();
    for (uint32_t t = 1; t <= 5; ++t)
      if (s == fpga::layer_type_name(static_cast<fpga::LayerType>(t))) return static_cast<fpga::LayerType>(t);
    bad("layer type must be one of conv3x3, conv1x1, dw3x3, maxpool, add; got '" + s + "'");
  }
  const int64_t t = v.cast<int64_t>();
  if (t < 1 || t > 5) bad("layer type number must be in 1..5, got " + std::to_string(t));
  return static_cast<fpga::LayerType>(t);
}

int32_t get_i32(const py::dict& d, const char* key, int32_t def) {
  if (!d.contains(key)) return def;
  const int64_t v = d[key].cast<int64_t>();
  if (v < INT32_MIN || v > INT32_MAX) bad(std::string(key) + " = " + std::to_string(v) + " does not fit in int32");
  return static_cast<int32_t>(v);
}

uint64_t get_u64(const py::dict& d, const char* key) {
  if (!d.contains(key)) return 0;
  const int64_t v = d[key].cast<int64_t>();
  if (v < 0) bad(std::string(key) + " must be >= 0, got " + std::to_string(v));
  return static_cast<uint64_t>(v);
}

fpga::LayerDesc to_layer(const py::handle& h) {
  if (!py::isinstance<py::dict>(h)) bad("a layer must be a dict of its fields");
  const auto d = py::reinterpret_borrow<py::dict>(h);
  if (!d.contains("type")) bad("a layer dict needs 'type'");
  fpga::LayerDesc l;
  l.type = parse_type(d["type"]);
  l.in_channels = get_i32(d, "in_channels", 0);
  l.out_channels = get_i32(d, "out_channels", 0);
  l.in_h = get_i32(d, "in_h", 0);
  l.in_w = get_i32(d, "in_w", 0);
  l.kernel = get_i32(d, "kernel", 3);
  l.stride = get_i32(d, "stride", 1);
  l.pad = get_i32(d, "pad", 0);
  l.act_lo = get_i32(d, "act_lo", -128);
  l.act_hi = get_i32(d, "act_hi", 127);
  l.weight_offset = get_u64(d, "weight_offset");
  l.param_offset = get_u64(d, "param_offset");
  l.input_offset = get_u64(d, "input_offset");
  l.input_b_offset = get_u64(d, "input_b_offset");
  l.output_offset = get_u64(d, "output_offset");
  return l;
}

py::dict from_layer(const fpga::LayerDesc& l) {
  py::dict d;
  for (const auto& [name, value] : fpga::fields(l)) d[py::str(name)] = value;
  d["type"] = std::string(fpga::layer_type_name(l.type));
  return d;
}

// A stream from a tensor, numpy array or list; every value must fit in 32 bits.
std::vector<uint32_t> to_words(const py::object& obj) {
  const char* allowed = "an instruction stream must be a 1-D uint32, int32 or int64 tensor or array, or a list of ints";
  const py::array a = py::array::ensure(obj);
  if (!a) bad(allowed);
  if (a.ndim() != 1) bad("an instruction stream must be 1-D, got " + std::to_string(a.ndim()) + "-D");
  if (a.size() == 0) return {};  // [] is a float64 array to numpy
  if (py::isinstance<py::array_t<uint32_t>>(a) || py::isinstance<py::array_t<int32_t>>(a)) {
    const auto c = py::array_t<uint32_t, py::array::c_style | py::array::forcecast>::ensure(a);  // same bits
    return std::vector<uint32_t>(c.data(), c.data() + c.size());
  }
  if (!py::isinstance<py::array_t<int64_t>>(a)) bad(allowed);
  const auto c = py::array_t<int64_t, py::array::c_style>::ensure(a);
  std::vector<uint32_t> w(static_cast<size_t>(c.size()));
  for (size_t i = 0; i < w.size(); ++i) {
    const int64_t v = c.data()[i];
    if (v < INT32_MIN || v > int64_t{UINT32_MAX})
      bad("word " + std::to_string(i) + " = " + std::to_string(v) + " does not fit in 32 bits");
    w[i] = static_cast<uint32_t>(v);
  }
  return w;
}

template <typename T>
py::array_t<T> array_of(const std::vector<T>& v) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(T));
  return a;
}

// A read-only input of dtype T, made C-contiguous (a copy only where it was strided).
template <typename T>
py::array_t<T, py::array::c_style> read_array(const py::handle& obj, const char* what) {
  const py::array a = py::array::ensure(obj);
  if (!a || !py::isinstance<py::array_t<T>>(a))
    bad(std::string(what) + " must be a " + std::string(py::str(py::dtype::of<T>())) + " CPU tensor or array");
  return py::array_t<T, py::array::c_style>::ensure(a);
}

template <typename T>
std::vector<T> vec_of(const py::handle& obj, const char* what) {
  const auto c = read_array<T>(obj, what);
  return std::vector<T>(c.data(), c.data() + c.size());
}

// Device memory or packed bytes: 1-D uint8, viewed in place.
py::array_t<uint8_t, py::array::c_style> memory_view(const py::handle& obj, const char* what, bool writable = false) {
  auto m = python::host_view<uint8_t>(obj, std::string("dnnfusion.fpga: ") + what, writable);
  if (m.ndim() != 1) bad(std::string(what) + " must be 1-D, got " + std::to_string(m.ndim()) + "-D");
  return m;
}

std::vector<quant::Requant> requants(const py::handle& m, const py::handle& s, const char* what) {
  const auto mv = vec_of<int32_t>(m, what);
  const auto sv = vec_of<int32_t>(s, what);
  if (mv.size() != sv.size())
    bad(std::string(what) + ": " + std::to_string(mv.size()) + " multipliers but " + std::to_string(sv.size()) + " shifts");
  std::vector<quant::Requant> r(mv.size());
  for (size_t k = 0; k < mv.size(); ++k) r[k] = quant::Requant{mv[k], sv[k]};
  return r;
}

template <typename A>
void check_chw(const A& x, const char* what) {
  if (x.ndim() != 3) bad(std::string(what) + " must be C x H x W (one image), got " + std::to_string(x.ndim()) + "-D");
}

// fp32 C x H x W -> int8 in the blocked layout: clamp(round_half_away_from_zero(x / scale), -128, 127).
py::array_t<uint8_t> quantize_pack(const py::object& x_in, double scale) {
  const auto x = read_array<float>(x_in, "input");
  check_chw(x, "input");
  if (!(scale > 0) || !std::isfinite(scale)) bad("activation scale must be finite and > 0, got " + std::to_string(scale));
  const int c = static_cast<int>(x.shape(0)), h = static_cast<int>(x.shape(1)), w = static_cast<int>(x.shape(2));
  py::array_t<uint8_t> out(static_cast<py::ssize_t>(fpga::activation_bytes(c, h, w)));
  const float* p = x.data();
  uint8_t* o = out.mutable_data();
  std::memset(o, 0, static_cast<size_t>(out.size()));  // padded lanes
  py::gil_scoped_release nogil;
  for (int ch = 0; ch < c; ++ch)
    for (int y = 0; y < h; ++y)
      for (int xx = 0; xx < w; ++xx) {
        double v = std::round(static_cast<double>(p[(static_cast<size_t>(ch) * h + y) * w + xx]) / scale);
        if (std::isnan(v)) v = 0;
        v = std::min(127.0, std::max(-128.0, v));
        o[fpga::blocked_index(ch, y, xx, h, w)] = static_cast<uint8_t>(static_cast<int8_t>(v));
      }
  return out;
}

py::array_t<float> dequantize_unpack(const py::object& blocked, int64_t c, int64_t h, int64_t w, double scale) {
  const auto bv = memory_view(blocked, "packed activation");
  const uint8_t* b = bv.data();
  if (c < 1 || h < 1 || w < 1) bad("activation shape must be positive");
  if (static_cast<uint64_t>(bv.size()) < fpga::activation_bytes(c, h, w))
    bad("packed activation has " + std::to_string(bv.size()) + " bytes, a " + std::to_string(c) + "x" +
        std::to_string(h) + "x" + std::to_string(w) + " tensor needs " + std::to_string(fpga::activation_bytes(c, h, w)));
  py::array_t<float> out({c, h, w});
  float* o = out.mutable_data();
  const float s = static_cast<float>(scale);
  py::gil_scoped_release nogil;
  for (int ch = 0; ch < c; ++ch)
    for (int y = 0; y < h; ++y)
      for (int xx = 0; xx < w; ++xx)
        o[(static_cast<size_t>(ch) * h + y) * w + xx] =
            static_cast<float>(static_cast<int8_t>(b[fpga::blocked_index(ch, y, xx, int(h), int(w))])) * s;
  return out;
}

py::dict cost_dict(const fpga::LayerCost& c) {
  py::dict d;
  d["macs"] = c.macs, d["compute_cycles"] = c.compute_cycles, d["ddr_read_bytes"] = c.ddr_read_bytes;
  d["ddr_write_bytes"] = c.ddr_write_bytes, d["ddr_bytes"] = c.ddr_read_bytes + c.ddr_write_bytes;
  d["memory_cycles"] = c.memory_cycles, d["cycles"] = c.cycles, d["seconds"] = c.seconds;
  return d;
}

py::list platforms_list() {
  py::list out;
  for (const auto& p : fpga::opencl::list_platforms()) {
    py::dict d;
    d["name"] = p.name, d["vendor"] = p.vendor, d["version"] = p.version;
    py::list devs;
    for (const auto& dev : p.devices) {
      py::dict dd;
      dd["name"] = dev.name, dd["type"] = dev.type, dd["global_mem_bytes"] = dev.global_mem_bytes;
      devs.append(dd);
    }
    d["devices"] = devs;
    out.append(d);
  }
  return out;
}

void bind_accelerator(py::module_& m) {
  py::class_<fpga::RunStats>(m, "RunStats")
      .def_readonly("layers", &fpga::RunStats::layers)
      .def_readonly("seconds", &fpga::RunStats::seconds)
      .def_readonly("layer_seconds", &fpga::RunStats::layer_seconds);
  py::class_<fpga::Accelerator>(m, "Accelerator")
      .def(py::init([](const std::string& platform, const std::string& binary) {
             py::gil_scoped_release nogil;
             return new fpga::Accelerator(fpga::AcceleratorOptions{platform, binary});
           }),
           py::arg("platform") = "", py::arg("binary_path") = "")
      .def_property_readonly("platform_name", &fpga::Accelerator::platform_name)
      .def_property_readonly("device_name", &fpga::Accelerator::device_name)
      .def_property_readonly("memory_bytes", &fpga::Accelerator::memory_bytes)
      .def("upload",
           [](fpga::Accelerator& a, const py::object& image) {
             const auto m = memory_view(image, "memory image");
             const uint8_t* p = m.data();
             py::gil_scoped_release nogil;
             a.upload(p, static_cast<size_t>(m.size()));
           })
      .def("write",
           [](fpga::Accelerator& a, size_t offset, const py::object& src) {
             const auto m = memory_view(src, "source bytes");
             const uint8_t* p = m.data();
             py::gil_scoped_release nogil;
             a.write(offset, p, static_cast<size_t>(m.size()));
           })
      .def("read",
           [](const fpga::Accelerator& a, size_t offset, size_t bytes) {
             py::array_t<uint8_t> t(static_cast<py::ssize_t>(bytes));
             uint8_t* p = t.mutable_data();
             py::gil_scoped_release nogil;
             a.read(offset, p, bytes);
             return t;
           })
      .def("run", [](fpga::Accelerator& a, const py::object& words) {
        const std::vector<uint32_t> w = to_words(words);
        py::gil_scoped_release nogil;
        return a.run(w.data(), w.size());
      });
}

void bind(py::module_& m) {
  m.attr("ISA_VERSION") = fpga::kIsaVersion;
  m.attr("DMA_UNIT") = fpga::kDmaUnit;
  m.attr("WORDS_PER_LAYER") = fpga::kWordsPerLayer;
  m.attr("MAX_CHANNELS") = fpga::kMaxChannels;
  m.attr("MAX_SPATIAL") = fpga::kMaxSpatial;
  m.attr("MAX_LAYERS") = fpga::kMaxLayers;

  m.def("encode", [](const py::list& layers, uint64_t memory_bytes) {
    std::vector<fpga::LayerDesc> ls;
    for (const auto& h : layers) ls.push_back(to_layer(h));
    return array_of(fpga::encode(ls, memory_bytes));
  }, py::arg("layers"), py::arg("memory_bytes"));
  m.def("decode", [](const py::object& words) {
    const std::vector<uint32_t> w = to_words(words);
    const fpga::Program p = fpga::decode_program(w.data(), w.size());
    py::list layers;
    for (const auto& l : p.layers) layers.append(from_layer(l));
    return py::make_tuple(layers, p.memory_bytes);
  }, py::arg("words"));
  m.def("disassemble_lines", [](const py::object& words) {
    const std::vector<uint32_t> w = to_words(words);
    return fpga::disassemble(w.data(), w.size());
  }, py::arg("words"));
  m.def("check_layer", [](const py::dict& d, uint64_t memory_bytes) { fpga::check_layer(to_layer(d), memory_bytes, "layer"); });
  m.def("layer_sizes", [](const py::dict& d) {
    const fpga::LayerDesc l = to_layer(d);
    fpga::check_shape(l, "layer");
    py::dict r;
    r["out_h"] = fpga::out_h(l), r["out_w"] = fpga::out_w(l);
    r["weight_bytes"] = fpga::weight_bytes(l), r["param_bytes"] = fpga::param_bytes(l);
    r["input_bytes"] = fpga::activation_bytes(l.in_channels, l.in_h, l.in_w);
    r["output_bytes"] = fpga::activation_bytes(l.out_channels, fpga::out_h(l), fpga::out_w(l));
    return r;
  });
  m.def("activation_bytes", [](int64_t c, int64_t h, int64_t w) { return fpga::activation_bytes(c, h, w); });
  m.def("estimate", [](const py::dict& d, const py::dict& model) {
    fpga::CostModel cm;
    if (model.contains("clock_hz")) cm.clock_hz = model["clock_hz"].cast<double>();
    if (model.contains("ddr_bytes_per_s")) cm.ddr_bytes_per_s = model["ddr_bytes_per_s"].cast<double>();
    if (model.contains("layer_overhead_cycles")) cm.layer_overhead_cycles = model["layer_overhead_cycles"].cast<int64_t>();
    const fpga::LayerDesc l = to_layer(d);
    fpga::check_shape(l, "layer");
    return cost_dict(fpga::estimate(l, cm));
  }, py::arg("layer"), py::arg("cost_model") = py::dict());

  m.def("pack_weights", [](const py::object& type, int k, int c, const py::object& w) {
    return array_of(fpga::pack_weights(parse_type(type), k, c, vec_of<int8_t>(w, "weights")));
  }, py::arg("type"), py::arg("k"), py::arg("c"), py::arg("weights"));
  m.def("pack_params", [](const py::object& bias, const py::object& mult, const py::object& shift) {
    return array_of(fpga::pack_params(vec_of<int32_t>(bias, "bias"), requants(mult, shift, "requant")));
  }, py::arg("bias"), py::arg("multipliers"), py::arg("shifts"));
  m.def("pack_add_params", [](const py::object& ma, const py::object& sa, const py::object& mb, const py::object& sb) {
    return array_of(fpga::pack_add_params(requants(ma, sa, "requant of input a"), requants(mb, sb, "requant of input b")));
  }, py::arg("multipliers_a"), py::arg("shifts_a"), py::arg("multipliers_b"), py::arg("shifts_b"));
  m.def("pack_activation", [](const py::object& obj) {
    const auto x = read_array<int8_t>(obj, "activation");
    check_chw(x, "activation");
    return array_of(fpga::pack_activation(std::vector<int8_t>(x.data(), x.data() + x.size()), int(x.shape(0)),
                                          int(x.shape(1)), int(x.shape(2))));
  }, py::arg("chw"));
  m.def("unpack_activation", [](const py::object& b, int c, int h, int w) {
    const auto m = memory_view(b, "packed activation");
    const std::vector<int8_t> v = fpga::unpack_activation(m.data(), static_cast<size_t>(m.size()), c, h, w);
    return array_of(v).reshape({c, h, w});
  }, py::arg("packed"), py::arg("c"), py::arg("h"), py::arg("w"));
  m.def("quantize_pack", &quantize_pack, py::arg("x"), py::arg("scale"));
  m.def("dequantize_unpack", &dequantize_unpack, py::arg("packed"), py::arg("c"), py::arg("h"), py::arg("w"),
        py::arg("scale"));

  // Runs the stream on `memory` in place (validated first; on refusal nothing is written).
  m.def("simulate", [](const py::object& memory, const py::object& words) {
    auto m = memory_view(memory, "device memory", /*writable=*/true);
    uint8_t* p = m.mutable_data();
    const std::vector<uint32_t> w = to_words(words);
    const size_t n = static_cast<size_t>(m.size());
    py::gil_scoped_release nogil;
    const fpga::Program prog = fpga::decode_program(w.data(), w.size());
    if (prog.memory_bytes > n)
      DNNF_THROW_AS(InvalidInput, "simulate: the stream needs a device memory of ", prog.memory_bytes,
                    " bytes, the image has ", n);
    for (size_t i = 0; i < prog.layers.size(); ++i) fpga::simulate_layer(p, n, prog.layers[i]);
  }, py::arg("memory"), py::arg("words"));

  m.def("opencl_unavailable_reason", &fpga::opencl::opencl_unavailable_reason);
  m.def("list_platforms", &platforms_list);
  bind_accelerator(m);
}

const bool registered = python::register_target_api("fpga", &bind);

}  // namespace
