// The only bridge between PyTorch and the core: a pybind11 module (graph building, compiling,
// stats) and the TORCH_LIBRARY op dnnfusion::run that executes a compiled region on tensors.
// Tensors cross as (pointer, shape, dtype) views without copies; weights are borrowed from tensors
// this module keeps alive.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/extension.h>
#include <torch/library.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "common/error.h"
#include "ecg/extract_region.h"
#include "ecg/op_registry.h"
#include "kernels/cpu/cpu_features.h"
#include "pipeline.h"
#include "prune/channel_scores.h"
#include "runtime/thread_pool.h"
#include "target/target.h"
#include "target_apis.h"

namespace py = pybind11;
using namespace dnnfusion;

namespace {

DType to_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::Float32;
    case at::kDouble: return DType::Float64;
    case at::kLong: return DType::Int64;
    case at::kInt: return DType::Int32;
    case at::kBool: return DType::Bool;
    case at::kByte: return DType::UInt8;
    case at::kChar: return DType::Int8;
    case at::kHalf: return DType::Float16;
    case at::kBFloat16: return DType::BFloat16;
    default: DNNF_THROW("torch dtype ", c10::toString(t), " has no dnnfusion equivalent");
  }
}

at::ScalarType to_scalar_type(DType t) {
  switch (t) {
    case DType::Float32: return at::kFloat;
    case DType::Float64: return at::kDouble;
    case DType::Int64: return at::kLong;
    case DType::Int32: return at::kInt;
    case DType::Bool: return at::kBool;
    case DType::UInt8: return at::kByte;
    case DType::Int8: return at::kChar;
    case DType::Float16: return at::kHalf;
    case DType::BFloat16: return at::kBFloat16;
  }
  return at::kFloat;
}

ecg::Attr to_attr(const py::handle& o) {
  if (py::isinstance<py::bool_>(o)) return static_cast<int64_t>(o.cast<bool>());
  if (py::isinstance<py::int_>(o)) return o.cast<int64_t>();
  if (py::isinstance<py::float_>(o)) return o.cast<double>();
  if (py::isinstance<py::str>(o)) return o.cast<std::string>();
  if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) {
    auto seq = o.cast<py::sequence>();
    bool all_int = true;
    for (auto item : seq)
      if (!py::isinstance<py::int_>(item) || py::isinstance<py::bool_>(item)) all_int = false;
    if (all_int) return o.cast<std::vector<int64_t>>();
    std::vector<double> v;
    for (auto item : seq) v.push_back(item.cast<double>());
    return v;
  }
  throw py::type_error("dnnfusion: attribute value of unsupported type " + std::string(py::str(o.get_type())));
}

ecg::AttrMap to_attrs(const py::dict& d) {
  ecg::AttrMap m;
  for (auto item : d) m.emplace(item.first.cast<std::string>(), to_attr(item.second));
  return m;
}

std::vector<ecg::OutputSpec> to_specs(const std::vector<std::pair<std::vector<int64_t>, std::string>>& outs) {
  std::vector<ecg::OutputSpec> specs;
  for (const auto& [shape, dt] : outs) specs.push_back({shape, dtype_from_name(dt)});
  return specs;
}

// A graph under construction plus the tensors whose memory its weights borrow.
struct PyGraph {
  ecg::Graph g;
  std::vector<at::Tensor> keep_alive;  // host memory: a device weight's copy, read by the compile
  std::vector<c10::Device> keep_alive_device;  // where each of those lives in the user's model
};

struct Region {
  Compiled compiled;
  const target::Target* target = nullptr;
  std::vector<at::Tensor> keep_alive;
  c10::Device device{c10::kCPU};  // where its inputs and outputs live
  // Strides the surrounding FX graph expects for each output (empty = contiguous).
  std::vector<std::vector<int64_t>> out_strides;
};

std::mutex g_regions_mu;
std::map<int64_t, std::shared_ptr<Region>> g_regions;
std::atomic<int64_t> g_next_handle{1};

