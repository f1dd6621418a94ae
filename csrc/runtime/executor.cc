#include "runtime/executor.h"

#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "ecg/op_registry.h"
#include "ecg/verifier.h"
#include "kernels/cpu/data_movement.h"
#include "runtime/memory_planner.h"

namespace dnnfusion::runtime {

using ecg::Graph;
using ecg::Node;
using ecg::Value;
using ecg::ValueKind;

Executable::Executable(Graph graph, const ExecOptions& opts) : graph_(std::move(graph)) {
  ecg::verify_graph(graph_);
  pool_ = &shared_pool(opts.threads);
  const Graph& g = graph_;
  const int nv = static_cast<int>(g.values().size());
  loc_.assign(static_cast<size_t>(nv), Loc{});
  std::vector<int> root(static_cast<size_t>(nv));
  for (int i = 0; i < nv; ++i) root[i] = i;
  std::vector<char> in_arena(static_cast<size_t>(nv), 0);

  for (size_t i = 0; i < g.inputs().size(); ++i) loc_[g.inputs()[i]] = Loc{Base::Input, static_cast<int>(i), 0, nullptr};
  for (const Value& v : g.values())
    if (v.is_compile_time()) loc_[v.id] = Loc{Base::Fixed, 0, 0, v.data};
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    int id = g.outputs()[i];
    if (g.value(id).producer >= 0) loc_[id] = Loc{Base::Output, static_cast<int>(i), 0, nullptr};
  }

  const int scratch_threads = pool_->num_threads();
  int64_t scratch = 0;
  for (const Node& n : g.nodes()) {
    const OpKernel* k = find_kernel(n.op);
    std::string why = k ? (k->check ? k->check(g, n) : std::string()) : "no CPU kernel for op '" + n.op + "'";
    if (!why.empty()) DNNF_THROW("node ", n.id, " ", g.describe_node(n.id), " (", n.origin, ") cannot run in the core: ", why);
    Step s{n.id, k, false, std::vector<char>(n.outputs.size(), 0)};
    bool all_alias = !n.outputs.empty();
    for (size_t slot = 0; slot < n.outputs.size(); ++slot) {
      int out = n.outputs[slot];
      const Value& ov = g.value(out);
      if (ov.is_output) {
        all_alias = false;
        continue;
      }
      if (k->view && n.inputs[0] >= 0) {
        ViewSpec vs = k->view(g, n, static_cast<int>(slot));
        if (vs.is_contiguous()) {
          int src = n.inputs[0];
          loc_[out] = loc_[src];
          loc_[out].byte_offset += vs.offset * static_cast<int64_t>(dtype_size(ov.dtype));
          root[out] = root[src];
          s.aliased[slot] = 1;
          continue;
        }
      }
      all_alias = false;
      in_arena[out] = 1;
    }
    s.skip = all_alias;
    if (!s.skip && k->scratch_bytes) scratch = std::max<int64_t>(scratch, static_cast<int64_t>(k->scratch_bytes(g, n, scratch_threads)));
    if (!s.skip) ++stats_.kernels_per_call;
    else ++stats_.aliased_views;
    stats_.flops += ecg::node_flops(g, n);
    steps_.push_back(s);
  }

