#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "common/large_alloc.h"
#include "ecg/op_registry.h"
#include "ecg/verifier.h"
#include "runtime/memory_planner.h"
#include "target/target.h"

namespace dnnfusion::runtime {

using ecg::Graph;
using ecg::Node;
using ecg::Value;
using ecg::ValueKind;

namespace {

void pool_parallel_for(void* pool, int64_t n, int64_t grain, void (*body)(const void*, int64_t, int64_t),
                       const void* ctx) {
  static_cast<ThreadPool*>(pool)->parallel_for(n, grain, [&](int64_t b, int64_t e) { body(ctx, b, e); });
}

Program default_program(const Graph& g) {
  Program p;
  for (const Node& n : g.nodes()) {
    Step s;
    s.node = n.id;
    s.label = n.op;
    p.steps.push_back(std::move(s));
  }
  return p;
}

}  // namespace

Executable::Executable(Graph graph, const ExecOptions& opts, Program program) : graph_(std::move(graph)) {
  ecg::verify_graph(graph_);
  target_ = opts.target ? opts.target : &target::registry().default_target();
  pool_ = &shared_pool(opts.threads);
  const Graph& g = graph_;
  if (program.steps.empty() && !g.nodes().empty()) {  // one step per node; a target's module stays loaded
    std::shared_ptr<void> module = program.module;
    program = default_program(g);
    program.module = std::move(module);
  }
  module_ = program.module;
  stats_.blocks = program.blocks;
  const char* prof = std::getenv("DNNFUSION_STEP_PROFILE");
  profile_steps_ = prof && *prof && std::strcmp(prof, "0") != 0;
  // DNNFUSION_STEP_PROFILE=1: the 30 slowest steps; a larger number: that many.
  profile_top_ = profile_steps_ ? std::max(30, std::atoi(prof)) : 0;
  const int nv = static_cast<int>(g.values().size());
  loc_.assign(static_cast<size_t>(nv), Loc{});
  std::vector<int> root(static_cast<size_t>(nv));
  for (int i = 0; i < nv; ++i) root[i] = i;
  std::vector<char> in_arena(static_cast<size_t>(nv), 0);

  for (size_t i = 0; i < g.inputs().size(); ++i) loc_[g.inputs()[i]] = Loc{Base::Input, static_cast<int>(i), 0, nullptr};
  gather_constants(program);
  for (const Value& v : g.values())
    if (v.is_compile_time()) loc_[v.id] = Loc{Base::Fixed, 0, 0, v.data};
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    int id = g.outputs()[i];
    if (g.value(id).producer >= 0) loc_[id] = Loc{Base::Output, static_cast<int>(i), 0, nullptr};
  }
  std::vector<char> aliased_value(static_cast<size_t>(nv), 0);
  for (const Alias& a : program.aliases) aliased_value[a.value] = 1;
  auto alias_to = [&](int v, int target, int64_t byte_offset) {
    loc_[v] = loc_[target];
    loc_[v].byte_offset += byte_offset;
    root[v] = root[target];
  };