std::shared_ptr<Region> get_region(int64_t h) {
  std::lock_guard<std::mutex> lk(g_regions_mu);
  auto it = g_regions.find(h);
  TORCH_CHECK(it != g_regions.end(), "dnnfusion::run: unknown or released compiled region ", h);
  return it->second;
}

int64_t compile_region(PyGraph& pg, const CompileOptions& opts, const std::vector<std::vector<int64_t>>& out_strides) {
  auto r = std::make_shared<Region>();
  r->keep_alive = pg.keep_alive;
  r->out_strides = out_strides;
  r->target = opts.target.empty() ? &target::registry().default_target() : &target::registry().get(opts.target);
  const c10::DeviceType dev = c10::Device(r->target->device_type()).type();
  CompileOptions o = opts;
  for (const c10::Device& d : pg.keep_alive_device) {
    if (d.type() != dev)
      throw dnnfusion::InvalidInput("dnnfusion: a weight is on " + d.str() + "; target '" + opts.target + "' needs " +
                                    r->target->device_type() + " weights");
    if (d.has_index()) o.device_index = d.index();
  }
  r->device = dev == c10::kCPU ? c10::Device(c10::kCPU) : c10::Device(dev, static_cast<c10::DeviceIndex>(o.device_index));
  r->compiled = compile_graph(pg.g, o);
  int64_t h = g_next_handle.fetch_add(1);
  std::lock_guard<std::mutex> lk(g_regions_mu);
  g_regions[h] = r;
  return h;
}

std::vector<at::Tensor> run_region(int64_t handle, const std::vector<at::Tensor>& inputs) {
  auto r = get_region(handle);
  const ecg::Graph& g = r->compiled.exe->graph();
  TORCH_CHECK(inputs.size() == g.inputs().size(), "dnnfusion::run: region ", handle, " expects ", g.inputs().size(),
              " inputs, got ", inputs.size());
  std::vector<at::Tensor> owned;
  std::vector<const void*> in_ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& v = g.value(g.inputs()[i]);
    const at::Tensor& t = inputs[i];
    TORCH_CHECK(t.device().type() == r->device.type() && (r->device.is_cpu() || t.device() == r->device),
                "dnnfusion::run: input ", i, " is on ", t.device(), "; the region was compiled for target '",
                r->target->name(), "' on ", r->device);
    TORCH_CHECK(t.scalar_type() == to_scalar_type(v.dtype), "dnnfusion::run: input ", i, " has dtype ", t.scalar_type(),
                " but the region was compiled for ", dtype_name(v.dtype), " (recompile for the new dtype)");
    TORCH_CHECK(t.sizes().vec() == v.shape, "dnnfusion::run: input ", i, " has shape ", t.sizes(),
                " but the region was compiled for ", ecg::shape_str(v.shape), " (recompile for the new shape)");
    owned.push_back(t.is_contiguous() ? t : t.contiguous());
    in_ptrs.push_back(owned.back().data_ptr());
  }
  std::vector<at::Tensor> outs;
  std::vector<void*> out_ptrs;
  for (int o : g.outputs()) {
    const auto& v = g.value(o);
    outs.push_back(at::empty(v.shape, at::TensorOptions().dtype(to_scalar_type(v.dtype)).device(r->device)));
    out_ptrs.push_back(outs.back().data_ptr());
  }
  // torch.ops calls arrive here with the GIL already released by the dispatcher.
  runtime::DeviceContext device;
  if (!r->device.is_cpu()) {  // the framework's current stream on that device, whatever the backend
    device.index = r->device.index();
    device.stream = c10::impl::getDeviceGuardImpl(r->device.type())->getStream(r->device).native_handle();
  }
  try {
    r->compiled.exe->run(in_ptrs, out_ptrs, r->device.is_cpu() ? nullptr : &device);
  } catch (const dnnfusion::IndexOutOfRange& e) {  // an IndexError, as eager raises
    TORCH_CHECK_INDEX(false, e.what());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  // Give eager consumers the strides they were traced with (a later view may depend on them).
  for (size_t i = 0; i < outs.size(); ++i) {
    const auto& st = r->out_strides.size() > i ? r->out_strides[i] : std::vector<int64_t>{};
    if (st.empty() || outs[i].dim() != static_cast<int64_t>(st.size()) || outs[i].strides().vec() == st) continue;
    at::Tensor s = at::empty_strided(outs[i].sizes(), st, outs[i].options());
    s.copy_(outs[i]);
    outs[i] = s;
  }
  return outs;
}