  // Liveness: a buffer lives from its producer's step to the last step reading it or any view of it.
  std::vector<int> first(static_cast<size_t>(nv), -1), last(static_cast<size_t>(nv), -1);
  for (size_t step = 0; step < steps_.size(); ++step) {
    const Node& n = g.node(steps_[step].node);
    for (int out : n.outputs)
      if (in_arena[out]) first[out] = last[out] = static_cast<int>(step);
  }
  for (size_t step = 0; step < steps_.size(); ++step) {
    const Node& n = g.node(steps_[step].node);
    for (int in : n.inputs)
      if (in >= 0 && in_arena[root[in]]) last[root[in]] = std::max(last[root[in]], static_cast<int>(step));
  }
  std::vector<BufferRequest> reqs;
  std::vector<int> req_value;
  for (int v = 0; v < nv; ++v)
    if (in_arena[v]) {
      reqs.push_back(BufferRequest{g.value(v).nbytes(), first[v], last[v]});
      req_value.push_back(v);
    }
  MemoryPlan plan = plan_memory(reqs, 64);
  for (size_t i = 0; i < reqs.size(); ++i) loc_[req_value[i]] = Loc{Base::Arena, 0, plan.offsets[i], nullptr};
  // Views of arena buffers inherit the buffer's planned offset.
  for (int v = 0; v < nv; ++v)
    if (root[v] != v && in_arena[root[v]]) loc_[v].byte_offset += loc_[root[v]].byte_offset;
  stats_.num_nodes = static_cast<int>(g.nodes().size());
  stats_.arena_bytes = plan.arena_bytes;
  stats_.naive_bytes = plan.naive_bytes;
  stats_.scratch_bytes = scratch;
  scratch_offset_ = (plan.arena_bytes + 63) / 64 * 64;
  arena_size_ = static_cast<size_t>(scratch_offset_ + scratch + 64);
}

Executable::~Executable() { std::free(arena_); }

void* Executable::resolve(const Loc& l, const std::vector<const void*>& in, const std::vector<void*>& out) const {
  const char* base = nullptr;
  switch (l.base) {
    case Base::Input: base = static_cast<const char*>(in[static_cast<size_t>(l.index)]); break;
    case Base::Output: base = static_cast<const char*>(out[static_cast<size_t>(l.index)]); break;
    case Base::Arena: base = static_cast<const char*>(arena_); break;
    case Base::Fixed: base = static_cast<const char*>(l.fixed); break;
  }
  return const_cast<char*>(base) + l.byte_offset;
}

void Executable::run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs) {
  const Graph& g = graph_;
  DNNF_CHECK(inputs.size() == g.inputs().size(), "expected ", g.inputs().size(), " inputs, got ", inputs.size());
  DNNF_CHECK(outputs.size() == g.outputs().size(), "expected ", g.outputs().size(), " outputs, got ", outputs.size());
  std::lock_guard<std::mutex> lk(run_mu_);
  if (!arena_) {
    arena_ = std::aligned_alloc(64, (arena_size_ + 63) / 64 * 64);
    if (!arena_) DNNF_THROW("out of memory allocating a ", arena_size_, "-byte arena");
  }
  void* scratch = static_cast<char*>(arena_) + scratch_offset_;
  for (const Step& s : steps_) {
    if (s.skip) continue;
    const Node& n = g.node(s.node);
    KernelCall call{g, n, {}, {}, scratch, *pool_};
    call.in.reserve(n.inputs.size());
    for (int v : n.inputs) call.in.push_back(v < 0 ? nullptr : resolve(loc_[v], inputs, outputs));
    for (int v : n.outputs) call.out.push_back(resolve(loc_[v], inputs, outputs));
    try {
      if (s.kernel->view) {
        // A data-movement op whose output needs its own buffer: one strided copy per output.
        const Value& src = g.value(n.inputs[0]);
        for (size_t slot = 0; slot < n.outputs.size(); ++slot) {
          if (s.aliased[slot]) continue;
          ViewSpec vs = s.kernel->view(g, n, static_cast<int>(slot));
          kernels::strided_copy(dtype_size(src.dtype), vs.shape, call.in[0], vs.strides, vs.offset, call.out[slot], *pool_);
        }
      } else {
        s.kernel->run(call);
      }
    } catch (const std::exception& e) {
      DNNF_THROW("dnnfusion core failed in node ", n.id, " ", g.describe_node(n.id), " (from ", n.origin, "): ", e.what());
    }
  }
  // Outputs that are graph inputs or weights pass through by copy (outputs never alias).
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value& v = g.value(g.outputs()[i]);
    if (v.producer >= 0) continue;
    std::memcpy(outputs[i], resolve(loc_[v.id], inputs, outputs), static_cast<size_t>(v.nbytes()));
  }
}

}  // namespace dnnfusion::runtime
