// Binds the fpga target's core (csrc/target/fpga: ISA v1 encoder / validating decoder /
// disassembler / cost model, the device-memory packers, the bit-exact datapath model, the OpenCL
// queries and the host driver) as _C.fpga, for dnnfusion/fpga.py.
//
// Conventions. A layer crosses as a dict with the keys of fpga::fields() ("type" may be the name
// "conv3x3" / "conv1x1" / "dw3x3" / "maxpool" / "add" or its Switch_REG number; out_h/out_w are
// ignored on the way in). An instruction stream is a 1-D torch.uint32 tensor; on the way in a
// uint32/int32/int64 tensor, a numpy array or a list of ints is accepted (every value must fit in
// 32 bits). Device memory is a contiguous 1-D torch.uint8 CPU tensor. Errors of the core
// (InvalidInput) reach Python as _C.InvalidInput, a ValueError; bad argument types are ValueErrors.
//
// Activation quantization at the accelerator boundary (quantize_pack): q = clamp(
// round_half_away_from_zero(x / scale), -128, 127) computed in double, written straight into the
// channel-blocked layout (padded lanes 0); dequantize_unpack is q * scale in float.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "quant/requant.h"
#include "target/fpga/api.h"
#include "target_apis.h"

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
  std::vector<int64_t> v;
  if (THPVariable_Check(obj.ptr())) {
    at::Tensor t = obj.cast<at::Tensor>();
    if (t.dim() != 1) bad("an instruction stream must be 1-D, got " + std::to_string(t.dim()) + "-D");
    t = t.to(at::kCPU).contiguous();
    if (t.scalar_type() == at::kUInt32 || t.scalar_type() == at::kInt) {
      std::vector<uint32_t> w(static_cast<size_t>(t.numel()));
      if (!w.empty()) std::memcpy(w.data(), t.data_ptr(), w.size() * 4);
      return w;
    }
    if (t.scalar_type() != at::kLong) bad("an instruction stream tensor must be uint32, int32 or int64");
    v.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  } else {
    try {
      v = obj.cast<std::vector<int64_t>>();
    } catch (const py::cast_error&) {
      bad("an instruction stream must be a 1-D uint32 tensor, numpy array or list of ints");
    }
  }
  std::vector<uint32_t> w(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < INT32_MIN || v[i] > int64_t{UINT32_MAX})
      bad("word " + std::to_string(i) + " = " + std::to_string(v[i]) + " does not fit in 32 bits");
    w[i] = static_cast<uint32_t>(v[i]);
  }
  return w;
}

at::Tensor words_tensor(const std::vector<uint32_t>& w) {
  at::Tensor t = at::empty({static_cast<int64_t>(w.size())}, at::kUInt32);
  if (!w.empty()) std::memcpy(t.data_ptr(), w.data(), w.size() * 4);
  return t;
}

template <typename T>
std::vector<T> vec_of(const at::Tensor& t, at::ScalarType want, const char* what, const char* dtype) {
  if (!t.defined() || !t.device().is_cpu() || t.scalar_type() != want)
    bad(std::string(what) + " must be a " + dtype + " CPU tensor");
  at::Tensor c = t.contiguous();
  const T* p = static_cast<const T*>(c.data_ptr());
  return std::vector<T>(p, p + c.numel());
}

at::Tensor bytes_tensor(const std::vector<uint8_t>& b) {
  at::Tensor t = at::empty({static_cast<int64_t>(b.size())}, at::kByte);
  if (!b.empty()) std::memcpy(t.data_ptr(), b.data(), b.size());
  return t;
}

uint8_t* memory_ptr(const at::Tensor& m, const char* what) {
  if (!m.defined() || !m.device().is_cpu() || m.scalar_type() != at::kByte || !m.is_contiguous() || m.dim() != 1)
    bad(std::string(what) + " must be a contiguous 1-D uint8 CPU tensor");
  return m.data_ptr<uint8_t>();
}

std::vector<quant::Requant> requants(const at::Tensor& m, const at::Tensor& s, const char* what) {
  const auto mv = vec_of<int32_t>(m, at::kInt, what, "int32");
  const auto sv = vec_of<int32_t>(s, at::kInt, what, "int32");
  if (mv.size() != sv.size())
    bad(std::string(what) + ": " + std::to_string(mv.size()) + " multipliers but " + std::to_string(sv.size()) + " shifts");
  std::vector<quant::Requant> r(mv.size());
  for (size_t k = 0; k < mv.size(); ++k) r[k] = quant::Requant{mv[k], sv[k]};
  return r;
}

void check_chw(const at::Tensor& x, const char* what) {
  if (x.dim() != 3) bad(std::string(what) + " must be C x H x W (one image), got " + std::to_string(x.dim()) + "-D");
}