// Everything a region's report holds, as one dict with a fixed set of keys (dnnfusion/report.py
// builds a RegionStats from it, which fails on a missing or unknown key).
py::dict region_stats(int64_t h) {
  auto r = get_region(h);
  const Compiled& c = r->compiled;
  const CompileStats& cs = c.stats;
  const auto& s = c.exe->stats();
  const ecg::Graph& g = c.exe->graph();
  py::dict d;
  d["target"] = cs.target;
  d["threads"] = c.exe->threads();
  // The executor's view (runtime::ExecStats).
  d["num_nodes"] = s.num_nodes;
  d["kernels_per_call"] = s.kernels_per_call;
  d["aliased_views"] = s.aliased_views;
  d["arena_bytes"] = s.arena_bytes;
  d["naive_bytes"] = s.naive_bytes;
  d["scratch_bytes"] = s.scratch_bytes;
  d["flops"] = s.flops;
  d["blocks"] = s.blocks;
  d["irs_bytes"] = s.irs_bytes;
  d["generated_steps"] = s.generated_steps;
  d["hooked_steps"] = s.hooked_steps;
  // The compile's (CompileStats).
  py::list passes;
  for (const auto& p : cs.passes) passes.append(py::make_tuple(p.name, p.ms, p.detail));
  d["passes"] = passes;
  d["folded_nodes"] = cs.folded_nodes;
  d["ops_imported"] = cs.ops_imported;
  d["ops_after_rewrite"] = cs.ops_after_rewrite;
  d["rules_applied"] = cs.rules_applied;
  d["edge_rules"] = cs.edge_rules;
  d["generated_functions"] = cs.generated_functions;
  d["profiled_pairs"] = cs.profiled_pairs;
  d["codegen_compile_ms"] = cs.codegen_compile_ms;
  d["codegen_cache_hit"] = cs.codegen_cache_hit;
  d["generated_source"] = cs.generated_source_path;
  d["target_counters"] = cs.target_counters;
  d["target_notes"] = cs.target_notes;
  py::list blocks;
  for (size_t b = 0; b < c.plan.blocks.size(); ++b) {
    const auto& blk = c.plan.blocks[b];
    py::dict bd;
    py::list ops;
    for (int n : blk.nodes) ops.append(g.node(n).op);
    bd["ops"] = ops;
    bd["type"] = ecg::mapping_type_name(blk.type);
    bd["dominant"] = blk.dominant >= 0 ? py::object(py::str(g.node(blk.dominant).op)) : py::object(py::none());
    py::list inputs_from;  // producer blocks (the fused graph's edges)
    std::set<int> seen;
    for (int n : blk.nodes)
      for (int v : g.node(n).inputs) {
        if (v < 0 || g.value(v).producer < 0) continue;
        int pb = c.plan.block_of[g.value(v).producer];
        if (pb != static_cast<int>(b) && seen.insert(pb).second) inputs_from.append(pb);
      }
    bd["inputs_from"] = inputs_from;
    bd["steps"] = b < c.blocks.size() ? py::cast(c.blocks[b].steps) : py::cast(std::vector<std::string>{});
    bd["internal_bytes"] = b < c.blocks.size() ? c.blocks[b].internal_bytes : 0;
    blocks.append(bd);
  }
  d["fusion_blocks"] = blocks;
  d["plan_log"] = c.plan.log;
  return d;
}

