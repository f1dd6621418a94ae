// The only bridge between PyTorch and the core: a pybind11 module (graph building, compiling,
// stats) and the TORCH_LIBRARY op dnnfusion::run that executes a compiled region on tensors.
// Tensors cross as (pointer, shape, dtype) views without copies; weights are borrowed from tensors
// this module keeps alive.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "common/error.h"
#include "ecg/op_registry.h"
#include "kernels/cpu/cpu_features.h"
#include "pipeline.h"
#include "prune/channel_scores.h"
#include "runtime/op_kernels.h"
#include "runtime/thread_pool.h"

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
  std::vector<at::Tensor> keep_alive;
};

struct Region {
  Compiled compiled;
  std::vector<at::Tensor> keep_alive;
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

int64_t compile_region(PyGraph& pg, int threads, const std::vector<std::vector<int64_t>>& out_strides,
                       const std::string& fusion, bool profile, const std::string& layout, bool tune,
                       const std::string& tuning_db, bool pack_gemm_weights,
                       bool fuse_expand_depthwise, bool winograd) {
  auto r = std::make_shared<Region>();
  r->keep_alive = pg.keep_alive;
  r->out_strides = out_strides;
  CompileOptions opts;
  opts.threads = threads;
  opts.fusion = fusion::parse_mode(fusion);
  opts.profile = profile;
  opts.layout = parse_layout_mode(layout);
  opts.tune = tune;
  opts.tuning_db = tuning_db;
  opts.pack_gemm_weights = pack_gemm_weights;
  opts.fuse_expand_depthwise = fuse_expand_depthwise;
  opts.winograd = winograd;
  r->compiled = compile_graph(pg.g, opts);
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
    TORCH_CHECK(t.device().is_cpu(), "dnnfusion::run: input ", i, " is on ", t.device(),
                "; the CPU target needs CPU tensors");
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
    outs.push_back(at::empty(v.shape, at::TensorOptions().dtype(to_scalar_type(v.dtype))));
    out_ptrs.push_back(outs.back().data_ptr());
  }
  // torch.ops calls arrive here with the GIL already released by the dispatcher.
  try {
    r->compiled.exe->run(in_ptrs, out_ptrs);
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

py::dict region_stats(int64_t h) {
  auto r = get_region(h);
  const auto& s = r->compiled.exe->stats();
  py::dict d;
  d["num_nodes"] = s.num_nodes;
  d["kernels_per_call"] = s.kernels_per_call;
  d["aliased_views"] = s.aliased_views;
  d["arena_bytes"] = s.arena_bytes;
  d["naive_bytes"] = s.naive_bytes;
  d["scratch_bytes"] = s.scratch_bytes;
  d["flops"] = s.flops;
  d["folded_nodes"] = r->compiled.folded_nodes;
  d["threads"] = r->compiled.exe->threads();
  py::list passes;
  for (const auto& p : r->compiled.passes) passes.append(py::make_tuple(p.name, p.ms, p.detail));
  d["passes"] = passes;
  // The fusion report (explain's fusion section, benchmarks' Table 5).
  const Compiled& c = r->compiled;
  const ecg::Graph& g = c.exe->graph();
  d["blocks"] = s.blocks;
  d["irs_bytes"] = s.irs_bytes;
  d["generated_steps"] = s.generated_steps;
  d["hooked_steps"] = s.hooked_steps;
  d["ops_imported"] = c.ops_imported;
  d["ops_after_rewrite"] = c.ops_after_rewrite;
  d["rules_applied"] = c.rules_applied;
  d["edge_rules"] = c.edge_rules;
  d["generated_functions"] = c.generated_functions;
  d["codegen_compile_ms"] = c.codegen_compile_ms;
  d["convs_blocked"] = c.convs_blocked;
  d["convs_winograd"] = py::make_tuple(c.convs_winograd_f2, c.convs_winograd_f4);
  d["gemms_packed"] = c.gemms_packed;
  d["expand_dw_fused"] = c.expand_dw_fused;
  d["layout_transforms"] = py::make_tuple(c.layout_to_blocked, c.layout_to_plain, c.layout_reblocked);
  d["layout_propagated"] = c.layout_propagated;
  d["layout_method"] = c.layout_method;
  d["convs_tuned_now"] = c.convs_tuned_now;
  d["codegen_cache_hit"] = c.codegen_cache_hit;
  d["generated_source"] = c.generated_source_path;
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
    if (b < c.blocks.size()) {
      bd["steps"] = c.blocks[b].steps;
      bd["internal_bytes"] = c.blocks[b].internal_bytes;
    }
    blocks.append(bd);
  }
  d["fusion_blocks"] = blocks;
  d["plan_log"] = c.plan.log;
  return d;
}

std::string check_support(const std::string& op, const std::vector<py::object>& inputs,
                          const std::vector<std::pair<std::vector<int64_t>, std::string>>& outputs, const py::dict& attrs) {
  if (!ecg::find_op(op)) return "op '" + op + "' is not in the ECG op registry";
  try {
    ecg::Graph g;
    std::vector<int> ids;
    static const float dummy[1] = {0};
    for (const auto& in : inputs) {
      if (in.is_none()) {
        ids.push_back(-1);
        continue;
      }
      auto t = in.cast<std::tuple<std::vector<int64_t>, std::string, bool>>();
      if (std::get<2>(t)) ids.push_back(g.add_weight(std::get<0>(t), dtype_from_name(std::get<1>(t)), dummy));
      else ids.push_back(g.add_input(std::get<0>(t), dtype_from_name(std::get<1>(t))));
    }
    int nid = g.add_node(op, ids, to_specs(outputs), to_attrs(attrs), op);
    return runtime::check_node(g, g.node(nid));
  } catch (const std::exception& e) {
    return e.what();
  }
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
  py::register_exception<dnnfusion::Error>(m, "CoreError", PyExc_RuntimeError);
  py::class_<PyGraph>(m, "Graph")
      .def(py::init<>())
      .def("add_input", [](PyGraph& pg, const std::vector<int64_t>& shape, const std::string& dt, const std::string& name) {
        return pg.g.add_input(shape, dtype_from_name(dt), name);
      })
      .def("add_weight", [](PyGraph& pg, const at::Tensor& t, const std::string& name) {
        TORCH_CHECK(t.device().is_cpu(), "dnnfusion: weight '", name, "' is on ", t.device(), "; the CPU target needs CPU weights");
        at::Tensor c = t.detach().contiguous();
        pg.keep_alive.push_back(c);
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
      .def("set_outputs", [](PyGraph& pg, const std::vector<int>& ids) { pg.g.set_outputs(ids); })
      .def("dump", [](const PyGraph& pg) { return pg.g.dump(); })
      .def("num_nodes", [](const PyGraph& pg) { return pg.g.nodes().size(); });
  m.def("compile", &compile_region, py::arg("graph"), py::arg("threads") = 0,
        py::arg("out_strides") = std::vector<std::vector<int64_t>>{}, py::arg("fusion") = "dnnfusion",
        py::arg("profile") = true, py::arg("layout") = "global", py::arg("tune") = false,
        py::arg("tuning_db") = "<default>", py::arg("pack_gemm_weights") = true,
        py::arg("fuse_expand_depthwise") = true, py::arg("winograd") = true);
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
  m.def("check_support", &check_support);
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
    d["has_kernel"] = runtime::find_kernel(op) != nullptr;
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
}