  const int scratch_threads = pool_->num_threads();
  int64_t scratch = 0;
  size_t next_alias = 0;
  // Program aliases take effect once the step that makes their target has been bound (aliases
  // of graph inputs, after_step = -1, before any step), so that a later view aliases the final
  // location of its operand.
  auto apply_aliases = [&] {
    while (next_alias < program.aliases.size() && program.aliases[next_alias].after_step < static_cast<int>(steps_.size())) {
      const Alias& a = program.aliases[next_alias++];
      alias_to(a.value, a.target, a.byte_offset);
    }
  };
  apply_aliases();
  for (Step& st : program.steps) {
    Bound b;
    b.step = std::move(st);
    Step& s = b.step;
    if (s.kind == Step::Kind::Node && s.writes.empty()) s.writes = g.node(s.node).outputs;
    // A step that writes only zero-element values has nothing to do (rewrite/fold_empty_values
    // leaves such nodes only where they make a graph output); its kernel is not even asked for
    // scratch, as its shape arithmetic may divide by the empty extent.
    b.writes_nothing = !s.writes.empty() && std::all_of(s.writes.begin(), s.writes.end(), [&](int v) {
      return g.value(v).numel() == 0;
    });
    if (s.kind == Step::Kind::Node) {
      const Node& n = g.node(s.node);
      const std::string why = target_->supports(g, n);
      if (!why.empty())
        DNNF_THROW_AS(UnsupportedOp, "node ", n.id, " ", g.describe_node(n.id), " (", n.origin, ") cannot run on target '",
                      target_->name(), "': ", why);
      const OpKernel* k = target_->find_kernel(n.op);
      if (s.epilogue && !k->epilogue_hook) DNNF_THROW("op ", n.op, " cannot run a fused epilogue");
      for (const auto& iv : s.input_views) {
        if (!(k->strided_inputs >> iv.slot & 1u)) DNNF_THROW("op ", n.op, " cannot read input ", iv.slot, " strided");
        b.in_strides.resize(n.inputs.size());
        b.in_strides[iv.slot] = iv.strides;
      }
      if (s.prologue && !k->prologue_hook) DNNF_THROW("op ", n.op, " cannot run a fused prologue");
      if (!s.out_strides.empty() && !k->strided_output) DNNF_THROW("op ", n.op, " cannot write its output strided");
      b.kernel = k;
      b.aliased.assign(n.outputs.size(), 0);
      if (s.reads.empty()) s.reads = n.inputs;
      bool all_alias = !n.outputs.empty();
      for (size_t slot = 0; slot < n.outputs.size(); ++slot) {
        int out = n.outputs[slot];
        const Value& ov = g.value(out);
        if (ov.is_output || aliased_value[out]) {
          all_alias = false;
          continue;
        }
        if (k->view && n.inputs[0] >= 0) {
          ViewSpec vs = k->view(g, n, static_cast<int>(slot));
          if (vs.is_contiguous()) {
            alias_to(out, n.inputs[0], vs.offset * static_cast<int64_t>(dtype_size(ov.dtype)));
            b.aliased[slot] = 1;
            continue;
          }
        }
        all_alias = false;
        in_arena[out] = 1;
      }
      for (int w : s.writes)  // values a hooked epilogue writes in place of the node's output
        if (g.value(w).producer != n.id && !g.value(w).is_output && !aliased_value[w]) in_arena[w] = 1, all_alias = false;
      b.skip = all_alias;
      if (!b.skip && !b.writes_nothing && k->scratch_bytes) scratch = std::max<int64_t>(scratch, static_cast<int64_t>(k->scratch_bytes(g, n, scratch_threads)));
      stats_.flops += ecg::node_flops(g, n);
      if (s.epilogue || s.prologue) ++stats_.hooked_steps;
    } else {
      DNNF_CHECK(s.fn != nullptr, "generated step without a function");
      for (int v : s.writes)
        if (!g.value(v).is_output && !aliased_value[v]) in_arena[v] = 1;
      ++stats_.generated_steps;
    }
    if (s.epilogue) b.epi = kernels::ElementHook{s.epilogue, nullptr};
    if (s.prologue) b.pro = kernels::ElementHook{s.prologue, nullptr};
    b.ptrs.assign(s.args.size(), nullptr);
    // A step that writes only zero-element values has nothing to do (rewrite/fold_empty_values
    // leaves such nodes only where they make a graph output).
    if (b.writes_nothing) b.skip = true;
    else if (!b.skip) ++stats_.kernels_per_call;
    else ++stats_.aliased_views;
    steps_.push_back(std::move(b));
    apply_aliases();
  }