// Appends one normalized ATen node to a whole-model graph and asks the target whether it runs it,
// with the node's real producers and weights in view. Returns (node id, output value ids, reason):
// reason is empty when the target runs the node; a node the ECG cannot even hold is not added
// (id -1, no outputs) and its consumers read its result as a graph input instead.
py::tuple import_node(PyGraph& pg, const CompileOptions& opts, const std::string& op,
                      const std::vector<int>& inputs,
                      const std::vector<std::pair<std::vector<int64_t>, std::string>>& outputs, const py::dict& attrs,
                      const std::string& origin) {
  const target::Target& tgt =
      opts.target.empty() ? target::registry().default_target() : target::registry().get(opts.target);
  if (!ecg::find_op(op))
    return py::make_tuple(-1, std::vector<int>{}, "op '" + op + "' is not in the ECG op registry");
  int nid = -1;
  try {
    nid = pg.g.add_node(op, inputs, to_specs(outputs), to_attrs(attrs), origin);
  } catch (const std::exception& e) {
    return py::make_tuple(-1, std::vector<int>{}, std::string(e.what()));
  }
  return py::make_tuple(nid, pg.g.node(nid).outputs, tgt.supports_at_import(pg.g, pg.g.node(nid), opts));
}

// Compiles the region `node_ids` of a whole-model graph (ecg/extract_region.h says what the ids
// must satisfy); the region keeps alive only the weight tensors it reads.
int64_t compile_part(PyGraph& whole, const std::vector<int>& node_ids, const std::vector<int>& input_ids,
                     const std::vector<int>& output_ids, const CompileOptions& opts,
                     const std::vector<std::vector<int64_t>>& out_strides) {
  PyGraph part;
  part.g = ecg::extract_region(whole.g, node_ids, input_ids, output_ids);
  std::unordered_map<const void*, const at::Tensor*> by_data;  // into whole.keep_alive
  for (const at::Tensor& t : whole.keep_alive) by_data[t.data_ptr()] = &t;
  for (const auto& v : part.g.values()) {
    if (v.kind != ecg::ValueKind::Weight) continue;
    auto it = by_data.find(v.data);
    if (it == by_data.end()) continue;
    part.keep_alive.push_back(*it->second);
    part.keep_alive_device.push_back(whole.keep_alive_device[it->second - whole.keep_alive.data()]);
  }
  return compile_region(part, opts, out_strides);
}

// ---- the frozen-weight check a compiled graph runs on every call (dnnfusion/backend.py) ----
// Whether the tensors a graph froze are still the same objects at the same version counters. In
// C++ because a per-tensor Python attribute read costs ~50 ns: 15-20 us per call on a model with
// 300 parameters and buffers, where this loop takes ~1 us.
class FrozenTensors {
 public:
  FrozenTensors(std::vector<int64_t> positions, const py::sequence& tensors) : positions_(std::move(positions)) {
    if (static_cast<size_t>(py::len(tensors)) != positions_.size())
      throw py::value_error("FrozenTensors: one tensor per position expected");
    for (const auto& t : tensors) {
      if (!THPVariable_Check(t.ptr())) throw py::type_error("FrozenTensors: tensors must be torch.Tensors");
      tensors_.push_back(py::reinterpret_borrow<py::object>(t));
      const at::Tensor& v = THPVariable_Unpack(t.ptr());
      counters_.push_back(v.unsafeGetTensorImpl()->version_counter());
      versions_.push_back(v._version());
    }
  }
  // Identity is a pointer comparison; the version is read through the counter kept at freezing
  // (shared with the tensor), one memory access per tensor instead of a walk from the Python
  // object through the TensorImpl: with cold caches this check over mobilenet_v3_large's 312
  // weights took 84 us per call.
  bool unchanged(const py::tuple& args) const {
    const auto n = static_cast<int64_t>(PyTuple_GET_SIZE(args.ptr()));
    for (size_t i = 0; i < positions_.size(); ++i) {
      if (positions_[i] >= n) return false;
      if (PyTuple_GET_ITEM(args.ptr(), positions_[i]) != tensors_[i].ptr() ||
          counters_[i].current_version() != versions_[i])
        return false;
    }
    return true;
  }
  // The same tensor objects at every position, whatever their versions.
  bool same_tensors(const py::tuple& args) const {
    const auto n = static_cast<int64_t>(PyTuple_GET_SIZE(args.ptr()));
    for (size_t i = 0; i < positions_.size(); ++i)
      if (positions_[i] >= n || PyTuple_GET_ITEM(args.ptr(), positions_[i]) != tensors_[i].ptr()) return false;
    return true;
  }