// fp32 C x H x W -> int8 in the blocked layout: clamp(round_half_away_from_zero(x / scale), -128, 127).
at::Tensor quantize_pack(const at::Tensor& x_in, double scale) {
  check_chw(x_in, "input");
  if (!(scale > 0) || !std::isfinite(scale)) bad("activation scale must be finite and > 0, got " + std::to_string(scale));
  at::Tensor x = x_in.to(at::kCPU, at::kFloat).contiguous();
  const int c = static_cast<int>(x.size(0)), h = static_cast<int>(x.size(1)), w = static_cast<int>(x.size(2));
  at::Tensor out = at::zeros({static_cast<int64_t>(fpga::activation_bytes(c, h, w))}, at::kByte);
  const float* p = x.data_ptr<float>();
  uint8_t* o = out.data_ptr<uint8_t>();
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

at::Tensor dequantize_unpack(const at::Tensor& blocked, int64_t c, int64_t h, int64_t w, double scale) {
  const uint8_t* b = memory_ptr(blocked, "packed activation");
  if (c < 1 || h < 1 || w < 1) bad("activation shape must be positive");
  if (static_cast<uint64_t>(blocked.numel()) < fpga::activation_bytes(c, h, w))
    bad("packed activation has " + std::to_string(blocked.numel()) + " bytes, a " + std::to_string(c) + "x" +
        std::to_string(h) + "x" + std::to_string(w) + " tensor needs " + std::to_string(fpga::activation_bytes(c, h, w)));
  at::Tensor out = at::empty({c, h, w}, at::kFloat);
  float* o = out.data_ptr<float>();
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
           [](fpga::Accelerator& a, const at::Tensor& image) {
             const uint8_t* p = memory_ptr(image, "memory image");
             py::gil_scoped_release nogil;
             a.upload(p, static_cast<size_t>(image.numel()));
           })
      .def("write",
           [](fpga::Accelerator& a, size_t offset, const at::Tensor& src) {
             const uint8_t* p = memory_ptr(src, "source bytes");
             py::gil_scoped_release nogil;
             a.write(offset, p, static_cast<size_t>(src.numel()));
           })
      .def("read",
           [](const fpga::Accelerator& a, size_t offset, size_t bytes) {
             at::Tensor t = at::empty({static_cast<int64_t>(bytes)}, at::kByte);
             uint8_t* p = t.data_ptr<uint8_t>();
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
    return words_tensor(fpga::encode(ls, memory_bytes));
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

  m.def("pack_weights", [](const py::object& type, int k, int c, const at::Tensor& w) {
    return bytes_tensor(fpga::pack_weights(parse_type(type), k, c, vec_of<int8_t>(w, at::kChar, "weights", "int8")));
  }, py::arg("type"), py::arg("k"), py::arg("c"), py::arg("weights"));
  m.def("pack_params", [](const at::Tensor& bias, const at::Tensor& mult, const at::Tensor& shift) {
    return bytes_tensor(fpga::pack_params(vec_of<int32_t>(bias, at::kInt, "bias", "int32"), requants(mult, shift, "requant")));
  }, py::arg("bias"), py::arg("multipliers"), py::arg("shifts"));
  m.def("pack_add_params", [](const at::Tensor& ma, const at::Tensor& sa, const at::Tensor& mb, const at::Tensor& sb) {
    return bytes_tensor(fpga::pack_add_params(requants(ma, sa, "requant of input a"), requants(mb, sb, "requant of input b")));
  }, py::arg("multipliers_a"), py::arg("shifts_a"), py::arg("multipliers_b"), py::arg("shifts_b"));
  m.def("pack_activation", [](const at::Tensor& x) {
    check_chw(x, "activation");
    return bytes_tensor(fpga::pack_activation(vec_of<int8_t>(x, at::kChar, "activation", "int8"), int(x.size(0)),
                                              int(x.size(1)), int(x.size(2))));
  }, py::arg("chw"));
  m.def("unpack_activation", [](const at::Tensor& b, int c, int h, int w) {
    const uint8_t* p = memory_ptr(b, "packed activation");
    const std::vector<int8_t> v = fpga::unpack_activation(p, static_cast<size_t>(b.numel()), c, h, w);
    at::Tensor t = at::empty({c, h, w}, at::kChar);
    std::memcpy(t.data_ptr(), v.data(), v.size());
    return t;
  }, py::arg("packed"), py::arg("c"), py::arg("h"), py::arg("w"));
  m.def("quantize_pack", &quantize_pack, py::arg("x"), py::arg("scale"));
  m.def("dequantize_unpack", &dequantize_unpack, py::arg("packed"), py::arg("c"), py::arg("h"), py::arg("w"),
        py::arg("scale"));

  // Runs the stream on `memory` in place (validated first; on refusal nothing is written).
  m.def("simulate", [](at::Tensor memory, const py::object& words) {
    uint8_t* p = memory_ptr(memory, "device memory");
    const std::vector<uint32_t> w = to_words(words);
    const size_t n = static_cast<size_t>(memory.numel());
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