  // Liveness: a buffer lives from its producer's step to the last step reading it or any view of it.
  std::vector<int> first(static_cast<size_t>(nv), -1), last(static_cast<size_t>(nv), -1);
  for (size_t step = 0; step < steps_.size(); ++step)
    for (int out : steps_[step].step.writes) {
      int r = root[out];
      if (in_arena[r] && first[r] < 0) first[r] = last[r] = static_cast<int>(step);
    }
  for (size_t step = 0; step < steps_.size(); ++step) {
    auto touch = [&](int v) {
      if (v >= 0 && in_arena[root[v]]) last[root[v]] = std::max(last[root[v]], static_cast<int>(step));
    };
    for (int in : steps_[step].step.reads) touch(in);
    for (int a : steps_[step].step.args) touch(a);
    for (int w : steps_[step].step.writes) touch(w);
  }
  std::vector<BufferRequest> reqs;
  std::vector<int> req_value;
  for (int v = 0; v < nv; ++v)
    if (in_arena[v] && root[v] == v) {
      DNNF_CHECK(first[v] >= 0, "value ", v, " is read but no step writes it");
      reqs.push_back(BufferRequest{g.value(v).nbytes(), first[v], last[v]});
      req_value.push_back(v);
      stats_.irs_bytes += g.value(v).nbytes();
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

Executable::~Executable() {
  if (profile_steps_ && calls_ > 1) {
    // Where the time went, per step (for profile evidence: which kernels dominate, what fusion saved).
    std::vector<std::pair<double, const Bound*>> t;
    double total = 0;
    for (const Bound& b : steps_)
      if (!b.skip) t.emplace_back(b.total_ns, &b), total += b.total_ns;
    std::sort(t.begin(), t.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::fprintf(stderr, "[dnnfusion] step profile: %lld calls, %.3f ms per call, %zu steps\n",
                 static_cast<long long>(calls_), total / 1e6 / static_cast<double>(calls_), t.size());
    for (size_t i = 0; i < t.size() && i < static_cast<size_t>(profile_top_); ++i) {
      const Step& s = t[i].second->step;
      std::string label = s.label.empty() && s.node >= 0 ? graph_.describe_node(s.node) : s.label;
      // What the step produced, so equal labels (every conv2d_nchwc) can be told apart.
      if (!s.writes.empty() && s.writes[0] >= 0) label += " -> " + ecg::shape_str(graph_.value(s.writes[0]).shape);
      // The kernel's arithmetic rate (the FLOP model's count over its time), to set against the
      // machine's peak; blank for generated loops and data movement.
      const double ms = t[i].first / 1e6 / static_cast<double>(calls_);
      const int64_t flops = s.kind == Step::Kind::Node && s.node >= 0 ? ecg::node_flops(graph_, graph_.node(s.node)) : 0;
      char rate[32] = "";
      if (flops > 0 && ms > 0) std::snprintf(rate, sizeof rate, "%7.1f GFLOP/s", static_cast<double>(flops) / ms / 1e6);
      std::fprintf(stderr, "  %8.3f ms %5.1f%% %15s  %s\n", ms, 100.0 * t[i].first / std::max(total, 1.0), rate,
                   label.c_str());
    }
  }
  if (arena_) target_->deallocate(arena_);
}

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

void Executable::gather_constants(const Program& program) {
  // The constants the steps can read: their operands and the graph's outputs.
  std::vector<char> used(graph_.values().size(), 0);
  auto mark = [&](int v) {
    if (v >= 0) used[static_cast<size_t>(v)] = 1;
  };
  for (const Step& s : program.steps) {
    for (int v : s.reads) mark(v);
    for (int v : s.args) mark(v);
    if (s.kind == Step::Kind::Node)
      for (int v : graph_.node(s.node).inputs) mark(v);
  }
  for (int v : graph_.outputs()) mark(v);
  auto movable = [&](const Value& v) { return used[static_cast<size_t>(v.id)] && v.owned && v.nbytes() > 0; };
  auto slot = [](const Value& v) { return (static_cast<size_t>(v.nbytes()) + 63) / 64 * 64; };  // 64-byte aligned
  size_t total = 0;
  for (const Value& v : graph_.values())
    if (movable(v)) total += slot(v);
  if (total == 0) return;
  constants_ = std::shared_ptr<void>(allocate_large(total), [](void* p) { free_large(p); });
  char* at = static_cast<char*>(constants_.get());
  for (int id = 0; id < static_cast<int>(graph_.values().size()); ++id) {
    Value& v = graph_.value(id);
    if (!movable(v)) continue;
    std::memcpy(at, v.data, static_cast<size_t>(v.nbytes()));
    v.data = at;
    v.owned.reset();  // the copy this graph held; another graph sharing it keeps it alive
    at += slot(v);
  }
  stats_.constant_bytes = static_cast<int64_t>(total);
}

void Executable::run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                     const DeviceContext* device) {
  const Graph& g = graph_;
  DNNF_CHECK(inputs.size() == g.inputs().size(), "expected ", g.inputs().size(), " inputs, got ", inputs.size());
  DNNF_CHECK(outputs.size() == g.outputs().size(), "expected ", g.outputs().size(), " outputs, got ", outputs.size());
  std::lock_guard<std::mutex> lk(run_mu_);
  if (!arena_) {
    arena_ = target_->allocate(arena_size_);
  }
  void* scratch = static_cast<char*>(arena_) + scratch_offset_;
  dnnf_parallel par{pool_, pool_parallel_for};
  const ThreadPool::Hold hold(*pool_);  // workers stay awake between this run's steps
  ++calls_;
  for (Bound& b : steps_) {
    if (b.skip) continue;
    struct StepTimer {  // only when profiling: adds the step's wall time on every exit path
      double* into;
      std::chrono::steady_clock::time_point t0;
      ~StepTimer() {
        if (into) *into += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
      }
    } timer{profile_steps_ ? &b.total_ns : nullptr, profile_steps_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{}};
    const Step& s = b.step;
    for (size_t i = 0; i < s.args.size(); ++i) b.ptrs[i] = resolve(loc_[s.args[i]], inputs, outputs);
    if (s.kind == Step::Kind::Generated) {
      try {
        s.fn(b.ptrs.data(), &par);
      } catch (const std::exception& e) {
        DNNF_THROW("dnnfusion core failed in ", s.label, ": ", e.what());
      }
      continue;
    }
    const Node& n = g.node(s.node);
    KernelCall call{g, n, std::move(b.in), std::move(b.out), scratch, *pool_};
    call.device = device;
    struct GiveBack {  // the buffers go back to the step for its next call, exceptions included
      KernelCall& c;
      Bound& b;
      ~GiveBack() {
        b.in = std::move(c.in);
        b.out = std::move(c.out);
      }
    } give_back{call, b};
    call.in.clear();
    call.out.clear();
    for (int v : n.inputs) call.in.push_back(v < 0 ? nullptr : resolve(loc_[v], inputs, outputs));
    for (int v : n.outputs) call.out.push_back(resolve(loc_[v], inputs, outputs));
    for (const auto& iv : s.input_views)
      call.in[iv.slot] = static_cast<const char*>(resolve(loc_[iv.value], inputs, outputs)) +
                         iv.offset * static_cast<int64_t>(dtype_size(g.value(iv.value).dtype));
    if (!b.in_strides.empty()) call.in_strides = &b.in_strides;
    if (!s.out_strides.empty()) call.out_strides = &s.out_strides;
    if (b.epi) {
      b.epi.ctx = b.ptrs.data();
      for (size_t k = 0; k < s.epilogue_same_index.size() && k < 2; ++k)
        b.epi.same_index[k] = static_cast<const float*>(b.ptrs[s.epilogue_same_index[k]]);
      call.epilogue = &b.epi;
    }
    if (b.pro) {
      b.pro.ctx = b.ptrs.data();
      call.prologue = &b.pro;
      call.in[0] = nullptr;
    }
    try {
      if (b.kernel->view) {
        // A data-movement op whose output needs its own buffer: one strided copy per output.
        const Value& src = g.value(n.inputs[0]);
        for (size_t slot = 0; slot < n.outputs.size(); ++slot) {
          if (b.aliased[slot]) continue;
          ViewSpec vs = b.kernel->view(g, n, static_cast<int>(slot));
          target_->strided_copy(dtype_size(src.dtype), vs.shape, call.in[0], vs.strides, vs.offset, call.out[slot], *pool_);
        }
      } else {
        b.kernel->run(call);
      }
    } catch (const IndexOutOfRange& e) {  // the caller's data, not the core: keep the kind
      DNNF_THROW_AS(IndexOutOfRange, g.describe_node(n.id), " (from ", n.origin, "): ", e.what());
    } catch (const std::exception& e) {
      DNNF_THROW("dnnfusion core failed in node ", n.id, " ", g.describe_node(n.id), " (from ", n.origin, "): ", e.what());
    }
  }
  // Outputs that are graph inputs or weights pass through by copy (outputs never alias).
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value& v = g.value(g.outputs()[i]);
    if (v.producer >= 0 || v.nbytes() == 0) continue;  // an empty tensor may have no buffer at all
    std::memcpy(outputs[i], resolve(loc_[v.id], inputs, outputs), static_cast<size_t>(v.nbytes()));
  }
}

}  // namespace dnnfusion::runtime