 private:
  std::vector<int64_t> positions_;
  std::vector<py::object> tensors_;
  std::vector<c10::VariableVersion> counters_;  // the tensors' own counters, shared
  std::vector<int64_t> versions_;
};

void bind_frozen(py::module_& m) {
  py::class_<FrozenTensors>(m, "FrozenTensors")
      .def(py::init<std::vector<int64_t>, const py::sequence&>(), py::arg("positions"), py::arg("tensors"))
      .def("unchanged", &FrozenTensors::unchanged, py::arg("args"))
      .def("same_tensors", &FrozenTensors::same_tensors, py::arg("args"));
}

// ---- pruning scores (csrc/prune): float32 CPU tensors cross as pointer + shape, no copies ----
const float* prune_f32(const at::Tensor& t, int64_t dim, const char* what) {
  if (!t.device().is_cpu() || t.scalar_type() != at::kFloat || !t.is_contiguous() || t.dim() != dim)
    throw py::value_error(std::string("dnnfusion.prune: ") + what + " must be a contiguous float32 CPU tensor of rank " +
                          std::to_string(dim));
  return t.data_ptr<float>();
}

void bind_prune(py::module_& m) {
  m.def("prune_orthogonality", [](const at::Tensor& w) {
    const float* p = prune_f32(w, 2, "weight matrix");
    at::Tensor out = at::empty({w.size(0)}, at::kFloat);
    prune::orthogonality_scores(p, w.size(0), w.size(1), out.data_ptr<float>());
    return out;
  });
  m.def("prune_row_l2", [](const at::Tensor& w) {
    const float* p = prune_f32(w, 2, "weight matrix");
    at::Tensor out = at::empty({w.size(0)}, at::kFloat);
    prune::row_l2_norms(p, w.size(0), w.size(1), out.data_ptr<float>());
    return out;
  });
  m.def("prune_row_l1", [](const at::Tensor& w) {
    const float* p = prune_f32(w, 2, "weight matrix");
    at::Tensor out = at::empty({w.size(0)}, at::kFloat);
    prune::row_l1_norms(p, w.size(0), w.size(1), out.data_ptr<float>());
    return out;
  });
  m.def("prune_accumulate_abs", [](const at::Tensor& x, at::Tensor& acc) {
    const float* p = prune_f32(x, 3, "activation (outer, channels, inner)");
    if (acc.scalar_type() != at::kDouble || !acc.is_contiguous() || acc.dim() != 1 || acc.size(0) != x.size(1))
      throw py::value_error("dnnfusion.prune: accumulator must be a contiguous float64 vector of length channels");
    prune::accumulate_channel_abs_sum(p, x.size(0), x.size(1), x.size(2), acc.data_ptr<double>());
  });
  m.def("prune_rank", [](const at::Tensor& v) {
    const float* p = prune_f32(v, 1, "score vector");
    at::Tensor out = at::empty({v.size(0)}, at::kFloat);
    prune::rank_transform(p, v.size(0), out.data_ptr<float>());
    return out;
  });
  m.def("prune_combined", [](const at::Tensor& orth, const at::Tensor& l2, const at::Tensor& act, double omega, double lam) {
    const int64_t n = orth.numel();
    if (l2.numel() != n || act.numel() != n) throw py::value_error("dnnfusion.prune: criteria vectors differ in length");
    at::Tensor out = at::empty({n}, at::kFloat);
    prune::combined_score(prune_f32(orth, 1, "orthogonality"), prune_f32(l2, 1, "l2"), prune_f32(act, 1, "activation l1"),
                          n, omega, lam, out.data_ptr<float>());
    return out;
  });
  m.def("prune_keep_count", &prune::keep_count);
  m.def("prune_select_keep", [](const at::Tensor& scores, int64_t keep) {
    return prune::select_keep(prune_f32(scores, 1, "score vector"), scores.size(0), keep);
  });
}
// ---- end pruning scores ----

}  // namespace

TORCH_LIBRARY(dnnfusion, m) {
  m.def("run(int handle, Tensor[] inputs) -> Tensor[]");
}

// CompositeExplicitAutograd rather than CPU: a region whose operands are all weights has no
// tensor argument to dispatch on, and run() checks devices itself.
TORCH_LIBRARY_IMPL(dnnfusion, CompositeExplicitAutograd, m) { m.impl("run", &run_region); }

PYBIND11_MODULE(_C, m) {
  m.doc() = "dnnfusion core bridge";
  // One Python class per error kind (common/error.h); callers catch the class, never match text.
  auto core_error = py::register_exception<dnnfusion::Error>(m, "CoreError", PyExc_RuntimeError);
  py::register_exception<dnnfusion::CompilerNotFound>(m, "CompilerNotFound", core_error.ptr());
  py::register_exception<dnnfusion::CompilerTimeout>(m, "CompilerTimeout", core_error.ptr());
  py::register_exception<dnnfusion::UnsupportedOp>(m, "UnsupportedOp", core_error.ptr());
  py::register_exception<dnnfusion::TargetUnavailable>(m, "TargetUnavailable", core_error.ptr());
  // Bad names and values are the caller's mistake: ValueErrors as well as core errors.
  static py::exception<dnnfusion::UnknownTarget> unknown_target(
      m, "UnknownTarget", py::make_tuple(core_error, py::handle(PyExc_ValueError)).ptr());
  static py::exception<dnnfusion::InvalidInput> invalid_input(
      m, "InvalidInput", py::make_tuple(core_error, py::handle(PyExc_ValueError)).ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const dnnfusion::UnknownTarget& e) {
      unknown_target(e.what());
    } catch (const dnnfusion::InvalidInput& e) {
      invalid_input(e.what());
    }
  });
  py::class_<CompileOptions>(m, "CompileOptions")
      .def(py::init<>())
      .def_readwrite("target", &CompileOptions::target)
      .def_readwrite("threads", &CompileOptions::threads)
      .def_property(
          "fusion", [](const CompileOptions& o) { return std::string(fusion::mode_name(o.fusion)); },
          [](CompileOptions& o, const std::string& s) { o.fusion = fusion::parse_mode(s); })
      .def_readwrite("profile", &CompileOptions::profile)
      .def_property(
          "layout",
          [](const CompileOptions& o) {
            switch (o.layout) {
              case CompileOptions::Layout::Global: return "global";
              case CompileOptions::Layout::Local: return "local";
              case CompileOptions::Layout::ConvsOnly: return "convs-only";
              case CompileOptions::Layout::Off: return "off";
            }
            return "global";
          },
          [](CompileOptions& o, const std::string& s) { o.layout = parse_layout_mode(s); })
      .def_readwrite("tune", &CompileOptions::tune)
      .def_readwrite("tuning_db", &CompileOptions::tuning_db)
      .def_readwrite("pack_gemm_weights", &CompileOptions::pack_gemm_weights)
      .def_readwrite("fuse_expand_depthwise", &CompileOptions::fuse_expand_depthwise)
      .def_readwrite("winograd", &CompileOptions::winograd)
      .def_property(
          "amx", [](const CompileOptions& o) { return std::string(amx_mode_name(o.amx)); },
          [](CompileOptions& o, const std::string& s) { o.amx = parse_amx_mode(s); })
      .def_readwrite("sparse_threshold", &CompileOptions::sparse_threshold)
      .def_readwrite("sparse_max_weights", &CompileOptions::sparse_max_weights)
      .def_readwrite("device_index", &CompileOptions::device_index);
  py::class_<PyGraph>(m, "Graph")
      .def(py::init<>())
      .def("add_input", [](PyGraph& pg, const std::vector<int64_t>& shape, const std::string& dt, const std::string& name) {
        return pg.g.add_input(shape, dtype_from_name(dt), name);
      })
      .def("add_weight", [](PyGraph& pg, const at::Tensor& t, const std::string& name) {
        // A device weight is read on the host at compile time (kernels generated for it, constants
        // folded): the graph holds a host copy; the region remembers where the model keeps it.
        at::Tensor c = t.detach().contiguous().cpu();
        pg.keep_alive.push_back(c);
        pg.keep_alive_device.push_back(t.device());
        return pg.g.add_weight(c.sizes().vec(), to_dtype(c.scalar_type()), c.data_ptr(), name);
      })
      .def("add_constant", [](PyGraph& pg, const at::Tensor& t, const std::string& name) {
        at::Tensor c = t.detach().contiguous().cpu();
        return pg.g.add_constant(c.sizes().vec(), to_dtype(c.scalar_type()), c.data_ptr(), name);
      })
      .def("add_node", [](PyGraph& pg, const std::string& op, const std::vector<int>& inputs,
                          const std::vector<std::pair<std::vector<int64_t>, std::string>>& outputs, const py::dict& attrs,
                          const std::string& origin) {
        int nid = pg.g.add_node(op, inputs, to_specs(outputs), to_attrs(attrs), origin);
        return pg.g.node(nid).outputs;
      })
      .def("import_node", &import_node)
      .def("set_outputs", [](PyGraph& pg, const std::vector<int>& ids) { pg.g.set_outputs(ids); })
      .def("dump", [](const PyGraph& pg) { return pg.g.dump(); })
      .def("num_nodes", [](const PyGraph& pg) { return pg.g.nodes().size(); });
  m.def("compile", &compile_region, py::arg("graph"), py::arg("options"),
        py::arg("out_strides") = std::vector<std::vector<int64_t>>{});
  // with_reasons=False skips unavailable_reason(), which may load a driver (CUDA, OpenCL): listing
  // names must not initialize a device runtime in every process that compiles.
  m.def("targets", [](bool with_reasons) {
    py::list out;
    for (const auto& name : target::registry().names()) {
      const target::Target& t = target::registry().get(name);
      py::dict d;
      d["name"] = name;
      d["description"] = t.description();
      d["device_type"] = t.device_type();
      d["fuses"] = t.fuses();
      if (with_reasons) d["unavailable_reason"] = t.unavailable_reason();
      out.append(d);
    }
    return out;
  }, py::arg("with_reasons") = true);
  m.def("target_unavailable_reason", [](const std::string& name) {
    return target::registry().get(name).unavailable_reason();
  });
  m.def("release", [](int64_t h) {
    std::lock_guard<std::mutex> lk(g_regions_mu);
    g_regions.erase(h);
  });
  m.def("live_regions", []() {
    std::lock_guard<std::mutex> lk(g_regions_mu);
    return g_regions.size();
  });
  m.def("stats", &region_stats);
  m.def("dump", [](int64_t h) { return get_region(h)->compiled.exe->graph().dump(); });
  m.def("compile_part", &compile_part, py::arg("graph"), py::arg("nodes"), py::arg("inputs"), py::arg("outputs"),
        py::arg("options"), py::arg("out_strides") = std::vector<std::vector<int64_t>>{});
  m.def("op_info", [](const std::string& op) -> py::object {
    const ecg::OpInfo* i = ecg::find_op(op);
    if (!i) return py::none();
    py::dict d;
    d["mapping"] = ecg::mapping_type_name(i->mapping);
    d["pattern"] = ecg::pattern_kind_name(i->pattern);
    d["ir_removable"] = i->ir_removable;
    d["associative"] = i->props.associative;
    d["commutative"] = i->props.commutative;
    d["distributes_over"] = i->props.distributes_over;
    py::list targets;  // the targets with a kernel for the op
    for (const auto& name : target::registry().names())
      if (target::registry().get(name).find_kernel(op)) targets.append(name);
    d["targets"] = targets;
    return d;
  });
  m.def("registry_ops", []() {
    std::vector<std::string> v;
    for (const auto& o : ecg::all_ops()) v.push_back(o.name);
    return v;
  });
  m.def("physical_cores", &runtime::physical_core_count);
  m.def("isa", []() { return std::string(kernels::isa_name(kernels::active_isa())); });
  bind_prune(m);  // pruning scores (csrc/prune)
  bind_frozen(m);  // the frozen-weight check of compiled graphs
  python::bind_target_apis(m);  // _C.<target>: targets' own user-facing APIs
}
